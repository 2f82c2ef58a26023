//! Passes 1 to 4 of the scheduler: give every node (and every source it reads) a backend.
//!
//! Backends are in priority order; the last is the CPU. Each pass only fills tensors that are
//! still unassigned (user pins survive all of them, except the upgrade of pass 3).

use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

use crate::buffer::{BufferType, BufferUsage};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::graph::Graph;
use crate::op::Op;
use crate::tensor::{TensorFlags, TensorId};

/// Why a tensor got its backend (printed by `TESSERA_SCHED_DEBUG=2`), tagged like ggml's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cause {
    /// Pinned by the user.
    User,
    /// Pass 1: the tensor's own memory.
    Buffer,
    /// Pass 1: the memory of the tensor it views.
    ViewBuffer,
    /// Pass 1: an unallocated input goes to the CPU.
    Input,
    /// Pass 1: it consumes weights living on that backend.
    Weights,
    /// Pass 1: large-batch op offloaded from host-memory weights.
    Offload,
    /// Pass 2: expanded from a neighbouring GPU assignment.
    ExpandGpu,
    /// Pass 2: expanded from any neighbouring assignment.
    Expand,
    /// Pass 3: the backend that can read most of its sources.
    Best,
    /// Pass 3: upgraded to a higher-priority backend sharing the buffer type.
    Upgrade,
    /// Pass 4: a view or source takes its view source's backend.
    ViewSource,
    /// Pass 4: a source takes its consumer's backend.
    Consumer,
    /// Pass 4: the first backend that supports it.
    Fallback,
}

impl Cause {
    /// Every cause, in the order of the passes.
    pub const ALL: [Cause; 13] = [
        Cause::User,
        Cause::Buffer,
        Cause::ViewBuffer,
        Cause::Input,
        Cause::Weights,
        Cause::Offload,
        Cause::ExpandGpu,
        Cause::Expand,
        Cause::Best,
        Cause::Upgrade,
        Cause::ViewSource,
        Cause::Consumer,
        Cause::Fallback,
    ];

    /// What the tag means, for the legend of a detailed plan.
    pub const fn meaning(self) -> &'static str {
        match self {
            Cause::User => "pinned by the user",
            Cause::Buffer => "pass 1: its own memory is there",
            Cause::ViewBuffer => "pass 1: the memory it views is there",
            Cause::Input => "pass 1: an unallocated input, on the CPU",
            Cause::Weights => "pass 1: it reads weights that live there",
            Cause::Offload => "pass 1: a large batch offloaded from host-memory weights",
            Cause::ExpandGpu => "pass 2: spread from a neighbouring GPU op",
            Cause::Expand => "pass 2: spread from a neighbouring op",
            Cause::Best => "pass 3: the backend that reads most of its sources",
            Cause::Upgrade => "pass 3: upgraded to a preferred backend on the same memory",
            Cause::ViewSource => "pass 4: follows the tensor it views",
            Cause::Consumer => "pass 4: follows the node that reads it",
            Cause::Fallback => "pass 4: the first backend that supports it",
        }
    }

    pub const fn tag(self) -> &'static str {
        match self {
            Cause::User => "usr",
            Cause::Buffer => "1.dst",
            Cause::ViewBuffer => "1.vsrc",
            Cause::Input => "1.inp",
            Cause::Weights => "1.wgt",
            Cause::Offload => "1.off",
            Cause::ExpandGpu => "2.gpu",
            Cause::Expand => "2.any",
            Cause::Best => "3.best",
            Cause::Upgrade => "3.upg",
            Cause::ViewSource => "4.vsrc",
            Cause::Consumer => "4.cur",
            Cause::Fallback => "4.any",
        }
    }
}

/// Everything the passes read.
pub(crate) struct Context<'a> {
    pub graph: &'a Graph,
    pub devices: &'a [&'static dyn Device],
    pub buffer_types: &'a [&'static dyn BufferType],
    pub names: &'a [String],
    pub op_offload: bool,
}

/// Each tensor's backend index and the cause, indexed by tensor id.
pub(crate) struct Assignment {
    pub backend: Vec<Option<usize>>,
    pub cause: Vec<Cause>,
}

