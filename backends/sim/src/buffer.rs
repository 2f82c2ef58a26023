//! Simulated device memory: host memory hidden behind the device interface.

use alloc::sync::Arc;
use core::any::Any;

use tessera_core::host_buffer::HostBuffer;
use tessera_core::{Buffer, BufferBase, BufferType, BufferUsage, Result};

/// The memory of one simulated device.
pub struct SimBufferType {
    name: alloc::string::String,
    max_size: core::sync::atomic::AtomicUsize,
}

impl SimBufferType {
    pub(crate) fn new(name: alloc::string::String, max_size: usize) -> SimBufferType {
        SimBufferType { name, max_size: core::sync::atomic::AtomicUsize::new(max_size) }
    }

    pub(crate) fn set_max_size(&self, max_size: usize) {
        self.max_size.store(max_size, core::sync::atomic::Ordering::Relaxed);
    }
}

impl BufferType for SimBufferType {
    fn name(&self) -> &str {
        &self.name
    }
    fn alignment(&self) -> usize {
        64
    }
    fn max_size(&self) -> usize {
        self.max_size.load(core::sync::atomic::Ordering::Relaxed)
    }
    fn is_host(&self) -> bool {
        false
    }
    fn alloc_buffer(&'static self, size: usize) -> Result<Arc<dyn Buffer>> {
        if size > self.max_size() {
            return Err(tessera_core::Error::OutOfMemory {
                what: alloc::format!("one {} buffer (at most {} bytes)", self.name, self.max_size()),
                requested: size,
            });
        }
        Ok(Arc::new(SimBuffer { buffer_type: self, memory: Arc::new(HostBuffer::alloc(self, size)?) }))
    }
}

/// A buffer in simulated device memory. The host reaches it only through the `Buffer`
/// methods; the device's kernels see the memory behind it.
pub struct SimBuffer {
    buffer_type: &'static SimBufferType,
    memory: Arc<HostBuffer>,
}

impl SimBuffer {
    pub(crate) fn belongs_to(&self, buffer_type: &SimBufferType) -> bool {
        core::ptr::eq(self.buffer_type, buffer_type)
    }
}

impl Buffer for SimBuffer {
    fn buffer_type(&self) -> &'static dyn BufferType {
        self.buffer_type
    }
    fn size(&self) -> usize {
        self.memory.size()
    }
    /// The device address is the host address of the memory behind the buffer, which the
    /// device's kernels alone use.
    fn base(&self) -> BufferBase {
        match self.memory.base() {
            BufferBase::Host(p) => BufferBase::Device(p as usize as u64),
            other => other,
        }
    }
    fn usage(&self) -> BufferUsage {
        self.memory.usage()
    }
    fn set_usage(&self, usage: BufferUsage) {
        self.memory.set_usage(usage);
    }
    fn set_bytes(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.memory.set_bytes(offset, data)
    }
    fn get_bytes(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.memory.get_bytes(offset, out)
    }
    fn fill(&self, offset: usize, len: usize, value: u8) -> Result<()> {
        self.memory.fill(offset, len, value)
    }
    /// Copies from host memory or from memory of the same device (a device-side copy).
    fn copy_from(&self, dst_offset: usize, src: &dyn Buffer, src_offset: usize, len: usize) -> Result<bool> {
        let same_device = src.as_any().downcast_ref::<SimBuffer>().filter(|s| s.belongs_to(self.buffer_type));
        match same_device {
            Some(s) => self.memory.copy_from(dst_offset, &*s.memory, src_offset, len),
            None => match src.host_ptr() {
                Some(_) => self.memory.copy_from(dst_offset, src, src_offset, len),
                None => Ok(false),
            },
        }
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Simulated pinned host memory: ordinary host memory (the CPU computes on it) that counts
/// its allocations, so tests see which copies were staged through it.
pub struct SimHostBufferType {
    name: alloc::string::String,
    allocations: core::sync::atomic::AtomicUsize,
}

impl SimHostBufferType {
    pub(crate) fn new(name: alloc::string::String) -> SimHostBufferType {
        SimHostBufferType { name, allocations: core::sync::atomic::AtomicUsize::new(0) }
    }

    /// How many buffers of this type were allocated.
    pub fn allocations(&self) -> usize {
        self.allocations.load(core::sync::atomic::Ordering::Relaxed)
    }
}

impl BufferType for SimHostBufferType {
    fn name(&self) -> &str {
        &self.name
    }
    fn alignment(&self) -> usize {
        64
    }
    fn is_host(&self) -> bool {
        true
    }
    fn alloc_buffer(&'static self, size: usize) -> Result<Arc<dyn Buffer>> {
        self.allocations.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
        Ok(Arc::new(HostBuffer::alloc(self, size)?))
    }
}
