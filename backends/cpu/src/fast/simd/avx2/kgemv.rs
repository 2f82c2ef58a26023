//! AVX2 matrix-vector products of K-quant weights, as the AVX-512 VNNI ones (see
//! `avx512::kgemv`) on 256-bit registers: a row's super-block is unpacked once for all the
//! columns into 8 registers of 32 unsigned bytes with their scales as i16 lanes, then per
//! column `vpmaddubsw` and `vpmaddwd` by the scales leave 8 integer sums, converted once per
//! super-block.

use core::arch::x86_64::*;

use tessera_core::kquant::QK_K;
use tessera_core::DType;

use crate::fast::simd::kind::{Q4, Q6};
use crate::fast::simd::{kquant_columns, K8Column, Rows, QK};

/// How far ahead of the super-block being multiplied its row's bytes are prefetched (as in
/// `avx512::kgemv`).
const PREFETCH_BYTES: usize = 4096;

/// A super-block unpacked for the products.
struct Unpacked {
    /// Values `32c..32c + 32` as unsigned bytes.
    w: [__m256i; 8],
    /// The scale of each `vpmaddubsw` pair of `w[c]`, as i16.
    scales: [__m256i; 8],
    /// The min of each 16 values, as i16 (Q6_K: 32 times the scale).
    mins: __m256i,
    d: f32,
    /// The scale of the mins (Q6_K: `d`).
    dmin: f32,
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

/// The 16 i16 `s` as two registers of 8 words, each word one value twice: word `w` of the
/// first holds `s[w]`, of the second `s[8 + w]`. A register's scales are then a permutation
/// of words.
#[target_feature(enable = "avx2")]
#[inline]
fn doubled(s: __m256i) -> (__m256i, __m256i) {
    // Words 0-3 of `lo` hold values 0-3, words 4-7 values 8-11; of `hi`, 4-7 and 12-15 (the
    // unpacks work within 128-bit halves).
    let (lo, hi) = (_mm256_unpacklo_epi16(s, s), _mm256_unpackhi_epi16(s, s));
    (_mm256_permute2x128_si256::<0x20>(lo, hi), _mm256_permute2x128_si256::<0x31>(lo, hi))
}

/// Unpacks super-block `block` of kind `T`.
///
/// # Safety
/// `block` must address one super-block of kind `T`; AVX2, F16C.
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn unpack<const T: u8>(block: *const u8) -> Unpacked {
    let low = _mm256_set1_epi8(0x0f);
    let mut w = [_mm256_setzero_si256(); 8];
    let mut scales = [_mm256_setzero_si256(); 8];
    if T == Q6 {
        // SAFETY: the 16 i8 scales at 192 and `d` at 208.
        let (sc, d) =
            unsafe { (_mm256_cvtepi8_epi16(_mm_loadu_si128(block.add(192).cast())), half_at(block.add(208))) };
        // Register `c` covers scales `2c` (its first 16 values) and `2c + 1`.
        let (first, second) = doubled(sc);
        for (c, s) in scales.iter_mut().enumerate() {
            let words = if c < 4 { first } else { second };
            let (a, b) = (2 * (c % 4) as i32, 2 * (c % 4) as i32 + 1);
            *s = _mm256_permutevar8x32_epi32(words, _mm256_setr_epi32(a, a, a, a, b, b, b, b));
        }
        let two_bits = _mm256_set1_epi8(0x30);
        for n in 0..2 {
            // SAFETY: `ql` bytes `64n..64n + 64` and `qh` bytes `32n..32n + 32`.
            let (a, b, q) = unsafe {
                (
                    _mm256_loadu_si256(block.add(64 * n).cast()),
                    _mm256_loadu_si256(block.add(64 * n + 32).cast()),
                    _mm256_loadu_si256(block.add(128 + 32 * n).cast()),
                )
            };
            // Values `128n + 32t + l`: a nibble of `a` (t even) or `b` (t odd), low for t < 2,
            // with the two bits `2t, 2t + 1` of `qh` moved to bits 4-5 (16-bit shifts keep
            // each byte's bits in its byte once masked).
            let bits = |v: __m256i| _mm256_and_si256(v, two_bits);
            w[4 * n] = _mm256_or_si256(_mm256_and_si256(a, low), bits(_mm256_slli_epi16::<4>(q)));
            w[4 * n + 1] = _mm256_or_si256(_mm256_and_si256(b, low), bits(_mm256_slli_epi16::<2>(q)));
            w[4 * n + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(a), low), bits(q));
            w[4 * n + 3] =
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(b), low), bits(_mm256_srli_epi16::<2>(q)));
        }
        return Unpacked { w, scales, mins: _mm256_slli_epi16::<5>(sc), d, dmin: d };
    }
    // SAFETY: `d` at 0, `dmin` at 2, the 12 bytes of 6-bit scales and mins at 4.
    let (d, dmin, packed) = unsafe {
        let mut packed = [0u8; 16];
        core::ptr::copy_nonoverlapping(block.add(4), packed.as_mut_ptr(), 12);
        (half_at(block), half_at(block.add(2)), packed)
    };
    let mut sm = [0u8; 16];
    for j in 0..8 {
        let (sc, m) = tessera_core::kquant::scale_min(j, &packed[..12]);
        (sm[j], sm[8 + j]) = (sc, m);
    }
    // SAFETY: 16 bytes.
    let sm = _mm256_cvtepu8_epi16(unsafe { _mm_loadu_si128(sm.as_ptr().cast()) });
    let (sc, min) = doubled(sm);
    for (c, s) in scales.iter_mut().enumerate() {
        // Register `c` (values `32c..32c + 32`) lies in block `c`.
        *s = _mm256_permutevar8x32_epi32(sc, _mm256_set1_epi32(c as i32));
    }
    // The min of each 16 values is that of its 32: the doubled words, in order.
    let mins = min;
    let (qs, qh) = if T == Q4 { (16, None) } else { (48, Some(16)) };
    // SAFETY: the 32 bytes of fifth bits.
    let h = qh.map(|o| unsafe { _mm256_loadu_si256(block.add(o).cast()) });
    for c in 0..4 {
        // SAFETY: nibble bytes `32c..32c + 32`: low nibbles are values `64c..64c + 32`, high
        // nibbles `64c + 32..64c + 64`.
        let v = unsafe { _mm256_loadu_si256(block.add(qs + 32 * c).cast()) };
        w[2 * c] = _mm256_and_si256(v, low);
        w[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16::<4>(v), low);
        if let Some(h) = h {
            // Bit `j` of each byte of `h` is the fifth bit of register `j`'s value.
            for j in [2 * c, 2 * c + 1] {
                let mask = _mm256_set1_epi8(1 << j);
                let set = _mm256_cmpeq_epi8(_mm256_and_si256(h, mask), mask);
                w[j] = _mm256_or_si256(w[j], _mm256_and_si256(set, _mm256_set1_epi8(16)));
            }
        }
    }
    Unpacked { w, scales, mins, d, dmin }
}