impl Assignment {
    fn set(&mut self, id: TensorId, backend: usize, cause: Cause) {
        self.backend[id.index()] = Some(backend);
        self.cause[id.index()] = cause;
    }
    pub fn get(&self, id: TensorId) -> Option<usize> {
        self.backend.get(id.index()).copied().flatten()
    }
}

impl Context<'_> {
    fn cpu(&self) -> usize {
        self.devices.len() - 1
    }

    /// Whether backend `b` can compute `id` (leafs and views need no kernel).
    fn supports(&self, b: usize, id: TensorId) -> bool {
        match self.graph.tensor(id) {
            Ok(t) if t.op() == Op::None || t.op().is_view() => true,
            Ok(_) => self.devices[b].supports_op(self.graph, id),
            Err(_) => false,
        }
    }

    /// The buffer type of the memory `id` already has (its own or its view source's).
    fn memory_type(&self, id: TensorId) -> Option<&'static dyn BufferType> {
        self.graph.data(id).map(|d| d.buffer.buffer_type())
    }

    /// The highest-priority backend that can use memory of `buffer_type` and run `op_node`.
    fn backend_for_memory(&self, buffer_type: &dyn BufferType, op_node: TensorId) -> Option<usize> {
        (0..self.devices.len())
            .find(|&b| self.devices[b].supports_buffer_type(buffer_type) && self.supports(b, op_node))
    }

    /// Whether backend `b` can read `id` where it lives (or will live, once assigned).
    pub(crate) fn can_read(&self, a: &Assignment, b: usize, id: TensorId) -> bool {
        let buffer_type = self.memory_type(id).or_else(|| {
            let root = self.graph.tensor(id).ok()?.view_src().unwrap_or(id);
            a.get(id).or_else(|| a.get(root)).map(|x| self.buffer_types[x])
        });
        buffer_type.is_some_and(|bt| self.devices[b].supports_buffer_type(bt))
    }

    fn is_view_op(&self, id: TensorId) -> bool {
        self.graph.tensor(id).is_ok_and(|t| t.op().is_view())
    }

    /// Pass 1 for one tensor: a backend from memory already placed.
    fn pass1_choice(&self, id: TensorId) -> Result<Option<(usize, Cause)>> {
        let g = self.graph;
        let t = g.tensor(id)?;
        if let Some(bt) = self.memory_type(id) {
            let cause = if t.data().is_some() { Cause::Buffer } else { Cause::ViewBuffer };
            return match self.backend_for_memory(bt, id) {
                Some(b) => Ok(Some((b, cause))),
                None => Err(Error::NoBackend {
                    tensor: g.label(id),
                    op: t.op().name(),
                    buffer: bt.name().into(),
                    backends: self.names.join(", "),
                }),
            };
        }
        if t.flags().contains(TensorFlags::INPUT) {
            return Ok(Some((self.cpu(), Cause::Input)));
        }
        // ROPE's small position tensor must not decide where the op runs.
        if matches!(t.op(), Op::Rope(_)) {
            return Ok(None);
        }
        for (_, src) in t.srcs() {
            let Some(d) = g.data(src) else { continue };
            if d.buffer.usage() != BufferUsage::Weights {
                continue;
            }
            let bt = d.buffer.buffer_type();
            let w = self.backend_for_memory(bt, id);
            if self.op_offload && w == Some(self.cpu()) && bt.is_host() {
                let offload = (0..self.cpu()).find(|&b| self.supports(b, id) && self.devices[b].offload_op(g, id));
                if let Some(b) = offload {
                    return Ok(Some((b, Cause::Offload)));
                }
            }
            return Ok(w.map(|b| (b, Cause::Weights)));
        }
        Ok(None)
    }
}

