//! Host memory buffers: allocated, or borrowed without copying (`&'static [u8]`, an mmap).

use alloc::boxed::Box;
use alloc::string::String;
use alloc::sync::Arc;
use core::alloc::Layout;
use core::any::Any;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU8, Ordering};

use crate::buffer::{check_range, Buffer, BufferBase, BufferType, BufferUsage};
use crate::error::{Error, Result};

/// Alignment of host tensor data: a cache line, enough for 512-bit vector loads.
pub const HOST_ALIGNMENT: usize = 64;

/// Host memory from the global allocator.
pub struct HostBufferType {
    name: &'static str,
}

/// The buffer type of ordinary host memory ("CPU").
pub static HOST_BUFFER_TYPE: HostBufferType = HostBufferType { name: "CPU" };
/// The buffer type of host memory tessera did not allocate: static weights, mmap'd files
/// ("CPU_Mapped"). Buffers of it are made with [`HostBuffer::from_static`] or
/// [`HostBuffer::from_raw`]; allocating through it gives ordinary host memory.
pub static HOST_MAPPED_BUFFER_TYPE: HostBufferType = HostBufferType { name: "CPU_Mapped" };

impl BufferType for HostBufferType {
    fn name(&self) -> &str {
        self.name
    }
    fn alignment(&self) -> usize {
        HOST_ALIGNMENT
    }
    fn is_host(&self) -> bool {
        true
    }
    fn alloc_buffer(&'static self, size: usize) -> Result<Arc<dyn Buffer>> {
        let buffer: Arc<dyn Buffer> = crate::fallible::try_arc(HostBuffer::alloc(self, size)?)?;
        Ok(buffer)
    }
}

enum Memory {
    /// Allocated here with `layout`; freed on drop.
    Owned(Layout),
    /// Borrowed; `owner` (if any) keeps it alive and is dropped with the buffer.
    Borrowed {
        #[allow(dead_code)] // held only for its destructor
        owner: Option<Box<dyn Any + Send + Sync>>,
    },
}

/// A buffer of host memory.
pub struct HostBuffer {
    buffer_type: &'static dyn BufferType,
    ptr: NonNull<u8>,
    size: usize,
    writable: bool,
    usage: AtomicU8,
    memory: Memory,
}

// SAFETY: the buffer owns (or keeps alive through `owner`) the memory behind `ptr`; access to
// the bytes is ordered by the caller as documented on `Buffer`.
unsafe impl Send for HostBuffer {}
// SAFETY: as above; `usage` is atomic and nothing else is mutated through `&self`.
unsafe impl Sync for HostBuffer {}

impl HostBuffer {
    /// Allocates `size` zeroed bytes aligned to [`HOST_ALIGNMENT`].
    pub fn alloc(buffer_type: &'static dyn BufferType, size: usize) -> Result<HostBuffer> {
        let oom = || crate::fallible::out_of_memory_fmt(format_args!("{} buffer", buffer_type.name()), size);
        let layout = Layout::from_size_align(size.max(1), HOST_ALIGNMENT).map_err(|_| oom())?;
        // SAFETY: `layout` has a non-zero size.
        let ptr = unsafe { alloc::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).ok_or_else(oom)?;
        Ok(HostBuffer {
            buffer_type,
            ptr,
            size,
            writable: true,
            usage: AtomicU8::new(BufferUsage::Any as u8),
            memory: Memory::Owned(layout),
        })
    }

    /// Wraps static bytes (weights in flash, `include_bytes!`) without copying. The buffer is
    /// read-only and tagged as weights.
    pub fn from_static(bytes: &'static [u8]) -> HostBuffer {
        HostBuffer {
            buffer_type: &HOST_MAPPED_BUFFER_TYPE,
            ptr: NonNull::from(bytes).cast(),
            size: bytes.len(),
            writable: false,
            usage: AtomicU8::new(BufferUsage::Weights as u8),
            memory: Memory::Borrowed { owner: None },
        }
    }

    /// Wraps memory that something else owns (an mmap'd file), kept alive by `owner`.
    ///
    /// # Safety
    /// `ptr` must be valid for reads of `size` bytes (and writes, if `writable`) for as long as
    /// `owner` lives, and nothing else may write to it meanwhile.
    pub unsafe fn from_raw(
        ptr: NonNull<u8>,
        size: usize,
        writable: bool,
        owner: Box<dyn Any + Send + Sync>,
    ) -> HostBuffer {
        HostBuffer {
            buffer_type: &HOST_MAPPED_BUFFER_TYPE,
            ptr,
            size,
            writable,
            usage: AtomicU8::new(BufferUsage::Weights as u8),
            memory: Memory::Borrowed { owner: Some(owner) },
        }
    }