/// Every row of kind `T` by `N` columns.
///
/// # Safety
/// As [`crate::fast::simd::QGemv`] on rows of kind `T` and [`K8Column`]s with `n = N`; AVX2,
/// FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
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
        let mut acc = [_mm256_setzero_ps(); N];
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
                    let p: [__m256i; 8] = core::array::from_fn(|c| {
                        let pairs = _mm256_maddubs_epi16(u.w[c], _mm256_loadu_si256(q.add(32 * c).cast()));
                        _mm256_madd_epi16(pairs, u.scales[c])
                    });
                    (p, _mm256_loadu_si256(col.s.add(32 * sb).cast()), core::ptr::read_unaligned(col.d.add(sb)))
                };
                let add = _mm256_add_epi32;
                let mut sum = add(add(add(p[0], p[1]), add(p[2], p[3])), add(add(p[4], p[5]), add(p[6], p[7])));
                let min_sum = _mm256_madd_epi16(u.mins, sums);
                if T == Q6 {
                    sum = _mm256_sub_epi32(sum, min_sum);
                } else {
                    mins[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(min_sum), _mm256_set1_ps(u.dmin * dy), mins[j]);
                }
                acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_set1_ps(u.d * dy), acc[j]);
            }
        }
        for j in 0..N {
            let v = _mm256_sub_ps(acc[j], mins[j]);
            let v = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
            let v = _mm_add_ps(v, _mm_movehl_ps(v, v));
            // SAFETY: output `r` of column `j`.
            unsafe { *y.add(j * ldy + r) = _mm_cvtss_f32(_mm_add_ss(v, _mm_movehdup_ps(v))) };
        }
    }
}

