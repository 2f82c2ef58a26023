//! Pass 5 of the scheduler: cut the node order into splits where the backend changes, create
//! the copies of the inputs each split needs, and build the graph that is allocated and run.
//!
//! The user's graph is cloned, never changed: the copies, and a dependency marker per input
//! that keeps the copied tensor alive until its split starts, are appended to the clone, and
//! the clone's nodes read the copies instead of the originals.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::vec::Vec;
use core::ops::Range;

use crate::buffer::BufferUsage;
use crate::error::{Error, Result};
use crate::graph::Graph;
use crate::op::Op;
use crate::sched::assign::{Assignment, Context};
use crate::tensor::{Tensor, TensorFlags, TensorId};

/// A tensor one split reads from another backend, and where its copies are.
#[derive(Clone, Debug)]
pub struct SplitInput {
    /// The tensor read (an id of the user's graph).
    pub tensor: TensorId,
    /// The backend it lives on.
    pub from: usize,
    /// One copy per pipeline slot, on the split's backend (ids of the scheduled graph).
    pub copies: Vec<TensorId>,
    /// A user input, copied from the host before the split (pipeline parallelism).
    pub user_input: bool,
    /// How the bytes travel.
    pub route: CopyRoute,
    /// The copies hold the values back to back: a window of a larger tensor in host memory
    /// (a transposed value cache read up to the filled positions) is gathered row by row, not
    /// sent with the whole range its rows are spread over.
    pub packed: bool,
    /// The tensor's name (for printing) and bytes copied per run.
    pub name: alloc::string::String,
    pub bytes: usize,
}

/// How a split input reaches its split's backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyRoute {
    /// To or from the host (an upload, a download, or a copy in host memory).
    Host,
    /// Within one device's memory, between two of its backends (streams).
    SameDevice,
    /// From another device directly, peer to peer (NVLink, PCIe).
    Peer,
    /// From another device through host memory (the two cannot reach each other).
    Staged,
}

impl CopyRoute {
    /// The route from a tensor on `from` to a backend on `to`.
    pub fn between(from: &dyn crate::Device, to: &dyn crate::Device) -> CopyRoute {
        if from.is_host_cpu() || to.is_host_cpu() {
            CopyRoute::Host
        } else if core::ptr::addr_eq(from, to) {
            CopyRoute::SameDevice
        } else if to.copies_peer_to_peer(from) {
            CopyRoute::Peer
        } else {
            CopyRoute::Staged
        }
    }

    /// What a plan prints after the copy (empty for host transfers).
    pub fn describe(self) -> &'static str {
        match self {
            CopyRoute::Host => "",
            CopyRoute::SameDevice => " (same device)",
            CopyRoute::Peer => " (peer to peer)",
            CopyRoute::Staged => " (staged through host memory)",
        }
    }
}

/// A run of consecutive nodes on one backend.
#[derive(Clone, Debug)]
pub struct Split {
    pub backend: usize,
    /// Indices into the scheduled graph's nodes.
    pub nodes: Range<usize>,
    pub inputs: Vec<SplitInput>,
}

/// The outcome of pass 5.
pub(crate) struct Cut {
    pub graph: Graph,
    pub splits: Vec<Split>,
    /// The backend (allocator slot) of every tensor of `graph`.
    pub slots: Vec<usize>,
}

struct Building {
    backend: usize,
    /// Dependency markers and (single-copy) copies, placed before the split's nodes.
    prologue: Vec<TensorId>,
    nodes: Vec<TensorId>,
    inputs: Vec<SplitInput>,
}

/// Whether a copy of `t`, on `from`, goes packed: host memory whose rows lie at least twice
/// as far apart as they would back to back.
fn packs(from: &dyn crate::Device, t: &Tensor) -> bool {
    from.is_host_cpu() && t.rows_contiguous() && !t.is_contiguous() && t.nbytes() >= 2 * t.packed_nbytes()
}

