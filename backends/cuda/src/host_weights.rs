//! Host memory holding weights, registered with the driver so that this GPU copies from it
//! directly.
//!
//! A prompt's products offloaded from CPU blocks read those blocks' weights from host memory
//! every batch. The weights sit in a memory-mapped model file: pageable memory, which the driver
//! copies through its own staging buffers at about 5 GB/s. Registered (page-locked), the same
//! memory is read by the GPU's copy engine directly and asynchronously, at the bus's speed.
//! Only weights are registered: nothing writes them, so a copy still in flight cannot see them
//! change. A buffer is registered on the first copy that reads it and stays registered, kept
//! alive, until the backend is dropped. One that cannot be registered (no read-only
//! registration on this platform, too little lockable memory) is remembered and left to the
//! scheduler's copies. `TESSERA_CUDA_PIN_WEIGHTS=0` registers nothing.

use std::sync::Arc;

use cudarc::driver::{sys, CudaContext};
use tessera_core::{Buffer, BufferUsage, TensorData};

/// The host weight buffers one backend has copied from.
pub(crate) struct HostWeights {
    ctx: Arc<CudaContext>,
    seen: Vec<Seen>,
}

struct Seen {
    buffer: Arc<dyn Buffer>,
    registered: bool,
}

impl HostWeights {
    pub(crate) fn new(ctx: Arc<CudaContext>) -> HostWeights {
        HostWeights { ctx, seen: Vec::new() }
    }

    /// The host address of `data` if its buffer is host memory holding weights, registered
    /// (now, on its first use). The caller has made the context current.
    pub(crate) fn address(&mut self, data: &TensorData) -> Option<*const u8> {
        let base = data.buffer.host_ptr()?;
        if data.buffer.usage() != BufferUsage::Weights || !enabled() {
            return None;
        }
        let known = self.seen.iter().position(|s| std::ptr::addr_eq(Arc::as_ptr(&s.buffer), Arc::as_ptr(&data.buffer)));
        let at = match known {
            Some(at) => at,
            None => {
                let flags = sys::CU_MEMHOSTREGISTER_PORTABLE | sys::CU_MEMHOSTREGISTER_READ_ONLY;
                // SAFETY: `base` addresses the buffer's `size` bytes, which stay mapped while
                // `seen` holds the buffer; read-only registration never writes them.
                let r = unsafe { sys::cuMemHostRegister_v2(base.cast_mut().cast(), data.buffer.size(), flags) };
                self.seen.push(Seen { buffer: data.buffer.clone(), registered: r == sys::CUresult::CUDA_SUCCESS });
                self.seen.len() - 1
            }
        };
        self.seen[at].registered.then(|| base.wrapping_add(data.offset))
    }
}

fn enabled() -> bool {
    std::env::var("TESSERA_CUDA_PIN_WEIGHTS").map_or(true, |v| v.trim() != "0")
}

impl Drop for HostWeights {
    /// Unregisters the buffers (the backend has waited for its stream first).
    fn drop(&mut self) {
        if self.seen.iter().any(|s| s.registered) && self.ctx.bind_to_thread().is_ok() {
            for s in self.seen.iter().filter(|s| s.registered) {
                if let Some(base) = s.buffer.host_ptr() {
                    // SAFETY: registered above at this address, once; the buffer is still alive.
                    unsafe { sys::cuMemHostUnregister(base.cast_mut().cast()) };
                }
            }
        }
    }
}
