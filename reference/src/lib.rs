//! tessera-reference: the reference kernels.
//!
//! One obviously-correct implementation per op, for every type the op accepts: each reads its
//! operands a row at a time into f32, computes, and writes the row back in the destination
//! type. They are the yardstick every backend is tested against, the CPU backend's fallback
//! for layouts its fast kernels do not cover, and the simulated accelerator's kernels. They
//! take nodes resolved to host memory ([`NodeTensors`]), never a graph. `no_std`.
#![no_std]
#![forbid(unsafe_op_in_unsafe_fn)]

extern crate alloc;

mod host_tensor;
// The reference kernels stay as they were written for the workspace's older MSRV.
#[allow(clippy::manual_is_multiple_of)]
mod kernels;

pub use host_tensor::HostTensor;
pub use kernels::{compute, rows_of, NodeTensors, Scratch};
