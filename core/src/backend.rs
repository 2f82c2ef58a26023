//! Backends: a stream of work on one device, and the programs it runs.

use alloc::boxed::Box;
use core::any::Any;
use core::ops::Range;
use core::time::Duration;

use crate::buffer::TensorData;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::graph::Graph;

/// A marker in a backend's stream that other backends or the host can wait for.
pub trait Event: Send + Sync {
    /// Blocks the host until the point where the event was recorded has been reached.
    fn synchronize(&self) -> Result<()>;
    /// The device time from `start` to this event, once both are reached (waits for them).
    /// `None` unless both came from the same device's
    /// [`new_timing_event`](crate::Device::new_timing_event).
    fn elapsed_since(&self, _start: &dyn Event) -> Result<Option<Duration>> {
        Ok(None)
    }
    fn as_any(&self) -> &dyn Any;
}

/// A split as a backend sees it when it prepares a program: consecutive nodes of a graph
/// whose tensors all live in memory the backend can use.
#[derive(Clone)]
pub struct SplitRef<'a> {
    pub graph: &'a Graph,
    /// Indices into `graph.nodes()`.
    pub nodes: Range<usize>,
    /// How many nodes of the whole graph read each tensor (indexed by `TensorId`), outputs
    /// counted once more: a result read only by the next node of the split need not be
    /// stored (fusion).
    pub consumers: &'a [u32],
    /// Changes exactly when a tensor of the graph moved to another address since the last
    /// `prepare` or `update`.
    pub layout: u64,
}

/// A split made ready to run many times: recorded, captured (a CUDA graph, a Vulkan command
/// buffer), fused. Each backend keeps its own kind behind this trait.
pub trait Program: Send + Any {
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

/// The program of a backend that records nothing: it computes the split's nodes one by one
/// from the graph each time it runs.
pub struct NodeByNode {
    pub nodes: Range<usize>,
}

impl Program for NodeByNode {
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// A stream (queue) of transfers and computes on a device.
///
/// Work may run asynchronously; `synchronize` waits for all of it. Backends that have no
/// asynchronous work use the provided blocking defaults.
pub trait Backend: Send {
    fn name(&self) -> &str;
    fn device(&self) -> &'static dyn Device;

    /// Queues a write of `len` bytes from `src` into `dst` at `offset`.
    ///
    /// # Safety
    /// `src` must be valid for reads of `len` bytes and left unchanged until the next
    /// `synchronize` of this backend returns.
    unsafe fn set_tensor_async(&mut self, dst: &TensorData, offset: usize, src: *const u8, len: usize) -> Result<()> {
        // SAFETY: the caller promises `src` is valid for `len` bytes.
        let bytes = unsafe { core::slice::from_raw_parts(src, len) };
        dst.buffer.set_bytes(dst.offset + offset, bytes)
    }

    /// Queues a read of `len` bytes of `src` at `offset` into `dst`.
    ///
    /// # Safety
    /// `dst` must be valid for writes of `len` bytes, and not otherwise accessed, until the
    /// next `synchronize` of this backend returns.
    unsafe fn get_tensor_async(&mut self, src: &TensorData, offset: usize, dst: *mut u8, len: usize) -> Result<()> {
        // SAFETY: the caller promises `dst` is valid and exclusively ours for `len` bytes.
        let out = unsafe { core::slice::from_raw_parts_mut(dst, len) };
        src.buffer.get_bytes(src.offset + offset, out)
    }

    /// Queues a copy of `len` bytes between two tensors, `src` belonging to `src_backend`.
    /// `Ok(false)` means this backend cannot do it asynchronously: synchronise both backends
    /// and copy with `copy_tensor` instead.
    fn copy_tensor_async(
        &mut self,
        _src_backend: &mut dyn Backend,
        _src: &TensorData,
        _dst: &TensorData,
        _len: usize,
    ) -> Result<bool> {
        Ok(false)
    }

    /// Waits until all queued work is done.
    fn synchronize(&mut self) -> Result<()> {
        Ok(())
    }

    /// Computes the nodes `nodes` (indices into `graph.nodes()`); every tensor they touch
    /// must be bound to memory this backend can use. May return before the work is done.
    fn compute(&mut self, graph: &Graph, nodes: Range<usize>) -> Result<()>;

    /// Turns a split into a program, once; the scheduler runs it on every compute until the
    /// plan changes. The default program computes node by node.
    fn prepare(&mut self, split: &SplitRef<'_>) -> Result<Box<dyn Program>> {
        Ok(Box::new(NodeByNode { nodes: split.nodes.clone() }))
    }

    /// Reports each run of consecutive nodes of `split` (indices into `graph.nodes()`) that
    /// this backend's programs compute as one kernel. Such a kernel reads the operands of all
    /// the run's nodes while it writes its result, so the scheduler has the graph allocator
    /// keep them until the run's last node. The default fuses nothing.
    fn fused_runs(&self, _split: &SplitRef<'_>, _run: &mut dyn FnMut(Range<usize>)) {}

    /// Brings `program` up to date after tensors moved (`split.layout` changed): a backend
    /// that can re-bind addresses in place does so; the default prepares it again.
    fn update(&mut self, program: &mut Box<dyn Program>, split: &SplitRef<'_>) -> Result<()> {
        if program.as_any_mut().downcast_mut::<NodeByNode>().is_none() {
            *program = self.prepare(split)?;
        }
        Ok(())
    }

    /// Runs a program made by this backend's `prepare` over `graph` (the graph it was
    /// prepared for, with the same layout). May return before the work is done.
    fn run(&mut self, program: &mut dyn Program, graph: &Graph) -> Result<()> {
        match program.as_any_mut().downcast_mut::<NodeByNode>() {
            Some(p) => self.compute(graph, p.nodes.clone()),
            None => Err(Error::Backend {
                backend: self.name().into(),
                message: "this program was prepared by another kind of backend".into(),
            }),
        }
    }

    /// Computes the whole graph and waits for it.
    fn compute_graph(&mut self, graph: &Graph) -> Result<()> {
        self.compute(graph, 0..graph.nodes().len())?;
        self.synchronize()
    }

    /// Records `event` at the current point of the stream.
    fn record_event(&mut self, _event: &dyn Event) -> Result<()> {
        Err(self.no_events())
    }

    /// Makes the stream wait for `event` without blocking the host.
    fn wait_event(&mut self, _event: &dyn Event) -> Result<()> {
        Err(self.no_events())
    }

    fn as_any_mut(&mut self) -> &mut dyn Any;

    #[doc(hidden)]
    fn no_events(&self) -> Error {
        Error::Backend { backend: self.name().into(), message: "this backend has no events".into() }
    }
}
