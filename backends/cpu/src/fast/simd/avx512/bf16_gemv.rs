//! Matrix-vector products of BF16 weights on native bf16 dot products (AVX-512 BF16): tiles of
//! up to 4 rows by up to 8 columns. Each step takes 32 values of every row (one register, no
//! widening) and of every column, rounded to bf16 once for all the tile's rows; one
//! `vdpbf16ps` per row and column adds their 32 products into 16 f32 lanes.

use core::arch::x86_64::*;

use tessera_core::DType;

use crate::fast::simd::Rows;

/// The first `R` of `rows` by `N` columns.
///
/// # Safety
/// The rows (BF16) and the columns (`ldx` f32 apart) must hold `k` values; outputs at
/// `y + j * ldy + r`; AVX-512F/BW and AVX-512 BF16.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn tile<const R: usize, const N: usize>(
    k: usize,
    rows: &Rows,
    x: *const f32,
    ldx: usize,
    y: *mut f32,
    ldy: usize,
) {
    let mut acc = [[_mm512_setzero_ps(); N]; R];
    let mut kk = 0;
    while kk < k {
        let mask: __mmask32 = if k - kk >= 32 { !0 } else { (1 << (k - kk)) - 1 };
        let (lo, hi) = (mask as __mmask16, (mask >> 16) as __mmask16);
        let mut w: [__m512bh; R] = [_mm512_cvtne2ps_pbh(_mm512_setzero_ps(), _mm512_setzero_ps()); R];
        for (r, wr) in w.iter_mut().enumerate() {
            // SAFETY: the masked values `kk..` of row `r`; bf16 bits are bf16 lanes.
            *wr = unsafe {
                core::mem::transmute::<__m512i, __m512bh>(_mm512_maskz_loadu_epi16(
                    mask,
                    rows.ptr.add(r * rows.stride + 2 * kk).cast(),
                ))
            };
        }
        for j in 0..N {
            // Only the masked values are read: the second half's address may lie past the
            // column when fewer than 16 values are left.
            let p = x.wrapping_add(j * ldx + kk);
            // SAFETY: the masked values `kk..` of column `j`.
            let xb = unsafe {
                _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, p.wrapping_add(16)), _mm512_maskz_loadu_ps(lo, p))
            };
            for (accr, &wr) in acc.iter_mut().zip(&w) {
                accr[j] = _mm512_dpbf16_ps(accr[j], wr, xb);
            }
        }
        kk += 32;
    }
    for (r, accr) in acc.iter().enumerate() {
        for (j, &a) in accr.iter().enumerate() {
            // SAFETY: output `r` of column `j`.
            unsafe { *y.add(j * ldy + r) = _mm512_reduce_add_ps(a) };
        }
    }
}

/// Every row by `N` columns, `R` rows at a time (then one by one).
///
/// # Safety
/// As [`crate::fast::simd::Gemv`] for BF16 rows with `n = N`; AVX-512F/BW and AVX-512 BF16.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn cols<const R: usize, const N: usize>(
    k: usize,
    rows: &Rows,
    x: *const f32,
    ldx: usize,
    y: *mut f32,
    ldy: usize,
) {
    let mut r = 0;
    while r < rows.count {
        // SAFETY: rows `r..` exist; outputs `r..` of each column.
        unsafe {
            let rest = Rows { ptr: rows.ptr.add(r * rows.stride), count: rows.count - r, ..*rows };
            if rest.count >= R {
                tile::<R, N>(k, &rest, x, ldx, y.add(r), ldy);
                r += R;
            } else {
                tile::<1, N>(k, &rest, x, ldx, y.add(r), ldy);
                r += 1;
            }
        }
    }
}

/// [`crate::fast::simd::Gemv`] for BF16 rows.
///
/// # Safety
/// As [`crate::fast::simd::Gemv`] for BF16 rows; AVX-512F/BW and AVX-512 BF16.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
pub unsafe fn bf16(k: usize, rows: &Rows, x: *const f32, ldx: usize, n: usize, y: *mut f32, ldy: usize) {
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
