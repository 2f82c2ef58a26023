//! A logical device: its queue, its memory types, one-shot transfers, its pipelines.

use std::sync::{Mutex, MutexGuard};

use ash::{ext, khr, vk, Device};
use tessera_core::{Error, Result};

use crate::bfloat16;
use crate::coopmat2;
use crate::instance::Vk;
use crate::physical::Physical;
use crate::pipelines::Pipelines;

/// One GPU opened for compute. Shared by its buffer types, buffers and backends.
pub(crate) struct Context {
    pub name: String,
    pub physical: Physical,
    pub device: Device,
    pub memory: vk::PhysicalDeviceMemoryProperties,
    /// Submissions to a queue must not overlap: every submit holds this lock.
    queue: Mutex<vk::Queue>,
    /// The command pool of one-shot transfers (commands are recorded under its lock).
    transfer_pool: Mutex<vk::CommandPool>,
    pub pipelines: Pipelines,
}

/// A Vulkan error as the engine reports it: which device, doing what.
pub(crate) fn error(device: &str, what: &str, e: vk::Result) -> Error {
    match e {
        vk::Result::ERROR_OUT_OF_DEVICE_MEMORY | vk::Result::ERROR_OUT_OF_HOST_MEMORY => {
            Error::OutOfMemory { what: format!("{device} memory ({what})"), requested: 0 }
        }
        vk::Result::ERROR_DEVICE_LOST => {
            Error::Backend { backend: device.into(), message: format!("{what}: device lost") }
        }
        _ => Error::Backend { backend: device.into(), message: format!("{what}: {e}") },
    }
}

impl Context {
    /// Opens `physical` with the features the shaders use.
    pub(crate) fn open(vk: &'static Vk, physical: Physical, name: String) -> std::result::Result<Context, String> {
        let priorities = [1.0f32];
        let queues = [vk::DeviceQueueCreateInfo::default()
            .queue_family_index(physical.queue_family)
            .queue_priorities(&priorities)];
        let mut f11 = vk::PhysicalDeviceVulkan11Features::default().storage_buffer16_bit_access(true);
        let mut f12 = vk::PhysicalDeviceVulkan12Features::default()
            .buffer_device_address(true)
            .timeline_semaphore(true)
            .storage_buffer8_bit_access(true)
            .shader_float16(physical.float16)
            .shader_int8(physical.int8)
            .vulkan_memory_model(physical.memory_model);
        let core = vk::PhysicalDeviceFeatures::default().shader_int64(true).shader_int16(physical.coopmat_bf16);
        let mut coopmat = vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default().cooperative_matrix(true);
        let mut dot = vk::PhysicalDeviceShaderIntegerDotProductFeatures::default().shader_integer_dot_product(true);
        let mut coopmat2_features = coopmat2::Features::for_mul_mat();
        let mut bf16_features = bfloat16::Features::for_mul_mat();
        let mut extensions = Vec::new();
        if physical.memory_budget {
            extensions.push(ext::memory_budget::NAME.as_ptr());
        }
        let mut info = vk::DeviceCreateInfo::default()
            .queue_create_infos(&queues)
            .enabled_features(&core)
            .push_next(&mut f11)
            .push_next(&mut f12);
        if physical.cooperative_matrix {
            extensions.push(khr::cooperative_matrix::NAME.as_ptr());
            info = info.push_next(&mut coopmat);
        }
        if physical.coopmat2_f16 || physical.coopmat2_bf16 {
            extensions.push(coopmat2::NAME.as_ptr());
            info = info.push_next(&mut coopmat2_features);
        }
        if physical.coopmat_bf16 || physical.coopmat2_bf16 {
            extensions.push(bfloat16::NAME.as_ptr());
            info = info.push_next(&mut bf16_features);
        }
        if physical.integer_dot {
            extensions.push(khr::shader_integer_dot_product::NAME.as_ptr());
            info = info.push_next(&mut dot);
        }
        let info = info.enabled_extension_names(&extensions);
        // SAFETY: the physical device belongs to the instance; the create info and its chain
        // live through the call.
        let device = unsafe { vk.instance.create_device(physical.handle, &info, None) }
            .map_err(|e| format!("{}: opening the device failed ({e})", physical.name))?;
        // SAFETY: queue 0 of the family exists: it was asked for above.
        let queue = unsafe { device.get_device_queue(physical.queue_family, 0) };
        // SAFETY: a query of the instance's physical device.
        let memory = unsafe { vk.instance.get_physical_device_memory_properties(physical.handle) };
        let pool_info = vk::CommandPoolCreateInfo::default()
            .queue_family_index(physical.queue_family)
            .flags(vk::CommandPoolCreateFlags::TRANSIENT | vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER);
        // SAFETY: the device was just created.
        let transfer_pool = match unsafe { device.create_command_pool(&pool_info, None) } {
            Ok(pool) => pool,
            Err(e) => {
                // SAFETY: nothing was made on the device yet.
                unsafe { device.destroy_device(None) };
                return Err(format!("{}: no command pool ({e})", physical.name));
            }
        };
        let pipelines = match Pipelines::new(&device) {
            Ok(p) => p,
            Err(e) => {
                // SAFETY: the pool was made just above and nothing else exists on the device.
                unsafe {
                    device.destroy_command_pool(transfer_pool, None);
                    device.destroy_device(None);
                }
                return Err(format!("{}: {e}", physical.name));
            }
        };
        Ok(Context {
            name,
            physical,
            device,
            memory,
            queue: Mutex::new(queue),
            transfer_pool: Mutex::new(transfer_pool),
            pipelines,
        })
    }

