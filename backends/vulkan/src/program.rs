//! Recorded command buffers: a split's dispatches recorded once and resubmitted every run.
//!
//! The arguments of every dispatch are written into one host-visible buffer when the split is
//! recorded; each dispatch's push constant is the address of its own. Between dispatches a
//! barrier is recorded only where a dispatch touches memory that one since the last barrier
//! wrote, or writes memory one since the last barrier read.

use std::sync::Arc;

use ash::vk;
use tessera_core::Result;

use crate::args::ARGS_STRIDE;
use crate::barrier;
use crate::context::Context;
use crate::memory::{Allocation, MemoryKind};
use crate::ops::Dispatch;
use crate::profile::{self, Stamps};

/// The device-address ranges a dispatch reads and writes.
#[derive(Clone, Debug, Default)]
pub(crate) struct Access {
    pub reads: Vec<(u64, u64)>,
    pub writes: Vec<(u64, u64)>,
}

fn overlaps(a: &[(u64, u64)], b: &[(u64, u64)]) -> bool {
    a.iter().any(|&(s, e)| b.iter().any(|&(s2, e2)| s < e2 && s2 < e))
}

/// A command buffer with its own pool and argument buffer.
pub(crate) struct Recorded {
    ctx: Arc<Context>,
    pool: vk::CommandPool,
    pub cmd: vk::CommandBuffer,
    _args: Option<Allocation>,
    /// The backend timeline value its last submission signals (0: never submitted).
    pub last_submit: u64,
    pub dispatches: usize,
    /// Timestamps around each dispatch, when profiling.
    stamps: Option<Stamps>,
}

// SAFETY: the handles are identifiers any thread may use; a recorded split is only reached
// through `&mut` of its owner, which serialises recording and submission.
unsafe impl Send for Recorded {}