/// Runs passes 1 to 4 and the fix-ups after them. `pins` are the user's (tensor, backend)
/// choices.
pub(crate) fn assign(ctx: &Context, pins: &[(TensorId, usize)]) -> Result<Assignment> {
    let mut a = apply_pins(ctx, pins)?;
    pass1_pin_to_memory(ctx, &mut a)?;
    let nodes: Vec<TensorId> = ctx.graph.nodes().iter().copied().filter(|&id| !ctx.is_view_op(id)).collect();
    pass2_expand_neighbours(ctx, &mut a, &nodes);
    pass3_best_reader_and_upgrade(ctx, &mut a, &nodes)?;
    pass4_views_sources_and_fallback(ctx, &mut a)?;
    writers_follow_placed_memory(ctx, &mut a)?;
    views_follow_their_source(ctx, &mut a)?;
    check_every_node_assigned(ctx, &a)?;
    Ok(a)
}

/// The user's pins, each checked against what its backend supports.
fn apply_pins(ctx: &Context, pins: &[(TensorId, usize)]) -> Result<Assignment> {
    let g = ctx.graph;
    let n = g.tensors().len();
    let mut a = Assignment { backend: vec![None; n], cause: vec![Cause::User; n] };
    for &(id, b) in pins {
        if id.index() >= n {
            continue;
        }
        if !ctx.supports(b, id) {
            let t = g.tensor(id)?;
            return Err(Error::Unsupported { backend: ctx.names[b].clone(), op: t.op().name(), tensor: g.label(id) });
        }
        a.set(id, b, Cause::User);
    }

    Ok(a)
}

/// Pass 1: pin to memory that already exists, inputs to the CPU, ops to their weights.
fn pass1_pin_to_memory(ctx: &Context, a: &mut Assignment) -> Result<()> {
    let g = ctx.graph;
    for &id in g.leafs().iter().chain(g.nodes()) {
        if a.get(id).is_none() {
            if let Some((b, cause)) = ctx.pass1_choice(id)? {
                a.set(id, b, cause);
            }
        }
    }

    Ok(())
}

/// Pass 2: spread GPU assignments to neighbours (down, then up), then any assignment.
fn pass2_expand_neighbours(ctx: &Context, a: &mut Assignment, nodes: &[TensorId]) {
    expand(ctx, a, nodes.iter().copied(), true);
    expand(ctx, a, nodes.iter().rev().copied(), true);
    expand(ctx, a, nodes.iter().copied(), false);
    expand(ctx, a, nodes.iter().rev().copied(), false);
}

/// Pass 3: an unassigned op takes the backend that can read most of its sources; an assigned
/// one is upgraded to a higher-priority backend that shares its buffer type.
fn pass3_best_reader_and_upgrade(ctx: &Context, a: &mut Assignment, nodes: &[TensorId]) -> Result<()> {
    let g = ctx.graph;
    for &id in nodes {
        let t = g.tensor(id)?;
        match a.get(id) {
            None => {
                let mut best: Option<(usize, usize)> = None;
                for b in (0..ctx.devices.len()).filter(|&b| ctx.supports(b, id)) {
                    let readable = t
                        .srcs()
                        .filter(|&(_, s)| {
                            let root = g.tensor(s).map(|st| st.view_src().unwrap_or(s)).unwrap_or(s);
                            (a.get(s).is_some() || a.get(root).is_some()) && ctx.can_read(a, b, s)
                        })
                        .count();
                    if best.is_none_or(|(_, n)| readable > n) {
                        best = Some((b, readable));
                    }
                }
                if let Some((b, _)) = best {
                    a.set(id, b, Cause::Best);
                }
            }
            Some(cur) => {
                // Two backends of one device are streams a placement chose between: a node
                // stays on the one it was given.
                let same_memory = (0..cur).find(|&b| {
                    !core::ptr::addr_eq(ctx.devices[b], ctx.devices[cur])
                        && crate::buffer::same_buffer_type(ctx.buffer_types[b], ctx.buffer_types[cur])
                        && ctx.supports(b, id)
                        && t.srcs().all(|(_, s)| ctx.can_read(a, b, s))
                });
                if let Some(b) = same_memory {
                    a.set(id, b, Cause::Upgrade);
                }
            }
        }
    }

    Ok(())
}

