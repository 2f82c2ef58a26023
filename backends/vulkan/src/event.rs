//! Events: timeline semaphores. Recording one on a backend signals its next value after the
//! work submitted so far; waiting for it waits for that value. Timing events also write a
//! GPU timestamp when recorded, where the queue has timestamps.

use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ash::vk;
use tessera_core::{Event, Result};

use crate::backend::wait_semaphore;
use crate::context::Context;

/// A timestamp query and the command buffer that writes it.
struct Stamp {
    queries: vk::QueryPool,
    pool: vk::CommandPool,
    cmd: vk::CommandBuffer,
    /// Nanoseconds per tick.
    period: f64,
}

pub struct VulkanEvent {
    ctx: Arc<Context>,
    pub(crate) semaphore: vk::Semaphore,
    /// The value the latest recording signals (0: never recorded, already reached).
    value: AtomicU64,
    stamp: Option<Mutex<Stamp>>,
}

// SAFETY: the handles are identifiers any thread may use; the value is atomic and the
// timestamp's command buffer is recorded under its lock.
unsafe impl Send for VulkanEvent {}
// SAFETY: as above.
unsafe impl Sync for VulkanEvent {}

impl VulkanEvent {
    /// A plain event, or with `timing` one that also writes a timestamp (`None` where the
    /// device's queue has no timestamps).
    pub(crate) fn new(ctx: &Arc<Context>, timing: bool) -> Result<Option<VulkanEvent>> {
        let period = ctx.physical.timestamp_period;
        if timing && period.is_none() {
            return Ok(None);
        }
        let mut kind =
            vk::SemaphoreTypeCreateInfo::default().semaphore_type(vk::SemaphoreType::TIMELINE).initial_value(0);
        let info = vk::SemaphoreCreateInfo::default().push_next(&mut kind);
        // SAFETY: a valid create info for this device.
        let semaphore =
            unsafe { ctx.device.create_semaphore(&info, None) }.map_err(|e| ctx.err("creating an event", e))?;
        let mut event = VulkanEvent { ctx: ctx.clone(), semaphore, value: AtomicU64::new(0), stamp: None };
        if let (true, Some(period)) = (timing, period) {
            event.stamp = Some(Mutex::new(Stamp::new(ctx, f64::from(period))?));
        }
        Ok(Some(event))
    }

    /// The value a new recording signals.
    pub(crate) fn next_value(&self) -> u64 {
        self.value.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// The command buffer that writes this event's timestamp, recorded afresh, if it has one.
    /// Its previous submission must be done: callers synchronize the event first.
    pub(crate) fn stamp_commands(&self) -> Result<Option<vk::CommandBuffer>> {
        let Some(stamp) = &self.stamp else { return Ok(None) };
        self.synchronize()?;
        let stamp = stamp.lock().unwrap_or_else(|p| p.into_inner());
        let device = &self.ctx.device;
        let cmd = stamp.cmd;
        let begin = vk::CommandBufferBeginInfo::default().flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
        // SAFETY: the command buffer is not pending (the event was synchronized) and its pool
        // allows resetting single buffers; recording happens under the stamp's lock.
        unsafe {
            device.begin_command_buffer(cmd, &begin).map_err(|e| self.ctx.err("recording", e))?;
            device.cmd_reset_query_pool(cmd, stamp.queries, 0, 1);
            device.cmd_write_timestamp(cmd, vk::PipelineStageFlags::BOTTOM_OF_PIPE, stamp.queries, 0);
            device.end_command_buffer(cmd).map_err(|e| self.ctx.err("recording", e))?;
        }
        Ok(Some(cmd))
    }

    /// The timestamp written by the latest recording, in nanoseconds.
    fn nanoseconds(&self) -> Result<Option<f64>> {
        let Some(stamp) = &self.stamp else { return Ok(None) };
        self.synchronize()?;
        let stamp = stamp.lock().unwrap_or_else(|p| p.into_inner());
        let mut ticks = [0u64; 1];
        // SAFETY: query 0 of this pool was written by the finished submission.
        unsafe {
            self.ctx.device.get_query_pool_results(
                stamp.queries,
                0,
                &mut ticks,
                vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WAIT,
            )
        }
        .map_err(|e| self.ctx.err("reading a timestamp", e))?;
        Ok(Some(ticks[0] as f64 * stamp.period))
    }
}

impl Stamp {
    fn new(ctx: &Context, period: f64) -> Result<Stamp> {
        let device = &ctx.device;
        let info = vk::QueryPoolCreateInfo::default().query_type(vk::QueryType::TIMESTAMP).query_count(1);
        // SAFETY: a valid create info for this device.
        let queries =
            unsafe { device.create_query_pool(&info, None) }.map_err(|e| ctx.err("creating a query pool", e))?;
        let pool_info = vk::CommandPoolCreateInfo::default()
            .queue_family_index(ctx.physical.queue_family)
            .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER);
        // SAFETY: a valid create info for this device.
        let pool = match unsafe { device.create_command_pool(&pool_info, None) } {
            Ok(p) => p,
            Err(e) => {
                // SAFETY: the query pool was just made and is unused.
                unsafe { device.destroy_query_pool(queries, None) };
                return Err(ctx.err("creating a command pool", e));
            }
        };
        let alloc = vk::CommandBufferAllocateInfo::default().command_pool(pool).command_buffer_count(1);
        // SAFETY: the pool was just made on this device.
        let cmd = match unsafe { device.allocate_command_buffers(&alloc) } {
            Ok(c) => c[0],
            Err(e) => {
                // SAFETY: both were just made and are unused.
                unsafe {
                    device.destroy_command_pool(pool, None);
                    device.destroy_query_pool(queries, None);
                }
                return Err(ctx.err("allocating commands", e));
            }
        };
        Ok(Stamp { queries, pool, cmd, period })
    }
}

impl Event for VulkanEvent {
    fn synchronize(&self) -> Result<()> {
        wait_semaphore(&self.ctx, self.semaphore, self.value.load(Ordering::Acquire))
    }
    fn elapsed_since(&self, start: &dyn Event) -> Result<Option<Duration>> {
        let Some(start) = start.as_any().downcast_ref::<VulkanEvent>() else { return Ok(None) };
        match (start.nanoseconds()?, self.nanoseconds()?) {
            (Some(a), Some(b)) => Ok(Some(Duration::from_secs_f64((b - a).max(0.0) / 1e9))),
            _ => Ok(None),
        }
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Drop for VulkanEvent {
    fn drop(&mut self) {
        // A pending signal may still target the semaphore.
        self.synchronize().ok();
        // SAFETY: nothing waits on or signals the semaphore any more, and the timestamp's
        // command buffer is not pending.
        unsafe {
            if let Some(stamp) = &self.stamp {
                let stamp = stamp.lock().unwrap_or_else(|p| p.into_inner());
                self.ctx.device.destroy_command_pool(stamp.pool, None);
                self.ctx.device.destroy_query_pool(stamp.queries, None);
            }
            self.ctx.device.destroy_semaphore(self.semaphore, None);
        }
    }
}
