//! AVX-512 VNNI matrix-vector products of K-quant weights.
//!
//! A row is taken one super-block (256 values) at a time: its values are unpacked into four
//! registers of 64 unsigned bytes, once for all the columns, and its 16 scales and mins (one
//! per 16 values) into two f32 registers. Per column, `vpdpbusd` leaves in each lane the sum of
//! 4 products, which is converted and scaled by its half's `scale * d` (a permutation of the
//! column's 16 `scale * d` products), and the min terms take one FMA of the 16 `min * d` by
//! the column's 16 half sums. Lanes are reduced once, at the row's end.

use core::arch::x86_64::*;

use tessera_core::kquant::QK_K;
use tessera_core::DType;

use crate::fast::simd::{KvColumn, Rows, QK};

/// A register whose first 32 bytes are `a` and last 32 are `b`.
#[target_feature(enable = "avx512f")]
#[inline]
fn halves8(a: i8, b: i8) -> __m512i {
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(_mm256_set1_epi8(a)), _mm256_set1_epi8(b))
}

/// The 16 scales and mins (one per 16 values) of super-block `block` of `dtype`, as the
/// portable [`crate::fast::simd::scalar::kquant::scales`] computes them.
///
/// # Safety
/// `block` must address one super-block of `dtype` (Q4_K, Q5_K or Q6_K); AVX-512F/BW/VL,
/// F16C.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c")]
#[inline]
unsafe fn scales(dtype: DType, block: *const u8) -> (__m512, __m512) {
    // SAFETY: 16 u32.
    let block_of_half = unsafe { _mm512_loadu_si512(BLOCK_OF_HALF.as_ptr().cast()) };
    if dtype == DType::Q6_K {
        // SAFETY: the 16 i8 scales at 192 and the f16 `d` at 208.
        let (sc, d) = unsafe {
            (_mm_loadu_si128(block.add(192).cast()), core::ptr::read_unaligned(block.add(208).cast::<u16>()))
        };
        let d = _mm512_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(d))));
        let scale = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(sc)));
        return (scale, _mm512_mul_ps(scale, _mm512_set1_ps(32.0)));
    }
    // SAFETY: f16 `d` and `dmin`, then 16 bytes from the 12 bytes of 6-bit scales and mins
    // (the last 4 are values, ignored).
    let (dm, q) = unsafe {
        (
            _mm_cvtph_ps(_mm_cvtsi32_si128(core::ptr::read_unaligned(block.cast::<i32>()))),
            _mm_loadu_si128(block.add(4).cast()),
        )
    };
    // As 32-bit words w0, w1, w2: scales 0-3 are the low 6 bits of the bytes of w0, mins 0-3
    // of w1; scales 4-7 the low nibbles of w2 and mins 4-7 its high nibbles, each with two top
    // bits from the top of w0 (scales) or w1 (mins). Words out: scales 0-3, 4-7, mins 0-3, 4-7.
    let top_words = _mm_unpacklo_epi32(q, q); // w0 w0 w1 w1
    let nibble_words = _mm_shuffle_epi32::<0b10_01_10_00>(q); // w0 w2 w1 w2
    let six = _mm_and_si128(top_words, _mm_set1_epi8(0x3f));
    let nibbles = _mm_and_si128(_mm_srlv_epi32(nibble_words, _mm_set_epi32(4, 0, 0, 0)), _mm_set1_epi8(0x0f));
    let top = _mm_and_si128(_mm_srli_epi32::<2>(top_words), _mm_set1_epi8(0x30));
    let packed = _mm_mask_blend_epi32(0b1010, six, _mm_or_si128(nibbles, top));
    // Lanes 0-7: scales, 8-15: mins, times `d` and `dmin`; each then spread over the two
    // halves of its block.
    let d_dmin = _mm512_permutexvar_ps(
        _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0),
        _mm512_castps128_ps512(dm),
    );
    let v = _mm512_mul_ps(d_dmin, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(packed)));
    let mins_of_half = _mm512_add_epi32(block_of_half, _mm512_set1_epi32(8));
    (_mm512_permutexvar_ps(block_of_half, v), _mm512_permutexvar_ps(mins_of_half, v))
}

/// A super-block's values as 4 x 64 unsigned bytes, with its 16 scales and 16 mins.
type Superblock = ([__m512i; 4], __m512, __m512);

