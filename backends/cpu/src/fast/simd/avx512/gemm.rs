//! The AVX-512 float micro-kernel and weight packer: 32 weight rows (two registers) by 12
//! activation columns, 24 accumulators.

use core::arch::x86_64::*;

use tessera_core::DType;

use crate::fast::simd::scalar::pack::float_at;
use crate::fast::simd::{Cols, Rows};

pub const MR: usize = 32;
pub const NR: usize = 12;

/// Starts fetching the `nr` columns of a 32-row output tile (two lines each), which the tiles
/// touch only at their end.
#[inline]
pub(super) fn prefetch_tile(c: *mut f32, ldc: usize, nr: usize) {
    for j in 0..nr {
        let p = c.wrapping_add(j * ldc).cast::<i8>();
        // SAFETY: a prefetch never faults, whatever the address.
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(p);
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(64));
        }
    }
}

/// Stores (or, with `accumulate`, adds) the sums of a 32-row tile of `N` columns, two
/// registers per column, into `c` (column `j` at `c + j * ldc`).
///
/// # Safety
/// `c` must address the tile: `N` columns of 32 f32, `ldc` apart; AVX-512F.
#[target_feature(enable = "avx512f")]
#[inline]
pub(super) unsafe fn store_tile<const N: usize>(acc: &[[__m512; 2]; N], c: *mut f32, ldc: usize, accumulate: bool) {
    for (j, accj) in acc.iter().enumerate() {
        for (h, &v) in accj.iter().enumerate() {
            // SAFETY: values `16h..16h + 16` of column `j` of the tile.
            unsafe {
                let p = c.add(j * ldc + 16 * h);
                let v = if accumulate { _mm512_add_ps(_mm512_loadu_ps(p), v) } else { v };
                _mm512_storeu_ps(p, v);
            }
        }
    }
}

/// [`crate::fast::simd::GemmTile`] for a 32 x 12 tile.
///
/// # Safety
/// As [`crate::fast::simd::GemmTile`]; the processor must have AVX-512F.
#[target_feature(enable = "avx512f")]
pub unsafe fn tile(kc: usize, a: *const f32, b: *const f32, c: *mut f32, ldc: usize, accumulate: bool) {
    prefetch_tile(c, ldc, NR);
    let mut acc = [[_mm512_setzero_ps(); 2]; NR];
    for p in 0..kc {
        // SAFETY: step `p < kc` of the packed panels: 32 weights and 12 activations.
        let (ap, bp) = unsafe { (a.add(p * MR), b.add(p * NR)) };
        // SAFETY: as above.
        let (a0, a1) = unsafe { (_mm512_loadu_ps(ap), _mm512_loadu_ps(ap.add(16))) };
        for (j, accj) in acc.iter_mut().enumerate() {
            // SAFETY: as above.
            let bj = _mm512_set1_ps(unsafe { *bp.add(j) });
            accj[0] = _mm512_fmadd_ps(a0, bj, accj[0]);
            accj[1] = _mm512_fmadd_ps(a1, bj, accj[1]);
        }
    }
    // SAFETY: `c` addresses the tile, as the caller guarantees.
    unsafe { store_tile(&acc, c, ldc, accumulate) }
}

/// 16 values of a float row from value `k`, as f32 (only the lanes of `mask`; others 0).
///
/// # Safety
/// The masked values must lie inside the row; AVX-512F/BW/VL.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
#[inline]
pub unsafe fn load16(dtype: DType, row: *const u8, k: usize, mask: __mmask16) -> __m512 {
    // SAFETY: every arm's masked load touches only the lanes in `mask`, which lie inside the
    // row; the caller guarantees AVX-512F/BW/VL.
    unsafe {
        match dtype {
            DType::F16 => _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, row.add(2 * k).cast())),
            DType::BF16 => {
                let h = _mm256_maskz_loadu_epi16(mask, row.add(2 * k).cast());
                _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h)))
            }
            _ => _mm512_maskz_loadu_ps(mask, row.add(4 * k).cast()),
        }
    }
}

