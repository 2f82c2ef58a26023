//! The CPU backend: runs graphs with the reference kernels, synchronously.

use core::any::Any;
use core::ops::Range;

use tessera_core::{Backend, Device, Error, Graph, Result};

use crate::device::CPU_DEVICE;
use crate::kernels::{compute_node, Scratch};

/// A CPU stream: computes each node in order on the calling thread.
#[derive(Default)]
pub struct CpuBackend {
    scratch: Scratch,
}

impl CpuBackend {
    /// A CPU backend with the fastest kernels this build and processor have.
    pub fn new() -> CpuBackend {
        CpuBackend::default()
    }

    /// A CPU backend that runs only the reference kernels: the yardstick of the conformance
    /// suite.
    pub fn reference() -> CpuBackend {
        CpuBackend::default()
    }
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
            compute_node(graph, id, "CPU", &mut self.scratch)?;
        }
        Ok(())
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}