/// [`crate::fast::simd::QGemv`] on K-quant rows and [`K8Column`]s.
///
/// # Safety
/// As [`crate::fast::simd::QGemv`] on K-quant rows and [`K8Column`]s; AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn gemv(nblocks: usize, rows: &Rows, x: *const u8, ldx: usize, n: usize, y: *mut f32, ldy: usize) {
    debug_assert!((nblocks * QK).is_multiple_of(QK_K));
    // SAFETY: forwarded; `n <= 8` columns exist.
    unsafe { kquant_columns!(cols, n, nblocks, rows, x, ldx, y, ldy) }
}

/// [`crate::fast::simd::K8Quantize`]: per super-block `d = max|x| / 127` and
/// `q = round_half_even(x / d)` (times `1 / d`), and the sums of each 16 values.
///
/// # Safety
/// As [`crate::fast::simd::K8Quantize`]; AVX2.
#[target_feature(enable = "avx2")]
pub unsafe fn quantize(x: *const f32, superblocks: usize, _weights: DType, out: *mut u8) {
    let col = K8Column::at(out, superblocks);
    let sign = _mm256_set1_ps(-0.0);
    for sb in 0..superblocks {
        // SAFETY: values `256 sb..256 sb + 256` of the input.
        let v: [__m256; 32] = core::array::from_fn(|i| unsafe { _mm256_loadu_ps(x.add(QK_K * sb + 8 * i)) });
        let m = v.iter().fold(_mm256_setzero_ps(), |m, &vi| _mm256_max_ps(m, _mm256_andnot_ps(sign, vi)));
        let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
        let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        let d = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m))) / 127.0;
        let id = _mm256_set1_ps(if d != 0.0 { 1.0 / d } else { 0.0 });
        let mut sums = [0i16; 16];
        for (i, s) in sums.iter_mut().enumerate() {
            let q = [v[2 * i], v[2 * i + 1]].map(|vi| {
                _mm256_cvtps_epi32(_mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(
                    vi, id,
                )))
            });
            let t = _mm256_add_epi32(q[0], q[1]);
            let t = _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256::<1>(t));
            let t = _mm_add_epi32(t, _mm_shuffle_epi32::<0x4e>(t));
            // At most 16 * 127 in magnitude.
            *s = _mm_cvtsi128_si32(_mm_add_epi32(t, _mm_shuffle_epi32::<0xb1>(t))) as i16;
            // 16 x i32 to 16 x i8 (the packs interleave 128-bit halves; the permute restores
            // the order).
            let words = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packs_epi32(q[0], q[1]));
            let bytes = _mm_packs_epi16(_mm256_castsi256_si128(words), _mm256_extracti128_si256::<1>(words));
            // SAFETY: values `16i..16i + 16` of super-block `sb`.
            unsafe { _mm_storeu_si128(col.q.add(QK_K * sb + 16 * i).cast_mut().cast(), bytes) };
        }
        // SAFETY: the super-block's sums and scale.
        unsafe { col.put(sb, sums, d) };
    }
}
