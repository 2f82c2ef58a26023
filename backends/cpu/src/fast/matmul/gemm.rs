//! Float GEMM (F32, F16 and BF16 weights): cache-blocked and packed, around a register
//! micro-kernel.
//!
//! 1. All threads pack the activations of every batch into `[K][nr]` panels (shared; as
//!    large as the activations themselves, kept by the backend for the next product).
//! 2. Work items are blocks of `mc` weight rows by a range of column panels; a thread packs
//!    its block's weights `KC` values at a time into `[KC][mr]` panels (converting F16/BF16
//!    to f32 on the way) and runs the micro-kernel over every (column panel, row panel) pair.
//!    When the columns are split over several items and the weights are small, the weights
//!    are instead packed once, like the activations, in step 1 (`[K][mr]` panels, shared):
//!    otherwise every item of a row block would pack the same weights again.
//!
//! BF16 weights go to the table's `gemm_bf16` kernels, whose panels may hold two values of `k`
//! per slot ([`GemmKernels::k_pack`]); sizes and offsets below count slots.
//!
//! Each output value is computed by one item: `KC`-long partial sums, started from zero and
//! added to the output in increasing `k`, whatever the thread count.

use tessera_core::Result;

use super::operands::MatMul;
use super::tile::Tile;
use super::{rows_per_item, threads_for};
use crate::fast::parallel::{Team, WorkCounter};
use crate::fast::scratch::WorkMemory;
use crate::fast::simd::{GemmKernels, Kernels};
use tessera_core::DType;

/// Values of `k` per packed block: a `[KC][nr]` activation panel stays in L1 while the
/// weight panels of a block (`MC x KC` f32, 576 KB) stay in L2 (1 MB or more on the
/// processors this targets). Measured on a Xeon (2 MB L2): within 2% of the best sizes.
/// A multiple of every table's [`GemmKernels::k_block`], so that blocks start at whole
/// slots.
const KC: usize = 384;
/// Weight rows per work item (see [`KC`]).
const MC: usize = 384;
/// Largest packed weights (bytes) shared by all items rather than packed per item.
const SHARED_WEIGHTS_MAX: usize = 8 << 20;

