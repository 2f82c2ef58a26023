//! tessera: a tensor engine that runs one computation graph across devices.
#![no_std]

pub use tessera_core::*;
pub use tessera_cpu as cpu;
