//! Allocations: a `VkBuffer` bound to its own memory, addressed by the shaders through its
//! buffer device address.
//!
//! The graph allocator asks for few, large buffers (weights, one compute buffer per split
//! plan), so one memory allocation per buffer is enough; it never exceeds the device's
//! maximum allocation size, which the buffer types report.

use std::sync::Arc;

use ash::vk;
use tessera_core::{Error, Result};

use crate::context::Context;

/// Where an allocation lives.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum MemoryKind {
    /// The GPU's own memory (host-visible too on integrated GPUs and CPU implementations).
    Device,
    /// Host memory the GPU reads and writes over the bus: staging, and the host buffer type.
    Host,
}

/// A buffer with its memory, freed on drop.
pub(crate) struct Allocation {
    ctx: Arc<Context>,
    pub buffer: vk::Buffer,
    memory: vk::DeviceMemory,
    /// The buffer device address of the first byte.
    pub address: u64,
    /// The host address of the first byte, where the memory is host-visible.
    mapped: Option<std::ptr::NonNull<u8>>,
    pub size: u64,
}

// SAFETY: the handles are plain identifiers the driver lets any thread use (submissions are
// serialised by the context's queue lock), and the mapping is ordinary memory whose accesses
// the buffers that own allocations check and order.
unsafe impl Send for Allocation {}
// SAFETY: as above.
unsafe impl Sync for Allocation {}

impl Allocation {
    /// `size` bytes (at least 4) of `kind` memory; out of memory is [`Error::OutOfMemory`].
    pub(crate) fn new(ctx: &Arc<Context>, size: usize, kind: MemoryKind) -> Result<Allocation> {
        let oom = || Error::OutOfMemory { what: format!("{} {} memory", ctx.name, kind.name()), requested: size };
        let bytes = u64::try_from(size.max(4)).map_err(|_| oom())?.next_multiple_of(4);
        if bytes > ctx.physical.max_allocation {
            return Err(oom());
        }
        let usage = vk::BufferUsageFlags::STORAGE_BUFFER
            | vk::BufferUsageFlags::TRANSFER_SRC
            | vk::BufferUsageFlags::TRANSFER_DST
            | vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS;
        let info = vk::BufferCreateInfo::default().size(bytes).usage(usage).sharing_mode(vk::SharingMode::EXCLUSIVE);
        let device = &ctx.device;
        // SAFETY: a valid create info for this device.
        let buffer = unsafe { device.create_buffer(&info, None) }.map_err(|e| ctx.err("creating a buffer", e))?;
        // From here on, `alloc.drop` releases what exists.
        let mut alloc = Allocation {
            ctx: ctx.clone(),
            buffer,
            memory: vk::DeviceMemory::null(),
            address: 0,
            mapped: None,
            size: bytes,
        };
        // SAFETY: the buffer was just created on this device.
        let needs = unsafe { device.get_buffer_memory_requirements(buffer) };
        let (required, preferred) = match kind {
            MemoryKind::Device => (vk::MemoryPropertyFlags::DEVICE_LOCAL, vk::MemoryPropertyFlags::empty()),
            MemoryKind::Host => (
                vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT,
                vk::MemoryPropertyFlags::HOST_CACHED,
            ),
        };
        let type_index = ctx.memory_type(needs.memory_type_bits, required, preferred).ok_or_else(|| {
            Error::Backend { backend: ctx.name.clone(), message: format!("no {} memory type", kind.name()) }
        })?;
        let mut flags = vk::MemoryAllocateFlagsInfo::default().flags(vk::MemoryAllocateFlags::DEVICE_ADDRESS);
        let alloc_info = vk::MemoryAllocateInfo::default()
            .allocation_size(needs.size)
            .memory_type_index(type_index)
            .push_next(&mut flags);
        // SAFETY: a valid allocate info for this device.
        alloc.memory = unsafe { device.allocate_memory(&alloc_info, None) }.map_err(|e| match e {
            vk::Result::ERROR_OUT_OF_DEVICE_MEMORY | vk::Result::ERROR_OUT_OF_HOST_MEMORY => oom(),
            e => ctx.err("allocating memory", e),
        })?;
        // SAFETY: fresh memory of a type the buffer allows, large enough, bound once.
        unsafe { device.bind_buffer_memory(buffer, alloc.memory, 0) }.map_err(|e| ctx.err("binding memory", e))?;
        let host_visible =
            ctx.memory.memory_types[type_index as usize].property_flags.contains(vk::MemoryPropertyFlags::HOST_VISIBLE);
        if host_visible && (kind == MemoryKind::Host || !never_map_device_memory()) {
            // SAFETY: host-visible memory, mapped once for its whole life.
            let ptr = unsafe { device.map_memory(alloc.memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty()) }
                .map_err(|e| ctx.err("mapping memory", e))?;
            alloc.mapped = std::ptr::NonNull::new(ptr.cast::<u8>());
        }
        let address_info = vk::BufferDeviceAddressInfo::default().buffer(buffer);
        // SAFETY: the buffer was created with the device-address usage and bound above.
        alloc.address = unsafe { device.get_buffer_device_address(&address_info) };
        Ok(alloc)
    }

    /// The host address of the first byte, where the host can reach the memory.
    pub(crate) fn mapped(&self) -> Option<*mut u8> {
        self.mapped.map(|p| p.as_ptr())
    }
}

/// `TESSERA_VULKAN_NO_MAP=1`: device memory is reached through staging copies even where
/// the host could map it (integrated GPUs, lavapipe), as on a discrete GPU.
fn never_map_device_memory() -> bool {
    static NO_MAP: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *NO_MAP.get_or_init(|| std::env::var("TESSERA_VULKAN_NO_MAP").is_ok_and(|v| v.trim() == "1"))
}

impl MemoryKind {
    fn name(self) -> &'static str {
        match self {
            MemoryKind::Device => "device",
            MemoryKind::Host => "host-visible",
        }
    }
}

impl Drop for Allocation {
    fn drop(&mut self) {
        // Work still queued may use the memory: let it finish first.
        self.ctx.wait_idle().ok();
        // SAFETY: nothing uses the buffer or its memory any more (the queue is idle); each
        // handle is released once, here.
        unsafe {
            self.ctx.device.destroy_buffer(self.buffer, None);
            if self.memory != vk::DeviceMemory::null() {
                self.ctx.device.free_memory(self.memory, None);
            }
        }
    }
}