impl Recorded {
    /// Records `dispatches` in order, with the barriers their accesses need.
    pub(crate) fn record(
        ctx: &Arc<Context>,
        dispatches: &[(Dispatch, Access)],
        profile: Option<&profile::Shared>,
    ) -> Result<Recorded> {
        let device = &ctx.device;
        let pool_info = vk::CommandPoolCreateInfo::default().queue_family_index(ctx.physical.queue_family);
        // SAFETY: a valid create info for this device.
        let pool = unsafe { device.create_command_pool(&pool_info, None) }
            .map_err(|e| ctx.err("creating a command pool", e))?;
        let mut rec = Recorded {
            ctx: ctx.clone(),
            pool,
            cmd: vk::CommandBuffer::null(),
            _args: None,
            last_submit: 0,
            dispatches: dispatches.len(),
            stamps: profile
                .and_then(|p| Stamps::new(ctx, dispatches.iter().map(|(d, _)| profile::label(d)).collect(), p)),
        };
        let alloc_info = vk::CommandBufferAllocateInfo::default()
            .command_pool(pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(1);
        // SAFETY: the pool was just made on this device.
        rec.cmd =
            unsafe { device.allocate_command_buffers(&alloc_info) }.map_err(|e| ctx.err("allocating commands", e))?[0];

        let mut base = 0;
        if !dispatches.is_empty() {
            let args = Allocation::new(ctx, dispatches.len() * ARGS_STRIDE, MemoryKind::Host)?;
            let ptr = args.mapped().ok_or_else(|| ctx.err("mapping arguments", vk::Result::ERROR_MEMORY_MAP_FAILED))?;
            for (i, (d, _)) in dispatches.iter().enumerate() {
                let bytes = d.args.as_bytes();
                // SAFETY: the allocation holds `dispatches.len() * ARGS_STRIDE` mapped bytes.
                unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), ptr.add(i * ARGS_STRIDE), ARGS_STRIDE) };
            }
            base = args.address;
            rec._args = Some(args);
        }

        let cmd = rec.cmd;
        // Without timestamps to read back, a run is submitted while earlier runs of the
        // same commands may still be pending: the barriers at both ends order them on the
        // device, so the host need not wait for each run (a round trip of about 60 us per
        // run on an H100).
        let usage = if rec.waits_for_previous_run() {
            vk::CommandBufferUsageFlags::empty()
        } else {
            vk::CommandBufferUsageFlags::SIMULTANEOUS_USE
        };
        // SAFETY: a fresh command buffer, recorded by this thread only.
        unsafe { device.begin_command_buffer(cmd, &vk::CommandBufferBeginInfo::default().flags(usage)) }
            .map_err(|e| ctx.err("recording", e))?;
        barrier::full(device, cmd);
        let queries = rec.stamps.as_ref().map(|s| s.queries);
        if let Some(q) = queries {
            // SAFETY: the pool holds two queries per dispatch.
            unsafe { device.cmd_reset_query_pool(cmd, q, 0, (dispatches.len() * 2) as u32) };
        }
        let mut bound = None;
        let mut pending = Access::default();
        for (i, (d, access)) in dispatches.iter().enumerate() {
            let hazard = overlaps(&access.reads, &pending.writes)
                || overlaps(&access.writes, &pending.writes)
                || overlaps(&access.writes, &pending.reads);
            if hazard {
                barrier::compute(device, cmd);
                pending = Access::default();
            }
            pending.reads.extend_from_slice(&access.reads);
            pending.writes.extend_from_slice(&access.writes);
            if bound != Some(d.shader) {
                let pipeline = ctx.pipelines.get(device, d.shader).map_err(|e| ctx.err("making a pipeline", e))?;
                // SAFETY: a compute pipeline of this device bound in a recording command buffer.
                unsafe { device.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::COMPUTE, pipeline) };
                bound = Some(d.shader);
            }
            let address = base + (i * ARGS_STRIDE) as u64;
            // SAFETY: the layout's push-constant range is 8 bytes at offset 0.
            unsafe {
                device.cmd_push_constants(
                    cmd,
                    ctx.pipelines.layout,
                    vk::ShaderStageFlags::COMPUTE,
                    0,
                    &address.to_le_bytes(),
                )
            };
            let [x, y, z] = d.groups;
            let stamp = |n: usize, stage| {
                if let Some(q) = queries {
                    // SAFETY: query `n` exists and was reset above.
                    unsafe { device.cmd_write_timestamp(cmd, stage, q, n as u32) };
                }
            };
            stamp(2 * i, vk::PipelineStageFlags::TOP_OF_PIPE);
            // SAFETY: the bound pipeline's arguments are written and its memory is alive
            // while the program is (the scheduler re-records when addresses change).
            unsafe { device.cmd_dispatch(cmd, x, y, z) };
            stamp(2 * i + 1, vk::PipelineStageFlags::BOTTOM_OF_PIPE);
        }
        barrier::full(device, cmd);
        // SAFETY: as above.
        unsafe { device.end_command_buffer(cmd) }.map_err(|e| ctx.err("recording", e))?;
        Ok(rec)
    }
}

impl Recorded {
    /// Whether a run must wait for the previous run's submission to finish first: where its
    /// timestamps are read back (profiling), which reuses one set of queries.
    pub(crate) fn waits_for_previous_run(&self) -> bool {
        self.stamps.is_some()
    }

    /// Adds the dispatch times of the last submission to the profile (when profiling); the
    /// submission must be finished.
    pub(crate) fn collect(&self) {
        if let (Some(stamps), true) = (&self.stamps, self.last_submit > 0) {
            stamps.collect(&self.ctx);
        }
    }
}

impl Drop for Recorded {
    fn drop(&mut self) {
        // Its last submission may still run: wait for the device first.
        self.ctx.wait_idle().ok();
        self.collect();
        if let Some(stamps) = &self.stamps {
            // SAFETY: the queue is idle, so the queries are not in use.
            unsafe { stamps.destroy(&self.ctx) };
        }
        // SAFETY: the command buffer is not pending (the queue is idle); destroying the pool
        // frees it.
        unsafe { self.ctx.device.destroy_command_pool(self.pool, None) };
    }
}
