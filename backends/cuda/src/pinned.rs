//! Pinned host memory: host buffers the GPU copies from and to at full speed, which the CPU
//! backend computes on directly.

use std::any::Any;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use cudarc::driver::{result, sys, CudaContext, DriverError};
use tessera_core::host_buffer::{HostBuffer, HOST_ALIGNMENT};
use tessera_core::{Buffer, BufferType, Error, Result};

use crate::driver;

/// Page-locked host memory of one GPU's context ("CUDA0_Host").
pub struct PinnedBufferType {
    name: String,
    ctx: Arc<CudaContext>,
}

impl PinnedBufferType {
    pub(crate) fn new(name: String, ctx: Arc<CudaContext>) -> PinnedBufferType {
        PinnedBufferType { name, ctx }
    }
}

/// Frees the pinned allocation when the buffer holding it is dropped.
struct PinnedMemory {
    ptr: NonNull<u8>,
    ctx: Arc<CudaContext>,
}

// SAFETY: the allocation is plain host memory owned by this value alone.
unsafe impl Send for PinnedMemory {}
// SAFETY: as above; nothing is mutated through `&self`.
unsafe impl Sync for PinnedMemory {}

impl Drop for PinnedMemory {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: `ptr` came from `malloc_host` and is freed once, here.
            unsafe { result::free_host(self.ptr.as_ptr().cast()) }.ok();
        }
    }
}

impl BufferType for PinnedBufferType {
    fn name(&self) -> &str {
        &self.name
    }
    fn alignment(&self) -> usize {
        HOST_ALIGNMENT
    }
    fn is_host(&self) -> bool {
        true
    }
    fn alloc_buffer(&'static self, size: usize) -> Result<Arc<dyn Buffer>> {
        self.ctx.bind_to_thread().map_err(|e| driver::error(&self.name, "binding the context", e))?;
        // SAFETY: the context is current. Flags 0: cached memory, fast for the CPU to read back
        // too (write-combined memory is not).
        let raw = unsafe { result::malloc_host(size.max(1), 0) }
            .map_err(|_| Error::OutOfMemory { what: format!("{} pinned host memory", self.name), requested: size })?;
        let ptr = NonNull::new(raw.cast::<u8>())
            .ok_or_else(|| Error::OutOfMemory { what: format!("{} pinned host memory", self.name), requested: size })?;
        let owner: Box<dyn Any + Send + Sync> = Box::new(PinnedMemory { ptr, ctx: self.ctx.clone() });
        // SAFETY: the allocation is `size` bytes (at least), valid until `owner` frees it, and
        // written only through the buffer.
        let buffer = unsafe { HostBuffer::from_raw_in(self, ptr, size, true, owner) };
        Ok(Arc::new(buffer))
    }
}

/// Pinned host memory that large device-to-host reads go through, in pieces of at most
/// [`STAGING_BYTES`]: from pageable memory the driver stages a copy in small pieces, several
/// times slower (a 1B Llama's 128 KB of logits per decoded token). Allocated on the first read,
/// as large as the largest piece so far, and kept for the next reads.
pub(crate) struct Staging {
    ctx: Arc<CudaContext>,
    memory: Mutex<Option<(PinnedMemory, usize)>>,
}

/// The most pinned memory a [`Staging`] holds: a large read goes through it piece by piece
/// rather than pinning host memory of its size for good.
const STAGING_BYTES: usize = 1 << 20;

impl Staging {
    pub(crate) fn new(ctx: Arc<CudaContext>) -> Staging {
        Staging { ctx, memory: Mutex::new(None) }
    }

    /// Copies `out.len()` bytes from device address `src` into `out` through the staging
    /// memory, synchronously; `None` (nothing copied) where pinned memory cannot be had. The
    /// caller has made the context current and checked the range.
    pub(crate) fn read(&self, src: sys::CUdeviceptr, out: &mut [u8]) -> Option<Result<(), DriverError>> {
        let mut memory = self.memory.lock().ok()?;
        let piece = out.len().min(STAGING_BYTES);
        if memory.as_ref().is_none_or(|(_, len)| *len < piece) {
            *memory = None;
            // SAFETY: the context is current (the caller's promise); flags 0: cached memory,
            // fast for the CPU to read.
            let raw = unsafe { result::malloc_host(piece, 0) }.ok()?;
            *memory = Some((PinnedMemory { ptr: NonNull::new(raw.cast::<u8>())?, ctx: self.ctx.clone() }, piece));
        }
        let (pinned, _) = memory.as_ref()?;
        // SAFETY: the allocation holds at least `piece` bytes and is used only under the lock.
        let staged = unsafe { std::slice::from_raw_parts_mut(pinned.ptr.as_ptr(), piece) };
        for (i, chunk) in out.chunks_mut(piece).enumerate() {
            let staged = &mut staged[..chunk.len()];
            // SAFETY: `src` addresses `out.len()` readable device bytes (the caller's promise),
            // this piece among them; the copy is synchronous.
            if let Err(e) = unsafe { result::memcpy_dtoh_sync(staged, src + (i * piece) as u64) } {
                return Some(Err(e));
            }
            chunk.copy_from_slice(staged);
        }
        Some(Ok(()))
    }
}
