//! The simulated stream: work is queued and runs when the queue is drained (on
//! `synchronize`, or when an event recorded on it is waited for).

use alloc::boxed::Box;
use alloc::collections::VecDeque;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::any::Any;
use core::ops::Range;
use core::sync::atomic::Ordering;

use tessera_core::buffer::same_buffer_type;
use tessera_core::tensor::MAX_SRC;
use tessera_core::{
    Backend, BufferBase, Device, Error, Event, Graph, NodeView, Op, Program, Result, SplitRef, TensorData, TensorId,
    TensorView,
};
use tessera_reference::{HostTensor, NodeTensors, Scratch};

use crate::device::SimDevice;
use crate::event::{EventState, SimEvent};

/// A destination pointer for a queued read; the caller of `get_tensor_async` keeps it valid
/// until the next synchronize.
struct HostDst(*mut u8);
// SAFETY: the pointer is only written while draining, which the caller of
// `get_tensor_async` has promised not to race with (it waits for synchronize).
unsafe impl Send for HostDst {}

/// Nodes resolved to this device's memory: what a program records and a compute queues.
type Recording = Arc<Vec<NodeView>>;

enum Work {
    Compute(Recording),
    Write { dst: TensorData, offset: usize, bytes: Vec<u8> },
    Read { src: TensorData, offset: usize, dst: HostDst, len: usize },
    Record { event: Arc<EventState>, point: u64 },
    Wait { event: Arc<EventState>, point: u64 },
}

/// The queue of one simulated backend, and the kernels that run it.
pub(crate) struct Stream {
    work: VecDeque<Work>,
    scratch: Scratch,
}

impl Stream {
    /// Runs everything queued, in order.
    pub fn drain(&mut self) -> Result<()> {
        while let Some(w) = self.work.pop_front() {
            match w {
                Work::Compute(nodes) => {
                    for node in nodes.iter() {
                        run_node(node, &mut self.scratch)?;
                    }
                }
                Work::Write { dst, offset, bytes } => dst.buffer.set_bytes(dst.offset + offset, &bytes)?,
                Work::Read { src, offset, dst, len } => {
                    // SAFETY: the caller of `get_tensor_async` keeps `dst` valid for `len` bytes
                    // and untouched until this stream is synchronized, which is now.
                    let out = unsafe { core::slice::from_raw_parts_mut(dst.0, len) };
                    src.buffer.get_bytes(src.offset + offset, out)?;
                }
                Work::Record { event, point } => {
                    event.reached.fetch_max(point, Ordering::AcqRel);
                }
                Work::Wait { event, point } => event.wait_for(point)?,
            }
        }
        Ok(())
    }
}

/// The device address of a tensor as a host pointer: the simulated device's memory is host
/// memory whose address the buffer reports as its device address.
fn device_tensor(view: &TensorView) -> Result<HostTensor<'_>> {
    let BufferBase::Device(base) = view.base() else {
        return Err(Error::Backend { backend: "SIM".into(), message: "a tensor left device memory".into() });
    };
    let first = (base as usize as *mut u8).wrapping_add(view.data.offset);
    // SAFETY: the view holds its buffer, whose memory starts at `base`; the range was checked
    // against the buffer when the node was resolved (`Graph::node_view`), and the stream runs
    // one node at a time, so nothing else touches the bytes meanwhile.
    Ok(unsafe { HostTensor::from_raw(first, view) })
}

/// Runs one recorded node with the reference kernels on the device's memory.
fn run_node(node: &NodeView, scratch: &mut Scratch) -> Result<()> {
    let mut src = [None; MAX_SRC];
    for (slot, view) in node.src.iter().enumerate() {
        if let Some(view) = view {
            src[slot] = Some(device_tensor(view)?);
        }
    }
    tessera_reference::compute(&NodeTensors::from_parts(node.op, device_tensor(&node.dst)?, src), scratch)
}

/// A recorded split: its nodes resolved once, replayed on every run.
struct SimProgram {
    nodes: Range<usize>,
    recording: Recording,
}

impl Program for SimProgram {
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// A stream on a simulated device.
pub struct SimBackend {
    device: &'static SimDevice,
    stream: Arc<spin::Mutex<Stream>>,
}

impl SimBackend {
    pub fn new(device: &'static SimDevice) -> SimBackend {
        SimBackend {
            device,
            stream: Arc::new(spin::Mutex::new(Stream { work: VecDeque::new(), scratch: Scratch::default() })),
        }
    }

    fn push(&self, work: Work) {
        self.stream.lock().work.push_back(work);
    }

