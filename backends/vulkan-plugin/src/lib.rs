//! tessera's Vulkan backend as a plugin (`libtessera-vulkan.so`): a program built without the
//! `vulkan` feature finds Vulkan devices at run time by loading it from its plugin
//! directories. It scores 0 (cannot run here) when there is no loader or no usable device,
//! so the loader skips it with the reason instead of registering an empty family.

use tessera_core::registry::BackendReg;

tessera_plugin_abi::export_backend!(reg: &tessera_vulkan::VULKAN_REG, score: score);

/// 0 without a usable device, else 1.
fn score() -> u32 {
    u32::from(tessera_vulkan::VULKAN_REG.device_count() > 0)
}
