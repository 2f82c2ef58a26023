//! The portable int8 micro-kernel (signed weights).

use crate::fast::simd::scalar::pack::{get_f32, get_i32};
use crate::fast::simd::{qa_block_bytes, qb_block_bytes, QK};

/// [`crate::fast::simd::QGemmTile`] for an `MR x NR` tile of signed int8 panels.
///
/// # Safety
/// `a` and `b` must hold `nblocks` blocks of packed int8 panels of `MR` rows and `NR`
/// columns; `c` as in [`crate::fast::simd::GemmTile`].
pub unsafe fn tile<const MR: usize, const NR: usize>(
    nblocks: usize,
    a: *const u8,
    b: *const u8,
    c: *mut f32,
    ldc: usize,
    accumulate: bool,
) {
    let mut acc = [[0.0f32; MR]; NR];
    for blk in 0..nblocks {
        // SAFETY: block `blk < nblocks` of each panel.
        let (ab, bb) = unsafe { (a.add(blk * qa_block_bytes(MR)), b.add(blk * qb_block_bytes(NR))) };
        for (j, accj) in acc.iter_mut().enumerate() {
            // SAFETY: column `j`'s values, scale and correction lie inside the block.
            let (q, db, corr) =
                unsafe { (bb.add(j * QK), get_f32(bb.add(NR * QK + 4 * j)), get_i32(bb.add(NR * (QK + 4) + 4 * j))) };
            for (i, x) in accj.iter_mut().enumerate() {
                let mut s = corr;
                for g in 0..QK / 4 {
                    for t in 0..4 {
                        // SAFETY: inside the block's value bytes.
                        let (w, y) = unsafe { (*ab.add((g * MR + i) * 4 + t), *q.add(4 * g + t)) };
                        s += i32::from(w as i8) * i32::from(y as i8);
                    }
                }
                // SAFETY: the row scales follow the `32 * MR` value bytes.
                let da = unsafe { get_f32(ab.add(QK * MR + 4 * i)) };
                *x += s as f32 * (da * db);
            }
        }
    }
    for (j, accj) in acc.iter().enumerate() {
        for (i, &x) in accj.iter().enumerate() {
            // SAFETY: element `i < MR` of column `j < NR` of the tile.
            let out = unsafe { &mut *c.add(j * ldc + i) };
            *out = if accumulate { *out + x } else { x };
        }
    }
}
