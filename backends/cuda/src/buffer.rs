//! Device memory: buffers whose base is a device address.

use std::any::Any;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use cudarc::driver::{result, sys, CudaContext};
use tessera_core::buffer::check_range;
use tessera_core::{Buffer, BufferBase, BufferType, BufferUsage, Error, Result};

use crate::driver;
use crate::pinned::Staging;

/// Alignment of tensors in device memory: enough for 16-byte vector loads and cuBLAS.
const ALIGNMENT: usize = 256;

/// The memory of one GPU ("CUDA0").
pub struct CudaBufferType {
    name: String,
    ctx: Arc<CudaContext>,
    staging: Staging,
}

/// Reads of at least this many bytes go through pinned staging memory.
const STAGED_READ_BYTES: usize = 64 << 10;

impl CudaBufferType {
    pub(crate) fn new(name: String, ctx: Arc<CudaContext>) -> CudaBufferType {
        CudaBufferType { name, staging: Staging::new(ctx.clone()), ctx }
    }

    fn bind(&self) -> Result<()> {
        self.ctx.bind_to_thread().map_err(|e| driver::error(&self.name, "binding the context", e))
    }
}

impl BufferType for CudaBufferType {
    fn name(&self) -> &str {
        &self.name
    }
    fn alignment(&self) -> usize {
        ALIGNMENT
    }
    fn is_host(&self) -> bool {
        false
    }
    /// Out of device memory is [`Error::OutOfMemory`] naming the device and the bytes.
    fn alloc_buffer(&'static self, size: usize) -> Result<Arc<dyn Buffer>> {
        self.bind()?;
        // SAFETY: the context is current; a zero-byte request is made one byte.
        let ptr = unsafe { result::malloc_sync(size.max(1)) }.map_err(|e| match e.0 {
            sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => {
                Error::OutOfMemory { what: format!("{} device memory", self.name), requested: size }
            }
            _ => driver::error(&self.name, &format!("allocating {size} bytes"), e),
        })?;
        Ok(Arc::new(CudaBuffer { buffer_type: self, ptr, size, usage: AtomicU8::new(BufferUsage::Any as u8) }))
    }
}

/// A block of one GPU's memory.
pub struct CudaBuffer {
    buffer_type: &'static CudaBufferType,
    ptr: sys::CUdeviceptr,
    size: usize,
    usage: AtomicU8,
}

impl CudaBuffer {
    /// The device address of the first byte.
    pub fn device_ptr(&self) -> sys::CUdeviceptr {
        self.ptr
    }

    fn error(&self, what: &str, e: cudarc::driver::DriverError) -> Error {
        driver::error(&self.buffer_type.name, what, e)
    }

    /// Waits for the legacy default stream, on which the synchronous driver copies run: a
    /// pageable upload, a memset or a device copy may return before the data has landed, and
    /// the backends' streams do not wait for that stream.
    fn finish(&self, what: &str) -> Result<()> {
        // SAFETY: synchronizing the null (legacy default) stream of the current context.
        unsafe { result::stream::synchronize(result::stream::null()) }.map_err(|e| self.error(what, e))
    }
}

impl Drop for CudaBuffer {
    fn drop(&mut self) {
        if self.buffer_type.bind().is_ok() {
            // SAFETY: `ptr` came from `malloc_sync` in this context and is freed once, here;
            // the synchronous free waits for work still using it.
            unsafe { result::free_sync(self.ptr) }.ok();
        }
    }
}

impl Buffer for CudaBuffer {
    fn buffer_type(&self) -> &'static dyn BufferType {
        self.buffer_type
    }
    fn size(&self) -> usize {
        self.size
    }
    fn usage(&self) -> BufferUsage {
        BufferUsage::from_u8(self.usage.load(Ordering::Relaxed))
    }
    fn set_usage(&self, usage: BufferUsage) {
        self.usage.store(usage as u8, Ordering::Relaxed);
    }
    fn base(&self) -> BufferBase {
        BufferBase::Device(self.ptr)
    }
    fn set_bytes(&self, offset: usize, data: &[u8]) -> Result<()> {
        check_range(self, offset, data.len())?;
        self.buffer_type.bind()?;
        // SAFETY: the range lies inside the allocation (checked above); the copy is
        // synchronous, so `data` outlives it.
        unsafe { result::memcpy_htod_sync(self.ptr + offset as u64, data) }.map_err(|e| self.error("writing", e))?;
        self.finish("writing")
    }
    fn get_bytes(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        check_range(self, offset, out.len())?;
        self.buffer_type.bind()?;
        let src = self.ptr + offset as u64;
        if out.len() >= STAGED_READ_BYTES {
            if let Some(done) = self.buffer_type.staging.read(src, out) {
                return done.map_err(|e| self.error("reading", e));
            }
        }
        // SAFETY: the range lies inside the allocation (checked above); the copy is
        // synchronous and `out` is exclusively ours.
        unsafe { result::memcpy_dtoh_sync(out, src) }.map_err(|e| self.error("reading", e))
    }
    fn fill(&self, offset: usize, len: usize, value: u8) -> Result<()> {
        check_range(self, offset, len)?;
        self.buffer_type.bind()?;
        // SAFETY: the range lies inside the allocation (checked above).
        unsafe { result::memset_d8_sync(self.ptr + offset as u64, value, len) }
            .map_err(|e| self.error("filling", e))?;
        self.finish("filling")
    }
    /// Copies from host memory, or device to device within the same GPU.
    fn copy_from(&self, dst_offset: usize, src: &dyn Buffer, src_offset: usize, len: usize) -> Result<bool> {
        check_range(self, dst_offset, len)?;
        check_range(src, src_offset, len)?;
        match src.base() {
            BufferBase::Device(src_ptr)
                if tessera_core::buffer::same_buffer_type(src.buffer_type(), self.buffer_type) =>
            {
                self.buffer_type.bind()?;
                // SAFETY: both ranges lie inside allocations of this GPU (checked above); the
                // copy is synchronous.
                unsafe { result::memcpy_dtod_sync(self.ptr + dst_offset as u64, src_ptr + src_offset as u64, len) }
                    .map_err(|e| self.error("copying on the device", e))?;
                self.finish("copying on the device")?;
                Ok(true)
            }
            BufferBase::Host(_) | BufferBase::HostReadOnly(_) => {
                let Some(base) = src.host_ptr() else { return Ok(false) };
                // SAFETY: the source range lies inside the host buffer (checked above), which
                // stays alive and unwritten through this borrow for the synchronous copy.
                let bytes = unsafe { std::slice::from_raw_parts(base.add(src_offset), len) };
                self.set_bytes(dst_offset, bytes)?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}
