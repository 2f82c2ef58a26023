//! AVX-512 VNNI matrix-vector products of K-quant weights.
//!
//! The activations have one scale per super-block (256 values) and the sums of each 16 of
//! their values ([`K8Column`]), so a super-block's product stays integer until its end: a
//! row's super-block is unpacked once for all the columns into four registers of 64 unsigned
//! bytes, its scales into 16-bit lanes lined up with `vpmaddubsw`'s pairs, and per column
//! `vpmaddubsw` then `vpdpwssd` by the scales leave 16 partial sums; the mins meet the
//! activations' sums in one `vpmaddwd`. One conversion and one FMA per super-block and column
//! (two for Q4_K and Q5_K, whose mins have their own scale) then add it to the row's lanes,
//! which are reduced once, at the row's end.
//!
//! The weights stream through once; a software prefetch runs [`PREFETCH_BYTES`] ahead of
//! them, because one row after another is a single stream that the hardware prefetchers
//! alone keep too short to cover the memory's latency.

use core::arch::x86_64::*;

use tessera_core::kquant::QK_K;

use super::kgemm::superblock_scale;
use crate::fast::simd::kind::{Q4, Q6};
use crate::fast::simd::{kquant_columns, K8Column, Rows, QK};

/// How far ahead of the super-block being multiplied its row's bytes are prefetched.
const PREFETCH_BYTES: usize = 4096;

/// Lane `i` of the `vpmaddubsw` pairs of register `c` (values `64c + 2i`, `+ 1`) takes the
/// scale of group `(64c + 2i) / G` (`G` values per scale: 32, or 16 for Q6_K).
const fn scale_lanes(group: usize) -> [[u16; 32]; 4] {
    let mut t = [[0; 32]; 4];
    let mut c = 0;
    while c < 4 {
        let mut i = 0;
        while i < 32 {
            t[c][i] = ((64 * c + 2 * i) / group) as u16;
            i += 1;
        }
        c += 1;
    }
    t
}
const SCALE_LANES_32: [[u16; 32]; 4] = scale_lanes(32);
const SCALE_LANES_16: [[u16; 32]; 4] = scale_lanes(16);
/// Q4_K and Q5_K: the min of each 16 values is that of its 32 (mins follow the 8 scales).
const MIN_LANES: [u16; 16] = [8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15];

/// A super-block unpacked for the products.
struct Unpacked {
    /// Values `64c..64c + 64` as unsigned bytes.
    w: [__m512i; 4],
    /// The scale of each `vpmaddubsw` pair of `w[c]`, as i16.
    scales: [__m512i; 4],
    /// The min of each 16 values, as i16 (Q6_K: 32 times the scale).
    mins: __m256i,
    d: f32,
    /// The scale of the mins (Q6_K: `d`).
    dmin: f32,
}

/// A register whose first 32 bytes are `a` and last 32 are `b`.
#[target_feature(enable = "avx512f")]
#[inline]
fn halves8(a: i8, b: i8) -> __m512i {
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(_mm256_set1_epi8(a)), _mm256_set1_epi8(b))
}

/// The 8 six-bit scales then the 8 mins of a Q4_K or Q5_K super-block, as bytes.
///
/// # Safety
/// `block` must address a Q4_K or Q5_K super-block; AVX-512F/VL.
#[target_feature(enable = "avx512f,avx512vl")]
#[inline]
unsafe fn scales_and_mins(block: *const u8) -> __m128i {
    // SAFETY: 16 bytes from the 12 bytes of 6-bit scales and mins (the last 4 are values,
    // ignored).
    let q = unsafe { _mm_loadu_si128(block.add(4).cast()) };
    // As 32-bit words w0, w1, w2: scales 0-3 are the low 6 bits of the bytes of w0, mins 0-3
    // of w1; scales 4-7 the low nibbles of w2 and mins 4-7 its high nibbles, each with two top
    // bits from the top of w0 (scales) or w1 (mins). Words out: scales 0-3, 4-7, mins 0-3, 4-7.
    let top_words = _mm_unpacklo_epi32(q, q); // w0 w0 w1 w1
    let nibble_words = _mm_shuffle_epi32::<0b10_01_10_00>(q); // w0 w2 w1 w2
    let six = _mm_and_si128(top_words, _mm_set1_epi8(0x3f));
    let nibbles = _mm_and_si128(_mm_srlv_epi32(nibble_words, _mm_set_epi32(4, 0, 0, 0)), _mm_set1_epi8(0x0f));
    let top = _mm_and_si128(_mm_srli_epi32::<2>(top_words), _mm_set1_epi8(0x30));
    _mm_mask_blend_epi32(0b1010, six, _mm_or_si128(nibbles, top))
}

