//! AVX2 matrix-vector kernels: each weight row is loaded once (converted to f32, or its
//! signed bytes) and multiplied with up to four columns at a time; Q4_0 rows are taken 8 at a
//! time, as their stored nibbles. Each kernel prefetches the rows after its own, which the
//! hardware prefetchers did not do for it.

use core::arch::x86_64::*;

use tessera_core::DType;

use super::gemm::load8;
use super::qgemm::dot4;
use crate::fast::simd::scalar::pack::{bytes, float_at, get_f32};
use crate::fast::simd::{QvColumn, Rows, QK};

/// Sum of the 8 lanes, in a fixed order.
#[target_feature(enable = "avx2")]
#[inline]
fn hsum(v: __m256) -> f32 {
    let v = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let v = _mm_add_ps(v, _mm_movehl_ps(v, v));
    _mm_cvtss_f32(_mm_add_ss(v, _mm_movehdup_ps(v)))
}

/// The first `R` of `rows` by `N` columns of float dot products.
///
/// # Safety
/// The rows and the columns (`ldx` f32 apart) must hold `k` values;
/// outputs at `y + j * ldy + r`; AVX2, FMA, F16C.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn float_tile<const R: usize, const N: usize>(
    k: usize,
    rows: &Rows,
    x: *const f32,
    ldx: usize,
    y: *mut f32,
    ldy: usize,
) {
    let (dtype, row0, stride) = (rows.dtype, rows.ptr, rows.stride);
    let mut acc = [[_mm256_setzero_ps(); N]; R];
    let mut kk = 0;
    while kk + 8 <= k {
        let mut w = [_mm256_setzero_ps(); R];
        for (r, wr) in w.iter_mut().enumerate() {
            // SAFETY: values `kk..kk + 8` of row `r`.
            *wr = unsafe { load8(dtype, row0.add(r * stride), kk) };
        }
        for j in 0..N {
            // SAFETY: values `kk..kk + 8` of column `j`.
            let xv = unsafe { _mm256_loadu_ps(x.add(j * ldx + kk)) };
            for (accr, &wr) in acc.iter_mut().zip(&w) {
                accr[j] = _mm256_fmadd_ps(wr, xv, accr[j]);
            }
        }
        kk += 8;
    }
    for (r, accr) in acc.iter().enumerate() {
        for (j, &a) in accr.iter().enumerate() {
            let mut sum = hsum(a);
            for t in kk..k {
                // SAFETY: value `t < k` of row `r` and of column `j`.
                sum += unsafe { float_at(dtype, row0.add(r * stride), t) * *x.add(j * ldx + t) };
            }
            // SAFETY: output `r` of column `j`.
            unsafe { *y.add(j * ldy + r) = sum };
        }
    }
}

/// Every row by `N` columns, four rows at a time.
///
/// # Safety
/// As [`crate::fast::simd::Gemv`] with `n = N`; AVX2, FMA, F16C.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn float_cols<const N: usize>(k: usize, rows: &Rows, x: *const f32, ldx: usize, y: *mut f32, ldy: usize) {
    let mut r = 0;
    while r < rows.count {
        // SAFETY: rows `r..` exist; outputs `r..` of each column.
        unsafe {
            let rest = Rows { ptr: rows.ptr.add(r * rows.stride), count: rows.count - r, ..*rows };
            if rest.count >= 4 {
                float_tile::<4, N>(k, &rest, x, ldx, y.add(r), ldy);
                r += 4;
            } else {
                float_tile::<1, N>(k, &rest, x, ldx, y.add(r), ldy);
                r += 1;
            }
        }
    }
}

/// Columns two at a time (4 x 2 accumulators fit the 16 registers).
///
/// # Safety
/// As [`crate::fast::simd::Gemv`]; AVX2, FMA, F16C.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn float(k: usize, rows: &Rows, x: *const f32, ldx: usize, n: usize, y: *mut f32, ldy: usize) {
    let mut j = 0;
    while j < n {
        // SAFETY: columns `j..j + 2` (or fewer) exist.
        unsafe {
            let (x, y) = (x.add(j * ldx), y.add(j * ldy));
            if n - j == 1 {
                float_cols::<1>(k, rows, x, ldx, y, ldy);
            } else {
                float_cols::<2>(k, rows, x, ldx, y, ldy);
            }
        }
        j += 2;
    }
}

