//! The scheduler's programs: each split of a plan is prepared by its backend once, run on
//! every compute, updated when tensors moved, and prepared again only when the plan changed.
//!
//! A plan is recognised by a fingerprint of the scheduled graph's structure (types, shapes,
//! strides, ops, sources, views, flags) and its splits; a layout by the graph allocator's
//! generation together with the addresses of the tensors it does not place (weights, tensors
//! the caller bound).

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::hash::{Hash, Hasher};
use core::ops::Range;

use crate::backend::{Backend, Program, SplitRef};
use crate::error::Result;
use crate::graph::Graph;
use crate::op_code::{dtype_id, encode_op};
use crate::sched::split::Split;
use crate::tensor::TensorFlags;

/// FNV-1a: a fixed, allocation-free hash (the same input gives the same value in every run).
struct Fnv(u64);

impl Fnv {
    fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

/// What identifies a plan: the structure of the scheduled graph and its splits.
pub(crate) fn plan_fingerprint(graph: &Graph, splits: &[Split]) -> u64 {
    let mut h = Fnv::new();
    graph.tensors().len().hash(&mut h);
    for t in graph.tensors() {
        dtype_id(t.dtype).hash(&mut h);
        t.ne.hash(&mut h);
        t.nb.hash(&mut h);
        encode_op(t.op).hash(&mut h);
        t.src.hash(&mut h);
        t.view_src.hash(&mut h);
        t.view_offset.hash(&mut h);
        [TensorFlags::INPUT, TensorFlags::OUTPUT, TensorFlags::PARAM].map(|f| t.flags.contains(f)).hash(&mut h);
    }
    graph.nodes().hash(&mut h);
    graph.leafs().hash(&mut h);
    for s in splits {
        (s.backend, s.nodes.start, s.nodes.end).hash(&mut h);
    }
    h.finish()
}

/// What identifies a layout: the allocator's generation and where every tensor that the
/// allocator did not place lives (buffer identity and offset).
pub(crate) fn layout_stamp(graph: &Graph, allocator_generation: u64) -> u64 {
    let mut h = Fnv::new();
    allocator_generation.hash(&mut h);
    for (i, t) in graph.tensors().iter().enumerate() {
        if t.flags.contains(TensorFlags::PLANNED) {
            continue;
        }
        if let Some(d) = &t.data {
            (i, alloc::sync::Arc::as_ptr(&d.buffer).cast::<u8>() as usize, d.offset).hash(&mut h);
        }
    }
    h.finish()
}

/// How many nodes read each tensor of `graph` (a view's reads count for its source too),
/// outputs counted once more.
pub fn consumer_counts(graph: &Graph) -> Result<Vec<u32>> {
    let mut counts = Vec::new();
    counts
        .try_reserve_exact(graph.tensors().len())
        .map_err(|_| crate::fallible::out_of_memory("consumer counts", graph.tensors().len() * 4))?;
    counts.resize(graph.tensors().len(), 0u32);
    for &id in graph.nodes() {
        let t = graph.tensor(id)?;
        for (_, s) in t.srcs() {
            counts[s.index()] = counts[s.index()].saturating_add(1);
            if let Some(root) = graph.tensor(s)?.view_src {
                counts[root.index()] = counts[root.index()].saturating_add(1);
            }
        }
        if t.flags.contains(TensorFlags::OUTPUT) {
            counts[id.index()] = counts[id.index()].saturating_add(1);
        }
    }
    Ok(counts)
}

/// The runs of nodes that the backends of `splits` compute as one kernel, each inside its
/// split (a run reaching outside its split is ignored).
pub(crate) fn fused_runs(
    backends: &[Box<dyn Backend>],
    graph: &Graph,
    splits: &[Split],
    consumers: &[u32],
) -> Result<Vec<Range<usize>>> {
    let mut runs = Vec::new();
    let mut failed = false;
    for split in splits {
        let Some(backend) = backends.get(split.backend) else { continue };
        let split_ref = SplitRef { graph, nodes: split.nodes.clone(), consumers, layout: 0 };
        backend.fused_runs(&split_ref, &mut |run| {
            let inside = split.nodes.start <= run.start && run.end <= split.nodes.end;
            if !inside || failed {
                return;
            }
            match runs.try_reserve(1) {
                Ok(()) => runs.push(run),
                Err(_) => failed = true,
            }
        });
    }
    if failed {
        return Err(crate::fallible::out_of_memory("fused runs", runs.len() * core::mem::size_of::<Range<usize>>()));
    }
    Ok(runs)
}

/// The programs of one plan in one pipeline slot, prepared as their splits first run.
pub(crate) struct SlotPrograms {
    fingerprint: u64,
    layout: u64,
    programs: Vec<Option<Box<dyn Program>>>,
    /// Prepared before the layout last changed: update before running.
    stale: Vec<bool>,
}

/// How many times programs were prepared and updated (for tests and debugging).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProgramStats {
    pub prepared: u64,
    pub updated: u64,
}

impl SlotPrograms {
    /// Readies `slot` for a compute of the plan `fingerprint` with `n_splits` splits in
    /// layout `layout`: programs of the same plan are kept (marked for an update if the
    /// layout changed), those of another plan dropped.
    pub(crate) fn begin(slot: &mut Option<SlotPrograms>, fingerprint: u64, layout: u64, n_splits: usize) -> Result<()> {
        if let Some(p) = slot.as_mut().filter(|p| p.fingerprint == fingerprint && p.programs.len() == n_splits) {
            if p.layout != layout {
                p.stale.iter_mut().for_each(|s| *s = true);
                p.layout = layout;
            }
            return Ok(());
        }
        *slot = None;
        let mut programs = Vec::new();
        let mut stale = Vec::new();
        let oom = |_| crate::fallible::out_of_memory("split programs", n_splits);
        programs.try_reserve_exact(n_splits).map_err(oom)?;
        stale.try_reserve_exact(n_splits).map_err(oom)?;
        programs.resize_with(n_splits, || None);
        stale.resize(n_splits, false);
        *slot = Some(SlotPrograms { fingerprint, layout, programs, stale });
        Ok(())
    }

    /// The program of split `i`, prepared or updated by `backend` first if it must be.
    pub(crate) fn ready(
        &mut self,
        i: usize,
        backend: &mut dyn Backend,
        split: &SplitRef<'_>,
        stats: &mut ProgramStats,
    ) -> Result<&mut dyn Program> {
        let (Some(program), Some(stale)) = (self.programs.get_mut(i), self.stale.get_mut(i)) else {
            return Err(crate::error::Error::InvalidParam {
                op: "SCHEDULER",
                message: alloc::format!("split {i} is not part of the plan"),
            });
        };
        match program {
            Some(p) if *stale => {
                backend.update(p, split)?;
                stats.updated += 1;
            }
            Some(_) => {}
            None => {
                *program = Some(backend.prepare(split)?);
                stats.prepared += 1;
            }
        }
        *stale = false;
        match program {
            Some(p) => Ok(&mut **p),
            None => Err(crate::error::Error::InvalidParam { op: "SCHEDULER", message: "no program".into() }),
        }
    }
}