/// Unpacks super-block `block` of `dtype`.
///
/// # Safety
/// `block` must address one super-block of `dtype` (Q4_K, Q5_K or Q6_K); AVX-512F/BW/VL,
/// F16C.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c")]
#[inline]
unsafe fn unpack(dtype: DType, block: *const u8) -> Superblock {
    // SAFETY: the caller guarantees the super-block.
    let (scale, min) = unsafe { scales(dtype, block) };
    let low = _mm512_set1_epi8(0x0f);
    let mut w = [_mm512_setzero_si512(); 4];
    match dtype {
        DType::Q4_K | DType::Q5_K => {
            let (qs, qh) = if dtype == DType::Q4_K { (16, None) } else { (48, Some(16)) };
            // SAFETY: the 32 bytes of fifth bits.
            let h = qh.map(|o| unsafe { _mm512_broadcast_i64x4(_mm256_loadu_si256(block.add(o).cast())) });
            for (pair, wp) in w.chunks_exact_mut(2).enumerate() {
                // SAFETY: nibble bytes `64p..64p + 64`: chunk `c = 2p` then `2p + 1`, whose
                // low nibbles are values `64c..64c + 32` and high nibbles `64c + 32..64c + 64`.
                let v = unsafe { _mm512_loadu_si512(block.add(qs + 64 * pair).cast()) };
                let (lo, hi) = (_mm512_and_si512(v, low), _mm512_and_si512(_mm512_srli_epi16::<4>(v), low));
                wp[0] = _mm512_shuffle_i64x2::<0b01_00_01_00>(lo, hi);
                wp[1] = _mm512_shuffle_i64x2::<0b11_10_11_10>(lo, hi);
            }
            if let Some(h) = h {
                for (c, wc) in w.iter_mut().enumerate() {
                    let bits = halves8(1 << (2 * c), (2 << (2 * c)) as i8);
                    *wc = _mm512_mask_add_epi8(*wc, _mm512_test_epi8_mask(h, bits), *wc, _mm512_set1_epi8(16));
                }
            }
        }
        _ => {
            // The 16-bit lanes of the first 32 bytes (mask 0x0000ffff) and of the last 32.
            let (first_lanes, last_lanes) = (0x0000_ffff_u32, 0xffff_0000_u32);
            let two_bits = _mm512_set1_epi8(0x30);
            for n in 0..2 {
                // SAFETY: `ql` bytes `64n..64n + 64` and `qh` bytes `32n..32n + 32`.
                let (ab, q) = unsafe {
                    (
                        _mm512_loadu_si512(block.add(64 * n).cast()),
                        _mm512_broadcast_i64x4(_mm256_loadu_si256(block.add(128 + 32 * n).cast())),
                    )
                };
                // Values `128n..128n + 64`: low nibbles with high bits 0-1 (first 32) or 2-3
                // (last 32); values `128n + 64..`: high nibbles with high bits 4-5 or 6-7. Each
                // pair moves to bits 4-5 by an immediate shift (variable 16-bit shifts are slow),
                // and the mask drops what crossed a byte.
                let first = _mm512_mask_slli_epi16::<4>(_mm512_slli_epi16::<2>(q), first_lanes, q);
                let second = _mm512_mask_srli_epi16::<2>(q, last_lanes, q);
                w[2 * n] = _mm512_or_si512(_mm512_and_si512(ab, low), _mm512_and_si512(first, two_bits));
                w[2 * n + 1] = _mm512_or_si512(
                    _mm512_and_si512(_mm512_srli_epi16::<4>(ab), low),
                    _mm512_and_si512(second, two_bits),
                );
            }
        }
    }
    (w, scale, min)
}

/// Lane `l` of a `vpdpbusd` over values `64c..64c + 64` sums values `64c + 4l..`: half
/// `4c + l / 4` of the super-block.
const HALF_OF_LANE: [[u32; 16]; 4] = {
    let mut t = [[0; 16]; 4];
    let mut c = 0;
    while c < 4 {
        let mut l = 0;
        while l < 16 {
            t[c][l] = (4 * c + l / 4) as u32;
            l += 1;
        }
        c += 1;
    }
    t
};

/// Half `h` of a super-block lies in block `h / 2`.
const BLOCK_OF_HALF: [u32; 16] = [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7];

