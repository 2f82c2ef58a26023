//! tessera: a tensor engine that runs one computation graph across devices.
//!
//! This facade re-exports [`tessera_core`], the plugin ABI ([`plugin`]) and the backends that
//! Cargo features select, and lists them in [`BUILTIN_REGS`], the const registry in priority
//! order (GPU families first, the CPU last). On `std`, [`discover`] adds the plugins and the
//! environment's settings: every program gets its devices there.
#![no_std]
#![forbid(unsafe_op_in_unsafe_fn)]

extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

pub use tessera_core::*;
pub use tessera_cpu as cpu;
#[cfg(feature = "cuda")]
pub use tessera_cuda as cuda;
pub use tessera_plugin_abi as plugin;
#[cfg(feature = "std")]
pub use tessera_std as runtime;
#[cfg(feature = "vulkan")]
pub use tessera_vulkan as vulkan;

/// The backend families compiled into this build, in priority order.
pub static BUILTIN_REGS: &[&'static dyn BackendReg] = &[
    #[cfg(feature = "cuda")]
    &tessera_cuda::CUDA_REG,
    #[cfg(feature = "vulkan")]
    &tessera_vulkan::VULKAN_REG,
    &tessera_cpu::CPU_REG,
];

/// The registry of the compiled-in families, usable without `std` (no plugins, no
/// environment). Programs on `std` use [`discover`].
pub fn registry() -> Registry<'static> {
    Registry::new(BUILTIN_REGS)
}

/// Every family and device this process can use, found once and shared: the compiled-in
/// families (filtered by `TESSERA_DISABLE_<FAMILY>` and `TESSERA_<FAMILY>_VISIBLE_DEVICES`)
/// plus the best variant of each plugin family found in `TESSERA_BACKEND_DIR`, the
/// executable's directory (the current directory only when named), and `TESSERA_BACKEND_PATH`. A family
/// is listed once (the built-in one wins over a plugin of it), a GPU seen through two APIs
/// once. Plugins that cannot be used are listed in [`runtime::RuntimeRegistry::skipped`]
/// with the reason. Find devices with its `select` (a user's request: `auto`, `gpu`, `cuda`,
/// `CUDA1`), `device_by_name`, `device_by_family`, `device_by_type`, `best_device`.
#[cfg(feature = "std")]
pub fn discover() -> &'static runtime::RuntimeRegistry {
    static SHARED: std::sync::OnceLock<runtime::RuntimeRegistry> = std::sync::OnceLock::new();
    SHARED.get_or_init(|| discover_with(runtime::RegistryConfig::from_env()))
}

/// What [`discover`] finds, under other settings (a program's plugin directory, a test's
/// variables), as a registry of the caller's own.
#[cfg(feature = "std")]
pub fn discover_with(config: runtime::RegistryConfig) -> runtime::RuntimeRegistry {
    runtime::RuntimeRegistry::discover(BUILTIN_REGS, config)
}
