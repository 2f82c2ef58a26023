//! The graph allocator: plans a graph's compute memory by liveness and binds it.
//!
//! Planning walks the nodes in order, placing each result with the [`DynamicPlanner`] and
//! freeing each tensor after its last consumer, so memory is reused as soon as it is dead.
//! Inputs are placed first so they never share memory; outputs are never freed; ops that
//! tolerate it take over the memory of an operand that has no other use (in place). Tensors
//! that already have memory of their own (weights, caches) are left where they are.
//!
//! Each tensor is assigned a *slot*; every slot has a buffer type, and slots of the same
//! buffer type share one compute buffer (one per chunk). `reserve` plans and sizes the
//! buffers; `alloc` binds a graph of the same shape to them without planning again.
//!
//! A backend that runs several consecutive nodes as one kernel (a fused run) reads every
//! operand of the run while it writes the run's result: [`GraphAllocator::set_runs`] names
//! such runs, and what their nodes read is then freed only after the run's last node.

use alloc::format;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;
use core::ops::Range;

use crate::allocator::planner::{Address, DynamicPlanner};
use crate::buffer::{same_buffer_type, Buffer, BufferType, BufferUsage, TensorData};
use crate::error::{Error, Result};
use crate::graph::Graph;
use crate::tensor::{TensorFlags, TensorId};

/// Where the plan put one tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Placement {
    /// Index of the buffer type (distinct types only).
    ty: usize,
    addr: Address,
    /// Bytes reserved (the buffer type's allocation size of the tensor that was placed).
    size: usize,
}

/// What a plan needs, per distinct buffer type.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BufferTypeReport {
    pub name: alloc::string::String,
    /// Bytes of all chunks.
    pub planned: usize,
    /// Chunks (buffers) used.
    pub chunks: usize,
    /// Tensors given memory (in-place results included).
    pub tensors: usize,
    /// Results that took over an operand's memory.
    pub in_place: usize,
    /// The largest sum of aligned sizes of tensors live at the same time: no placement in
    /// node order can need less.
    pub lower_bound: usize,
}

/// The memory a plan needs, per distinct buffer type.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlanReport {
    pub buffer_types: Vec<BufferTypeReport>,
}

impl fmt::Display for PlanReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for r in &self.buffer_types {
            let ratio = if r.lower_bound == 0 { 1.0 } else { r.planned as f64 / r.lower_bound as f64 };
            writeln!(
                f,
                "{}: planned {} B in {} chunk(s), lower bound {} B, ratio {:.3}, {} tensors, {} in-place",
                r.name, r.planned, r.chunks, r.lower_bound, ratio, r.tensors, r.in_place
            )?;
        }
        Ok(())
    }
}

struct TypeState<const MAX_FREE: usize, const MAX_CHUNKS: usize> {
    buffer_type: &'static dyn BufferType,
    planner: DynamicPlanner<MAX_FREE, MAX_CHUNKS>,
    buffers: Vec<Arc<dyn Buffer>>,
}

/// A plan: each tensor's placement, and the shape of the graph it was made for.
struct Plan {
    n_nodes: usize,
    n_leafs: usize,
    placements: Vec<Option<Placement>>,
    report: PlanReport,
}

/// Liveness bookkeeping of one tensor during planning.
#[derive(Clone, Copy, Default)]
struct Live {
    children: u32,
    views: u32,
    placement: Option<Placement>,
    /// The plan placed it and has not freed it or handed its memory to an in-place result.
    owned: bool,
}

/// Plans and binds compute memory for graphs over one or more buffer types.
///
/// `MAX_FREE` and `MAX_CHUNKS` bound the planner's tables per buffer type.
pub struct GraphAllocator<const MAX_FREE: usize = 256, const MAX_CHUNKS: usize = 16> {
    /// For each slot, the index of its distinct buffer type in `types`.
    slot_type: Vec<usize>,
    types: Vec<TypeState<MAX_FREE, MAX_CHUNKS>>,
    plan: Option<Plan>,
    /// Changes exactly when a tensor placed by this allocator may have moved.
    generation: u64,
    /// Fused runs, as ranges of node indices, sorted ([`Self::set_runs`]).
    runs: Vec<Range<usize>>,
}

