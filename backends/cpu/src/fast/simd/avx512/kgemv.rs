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
//! Q4_K and Q5_K keep values `j` and `32 + j` of each 64 in the low and high nibble of one
//! byte, so 64 loaded bytes hold values `0..32` and `64..96` of 128 in their low nibbles and
//! `32..64`, `96..128` in their high ones. For these rows the activations are stored in that
//! order ([`interleaved`]), and a register of weights is one mask (or one shift and a mask)
//! of loaded bytes. The scales reach their 16-bit lanes by byte shuffles within 128-bit lanes
//! (`vpshufb`, one micro-op) rather than word permutes across the register (two).
//!
//! Q6_K has a scale per 16 values, one per 128-bit lane of a register: there `vpdpbusd` sums
//! each 4 products, two registers of sums are packed to 16 bits, and one `vpmaddwd` (or
//! `vpdpwssd`) applies the scales, which need only two shuffled registers per super-block.
//!
//! The weights stream through once; a software prefetch runs [`PREFETCH_BYTES`] ahead of
//! them, because one row after another is a single stream that the hardware prefetchers
//! alone keep too short to cover the memory's latency.

use core::arch::x86_64::*;

use tessera_core::kquant::QK_K;
use tessera_core::DType;

use super::kgemm::superblock_scale;
use crate::fast::simd::kind::{Q4, Q6};
use crate::fast::simd::{kquant_columns, K8Column, Rows, QK};

/// How far ahead of the super-block being multiplied its row's bytes are prefetched.
const PREFETCH_BYTES: usize = 4096;

/// `vpshufb` indices that turn the 16 signed scales of a Q6_K super-block (in every 128-bit
/// lane) into the scales of `vpackssdw(vpdpbusd(w[2t]), vpdpbusd(w[2t + 1]))`: in 128-bit lane
/// `L`, four words from register `2t` (values of group `8t + L`) then four from `2t + 1`
/// (group `8t + 4 + L`). Each scale lands in a word's high byte (`0x80` zeroes the low one),
/// and an arithmetic shift by 8 then extends its sign.
const SIX_PICKS: [[u8; 64]; 2] = {
    let mut t = [[0x80; 64]; 2];
    let mut pair = 0;
    while pair < 2 {
        let mut b = 1;
        while b < 64 {
            let (lane, word) = (b / 16, (b % 16) / 2);
            t[pair][b] = (8 * pair + 4 * (word / 4) + lane) as u8;
            b += 2;
        }
        pair += 1;
    }
    t
};

/// The 32-value groups in the first and second half of interleaved register `c`: values
/// `32g..32g + 32` of the super-block.
const fn interleaved_groups(c: usize) -> [usize; 2] {
    [4 * (c / 2) + c % 2, 4 * (c / 2) + c % 2 + 2]
}

/// `vpshufb` indices that turn the scale and min bytes of a Q4_K/Q5_K super-block (bytes
/// 0-7 scales, 8-15 mins, in every 128-bit lane) into the 16-bit scales of interleaved
/// register `c`'s `vpmaddubsw` pairs: the scale of its first group in the low 256 bits, of
/// its second in the high 256; index `0x80` zeroes each high byte.
const fn scale_picks() -> [[u8; 64]; 4] {
    let mut t = [[0x80; 64]; 4];
    let mut c = 0;
    while c < 4 {
        let mut b = 0;
        while b < 64 {
            t[c][b] = interleaved_groups(c)[b / 32] as u8;
            b += 2;
        }
        c += 1;
    }
    t
}
const SCALE_PICKS: [[u8; 64]; 4] = scale_picks();
/// `vpshufb` indices for the min of each 16 values (that of its 32) as 16-bit lanes.
const MIN_PICKS: [u8; 32] = {
    let mut t = [0x80; 32];
    let mut b = 0;
    while b < 32 {
        // 128-bit lane `b / 16` holds mins 4 (b / 16)..; each min serves two 16-value sums.
        t[b] = (8 + b / 4) as u8;
        b += 2;
    }
    t
};