/// The f16 at `at` as f32.
///
/// # Safety
/// `at` must address 2 readable bytes; F16C.
#[target_feature(enable = "f16c")]
#[inline]
unsafe fn half_at(at: *const u8) -> f32 {
    // SAFETY: as the caller guarantees.
    let h = unsafe { core::ptr::read_unaligned(at.cast::<u16>()) };
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(h))))
}

/// Unpacks super-block `block` of kind `T`.
///
/// # Safety
/// `block` must address one super-block of kind `T`; AVX-512F/BW/VL, F16C.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c")]
#[inline]
unsafe fn unpack<const T: u8>(block: *const u8) -> Unpacked {
    let low = _mm512_set1_epi8(0x0f);
    let mut w = [_mm512_setzero_si512(); 4];
    if T == Q6 {
        // SAFETY: the 16 i8 scales at 192 and `d` at 208.
        let (sc, d) =
            unsafe { (_mm256_cvtepi8_epi16(_mm_loadu_si128(block.add(192).cast())), half_at(block.add(208))) };
        // SAFETY: 4 x 32 u16.
        let lanes = SCALE_LANES_16.map(|l| unsafe { _mm512_loadu_si512(l.as_ptr().cast()) });
        let scales = lanes.map(|l| _mm512_permutexvar_epi16(l, _mm512_castsi256_si512(sc)));
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
            w[2 * n + 1] =
                _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16::<4>(ab), low), _mm512_and_si512(second, two_bits));
        }
        return Unpacked { w, scales, mins: _mm256_slli_epi16::<5>(sc), d, dmin: d };
    }
    // SAFETY: the scales and mins, `d` at 0 and `dmin` at 2.
    let (sm, d, dmin) =
        unsafe { (_mm256_cvtepu8_epi16(scales_and_mins(block)), half_at(block), half_at(block.add(2))) };
    // SAFETY: 4 x 32 and 16 u16.
    let (lanes, min_lanes) = unsafe {
        (SCALE_LANES_32.map(|l| _mm512_loadu_si512(l.as_ptr().cast())), _mm256_loadu_si256(MIN_LANES.as_ptr().cast()))
    };
    let scales = lanes.map(|l| _mm512_permutexvar_epi16(l, _mm512_castsi256_si512(sm)));
    let (qs, qh) = if T == Q4 { (16, None) } else { (48, Some(16)) };
    // SAFETY: the 32 bytes of fifth bits.
    let h = qh.map(|o| unsafe { _mm512_broadcast_i64x4(_mm256_loadu_si256(block.add(o).cast())) });
    for (c, wc) in w.iter_mut().enumerate() {
        // SAFETY: nibble bytes `32c..32c + 32`: low nibbles are values `64c..64c + 32`, high
        // nibbles `64c + 32..64c + 64`, so the copy in the upper half is shifted.
        let v = unsafe { _mm512_broadcast_i64x4(_mm256_loadu_si256(block.add(qs + 32 * c).cast())) };
        *wc = _mm512_and_si512(_mm512_mask_srli_epi16::<4>(v, 0xffff_0000, v), low);
        if let Some(h) = h {
            let bits = halves8(1 << (2 * c), (2 << (2 * c)) as i8);
            *wc = _mm512_mask_add_epi8(*wc, _mm512_test_epi8_mask(h, bits), *wc, _mm512_set1_epi8(16));
        }
    }
    Unpacked { w, scales, mins: _mm256_permutexvar_epi16(min_lanes, sm), d, dmin }
}

