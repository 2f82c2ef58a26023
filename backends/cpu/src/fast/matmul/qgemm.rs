//! Int8 GEMM for Q8_0, Q4_0 and (where the kernel set has them) K-quant weights, the way ggml
//! does it: activations are quantized to 8-bit blocks once per product, each block pair's dot
//! product is an integer sum (`vpdpbusd` where present), scaled by the two block scales (and,
//! for K-quants, less the weights' min times the activations' block sum).
//!
//! 1. All threads quantize the activations of every batch into `nr`-column panels (shared).
//! 2. Work items are blocks of `mc` weight rows by a range of column panels; a thread packs
//!    its block's weights `KB` blocks at a time into int8 panels (`[8][mr][4]` bytes per
//!    block: one register of `vpdpbusd` operands per group of 4 values, nibbles unpacked)
//!    and runs the micro-kernel over every (column panel, row panel) pair.
//!
//! As in the float GEMM, each output value is computed by one item, block sums in increasing
//! `k`, whatever the thread count.

use tessera_core::{DType, Result};

use super::operands::MatMul;
use super::tile::Tile;
use super::{gather_column, rows_per_item, threads_for};
use crate::fast::parallel::{Team, WorkCounter};
use crate::fast::scratch::WorkMemory;
use crate::fast::simd::scalar::kquant::{zero_superblocks, KOut};
use crate::fast::simd::{
    kq_superblock_bytes, qa_block_bytes, qb_block_bytes, KQuantKernels, Kernels, QGemmTile, QuantOut, QK,
};

/// Blocks of 32 values per packed weight block (2048 values, whole K-quant super-blocks):
/// `KB` blocks of an activation panel stay in L1 while the `MC` rows' packed weights (590 KB,
/// 786 KB for K-quants) stay in L2.
const KB: usize = 64;
/// Weight rows per work item (see [`KB`]).
const MC: usize = 256;

/// The layouts and kernels of one product's int8 panels.
#[derive(Clone, Copy)]
enum Format {
    /// Q8_0 and Q4_0: a scale per block; weights stored `w + bias` when unsigned.
    Blocks { bias: i32 },
    /// K-quants: scales and mins per block (or half block, for Q6_K).
    KQuant(KQuantKernels),
}

impl Format {
    fn tile_size(self, kernels: &Kernels) -> (usize, usize) {
        match self {
            Format::Blocks { .. } => (kernels.qgemm.mr, kernels.qgemm.nr),
            Format::KQuant(k) => (k.mr, k.nr),
        }
    }

    /// Bytes per block of a weight panel of `mr` rows. K-quant panels go by super-blocks of
    /// 8 blocks, and every K-quant offset is a whole number of super-blocks, so this is their
    /// eighth (exact for the even tile sizes).
    fn a_block(self, mr: usize) -> usize {
        match self {
            Format::Blocks { .. } => qa_block_bytes(mr),
            Format::KQuant(_) => kq_superblock_bytes(mr) / 8,
        }
    }

    /// Bytes per block of an activation panel of `nr` columns (as [`Format::a_block`]).
    fn b_block(self, nr: usize) -> usize {
        match self {
            Format::Blocks { .. } => qb_block_bytes(nr),
            Format::KQuant(_) => kq_superblock_bytes(nr) / 8,
        }
    }
}