/// Where the 16 values `16i..16i + 16` of a super-block go in an interleaved activation
/// column: the 32-value groups of each 128 are stored in the order 0, 2, 1, 3.
const fn interleaved(i: usize) -> usize {
    let (h, g, half) = (i / 8, (i / 2) % 4, i % 2);
    128 * h + 32 * [0, 2, 1, 3][g] + 16 * half
}

/// A super-block unpacked for the products.
struct Unpacked {
    /// Values `64c..64c + 64` as unsigned bytes (Q4_K and Q5_K: those of
    /// [`interleaved_groups`]`(c)`).
    w: [__m512i; 4],
    /// Q4_K and Q5_K: the scale of each `vpmaddubsw` pair of `w[c]`, as i16. Q6_K: in the first
    /// two, the scales of the packed sums of `w[0]`, `w[1]` and of `w[2]`, `w[3]` ([`SIX_PICKS`]).
    scales: [__m512i; 4],
    /// The min of each 16 values, as i16 (Q6_K: 32 times the scale).
    mins: __m256i,
    /// `d`, then the scale of the mins (Q6_K: `d` twice), as f32.
    d: __m128,
}

/// A register whose first 32 bytes are `a` and last 32 are `b`.
#[target_feature(enable = "avx512f")]
#[inline]
fn halves8(a: i8, b: i8) -> __m512i {
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(_mm256_set1_epi8(a)), _mm256_set1_epi8(b))
}

