//! Matrix-vector products of BF16 weights on native bf16 dot products (AVX-512 BF16): tiles of
//! up to 4 rows by up to 8 columns, activations rounded to bf16 by the driver. Each step
//! takes 32 values of every row and of every column (one register each, no widening); one
//! `vdpbf16ps` per row and column adds their 32 products into 16 f32 lanes.

use core::arch::x86_64::*;

use tessera_core::DType;

use super::gemv::{prefetch_ahead, tiles, Sums};
use crate::fast::simd::Rows;

/// [`super::gemv::Steps`] of BF16 rows, 32 values a step.
///
/// # Safety
/// As [`super::gemv::Steps`] for BF16 rows; AVX-512F/BW and AVX-512 BF16.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn steps<const R: usize, const N: usize>(
    k: usize,
    rows: &Rows,
    x: *const u16,
    ldx: usize,
    acc: &mut Sums<R, N>,
) {
    let mut kk = 0;
    while kk < k {
        let mask: __mmask32 = if k - kk >= 32 { !0 } else { (1 << (k - kk)) - 1 };
        let mut w: [__m512bh; R] = [_mm512_cvtne2ps_pbh(_mm512_setzero_ps(), _mm512_setzero_ps()); R];
        for (r, wr) in w.iter_mut().enumerate() {
            prefetch_ahead(rows.ptr.wrapping_add(r * rows.stride + 2 * kk));
            // SAFETY: the masked values `kk..` of row `r`; bf16 bits are bf16 lanes.
            *wr = unsafe {
                core::mem::transmute::<__m512i, __m512bh>(_mm512_maskz_loadu_epi16(
                    mask,
                    rows.ptr.add(r * rows.stride + 2 * kk).cast(),
                ))
            };
        }
        for j in 0..N {
            // SAFETY: the masked values `kk..` of column `j`; bf16 bits are bf16 lanes.
            let xb = unsafe {
                core::mem::transmute::<__m512i, __m512bh>(_mm512_maskz_loadu_epi16(mask, x.add(j * ldx + kk).cast()))
            };
            for (accr, &wr) in acc.iter_mut().zip(&w) {
                accr[j] = _mm512_dpbf16_ps(accr[j], wr, xb);
            }
        }
        kk += 32;
    }
}

/// Every row by `N` columns, `R` rows at a time.
///
/// # Safety
/// As [`crate::fast::simd::GemvBf16`] with `n = N`; AVX-512F/BW and AVX-512 BF16.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn cols<const R: usize, const N: usize>(
    k: usize,
    rows: &Rows,
    x: *const u16,
    ldx: usize,
    y: *mut f32,
    ldy: usize,
) {
    // SAFETY: forwarded.
    unsafe { tiles::<R, N, u16>(k, rows, x, ldx, y, ldy, steps::<R, N>, steps::<1, N>) }
}

/// [`crate::fast::simd::GemvBf16`].
///
/// # Safety
/// As [`crate::fast::simd::GemvBf16`]; AVX-512F/BW and AVX-512 BF16.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
pub unsafe fn bf16(k: usize, rows: &Rows, x: *const u16, ldx: usize, n: usize, y: *mut f32, ldy: usize) {
    debug_assert_eq!(rows.dtype, DType::BF16);
    // SAFETY: forwarded; `n <= 8` columns exist.
    unsafe {
        match n {
            1 => cols::<4, 1>(k, rows, x, ldx, y, ldy),
            2 => cols::<4, 2>(k, rows, x, ldx, y, ldy),
            3 => cols::<4, 3>(k, rows, x, ldx, y, ldy),
            4 => cols::<4, 4>(k, rows, x, ldx, y, ldy),
            5 => cols::<3, 5>(k, rows, x, ldx, y, ldy),
            6 => cols::<3, 6>(k, rows, x, ldx, y, ldy),
            7 => cols::<3, 7>(k, rows, x, ldx, y, ldy),
            _ => {
                cols::<3, 8>(k, rows, x, ldx, y, ldy);
                if n > 8 {
                    // Not reached: the drivers send at most 8 columns.
                    bf16(k, rows, x.add(8 * ldx), ldx, n - 8, y.add(8 * ldy), ldy);
                }
            }
        }
    }
}
