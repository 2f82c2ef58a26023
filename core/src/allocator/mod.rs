//! Placing tensors in buffers.
//!
//! - [`linear`]: one after another, nothing freed (weights, caches, simple graphs);
//! - [`planner`]: best-fit placement at virtual addresses with merging on free;
//! - [`graph_alloc`]: plans a graph's compute memory by liveness, reusing inputs in place, one
//!   compute buffer per distinct buffer type (or per slot, for slots that run concurrently);
//! - [`check`]: the invariants every plan must satisfy, for tests and fuzzing.

pub mod check;
pub mod graph_alloc;
pub mod linear;
pub mod planner;

pub use graph_alloc::{GraphAllocator, PlanReport};
pub use linear::{alloc_graph_tensors, alloc_tensors, LinearAllocator};
pub use planner::{Address, DynamicPlanner};
