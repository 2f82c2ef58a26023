//! The fast kernels: SIMD code chosen for this processor (at run time under `std`, at compile
//! time without it), work split over a thread pool (`std`), and the dispatch that sends every
//! op without a fast kernel to the reference kernels.
//!
//! Ops with fast kernels: MUL_MAT (`matmul`), the element-wise ops (`elementwise`), NORM,
//! RMS_NORM and SOFT_MAX (`normalize`), ROPE (`rope`), GET_ROWS, SET_ROWS and CPY/CONT
//! (`convert`), FLASH_ATTN (`attention`); the row kernels they call are written once and
//! compiled per instruction set (`vector`).
//!
//! Adding an op: give it an arm in [`Fast::compute_node`] that calls a driver in its own
//! module (as `matmul` does). A driver sizes its work memory with [`WorkMemory::reserve`],
//! then calls [`Team::run`] with a closure that every thread runs: split the work with
//! [`parallel::WorkCounter`]s or [`parallel::Worker::share`] (by rows or tiles, never inside
//! a reduction, so results do not depend on the thread count) and separate phases with
//! [`parallel::Worker::barrier`]. Kernels for one instruction set are function pointers in
//! the [`simd::Kernels`] table; add fields there (with a portable version in
//! `simd/scalar`) rather than testing features in a driver.

mod attention;
mod convert;
mod dispatch;
mod elementwise;
mod matmul;
mod normalize;
mod parallel;
#[cfg(feature = "std")]
mod pool;
mod rope;
mod row_tensor;
mod scratch;
mod simd;
mod vector;

use alloc::vec::Vec;

use tessera_core::{Op, Result};
use tessera_reference::{NodeTensors, Scratch};

pub use dispatch::limit_to_build_target;
use elementwise::Map;
use normalize::Norm;
pub use parallel::Team;
pub use scratch::WorkMemory;

/// The name of the best kernel set of this processor.
#[cfg(feature = "std")]
pub fn best_kernels() -> &'static str {
    dispatch::best().name
}

/// The state of a fast CPU backend: its kernel table, its threads and their work memory.
pub struct Fast {
    kernels: &'static simd::Kernels,
    team: Team,
    memory: WorkMemory,
}

impl Fast {
    /// The best kernels of this processor on `threads` threads.
    pub fn new(threads: usize) -> Fast {
        Fast { kernels: dispatch::best(), team: Team::new(threads), memory: WorkMemory::default() }
    }

    /// The kernel table called `name`, if this processor can run it.
    pub fn with_kernels(name: &str, threads: usize) -> Option<Fast> {
        Some(Fast { kernels: dispatch::by_name(name)?, team: Team::new(threads), memory: WorkMemory::default() })
    }

    /// Names of the kernel tables this processor can run, best first.
    pub fn kernel_names() -> Vec<&'static str> {
        dispatch::available().map(|k| k.name).collect()
    }

    pub fn kernels_name(&self) -> &'static str {
        self.kernels.name
    }

    pub fn threads(&self) -> usize {
        self.team.threads()
    }

    #[cfg(feature = "std")]
    pub fn set_threads(&mut self, threads: usize) {
        self.team.set_threads(threads);
    }

    /// Computes node `id`: with a fast kernel where there is one for its op and layout, else
    /// with the reference kernel.
    pub fn compute_node(&mut self, n: &NodeTensors, scratch: &mut Scratch) -> Result<()> {
        let (k, team, memory) = (self.kernels, &mut self.team, &mut self.memory);
        let done = match n.op {
            Op::MulMat => matmul::mul_mat(k, team, memory, n)?,
            Op::Binary(op) => elementwise::binary(k, team, memory, n, op)?,
            Op::Scale(s) => elementwise::map(k, team, memory, n, Map::Scale(s))?,
            Op::Unary(op) => elementwise::map(k, team, memory, n, Map::Unary(op))?,
            Op::Norm { eps } => normalize::norm(k, team, n, Norm::Norm { eps })?,
            Op::RmsNorm { eps } => normalize::norm(k, team, n, Norm::Rms { eps })?,
            Op::SoftMax { scale } => normalize::soft_max(k, team, n, scale)?,
            Op::Rope(p) => rope::rope(k, team, memory, n, p)?,
            Op::GetRows => convert::get_rows(k, team, memory, n)?,
            Op::Cpy | Op::Cont => convert::copy(k, team, n)?,
            Op::SetRows => convert::set_rows(k, n)?,
            Op::FlashAttn { scale, .. } => attention::flash_attn(k, team, memory, n, scale)?,
            _ => false,
        };
        if !done {
            tessera_reference::compute(n, scratch)?;
        }
        Ok(())
    }
}