/// Computes `mm` (Q8_0 or Q4_0 weights, or K-quants when `kernels.kquant` exists).
pub fn run(kernels: &Kernels, team: &mut Team, memory: &mut WorkMemory, mm: &MatMul) -> Result<()> {
    let format = match kernels.kquant {
        Some(k) if matches!(mm.a_type, DType::Q4_K | DType::Q5_K | DType::Q6_K) => Format::KQuant(k),
        _ => Format::Blocks { bias: kernels.weight_bias(mm.a_type) },
    };
    let micro_kernel: QGemmTile = match format {
        Format::Blocks { .. } => match kernels.qgemm.q4_0_tile {
            Some(tile) if mm.a_type == DType::Q4_0 => tile,
            _ => kernels.qgemm.tile,
        },
        Format::KQuant(k) if mm.a_type == DType::Q6_K => k.tile_halves,
        Format::KQuant(k) => k.tile,
    };
    let ((mr, nr), m, n) = (format.tile_size(kernels), mm.m, mm.n);
    let (a_block, b_block) = (format.a_block(mr), format.b_block(nr));
    let nblocks = mm.k / QK;
    let batches = mm.batches();
    let panels = n.div_ceil(nr);
    let panel_bytes = nblocks * b_block;
    let kb_max = KB.min(nblocks);
    let mc = rows_per_item(mr, MC);
    let row_blocks = m.div_ceil(mc);
    let threads = threads_for(team.threads(), mm.work());
    let split = (4 * threads).div_ceil(batches * row_blocks).clamp(1, panels);
    let panels_per_item = panels.div_ceil(split);
    let col_blocks = panels.div_ceil(panels_per_item);
    let items = batches * row_blocks * col_blocks;
    let dense = mm.activations_dense();
    let unsigned = kernels.packs_unsigned(mm.a_type);

    let a_bytes = mc / mr * kb_max * a_block;
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
                let column = (p * nr + j < n).then(|| {
                    let col = mm.activations(batch, p * nr + j, 1);
                    // SAFETY: the column exists; the private region has room for `k` floats.
                    unsafe { gather_column(&col, mm.k, dense, private.add(column_at).cast()) }
                });
                // SAFETY: column `j` of the panel; `column` holds `nblocks * 32` values.
                unsafe { quantize_column(kernels, format, nr, column, nblocks, panel, j) };
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
                let a_panel = kb * a_block;
                for ir in 0..row_panels {
                    let r0 = i0 + ir * mr;
                    let rows = mm.weights(batch, r0, (m - r0).min(mr));
                    let dst = packed_a.wrapping_add(ir * a_panel);
                    // SAFETY: the rows exist and hold blocks `b0..b0 + kb` (whole super-blocks
                    // for K-quants: `KB` is a multiple of 8); panel `ir` fits.
                    unsafe {
                        match format {
                            Format::Blocks { .. } => (kernels.qgemm.pack_a)(&rows, b0, kb, mr, unsigned, dst),
                            Format::KQuant(k) => (k.pack_a)(&rows, b0, kb, mr, dst),
                        }
                    }
                }
                for p in p0..p1 {
                    let j0 = p * nr;
                    // SAFETY: blocks `b0..b0 + kb` of panel `p` of this batch.
                    let b = unsafe { packed_b.add((batch * panels + p) * panel_bytes + b0 * b_block) };
                    for ir in 0..row_panels {
                        let r0 = i0 + ir * mr;
                        // SAFETY: the output tile belongs to this item alone; `a` and `b` hold
                        // `kb` packed blocks.
                        unsafe {
                            let a = packed_a.add(ir * a_panel);
                            let tile =
                                Tile { c: c.add(j0 * m + r0), ldc: m, rows: (m - r0).min(mr), cols: (n - j0).min(nr) };
                            tile.compute(mr, nr, b0 > 0, edge, |c, ldc| micro_kernel(kb, a, b, c, ldc, b0 > 0));
                        }
                    }
                }
            }
        }
    })
}

/// Quantizes one activation column (`None`: a padding column of zeros) into column `j` of the
/// activation panel at `panel`, in `format`'s layout.
///
/// # Safety
/// `x` must hold `nblocks * 32` f32; `panel` must address `nblocks` blocks of an activation
/// panel of `nr` columns in `format`'s layout.
unsafe fn quantize_column(
    kernels: &Kernels,
    format: Format,
    nr: usize,
    x: Option<*const f32>,
    nblocks: usize,
    panel: *mut u8,
    j: usize,
) {
    match format {
        Format::Blocks { bias } => {
            let stride = format.b_block(nr);
            let out = QuantOut {
                q: panel.wrapping_add(j * QK),
                q_stride: stride,
                d: panel.wrapping_add(nr * QK + 4 * j),
                c: panel.wrapping_add(nr * (QK + 4) + 4 * j),
                dc_stride: stride,
            };
            match x {
                // SAFETY: `x` holds `nblocks * 32` values; `out` addresses `nblocks` blocks.
                Some(x) => unsafe { (kernels.quantize)(x, nblocks, bias, &out) },
                None => {
                    for b in 0..nblocks {
                        // SAFETY: block `b`'s slots of this column.
                        unsafe {
                            core::ptr::write_bytes(out.q.add(b * stride), 0, QK);
                            core::ptr::write_bytes(out.d.add(b * stride), 0, 4);
                            core::ptr::write_bytes(out.c.add(b * stride), 0, 4);
                        }
                    }
                }
            }
        }
        Format::KQuant(k) => {
            let out = KOut { panel, nr, column: j };
            match x {
                // SAFETY: `x` holds `nblocks * 32` values; `out` addresses `nblocks / 8`
                // super-blocks.
                Some(x) => unsafe { (k.quantize)(x, nblocks, &out) },
                // SAFETY: as the caller guarantees.
                None => unsafe { zero_superblocks(nblocks / 8, &out) },
            }
        }
    }
}
