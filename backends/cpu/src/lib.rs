//! tessera-cpu: the CPU backend.
//!
//! Its reference kernels are the yardstick every other backend is tested against: each op
//! is written the obvious way, value by value in f32, for every type the op accepts
//! ([`CpuBackend::reference`]). The fast kernels ([`CpuBackend::new`]) are SIMD code chosen
//! for the processor, with MUL_MAT as packed GEMM, int8 dot products and matrix-vector
//! paths; ops without a fast kernel run the reference one. It is `no_std`; the `std` feature
//! adds run-time CPU feature detection, a thread pool, and memory and processor figures from
//! the operating system.
#![no_std]
#![forbid(unsafe_op_in_unsafe_fn)]

extern crate alloc;

mod access;
mod backend;
mod device;
mod fast;
// The reference kernels stay as they were written for the workspace's older MSRV.
#[allow(clippy::manual_is_multiple_of)]
mod kernels;
mod reg;
mod system;

pub use backend::CpuBackend;
pub use device::{CpuDevice, CPU_DEVICE};
pub use reg::{CpuReg, CPU_REG};
