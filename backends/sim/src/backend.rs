//! The simulated stream: work is queued and runs when the queue is drained (on
//! `synchronize`, or when an event recorded on it is waited for).

use alloc::boxed::Box;
use alloc::collections::VecDeque;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::any::Any;
use core::ops::Range;
use core::sync::atomic::Ordering;

use tessera_core::{Backend, Device, Error, Event, Graph, Op, Result, TensorData, TensorId};
use tessera_cpu::CpuBackend;

use crate::buffer::SimBuffer;
use crate::device::SimDevice;
use crate::event::{EventState, SimEvent};

/// A destination pointer for a queued read; the caller of `get_tensor_async` keeps it valid
/// until the next synchronize.
struct HostDst(*mut u8);
// SAFETY: the pointer is only written while draining, which the caller of
// `get_tensor_async` has promised not to race with (it waits for synchronize).
unsafe impl Send for HostDst {}

enum Work {
    /// Nodes of a graph whose device tensors were rebound to the memory behind them.
    Compute {
        graph: Box<Graph>,
        nodes: Range<usize>,
    },
    Write {
        dst: TensorData,
        offset: usize,
        bytes: Vec<u8>,
    },
    Read {
        src: TensorData,
        offset: usize,
        dst: HostDst,
        len: usize,
    },
    Record {
        event: Arc<EventState>,
        point: u64,
    },
    Wait {
        event: Arc<EventState>,
        point: u64,
    },
}

/// The queue of one simulated backend, and the kernels that run it.
pub(crate) struct Stream {
    work: VecDeque<Work>,
    kernels: CpuBackend,
}

impl Stream {
    /// Runs everything queued, in order.
    pub fn drain(&mut self) -> Result<()> {
        while let Some(w) = self.work.pop_front() {
            match w {
                Work::Compute { graph, nodes } => self.kernels.compute(&graph, nodes)?,
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

/// A stream on a simulated device.
pub struct SimBackend {
    device: &'static SimDevice,
    stream: Arc<spin::Mutex<Stream>>,
}

impl SimBackend {
    pub fn new(device: &'static SimDevice) -> SimBackend {
        SimBackend {
            device,
            stream: Arc::new(spin::Mutex::new(Stream { work: VecDeque::new(), kernels: CpuBackend::new() })),
        }
    }

    fn push(&self, work: Work) {
        self.stream.lock().work.push_back(work);
    }

    /// The memory behind `id` if it lives on this device; an error naming it otherwise.
    fn own_memory(&self, graph: &Graph, id: TensorId) -> Result<Option<TensorData>> {
        let Some(data) = graph.tensor(id)?.data() else { return Ok(None) };
        match data.buffer.as_any().downcast_ref::<SimBuffer>() {
            Some(b) if b.belongs_to(self.device.sim_buffer_type()) => {
                Ok(Some(TensorData { buffer: b.memory(), offset: data.offset }))
            }
            _ => Err(Error::IncompatibleBuffer {
                tensor: graph.label(id),
                buffer: data.buffer.buffer_type().name().into(),
                backend: self.device.name().into(),
            }),
        }
    }

    fn event_state(event: &dyn Event) -> Result<Arc<EventState>> {
        event.as_any().downcast_ref::<SimEvent>().map(|e| e.state.clone()).ok_or_else(|| Error::Backend {
            backend: "SIM".into(),
            message: "the event belongs to another kind of device".into(),
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
        let ids = graph.nodes().get(nodes.clone()).ok_or_else(|| Error::InvalidParam {
            op: "COMPUTE",
            message: alloc::format!("node range {nodes:?} is outside the graph's {} nodes", graph.nodes().len()),
        })?;
        let mut shadow = graph.clone();
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
            for touched in core::iter::once(id).chain(t.srcs().map(|(_, s)| s)) {
                let owner = graph.tensor(touched)?.view_src().unwrap_or(touched);
                match self.own_memory(graph, owner)? {
                    Some(memory) => shadow.bind(owner, memory)?,
                    None => return Err(Error::NotAllocated { tensor: graph.label(owner) }),
                }
            }
        }
        self.push(Work::Compute { graph: Box::new(shadow), nodes });
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