/// Cuts `ctx.graph` into splits using `a`, with `n_copies` copies per input (`cur_copy` is
/// the one this round reads) and at most `max_inputs` inputs per split.
pub(crate) fn cut(ctx: &Context, a: &Assignment, n_copies: usize, cur_copy: usize, max_inputs: usize) -> Result<Cut> {
    let g = ctx.graph;
    let mut out = g.clone();
    let mut backend_of: Vec<usize> = a.backend.iter().map(|b| b.unwrap_or(ctx.devices.len() - 1)).collect();
    let root = |id: TensorId| g.tensor(id).map(|t| t.view_src().unwrap_or(id));
    let backend = |id: TensorId| -> Result<usize> {
        a.get(id)
            .or(a.get(root(id)?))
            .ok_or_else(|| Error::InvalidParam { op: "SCHEDULE", message: format!("'{}' has no backend", g.label(id)) })
    };
    // Memory that a node writes into (CPY into a view) holds computed values, not the user's.
    let written: alloc::collections::BTreeSet<TensorId> = g
        .nodes()
        .iter()
        .filter_map(|&n| g.tensor(n).ok().filter(|t| !t.op().is_view()).and_then(|t| t.view_src()))
        .collect();
    let user_input = |id: TensorId| -> Result<bool> {
        let t = g.tensor(id)?;
        let computed = t.op() != Op::None && !t.op().is_view();
        let r = root(id)?;
        Ok(n_copies > 1 && !computed && !written.contains(&r) && g.tensor(r)?.flags().contains(TensorFlags::INPUT))
    };
    // Whether split backend `b` must get a copy of `src`.
    let needs_copy = |src: TensorId, b: usize| -> Result<bool> {
        let from = backend(src)?;
        // Two backends of one device run concurrently: what one computes reaches the other
        // as a copy, ordered between their streams and rotated with the pipeline, never by
        // reading memory the producer may already be reusing.
        let same_device = from != b && core::ptr::addr_eq(ctx.devices[from], ctx.devices[b]);
        let computed = same_device && g.tensor(root(src)?)?.op() != Op::None;
        Ok(user_input(src)? || (from != b && (computed || !ctx.can_read(a, b, src))))
    };

    let mut copies: BTreeMap<(TensorId, usize), Vec<TensorId>> = BTreeMap::new();
    let mut splits: Vec<Building> = Vec::new();
    let mut leading_views: Vec<TensorId> = Vec::new();
    for &id in g.nodes() {
        let t = g.tensor(id)?;
        if t.op().is_view() {
            match splits.last_mut() {
                Some(s) => s.nodes.push(id),
                None => leading_views.push(id),
            }
            continue;
        }
        let b = backend(id)?;
        let mut new_split = splits.last().is_none_or(|s| s.backend != b);
        if let Some(s) = splits.last().filter(|s| !new_split && !s.inputs.is_empty()) {
            // Weights from elsewhere: a new split lets the previous copies' memory be reused.
            // Too many new inputs for the table: the next split takes them.
            let mut fresh: Vec<TensorId> = Vec::new();
            for (_, src) in t.srcs() {
                if !needs_copy(src, b)? || copies.contains_key(&(src, b)) || fresh.contains(&src) {
                    continue;
                }
                if g.data(src).is_some_and(|d| d.buffer.usage() == BufferUsage::Weights) {
                    new_split = true;
                }
                fresh.push(src);
            }
            new_split |= s.inputs.len() + fresh.len() > max_inputs;
        }
        if new_split {
            splits.push(Building {
                backend: b,
                prologue: Vec::new(),
                nodes: core::mem::take(&mut leading_views),
                inputs: Vec::new(),
            });
        }
        let Some(split) = splits.last_mut() else { continue };
        for (slot, src) in t.srcs() {
            if !needs_copy(src, b)? {
                continue;
            }
            let key = (src, b);
            if let alloc::collections::btree_map::Entry::Vacant(entry) = copies.entry(key) {
                if split.inputs.len() >= max_inputs {
                    return Err(Error::CapacityExceeded { what: "inputs per split", limit: max_inputs });
                }
                let from = backend(src)?;
                // A marker that reads `src` at the start of the split keeps it alive until
                // it has been copied.
                let s = g.tensor(src)?;
                let packed = packs(ctx.devices[from], s) && !user_input(src)?;
                let mut marker = Tensor::new(s.dtype(), s.ne(), Op::None)?;
                marker.nb = s.nb();
                marker.src[0] = Some(src);
                marker.view_src = Some(root(src)?);
                marker.view_offset = s.view_offset();
                marker.name = format!("dep#{}", g.label(src));
                let marker = out.push(marker)?;
                backend_of.push(from);
                split.prologue.push(marker);
                let mut ids = Vec::with_capacity(n_copies);
                for c in 0..n_copies {
                    let mut copy = Tensor::new(s.dtype(), s.ne(), Op::None)?;
                    if !packed {
                        copy.nb = s.nb();
                    }
                    copy.name = format!("{}#{}#{c}", ctx.names[b], g.label(src));
                    if n_copies > 1 {
                        // Every pipeline slot keeps its memory for the whole run.
                        copy.flags.insert(TensorFlags::INPUT);
                        copy.flags.insert(TensorFlags::OUTPUT);
                    }
                    let copy = out.push(copy)?;
                    backend_of.push(b);
                    if n_copies == 1 {
                        split.prologue.push(copy);
                    }
                    ids.push(copy);
                }
                split.inputs.push(SplitInput {
                    tensor: src,
                    from,
                    copies: ids.clone(),
                    user_input: user_input(src)?,
                    route: CopyRoute::between(ctx.devices[from], ctx.devices[b]),
                    packed,
                    name: g.label(src),
                    bytes: if packed { s.packed_nbytes() } else { s.nbytes() },
                });
                entry.insert(ids);
            }
            if let Some(ids) = copies.get(&key) {
                out.tensor_mut(id)?.src[slot] = Some(ids[cur_copy]);
            }
        }
        split.nodes.push(id);
    }

    // The scheduled order: per split, its prologue then its nodes; every copy of a
    // pipelined run is a leaf, allocated up front.
    let mut nodes = Vec::with_capacity(out.tensors().len());
    let mut result = Vec::with_capacity(splits.len());
    for s in splits {
        let start = nodes.len();
        nodes.extend_from_slice(&s.prologue);
        nodes.extend_from_slice(&s.nodes);
        result.push(Split { backend: s.backend, nodes: start..nodes.len(), inputs: s.inputs });
    }
    let mut leafs = Vec::new();
    if n_copies > 1 {
        leafs.extend(copies.values().flatten().copied());
    }
    leafs.extend_from_slice(g.leafs());
    out.set_order(nodes, leafs);
    Ok(Cut { graph: out, splits: result, slots: backend_of })
}