pub fn run(kernels: &Kernels, team: &mut Team, memory: &mut WorkMemory, mm: &MatMul) -> Result<()> {
    let g: &GemmKernels = if mm.a_type == DType::BF16 { &kernels.gemm_bf16 } else { &kernels.gemm };
    let (mr, nr, k, m, n) = (g.mr, g.nr, mm.k, mm.m, mm.n);
    // Packed slots of `k` values.
    let slots = |k: usize| k.next_multiple_of(g.k_block) / g.k_pack;
    let batches = mm.batches();
    let panels = n.div_ceil(nr);
    let panel_len = slots(k) * nr;
    let kc_max = KC.min(k);
    let mc = rows_per_item(mr, MC);
    let row_blocks = m.div_ceil(mc);
    let threads = threads_for(team.threads(), mm.work());
    // Split the columns as well when blocks of rows alone give too few items to share.
    let split = (4 * threads).div_ceil(batches * row_blocks).clamp(1, panels);
    let panels_per_item = panels.div_ceil(split);
    let col_blocks = panels.div_ceil(panels_per_item);
    let items = batches * row_blocks * col_blocks;
    let m_panels = m.div_ceil(mr);
    let weights_floats = batches * m_panels * slots(k) * mr;
    let share_a = col_blocks > 1 && weights_floats * 4 <= SHARED_WEIGHTS_MAX;

    let b_floats = batches * panels * panel_len;
    let shared_bytes = (b_floats + if share_a { weights_floats } else { 0 }) * 4;
    let a_floats = if share_a { 0 } else { mc * slots(kc_max) };
    let regions = memory.reserve(shared_bytes, (a_floats + mr * nr) * 4, threads)?;
    let (to_pack, to_pack_a, to_compute) = (WorkCounter::new(), WorkCounter::new(), WorkCounter::new());

    team.run(threads, &|w| {
        let packed_b = regions.shared().cast::<f32>();
        while let Some(u) = to_pack.next(batches * panels) {
            let (batch, p) = (u / panels, u % panels);
            let cols = mm.activations(batch, p * nr, (n - p * nr).min(nr));
            // SAFETY: panel `u` of the shared region (sized for `batches * panels` panels);
            // each panel is written by the one thread that drew `u`.
            unsafe { (g.pack_b)(&cols, 0, k, nr, packed_b.add(u * panel_len)) };
        }
        // SAFETY: the shared weights follow the activations in the shared region.
        let shared_a = unsafe { packed_b.add(b_floats) };
        if share_a {
            while let Some(u) = to_pack_a.next(batches * m_panels) {
                let (batch, r0) = (u / m_panels, u % m_panels * mr);
                let rows = mm.weights(batch, r0, (m - r0).min(mr));
                // SAFETY: row panel `u` (`slots(k) * mr` floats) of the shared weights, written
                // by the one thread that drew `u`; the rows hold `k` values.
                unsafe { (g.pack_a)(&rows, 0, k, mr, shared_a.add(u * slots(k) * mr)) };
            }
        }
        w.barrier();

        let packed_a = regions.private(w.ith).cast::<f32>();
        // SAFETY: the private region holds `a_floats + mr * nr` floats.
        let edge = unsafe { packed_a.add(a_floats) };
        while let Some(item) = to_compute.next(items) {
            let batch = item / (row_blocks * col_blocks);
            let (rb, cb) = (item / col_blocks % row_blocks, item % col_blocks);
            let (i0, p0) = (rb * mc, cb * panels_per_item);
            let (row_panels, p1) = ((m - i0).min(mc).div_ceil(mr), (p0 + panels_per_item).min(panels));
            let c = mm.out(batch);
            for k0 in (0..k).step_by(KC) {
                let kc = KC.min(k - k0);
                // Row panel `ir` of this item: steps `k0..k0 + kc` of the shared weights, or
                // packed here into the private region.
                let panel_a = |ir: usize| {
                    if share_a {
                        // SAFETY: panel `i0 / mr + ir` of this batch's shared weights, from step `k0`.
                        unsafe { shared_a.add(((batch * m_panels + i0 / mr + ir) * slots(k) + slots(k0)) * mr) }
                    } else {
                        // SAFETY: the private region holds `mc / mr` panels of `slots(kc) * mr`
                        // floats.
                        unsafe { packed_a.add(ir * slots(kc) * mr) }
                    }
                };
                if !share_a {
                    for ir in 0..row_panels {
                        let r0 = i0 + ir * mr;
                        let rows = mm.weights(batch, r0, (m - r0).min(mr));
                        // SAFETY: the rows exist and hold values `k0..k0 + kc`; see `panel_a`.
                        unsafe { (g.pack_a)(&rows, k0, kc, mr, panel_a(ir)) };
                    }
                }
                for p in p0..p1 {
                    let j0 = p * nr;
                    // SAFETY: steps `k0..k0 + kc` of panel `p` of this batch.
                    let b = unsafe { packed_b.add((batch * panels + p) * panel_len + slots(k0) * nr) };
                    for ir in 0..row_panels {
                        let r0 = i0 + ir * mr;
                        // SAFETY: the output tile (rows `r0..`, columns `j0..`) belongs to this item
                        // alone; `a` and `b` hold `kc` packed steps (see above).
                        unsafe {
                            let a = panel_a(ir);
                            let tile =
                                Tile { c: c.add(j0 * m + r0), ldc: m, rows: (m - r0).min(mr), cols: (n - j0).min(nr) };
                            tile.compute(mr, nr, k0 > 0, edge, |c, ldc| (g.tile)(kc, a, b, c, ldc, k0 > 0));
                        }
                    }
                }
            }
        }
    })
}
