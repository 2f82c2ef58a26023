//! The Vulkan family: the devices of the instance, opened once, on first use.

use std::sync::OnceLock;

use tessera_core::registry::{extension, BackendReg, Extension};
use tessera_core::Device;

use crate::context::Context;
use crate::device::VulkanDevice;
use crate::{instance, physical};

/// The Vulkan devices tessera can use (none without a loader or a driver).
pub struct VulkanReg {
    devices: OnceLock<Vec<&'static VulkanDevice>>,
}

pub static VULKAN_REG: VulkanReg = VulkanReg { devices: OnceLock::new() };

/// How enumeration went, once done.
static STATUS: OnceLock<String> = OnceLock::new();

/// `STATUS`, then one entry per device: what it offers the shaders.
fn features() -> &'static [(&'static str, &'static str)] {
    static FEATURES: OnceLock<Vec<(&'static str, &'static str)>> = OnceLock::new();
    FEATURES.get_or_init(|| {
        let mut list = vec![("STATUS", STATUS.get().map_or("not enumerated yet", String::as_str))];
        for d in VULKAN_REG.devices.get().into_iter().flatten() {
            // Leaked once per device, which lives for the process anyway.
            let name: &'static str = Box::leak(d.name_string().into_boxed_str());
            let summary: &'static str = Box::leak(d.summary().into_boxed_str());
            list.push((name, summary));
        }
        list
    })
}

/// The usable devices, each opened, and what was skipped and why.
fn enumerate() -> (Vec<&'static VulkanDevice>, Vec<String>) {
    let vk = match instance::get() {
        Ok(vk) => vk,
        Err(why) => return (Vec::new(), vec![why]),
    };
    // SAFETY: the instance is alive for the process.
    let handles = match unsafe { vk.instance.enumerate_physical_devices() } {
        Ok(h) => h,
        Err(e) => return (Vec::new(), vec![format!("no physical devices ({e})")]),
    };
    let (mut devices, mut skipped) = (Vec::new(), Vec::new());
    for handle in handles {
        let opened =
            physical::inspect(vk, handle).and_then(|p| Context::open(vk, p, format!("Vulkan{}", devices.len())));
        match opened {
            Ok(ctx) => devices.push(VulkanDevice::create(ctx)),
            Err(why) => skipped.push(why),
        }
    }
    (devices, skipped)
}

impl VulkanReg {
    fn devices(&self) -> &[&'static VulkanDevice] {
        self.devices.get_or_init(|| {
            let (devices, skipped) = enumerate();
            let status = if skipped.is_empty() { "ok".to_string() } else { skipped.join("; ") };
            if !skipped.is_empty() {
                log::info!("Vulkan: {} device(s): {status}", devices.len());
            }
            STATUS.get_or_init(|| status);
            devices
        })
    }
}

impl BackendReg for VulkanReg {
    fn name(&self) -> &str {
        "Vulkan"
    }
    fn device_count(&self) -> usize {
        self.devices().len()
    }
    fn device(&self, index: usize) -> Option<&'static dyn Device> {
        self.devices().get(index).map(|&d| d as &'static dyn Device)
    }
    fn extension(&self, name: &str) -> Option<Extension> {
        if name != extension::FEATURES {
            return None;
        }
        self.devices();
        Some(Extension::Features(features))
    }
}
