//! The AVX-512 VNNI int8 micro-kernel and packer for K-quant weights: 32 weight rows by 4
//! activation columns. For a block of 32 values with weights `s_w q_w - dmin m_w` and
//! activations `d_a q_a`, the product is `d_a (s_w sum(q_w q_a) - dmin m_w sum(q_a))`.
//! Q6_K has no mins: its value is `s_w (q_w - 32)`, so its integer sums start from
//! `-32 sum(q_a)`.
//!
//! FMAs take the same ports as `vpdpbusd` here, so the kernel spends as few as it can: the
//! activations have one scale `d_a` per super-block (256 values), so a super-block's blocks
//! are summed without it and multiplied by it once (one conversion and FMA per block and
//! register, for `s_w`), and the mins, small integers, meet the blocks' `sum(q_a)` in integer
//! `vpdpwssd`, 2 blocks per step, with one FMA by `dmin` per super-block.

use core::arch::x86_64::*;

use super::gemm::{prefetch_tile, store_tile};
use super::qgemm::transpose16;
use crate::fast::simd::scalar::kquant::{pack_scales, KOut};
use crate::fast::simd::scalar::pack::{get_f32, get_i32, put_f32};
use crate::fast::simd::{kq_block_at, kq_superblock_bytes, kq_tail_at, Rows, QK};
use tessera_core::DType;

pub const MR: usize = 32;
pub const NR: usize = 4;

/// [`crate::fast::simd::QGemmTile`] for a 32 x 4 tile of K-quant panels (`nblocks` a multiple
/// of 8). `HALVES`: values 0-15 and 16-31 of a block have their own scales and no mins (Q6_K);
/// otherwise both halves share the first scale (Q4_K, Q5_K), and a block is one integer sum.
///
/// # Safety
/// As [`crate::fast::simd::QGemmTile`] on K-quant panels; AVX-512F/BW and VNNI.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub unsafe fn tile<const HALVES: bool>(
    nblocks: usize,
    a: *const u8,
    b: *const u8,
    c: *mut f32,
    ldc: usize,
    accumulate: bool,
) {
    prefetch_tile(c, ldc, NR);
    let mut acc = [[_mm512_setzero_ps(); 2]; NR];
    for sb in 0..nblocks / 8 {
        // SAFETY: super-block `sb < nblocks / 8` of both panels.
        let (a_sb, b_sb) = unsafe { (a.add(sb * kq_superblock_bytes(MR)), b.add(sb * kq_superblock_bytes(NR))) };
        let mut part_sums = [[_mm512_setzero_ps(); 2]; NR];
        for blk in 0..8 {
            let (ab, bb) = (a_sb.wrapping_add(kq_block_at(MR, blk)), b_sb.wrapping_add(kq_block_at(NR, blk)));
            // The weights one block ahead, into L1 (the panel streams from L2).
            let ahead = ab.wrapping_add(kq_block_at(MR, 1));
            let parts = if HALVES { 2 } else { 1 };
            for part in 0..parts {
                let mut sums: [[__m512i; 2]; NR] = core::array::from_fn(|j| {
                    let start = if HALVES {
                        // SAFETY: column `j`'s start for this half, after the values.
                        _mm512_set1_epi32(unsafe { get_i32(bb.add(NR * QK + 8 * j + 4 * part)) })
                    } else {
                        _mm512_setzero_si512()
                    };
                    [start, start]
                });
                for g in part * 8 / parts..(part + 1) * 8 / parts {
                    for line in 0..3 {
                        _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add((3 * g + line) * 64).cast());
                    }
                    // SAFETY: group `g` of the weight block: 2 x 64 bytes.
                    let (a0, a1) = unsafe {
                        (
                            _mm512_loadu_si512(ab.add(g * 4 * MR).cast()),
                            _mm512_loadu_si512(ab.add(g * 4 * MR + 64).cast()),
                        )
                    };
                    for (j, s) in sums.iter_mut().enumerate() {
                        // SAFETY: values `4g..4g + 4` of column `j` inside the activation block.
                        let y = unsafe { core::ptr::read_unaligned(bb.add(j * QK + 4 * g).cast::<i32>()) };
                        let y = _mm512_set1_epi32(y);
                        s[0] = _mm512_dpbusd_epi32(s[0], a0, y);
                        s[1] = _mm512_dpbusd_epi32(s[1], a1, y);
                    }
                }
                // SAFETY: the part's scale vector (`MR` f32) after the values.
                let (s0, s1) = unsafe {
                    let scale = ab.add(QK * MR + 4 * MR * part);
                    (_mm512_loadu_ps(scale.cast()), _mm512_loadu_ps(scale.add(64).cast()))
                };
                for (t, s) in part_sums.iter_mut().zip(&sums) {
                    t[0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[0]), s0, t[0]);
                    t[1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[1]), s1, t[1]);
                }
            }
        }
        let (a_tail, b_tail) = (a_sb.wrapping_add(kq_tail_at(MR)), b_sb.wrapping_add(kq_tail_at(NR)));
        if !HALVES {
            // The mins by the activations' block sums: 4 pairs of blocks per register.
            let mut min_sums = [[_mm512_setzero_si512(); 2]; NR];
            for pair in 0..4 {
                // SAFETY: the mins of block pair `pair` (`MR` i32).
                let (m0, m1) = unsafe {
                    let m = a_tail.add(4 * MR * pair);
                    (_mm512_loadu_si512(m.cast()), _mm512_loadu_si512(m.add(64).cast()))
                };
                for (j, t) in min_sums.iter_mut().enumerate() {
                    // SAFETY: column `j`'s sums of block pair `pair`.
                    let y = _mm512_set1_epi32(unsafe { get_i32(b_tail.add(4 * NR + 16 * j + 4 * pair)) });
                    t[0] = _mm512_dpwssd_epi32(t[0], m0, y);
                    t[1] = _mm512_dpwssd_epi32(t[1], m1, y);
                }
            }
            // SAFETY: the `dmin` vector (`MR` f32) after the mins.
            let (d0, d1) = unsafe {
                let dmin = a_tail.add(16 * MR);
                (_mm512_loadu_ps(dmin.cast()), _mm512_loadu_ps(dmin.add(64).cast()))
            };
            for (t, m) in part_sums.iter_mut().zip(&min_sums) {
                t[0] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(m[0]), d0, t[0]);
                t[1] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(m[1]), d1, t[1]);
            }
        }
        for (j, (accj, t)) in acc.iter_mut().zip(&part_sums).enumerate() {
            // SAFETY: column `j`'s scale.
            let d = _mm512_set1_ps(unsafe { get_f32(b_tail.add(4 * j)) });
            accj[0] = _mm512_fmadd_ps(t[0], d, accj[0]);
            accj[1] = _mm512_fmadd_ps(t[1], d, accj[1]);
        }
    }
    // SAFETY: `c` addresses the tile, as the caller guarantees.
    unsafe { store_tile(&acc, c, ldc, accumulate) }
}

