//! The AVX2 int8 micro-kernel and weight packer: 8 weight rows (one register of 8 rows x 4
//! signed bytes) by 4 activation columns. Without `vpdpbusd`, a 4-value dot product per lane
//! is `vpmaddubsw` (unsigned x signed byte pairs, so the weights' signs move onto the
//! activations first) then `vpmaddwd` with ones.

use core::arch::x86_64::*;

use tessera_core::DType;

use crate::fast::simd::scalar::pack::{bytes, get_f32};
use crate::fast::simd::{qa_block_bytes, qb_block_bytes, Rows, QK};

pub const MR: usize = 8;
pub const NR: usize = 4;

/// `sum(w * y)` of 4-byte groups, per 32-bit lane: `|w|` times `y` with `w`'s sign.
/// `|w| <= 128` and `|y| <= 127` keep the 16-bit pair sums from saturating.
#[target_feature(enable = "avx2")]
#[inline]
pub fn dot4(w_abs: __m256i, w: __m256i, y: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(w_abs, _mm256_sign_epi8(y, w)), _mm256_set1_epi16(1))
}

/// [`crate::fast::simd::QGemmTile`] for an 8 x 4 tile of signed weight panels.
///
/// # Safety
/// As [`crate::fast::simd::QGemmTile`]; AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn tile(nblocks: usize, a: *const u8, b: *const u8, c: *mut f32, ldc: usize, accumulate: bool) {
    let mut acc = [_mm256_setzero_ps(); NR];
    for blk in 0..nblocks {
        // SAFETY: block `blk < nblocks` of both panels.
        let (ab, bb) = unsafe { (a.add(blk * qa_block_bytes(MR)), b.add(blk * qb_block_bytes(NR))) };
        let mut sums = [_mm256_setzero_si256(); NR];
        for g in 0..QK / 4 {
            // SAFETY: group `g` of the weight block: 32 bytes.
            let w = unsafe { _mm256_loadu_si256(ab.add(g * 4 * MR).cast()) };
            let w_abs = _mm256_abs_epi8(w);
            for (j, s) in sums.iter_mut().enumerate() {
                // SAFETY: values `4g..4g + 4` of column `j` inside the activation block.
                let y = _mm256_set1_epi32(i32::from_le_bytes(unsafe { bytes(bb.add(j * QK + 4 * g)) }));
                *s = _mm256_add_epi32(*s, dot4(w_abs, w, y));
            }
        }
        // SAFETY: the 8 row scales follow the weight block's values.
        let da = unsafe { _mm256_loadu_ps(ab.add(QK * MR).cast()) };
        for (j, (accj, s)) in acc.iter_mut().zip(&sums).enumerate() {
            // SAFETY: column `j`'s scale inside the activation block.
            let db = _mm256_set1_ps(unsafe { get_f32(bb.add(NR * QK + 4 * j)) });
            *accj = _mm256_fmadd_ps(_mm256_cvtepi32_ps(*s), _mm256_mul_ps(da, db), *accj);
        }
    }
    for (j, &v) in acc.iter().enumerate() {
        // SAFETY: the 8 values of column `j` of the tile.
        unsafe {
            let p = c.add(j * ldc);
            let v = if accumulate { _mm256_add_ps(_mm256_loadu_ps(p), v) } else { v };
            _mm256_storeu_ps(p, v);
        }
    }
}

/// [`crate::fast::simd::QGemmTile`] for an 8 x 4 tile of Q4_0 panels packed as their stored
/// nibbles (`w + 8`, 0..=15): unsigned bytes that `vpmaddubsw` takes as they are, so neither
/// the weights' signs nor 32-bit sums are needed per group; the pair sums (at most
/// `2 * 15 * 128` a group) stay in 16 bits over a block's 8 groups, and the activations'
/// corrections `-8 * sum(y)` restore the signs. About half the instructions of [`tile`].
/// (One generic body for both tiles made Q8_0's products 5-10% slower, so they stay apart.)
///
/// # Safety
/// As [`crate::fast::simd::QGemmTile`]; AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn tile_nibbles(nblocks: usize, a: *const u8, b: *const u8, c: *mut f32, ldc: usize, accumulate: bool) {
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_ps(); NR];
    for blk in 0..nblocks {
        // SAFETY: block `blk < nblocks` of both panels.
        let (ab, bb) = unsafe { (a.add(blk * qa_block_bytes(MR)), b.add(blk * qb_block_bytes(NR))) };
        let mut sums = [_mm256_setzero_si256(); NR];
        for g in 0..QK / 4 {
            // SAFETY: group `g` of the weight block: 32 bytes.
            let w = unsafe { _mm256_loadu_si256(ab.add(g * 4 * MR).cast()) };
            for (j, s) in sums.iter_mut().enumerate() {
                // SAFETY: values `4g..4g + 4` of column `j` inside the activation block.
                let y = _mm256_set1_epi32(i32::from_le_bytes(unsafe { bytes(bb.add(j * QK + 4 * g)) }));
                *s = _mm256_add_epi16(*s, _mm256_maddubs_epi16(w, y));
            }
        }
        // SAFETY: the 8 row scales follow the weight block's values.
        let da = unsafe { _mm256_loadu_ps(ab.add(QK * MR).cast()) };
        for (j, (accj, s)) in acc.iter_mut().zip(&sums).enumerate() {
            // SAFETY: column `j`'s scale and correction inside the activation block.
            let (db, correction) = unsafe {
                let at = bb.add(NR * QK + 4 * j);
                (get_f32(at), i32::from_le_bytes(bytes(at.add(4 * NR))))
            };
            let s = _mm256_add_epi32(_mm256_madd_epi16(*s, ones), _mm256_set1_epi32(correction));
            *accj = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(da, _mm256_set1_ps(db)), *accj);
        }
    }
    for (j, &v) in acc.iter().enumerate() {
        // SAFETY: the 8 values of column `j` of the tile.
        unsafe {
            let p = c.add(j * ldc);
            let v = if accumulate { _mm256_add_ps(_mm256_loadu_ps(p), v) } else { v };
            _mm256_storeu_ps(p, v);
        }
    }
}