    /// Like [`from_raw`](Self::from_raw), for memory of another buffer type (a GPU's pinned
    /// host memory): buffers of `buffer_type` then compare as that type.
    ///
    /// # Safety
    /// As for [`from_raw`](Self::from_raw).
    pub unsafe fn from_raw_in(
        buffer_type: &'static dyn BufferType,
        ptr: NonNull<u8>,
        size: usize,
        writable: bool,
        owner: Box<dyn Any + Send + Sync>,
    ) -> HostBuffer {
        HostBuffer {
            buffer_type,
            ptr,
            size,
            writable,
            usage: AtomicU8::new(BufferUsage::Any as u8),
            memory: Memory::Borrowed { owner: Some(owner) },
        }
    }

    fn read_only(&self) -> Error {
        Error::ReadOnly { tensor: String::new(), buffer: self.buffer_type.name().into() }
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        if let Memory::Owned(layout) = self.memory {
            // SAFETY: `ptr` came from `alloc_zeroed(layout)` and is freed once, here.
            unsafe { alloc::alloc::dealloc(self.ptr.as_ptr(), layout) };
        }
    }
}

impl Buffer for HostBuffer {
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
        if self.writable {
            BufferBase::Host(self.ptr.as_ptr())
        } else {
            BufferBase::HostReadOnly(self.ptr.as_ptr())
        }
    }
    fn set_bytes(&self, offset: usize, data: &[u8]) -> Result<()> {
        if !self.writable {
            return Err(self.read_only());
        }
        check_range(self, offset, data.len())?;
        // SAFETY: the range is inside the writable allocation (checked above); `data` is a
        // distinct borrow, so the regions do not overlap unless the caller aliases this buffer,
        // which `copy` handles.
        unsafe {
            core::ptr::copy(data.as_ptr(), self.ptr.as_ptr().add(offset), data.len());
        }
        Ok(())
    }
    fn get_bytes(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        check_range(self, offset, out.len())?;
        // SAFETY: the range is inside the allocation (checked above).
        unsafe {
            core::ptr::copy(self.ptr.as_ptr().add(offset), out.as_mut_ptr(), out.len());
        }
        Ok(())
    }
    fn fill(&self, offset: usize, len: usize, value: u8) -> Result<()> {
        if !self.writable {
            return Err(self.read_only());
        }
        check_range(self, offset, len)?;
        // SAFETY: the range is inside the writable allocation (checked above).
        unsafe { core::ptr::write_bytes(self.ptr.as_ptr().add(offset), value, len) };
        Ok(())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_buffer_reads_back_and_checks_ranges() {
        let buf = HOST_BUFFER_TYPE.alloc_buffer(16).unwrap();
        buf.set_bytes(4, &[1, 2, 3]).unwrap();
        let mut out = [0u8; 5];
        buf.get_bytes(3, &mut out).unwrap();
        assert_eq!(out, [0, 1, 2, 3, 0]);
        assert!(matches!(buf.set_bytes(15, &[1, 2]), Err(Error::BufferRange { .. })));
        assert!(matches!(buf.get_bytes(usize::MAX, &mut out), Err(Error::BufferRange { .. })));
        assert_eq!(buf.host_ptr().unwrap() as usize % HOST_ALIGNMENT, 0);
    }

    #[test]
    fn static_buffer_is_zero_copy_and_read_only() {
        static WEIGHTS: [u8; 4] = [9, 8, 7, 6];
        let buf = HostBuffer::from_static(&WEIGHTS);
        assert_eq!(buf.host_ptr(), Some(WEIGHTS.as_ptr()));
        assert!(buf.host_ptr_mut().is_none());
        assert_eq!(buf.usage(), BufferUsage::Weights);
        assert!(matches!(buf.set_bytes(0, &[1]), Err(Error::ReadOnly { .. })));
        let mut out = [0u8; 2];
        buf.get_bytes(2, &mut out).unwrap();
        assert_eq!(out, [7, 6]);
    }

    #[test]
    fn impossible_allocation_is_an_error() {
        assert!(matches!(HOST_BUFFER_TYPE.alloc_buffer(usize::MAX - 8), Err(Error::OutOfMemory { .. })));
    }
}
