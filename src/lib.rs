//! tessera: a tensor engine that runs one computation graph across devices.
//!
//! This facade re-exports [`tessera_core`], the plugin ABI ([`plugin`]) and the backends that
//! Cargo features select, and lists them in [`BUILTIN_REGS`], the const registry in priority
//! order (GPU families first, the CPU last).
#![no_std]
#![forbid(unsafe_op_in_unsafe_fn)]

extern crate alloc;

pub mod models;

pub use tessera_core::*;
pub use tessera_cpu as cpu;
pub use tessera_plugin_abi as plugin;
#[cfg(feature = "std")]
pub use tessera_std as runtime;

/// The backend families compiled into this build, in priority order.
pub static BUILTIN_REGS: &[&'static dyn BackendReg] = &[&tessera_cpu::CPU_REG];

/// The registry of the compiled-in families.
pub fn registry() -> Registry<'static> {
    Registry::new(BUILTIN_REGS)
}

/// Every family this process can use: the compiled-in ones (filtered by
/// `TESSERA_DISABLE_<FAMILY>` and `TESSERA_<FAMILY>_VISIBLE_DEVICES`) plus the best variant of
/// each plugin found in the search paths and `TESSERA_BACKEND_PATH`. Plugins that cannot be
/// used are listed in [`runtime::RuntimeRegistry::skipped`] with the reason.
#[cfg(feature = "std")]
pub fn discover() -> runtime::RuntimeRegistry {
    let mut registry = runtime::RuntimeRegistry::new(BUILTIN_REGS);
    registry.load_all();
    registry
}