    pub(crate) fn err(&self, what: &str, e: vk::Result) -> Error {
        error(&self.name, what, e)
    }

    /// The queue, for one submission (or a wait for it to drain).
    pub(crate) fn queue(&self) -> MutexGuard<'_, vk::Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until everything submitted to the device has finished.
    pub(crate) fn wait_idle(&self) -> Result<()> {
        let queue = self.queue();
        // SAFETY: the queue's lock is held, so nothing is submitted meanwhile.
        unsafe { self.device.queue_wait_idle(*queue) }.map_err(|e| self.err("waiting for the queue", e))
    }

    /// Records commands with `record`, submits them and waits for them to finish: the
    /// synchronous transfers of buffers.
    pub(crate) fn one_shot(&self, record: impl FnOnce(&Device, vk::CommandBuffer)) -> Result<()> {
        let pool = self.transfer_pool.lock().unwrap_or_else(|p| p.into_inner());
        let info = vk::CommandBufferAllocateInfo::default()
            .command_pool(*pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(1);
        // SAFETY: the pool belongs to this device and its lock is held.
        let cmd =
            unsafe { self.device.allocate_command_buffers(&info) }.map_err(|e| self.err("allocating commands", e))?[0];
        let result = self.record_and_wait(cmd, record);
        // SAFETY: the command buffer has finished (or never ran) and came from this pool.
        unsafe { self.device.free_command_buffers(*pool, &[cmd]) };
        result
    }

    fn record_and_wait(&self, cmd: vk::CommandBuffer, record: impl FnOnce(&Device, vk::CommandBuffer)) -> Result<()> {
        let begin = vk::CommandBufferBeginInfo::default().flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
        // SAFETY: a fresh command buffer of this device, recorded by this thread only.
        unsafe { self.device.begin_command_buffer(cmd, &begin) }.map_err(|e| self.err("recording", e))?;
        // Earlier submissions (kernels that wrote what is copied) finish first, and the
        // copy is visible to the host and to later work.
        crate::barrier::full(&self.device, cmd);
        record(&self.device, cmd);
        crate::barrier::full(&self.device, cmd);
        // SAFETY: as above.
        unsafe { self.device.end_command_buffer(cmd) }.map_err(|e| self.err("recording", e))?;
        // SAFETY: a fence of this device, waited for and destroyed below.
        let fence = unsafe { self.device.create_fence(&vk::FenceCreateInfo::default(), None) }
            .map_err(|e| self.err("creating a fence", e))?;
        let cmds = [cmd];
        let submit = [vk::SubmitInfo::default().command_buffers(&cmds)];
        let result = {
            let queue = self.queue();
            // SAFETY: the queue's lock is held; the command buffer is fully recorded.
            unsafe { self.device.queue_submit(*queue, &submit, fence) }.map_err(|e| self.err("submitting", e))
        }
        .and_then(|()| {
            // SAFETY: the fence was submitted above.
            unsafe { self.device.wait_for_fences(&[fence], true, u64::MAX) }.map_err(|e| self.err("waiting", e))
        });
        // SAFETY: the fence is no longer in use (signalled, or never submitted).
        unsafe { self.device.destroy_fence(fence, None) };
        result
    }

    /// The index of a memory type allowed by `allowed` (a bit mask) with the `required`
    /// properties, preferring one that also has `preferred`.
    pub(crate) fn memory_type(
        &self,
        allowed: u32,
        required: vk::MemoryPropertyFlags,
        preferred: vk::MemoryPropertyFlags,
    ) -> Option<u32> {
        let types = &self.memory.memory_types[..self.memory.memory_type_count as usize];
        let fits = |i: usize, flags: vk::MemoryPropertyFlags| {
            allowed & (1 << i) != 0 && types[i].property_flags.contains(required | flags)
        };
        let index = (0..types.len())
            .find(|&i| fits(i, preferred))
            .or_else(|| (0..types.len()).find(|&i| fits(i, vk::MemoryPropertyFlags::empty())))?;
        u32::try_from(index).ok()
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: nothing uses the device any more (contexts live for the process; this runs
        // only when opening failed half-way or at exit).
        unsafe {
            self.device.device_wait_idle().ok();
            self.pipelines.destroy(&self.device);
            let pool = *self.transfer_pool.lock().unwrap_or_else(|p| p.into_inner());
            self.device.destroy_command_pool(pool, None);
            self.device.destroy_device(None);
        }
    }
}
