//! The AVX-512 VNNI int8 micro-kernel and weight packer: 32 weight rows (two registers of
//! 16 rows x 4 bytes) by 6 activation columns; `vpdpbusd` multiplies the unsigned weights
//! (`w + bias`) by the broadcast signed activations, 4 values per lane.

use core::arch::x86_64::*;

use tessera_core::DType;

use super::gemm::{prefetch_tile, store_tile};

use crate::fast::simd::scalar::pack::{bytes, get_f32, get_i32};
use crate::fast::simd::{qa_block_bytes, qb_block_bytes, Rows, QK};

pub const MR: usize = 32;
pub const NR: usize = 6;

/// [`crate::fast::simd::QGemmTile`] for a 32 x 6 tile of unsigned weight panels.
///
/// Per block: integer sums start from each column's correction (`-bias * sum(q)`), take 8
/// `vpdpbusd` steps, then are converted and scaled by `d_a * d_b` into the f32 sums.
///
/// # Safety
/// As [`crate::fast::simd::QGemmTile`]; AVX-512F/BW and VNNI.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub unsafe fn tile(nblocks: usize, a: *const u8, b: *const u8, c: *mut f32, ldc: usize, accumulate: bool) {
    prefetch_tile(c, ldc, NR);
    let mut acc = [[_mm512_setzero_ps(); 2]; NR];
    for blk in 0..nblocks {
        // SAFETY: block `blk < nblocks` of both panels.
        let (ab, bb) = unsafe { (a.add(blk * qa_block_bytes(MR)), b.add(blk * qb_block_bytes(NR))) };
        let mut sums = [[_mm512_setzero_si512(); 2]; NR];
        for (j, s) in sums.iter_mut().enumerate() {
            // SAFETY: column `j`'s correction inside the activation block.
            let corr = _mm512_set1_epi32(unsafe { get_i32(bb.add(NR * (QK + 4) + 4 * j)) });
            *s = [corr, corr];
        }
        for g in 0..QK / 4 {
            // SAFETY: group `g` of the weight block: 2 x 64 bytes.
            let (a0, a1) = unsafe {
                (_mm512_loadu_si512(ab.add(g * 4 * MR).cast()), _mm512_loadu_si512(ab.add(g * 4 * MR + 64).cast()))
            };
            for (j, s) in sums.iter_mut().enumerate() {
                // SAFETY: values `4g..4g + 4` of column `j` inside the activation block.
                let y = _mm512_set1_epi32(unsafe { get_i32(bb.add(j * QK + 4 * g)) });
                s[0] = _mm512_dpbusd_epi32(s[0], a0, y);
                s[1] = _mm512_dpbusd_epi32(s[1], a1, y);
            }
        }
        // SAFETY: the 32 row scales follow the weight block's values.
        let (da0, da1) =
            unsafe { (_mm512_loadu_ps(ab.add(QK * MR).cast()), _mm512_loadu_ps(ab.add(QK * MR + 64).cast())) };
        for (j, (accj, s)) in acc.iter_mut().zip(&sums).enumerate() {
            // SAFETY: column `j`'s scale inside the activation block.
            let db = _mm512_set1_ps(unsafe { get_f32(bb.add(NR * QK + 4 * j)) });
            accj[0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[0]), _mm512_mul_ps(da0, db), accj[0]);
            accj[1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[1]), _mm512_mul_ps(da1, db), accj[1]);
        }
    }
    // SAFETY: `c` addresses the tile, as the caller guarantees.
    unsafe { store_tile(&acc, c, ldc, accumulate) }
}

/// Block `blk` of 16 rows as 8 registers `[group][row][4 bytes]` (signed values or, with
/// `unsigned`, `w + bias`) and the 16 scales as f16 bits.
///
/// # Safety
/// The 16 rows from `row0` (`stride` apart) must hold block `blk` of `dtype`; AVX-512F/BW.
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
unsafe fn block16(
    dtype: DType,
    row0: *const u8,
    stride: usize,
    blk: usize,
    unsigned: bool,
) -> ([__m512i; 8], [u16; 16]) {
    let bs = dtype.block_bytes();
    let mut scales = [0u16; 16];
    for (r, s) in scales.iter_mut().enumerate() {
        // SAFETY: the scale of block `blk` of row `r`.
        *s = u16::from_le_bytes(unsafe { bytes(row0.add(r * stride + blk * bs)) });
    }
    let mut g = [_mm512_setzero_si512(); 8];
    if dtype == DType::Q4_0 {
        // z[q] = rows q, q + 4, q + 8, q + 12 (16 nibble bytes each) in its four 128-bit lanes.
        let mut z = [_mm512_setzero_si512(); 4];
        for (q, zq) in z.iter_mut().enumerate() {
            // SAFETY: the 16 nibble bytes of block `blk` of rows q, q + 4, q + 8, q + 12.
            unsafe {
                let lane = |l: usize| _mm_loadu_si128(row0.add((q + 4 * l) * stride + blk * bs + 2).cast());
                let v = _mm512_castsi128_si512(lane(0));
                let v = _mm512_inserti32x4::<1>(v, lane(1));
                let v = _mm512_inserti32x4::<2>(v, lane(2));
                *zq = _mm512_inserti32x4::<3>(v, lane(3));
            }
        }
        // A 4 x 4 transpose of dwords within each lane puts dword `d` of rows 0..15, in order,
        // into one register.
        let t0 = _mm512_unpacklo_epi32(z[0], z[1]);
        let t1 = _mm512_unpackhi_epi32(z[0], z[1]);
        let t2 = _mm512_unpacklo_epi32(z[2], z[3]);
        let t3 = _mm512_unpackhi_epi32(z[2], z[3]);
        let d = [
            _mm512_unpacklo_epi64(t0, t2),
            _mm512_unpackhi_epi64(t0, t2),
            _mm512_unpacklo_epi64(t1, t3),
            _mm512_unpackhi_epi64(t1, t3),
        ];
        let low = _mm512_set1_epi8(0x0f);
        let minus8 = _mm512_set1_epi8(-8);
        for (i, &di) in d.iter().enumerate() {
            // Byte j holds value j (low nibble) and value j + 16 (high nibble).
            let (lo, hi) = (_mm512_and_si512(di, low), _mm512_and_si512(_mm512_srli_epi16::<4>(di), low));
            (g[i], g[i + 4]) =
                if unsigned { (lo, hi) } else { (_mm512_add_epi8(lo, minus8), _mm512_add_epi8(hi, minus8)) };
        }
    } else {
        let flip = _mm512_set1_epi8(if unsigned { -128 } else { 0 });
        // SAFETY: forwarded: the 32 value bytes of block `blk` of the 16 rows.
        let t = unsafe { transpose16(row0.add(blk * bs + 2), stride) };
        for (gi, ti) in g.iter_mut().zip(t) {
            *gi = _mm512_xor_si512(ti, flip);
        }
    }
    (g, scales)
}

