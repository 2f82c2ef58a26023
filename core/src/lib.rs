//! tessera-core: the `no_std + alloc` heart of tessera.
//!
//! - [`dtype`], [`quant`], [`legacy_quant`], [`kquant`], [`kquant_low`], [`convert`]: element
//!   types, ggml's quantized block layouts and row conversions;
//! - [`tensor`], [`op`], [`graph`]: tensor metadata, ops with their parameters, and the graph
//!   arena whose op constructors infer and check shapes; [`tensor_view`]: nodes resolved to
//!   memory, as kernels take them;
//! - [`buffer`], [`host_buffer`], [`device`], [`backend`], [`registry`]: ggml's backend object
//!   model (buffer types, buffers, devices, streams, events, families) as traits;
//! - [`sched`]: the scheduler that splits one graph across several backends;
//! - [`allocator`]: placing tensors in buffers: one after another (weights), or planned by
//!   liveness with in-place reuse (compute graphs).
#![no_std]
#![forbid(unsafe_op_in_unsafe_fn)]

extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

pub mod allocator;
pub mod backend;
pub mod buffer;
pub mod convert;
pub mod device;
pub mod dtype;
pub mod error;
pub mod fallible;
pub mod gguf;
pub mod graph;
pub mod host_buffer;
pub mod kquant;
pub mod kquant_low;
#[cfg(test)]
mod kquant_minmax;
pub mod kquant_search;
pub mod legacy_quant;
pub mod op;
pub mod op_code;
pub mod quant;
#[cfg(test)]
mod quant_fixtures;
pub mod registry;
pub mod sched;
pub mod tensor;
pub mod tensor_view;

pub use backend::{Backend, Event, NodeByNode, Program, SplitRef};
pub use buffer::{Buffer, BufferBase, BufferType, BufferUsage, TensorData};
pub use device::{Device, DeviceCaps, DeviceType, MemoryInfo};
pub use dtype::DType;
pub use error::{Error, Result, Shape};
pub use graph::{Graph, TensorParts};
pub use op::{
    flash_attn_fits, soft_max_mask_fits, soft_max_mask_row, BinaryOp, Im2ColParams, Op, Pool2dParams, PoolKind,
    Precision, RopeMode, RopeParams, UnaryOp,
};
pub use registry::{BackendReg, Extension, Registry};
pub use sched::{consumer_counts, Completion, Scheduler, SchedulerOptions, SplitPlan};
pub use tensor::{Tensor, TensorFlags, TensorId};
pub use tensor_view::{NodeView, TensorView};