/// Every row by `N` columns; `A` accumulators per column (more than one for few columns, so
/// that the sums of one super-block do not wait on each other).
///
/// # Safety
/// As [`crate::fast::simd::QGemv`] on K-quant rows and columns with `n = N`; AVX-512F/BW/VL,
/// VNNI and F16C.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c")]
unsafe fn cols<const N: usize, const A: usize>(
    nblocks: usize,
    rows: &Rows,
    x: *const u8,
    ldx: usize,
    y: *mut f32,
    ldy: usize,
) {
    let columns: [KvColumn; N] = core::array::from_fn(|j| KvColumn::at(x.wrapping_add(j * ldx), nblocks));
    // SAFETY: 16 u32 each.
    let half_of_lane = HALF_OF_LANE.map(|t| unsafe { _mm512_loadu_si512(t.as_ptr().cast()) });
    // SAFETY: 16 u32.
    let block_of_half = unsafe { _mm512_loadu_si512(BLOCK_OF_HALF.as_ptr().cast()) };
    let bytes = rows.dtype.block_bytes();
    for r in 0..rows.count {
        let row = rows.ptr.wrapping_add(r * rows.stride);
        let mut acc = [[_mm512_setzero_ps(); A]; N];
        let mut mins = [_mm512_setzero_ps(); N];
        let superblocks = nblocks / 8;
        if superblocks == 0 {
            continue;
        }
        // With few columns, super-blocks are unpacked one ahead: the unpacking is a long chain
        // of dependent steps, and the products waiting on it would otherwise fill the
        // schedulers. (With more columns there is work enough, and no registers to spare.)
        let ahead = N <= 4;
        // SAFETY: super-block 0 of row `r`.
        let mut next = if ahead { Some(unsafe { unpack(rows.dtype, row) }) } else { None };
        for sb in 0..superblocks {
            let (w, scale, min) = match next {
                Some(unpacked) => unpacked,
                // SAFETY: super-block `sb` of row `r`.
                None => unsafe { unpack(rows.dtype, row.add(sb * bytes)) },
            };
            if ahead && sb + 1 < superblocks {
                // SAFETY: super-block `sb + 1` of row `r`.
                next = Some(unsafe { unpack(rows.dtype, row.add((sb + 1) * bytes)) });
            }
            for (j, col) in columns.iter().enumerate() {
                // SAFETY: blocks `8sb..8sb + 8` of column `j`: scales, half sums, values.
                unsafe {
                    let d = _mm512_castps256_ps512(_mm256_loadu_ps(col.d.add(32 * sb).cast()));
                    let d = _mm512_permutexvar_ps(block_of_half, d);
                    let sums = _mm512_cvtepi32_ps(_mm512_loadu_si512(col.s.add(64 * sb).cast()));
                    mins[j] = _mm512_fmadd_ps(_mm512_mul_ps(min, d), sums, mins[j]);
                    let ds = _mm512_mul_ps(scale, d);
                    for (c, &wc) in w.iter().enumerate() {
                        let xq = _mm512_loadu_si512(col.q.add((8 * sb + 2 * c) * QK).cast());
                        let p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wc, xq);
                        let sc = _mm512_permutexvar_ps(half_of_lane[c], ds);
                        acc[j][c % A] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), sc, acc[j][c % A]);
                    }
                }
            }
        }
        for (j, accj) in acc.iter().enumerate() {
            let total = accj.iter().fold(_mm512_sub_ps(_mm512_setzero_ps(), mins[j]), |t, &a| _mm512_add_ps(t, a));
            // SAFETY: output `r` of column `j`.
            unsafe { *y.add(j * ldy + r) = _mm512_reduce_add_ps(total) };
        }
    }
}

/// [`crate::fast::simd::QGemv`] on K-quant rows and [`crate::fast::simd::KvColumn`]s.
///
/// # Safety
/// As [`crate::fast::simd::QGemv`] on K-quant rows and columns; AVX-512F/BW/VL, VNNI and
/// F16C.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c")]
pub unsafe fn gemv(nblocks: usize, rows: &Rows, x: *const u8, ldx: usize, n: usize, y: *mut f32, ldy: usize) {
    debug_assert!((nblocks * QK).is_multiple_of(QK_K));
    // SAFETY: forwarded; `n <= 8` columns exist.
    unsafe {
        match n {
            1 => cols::<1, 2>(nblocks, rows, x, ldx, y, ldy),
            2 => cols::<2, 2>(nblocks, rows, x, ldx, y, ldy),
            3 => cols::<3, 1>(nblocks, rows, x, ldx, y, ldy),
            4 => cols::<4, 1>(nblocks, rows, x, ldx, y, ldy),
            5 => cols::<5, 1>(nblocks, rows, x, ldx, y, ldy),
            6 => cols::<6, 1>(nblocks, rows, x, ldx, y, ldy),
            7 => cols::<7, 1>(nblocks, rows, x, ldx, y, ldy),
            _ => cols::<8, 1>(nblocks, rows, x, ldx, y, ldy),
        }
    }
}
