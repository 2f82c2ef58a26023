//! The GEMM of BF16 weights on native bf16 dot products (AVX-512 BF16): 32 weight rows by 12
//! activation columns, like the f32 micro-kernel, but each `vdpbf16ps` multiplies pairs of
//! consecutive `k` values, so one instruction does the work of two f32 FMAs and the packed
//! weights are half the size. The activations are rounded to bf16 (to nearest, ties to even)
//! when they are packed; the sums are f32.

use core::arch::x86_64::*;

use half::bf16;
use tessera_core::DType;

use super::gemm::{prefetch_tile, store_tile, transpose16};
use crate::fast::simd::scalar::pack::{bytes, get_f32};
use crate::fast::simd::{Cols, Rows};

pub const MR: usize = 32;
pub const NR: usize = 12;

/// `lo` and `hi` as one slot of a packed panel.
#[inline(always)]
fn slot(lo: u16, hi: u16) -> u32 {
    u32::from(lo) | (u32::from(hi) << 16)
}

/// The bf16 bits of `x`, rounded to nearest, ties to even (as `vcvtne2ps2bf16` rounds).
#[inline(always)]
fn bf16_bits(x: f32) -> u16 {
    bf16::from_f32(x).to_bits()
}

/// [`crate::fast::simd::GemmTile`] for a 32 x 12 tile of bf16-pair panels (`kc.div_ceil(2)`
/// slots).
///
/// # Safety
/// As [`crate::fast::simd::GemmTile`]; the processor must have AVX-512F and AVX-512 BF16.
#[target_feature(enable = "avx512f,avx512bf16")]
pub unsafe fn tile(kc: usize, a: *const f32, b: *const f32, c: *mut f32, ldc: usize, accumulate: bool) {
    prefetch_tile(c, ldc, NR);
    let (a, b) = (a.cast::<u32>(), b.cast::<u32>());
    let mut acc = [[_mm512_setzero_ps(); 2]; NR];
    for p in 0..kc.div_ceil(2) {
        // SAFETY: slot step `p` of the packed panels: 32 weight pairs and 12 activation pairs.
        let (ap, bp) = unsafe { (a.add(p * MR), b.add(p * NR)) };
        // SAFETY: as above; a register of bf16 pairs is a register of bits either way.
        let (a0, a1): (__m512bh, __m512bh) = unsafe {
            (
                core::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(ap.cast())),
                core::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(ap.add(16).cast())),
            )
        };
        for (j, accj) in acc.iter_mut().enumerate() {
            // SAFETY: as above.
            let bj = unsafe { core::mem::transmute::<__m512i, __m512bh>(_mm512_set1_epi32(*bp.add(j) as i32)) };
            accj[0] = _mm512_dpbf16_ps(accj[0], a0, bj);
            accj[1] = _mm512_dpbf16_ps(accj[1], a1, bj);
        }
    }
    // SAFETY: `c` addresses the tile, as the caller guarantees.
    unsafe { store_tile(&acc, c, ldc, accumulate) }
}

/// [`crate::fast::simd::PackA`] for BF16 rows into 32-row panels of bf16 pairs: the pairs of
/// 16 rows are transposed in registers 16 at a time as 32-bit values.
///
/// # Safety
/// As [`crate::fast::simd::PackA`] with BF16 rows, `k0` even, `dst` valid for
/// `kc.div_ceil(2) * mr` slots; AVX-512F.
#[target_feature(enable = "avx512f")]
pub unsafe fn pack_a(rows: &Rows, k0: usize, kc: usize, mr: usize, dst: *mut f32) {
    debug_assert!(rows.dtype == DType::BF16 && mr == MR && k0.is_multiple_of(2));
    let dst = dst.cast::<u32>();
    let value = |r: usize, kk: usize| -> u16 {
        // SAFETY: row `r` exists and holds value `k0 + kk` (callers check `kk < kc`).
        u16::from_le_bytes(unsafe { bytes(rows.ptr.add(r * rows.stride + 2 * (k0 + kk))) })
    };
    let mut p = 0;
    while 2 * p + 32 <= kc {
        for h in 0..2 {
            let mut v = [_mm512_setzero_ps(); 16];
            for (i, vi) in v.iter_mut().enumerate() {
                let r = 16 * h + i;
                if r < rows.count {
                    // SAFETY: row `r` holds values `k0 + 2p..k0 + 2p + 32`.
                    *vi = unsafe { _mm512_loadu_ps(rows.ptr.add(r * rows.stride + 2 * (k0 + 2 * p)).cast()) };
                }
            }
            transpose16(&mut v);
            for (t, &vt) in v.iter().enumerate() {
                // SAFETY: slot step `p + t` of the panel, rows `16h..16h + 16`.
                unsafe { _mm512_storeu_ps(dst.add((p + t) * MR + 16 * h).cast(), vt) };
            }
        }
        p += 16;
    }
    for p in p..kc.div_ceil(2) {
        for r in 0..MR {
            let s = if r < rows.count {
                slot(value(r, 2 * p), if 2 * p + 1 < kc { value(r, 2 * p + 1) } else { 0 })
            } else {
                0
            };
            // SAFETY: slot step `p` of the panel.
            unsafe { *dst.add(p * MR + r) = s };
        }
    }
}

/// [`crate::fast::simd::PackB`] into 12-column panels of bf16 pairs: columns of dense f32 are
/// rounded 32 values at a time and transposed in registers; others value by value.
///
/// # Safety
/// As [`crate::fast::simd::PackB`] with `k0` even and `dst` valid for `kc.div_ceil(2) * nr`
/// slots; AVX-512F and AVX-512 BF16.
#[target_feature(enable = "avx512f,avx512bf16")]
pub unsafe fn pack_b(cols: &Cols, k0: usize, kc: usize, nr: usize, dst: *mut f32) {
    debug_assert!(nr == NR && k0.is_multiple_of(2));
    let dst = dst.cast::<u32>();
    let mut p = 0;
    if cols.k_stride == 4 {
        while 2 * p + 32 <= kc {
            let mut v = [_mm512_setzero_ps(); 16];
            for (j, vj) in v.iter_mut().enumerate().take(cols.count.min(NR)) {
                // SAFETY: values `k0 + 2p..k0 + 2p + 32` of column `j`; the rounded pairs are
                // 32-bit lanes either way.
                *vj = unsafe {
                    let x = cols.ptr.add(j * cols.col_stride + 4 * (k0 + 2 * p)).cast::<f32>();
                    core::mem::transmute::<__m512bh, __m512>(_mm512_cvtne2ps_pbh(
                        _mm512_loadu_ps(x.add(16)),
                        _mm512_loadu_ps(x),
                    ))
                };
            }
            transpose16(&mut v);
            for (t, &vt) in v.iter().enumerate() {
                // SAFETY: slot step `p + t` of the panel: its 12 slots.
                unsafe { _mm512_mask_storeu_ps(dst.add((p + t) * NR).cast(), (1 << NR) - 1, vt) };
            }
            p += 16;
        }
    }
    let value = |j: usize, kk: usize| -> u16 {
        if j < cols.count && kk < kc {
            // SAFETY: value `k0 + kk` of column `j` exists.
            bf16_bits(unsafe { get_f32(cols.ptr.add((k0 + kk) * cols.k_stride + j * cols.col_stride)) })
        } else {
            0
        }
    };
    for p in p..kc.div_ceil(2) {
        for j in 0..NR {
            // SAFETY: slot step `p` of the panel.
            unsafe { *dst.add(p * NR + j) = slot(value(j, 2 * p), value(j, 2 * p + 1)) };
        }
    }
}
