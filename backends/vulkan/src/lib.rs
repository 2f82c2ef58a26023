//! tessera-vulkan: GPUs (and CPU implementations such as Mesa's lavapipe) through Vulkan,
//! found at run time with `ash` (no Vulkan SDK needed to build).
//!
//! The loader is opened when the family is first asked for its devices: a machine without
//! `libvulkan` or without a driver lists 0 Vulkan devices, with one log line saying why.
//! Devices are `Vulkan0`, `Vulkan1`, ...; each has a device-memory buffer type (buffers the
//! shaders address by buffer device address) and a host-visible one the CPU backend computes
//! on directly. A backend submits to the device's queue; a prepared split is a recorded
//! command buffer, resubmitted on every run. The shaders are GLSL under `shaders/`, compiled
//! ahead of time by `scripts/build-vulkan-shaders.sh` into the committed SPIR-V this crate
//! embeds.
#![forbid(unsafe_op_in_unsafe_fn)]

mod args;
mod backend;
mod barrier;
mod bfloat16;
mod buffer;
mod context;
mod coopmat2;
mod device;
mod event;
mod instance;
mod memory;
mod ops;
mod physical;
mod pipelines;
mod profile;
mod program;
mod reg;
mod shaders;

pub use backend::VulkanBackend;
pub use buffer::{VulkanBuffer, VulkanBufferType};
pub use device::VulkanDevice;
pub use event::VulkanEvent;
pub use instance::validation_messages;
pub use reg::{VulkanReg, VULKAN_REG};