/// The scale `d = max|x| / 127` of a super-block's 256 values, and `1 / d` (0 for zeros) in
/// every lane.
#[target_feature(enable = "avx512f")]
#[inline]
pub fn superblock_scale(v: &[__m512; 16]) -> (f32, __m512) {
    let amax = v.iter().fold(_mm512_setzero_ps(), |m, &vi| _mm512_max_ps(m, _mm512_abs_ps(vi)));
    let d = _mm512_reduce_max_ps(amax) / 127.0;
    (d, _mm512_set1_ps(if d != 0.0 { 1.0 / d } else { 0.0 }))
}

/// [`crate::fast::simd::KQuantize`]: per super-block `d = max|x| / 127` and
/// `q = round_half_even(x / d)` (times `1 / d`), with each block's starts and sums.
///
/// # Safety
/// As [`crate::fast::simd::KQuantize`]; AVX-512F/BW/VL.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub unsafe fn quantize(x: *const f32, nblocks: usize, out: &KOut) {
    const NEAREST: i32 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    for sb in 0..nblocks / 8 {
        // SAFETY: values `256 sb..256 sb + 256` of the input.
        let v: [__m512; 16] = core::array::from_fn(|i| unsafe { _mm512_loadu_ps(x.add(256 * sb + 16 * i)) });
        let (d, id) = superblock_scale(&v);
        let mut sums = [0i16; 8];
        for (b, sum) in sums.iter_mut().enumerate() {
            let q0 = _mm512_cvt_roundps_epi32::<NEAREST>(_mm512_mul_ps(v[2 * b], id));
            let q1 = _mm512_cvt_roundps_epi32::<NEAREST>(_mm512_mul_ps(v[2 * b + 1], id));
            let (lo, hi) = (_mm512_reduce_add_epi32(q0), _mm512_reduce_add_epi32(q1));
            // At most 32 * 127 in magnitude.
            *sum = (lo + hi) as i16;
            // SAFETY: block `b`'s values and starts.
            unsafe {
                let q = out.values(sb, b);
                _mm_storeu_si128(q.cast(), _mm512_cvtepi32_epi8(q0));
                _mm_storeu_si128(q.add(16).cast(), _mm512_cvtepi32_epi8(q1));
                core::ptr::write_unaligned(out.starts(sb, b).cast::<[i32; 2]>(), [-32 * lo, -32 * hi]);
            }
        }
        // SAFETY: the super-block's scale and block sums.
        unsafe {
            put_f32(out.scale(sb), d);
            core::ptr::write_unaligned(out.sums(sb).cast::<[i16; 8]>(), sums);
        }
    }
}