/// Every row of kind `T` by `N` columns.
///
/// # Safety
/// As [`crate::fast::simd::QGemv`] on rows of kind `T` and [`K8Column`]s with `n = N`;
/// AVX-512F/BW/VL, VNNI and F16C.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c")]
unsafe fn cols<const T: u8, const N: usize>(
    nblocks: usize,
    rows: &Rows,
    x: *const u8,
    ldx: usize,
    y: *mut f32,
    ldy: usize,
) {
    let superblocks = nblocks * QK / QK_K;
    let columns: [K8Column; N] = core::array::from_fn(|j| K8Column::at(x.wrapping_add(j * ldx), superblocks));
    let bytes = rows.dtype.block_bytes();
    for r in 0..rows.count {
        let row = rows.ptr.wrapping_add(r * rows.stride);
        let mut acc = [_mm512_setzero_ps(); N];
        let mut mins = [_mm256_setzero_ps(); N];
        for sb in 0..superblocks {
            let at = row.wrapping_add(sb * bytes);
            for line in (0..bytes).step_by(64) {
                _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(PREFETCH_BYTES + line).cast());
            }
            // SAFETY: super-block `sb` of row `r`.
            let u = unsafe { unpack::<T>(at) };
            for (j, col) in columns.iter().enumerate() {
                // SAFETY: super-block `sb` of column `j`: values, sums and scale.
                let (p, sums, dy) = unsafe {
                    let q = col.q.add(QK_K * sb);
                    let p: [__m512i; 4] = core::array::from_fn(|c| {
                        _mm512_maddubs_epi16(u.w[c], _mm512_loadu_si512(q.add(64 * c).cast()))
                    });
                    (p, _mm256_loadu_si256(col.s.add(32 * sb).cast()), core::ptr::read_unaligned(col.d.add(sb)))
                };
                let s = _mm512_dpwssd_epi32(_mm512_madd_epi16(p[0], u.scales[0]), p[1], u.scales[1]);
                let t = _mm512_dpwssd_epi32(_mm512_madd_epi16(p[2], u.scales[2]), p[3], u.scales[3]);
                let mut sum = _mm512_add_epi32(s, t);
                let min_sum = _mm256_madd_epi16(u.mins, sums);
                if T == Q6 {
                    sum = _mm512_sub_epi32(sum, _mm512_zextsi256_si512(min_sum));
                } else {
                    mins[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(min_sum), _mm256_set1_ps(u.dmin * dy), mins[j]);
                }
                acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_set1_ps(u.d * dy), acc[j]);
            }
        }
        for j in 0..N {
            let total = _mm512_reduce_add_ps(acc[j]) - _mm512_reduce_add_ps(_mm512_zextps256_ps512(mins[j]));
            // SAFETY: output `r` of column `j`.
            unsafe { *y.add(j * ldy + r) = total };
        }
    }
}

/// [`crate::fast::simd::QGemv`] on K-quant rows and [`K8Column`]s.
///
/// # Safety
/// As [`crate::fast::simd::QGemv`] on K-quant rows and [`K8Column`]s; AVX-512F/BW/VL, VNNI
/// and F16C.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c")]
pub unsafe fn gemv(nblocks: usize, rows: &Rows, x: *const u8, ldx: usize, n: usize, y: *mut f32, ldy: usize) {
    debug_assert!((nblocks * QK).is_multiple_of(QK_K));
    // SAFETY: forwarded; `n <= 8` columns exist.
    unsafe { kquant_columns!(cols, n, nblocks, rows, x, ldx, y, ldy) }
}

/// [`crate::fast::simd::K8Quantize`]: per super-block `d = max|x| / 127`, `q = round_half_even(x
/// * (1 / d))`, and the sums of each 16 values.
///
/// # Safety
/// As [`crate::fast::simd::K8Quantize`]; AVX-512F/BW/VL.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub unsafe fn quantize(x: *const f32, superblocks: usize, out: *mut u8) {
    const NEAREST: i32 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    let col = K8Column::at(out, superblocks);
    for sb in 0..superblocks {
        // SAFETY: values `256 sb..256 sb + 256` of the input.
        let v: [__m512; 16] = core::array::from_fn(|i| unsafe { _mm512_loadu_ps(x.add(QK_K * sb + 16 * i)) });
        let (d, id) = superblock_scale(&v);
        let mut sums = [0i16; 16];
        for (i, (vi, s)) in v.iter().zip(&mut sums).enumerate() {
            let q = _mm512_cvt_roundps_epi32::<NEAREST>(_mm512_mul_ps(*vi, id));
            // At most 16 * 127 in magnitude.
            *s = _mm512_reduce_add_epi32(q) as i16;
            // SAFETY: values `16i..16i + 16` of super-block `sb`.
            unsafe { _mm_storeu_si128(col.q.add(QK_K * sb + 16 * i).cast_mut().cast(), _mm512_cvtepi32_epi8(q)) };
        }
        // SAFETY: the super-block's sums and scale.
        unsafe { col.put(sb, sums, d) };
    }
}
