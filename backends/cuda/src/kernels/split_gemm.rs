//! f32 products on TF32 tensor cores, near f32 accuracy: each operand is split into its TF32
//! part (rounded to a 10-bit mantissa, which a TF32 product takes exactly) and its f32
//! remainder, written into scratch as three runs of K values a row, and the runs are multiplied
//! as one TF32 GEMM over 3K: `a_lo b_hi + a_hi b_lo + a_hi b_hi`, the small terms first because
//! tensor cores add with truncation (parts first gave a test product 4x the error). About 21
//! bits of each operand take part, against 24 in f32 and 11 in one TF32 pass.
//!
//! The columns of `b` go through in chunks whose split copy takes at most [`CHUNK_BYTES`] (1
//! GiB), so that the scratch stays bounded whatever the batch; `a` (the weights) is split whole, and
//! products whose `a` would take more than [`MAX_A_BYTES`] are not split.
//!
//! Not IEEE-faithful for infinite operands: an infinity times a zero remainder is NaN where the
//! f32 product is infinite.

use std::sync::Arc;

use cudarc::driver::CudaStream;
use tessera_core::{DType, Result};

use super::arg::TensorArg;
use super::gemm_lt::LtGemm;
use super::launch::{div_ceil, launch_kernel};
use super::mul_mat::lt_gemm;
use super::scratch::{BLayout, F32Products};
use super::{names, Kernels, Scratch};

/// Multiply-adds from which `auto` splits a product: below, the three launches cost more than
/// the CUDA cores take.
pub(crate) const MIN_MACS: i64 = 1 << 28;

/// The least `m N / (m + N)` (half the harmonic mean of the result's rows `m` and columns `N`)
/// at which `auto` splits: the split writes and reads both operands three times over, which
/// pays only where each operand value takes part in enough products. On an H200, 384 x 2048 x
/// 384 (323) took 20.0 instead of 23.1 us on the CUDA cores; a 4096 x 14336 weight matrix
/// against 64 columns (63) would read 3.5 times the bytes of the memory-bound product.
const MIN_REUSE: i64 = 256;

/// Bytes of `a`'s split copy at most.
const MAX_A_BYTES: i64 = 256 << 20;

/// Bytes of the split copy of one chunk of `b`'s columns at most. (256 MiB chunks made
/// MiniLM's products over 1024 x 128 tokens 11-14% slower than one chunk: 9 smaller GEMMs for
/// the FFN's down projection, and a small last chunk.)
const CHUNK_BYTES: i64 = 1 << 30;

/// Rows a thread of the split kernels takes (`SPLIT_ROWS` in mul_mat.cu).
pub(crate) const SPLIT_ROWS: i64 = 4;

/// Bytes of the split copy of `values` f32 values (three runs of 4 bytes each).
fn split_bytes(values: i64) -> i64 {
    values.saturating_mul(12)
}

/// Whether a product of `m` rows, `cols` columns and depth `k`, one GEMM, is split in `mode`.
pub(crate) fn chosen(mode: F32Products, m: i64, cols: i64, k: i64) -> bool {
    let fits =
        k.checked_mul(3).is_some_and(|k3| k3 <= i64::from(i32::MAX)) && split_bytes(m.saturating_mul(k)) <= MAX_A_BYTES;
    let reuse = m.saturating_mul(cols) / m.saturating_add(cols).max(1);
    fits && match mode {
        F32Products::Split => true,
        F32Products::Auto => m.saturating_mul(cols).saturating_mul(k) >= MIN_MACS && reuse >= MIN_REUSE,
        F32Products::Exact | F32Products::Tf32 => false,
    }
}

/// Columns of `b` split at a time (of `cols`, `k` values each): as few chunks as fit
/// [`CHUNK_BYTES`], of equal widths.
fn chunk_cols(k: i64, cols: i64) -> i64 {
    let cols = cols.max(1);
    let most = (CHUNK_BYTES / split_bytes(k).max(1)).max(1);
    let chunks = (cols + most - 1) / most;
    (cols + chunks - 1) / chunks
}

/// Scratch bytes of a split product: `a`'s split copy, then one chunk of `b`'s, each rounded
/// up with `align`.
pub(crate) fn scratch_bytes(m: i64, cols: i64, k: i64, align: impl Fn(usize) -> usize) -> (usize, usize) {
    let bytes = |v: i64| align(usize::try_from(v).unwrap_or(usize::MAX));
    (bytes(split_bytes(m.saturating_mul(k))), bytes(split_bytes(k.saturating_mul(chunk_cols(k, cols)))))
}

/// A validated f32 product `d = a^T b` as one GEMM: `a` one matrix of `m` rows of `k` values,
/// `b`'s rows (over its dimensions 1 to 3, in order) the `cols` columns, `d`'s column `j` at
/// `d.data + 4 j ldc`.
pub(crate) struct SplitProduct {
    pub a: TensorArg,
    pub b: TensorArg,
    /// Whether `b`'s values are taken through GELU_ERF first (a GELU_ERF node fused in).
    pub gelu_b: bool,
    pub d: TensorArg,
    pub m: i64,
    pub k: i64,
    pub cols: i64,
    pub ldc: i64,
}

