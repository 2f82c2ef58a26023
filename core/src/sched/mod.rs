//! The scheduler: runs one graph across several backends.
//!
//! Backends are given in priority order, the last one a CPU. Planning runs ggml's five
//! passes (see [`assign`] and [`split`]) over the user's graph without changing it: the
//! result is a [`SplitPlan`] and a scheduled copy of the graph with the input copies each
//! split needs. That copy is allocated with the [`GraphAllocator`] (one compute buffer per
//! backend, so that backends sharing a device still run concurrently) and run split by split,
//! inputs copied in, with events between backends. With `n_copies > 1` every input has that many rotating copies, so successive
//! runs can overlap across devices (pipeline parallelism).

pub mod assign;
pub mod check;
mod run;
pub mod split;

mod plan;
mod programs;

use alloc::boxed::Box;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

pub use assign::Cause;
pub use plan::{Detailed, NodeAssignment, SplitPlan};
pub use programs::{consumer_counts, ProgramStats};
pub use split::{CopyRoute, Split, SplitInput};

use crate::allocator::GraphAllocator;
use crate::backend::{Backend, Event};
use crate::buffer::BufferType;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::graph::Graph;
use crate::tensor::TensorId;

/// Called for each node: first with `ask = true` ("do you want this result?"), then, if it
/// said yes, with `ask = false` once the result is computed. Returning false from the second
/// call stops the whole compute.
pub type EvalCallback = dyn FnMut(&Graph, TensorId, bool) -> bool + Send;

/// How a compute ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Completion {
    Finished,
    /// The eval callback asked to stop; later nodes and splits did not run.
    Stopped,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchedulerOptions {
    /// Copies per split input (1, or up to `MAX_COPIES` for pipeline parallelism).
    pub n_copies: usize,
    /// Run large-batch ops whose weights are in host memory on a GPU that asks for them.
    pub op_offload: bool,
}

impl Default for SchedulerOptions {
    fn default() -> Self {
        SchedulerOptions { n_copies: 1, op_offload: false }
    }
}

/// What a planned graph needs to run.
struct Prepared {
    graph: Graph,
    plan: SplitPlan,
    /// The backend (allocator slot) of every tensor of `graph`.
    slots: Vec<usize>,
    /// How many nodes read each tensor of `graph` (for the programs).
    consumers: Vec<u32>,
    /// The runs of nodes the backends compute as one kernel (for the graph allocator).
    runs: Vec<core::ops::Range<usize>>,
    /// What identifies this plan (programs of another plan are prepared anew).
    fingerprint: u64,
}

/// Runs graphs over up to `MAX_BACKENDS` backends, with up to `MAX_COPIES` copies per input
/// and `MAX_SPLIT_INPUTS` inputs per split (a split that would need more is cut in two).
pub struct Scheduler<const MAX_BACKENDS: usize = 16, const MAX_COPIES: usize = 4, const MAX_SPLIT_INPUTS: usize = 64> {
    backends: heapless::Vec<Box<dyn Backend>, MAX_BACKENDS>,
    devices: heapless::Vec<&'static dyn Device, MAX_BACKENDS>,
    buffer_types: heapless::Vec<&'static dyn BufferType, MAX_BACKENDS>,
    names: Vec<String>,
    /// `events[backend][copy]`, when the device has events and runs are pipelined.
    events: heapless::Vec<heapless::Vec<Option<Box<dyn Event>>, MAX_COPIES>, MAX_BACKENDS>,
    options: SchedulerOptions,
    pins: Vec<(TensorId, usize)>,
    /// Pins changed since the last plan (so the pins, not the plan, are current).
    pins_changed: bool,
    galloc: GraphAllocator,
    /// After `reserve`, buffers are fixed: a graph needing more is an error.
    reserved: bool,
    cur_copy: usize,
    next_copy: usize,
    prepared: Option<Prepared>,
    /// Per pipeline slot, the programs of the plan last run in it.
    programs: Vec<Option<programs::SlotPrograms>>,
    program_stats: ProgramStats,
    callback: Option<Box<EvalCallback>>,
    /// Host memory that copies no backend can make themselves are staged through, one buffer
    /// per buffer type (a device's pinned memory, or ordinary host memory).
    staging: Vec<alloc::sync::Arc<dyn crate::buffer::Buffer>>,
    debug: u8,
}