/// The 8 blocks of one super-block of 16 rows, each as 8 registers `[group][row][4 bytes]`.
///
/// # Safety
/// The 16 rows from `row0` (`stride` apart) must hold super-block `sb` of `dtype` (Q4_K, Q5_K
/// or Q6_K); AVX-512F/BW.
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
unsafe fn superblock16(dtype: DType, row0: *const u8, stride: usize, sb: usize) -> [[__m512i; 8]; 8] {
    let at = row0.wrapping_add(sb * dtype.block_bytes());
    let low = _mm512_set1_epi8(0x0f);
    let mut out = [[_mm512_setzero_si512(); 8]; 8];
    match dtype {
        DType::Q4_K | DType::Q5_K => {
            let (qs, qh) = if dtype == DType::Q4_K { (16, None) } else { (48, Some(16)) };
            // SAFETY: the 32 bytes of fifth bits of the 16 rows.
            let h = qh.map(|o| unsafe { transpose16(at.add(o), stride) });
            for c in 0..4 {
                // SAFETY: nibble bytes `32c..32c + 32` of the 16 rows.
                let g = unsafe { transpose16(at.add(qs + 32 * c), stride) };
                for i in 0..8 {
                    let mut v0 = _mm512_and_si512(g[i], low);
                    let mut v1 = _mm512_and_si512(_mm512_srli_epi16::<4>(g[i]), low);
                    if let Some(h) = h {
                        let sixteen = _mm512_set1_epi8(16);
                        let bit0 = _mm512_test_epi8_mask(h[i], _mm512_set1_epi8(1 << (2 * c)));
                        let bit1 = _mm512_test_epi8_mask(h[i], _mm512_set1_epi8((2 << (2 * c)) as i8));
                        v0 = _mm512_mask_add_epi8(v0, bit0, v0, sixteen);
                        v1 = _mm512_mask_add_epi8(v1, bit1, v1, sixteen);
                    }
                    out[2 * c][i] = v0;
                    out[2 * c + 1][i] = v1;
                }
            }
        }
        _ => {
            for n in 0..2 {
                // SAFETY: `ql` bytes `64n..64n + 64` and `qh` bytes `32n..32n + 32` of the 16 rows.
                let (a, b, q) = unsafe {
                    (
                        transpose16(at.add(64 * n), stride),
                        transpose16(at.add(64 * n + 32), stride),
                        transpose16(at.add(128 + 32 * n), stride),
                    )
                };
                let bits = |v: __m512i, m: i8| _mm512_and_si512(v, _mm512_set1_epi8(m));
                for i in 0..8 {
                    let (ai, bi, qi) = (a[i], b[i], q[i]);
                    let a_hi = _mm512_and_si512(_mm512_srli_epi16::<4>(ai), low);
                    let b_hi = _mm512_and_si512(_mm512_srli_epi16::<4>(bi), low);
                    // The two high bits of value group t sit at bits 2t, 2t + 1 of `qh`; each
                    // moves to bits 4, 5 within its byte (the masks keep shifts inside bytes).
                    out[4 * n][i] = _mm512_or_si512(_mm512_and_si512(ai, low), _mm512_slli_epi16::<4>(bits(qi, 0x03)));
                    out[4 * n + 1][i] =
                        _mm512_or_si512(_mm512_and_si512(bi, low), _mm512_slli_epi16::<2>(bits(qi, 0x0c)));
                    out[4 * n + 2][i] = _mm512_or_si512(a_hi, bits(qi, 0x30));
                    out[4 * n + 3][i] = _mm512_or_si512(b_hi, _mm512_srli_epi16::<2>(bits(qi, -64)));
                }
            }
        }
    }
    out
}

/// [`crate::fast::simd::PackAK`] for 32-row panels, 16 rows at a time in registers.
///
/// # Safety
/// As [`crate::fast::simd::PackAK`]; AVX-512F/BW.
#[target_feature(enable = "avx512f,avx512bw")]
pub unsafe fn pack_a(rows: &Rows, b0: usize, nblocks: usize, mr: usize, dst: *mut u8) {
    if mr != MR || rows.count != MR {
        // SAFETY: forwarded.
        return unsafe { crate::fast::simd::scalar::kquant::pack_a(rows, b0, nblocks, mr, dst) };
    }
    for s in 0..nblocks / 8 {
        let sb = b0 / 8 + s;
        // SAFETY: super-block `s` of the panel.
        let out = unsafe { dst.add(s * kq_superblock_bytes(MR)) };
        for h in 0..2 {
            // SAFETY: rows `16h..16h + 16` exist and hold super-block `sb`.
            let blocks = unsafe { superblock16(rows.dtype, rows.ptr.add(16 * h * rows.stride), rows.stride, sb) };
            for (j, block) in blocks.iter().enumerate() {
                for (i, gi) in block.iter().enumerate() {
                    // SAFETY: group `i`, rows `16h..16h + 16` of block `j`: 64 bytes.
                    unsafe { _mm512_storeu_si512(out.add(kq_block_at(MR, j) + i * 4 * MR + 64 * h).cast(), *gi) };
                }
            }
        }
        // SAFETY: the 32 rows hold super-block `sb`; `out` is its packed super-block.
        unsafe { pack_scales(rows, sb, MR, out) };
    }
}
