//! Buffer types and buffers: where tensor data lives.
//!
//! A buffer may be memory the host cannot read (a GPU's), so the host reaches its contents
//! only through `set_bytes`, `get_bytes` and `copy_from`. Every buffer says what its base is
//! ([`BufferBase`]): the address a kernel of the owning device adds tensor offsets to, so a
//! backend finds its own memory without knowing the buffer's Rust type.

use alloc::sync::Arc;
use core::any::Any;

use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// What a buffer holds; the scheduler places ops that consume `Weights` next to them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum BufferUsage {
    Any = 0,
    Weights = 1,
    Compute = 2,
}

impl BufferUsage {
    pub const fn from_u8(v: u8) -> BufferUsage {
        match v {
            1 => BufferUsage::Weights,
            2 => BufferUsage::Compute,
            _ => BufferUsage::Any,
        }
    }
}

/// What a buffer's memory is, as the kernels that use it address it (ggml's `get_base`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BufferBase {
    /// Host memory the host may read and write.
    Host(*mut u8),
    /// Host memory that must not be written (weights in flash, a read-only mmap).
    HostReadOnly(*const u8),
    /// An address in the device's own address space (a CUDA device pointer, a Vulkan buffer
    /// device address): `base + offset` addresses a tensor.
    Device(u64),
    /// A handle only the owning backend understands (a `VkBuffer`): tensors are addressed as
    /// (handle, offset).
    Opaque(u64),
}

impl BufferBase {
    /// The host address of the memory, if the host can read it.
    pub fn host_ptr(self) -> Option<*const u8> {
        match self {
            BufferBase::Host(p) => Some(p.cast_const()),
            BufferBase::HostReadOnly(p) => Some(p),
            BufferBase::Device(_) | BufferBase::Opaque(_) => None,
        }
    }

    /// The host address of the memory, if the host can write it.
    pub fn host_ptr_mut(self) -> Option<*mut u8> {
        match self {
            BufferBase::Host(p) => Some(p),
            _ => None,
        }
    }
}

/// A kind of memory, which allocates buffers ("CPU", "CUDA0", ...).
///
/// Buffer types are `'static` and compared by identity: two backends can read each other's
/// tensors without a copy exactly when they accept the same buffer type.
pub trait BufferType: Send + Sync {
    fn name(&self) -> &str;
    /// Required alignment of tensor data (a power of two).
    fn alignment(&self) -> usize;
    /// Largest single allocation.
    fn max_size(&self) -> usize {
        usize::MAX
    }
    /// Bytes a tensor needs in a buffer of this type (at least its `nbytes`).
    fn alloc_size(&self, tensor: &Tensor) -> usize {
        tensor.nbytes()
    }
    /// Whether the host can read and write the memory directly with the standard layout.
    fn is_host(&self) -> bool;
    /// Allocates a buffer of `size` bytes (zero-filled is not promised).
    fn alloc_buffer(&'static self, size: usize) -> Result<Arc<dyn Buffer>>;
}

/// Whether `a` and `b` are the same buffer type.
pub fn same_buffer_type(a: &dyn BufferType, b: &dyn BufferType) -> bool {
    core::ptr::addr_eq(a as *const dyn BufferType, b as *const dyn BufferType)
}

/// A block of memory of one buffer type.
///
/// Contents are like device memory: reads and writes of overlapping bytes from two threads
/// at once are a race the caller must avoid; the scheduler orders every access it makes.
pub trait Buffer: Send + Sync + Any {
    fn buffer_type(&self) -> &'static dyn BufferType;
    fn size(&self) -> usize;
    fn usage(&self) -> BufferUsage;
    fn set_usage(&self, usage: BufferUsage);
    /// What the memory is and where it starts.
    fn base(&self) -> BufferBase;
    /// Host-readable base address, for host buffers.
    fn host_ptr(&self) -> Option<*const u8> {
        self.base().host_ptr()
    }
    /// Host-writable base address, for writable host buffers.
    fn host_ptr_mut(&self) -> Option<*mut u8> {
        self.base().host_ptr_mut()
    }
    /// Prepares the memory of a tensor placed at `offset` (zeroes the padding a buffer type
    /// adds past `nbytes`, sets up per-tensor state); called whenever a tensor is bound to
    /// this buffer by an allocator.
    fn init_tensor(&self, _tensor: &Tensor, _offset: usize) -> Result<()> {
        Ok(())
    }
    /// Writes `data` at `offset`.
    fn set_bytes(&self, offset: usize, data: &[u8]) -> Result<()>;
    /// Reads `out.len()` bytes at `offset`.
    fn get_bytes(&self, offset: usize, out: &mut [u8]) -> Result<()>;
    /// Sets `len` bytes at `offset` to `value`.
    fn fill(&self, offset: usize, len: usize, value: u8) -> Result<()>;
    /// Copies `len` bytes from `src` at `src_offset` to `dst_offset` of this buffer when this
    /// buffer knows how to read `src` (a host source, or a buffer of its own device);
    /// `Ok(false)` means "cannot, stage it through the host".
    fn copy_from(&self, dst_offset: usize, src: &dyn Buffer, src_offset: usize, len: usize) -> Result<bool> {
        let Some(base) = src.host_ptr() else {
            return Ok(false);
        };
        check_range(src, src_offset, len)?;
        // SAFETY: `check_range` proved `src_offset + len <= src.size()`, and a host buffer's
        // pointer is valid for reads of its whole size for as long as the buffer lives.
        let bytes = unsafe { core::slice::from_raw_parts(base.add(src_offset), len) };
        self.set_bytes(dst_offset, bytes)?;
        Ok(true)
    }
    /// Drops any per-tensor state (called before tensors are placed anew).
    fn reset(&self) {}
    fn as_any(&self) -> &dyn Any;
}

/// Fails unless `offset..offset + len` lies inside `buffer`.
pub fn check_range(buffer: &dyn Buffer, offset: usize, len: usize) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= buffer.size() => Ok(()),
        _ => Err(Error::BufferRange { buffer: buffer.buffer_type().name().into(), offset, len, size: buffer.size() }),
    }
}

/// Where a tensor's data lives: a buffer and a byte offset into it.
#[derive(Clone)]
pub struct TensorData {
    pub buffer: Arc<dyn Buffer>,
    pub offset: usize,
}

impl core::fmt::Debug for TensorData {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}+{} ({} bytes)", self.buffer.buffer_type().name(), self.offset, self.buffer.size())
    }
}
