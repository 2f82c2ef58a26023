//! Pinned host memory: host buffers the GPU copies from and to at full speed, which the CPU
//! backend computes on directly.

use std::any::Any;
use std::ptr::NonNull;
use std::sync::Arc;

use cudarc::driver::{result, CudaContext};
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