impl<const MAX_BACKENDS: usize, const MAX_COPIES: usize, const MAX_SPLIT_INPUTS: usize>
    Scheduler<MAX_BACKENDS, MAX_COPIES, MAX_SPLIT_INPUTS>
{
    /// A scheduler over `backends` in priority order; the last must be a CPU. Each backend's
    /// compute memory is its device's own buffer type.
    pub fn new(backends: Vec<Box<dyn Backend>>, options: SchedulerOptions) -> Result<Self> {
        Self::with_buffer_types(backends, &[], options)
    }

    /// Like [`new`](Self::new), with the compute memory of backend `i` taken from
    /// `buffer_types[i]` where it is `Some` (ggml's `bufts`): the CPU side of a GPU split can
    /// then work in the GPU's pinned host memory, which the GPU copies from fastest. Each
    /// given type must be one the backend's device can use.
    pub fn with_buffer_types(
        backends: Vec<Box<dyn Backend>>,
        buffer_types: &[Option<&'static dyn BufferType>],
        options: SchedulerOptions,
    ) -> Result<Self> {
        if buffer_types.len() > backends.len() {
            return Err(Error::InvalidParam {
                op: "SCHEDULER",
                message: format!("{} buffer types for {} backends", buffer_types.len(), backends.len()),
            });
        }
        if backends.len() > MAX_BACKENDS {
            return Err(Error::CapacityExceeded { what: "backends per scheduler", limit: MAX_BACKENDS });
        }
        if MAX_SPLIT_INPUTS < crate::tensor::MAX_SRC {
            return Err(Error::CapacityExceeded {
                what: "inputs per split (at least one node's sources)",
                limit: MAX_SPLIT_INPUTS,
            });
        }
        if options.n_copies == 0 || options.n_copies > MAX_COPIES {
            return Err(Error::CapacityExceeded { what: "copies per input", limit: MAX_COPIES });
        }
        let Some(last) = backends.last() else {
            return Err(Error::InvalidParam {
                op: "SCHEDULER",
                message: "at least one backend (a CPU) is needed".into(),
            });
        };
        if !last.device().is_host_cpu() {
            return Err(Error::InvalidParam {
                op: "SCHEDULER",
                message: format!("the last backend must be a CPU, got {}", last.name()),
            });
        }
        let mut s = Scheduler {
            backends: heapless::Vec::new(),
            devices: heapless::Vec::new(),
            buffer_types: heapless::Vec::new(),
            names: Vec::new(),
            events: heapless::Vec::new(),
            options,
            pins: Vec::new(),
            pins_changed: false,
            galloc: GraphAllocator::new(&[]),
            reserved: false,
            cur_copy: 0,
            next_copy: 0,
            prepared: None,
            programs: Vec::new(),
            program_stats: ProgramStats::default(),
            callback: None,
            staging: Vec::new(),
            debug: 0,
        };
        for (i, backend) in backends.into_iter().enumerate() {
            let device = backend.device();
            let buffer_type = match buffer_types.get(i).copied().flatten() {
                Some(bt) if device.supports_buffer_type(bt) => bt,
                Some(bt) => {
                    return Err(Error::InvalidParam {
                        op: "SCHEDULER",
                        message: format!("{} cannot compute in buffers of type {}", backend.name(), bt.name()),
                    })
                }
                None => device.buffer_type(),
            };
            let mut events = heapless::Vec::new();
            for _ in 0..options.n_copies {
                let event = if options.n_copies > 1 && device.caps().events { device.new_event()? } else { None };
                // Capacity was checked above: n_copies <= MAX_COPIES.
                let _ = events.push(event);
            }
            // A second backend of one device is "CUDA0:1", as placements name it.
            let earlier = s.backends.iter().filter(|b| core::ptr::addr_eq(b.device(), device)).count();
            s.names.push(match earlier {
                0 => String::from(backend.name()),
                k => format!("{}:{k}", backend.name()),
            });
            // Capacity was checked above: backends.len() <= MAX_BACKENDS.
            let _ = s.devices.push(device);
            let _ = s.buffer_types.push(buffer_type);
            let _ = s.events.push(events);
            let _ = s.backends.push(backend);
        }
        // Backends run concurrently (two instances of one device included): each computes in
        // memory of its own.
        s.galloc = GraphAllocator::try_new_per_slot(&s.buffer_types)?;
        s.programs.resize_with(options.n_copies, || None);
        Ok(s)
    }

    /// Copies per split input (pipeline slots).
    pub fn n_copies(&self) -> usize {
        self.options.n_copies
    }

    pub fn n_backends(&self) -> usize {
        self.backends.len()
    }

    /// Backend `i` (for its extensions and synchronisation).
    pub fn backend(&mut self, i: usize) -> Option<&mut dyn Backend> {
        match self.backends.get_mut(i) {
            Some(b) => Some(&mut **b),
            None => None,
        }
    }

    /// The index of the backend called `name` (case-insensitive).
    pub fn backend_index(&self, name: &str) -> Option<usize> {
        self.names.iter().position(|n| n.eq_ignore_ascii_case(name))
    }

    /// Prints plans to stderr (1) and every node's backend (2) in `std` builds (`tessera-std`
    /// sets it from `TESSERA_SCHED_DEBUG`).
    pub fn set_debug(&mut self, level: u8) {
        self.debug = level;
    }

    /// Pins `tensor` (of the graphs to be planned) to backend `backend`.
    pub fn set_tensor_backend(&mut self, tensor: TensorId, backend: usize) -> Result<()> {
        if backend >= self.backends.len() {
            return Err(Error::InvalidParam {
                op: "SCHEDULER",
                message: format!("backend {backend} does not exist ({} backends)", self.backends.len()),
            });
        }
        self.pins.retain(|(t, _)| *t != tensor);
        self.pins.push((tensor, backend));
        self.pins_changed = true;
        Ok(())
    }

    /// The backend of `tensor`: its pin, else its assignment in the last plan.
    pub fn get_tensor_backend(&self, tensor: TensorId) -> Option<usize> {
        self.pins
            .iter()
            .find(|(t, _)| *t == tensor)
            .map(|p| p.1)
            .or_else(|| self.prepared.as_ref()?.plan.assignments.iter().find(|n| n.tensor == tensor).map(|n| n.backend))
    }

    /// Removes every pin.
    pub fn clear_pins(&mut self) {
        self.pins.clear();
        self.pins_changed = true;
    }

    pub fn set_eval_callback(&mut self, callback: Option<Box<EvalCallback>>) {
        self.callback = callback;
    }

    /// The plan of the last `plan`, `reserve` or `alloc_graph`.
    pub fn plan(&self) -> Option<&SplitPlan> {
        self.prepared.as_ref().map(|p| &p.plan)
    }

    /// The scheduled graph (the user's tensors keep their ids): set inputs and read outputs
    /// through it after `alloc_graph`.
    pub fn graph(&self) -> Option<&Graph> {
        self.prepared.as_ref().map(|p| &p.graph)
    }

    /// How many split programs the backends have prepared and updated so far.
    pub fn program_stats(&self) -> ProgramStats {
        self.program_stats
    }

    /// Compute buffer bytes held for backend `i`.
    pub fn buffer_size(&self, i: usize) -> usize {
        self.galloc.buffer_size(i)
    }

    /// Runs the five passes over `graph` (which is not changed) and keeps the result.
    pub fn split_graph(&mut self, graph: &Graph) -> Result<&SplitPlan> {
        let ctx = assign::Context {
            graph,
            devices: &self.devices,
            buffer_types: &self.buffer_types,
            names: &self.names,
            op_offload: self.options.op_offload,
        };
        let a = assign::assign(&ctx, &self.pins)?;
        self.pins_changed = false;
        let cut = split::cut(&ctx, &a, self.options.n_copies, self.cur_copy, MAX_SPLIT_INPUTS)?;
        let assignments = graph
            .nodes()
            .iter()
            .filter_map(|&id| {
                Some(NodeAssignment {
                    tensor: id,
                    name: graph.label(id),
                    op: graph.tensor(id).ok()?.op().name(),
                    backend: a.get(id)?,
                    cause: a.cause[id.index()],
                })
            })
            .collect();
        let plan = SplitPlan {
            backends: self.names.clone(),
            splits: cut.splits,
            n_copies: self.options.n_copies,
            buffer_sizes: (0..self.backends.len()).map(|i| self.galloc.buffer_size(i)).collect(),
            assignments,
        };
        let consumers = programs::consumer_counts(&cut.graph)?;
        let runs = programs::fused_runs(&self.backends, &cut.graph, &plan.splits, &consumers)?;
        let fingerprint = programs::plan_fingerprint(&cut.graph, &plan.splits);
        let prepared =
            self.prepared.insert(Prepared { graph: cut.graph, plan, slots: cut.slots, consumers, runs, fingerprint });
        Ok(&prepared.plan)
    }
}
