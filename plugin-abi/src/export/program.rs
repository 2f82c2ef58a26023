//! Programs: the backend's `prepare`, `update`, `run` and `fused_runs` entries and the program
//! table.
//!
//! A split crosses once, when it is prepared (and again when an update moves its tensors).
//! The program keeps the graph it was decoded into, and `run` replays the wrapped backend's
//! program over that kept graph instead of decoding the host's graph again: between two
//! updates the host's graph has the same structure and addresses (that is what an unchanged
//! layout means), so the kept graph reads and writes the same memory. The host keeps that
//! memory valid until the program is updated or freed (host memory) or the kept graph holds
//! it (this plugin's buffers).

use alloc::boxed::Box;

use tessera_core::{Graph, Program, Result, SplitRef};

use super::backend::{check_range, exported as backend};
use super::{fallible, free_boxed, obj_mut, put, resolve, Exporter};
use crate::abi::{AbiBufferRef, AbiError, AbiGraph, Ctx};
use crate::desc::{decode_consumers, decode_graph};
use crate::tables::{AbiProgram, AbiProgramFns, BackendExports, ProgramExports};

/// A program handed to the host (its context, freed by the host's `free`).
struct ExportedProgram {
    /// The split as last prepared or updated, rebuilt from the host's descriptors.
    graph: Graph,
    program: Box<dyn Program>,
}

/// The graph `graph` describes, with the split's consumer counts, checked against the node
/// range.
///
/// # Safety
/// `graph` must be a valid graph descriptor whose buffer references follow the ABI.
unsafe fn decode_split(
    op: &'static str,
    graph: *const AbiGraph,
    first: usize,
    last: usize,
) -> Result<(Graph, alloc::vec::Vec<u32>)> {
    // SAFETY: forwarded from the caller.
    let g = unsafe { decode_graph(graph, Some(&mut |r: &AbiBufferRef| resolve(r))) }?;
    check_range(op, first, last, g.nodes().len())?;
    // SAFETY: forwarded from the caller.
    let consumers = unsafe { decode_consumers(graph, &g) }?;
    Ok((g, consumers))
}

impl<E: Exporter> ProgramExports<E> {
    const TABLE: &'static AbiProgramFns = &Self::table();

    pub(crate) unsafe extern "C" fn free(ctx: Ctx) {
        // SAFETY: `ctx` came from `Box::into_raw` in `prepare`; the host frees each program once.
        unsafe { free_boxed::<E, ExportedProgram>(ctx) }
    }
}

impl<E: Exporter> BackendExports<E> {
    pub(crate) unsafe extern "C" fn prepare(
        ctx: Ctx,
        graph: *const AbiGraph,
        first: usize,
        last: usize,
        layout: u64,
        out: *mut AbiProgram,
        err: *mut AbiError,
    ) -> i32 {
        fallible::<E>(err, "prepare", || {
            // SAFETY: the host passes a valid graph whose buffer references follow the ABI.
            let (graph, consumers) = unsafe { decode_split("PREPARE", graph, first, last) }?;
            if out.is_null() {
                return Err(super::null_output());
            }
            let split = SplitRef { graph: &graph, nodes: first..last, consumers: &consumers, layout };
            // SAFETY: `ctx` is a live backend context of this plugin.
            let program = unsafe { backend(ctx) }?.prepare(&split)?;
            let ctx = Box::into_raw(Box::new(ExportedProgram { graph, program })).cast();
            // SAFETY: non-null (checked above) and writable (the host's promise).
            unsafe { put(out, AbiProgram { fns: ProgramExports::<E>::TABLE, ctx }) }
        })
    }

    pub(crate) unsafe extern "C" fn update(
        ctx: Ctx,
        program: Ctx,
        graph: *const AbiGraph,
        first: usize,
        last: usize,
        layout: u64,
        err: *mut AbiError,
    ) -> i32 {
        fallible::<E>(err, "update", || {
            // SAFETY: the host passes a valid graph whose buffer references follow the ABI.
            let (graph, consumers) = unsafe { decode_split("UPDATE", graph, first, last) }?;
            // SAFETY: `program` is a live program context of this plugin, used by this thread.
            let p = unsafe { obj_mut::<ExportedProgram>(program) }?;
            let split = SplitRef { graph: &graph, nodes: first..last, consumers: &consumers, layout };
            // SAFETY: `ctx` is a live backend context of this plugin.
            unsafe { backend(ctx) }?.update(&mut p.program, &split)?;
            p.graph = graph;
            Ok(())
        })
    }

    #[allow(clippy::too_many_arguments)] // the ABI's entry
    pub(crate) unsafe extern "C" fn fused_runs(
        ctx: Ctx,
        graph: *const AbiGraph,
        first: usize,
        last: usize,
        out: *mut usize,
        cap: usize,
        count: *mut usize,
        err: *mut AbiError,
    ) -> i32 {
        fallible::<E>(err, "fused_runs", || {
            // SAFETY: the host passes a valid graph whose buffer references follow the ABI.
            let (graph, consumers) = unsafe { decode_split("FUSED_RUNS", graph, first, last) }?;
            if count.is_null() || (out.is_null() && cap > 0) {
                return Err(super::null_output());
            }
            let split = SplitRef { graph: &graph, nodes: first..last, consumers: &consumers, layout: 0 };
            let mut found = 0usize;
            // SAFETY: `ctx` is a live backend context of this plugin.
            unsafe { backend(ctx) }?.fused_runs(&split, &mut |run| {
                if found < cap {
                    // SAFETY: `out` holds `2 * cap` writable values (the host's promise), and
                    // `found < cap`.
                    unsafe {
                        out.add(2 * found).write(run.start);
                        out.add(2 * found + 1).write(run.end);
                    }
                }
                found = found.saturating_add(1);
            });
            // SAFETY: non-null (checked above) and writable (the host's promise).
            unsafe { put(count, found) }
        })
    }

    pub(crate) unsafe extern "C" fn run(ctx: Ctx, program: Ctx, err: *mut AbiError) -> i32 {
        fallible::<E>(err, "run", || {
            // SAFETY: `program` is a live program context of this plugin, used by this thread.
            let p = unsafe { obj_mut::<ExportedProgram>(program) }?;
            // SAFETY: `ctx` is a live backend context of this plugin.
            unsafe { backend(ctx) }?.run(&mut *p.program, &p.graph)
        })
    }
}
