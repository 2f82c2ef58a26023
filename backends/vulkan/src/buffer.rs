//! Buffer types of a Vulkan device: its own memory (`Vulkan0`) and host-visible memory the
//! CPU backend computes on directly (`Vulkan0_Host`).
//!
//! Memory the host can map is read and written in place; other memory goes through a staging
//! allocation, in chunks, with one-shot copies on the device's queue.

use std::any::Any;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use ash::vk;
use tessera_core::buffer::check_range;
use tessera_core::{Buffer, BufferBase, BufferType, BufferUsage, Result};

use crate::context::Context;
use crate::memory::{Allocation, MemoryKind};

/// Alignment of tensors: enough for 16-byte vector loads in the shaders.
const ALIGNMENT: usize = 256;

/// The most a staging allocation holds; larger transfers go in chunks of this size.
const STAGING_BYTES: usize = 32 << 20;

/// Memory of one kind on one device.
pub struct VulkanBufferType {
    name: String,
    ctx: Arc<Context>,
    kind: MemoryKind,
    /// Reused between transfers of buffers without a host mapping.
    staging: Mutex<Option<Allocation>>,
}

impl VulkanBufferType {
    pub(crate) fn new(name: String, ctx: Arc<Context>, kind: MemoryKind) -> VulkanBufferType {
        VulkanBufferType { name, ctx, kind, staging: Mutex::new(None) }
    }

    /// Runs `f` on a host-visible staging allocation of at least `len` bytes.
    fn with_staging<T>(&self, len: usize, f: impl FnOnce(&Allocation, *mut u8) -> Result<T>) -> Result<T> {
        let mut staging = self.staging.lock().unwrap_or_else(|p| p.into_inner());
        if staging.as_ref().is_none_or(|s| s.size < len as u64) {
            *staging = None;
            *staging = Some(Allocation::new(&self.ctx, len.max(1 << 20), MemoryKind::Host)?);
        }
        let s = staging.as_ref().ok_or_else(|| self.ctx.err("staging", vk::Result::ERROR_UNKNOWN))?;
        let ptr =
            s.mapped().ok_or_else(|| self.ctx.err("mapping staging memory", vk::Result::ERROR_MEMORY_MAP_FAILED))?;
        f(s, ptr)
    }
}

impl BufferType for VulkanBufferType {
    fn name(&self) -> &str {
        &self.name
    }
    fn alignment(&self) -> usize {
        ALIGNMENT
    }
    fn max_size(&self) -> usize {
        usize::try_from(self.ctx.physical.max_allocation).unwrap_or(usize::MAX)
    }
    fn is_host(&self) -> bool {
        self.kind == MemoryKind::Host
    }
    fn alloc_buffer(&'static self, size: usize) -> Result<Arc<dyn Buffer>> {
        let alloc = Allocation::new(&self.ctx, size, self.kind)?;
        Ok(Arc::new(VulkanBuffer { buffer_type: self, alloc, size, usage: AtomicU8::new(BufferUsage::Any as u8) }))
    }
}

/// A block of one device's memory.
pub struct VulkanBuffer {
    buffer_type: &'static VulkanBufferType,
    pub(crate) alloc: Allocation,
    size: usize,
    usage: AtomicU8,
}

impl VulkanBuffer {
    /// The buffer device address of the first byte.
    pub fn device_address(&self) -> u64 {
        self.alloc.address
    }

    pub(crate) fn context(&self) -> &Arc<Context> {
        &self.buffer_type.ctx
    }

    fn copy_regions(&self, src: vk::Buffer, dst: vk::Buffer, region: vk::BufferCopy) -> Result<()> {
        self.context().one_shot(|device, cmd| {
            // SAFETY: both ranges lie inside their buffers (the callers checked them).
            unsafe { device.cmd_copy_buffer(cmd, src, dst, &[region]) }
        })
    }
}

