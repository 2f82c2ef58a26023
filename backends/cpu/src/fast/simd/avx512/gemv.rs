//! AVX-512 matrix-vector kernels.
//!
//! Float weights: tiles of 4 rows by up to 4 columns (16 accumulators), so each activation
//! vector loaded serves 4 rows and each weight vector up to 4 columns.
//!
//! Int8 weights: a row is taken 16 blocks at a time. Each `vpdpbusd` covers two blocks; a
//! reduction tree turns the 8 results into one register of 16 block sums, which are then
//! corrected, converted and scaled by 16 `d_a * d_b` at once (per-block scaling of 8-lane
//! partial sums would cost more than the dot products).

use core::arch::x86_64::*;

use tessera_core::DType;

use super::gemm::load16;
use crate::fast::simd::scalar::pack::{bytes, get_f32, get_i32};
use crate::fast::simd::{QvColumn, Rows, QK};

/// The first `R` of `rows` by `N` columns of float dot products.
///
/// # Safety
/// The rows and the columns (`ldx` f32 apart) must hold `k` values;
/// outputs at `y + j * ldy + r`; AVX-512F/BW/VL.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn float_tile<const R: usize, const N: usize>(
    k: usize,
    rows: &Rows,
    x: *const f32,
    ldx: usize,
    y: *mut f32,
    ldy: usize,
) {
    let (dtype, row0, stride) = (rows.dtype, rows.ptr, rows.stride);
    let mut acc = [[_mm512_setzero_ps(); N]; R];
    let mut kk = 0;
    while kk < k {
        let mask = if k - kk >= 16 { 0xffff } else { (1u16 << (k - kk)) - 1 };
        let mut w = [_mm512_setzero_ps(); R];
        for (r, wr) in w.iter_mut().enumerate() {
            // SAFETY: the masked values `kk..` of row `r`.
            *wr = unsafe { load16(dtype, row0.add(r * stride), kk, mask) };
        }
        for j in 0..N {
            // SAFETY: the masked values `kk..` of column `j`.
            let xv = unsafe { _mm512_maskz_loadu_ps(mask, x.add(j * ldx + kk)) };
            for (accr, &wr) in acc.iter_mut().zip(&w) {
                accr[j] = _mm512_fmadd_ps(wr, xv, accr[j]);
            }
        }
        kk += 16;
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
/// As [`crate::fast::simd::Gemv`] with `n = N`; AVX-512F/BW/VL.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn float_cols<const R: usize, const N: usize>(
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
                float_tile::<R, N>(k, &rest, x, ldx, y.add(r), ldy);
                r += R;
            } else {
                float_tile::<1, N>(k, &rest, x, ldx, y.add(r), ldy);
                r += 1;
            }
        }
    }
}

/// Tiles of 4 rows by up to 4 columns, or of 3 rows by 5 to 8 columns: each weight vector is
/// converted once for all the columns (the conversion competes with the FMAs for ports).
///
/// # Safety
/// As [`crate::fast::simd::Gemv`]; AVX-512F/BW/VL.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn float(k: usize, rows: &Rows, x: *const f32, ldx: usize, n: usize, y: *mut f32, ldy: usize) {
    // SAFETY: forwarded; `n <= 8` columns exist.
    unsafe {
        match n {
            1 => float_cols::<4, 1>(k, rows, x, ldx, y, ldy),
            2 => float_cols::<4, 2>(k, rows, x, ldx, y, ldy),
            3 => float_cols::<4, 3>(k, rows, x, ldx, y, ldy),
            4 => float_cols::<4, 4>(k, rows, x, ldx, y, ldy),
            5 => float_cols::<3, 5>(k, rows, x, ldx, y, ldy),
            6 => float_cols::<3, 6>(k, rows, x, ldx, y, ldy),
            7 => float_cols::<3, 7>(k, rows, x, ldx, y, ldy),
            _ => {
                float_cols::<3, 8>(k, rows, x, ldx, y, ldy);
                if n > 8 {
                    // Not reached: the drivers send at most 8 columns.
                    float(k, rows, x.add(8 * ldx), ldx, n - 8, y.add(8 * ldy), ldy);
                }
            }
        }
    }
}