/// Pass 4: views follow their source, sources their consumer; the rest the first backend
/// that supports them.
fn pass4_views_sources_and_fallback(ctx: &Context, a: &mut Assignment) -> Result<()> {
    let g = ctx.graph;
    for &id in g.nodes() {
        let t = g.tensor(id)?;
        if a.get(id).is_none() {
            if let Some(b) = t.view_src().and_then(|vs| a.get(vs)) {
                a.set(id, b, Cause::ViewSource);
            }
        }
        if a.get(id).is_none() {
            match (0..ctx.devices.len()).find(|&b| ctx.supports(b, id)) {
                Some(b) => a.set(id, b, Cause::Fallback),
                None => {
                    return Err(Error::NoBackend {
                        tensor: g.label(id),
                        op: t.op().name(),
                        buffer: String::new(),
                        backends: ctx.names.join(", "),
                    })
                }
            }
        }
        let Some(node_backend) = a.get(id) else { continue };
        for (_, s) in t.srcs() {
            if a.get(s).is_some() {
                continue;
            }
            let st = g.tensor(s)?;
            match st.view_src().and_then(|vs| a.get(vs)) {
                Some(b) => a.set(s, b, Cause::ViewSource),
                None => a.set(s, node_backend, Cause::Consumer),
            }
        }
    }
    Ok(())
}

/// A node that writes into another tensor's memory (CPY into a view) must run where that
/// memory is: the memory follows the node unless it is already placed (bound, an input,
/// pinned), in which case the node follows the memory.
fn writers_follow_placed_memory(ctx: &Context, a: &mut Assignment) -> Result<()> {
    let g = ctx.graph;
    for &id in g.nodes() {
        let t = g.tensor(id)?;
        let Some(root) = t.view_src().filter(|_| !t.op().is_view()) else { continue };
        let (Some(nb), Some(rb)) = (a.get(id), a.get(root)) else { continue };
        if crate::buffer::same_buffer_type(ctx.buffer_types[nb], ctx.buffer_types[rb]) {
            continue;
        }
        let placed = g.data(root).is_some() || matches!(a.cause[root.index()], Cause::User | Cause::Input);
        if !placed {
            a.set(root, nb, Cause::Consumer);
            for &v in g.nodes() {
                let vt = g.tensor(v)?;
                if vt.op().is_view() && vt.view_src() == Some(root) {
                    a.set(v, nb, Cause::ViewSource);
                }
            }
        } else if ctx.supports(rb, id) {
            a.set(id, rb, Cause::ViewSource);
        } else {
            return Err(Error::NoBackend {
                tensor: g.label(id),
                op: t.op().name(),
                buffer: ctx.buffer_types[rb].name().into(),
                backends: ctx.names.join(", "),
            });
        }
    }
    Ok(())
}

/// A view op only reinterprets its source's memory: it lives where the source does, even
/// when pinned elsewhere.
fn views_follow_their_source(ctx: &Context, a: &mut Assignment) -> Result<()> {
    let g = ctx.graph;
    for &id in g.nodes() {
        let t = g.tensor(id)?;
        if let Some(b) = t.view_src().filter(|_| t.op().is_view()).and_then(|root| a.get(root)) {
            if a.get(id) != Some(b) {
                a.set(id, b, Cause::ViewSource);
            }
        }
    }
    Ok(())
}

/// Every node has a backend (a view whose source was assigned late too).
fn check_every_node_assigned(ctx: &Context, a: &Assignment) -> Result<()> {
    let g = ctx.graph;
    for &id in g.nodes() {
        if a.get(id).is_none() {
            return Err(Error::InvalidParam { op: "SCHEDULE", message: format!("'{}' has no backend", g.label(id)) });
        }
    }
    Ok(())
}

/// One sweep of pass 2: carry the last assignment seen (`gpu_only`: a CPU assignment stops the
/// carry) onto unassigned nodes that the carried backend supports.
fn expand(ctx: &Context, a: &mut Assignment, order: impl Iterator<Item = TensorId>, gpu_only: bool) {
    let mut carry: Option<usize> = None;
    for id in order {
        match a.get(id) {
            Some(b) if gpu_only && b == ctx.cpu() => carry = None,
            Some(b) => carry = Some(b),
            None => {
                if let Some(b) = carry.filter(|&b| ctx.supports(b, id)) {
                    a.set(id, b, if gpu_only { Cause::ExpandGpu } else { Cause::Expand });
                }
            }
        }
    }
}
