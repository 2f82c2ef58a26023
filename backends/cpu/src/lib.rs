//! tessera-cpu: the CPU backend.
//!
//! Its kernels are the reference every other backend is tested against: each op is written
//! the obvious way, value by value in f32, for every type the op accepts. It is `no_std`;
//! the `std` feature adds memory and processor figures from the operating system.
#![no_std]
#![forbid(unsafe_op_in_unsafe_fn)]

extern crate alloc;

mod access;
mod backend;
mod device;
mod kernels;
mod reg;
mod system;

pub use backend::CpuBackend;
pub use device::{CpuDevice, CPU_DEVICE};
pub use reg::{CpuReg, CPU_REG};
