//! The NEON dotprod int8 micro-kernel: 8 weight rows (two registers of 4 rows x 4 signed
//! bytes) by 4 activation columns; `sdot` by element multiplies 4 rows by one column's 4
//! bytes. (The dotprod intrinsics are not stable in Rust yet, hence the inline assembly.)

use core::arch::aarch64::*;

use crate::fast::simd::scalar::pack::get_f32;
use crate::fast::simd::{qa_block_bytes, qb_block_bytes, QK};

pub const MR: usize = 8;
pub const NR: usize = 4;

/// `acc += a . b[L]`: four 4-byte signed dot products of `a` with lane `L` of `b`.
#[target_feature(enable = "neon,dotprod")]
#[inline]
fn sdot_lane<const L: i32>(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    let mut acc = acc;
    // SAFETY: a register-only instruction of the dotprod extension, which is enabled here.
    unsafe {
        core::arch::asm!(
            "sdot {acc:v}.4s, {a:v}.16b, {b:v}.4b[{l}]",
            acc = inout(vreg) acc,
            a = in(vreg) a,
            b = in(vreg) b,
            l = const L,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    acc
}

/// `acc += a . b`: four 4-byte signed dot products.
#[target_feature(enable = "neon,dotprod")]
#[inline]
pub fn sdot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    let mut acc = acc;
    // SAFETY: a register-only instruction of the dotprod extension, which is enabled here.
    unsafe {
        core::arch::asm!(
            "sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b",
            acc = inout(vreg) acc,
            a = in(vreg) a,
            b = in(vreg) b,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    acc
}

/// [`crate::fast::simd::QGemmTile`] for an 8 x 4 tile of signed weight panels.
///
/// # Safety
/// As [`crate::fast::simd::QGemmTile`]; NEON and dotprod.
#[target_feature(enable = "neon,dotprod")]
pub unsafe fn tile(nblocks: usize, a: *const u8, b: *const u8, c: *mut f32, ldc: usize, accumulate: bool) {
    let mut acc = [[vdupq_n_f32(0.0); 2]; NR];
    for blk in 0..nblocks {
        // SAFETY: block `blk < nblocks` of both panels.
        let (ab, bb) = unsafe { (a.add(blk * qa_block_bytes(MR)), b.add(blk * qb_block_bytes(NR))) };
        // y[h] holds dword g = 4h + lane... of the 4 columns: a 4 x 4 dword transpose of each
        // half of the columns' 32 bytes, so that y[g] = [col0 | col1 | col2 | col3] group g.
        let mut y = [vdupq_n_s8(0); 8];
        for h in 0..2 {
            // SAFETY: bytes `16h..16h + 16` of each column's 32 values.
            let v: [int32x4_t; 4] = core::array::from_fn(|j| unsafe { vld1q_s32(bb.add(j * QK + 16 * h).cast()) });
            let t0 = vreinterpretq_s64_s32(vtrn1q_s32(v[0], v[1]));
            let t1 = vreinterpretq_s64_s32(vtrn2q_s32(v[0], v[1]));
            let t2 = vreinterpretq_s64_s32(vtrn1q_s32(v[2], v[3]));
            let t3 = vreinterpretq_s64_s32(vtrn2q_s32(v[2], v[3]));
            y[4 * h] = vreinterpretq_s8_s64(vtrn1q_s64(t0, t2));
            y[4 * h + 1] = vreinterpretq_s8_s64(vtrn1q_s64(t1, t3));
            y[4 * h + 2] = vreinterpretq_s8_s64(vtrn2q_s64(t0, t2));
            y[4 * h + 3] = vreinterpretq_s8_s64(vtrn2q_s64(t1, t3));
        }
        let mut sums = [[vdupq_n_s32(0); 2]; NR];
        for (g, &yg) in y.iter().enumerate() {
            // SAFETY: group `g` of the weight block: 2 x 16 bytes.
            let (a0, a1) = unsafe { (vld1q_s8(ab.add(g * 4 * MR).cast()), vld1q_s8(ab.add(g * 4 * MR + 16).cast())) };
            sums[0] = [sdot_lane::<0>(sums[0][0], a0, yg), sdot_lane::<0>(sums[0][1], a1, yg)];
            sums[1] = [sdot_lane::<1>(sums[1][0], a0, yg), sdot_lane::<1>(sums[1][1], a1, yg)];
            sums[2] = [sdot_lane::<2>(sums[2][0], a0, yg), sdot_lane::<2>(sums[2][1], a1, yg)];
            sums[3] = [sdot_lane::<3>(sums[3][0], a0, yg), sdot_lane::<3>(sums[3][1], a1, yg)];
        }
        // SAFETY: the 8 row scales follow the weight block's values.
        let da = unsafe { [vld1q_f32(ab.add(QK * MR).cast()), vld1q_f32(ab.add(QK * MR + 16).cast())] };
        for (j, (accj, s)) in acc.iter_mut().zip(&sums).enumerate() {
            // SAFETY: column `j`'s scale inside the activation block.
            let db = unsafe { get_f32(bb.add(NR * QK + 4 * j)) };
            for h in 0..2 {
                accj[h] = vfmaq_f32(accj[h], vcvtq_f32_s32(s[h]), vmulq_n_f32(da[h], db));
            }
        }
    }
    for (j, accj) in acc.iter().enumerate() {
        for (h, &v) in accj.iter().enumerate() {
            // SAFETY: values `4h..4h + 4` of column `j` of the tile.
            unsafe {
                let p = c.add(j * ldc + 4 * h);
                let v = if accumulate { vaddq_f32(vld1q_f32(p), v) } else { v };
                vst1q_f32(p, v);
            }
        }
    }
}