/// # Safety
/// As [`crate::fast::simd::Gemv`] for F32 rows; AVX-512F/BW/VL.
pub unsafe fn f32(k: usize, rows: &Rows, x: *const f32, ldx: usize, n: usize, y: *mut f32, ldy: usize) {
    debug_assert_eq!(rows.dtype, DType::F32);
    // SAFETY: forwarded; the table is chosen only where AVX-512 exists.
    unsafe { float(k, rows, x, ldx, n, y, ldy) }
}

/// # Safety
/// As [`crate::fast::simd::Gemv`] for F16 rows; AVX-512F/BW/VL.
pub unsafe fn f16(k: usize, rows: &Rows, x: *const f32, ldx: usize, n: usize, y: *mut f32, ldy: usize) {
    debug_assert_eq!(rows.dtype, DType::F16);
    // SAFETY: forwarded; the table is chosen only where AVX-512 exists.
    unsafe { float(k, rows, x, ldx, n, y, ldy) }
}

/// # Safety
/// As [`crate::fast::simd::Gemv`] for BF16 rows; AVX-512F/BW/VL.
pub unsafe fn bf16(k: usize, rows: &Rows, x: *const f32, ldx: usize, n: usize, y: *mut f32, ldy: usize) {
    debug_assert_eq!(rows.dtype, DType::BF16);
    // SAFETY: forwarded; the table is chosen only where AVX-512 exists.
    unsafe { float(k, rows, x, ldx, n, y, ldy) }
}

/// Blocks `b0..b0 + 16` of a row as 8 registers of unsigned weights `w + bias`, two blocks
/// each in value order.
///
/// # Safety
/// The row must hold those blocks of `Q4` (Q4_0) or Q8_0; AVX-512F/BW.
#[target_feature(enable = "avx2,avx512f,avx512bw")]
#[inline]
unsafe fn weights16<const Q4: bool>(row: *const u8, b0: usize) -> [__m512i; 8] {
    let mut w = [_mm512_setzero_si512(); 8];
    for (p, wp) in w.iter_mut().enumerate() {
        let (b, c) = (b0 + 2 * p, b0 + 2 * p + 1);
        // SAFETY: blocks `b` and `c` of the row.
        *wp = unsafe {
            if Q4 {
                let v = _mm256_inserti128_si256::<1>(
                    _mm256_castsi128_si256(_mm_loadu_si128(row.add(18 * b + 2).cast())),
                    _mm_loadu_si128(row.add(18 * c + 2).cast()),
                );
                let z = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(v), _mm256_srli_epi16::<4>(v));
                // Lanes: b low nibbles, c low, b high, c high; values 0..16 of a block are its
                // low nibbles, 16..32 its high ones: reorder to b low, b high, c low, c high.
                let z = _mm512_and_si512(z, _mm512_set1_epi8(0x0f));
                _mm512_shuffle_i64x2::<0xd8>(z, z)
            } else {
                let z = _mm512_inserti64x4::<1>(
                    _mm512_castsi256_si512(_mm256_loadu_si256(row.add(34 * b + 2).cast())),
                    _mm256_loadu_si256(row.add(34 * c + 2).cast()),
                );
                _mm512_xor_si512(z, _mm512_set1_epi8(-128))
            }
        };
    }
    w
}