impl<const MAX_FREE: usize, const MAX_CHUNKS: usize> GraphAllocator<MAX_FREE, MAX_CHUNKS> {
    /// An allocator with one slot per entry of `slot_types`; slots of the same buffer type
    /// share memory. Running out of memory for its tables is the allocation error handler's
    /// business, as for any collection; [`try_new`](Self::try_new) reports it instead.
    pub fn new(slot_types: &[&'static dyn BufferType]) -> Self {
        match Self::try_new(slot_types) {
            Ok(allocator) => allocator,
            Err(_) => alloc::alloc::handle_alloc_error(core::alloc::Layout::new::<TypeState<MAX_FREE, MAX_CHUNKS>>()),
        }
    }

    /// Like [`new`](Self::new), but running out of memory for the tables is
    /// [`Error::OutOfMemory`].
    pub fn try_new(slot_types: &[&'static dyn BufferType]) -> Result<Self> {
        Self::with_sharing(slot_types, true)
    }

    /// Like [`try_new`](Self::try_new), but every slot has memory of its own even where
    /// buffer types repeat: slots that run concurrently (two streams of one GPU) must not
    /// reuse each other's memory.
    pub fn try_new_per_slot(slot_types: &[&'static dyn BufferType]) -> Result<Self> {
        Self::with_sharing(slot_types, false)
    }

    fn with_sharing(slot_types: &[&'static dyn BufferType], share: bool) -> Result<Self> {
        let mut types: Vec<TypeState<MAX_FREE, MAX_CHUNKS>> = Vec::new();
        let mut slot_type = Vec::new();
        try_reserve(&mut slot_type, slot_types.len())?;
        for &bt in slot_types {
            let shared = types.iter().position(|t| same_buffer_type(t.buffer_type, bt)).filter(|_| share);
            let index = match shared {
                Some(i) => i,
                None => {
                    try_reserve(&mut types, 1)?;
                    types.push(TypeState {
                        buffer_type: bt,
                        planner: DynamicPlanner::new(bt.alignment(), bt.max_size()),
                        buffers: Vec::new(),
                    });
                    types.len() - 1
                }
            };
            slot_type.push(index);
        }
        Ok(GraphAllocator { slot_type, types, plan: None, generation: 0, runs: Vec::new() })
    }

    /// Names the runs of consecutive nodes (ranges of indices into the graph's nodes) that a
    /// backend computes as one kernel: the tensors a run's nodes read stay allocated until
    /// its last node, so the run's result never lands on memory the kernel still reads.
    /// Runs replace those given before; other runs than the last plan's drop that plan, so
    /// the next `alloc` plans again. Overlapping runs count as one run over both.
    pub fn set_runs(&mut self, runs: &[Range<usize>]) -> Result<()> {
        let mut sorted = Vec::new();
        try_reserve(&mut sorted, runs.len())?;
        sorted.extend(runs.iter().filter(|r| r.end > r.start + 1).cloned());
        sorted.sort_unstable_by_key(|r| (r.start, r.end));
        if sorted != self.runs {
            self.runs = sorted;
            self.plan = None;
        }
        Ok(())
    }

    /// The layout generation: it changes exactly when a tensor this allocator binds may have
    /// moved (a new plan placed something elsewhere, or a compute buffer was replaced by a
    /// larger one), so a program recorded against the old addresses must be updated.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Keeps `plan`, moving to a new layout generation if it places anything elsewhere than
    /// the plan it replaces.
    fn adopt(&mut self, plan: Plan) -> &Plan {
        if self.plan.as_ref().is_none_or(|old| old.placements != plan.placements) {
            self.generation += 1;
        }
        self.plan.insert(plan)
    }

    /// The report of the last plan.
    pub fn report(&self) -> Option<&PlanReport> {
        self.plan.as_ref().map(|p| &p.report)
    }

    /// Bytes of compute buffers held for `slot` (0 for a slot sharing an earlier slot's type).
    pub fn buffer_size(&self, slot: usize) -> usize {
        let Some(&ty) = self.slot_type.get(slot) else { return 0 };
        if self.slot_type[..slot].contains(&ty) {
            return 0;
        }
        self.types[ty].buffers.iter().map(|b| b.size()).sum()
    }

    fn type_of(&self, graph: &Graph, slots: Option<&[usize]>, id: TensorId) -> Result<usize> {
        let slot = match slots {
            None => 0,
            Some(s) => *s.get(id.index()).ok_or_else(|| Error::InvalidParam {
                op: "ALLOC",
                message: format!(
                    "no slot given for tensor '{}' (got {} slots for {} tensors)",
                    graph.label(id),
                    s.len(),
                    graph.tensors().len()
                ),
            })?,
        };
        self.slot_type.get(slot).copied().ok_or_else(|| Error::InvalidParam {
            op: "ALLOC",
            message: format!(
                "tensor '{}' is assigned slot {slot}, but the allocator has {} slots",
                graph.label(id),
                self.slot_type.len()
            ),
        })
    }

    /// Plans `graph` (with `slots[tensor]` choosing each tensor's slot; `None` = all slot 0)
    /// and grows the compute buffers to fit. Does not bind anything.
    pub fn reserve(&mut self, graph: &Graph, slots: Option<&[usize]>) -> Result<&PlanReport> {
        let plan = self.make_plan(graph, slots)?;
        for t in &mut self.types {
            for (chunk, size) in t.planner.chunk_sizes().enumerate() {
                let fits = t.buffers.get(chunk).is_some_and(|b| b.size() >= size);
                if fits {
                    continue;
                }
                let buffer = t.buffer_type.alloc_buffer(size)?;
                buffer.set_usage(BufferUsage::Compute);
                self.generation += 1;
                match t.buffers.get_mut(chunk) {
                    Some(old) => *old = buffer,
                    None => {
                        try_reserve(&mut t.buffers, 1)?;
                        t.buffers.push(buffer);
                    }
                }
            }
        }
        Ok(&self.adopt(plan).report)
    }

    /// Binds `graph`'s tensors to the compute buffers, planning again (and growing buffers)
    /// only if the graph differs from the last plan: other node or leaf counts, a tensor larger
    /// than its place, or a tensor assigned another buffer type.
    pub fn alloc(&mut self, graph: &mut Graph, slots: Option<&[usize]>) -> Result<()> {
        if self.needs_replan(graph, slots)? {
            self.reserve(graph, slots)?;
        }
        self.bind(graph)
    }

    /// Like `alloc`, but never grows the buffers: a graph that needs more memory than they
    /// hold is an error.
    pub fn alloc_within(&mut self, graph: &mut Graph, slots: Option<&[usize]>) -> Result<()> {
        if self.needs_replan(graph, slots)? {
            // A failed attempt leaves no plan: the next graph is planned afresh.
            let plan = self.make_plan(graph, slots).inspect_err(|_| self.plan = None)?;
            for t in &self.types {
                for (chunk, need) in t.planner.chunk_sizes().enumerate() {
                    let have = t.buffers.get(chunk).map_or(0, |b| b.size());
                    if need > have {
                        self.plan = None;
                        return Err(Error::OutOfMemory {
                            what: format!(
                                "the graph in chunk {chunk} of the {} compute buffer, where {have} bytes were reserved",
                                t.buffer_type.name()
                            ),
                            requested: need,
                        });
                    }
                }
            }
            self.adopt(plan);
        }
        self.bind(graph)
    }

    fn bind(&self, graph: &mut Graph) -> Result<()> {
        let Some(plan) = &self.plan else { return Ok(()) };
        for t in &self.types {
            t.buffers.iter().for_each(|b| b.reset());
        }
        for (i, p) in plan.placements.iter().enumerate() {
            let Some(p) = p else { continue };
            let buffer = self.types[p.ty].buffers.get(p.addr.chunk).ok_or_else(|| Error::InvalidParam {
                op: "ALLOC",
                message: format!("chunk {} of the plan has no buffer", p.addr.chunk),
            })?;
            graph.bind_planned(TensorId(i as u32), TensorData { buffer: buffer.clone(), offset: p.addr.offset })?;
        }
        Ok(())
    }

    fn needs_replan(&self, graph: &Graph, slots: Option<&[usize]>) -> Result<bool> {
        let Some(plan) = &self.plan else { return Ok(true) };
        if plan.n_nodes != graph.nodes().len() || plan.n_leafs != graph.leafs().len() {
            return Ok(true);
        }
        for &id in graph.leafs().iter().chain(graph.nodes()) {
            let t = graph.tensor(id)?;
            if !graph.is_plannable(id) {
                continue;
            }
            let ty = self.type_of(graph, slots, id)?;
            match plan.placements.get(id.index()).copied().flatten() {
                Some(p) if p.ty == ty && p.size >= self.types[ty].buffer_type.alloc_size(t) => {}
                _ => return Ok(true),
            }
        }
        Ok(false)
    }

    fn make_plan(&mut self, graph: &Graph, slots: Option<&[usize]>) -> Result<Plan> {
        let n = graph.tensors().len();
        let mut live = Vec::new();
        try_reserve(&mut live, n)?;
        live.resize(n, Live::default());
        // Memory of an output, or of a tensor an output views, is never freed or taken over.
        let mut keep = Vec::new();
        try_reserve(&mut keep, n)?;
        keep.resize(n, false);
        for &id in graph.leafs().iter().chain(graph.nodes()) {
            let t = graph.tensor(id)?;
            if t.flags().contains(TensorFlags::OUTPUT) {
                keep[t.view_src().unwrap_or(id).index()] = true;
            }
        }
        let n_types = self.types.len();
        let mut live_bytes = Vec::new();
        try_reserve(&mut live_bytes, n_types)?;
        live_bytes.resize(n_types, 0);
        let mut report = PlanReport::default();
        try_reserve(&mut report.buffer_types, n_types)?;
        for t in &self.types {
            let name = t.buffer_type.name();
            let mut owned = alloc::string::String::new();
            owned.try_reserve_exact(name.len()).map_err(|_| table_oom(name.len()))?;
            owned.push_str(name);
            report.buffer_types.push(BufferTypeReport { name: owned, ..Default::default() });
        }
        let mut slot_types = Vec::new();
        try_reserve(&mut slot_types, n)?;
        for i in 0..n {
            slot_types.push(self_type(&self.slot_type, graph, slots, TensorId(i as u32))?);
        }
        for t in self.types.iter_mut() {
            t.planner.reset();
        }
        let mut run_last = Vec::new();
        try_reserve(&mut run_last, graph.nodes().len())?;
        run_last.extend(0..graph.nodes().len());
        for r in &self.runs {
            let end = r.end.min(run_last.len());
            for last in run_last.get_mut(r.start..end).unwrap_or_default() {
                *last = (*last).max(end - 1);
            }
        }
        let mut planning = Planning { graph, live, keep, types: &mut self.types, live_bytes, report, run_last };
        planning.run(&slot_types)?;
        let Planning { live, types, mut report, .. } = planning;
        for (r, t) in report.buffer_types.iter_mut().zip(types.iter()) {
            r.planned = t.planner.total_size();
            r.chunks = t.planner.chunk_sizes().count();
        }
        let mut placements = Vec::new();
        try_reserve(&mut placements, n)?;
        placements.extend(live.iter().map(|l| l.placement));
        Ok(Plan { n_nodes: graph.nodes().len(), n_leafs: graph.leafs().len(), placements, report })
    }
}

/// The buffer-type index of a tensor's slot (a free function so planning can borrow `types`).
fn self_type(slot_type: &[usize], graph: &Graph, slots: Option<&[usize]>, id: TensorId) -> Result<usize> {
    let slot = slots.map_or(Some(0), |s| s.get(id.index()).copied()).ok_or_else(|| Error::InvalidParam {
        op: "ALLOC",
        message: format!("no slot given for tensor '{}' ({} tensors)", graph.label(id), graph.tensors().len()),
    })?;
    slot_type.get(slot).copied().ok_or_else(|| Error::InvalidParam {
        op: "ALLOC",
        message: format!(
            "tensor '{}' is assigned slot {slot}, but the allocator has {} slots",
            graph.label(id),
            slot_type.len()
        ),
    })
}

fn table_oom(bytes: usize) -> Error {
    crate::fallible::out_of_memory("graph allocator tables", bytes)
}

/// `v.try_reserve_exact(n)`, failing with `Error::OutOfMemory`.
fn try_reserve<T>(v: &mut Vec<T>, n: usize) -> Result<()> {
    v.try_reserve_exact(n).map_err(|_| table_oom(n.saturating_mul(core::mem::size_of::<T>())))
}

/// The state of one planning pass.
struct Planning<'a, const MAX_FREE: usize, const MAX_CHUNKS: usize> {
    graph: &'a Graph,
    live: Vec<Live>,
    /// Tensors whose memory must survive the whole compute (outputs and what they view).
    keep: Vec<bool>,
    types: &'a mut [TypeState<MAX_FREE, MAX_CHUNKS>],
    /// Aligned bytes currently live, per buffer type.
    live_bytes: Vec<usize>,
    report: PlanReport,
    /// For each node, the index of the last node of its fused run (its own outside runs).
    run_last: Vec<usize>,
}

impl<const MAX_FREE: usize, const MAX_CHUNKS: usize> Planning<'_, MAX_FREE, MAX_CHUNKS> {
    fn run(&mut self, slot_types: &[usize]) -> Result<()> {
        let g = self.graph;
        for &leaf in g.leafs() {
            self.place(leaf, slot_types)?;
        }
        // Count consumers and views; place inputs now so that no two inputs share memory.
        for &node in g.nodes() {
            let t = g.tensor(node)?;
            // Nodes without an op that point at a tensor (the scheduler's dependency markers)
            // keep it alive as consumers, not as views.
            if let (Some(vs), false) = (t.view_src(), t.op() == crate::op::Op::None) {
                self.live[vs.index()].views += 1;
            }
            if t.flags().contains(TensorFlags::INPUT) {
                self.place(node, slot_types)?;
            }
            for (_, src) in t.srcs() {
                self.live[src.index()].children += 1;
                if g.tensor(src)?.flags().contains(TensorFlags::INPUT) {
                    self.place(src, slot_types)?;
                }
            }
        }
        // Operands read by the nodes of the current fused run, released at its last node.
        let mut read = Vec::new();
        let mut last = 0;
        for (i, &node) in g.nodes().iter().enumerate() {
            let t = g.tensor(node)?;
            for (_, src) in t.srcs() {
                self.place(src, slot_types)?;
            }
            if !self.place_in_place(node, slot_types)? {
                self.place(node, slot_types)?;
            }
            try_reserve(&mut read, crate::tensor::MAX_SRC)?;
            read.extend(t.srcs().map(|(_, src)| src));
            last = last.max(self.run_last.get(i).copied().unwrap_or(i));
            if last <= i {
                for src in read.drain(..) {
                    self.release(src)?;
                }
            }
        }
        Ok(())
    }

    /// Gives `id` fresh memory if it needs some and has none yet.
    fn place(&mut self, id: TensorId, slot_types: &[usize]) -> Result<()> {
        if !self.graph.is_plannable(id) || self.live[id.index()].placement.is_some() {
            return Ok(());
        }
        let ty = slot_types[id.index()];
        let state = &mut self.types[ty];
        let size = state.buffer_type.alloc_size(self.graph.tensor(id)?);
        let addr = state.planner.alloc(size)?;
        let aligned = state.planner.aligned(size)?;
        self.live[id.index()].placement = Some(Placement { ty, addr, size });
        self.live[id.index()].owned = true;
        self.live_bytes[ty] += aligned;
        let r = &mut self.report.buffer_types[ty];
        r.tensors += 1;
        r.lower_bound = r.lower_bound.max(self.live_bytes[ty]);
        Ok(())
    }

    /// Gives `node` the memory of an operand it may overwrite; false if none qualifies.
    fn place_in_place(&mut self, node: TensorId, slot_types: &[usize]) -> Result<bool> {
        let g = self.graph;
        let t = g.tensor(node)?;
        if !t.op().can_inplace() || !g.is_plannable(node) || self.live[node.index()].placement.is_some() {
            return Ok(false);
        }
        let ty = slot_types[node.index()];
        for (_, src) in t.srcs() {
            let s = g.tensor(src)?;
            let ls = self.live[src.index()];
            if !s.same_layout(t) || ls.children != 1 || ls.views != 0 {
                continue;
            }
            // The memory to take over: the operand's own, or (for a view) its source's.
            let owner = match s.view_src() {
                Some(vs) => {
                    let lv = self.live[vs.index()];
                    if lv.views != 1 || lv.children != 0 || s.view_offset() != 0 {
                        continue;
                    }
                    vs
                }
                None => src,
            };
            let lo = self.live[owner.index()];
            match lo.placement {
                Some(p) if lo.owned && !self.keep[owner.index()] && p.ty == ty => {
                    self.live[owner.index()].owned = false;
                    self.live[node.index()] = Live { placement: Some(p), owned: true, ..self.live[node.index()] };
                    let r = &mut self.report.buffer_types[ty];
                    r.tensors += 1;
                    r.in_place += 1;
                    return Ok(true);
                }
                _ => continue,
            }
        }
        Ok(false)
    }

    /// One consumer of `src` is done: free it (or the tensor it views) once nothing needs it.
    fn release(&mut self, src: TensorId) -> Result<()> {
        let l = &mut self.live[src.index()];
        l.children = l.children.saturating_sub(1);
        if l.children != 0 || l.views != 0 {
            return Ok(());
        }
        match self.graph.tensor(src)?.view_src() {
            Some(vs) => {
                let lv = &mut self.live[vs.index()];
                lv.views = lv.views.saturating_sub(1);
                if lv.views == 0 && lv.children == 0 {
                    self.free(vs)?;
                }
                Ok(())
            }
            None => self.free(src),
        }
    }

    fn free(&mut self, id: TensorId) -> Result<()> {
        let l = self.live[id.index()];
        let Some(p) = l.placement.filter(|_| l.owned && !self.keep[id.index()]) else { return Ok(()) };
        let planner = &mut self.types[p.ty].planner;
        planner.free(p.addr, p.size)?;
        self.live_bytes[p.ty] -= planner.aligned(p.size)?;
        self.live[id.index()].owned = false;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