/// Transposes a 16 x 16 block of f32 in registers.
#[target_feature(enable = "avx512f")]
#[inline]
pub(super) fn transpose16(r: &mut [__m512; 16]) {
    let mut t = [_mm512_setzero_ps(); 16];
    for i in 0..8 {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    let mut u = [_mm512_setzero_ps(); 16];
    for q in 0..4 {
        let (t0, t1, t2, t3) = (t[4 * q], t[4 * q + 1], t[4 * q + 2], t[4 * q + 3]);
        u[4 * q] = _mm512_shuffle_ps::<0x44>(t0, t2);
        u[4 * q + 1] = _mm512_shuffle_ps::<0xee>(t0, t2);
        u[4 * q + 2] = _mm512_shuffle_ps::<0x44>(t1, t3);
        u[4 * q + 3] = _mm512_shuffle_ps::<0xee>(t1, t3);
    }
    // u[4q + c] holds values c, c + 4, c + 8, c + 12 (one per 128-bit lane) of rows 4q..4q + 4.
    let mut v = [_mm512_setzero_ps(); 16];
    for c in 0..4 {
        for h in 0..2 {
            let (x, y) = (u[8 * h + c], u[8 * h + 4 + c]);
            v[8 * h + c] = _mm512_shuffle_f32x4::<0x88>(x, y);
            v[8 * h + 4 + c] = _mm512_shuffle_f32x4::<0xdd>(x, y);
        }
    }
    for c in 0..8 {
        r[c] = _mm512_shuffle_f32x4::<0x88>(v[c], v[8 + c]);
        r[c + 8] = _mm512_shuffle_f32x4::<0xdd>(v[c], v[8 + c]);
    }
}

/// [`crate::fast::simd::PackA`] for 32-row panels: 16 x 16 blocks converted to f32 and
/// transposed in registers.
///
/// # Safety
/// As [`crate::fast::simd::PackA`]; AVX-512F/BW/VL.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub unsafe fn pack_a(rows: &Rows, k0: usize, kc: usize, mr: usize, dst: *mut f32) {
    if mr != MR {
        // SAFETY: forwarded.
        return unsafe { crate::fast::simd::scalar::pack::pack_a(rows, k0, kc, mr, dst) };
    }
    let mut kk = 0;
    while kk + 16 <= kc {
        for h in 0..2 {
            let mut v = [_mm512_setzero_ps(); 16];
            for (i, vi) in v.iter_mut().enumerate() {
                let r = 16 * h + i;
                if r < rows.count {
                    // SAFETY: row `r` exists and holds values `k0 + kk..k0 + kk + 16`.
                    *vi = unsafe { load16(rows.dtype, rows.ptr.add(r * rows.stride), k0 + kk, 0xffff) };
                }
            }
            transpose16(&mut v);
            for (t, &vt) in v.iter().enumerate() {
                // SAFETY: step `kk + t < kc` of the panel, rows `16h..16h + 16`.
                unsafe { _mm512_storeu_ps(dst.add((kk + t) * MR + 16 * h), vt) };
            }
        }
        kk += 16;
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

/// [`crate::fast::simd::PackB`] for 12-column panels: columns whose values are dense f32
/// go through 16 x 16 transposes in registers; others value by value.
///
/// # Safety
/// As [`crate::fast::simd::PackB`]; AVX-512F.
#[target_feature(enable = "avx512f")]
pub unsafe fn pack_b(cols: &Cols, k0: usize, kc: usize, nr: usize, dst: *mut f32) {
    if nr != NR || cols.k_stride != 4 {
        // SAFETY: forwarded.
        return unsafe { crate::fast::simd::scalar::pack::pack_b(cols, k0, kc, nr, dst) };
    }
    let mut kk = 0;
    while kk + 16 <= kc {
        let mut v = [_mm512_setzero_ps(); 16];
        for (j, vj) in v.iter_mut().enumerate().take(cols.count.min(NR)) {
            // SAFETY: values `k0 + kk..k0 + kk + 16` of column `j`.
            *vj = unsafe { _mm512_loadu_ps(cols.ptr.add(j * cols.col_stride + 4 * (k0 + kk)).cast()) };
        }
        transpose16(&mut v);
        for (t, &vt) in v.iter().enumerate() {
            // SAFETY: step `kk + t < kc` of the panel: its 12 values.
            unsafe { _mm512_mask_storeu_ps(dst.add((kk + t) * NR), (1 << NR) - 1, vt) };
        }
        kk += 16;
    }
    if kk < kc {
        // SAFETY: the remaining steps, forwarded.
        unsafe { crate::fast::simd::scalar::pack::pack_b(cols, k0 + kk, kc - kk, nr, dst.add(kk * NR)) };
    }
}