/// # Safety
/// As [`crate::fast::simd::Gemv`] for F32 rows; AVX2, FMA, F16C.
pub unsafe fn f32(k: usize, rows: &Rows, x: *const f32, ldx: usize, n: usize, y: *mut f32, ldy: usize) {
    debug_assert_eq!(rows.dtype, DType::F32);
    // SAFETY: forwarded; the table is chosen only where AVX2, FMA and F16C exist.
    unsafe { float(k, rows, x, ldx, n, y, ldy) }
}

/// # Safety
/// As [`crate::fast::simd::Gemv`] for F16 rows; AVX2, FMA, F16C.
pub unsafe fn f16(k: usize, rows: &Rows, x: *const f32, ldx: usize, n: usize, y: *mut f32, ldy: usize) {
    debug_assert_eq!(rows.dtype, DType::F16);
    // SAFETY: forwarded; the table is chosen only where AVX2, FMA and F16C exist.
    unsafe { float(k, rows, x, ldx, n, y, ldy) }
}

/// # Safety
/// As [`crate::fast::simd::Gemv`] for BF16 rows; AVX2, FMA, F16C.
pub unsafe fn bf16(k: usize, rows: &Rows, x: *const f32, ldx: usize, n: usize, y: *mut f32, ldy: usize) {
    debug_assert_eq!(rows.dtype, DType::BF16);
    // SAFETY: forwarded; the table is chosen only where AVX2, FMA and F16C exist.
    unsafe { float(k, rows, x, ldx, n, y, ldy) }
}

/// The 32 signed weights of a Q8_0 or Q4_0 block, and its scale.
///
/// # Safety
/// `block` must point to a whole block of `Q4` (Q4_0) or Q8_0; AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn weights<const Q4: bool>(block: *const u8) -> (__m256i, f32) {
    // SAFETY: the scale's two bytes start the block.
    let bits = u16::from_le_bytes(unsafe { bytes(block) });
    let d = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(bits))));
    let w = if Q4 {
        // SAFETY: 16 bytes of nibbles follow the scale.
        let q = unsafe { _mm_loadu_si128(block.add(2).cast()) };
        let low = _mm_set1_epi8(0x0f);
        let v = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16::<4>(q), low), _mm_and_si128(q, low));
        _mm256_sub_epi8(v, _mm256_set1_epi8(8))
    } else {
        // SAFETY: 32 value bytes follow the scale.
        unsafe { _mm256_loadu_si256(block.add(2).cast()) }
    };
    (w, d)
}

/// `N` columns of int8 dot products for every row, two f32 accumulators per column.
///
/// # Safety
/// As [`crate::fast::simd::QGemv`] with `n = N`; AVX2, FMA, F16C.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn quant_n<const N: usize, const Q4: bool>(
    nblocks: usize,
    rows: &Rows,
    x: *const u8,
    ldx: usize,
    y: *mut f32,
    ldy: usize,
) {
    let bs = rows.dtype.block_bytes();
    let cols: [QvColumn; N] = core::array::from_fn(|j| QvColumn::at(x.wrapping_add(j * ldx), nblocks));
    for r in 0..rows.count {
        // SAFETY: row `r` exists.
        let row = unsafe { rows.ptr.add(r * rows.stride) };
        let mut acc = [[_mm256_setzero_ps(); 2]; N];
        // Even blocks into accumulator 0, odd ones into 1 (a macro: closures and iterator
        // adapters here would not be inlined into this `target_feature` function).
        macro_rules! block {
            ($b:expr, $h:expr) => {
                // SAFETY: block `$b` of the row and of each activation column.
                unsafe {
                    // The next row, as `q4_0_rows8` fetches its next rows.
                    _mm_prefetch::<_MM_HINT_T0>(row.wrapping_add(rows.stride + $b * bs).cast());
                    let (w, da) = weights::<Q4>(row.add($b * bs));
                    let w_abs = _mm256_abs_epi8(w);
                    for (a, col) in acc.iter_mut().zip(&cols) {
                        let s = dot4(w_abs, w, _mm256_loadu_si256(col.q.add(QK * $b).cast()));
                        let scale = _mm256_set1_ps(da * get_f32(col.d.add(4 * $b)));
                        a[$h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), scale, a[$h]);
                    }
                }
            };
        }
        let mut b = 0;
        while b + 2 <= nblocks {
            block!(b, 0);
            block!(b + 1, 1);
            b += 2;
        }
        if b < nblocks {
            block!(b, 0);
        }
        for (j, a) in acc.iter().enumerate() {
            // SAFETY: output `r` of column `j`.
            unsafe { *y.add(j * ldy + r) = hsum(_mm256_add_ps(a[0], a[1])) };
        }
    }
}