impl Buffer for VulkanBuffer {
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
        match (self.buffer_type.kind, self.alloc.mapped()) {
            (MemoryKind::Host, Some(ptr)) => BufferBase::Host(ptr),
            _ => BufferBase::Device(self.alloc.address),
        }
    }
    fn set_bytes(&self, offset: usize, data: &[u8]) -> Result<()> {
        check_range(self, offset, data.len())?;
        if let Some(base) = self.alloc.mapped() {
            // SAFETY: the range lies inside the mapped allocation (checked above); callers
            // order buffer writes after the device work that uses the memory.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), base.add(offset), data.len()) };
            return Ok(());
        }
        for (i, chunk) in data.chunks(STAGING_BYTES).enumerate() {
            let at = offset + i * STAGING_BYTES;
            self.buffer_type.with_staging(chunk.len(), |staging, ptr| {
                // SAFETY: the staging mapping holds at least `chunk.len()` bytes.
                unsafe { std::ptr::copy_nonoverlapping(chunk.as_ptr(), ptr, chunk.len()) };
                let region = vk::BufferCopy { src_offset: 0, dst_offset: at as u64, size: chunk.len() as u64 };
                self.copy_regions(staging.buffer, self.alloc.buffer, region)
            })?;
        }
        Ok(())
    }
    fn get_bytes(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        check_range(self, offset, out.len())?;
        if let Some(base) = self.alloc.mapped() {
            // SAFETY: the range lies inside the mapped allocation (checked above).
            unsafe { std::ptr::copy_nonoverlapping(base.add(offset), out.as_mut_ptr(), out.len()) };
            return Ok(());
        }
        for (i, chunk) in out.chunks_mut(STAGING_BYTES).enumerate() {
            let at = offset + i * STAGING_BYTES;
            self.buffer_type.with_staging(chunk.len(), |staging, ptr| {
                let region = vk::BufferCopy { src_offset: at as u64, dst_offset: 0, size: chunk.len() as u64 };
                self.copy_regions(self.alloc.buffer, staging.buffer, region)?;
                // SAFETY: the staging mapping holds at least `chunk.len()` bytes, written by
                // the finished copy.
                unsafe { std::ptr::copy_nonoverlapping(ptr, chunk.as_mut_ptr(), chunk.len()) };
                Ok(())
            })?;
        }
        Ok(())
    }
    fn fill(&self, offset: usize, len: usize, value: u8) -> Result<()> {
        check_range(self, offset, len)?;
        if let Some(base) = self.alloc.mapped() {
            // SAFETY: the range lies inside the mapped allocation (checked above).
            unsafe { std::ptr::write_bytes(base.add(offset), value, len) };
            return Ok(());
        }
        // The device fills whole words; the bytes around them are written from the host.
        let start = offset.next_multiple_of(4).min(offset + len);
        let end = ((offset + len) / 4 * 4).max(start);
        self.set_bytes(offset, &vec![value; start - offset])?;
        self.set_bytes(end, &vec![value; offset + len - end])?;
        if end > start {
            let word = u32::from_ne_bytes([value; 4]);
            let buffer = self.alloc.buffer;
            self.context().one_shot(|device, cmd| {
                // SAFETY: the word-aligned range lies inside the buffer (checked above).
                unsafe { device.cmd_fill_buffer(cmd, buffer, start as u64, (end - start) as u64, word) }
            })?;
        }
        Ok(())
    }
    /// Copies from host memory, or within the same device.
    fn copy_from(&self, dst_offset: usize, src: &dyn Buffer, src_offset: usize, len: usize) -> Result<bool> {
        check_range(self, dst_offset, len)?;
        check_range(src, src_offset, len)?;
        if let Some(from) = src.as_any().downcast_ref::<VulkanBuffer>() {
            if Arc::ptr_eq(from.context(), self.context()) {
                if len > 0 {
                    let region = vk::BufferCopy {
                        src_offset: src_offset as u64,
                        dst_offset: dst_offset as u64,
                        size: len as u64,
                    };
                    self.copy_regions(from.alloc.buffer, self.alloc.buffer, region)?;
                }
                return Ok(true);
            }
        }
        let Some(base) = src.host_ptr() else { return Ok(false) };
        // SAFETY: the source range lies inside the host buffer (checked above), which stays
        // alive and unwritten through this borrow for the synchronous copy.
        let bytes = unsafe { std::slice::from_raw_parts(base.add(src_offset), len) };
        self.set_bytes(dst_offset, bytes)?;
        Ok(true)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}
