//! Memory barriers between the commands of a queue.
//!
//! Commands of later submissions may start before earlier ones end unless a barrier orders
//! them, so every recorded command buffer begins and ends with a full barrier; within one,
//! a dispatch that reads or writes what an earlier dispatch wrote waits for it.

use ash::{vk, Device};

/// Everything earlier (compute, transfers, host writes) is finished and visible to everything
/// later (compute, transfers, host reads).
pub(crate) fn full(device: &Device, cmd: vk::CommandBuffer) {
    let stages =
        vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::TRANSFER | vk::PipelineStageFlags::HOST;
    let access = vk::AccessFlags::SHADER_READ
        | vk::AccessFlags::SHADER_WRITE
        | vk::AccessFlags::TRANSFER_READ
        | vk::AccessFlags::TRANSFER_WRITE
        | vk::AccessFlags::HOST_READ
        | vk::AccessFlags::HOST_WRITE;
    let barrier = [vk::MemoryBarrier::default().src_access_mask(access).dst_access_mask(access)];
    // SAFETY: `cmd` is in the recording state (the callers began it).
    unsafe { device.cmd_pipeline_barrier(cmd, stages, stages, vk::DependencyFlags::empty(), &barrier, &[], &[]) };
}

/// Dispatches after this one see what dispatches before it wrote.
pub(crate) fn compute(device: &Device, cmd: vk::CommandBuffer) {
    let barrier = [vk::MemoryBarrier::default()
        .src_access_mask(vk::AccessFlags::SHADER_WRITE)
        .dst_access_mask(vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE)];
    let stage = vk::PipelineStageFlags::COMPUTE_SHADER;
    // SAFETY: `cmd` is in the recording state (the callers began it).
    unsafe { device.cmd_pipeline_barrier(cmd, stage, stage, vk::DependencyFlags::empty(), &barrier, &[], &[]) };
}