    /// Resolves the nodes `nodes` of `graph`, checking that this device runs each op and that
    /// every tensor a kernel touches is in this device's memory.
    fn record(&self, graph: &Graph, nodes: Range<usize>) -> Result<Recording> {
        let ids = graph.nodes().get(nodes.clone()).ok_or_else(|| Error::InvalidParam {
            op: "COMPUTE",
            message: alloc::format!("node range {nodes:?} is outside the graph's {} nodes", graph.nodes().len()),
        })?;
        let mut recorded = Vec::new();
        for &id in ids {
            let t = graph.tensor(id)?;
            if t.op() == Op::None || t.op().is_view() {
                continue;
            }
            if !self.device.supports_op(graph, id) {
                return Err(Error::Unsupported {
                    backend: self.device.name().into(),
                    op: t.op().name(),
                    tensor: graph.label(id),
                });
            }
            let node = graph.node_view(id)?;
            let own = |view: &TensorView, touched: TensorId| -> Result<()> {
                if same_buffer_type(view.data.buffer.buffer_type(), self.device.buffer_type()) {
                    return Ok(());
                }
                let owner = graph.tensor(touched)?.view_src().unwrap_or(touched);
                Err(Error::IncompatibleBuffer {
                    tensor: graph.label(owner),
                    buffer: view.data.buffer.buffer_type().name().into(),
                    backend: self.device.name().into(),
                })
            };
            own(&node.dst, id)?;
            for (slot, s) in t.srcs() {
                if let Some(view) = &node.src[slot] {
                    own(view, s)?;
                }
            }
            recorded.push(node);
        }
        Ok(Arc::new(recorded))
    }

    fn event_state(event: &dyn Event) -> Result<Arc<EventState>> {
        event.as_any().downcast_ref::<SimEvent>().map(|e| e.state.clone()).ok_or_else(|| Error::Backend {
            backend: "SIM".into(),
            message: "the event belongs to another kind of device".into(),
        })
    }

    fn own_program<'p>(&self, program: &'p mut dyn Program) -> Result<&'p mut SimProgram> {
        program.as_any_mut().downcast_mut::<SimProgram>().ok_or_else(|| Error::Backend {
            backend: self.device.name().into(),
            message: "this program was prepared by another kind of backend".into(),
        })
    }
}

impl Backend for SimBackend {
    fn name(&self) -> &str {
        self.device.name()
    }
    fn device(&self) -> &'static dyn Device {
        self.device
    }
    unsafe fn set_tensor_async(&mut self, dst: &TensorData, offset: usize, src: *const u8, len: usize) -> Result<()> {
        // SAFETY: the caller promises `src` is valid for `len` bytes; they are copied now.
        let bytes = unsafe { core::slice::from_raw_parts(src, len) }.to_vec();
        self.push(Work::Write { dst: dst.clone(), offset, bytes });
        Ok(())
    }
    unsafe fn get_tensor_async(&mut self, src: &TensorData, offset: usize, dst: *mut u8, len: usize) -> Result<()> {
        self.push(Work::Read { src: src.clone(), offset, dst: HostDst(dst), len });
        Ok(())
    }
    fn synchronize(&mut self) -> Result<()> {
        self.stream.lock().drain()
    }
    /// Queues the nodes. Every tensor they compute or read must be in this device's memory.
    fn compute(&mut self, graph: &Graph, nodes: Range<usize>) -> Result<()> {
        let recording = self.record(graph, nodes)?;
        self.push(Work::Compute(recording));
        Ok(())
    }
    /// Records the split's nodes, resolved to device memory, once.
    fn prepare(&mut self, split: &SplitRef<'_>) -> Result<Box<dyn Program>> {
        let recording = self.record(split.graph, split.nodes.clone())?;
        self.device.count_prepare();
        Ok(Box::new(SimProgram { nodes: split.nodes.clone(), recording }))
    }
    /// Resolves the recorded nodes again at their new addresses.
    fn update(&mut self, program: &mut Box<dyn Program>, split: &SplitRef<'_>) -> Result<()> {
        let recording = self.record(split.graph, split.nodes.clone())?;
        let p = self.own_program(&mut **program)?;
        p.nodes = split.nodes.clone();
        p.recording = recording;
        self.device.count_update();
        Ok(())
    }
    /// Replays the recording; the graph is not read.
    fn run(&mut self, program: &mut dyn Program, _graph: &Graph) -> Result<()> {
        let recording = self.own_program(program)?.recording.clone();
        self.push(Work::Compute(recording));
        Ok(())
    }
    fn record_event(&mut self, event: &dyn Event) -> Result<()> {
        let state = Self::event_state(event)?;
        let point = state.recorded.fetch_add(1, Ordering::AcqRel) + 1;
        *state.stream.lock() = Some(self.stream.clone());
        self.push(Work::Record { event: state, point });
        Ok(())
    }
    fn wait_event(&mut self, event: &dyn Event) -> Result<()> {
        let state = Self::event_state(event)?;
        let point = state.recorded.load(Ordering::Acquire);
        self.push(Work::Wait { event: state, point });
        Ok(())
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}
