//! The AVX2 float micro-kernel and weight packer: 16 weight rows (two registers) by 6
//! activation columns, 12 accumulators.

use core::arch::x86_64::*;

use tessera_core::DType;

use crate::fast::simd::scalar::pack::float_at;
use crate::fast::simd::{Cols, Rows};

pub const MR: usize = 16;
pub const NR: usize = 6;

/// [`crate::fast::simd::GemmTile`] for a 16 x 6 tile.
///
/// # Safety
/// As [`crate::fast::simd::GemmTile`]; AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn tile(kc: usize, a: *const f32, b: *const f32, c: *mut f32, ldc: usize, accumulate: bool) {
    let mut acc = [[_mm256_setzero_ps(); 2]; NR];
    for p in 0..kc {
        // SAFETY: step `p < kc` of the packed panels: 16 weights and 6 activations.
        let (ap, bp) = unsafe { (a.add(p * MR), b.add(p * NR)) };
        // SAFETY: as above.
        let (a0, a1) = unsafe { (_mm256_loadu_ps(ap), _mm256_loadu_ps(ap.add(8))) };
        for (j, accj) in acc.iter_mut().enumerate() {
            // SAFETY: as above.
            let bj = _mm256_set1_ps(unsafe { *bp.add(j) });
            accj[0] = _mm256_fmadd_ps(a0, bj, accj[0]);
            accj[1] = _mm256_fmadd_ps(a1, bj, accj[1]);
        }
    }
    for (j, accj) in acc.iter().enumerate() {
        for (h, &v) in accj.iter().enumerate() {
            // SAFETY: values `8h..8h + 8` of column `j` of the tile.
            unsafe {
                let p = c.add(j * ldc + 8 * h);
                let v = if accumulate { _mm256_add_ps(_mm256_loadu_ps(p), v) } else { v };
                _mm256_storeu_ps(p, v);
            }
        }
    }
}

/// 8 values of a float row from value `k`, as f32.
///
/// # Safety
/// Values `k..k + 8` must lie inside the row; AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
#[inline]
pub unsafe fn load8(dtype: DType, row: *const u8, k: usize) -> __m256 {
    // SAFETY: values `k..k + 8` lie inside the row (every arm loads those, and only those);
    // the caller guarantees AVX2 and F16C.
    unsafe {
        match dtype {
            DType::F16 => _mm256_cvtph_ps(_mm_loadu_si128(row.add(2 * k).cast())),
            DType::BF16 => {
                let h = _mm_loadu_si128(row.add(2 * k).cast());
                _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(h)))
            }
            _ => _mm256_loadu_ps(row.add(4 * k).cast()),
        }
    }
}

/// Transposes an 8 x 8 block of f32 in registers.
#[target_feature(enable = "avx2")]
#[inline]
pub fn transpose8(r: &mut [__m256; 8]) {
    let mut t = [_mm256_setzero_ps(); 8];
    for i in 0..4 {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    let mut u = [_mm256_setzero_ps(); 8];
    for h in 0..2 {
        let (t0, t1, t2, t3) = (t[4 * h], t[4 * h + 1], t[4 * h + 2], t[4 * h + 3]);
        u[4 * h] = _mm256_shuffle_ps::<0x44>(t0, t2);
        u[4 * h + 1] = _mm256_shuffle_ps::<0xee>(t0, t2);
        u[4 * h + 2] = _mm256_shuffle_ps::<0x44>(t1, t3);
        u[4 * h + 3] = _mm256_shuffle_ps::<0xee>(t1, t3);
    }
    // u[4h + c] holds values c (low lane) and c + 4 (high lane) of rows 4h..4h + 4.
    for c in 0..4 {
        r[c] = _mm256_permute2f128_ps::<0x20>(u[c], u[4 + c]);
        r[c + 4] = _mm256_permute2f128_ps::<0x31>(u[c], u[4 + c]);
    }
}

/// [`crate::fast::simd::PackA`] for 16-row panels: 8 x 8 blocks converted to f32 and
/// transposed in registers.
///
/// # Safety
/// As [`crate::fast::simd::PackA`]; AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
pub unsafe fn pack_a(rows: &Rows, k0: usize, kc: usize, mr: usize, dst: *mut f32) {
    if mr != MR {
        // SAFETY: forwarded.
        return unsafe { crate::fast::simd::scalar::pack::pack_a(rows, k0, kc, mr, dst) };
    }
    let mut kk = 0;
    while kk + 8 <= kc {
        for h in 0..2 {
            let mut v = [_mm256_setzero_ps(); 8];
            for (i, vi) in v.iter_mut().enumerate() {
                let r = 8 * h + i;
                if r < rows.count {
                    // SAFETY: row `r` exists and holds values `k0 + kk..k0 + kk + 8`.
                    *vi = unsafe { load8(rows.dtype, rows.ptr.add(r * rows.stride), k0 + kk) };
                }
            }
            transpose8(&mut v);
            for (t, &vt) in v.iter().enumerate() {
                // SAFETY: step `kk + t < kc` of the panel, rows `8h..8h + 8`.
                unsafe { _mm256_storeu_ps(dst.add((kk + t) * MR + 8 * h), vt) };
            }
        }
        kk += 8;
    }
    for kk in kk..kc {
        for r in 0..MR {
            let v = if r < rows.count {
                // SAFETY: value `k0 + kk` of row `r`.
                unsafe { float_at(rows.dtype, rows.ptr.add(r * rows.stride), k0 + kk) }
            } else {
                0.0
            };
            // SAFETY: step `kk < kc` of the panel.
            unsafe { *dst.add(kk * MR + r) = v };
        }
    }
}

/// [`crate::fast::simd::PackB`] for 6-column panels: columns whose values are dense f32 go
/// through 8 x 8 transposes in registers; others value by value.
///
/// # Safety
/// As [`crate::fast::simd::PackB`]; AVX2.
#[target_feature(enable = "avx2")]
pub unsafe fn pack_b(cols: &Cols, k0: usize, kc: usize, nr: usize, dst: *mut f32) {
    if nr != NR || cols.k_stride != 4 {
        // SAFETY: forwarded.
        return unsafe { crate::fast::simd::scalar::pack::pack_b(cols, k0, kc, nr, dst) };
    }
    let six = _mm256_setr_epi32(-1, -1, -1, -1, -1, -1, 0, 0);
    let mut kk = 0;
    while kk + 8 <= kc {
        let mut v = [_mm256_setzero_ps(); 8];
        for (j, vj) in v.iter_mut().enumerate().take(cols.count.min(NR)) {
            // SAFETY: values `k0 + kk..k0 + kk + 8` of column `j`.
            *vj = unsafe { _mm256_loadu_ps(cols.ptr.add(j * cols.col_stride + 4 * (k0 + kk)).cast()) };
        }
        transpose8(&mut v);
        for (t, &vt) in v.iter().enumerate() {
            // SAFETY: step `kk + t < kc` of the panel: its 6 values.
            unsafe { _mm256_maskstore_ps(dst.add((kk + t) * NR), six, vt) };
        }
        kk += 8;
    }
    if kk < kc {
        // SAFETY: the remaining steps, forwarded.
        unsafe { crate::fast::simd::scalar::pack::pack_b(cols, k0 + kk, kc - kk, nr, dst.add(kk * NR)) };
    }
}
