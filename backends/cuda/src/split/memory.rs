//! Work memory of a split's products on one GPU: grown on demand, never shrunk.

use std::sync::Arc;

use cudarc::driver::{result, sys, CudaContext, CudaStream};
use tessera_core::{Error, Result};

use crate::driver;

/// One block of a GPU's memory that the split's streams use for the activation chunks they
/// send or receive and the result parts they gather.
pub(super) struct WorkMemory {
    ctx: Arc<CudaContext>,
    name: String,
    address: sys::CUdeviceptr,
    size: usize,
}

impl WorkMemory {
    pub(super) fn new(ctx: Arc<CudaContext>, name: String) -> WorkMemory {
        WorkMemory { ctx, name, address: 0, size: 0 }
    }

    /// The address of at least `bytes` bytes. Growing first waits for `users` (every stream
    /// that may still be using the old memory), then frees it.
    pub(super) fn reserve(&mut self, bytes: usize, users: &[&CudaStream]) -> Result<u64> {
        if bytes <= self.size && self.address != 0 {
            return Ok(self.address);
        }
        for stream in users {
            stream.synchronize().map_err(|e| driver::error(&self.name, "waiting before growing work memory", e))?;
        }
        self.release();
        self.ctx.bind_to_thread().map_err(|e| driver::error(&self.name, "binding the context", e))?;
        let size =
            bytes.max(1).checked_next_multiple_of(1 << 20).ok_or(Error::Overflow { what: "split work memory" })?;
        // SAFETY: the context is current; the memory is freed once, in `release`.
        let address = unsafe { result::malloc_sync(size) }.map_err(|e| match e.0 {
            sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => {
                Error::OutOfMemory { what: format!("{} work memory of a split product", self.name), requested: size }
            }
            _ => driver::error(&self.name, &format!("allocating {size} bytes of split work memory"), e),
        })?;
        self.address = address;
        self.size = size;
        Ok(address)
    }

    fn release(&mut self) {
        if self.address != 0 && self.ctx.bind_to_thread().is_ok() {
            // SAFETY: the address came from `malloc_sync` in this context; every stream that
            // used it was synchronized by the caller (or the process is dropping it).
            unsafe { result::free_sync(self.address) }.ok();
        }
        self.address = 0;
        self.size = 0;
    }
}

impl Drop for WorkMemory {
    fn drop(&mut self) {
        self.release();
    }
}
