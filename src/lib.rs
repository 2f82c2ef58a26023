//! tessera: a tensor engine that runs one computation graph across devices.
//!
//! This facade re-exports [`tessera_core`] and the backends that Cargo features select, and
//! lists them in [`BUILTIN_REGS`], the const registry in priority order (GPU families first,
//! the CPU last).
#![no_std]
#![forbid(unsafe_op_in_unsafe_fn)]

extern crate alloc;

pub mod models;

pub use tessera_core::*;
pub use tessera_cpu as cpu;
#[cfg(feature = "std")]
pub use tessera_std as runtime;

/// The backend families compiled into this build, in priority order.
pub static BUILTIN_REGS: &[&'static dyn BackendReg] = &[&tessera_cpu::CPU_REG];

/// The registry of the compiled-in families.
pub fn registry() -> Registry<'static> {
    Registry::new(BUILTIN_REGS)
}
