//! The CPU backend: runs graphs synchronously, with the fast kernels (SIMD, threads under
//! `std`) or with the reference kernels only.

use alloc::vec::Vec;
use core::any::Any;
use core::ops::Range;

use tessera_core::{Backend, Device, Error, Graph, Op, Result};
use tessera_reference::{NodeTensors, Scratch};

use crate::device::CPU_DEVICE;
use crate::fast::Fast;

/// A CPU stream: computes each node in order; a node's work may be split over threads.
pub struct CpuBackend {
    scratch: Scratch,
    /// `None`: the reference kernels only.
    fast: Option<Fast>,
}

impl Default for CpuBackend {
    fn default() -> CpuBackend {
        CpuBackend::new()
    }
}

impl CpuBackend {
    /// A CPU backend with the fastest kernels this build and processor have, on as many
    /// threads as the system offers (one without `std`).
    pub fn new() -> CpuBackend {
        CpuBackend { scratch: Scratch::default(), fast: Some(Fast::new(default_threads())) }
    }

    /// A CPU backend that runs only the reference kernels, on the calling thread: the
    /// yardstick of the conformance suite.
    pub fn reference() -> CpuBackend {
        CpuBackend { scratch: Scratch::default(), fast: None }
    }

    /// The most threads a CPU backend starts: far more than any machine's processors, few
    /// enough that starting them cannot exhaust the process.
    pub const MAX_THREADS: usize = 1024;

    /// The fastest kernels on `threads` threads (1 to [`MAX_THREADS`](Self::MAX_THREADS)).
    #[cfg(feature = "std")]
    pub fn with_threads(threads: usize) -> CpuBackend {
        CpuBackend { scratch: Scratch::default(), fast: Some(Fast::new(threads.min(Self::MAX_THREADS))) }
    }

    /// The kernel set called `name` (one of [`CpuBackend::kernel_sets`]) on `threads` threads:
    /// lets tests and benchmarks run the kernels of an older instruction set on a newer
    /// processor.
    pub fn with_kernels(name: &str, threads: usize) -> Result<CpuBackend> {
        let fast = Fast::with_kernels(name, threads.min(Self::MAX_THREADS)).ok_or_else(|| Error::Backend {
            backend: "CPU".into(),
            message: alloc::format!(
                "no kernel set '{name}' runs on this processor; sets: {}",
                CpuBackend::kernel_sets().join(", ")
            ),
        })?;
        Ok(CpuBackend { scratch: Scratch::default(), fast: Some(fast) })
    }

    /// The kernel sets this processor can run, fastest first ("avx512-vnni", "avx2", ...,
    /// "scalar").
    pub fn kernel_sets() -> Vec<&'static str> {
        Fast::kernel_names()
    }

    /// The kernel set this backend computes with ("reference" for [`CpuBackend::reference`]).
    pub fn kernel_set(&self) -> &'static str {
        self.fast.as_ref().map_or("reference", Fast::kernels_name)
    }

    /// Threads a node's work is split over.
    pub fn threads(&self) -> usize {
        self.fast.as_ref().map_or(1, Fast::threads)
    }

    /// Sets the number of threads (1 to [`MAX_THREADS`](Self::MAX_THREADS)). The reference
    /// backend always computes on the calling thread and accepts only 1.
    #[cfg(feature = "std")]
    pub fn set_threads(&mut self, threads: usize) -> Result<()> {
        match &mut self.fast {
            _ if threads == 0 || threads > Self::MAX_THREADS => Err(Error::InvalidParam {
                op: "set_n_threads",
                message: alloc::format!("the CPU backend runs 1 to {} threads, not {threads}", Self::MAX_THREADS),
            }),
            Some(fast) => {
                fast.set_threads(threads);
                Ok(())
            }
            None if threads == 1 => Ok(()),
            None => Err(Error::InvalidParam {
                op: "set_n_threads",
                message: alloc::format!("the reference CPU backend computes on 1 thread, not {threads}"),
            }),
        }
    }
}

/// What the system says it can run in parallel (1 without `std`).
fn default_threads() -> usize {
    #[cfg(feature = "std")]
    {
        extern crate std;
        std::thread::available_parallelism().map_or(1, |n| n.get())
    }
    #[cfg(not(feature = "std"))]
    1
}

impl Backend for CpuBackend {
    fn name(&self) -> &str {
        "CPU"
    }
    fn device(&self) -> &'static dyn Device {
        &CPU_DEVICE
    }
    fn compute(&mut self, graph: &Graph, nodes: Range<usize>) -> Result<()> {
        let ids = graph.nodes().get(nodes.clone()).ok_or_else(|| Error::InvalidParam {
            op: "COMPUTE",
            message: alloc::format!("node range {nodes:?} is outside the graph's {} nodes", graph.nodes().len()),
        })?;
        for &id in ids {
            let op = graph.tensor(id)?.op();
            if op == Op::None || op.is_view() {
                continue;
            }
            let view = graph.node_view(id)?;
            let node = NodeTensors::new(&view, "CPU")?;
            match &mut self.fast {
                Some(fast) => fast.compute_node(&node, &mut self.scratch)?,
                None => tessera_reference::compute(&node, &mut self.scratch)?,
            }
        }
        Ok(())
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

#[cfg(all(test, feature = "std"))]
mod tests {
    use super::*;

    #[test]
    fn thread_counts_beyond_the_limit_are_refused_or_capped() {
        let mut cpu = CpuBackend::with_threads(100_000);
        assert_eq!(cpu.threads(), CpuBackend::MAX_THREADS);
        assert!(matches!(cpu.set_threads(100_000), Err(Error::InvalidParam { .. })));
        assert!(matches!(cpu.set_threads(0), Err(Error::InvalidParam { .. })));
        assert_eq!(cpu.set_threads(2), Ok(()));
        assert_eq!(cpu.threads(), 2);
    }
}