/// [`crate::fast::simd::PackAQ`] for 8-row panels of signed weights, or of Q4_0's stored
/// nibbles: 8 x 8 (Q8_0) or 8 x 4 (Q4_0 nibbles) dword transposes in registers.
///
/// # Safety
/// As [`crate::fast::simd::PackAQ`]; AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
pub unsafe fn pack_a(rows: &Rows, b0: usize, nblocks: usize, mr: usize, unsigned: bool, dst: *mut u8) {
    if mr != MR || rows.count != MR || (unsigned && rows.dtype != DType::Q4_0) {
        // SAFETY: forwarded.
        return unsafe { crate::fast::simd::scalar::pack::pack_a_q(rows, b0, nblocks, mr, unsigned, dst) };
    }
    let bs = rows.dtype.block_bytes();
    for blk in 0..nblocks {
        let at = (b0 + blk) * bs;
        // SAFETY: block `blk` of the panel.
        let out = unsafe { dst.add(blk * qa_block_bytes(MR)) };
        let mut g = [_mm256_setzero_si256(); 8];
        if rows.dtype == DType::Q4_0 {
            // z[q] = rows q and q + 4 (16 nibble bytes each) in its two lanes.
            let mut z = [_mm256_setzero_si256(); 4];
            for (q, zq) in z.iter_mut().enumerate() {
                // SAFETY: the nibble bytes of this block of rows q and q + 4.
                unsafe {
                    let lo = _mm_loadu_si128(rows.ptr.add(q * rows.stride + at + 2).cast());
                    let hi = _mm_loadu_si128(rows.ptr.add((q + 4) * rows.stride + at + 2).cast());
                    *zq = _mm256_set_m128i(hi, lo);
                }
            }
            let t0 = _mm256_unpacklo_epi32(z[0], z[1]);
            let t1 = _mm256_unpackhi_epi32(z[0], z[1]);
            let t2 = _mm256_unpacklo_epi32(z[2], z[3]);
            let t3 = _mm256_unpackhi_epi32(z[2], z[3]);
            let d = [
                _mm256_unpacklo_epi64(t0, t2),
                _mm256_unpackhi_epi64(t0, t2),
                _mm256_unpacklo_epi64(t1, t3),
                _mm256_unpackhi_epi64(t1, t3),
            ];
            // Unsigned panels keep the stored nibbles `w + 8`.
            let (low, minus8) = (_mm256_set1_epi8(0x0f), _mm256_set1_epi8(if unsigned { 0 } else { -8 }));
            for (i, &di) in d.iter().enumerate() {
                g[i] = _mm256_add_epi8(_mm256_and_si256(di, low), minus8);
                g[i + 4] = _mm256_add_epi8(_mm256_and_si256(_mm256_srli_epi16::<4>(di), low), minus8);
            }
        } else {
            let mut z = [_mm256_setzero_ps(); 8];
            for (r, zr) in z.iter_mut().enumerate() {
                // SAFETY: the 32 value bytes of this block of row `r`.
                *zr = unsafe { _mm256_loadu_ps(rows.ptr.add(r * rows.stride + at + 2).cast()) };
            }
            super::gemm::transpose8(&mut z);
            for (gi, zi) in g.iter_mut().zip(z) {
                *gi = _mm256_castps_si256(zi);
            }
        }
        for (i, gi) in g.iter().enumerate() {
            // SAFETY: group `i` of the block: 32 bytes.
            unsafe { _mm256_storeu_si256(out.add(i * 4 * MR).cast(), *gi) };
        }
        let mut scales = [0u16; 8];
        for (r, s) in scales.iter_mut().enumerate() {
            // SAFETY: the scale of this block of row `r`.
            *s = u16::from_le_bytes(unsafe { bytes(rows.ptr.add(r * rows.stride + at)) });
        }
        // SAFETY: 8 f16 scales in, 8 f32 scales out after the block's values.
        unsafe { _mm256_storeu_ps(out.add(QK * MR).cast(), _mm256_cvtph_ps(_mm_loadu_si128(scales.as_ptr().cast()))) };
    }
}