/// The f32 scales of blocks `b0..b0 + 16` of a row of `bs`-byte blocks: one gather of the
/// dwords that start the blocks (scale and first value bytes), narrowed to the scales.
///
/// # Safety
/// The row must hold those blocks (each block has at least 4 bytes); AVX-512F.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn scales16(row: *const u8, b0: usize, bs: usize) -> __m512 {
    let step = bs as i32;
    let offsets = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        _mm512_set1_epi32(step),
    );
    // SAFETY: each gathered dword lies inside block `b0 + i` of the row.
    let words = unsafe { _mm512_i32gather_epi32::<1>(offsets, row.add(b0 * bs).cast()) };
    _mm512_cvtph_ps(_mm512_cvtepi32_epi16(words))
}

/// The 16 block sums of 8 registers of `vpdpbusd` results (register `p` holds blocks 2p and
/// 2p + 1 in its halves), blocks in order.
#[target_feature(enable = "avx512f")]
#[inline]
fn block_sums(p: &[__m512i; 8]) -> __m512i {
    let a: [__m512i; 4] = [0, 1, 2, 3].map(|q| {
        _mm512_add_epi32(_mm512_unpacklo_epi32(p[2 * q], p[2 * q + 1]), _mm512_unpackhi_epi32(p[2 * q], p[2 * q + 1]))
    });
    // b[r]: in each 128-bit lane, the lane's sums of registers 4r..4r + 4.
    let b: [__m512i; 2] = [0, 1].map(|r| {
        _mm512_add_epi32(_mm512_unpacklo_epi64(a[2 * r], a[2 * r + 1]), _mm512_unpackhi_epi64(a[2 * r], a[2 * r + 1]))
    });
    // Lanes 0 + 1 hold blocks 8r, 8r + 2, .., lanes 2 + 3 blocks 8r + 1, 8r + 3, ..
    let c = b.map(|br| _mm512_add_epi32(br, _mm512_shuffle_i32x4::<0xb1>(br, br)));
    let t = _mm512_shuffle_i32x4::<0x88>(c[0], c[1]);
    _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15), t)
}

/// The 32 weights of one block as unsigned bytes `w + bias`, and its scale (for the blocks
/// after the last group of 16).
///
/// # Safety
/// `block` must point to a whole block of `Q4` (Q4_0) or Q8_0; AVX-512VL/F16C.
#[target_feature(enable = "avx2,avx512f,avx512vl,f16c")]
#[inline]
unsafe fn weights1<const Q4: bool>(block: *const u8) -> (__m256i, f32) {
    // SAFETY: the scale's two bytes start the block.
    let bits = u16::from_le_bytes(unsafe { bytes(block) });
    let d = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(bits))));
    let w = if Q4 {
        // SAFETY: 16 bytes of nibbles follow the scale.
        let q = unsafe { _mm_loadu_si128(block.add(2).cast()) };
        let low = _mm_set1_epi8(0x0f);
        _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16::<4>(q), low), _mm_and_si128(q, low))
    } else {
        // SAFETY: 32 value bytes follow the scale.
        _mm256_xor_si256(unsafe { _mm256_loadu_si256(block.add(2).cast()) }, _mm256_set1_epi8(-128))
    };
    (w, d)
}