/// The bias [`q4_0`] takes Q4_0 weights with: their nibbles `q + 8` are multiplied as they are
/// stored, and each activation block's correction `-8 * sum(y)` restores the sign.
pub const Q4_0_BIAS: i32 = 8;

/// Q4_0 weights, 8 rows at a time by `N` columns: each of the 8 rows' blocks is loaded as it
/// is stored, and the four 4-byte groups of all 8 rows are transposed so that one register
/// holds one group of every row (lane `r` = row `r`). Then a group's nibbles meet the
/// activations' matching 4 values broadcast to every lane, and a block ends with one value
/// per row in its lane: no horizontal sums, and the 8 scales are applied as one vector.
/// Row by row the same product took about 1.8 times as long (4096 x 14336 weights, one
/// column, on an AVX2 core), bound by the instructions that unpack and scale each block.
///
/// # Safety
/// As [`crate::fast::simd::QGemv`] with `n = N` and 8 rows; columns carry the corrections of
/// [`Q4_0_BIAS`]; AVX2, FMA, F16C.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_0_rows8<const N: usize>(nblocks: usize, rows: &Rows, x: *const u8, ldx: usize, y: *mut f32, ldy: usize) {
    const BLOCK: usize = 18;
    let cols: [QvColumn; N] = core::array::from_fn(|j| QvColumn::at(x.wrapping_add(j * ldx), nblocks));
    let row = |r: usize| rows.ptr.wrapping_add(r * rows.stride);
    let low = _mm256_set1_epi8(0x0f);
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_ps(); N];
    for b in 0..nblocks {
        let at = |r: usize| row(r).wrapping_add(b * BLOCK);
        // The 8 rows are 8 streams that the prefetchers did not follow well (decoding read
        // weights at about half the memory's rate); the next 8 rows are one region, fetched
        // a block's share at a time while these are multiplied. Rows whose stride exceeds
        // their blocks are fetched in part; a prefetch past the matrix is harmless.
        let next = row(8).wrapping_add(b * 8 * BLOCK);
        for line in 0..(8 * BLOCK).div_ceil(64) {
            _mm_prefetch::<_MM_HINT_T0>(next.wrapping_add(64 * line).cast());
        }
        // SAFETY: block `b` of rows 0..8: a 2-byte scale, then 16 bytes of nibbles.
        let (groups, scales) = unsafe {
            let pair = |r: usize| _mm256_loadu2_m128i(at(r + 4).add(2).cast(), at(r).add(2).cast());
            let (a0, a1, a2, a3) = (pair(0), pair(1), pair(2), pair(3));
            let (t0, t1) = (_mm256_unpacklo_epi32(a0, a1), _mm256_unpackhi_epi32(a0, a1));
            let (t2, t3) = (_mm256_unpacklo_epi32(a2, a3), _mm256_unpackhi_epi32(a2, a3));
            // Group `g` of rows 0..4 in the low half, of rows 4..8 in the high half.
            let g = [
                _mm256_unpacklo_epi64(t0, t2),
                _mm256_unpackhi_epi64(t0, t2),
                _mm256_unpacklo_epi64(t1, t3),
                _mm256_unpackhi_epi64(t1, t3),
            ];
            let d = |r: usize| i16::from_le_bytes(bytes(at(r)));
            let halves = _mm_setr_epi16(d(0), d(1), d(2), d(3), d(4), d(5), d(6), d(7));
            (g, _mm256_cvtph_ps(halves))
        };
        // Byte `i` of a block holds value `i` in its low nibble and value `16 + i` in its high
        // one: group `g` (values `4g..4g + 4`) and group `g + 4`.
        let w: [__m256i; 8] = core::array::from_fn(|i| {
            let g = groups[i % 4];
            _mm256_and_si256(if i < 4 { g } else { _mm256_srli_epi16::<4>(g) }, low)
        });
        for (a, col) in acc.iter_mut().zip(&cols) {
            // SAFETY: block `b` of the column: 32 values, their scale and correction.
            unsafe {
                let q = col.q.add(QK * b);
                // Pair sums of at most 2 * 15 * 128 over 8 groups stay inside i16.
                let mut s = _mm256_setzero_si256();
                for (i, &wi) in w.iter().enumerate() {
                    let yv = _mm256_set1_epi32(i32::from_le_bytes(bytes(q.add(4 * i))));
                    s = _mm256_add_epi16(s, _mm256_maddubs_epi16(wi, yv));
                }
                let correction = _mm256_set1_epi32(i32::from_le_bytes(bytes(col.c.add(4 * b))));
                let s = _mm256_add_epi32(_mm256_madd_epi16(s, ones), correction);
                let scale = _mm256_mul_ps(scales, _mm256_set1_ps(get_f32(col.d.add(4 * b))));
                *a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), scale, *a);
            }
        }
    }
    for (j, &a) in acc.iter().enumerate() {
        // SAFETY: outputs 0..8 of column `j`.
        unsafe { _mm256_storeu_ps(y.add(j * ldy), a) };
    }
}

