//! Int8 GEMM for Q8_0 and Q4_0 weights, the way ggml does it: activations are quantized to
//! 8-bit blocks once per product, each block pair's dot product is an integer sum
//! (`vpdpbusd` where present), scaled by the two block scales.
//!
//! 1. All threads quantize the activations of every batch into `nr`-column panels (shared).
//! 2. Work items are blocks of `mc` weight rows by a range of column panels; a thread packs
//!    its block's weights `KB` blocks at a time into int8 panels (`[8][mr][4]` bytes per
//!    block: one register of `vpdpbusd` operands per group of 4 values, Q4_0 nibbles
//!    unpacked) and runs the micro-kernel over every (column panel, row panel) pair.
//!
//! As in the float GEMM, each output value is computed by one item, block sums in increasing
//! `k`, whatever the thread count.

use tessera_core::Result;

use super::operands::MatMul;
use super::tile::Tile;
use super::{gather_column, rows_per_item, threads_for};
use crate::fast::parallel::{Team, WorkCounter};
use crate::fast::scratch::WorkMemory;
use crate::fast::simd::{qa_block_bytes, qb_block_bytes, Kernels, QuantOut, QK};

/// Blocks of 32 values per packed weight block (2048 values): `KB` blocks of an activation
/// panel stay in L1 while the `MC` rows' packed weights (590 KB) stay in L2.
const KB: usize = 64;
/// Weight rows per work item (see [`KB`]).
const MC: usize = 256;

pub fn run(kernels: &Kernels, team: &mut Team, memory: &mut WorkMemory, mm: &MatMul) -> Result<()> {
    let g = &kernels.qgemm;
    let (mr, nr, m, n) = (g.mr, g.nr, mm.m, mm.n);
    let nblocks = mm.k / QK;
    let batches = mm.batches();
    let panels = n.div_ceil(nr);
    let panel_bytes = nblocks * qb_block_bytes(nr);
    let kb_max = KB.min(nblocks);
    let mc = rows_per_item(mr, MC);
    let row_blocks = m.div_ceil(mc);
    let threads = threads_for(team.threads(), mm.work());
    let split = (4 * threads).div_ceil(batches * row_blocks).clamp(1, panels);
    let panels_per_item = panels.div_ceil(split);
    let col_blocks = panels.div_ceil(panels_per_item);
    let items = batches * row_blocks * col_blocks;
    let bias = kernels.weight_bias(mm.a_type);
    let dense = mm.activations_dense();

    let a_bytes = mc / mr * kb_max * qa_block_bytes(mr);
    // Private: packed weights, an edge tile, and one gathered activation column.
    let edge_at = a_bytes;
    let column_at = edge_at + mr * nr * 4;
    let private_bytes = column_at + if dense { 0 } else { mm.k * 4 };
    let regions = memory.reserve(batches * panels * panel_bytes, private_bytes, threads)?;
    let (to_quantize, to_compute) = (WorkCounter::new(), WorkCounter::new());

    team.run(threads, &|w| {
        let packed_b = regions.shared();
        let private = regions.private(w.ith);
        while let Some(u) = to_quantize.next(batches * panels) {
            let (batch, p) = (u / panels, u % panels);
            // SAFETY: panel `u` of the shared region, written only by the thread that drew `u`.
            let panel = unsafe { packed_b.add(u * panel_bytes) };
            for j in 0..nr {
                let out = QuantOut {
                    // SAFETY: column `j`'s slots inside block 0 of the panel.
                    q: unsafe { panel.add(j * QK) },
                    q_stride: qb_block_bytes(nr),
                    // SAFETY: column `j`'s scale slot, after block 0's `nr * 32` values.
                    d: unsafe { panel.add(nr * QK + 4 * j) },
                    // SAFETY: column `j`'s correction slot, after block 0's `nr` scales.
                    c: unsafe { panel.add(nr * (QK + 4) + 4 * j) },
                    dc_stride: qb_block_bytes(nr),
                };
                if p * nr + j < n {
                    let col = mm.activations(batch, p * nr + j, 1);
                    // SAFETY: the column exists; the private region has room for `k` floats.
                    let x = unsafe { gather_column(&col, mm.k, dense, private.add(column_at).cast()) };
                    // SAFETY: `x` holds `nblocks * 32` values; `out` addresses `nblocks` blocks.
                    unsafe { (kernels.quantize)(x, nblocks, bias, &out) };
                } else {
                    // Padding columns: zero values, scales and corrections.
                    for b in 0..nblocks {
                        // SAFETY: block `b`'s slots of this column.
                        unsafe {
                            core::ptr::write_bytes(out.q.add(b * out.q_stride), 0, QK);
                            core::ptr::write_bytes(out.d.add(b * out.dc_stride), 0, 4);
                            core::ptr::write_bytes(out.c.add(b * out.dc_stride), 0, 4);
                        }
                    }
                }
            }
        }
        w.barrier();

        // SAFETY: the private region holds `a_bytes` of packed weights, then `mr * nr` floats.
        let (packed_a, edge) = (private, unsafe { private.add(edge_at).cast::<f32>() });
        while let Some(item) = to_compute.next(items) {
            let batch = item / (row_blocks * col_blocks);
            let (rb, cb) = (item / col_blocks % row_blocks, item % col_blocks);
            let (i0, p0) = (rb * mc, cb * panels_per_item);
            let (row_panels, p1) = ((m - i0).min(mc).div_ceil(mr), (p0 + panels_per_item).min(panels));
            let c = mm.out(batch);
            for b0 in (0..nblocks).step_by(KB) {
                let kb = KB.min(nblocks - b0);
                let a_panel = kb * qa_block_bytes(mr);
                for ir in 0..row_panels {
                    let r0 = i0 + ir * mr;
                    let rows = mm.weights(batch, r0, (m - r0).min(mr));
                    // SAFETY: the rows exist and hold blocks `b0..b0 + kb`; panel `ir` fits.
                    unsafe { (g.pack_a)(&rows, b0, kb, mr, kernels.unsigned_weights, packed_a.add(ir * a_panel)) };
                }
                for p in p0..p1 {
                    let j0 = p * nr;
                    // SAFETY: blocks `b0..b0 + kb` of panel `p` of this batch.
                    let b = unsafe { packed_b.add((batch * panels + p) * panel_bytes + b0 * qb_block_bytes(nr)) };
                    for ir in 0..row_panels {
                        let r0 = i0 + ir * mr;
                        // SAFETY: the output tile belongs to this item alone; `a` and `b` hold
                        // `kb` packed blocks.
                        unsafe {
                            let a = packed_a.add(ir * a_panel);
                            let tile =
                                Tile { c: c.add(j0 * m + r0), ldc: m, rows: (m - r0).min(mr), cols: (n - j0).min(nr) };
                            tile.compute(mr, nr, b0 > 0, edge, |c, ldc| (g.tile)(kb, a, b, c, ldc, b0 > 0));
                        }
                    }
                }
            }
        }
    })
}