/// 32 bytes of each of 16 rows (from `p`, rows `stride` apart) as 8 registers
/// `[group][row][4 bytes]`: register `i` holds bytes `4i..4i + 4` of rows 0..15, in order.
///
/// # Safety
/// The 16 rows must hold 32 readable bytes from `p`; AVX-512F/BW.
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
pub(super) unsafe fn transpose16(p: *const u8, stride: usize) -> [__m512i; 8] {
    // z[r] = row r's 32 bytes, then row r + 8's: two 8 x 8 dword transposes at once.
    let mut z = [_mm512_setzero_si512(); 8];
    for (r, zr) in z.iter_mut().enumerate() {
        // SAFETY: the 32 bytes of rows r and r + 8.
        unsafe {
            let lo = _mm256_loadu_si256(p.add(r * stride).cast());
            let hi = _mm256_loadu_si256(p.add((r + 8) * stride).cast());
            *zr = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi);
        }
    }
    let mut t = [_mm512_setzero_si512(); 8];
    for i in 0..4 {
        t[2 * i] = _mm512_unpacklo_epi32(z[2 * i], z[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(z[2 * i], z[2 * i + 1]);
    }
    let mut u = [_mm512_setzero_si512(); 8];
    for h in 0..2 {
        let (t0, t1, t2, t3) = (t[4 * h], t[4 * h + 1], t[4 * h + 2], t[4 * h + 3]);
        u[4 * h] = _mm512_unpacklo_epi64(t0, t2);
        u[4 * h + 1] = _mm512_unpackhi_epi64(t0, t2);
        u[4 * h + 2] = _mm512_unpacklo_epi64(t1, t3);
        u[4 * h + 3] = _mm512_unpackhi_epi64(t1, t3);
    }
    // u[4h + c] holds dwords c (lanes 0, 2) and c + 4 (lanes 1, 3) of rows 4h..4h + 4
    // (lanes 0, 1) and 8 + 4h.. (lanes 2, 3).
    let first = _mm512_set_epi64(13, 12, 5, 4, 9, 8, 1, 0);
    let second = _mm512_set_epi64(15, 14, 7, 6, 11, 10, 3, 2);
    let mut g = [_mm512_setzero_si512(); 8];
    for c in 0..4 {
        g[c] = _mm512_permutex2var_epi64(u[c], first, u[4 + c]);
        g[c + 4] = _mm512_permutex2var_epi64(u[c], second, u[4 + c]);
    }
    g
}

/// [`crate::fast::simd::PackAQ`] for 32-row panels, 16 rows at a time in registers.
///
/// # Safety
/// As [`crate::fast::simd::PackAQ`]; AVX-512F/BW and F16C.
#[target_feature(enable = "avx512f,avx512bw,f16c")]
pub unsafe fn pack_a(rows: &Rows, b0: usize, nblocks: usize, mr: usize, unsigned: bool, dst: *mut u8) {
    if mr != MR || rows.count != MR {
        // Partial panels (the last rows of a matrix) are packed value by value.
        // SAFETY: forwarded.
        return unsafe { crate::fast::simd::scalar::pack::pack_a_q(rows, b0, nblocks, mr, unsigned, dst) };
    }
    for blk in 0..nblocks {
        // SAFETY: block `blk` of the panel.
        let out = unsafe { dst.add(blk * qa_block_bytes(MR)) };
        for h in 0..2 {
            // SAFETY: rows `16h..16h + 16` exist and hold block `b0 + blk`.
            let (g, scales) =
                unsafe { block16(rows.dtype, rows.ptr.add(16 * h * rows.stride), rows.stride, b0 + blk, unsigned) };
            for (i, gi) in g.iter().enumerate() {
                // SAFETY: group `i`, rows `16h..16h + 16` of the block: 64 bytes.
                unsafe { _mm512_storeu_si512(out.add(i * 4 * MR + 64 * h).cast(), *gi) };
            }
            // SAFETY: 16 f16 scales in, 16 f32 scales out after the block's values.
            unsafe {
                let d = _mm512_cvtph_ps(_mm256_loadu_si256(scales.as_ptr().cast()));
                _mm512_storeu_ps(out.add(QK * MR + 64 * h).cast(), d);
            }
        }
    }
}
