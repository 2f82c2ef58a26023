//! tessera-std: std glue over the backend families: the runtime registry (families compiled
//! in plus plugins, filtered by the environment), module placement, model files, and
//! human-readable device descriptions.

pub mod gguf_writer;
pub mod model_file;
pub mod placement;
pub mod plugin_loader;
pub mod registry_config;
pub mod runtime_registry;
pub mod sched_debug;
pub mod threads;

pub use registry_config::RegistryConfig;
pub use runtime_registry::{LoadReport, Origin, RegEntry, RuntimeRegistry, Skipped};

use tessera_core::{Device, Registry, Result};

/// The device a user asked for among the families compiled in: `None`, `""`, `"auto"` or
/// `"default"` mean the best device (GPU, then integrated GPU, then CPU); otherwise `gpu`, a
/// family or a device name, case-insensitive ([`tessera_core::registry::resolve_device`]).
/// Programs on std use [`RuntimeRegistry::select`], which also sees plugins.
pub fn select_device(registry: &Registry<'_>, request: Option<&str>) -> Result<&'static dyn Device> {
    registry.resolve(request.unwrap_or("auto"))
}

/// One line about a device: `CPU: AMD EPYC 9B45 (CPU, 20.1 of 23.4 GiB free)`.
pub fn describe_device(device: &dyn Device) -> String {
    let mem = device.memory();
    let memory = if mem.total == 0 {
        "memory unknown".to_string()
    } else {
        let gib = |b: usize| b as f64 / (1u64 << 30) as f64;
        format!("{:.1} of {:.1} GiB free", gib(mem.free), gib(mem.total))
    };
    format!("{}: {} ({}, {})", device.name(), device.description(), device.device_type().name(), memory)
}

#[cfg(test)]
mod tests {
    use super::*;

    static REGS: &[&'static dyn tessera_core::BackendReg] = &[&tessera_cpu::CPU_REG];

    #[test]
    fn selection_by_name_and_default() {
        let registry = Registry::new(REGS);
        assert_eq!(select_device(&registry, None).map(|d| d.name()), Ok("CPU"));
        assert_eq!(select_device(&registry, Some(" Auto ")).map(|d| d.name()), Ok("CPU"));
        assert_eq!(select_device(&registry, Some("cpu")).map(|d| d.name()), Ok("CPU"));
        let err = select_device(&registry, Some("vulkan0")).err();
        assert_eq!(err.map(|e| e.to_string()).as_deref(), Some("unknown device 'vulkan0'; devices: CPU"));
        let err = select_device(&Registry::new(&[]), None).err();
        assert_eq!(err.map(|e| e.to_string()).as_deref(), Some("no device found for 'auto'; devices: none"));
    }

    #[test]
    fn descriptions_carry_the_memory_figures() {
        let line = describe_device(&tessera_cpu::CPU_DEVICE);
        assert!(line.starts_with("CPU: "), "{line}");
        #[cfg(target_os = "linux")]
        assert!(line.contains("GiB free"), "{line}");
    }
}