/// Queues the split kernel writing rows `rows` of `src` (in `nrows_of` order) into `out` as
/// three runs of K values a row, the remainders in run `lo_run`; with `gelu`, of GELU_ERF of
/// `src`'s values.
fn split_rows(
    kernels: &Kernels,
    stream: &Arc<CudaStream>,
    (src, gelu): (&TensorArg, bool),
    out: u64,
    lo_run: i32,
    rows: (i64, i64),
) -> Result<()> {
    let cfg = cudarc::driver::LaunchConfig {
        grid_dim: (
            div_ceil(src.ne[0], 256).clamp(1, i64::from(u32::MAX)) as u32,
            div_ceil(rows.1, SPLIT_ROWS).clamp(1, 65535) as u32,
            1,
        ),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let name = if gelu { names::SPLIT_TF32_GELU_ERF } else { names::SPLIT_TF32 };
    // split_tf32(_gelu_erf)(TensorArg a, float *out, int lo_run, long long row0, long long rows)
    launch_kernel!(kernels, stream, name, cfg, src, &out, &lo_run, &rows.0, &rows.1)
}

/// Queues `p` split, in chunks of `b`'s columns, plus `bias` (the device address of `m` f32
/// values added to every column, through cuBLASLt's bias epilogue) where given.
pub(crate) fn launch(
    kernels: &Kernels,
    stream: &Arc<CudaStream>,
    scratch: &mut Scratch,
    p: &SplitProduct,
    bias: Option<u64>,
) -> Result<()> {
    let (m, k3, ldc) = (p.m, 3 * p.k, p.ldc);
    let (a_bytes, b_bytes) = scratch_bytes(m, p.cols, p.k, super::mul_mat::align);
    // b split whole in one chunk is kept for the next products of the same b (a layer's
    // query, key and value projections) in this run; a's split lies before it.
    let b_layout = BLayout::Split { gelu: p.gelu_b };
    let (base, b_held) = scratch.reserve_for(a_bytes.saturating_add(b_bytes), &p.b, b_layout, a_bytes)?;
    let (a, b) = (base, base + a_bytes as u64);
    // a's remainders in the first run, b's in the second.
    split_rows(kernels, stream, (&p.a, false), a, 0, (0, m))?;
    let chunk = chunk_cols(p.k, p.cols);
    let mut c0 = 0;
    while c0 < p.cols {
        let n = chunk.min(p.cols - c0);
        if !b_held {
            split_rows(kernels, stream, (&p.b, p.gelu_b), b, 1, (c0, n))?;
            if n == p.cols {
                scratch.set_converted(p.b, b_layout, a_bytes);
            }
        }
        let c = p.d.data + 4 * (c0 * ldc) as u64;
        // The parts are multiplied in one TF32 pass whatever the f32 mode.
        let g = LtGemm { tf32: true, ..lt_gemm(DType::F32, (m, n, k3), (a, k3), (b, k3), (c, ldc), bias)? };
        // SAFETY: the split operands lie in scratch reserved for them above, `c` holds columns
        // c0..c0 + n of the validated result (apart from the scratch), the bias is m packed
        // f32 values; the work memory is the scratch's, used only on this stream.
        unsafe { scratch.matmul(&g) }?;
        c0 += n;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn products_split_where_they_reuse_operands_enough() {
        let auto = |m, n, k| chosen(F32Products::Auto, m, n, k);
        // MiniLM's products over 16 x 128 tokens and more, and squares from 1024.
        assert!(auto(384, 2048, 384) && auto(1536, 131072, 384) && auto(384, 131072, 1536));
        assert!(auto(1024, 1024, 1024) && auto(4096, 4096, 4096));
        // Too few multiply-adds, or too few columns for the weights' size.
        assert!(!auto(384, 1024, 384) && !auto(512, 512, 512));
        assert!(!auto(4096, 64, 14336) && !auto(14336, 200, 4096));
        // Weights whose split copy exceeds 256 MiB, and K past cuBLAS's 32 bits at 3K.
        assert!(!auto(4096, 512, 14336) && !chosen(F32Products::Split, 4096, 512, 14336));
        assert!(!chosen(F32Products::Split, 1, 1, 1 << 30));
        // The modes.
        assert!(chosen(F32Products::Split, 7, 9, 64));
        assert!(!chosen(F32Products::Exact, 4096, 4096, 4096) && !chosen(F32Products::Tf32, 4096, 4096, 4096));
    }

    #[test]
    fn b_goes_through_in_equal_chunks_of_at_most_1_gib() {
        // MiniLM's products over 1024 x 128 tokens: one chunk for K = 384, three for 1536.
        assert_eq!(chunk_cols(384, 131072), 131072);
        assert_eq!(chunk_cols(1536, 131072), 43691);
        assert_eq!(chunk_cols(384, 262144), 131072);
        assert_eq!(chunk_cols(1 << 28, 100), 1);
        let (a, b) = scratch_bytes(384, 131072, 1536, |n| n);
        assert_eq!((a, b), (12 * 384 * 1536, 12 * 1536 * 43691));
        assert!(b <= 1 << 30);
    }
}