/// `acc + vpdpwssd(a, b)` as the one instruction. Written out because LLVM's machine combiner
/// splits the intrinsic into `vpmaddwd` + `vpaddd` (two micro-ops on the same two ports) to
/// shorten a dependency chain, while these loops are bound by micro-ops, not by latency.
#[target_feature(enable = "avx512f,avx512vnni")]
#[inline]
fn dpwssd(acc: __m512i, a: __m512i, b: __m512i) -> __m512i {
    let mut acc = acc;
    // SAFETY: register operands only; the enclosing function has AVX-512 VNNI.
    unsafe {
        core::arch::asm!("vpdpwssd {acc}, {a}, {b}", acc = inout(zmm_reg) acc, a = in(zmm_reg) a, b = in(zmm_reg) b,
            options(pure, nomem, nostack, preserves_flags));
    }
    acc
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
        // SAFETY: the 16 i8 scales at 192 and `d` at 208; 2 x 64 bytes of indices.
        let (sc, d, picks) = unsafe {
            let sc = _mm_loadu_si128(block.add(192).cast());
            (sc, half_at(block.add(208)), SIX_PICKS.map(|p| _mm512_loadu_si512(p.as_ptr().cast())))
        };
        let all = _mm512_broadcast_i32x4(sc);
        let pair = picks.map(|p| _mm512_srai_epi16::<8>(_mm512_shuffle_epi8(all, p)));
        let scales = [pair[0], pair[1], pair[0], pair[1]];
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
        return Unpacked { w, scales, mins: _mm256_slli_epi16::<5>(_mm256_cvtepi8_epi16(sc)), d: _mm_set1_ps(d) };
    }
    // SAFETY: the scales and mins; `d` and `dmin`, the first 4 bytes.
    let (sm, d) = unsafe {
        let d = core::ptr::read_unaligned(block.cast::<i32>());
        (_mm512_broadcast_i32x4(scales_and_mins(block)), _mm_cvtph_ps(_mm_cvtsi32_si128(d)))
    };
    // SAFETY: 4 x 64 and 32 bytes.
    let (picks, min_picks) = unsafe {
        (SCALE_PICKS.map(|p| _mm512_loadu_si512(p.as_ptr().cast())), _mm256_loadu_si256(MIN_PICKS.as_ptr().cast()))
    };
    let scales = picks.map(|p| _mm512_shuffle_epi8(sm, p));
    let (qs, qh) = if T == Q4 { (16, None) } else { (48, Some(16)) };
    // SAFETY: the 32 bytes of fifth bits.
    let h = qh.map(|o| unsafe { _mm512_broadcast_i64x4(_mm256_loadu_si256(block.add(o).cast())) });
    for k in 0..2 {
        // SAFETY: nibble bytes `64k..64k + 64`.
        let v = unsafe { _mm512_loadu_si512(block.add(qs + 64 * k).cast()) };
        w[2 * k] = _mm512_and_si512(v, low);
        w[2 * k + 1] = _mm512_and_si512(_mm512_srli_epi16::<4>(v), low);
    }
    if let Some(h) = h {
        for (c, wc) in w.iter_mut().enumerate() {
            // Value `32g + j` has its fifth bit in bit `g` of byte `j`.
            let [g0, g1] = interleaved_groups(c);
            let bits = halves8((1u8 << g0) as i8, (1u8 << g1) as i8);
            *wc = _mm512_mask_add_epi8(*wc, _mm512_test_epi8_mask(h, bits), *wc, _mm512_set1_epi8(16));
        }
    }
    Unpacked { w, scales, mins: _mm256_shuffle_epi8(_mm512_castsi512_si256(sm), min_picks), d }
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
                let (q, sums, dy) = unsafe {
                    let q = col.q.add(QK_K * sb);
                    let q: [__m512i; 4] = core::array::from_fn(|c| _mm512_loadu_si512(q.add(64 * c).cast()));
                    (q, _mm256_loadu_si256(col.s.add(32 * sb).cast()), core::ptr::read_unaligned(col.d.add(sb)))
                };
                let mut sum;
                if T == Q6 {
                    // Sums of 4 products, at most 4 * 63 * 128 in magnitude: packed to i16
                    // exactly, then one `vpmaddwd` and one `vpdpwssd` by the scales.
                    let p: [__m512i; 4] =
                        core::array::from_fn(|c| _mm512_dpbusd_epi32(_mm512_setzero_si512(), u.w[c], q[c]));
                    sum = _mm512_madd_epi16(_mm512_packs_epi32(p[0], p[1]), u.scales[0]);
                    sum = dpwssd(sum, _mm512_packs_epi32(p[2], p[3]), u.scales[1]);
                } else {
                    let p: [__m512i; 4] = core::array::from_fn(|c| _mm512_maddubs_epi16(u.w[c], q[c]));
                    sum = _mm512_madd_epi16(p[0], u.scales[0]);
                    // Written out, not `zip().skip()`: the iterator's `next` was left out of
                    // line, spilling every register around a call per super-block.
                    sum = dpwssd(sum, p[1], u.scales[1]);
                    sum = dpwssd(sum, p[2], u.scales[2]);
                    sum = dpwssd(sum, p[3], u.scales[3]);
                }
                let min_sum = _mm256_madd_epi16(u.mins, sums);
                let scale = _mm_mul_ps(u.d, _mm_set1_ps(dy));
                if T == Q6 {
                    sum = _mm512_sub_epi32(sum, _mm512_zextsi256_si512(min_sum));
                } else {
                    let min_scale = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(scale), _mm256_set1_epi32(1));
                    mins[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(min_sum), min_scale, mins[j]);
                }
                acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_broadcastss_ps(scale), acc[j]);
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
/// * (1 / d))`, and the sums of each 16 values; for Q4_K and Q5_K rows the values are stored
/// [`interleaved`].
///
/// # Safety
/// As [`crate::fast::simd::K8Quantize`]; AVX-512F/BW/VL.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub unsafe fn quantize(x: *const f32, superblocks: usize, weights: DType, out: *mut u8) {
    let interleave = matches!(weights, DType::Q4_K | DType::Q5_K);
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
            let at = QK_K * sb + if interleave { interleaved(i) } else { 16 * i };
            // SAFETY: the place of values `16i..16i + 16` of super-block `sb`.
            unsafe { _mm_storeu_si128(col.q.add(at).cast_mut().cast(), _mm512_cvtepi32_epi8(q)) };
        }
        // SAFETY: the super-block's sums and scale.
        unsafe { col.put(sb, sums, d) };
    }
}
