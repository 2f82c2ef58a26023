//! tessera-sim: a simulated accelerator for tests, examples and fuzzing.
//!
//! A [`SimDevice`] is a device of type Gpu whose memory the host cannot read directly (only
//! `set_bytes`, `get_bytes` and copies reach it), that supports a configurable set of ops and
//! types, runs work asynchronously on a queue drained by `synchronize` (or by an event), and
//! may cap its largest buffer. Its kernels are the reference kernels (`tessera-reference`), run
//! on its private memory, so results are bitwise those of `CpuBackend::reference()`. Its
//! backends record programs: `prepare` resolves a split's nodes to device addresses once and
//! `run` replays them without reading the graph, as a GPU backend replays a captured graph.
#![no_std]
#![forbid(unsafe_op_in_unsafe_fn)]

extern crate alloc;

mod backend;
mod buffer;
mod device;
mod event;

pub use backend::SimBackend;
pub use buffer::{SimBuffer, SimBufferType, SimHostBufferType};
pub use device::{ProgramCounts, SimConfig, SimDevice, SIM_REG};
pub use event::SimEvent;
