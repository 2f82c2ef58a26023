//! tessera-cpu: the CPU backend.
//!
//! [`CpuBackend::reference`] runs the reference kernels of `tessera-reference`, the yardstick
//! every other backend is tested against. The fast kernels ([`CpuBackend::new`]) are SIMD code chosen
//! for the processor, with MUL_MAT as packed GEMM, int8 dot products and matrix-vector
//! paths; ops without a fast kernel run the reference one. It is `no_std`; the `std` feature
//! adds run-time CPU feature detection, a thread pool, and memory and processor figures from
//! the operating system.
#![no_std]
#![forbid(unsafe_op_in_unsafe_fn)]

extern crate alloc;

mod backend;
mod device;
mod fast;
mod reg;
mod system;

pub use backend::CpuBackend;
pub use device::{CpuDevice, CPU_DEVICE};
pub use fast::limit_to_build_target as limit_kernels_to_build_target;
pub use reg::{CpuReg, CPU_REG};
