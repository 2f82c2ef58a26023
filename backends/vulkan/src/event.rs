//! Events: timeline semaphores. Recording one on a backend signals its next value after the
//! work submitted so far; waiting for it waits for that value.

use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ash::vk;
use tessera_core::{Event, Result};

use crate::backend::wait_semaphore;
use crate::context::Context;

pub struct VulkanEvent {
    ctx: Arc<Context>,
    pub(crate) semaphore: vk::Semaphore,
    /// The value the latest recording signals (0: never recorded, already reached).
    value: AtomicU64,
}

// SAFETY: the semaphore is an identifier any thread may use; its value is atomic.
unsafe impl Send for VulkanEvent {}
// SAFETY: as above.
unsafe impl Sync for VulkanEvent {}

impl VulkanEvent {
    pub(crate) fn new(ctx: &Arc<Context>) -> Result<VulkanEvent> {
        let mut kind =
            vk::SemaphoreTypeCreateInfo::default().semaphore_type(vk::SemaphoreType::TIMELINE).initial_value(0);
        let info = vk::SemaphoreCreateInfo::default().push_next(&mut kind);
        // SAFETY: a valid create info for this device.
        let semaphore =
            unsafe { ctx.device.create_semaphore(&info, None) }.map_err(|e| ctx.err("creating an event", e))?;
        Ok(VulkanEvent { ctx: ctx.clone(), semaphore, value: AtomicU64::new(0) })
    }

    /// The value a new recording signals.
    pub(crate) fn next_value(&self) -> u64 {
        self.value.fetch_add(1, Ordering::AcqRel) + 1
    }
}

impl Event for VulkanEvent {
    fn synchronize(&self) -> Result<()> {
        wait_semaphore(&self.ctx, self.semaphore, self.value.load(Ordering::Acquire))
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Drop for VulkanEvent {
    fn drop(&mut self) {
        // A pending signal may still target the semaphore.
        self.synchronize().ok();
        // SAFETY: nothing waits on or signals the semaphore any more.
        unsafe { self.ctx.device.destroy_semaphore(self.semaphore, None) };
    }
}