/// # Safety
/// As [`crate::fast::simd::QGemv`]; AVX2, FMA, F16C.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn quant<const Q4: bool>(
    nblocks: usize,
    rows: &Rows,
    x: *const u8,
    ldx: usize,
    n: usize,
    y: *mut f32,
    ldy: usize,
) {
    // Q4_0 rows in eights, the rest one by one.
    let eights = if Q4 { rows.count / 8 * 8 } else { 0 };
    let mut j = 0;
    while j < n {
        // SAFETY: columns `j..j + 4` (or fewer) exist; rows `0..eights` in eights, then
        // rows `eights..` with their outputs.
        unsafe {
            let (x, y) = (x.add(j * ldx), y.add(j * ldy));
            let rest = Rows { ptr: rows.ptr.add(eights * rows.stride), count: rows.count - eights, ..*rows };
            for r in (0..eights).step_by(8) {
                let eight = Rows { ptr: rows.ptr.add(r * rows.stride), count: 8, ..*rows };
                let y = y.add(r);
                match n - j {
                    1 => q4_0_rows8::<1>(nblocks, &eight, x, ldx, y, ldy),
                    2 => q4_0_rows8::<2>(nblocks, &eight, x, ldx, y, ldy),
                    3 => q4_0_rows8::<3>(nblocks, &eight, x, ldx, y, ldy),
                    _ => q4_0_rows8::<4>(nblocks, &eight, x, ldx, y, ldy),
                }
            }
            let y = y.add(eights);
            match n - j {
                1 => quant_n::<1, Q4>(nblocks, &rest, x, ldx, y, ldy),
                2 => quant_n::<2, Q4>(nblocks, &rest, x, ldx, y, ldy),
                3 => quant_n::<3, Q4>(nblocks, &rest, x, ldx, y, ldy),
                _ => quant_n::<4, Q4>(nblocks, &rest, x, ldx, y, ldy),
            }
        }
        j += 4;
    }
}

/// # Safety
/// As [`crate::fast::simd::QGemv`] for Q8_0 rows; AVX2, FMA, F16C.
pub unsafe fn q8_0(nblocks: usize, rows: &Rows, x: *const u8, ldx: usize, n: usize, y: *mut f32, ldy: usize) {
    // SAFETY: forwarded; the table is chosen only where AVX2, FMA and F16C exist.
    unsafe { quant::<false>(nblocks, rows, x, ldx, n, y, ldy) }
}

/// # Safety
/// As [`crate::fast::simd::QGemv`] for Q4_0 rows; AVX2, FMA, F16C.
pub unsafe fn q4_0(nblocks: usize, rows: &Rows, x: *const u8, ldx: usize, n: usize, y: *mut f32, ldy: usize) {
    // SAFETY: forwarded; the table is chosen only where AVX2, FMA and F16C exist.
    unsafe { quant::<true>(nblocks, rows, x, ldx, n, y, ldy) }
}