/// Every row by `N` columns of int8 dot products.
///
/// # Safety
/// As [`crate::fast::simd::QGemv`] with `n = N`; AVX-512F/BW/VL, VNNI, F16C.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
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
        let mut acc = [_mm512_setzero_ps(); N];
        let mut b0 = 0;
        while b0 + 16 <= nblocks {
            // SAFETY: blocks `b0..b0 + 16` of the row and of each column.
            unsafe {
                let w = weights16::<Q4>(row, b0);
                let da = scales16(row, b0, bs);
                for (a, col) in acc.iter_mut().zip(&cols) {
                    let mut p = [_mm512_setzero_si512(); 8];
                    for (i, pi) in p.iter_mut().enumerate() {
                        *pi = _mm512_dpbusd_epi32(*pi, w[i], _mm512_loadu_si512(col.q.add(QK * (b0 + 2 * i)).cast()));
                    }
                    let sums = _mm512_add_epi32(block_sums(&p), _mm512_loadu_si512(col.c.add(4 * b0).cast()));
                    let scale = _mm512_mul_ps(da, _mm512_loadu_ps(col.d.add(4 * b0).cast()));
                    *a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), scale, *a);
                }
            }
            b0 += 16;
        }
        let mut tail = [0.0f32; N];
        for b in b0..nblocks {
            // SAFETY: block `b` of the row and of each column.
            unsafe {
                let (w, da) = weights1::<Q4>(row.add(b * bs));
                for (t, col) in tail.iter_mut().zip(&cols) {
                    let s =
                        _mm256_dpbusd_epi32(_mm256_setzero_si256(), w, _mm256_loadu_si256(col.q.add(QK * b).cast()));
                    let s = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256::<1>(s));
                    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0x4e>(s));
                    let s =
                        _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32::<0xb1>(s))) + get_i32(col.c.add(4 * b));
                    *t += s as f32 * (da * get_f32(col.d.add(4 * b)));
                }
            }
        }
        for (j, (a, t)) in acc.iter().zip(tail).enumerate() {
            // SAFETY: output `r` of column `j`.
            unsafe { *y.add(j * ldy + r) = _mm512_reduce_add_ps(*a) + t };
        }
    }
}

/// All the columns in one pass over the weights (each group of 16 blocks is unpacked once).
///
/// # Safety
/// As [`crate::fast::simd::QGemv`]; AVX-512 with VNNI.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn quant<const Q4: bool>(
    nblocks: usize,
    rows: &Rows,
    x: *const u8,
    ldx: usize,
    n: usize,
    y: *mut f32,
    ldy: usize,
) {
    // SAFETY: forwarded; `n <= 8` columns exist.
    unsafe {
        match n {
            1 => quant_n::<1, Q4>(nblocks, rows, x, ldx, y, ldy),
            2 => quant_n::<2, Q4>(nblocks, rows, x, ldx, y, ldy),
            3 => quant_n::<3, Q4>(nblocks, rows, x, ldx, y, ldy),
            4 => quant_n::<4, Q4>(nblocks, rows, x, ldx, y, ldy),
            5 => quant_n::<5, Q4>(nblocks, rows, x, ldx, y, ldy),
            6 => quant_n::<6, Q4>(nblocks, rows, x, ldx, y, ldy),
            7 => quant_n::<7, Q4>(nblocks, rows, x, ldx, y, ldy),
            _ => {
                quant_n::<8, Q4>(nblocks, rows, x, ldx, y, ldy);
                if n > 8 {
                    // Not reached: the drivers send at most 8 columns.
                    quant::<Q4>(nblocks, rows, x.add(8 * ldx), ldx, n - 8, y.add(8 * ldy), ldy);
                }
            }
        }
    }
}

/// # Safety
/// As [`crate::fast::simd::QGemv`] for Q8_0 rows; AVX-512 with VNNI.
pub unsafe fn q8_0(nblocks: usize, rows: &Rows, x: *const u8, ldx: usize, n: usize, y: *mut f32, ldy: usize) {
    debug_assert_eq!(rows.dtype, DType::Q8_0);
    // SAFETY: forwarded; the table is chosen only where AVX-512 VNNI exists.
    unsafe { quant::<false>(nblocks, rows, x, ldx, n, y, ldy) }
}

/// # Safety
/// As [`crate::fast::simd::QGemv`] for Q4_0 rows; AVX-512 with VNNI.
pub unsafe fn q4_0(nblocks: usize, rows: &Rows, x: *const u8, ldx: usize, n: usize, y: *mut f32, ldy: usize) {
    debug_assert_eq!(rows.dtype, DType::Q4_0);
    // SAFETY: forwarded; the table is chosen only where AVX-512 VNNI exists.
    unsafe { quant::<true>(nblocks, rows, x, ldx, n, y, ldy) }
}
