//! NEON matrix-vector kernels: each weight row is loaded once (converted to f32, or its
//! signed bytes) and multiplied with up to four columns at a time.

use core::arch::aarch64::*;

use tessera_core::DType;

use super::gemm::load4;
use super::qgemm::sdot;
use crate::fast::simd::scalar::pack::{bytes, float_at, get_f32};
use crate::fast::simd::{QvColumn, Rows, QK};

/// `N` columns of float dot products for every row; two accumulators per column.
///
/// # Safety
/// As [`crate::fast::simd::Gemv`] with `n = N`; NEON.
#[target_feature(enable = "neon")]
unsafe fn float_n<const N: usize>(k: usize, rows: &Rows, x: *const f32, ldx: usize, y: *mut f32, ldy: usize) {
    for r in 0..rows.count {
        // SAFETY: row `r` exists.
        let row = unsafe { rows.ptr.add(r * rows.stride) };
        let mut acc = [[vdupq_n_f32(0.0); 2]; N];
        let mut kk = 0;
        while kk + 8 <= k {
            // SAFETY: values `kk..kk + 8` of the row and of each column.
            unsafe {
                let (w0, w1) = (load4(rows.dtype, row, kk), load4(rows.dtype, row, kk + 4));
                for (j, a) in acc.iter_mut().enumerate() {
                    let xj = x.add(j * ldx + kk);
                    a[0] = vfmaq_f32(a[0], w0, vld1q_f32(xj));
                    a[1] = vfmaq_f32(a[1], w1, vld1q_f32(xj.add(4)));
                }
            }
            kk += 8;
        }
        for (j, a) in acc.iter().enumerate() {
            let mut sum = vaddvq_f32(vaddq_f32(a[0], a[1]));
            for t in kk..k {
                // SAFETY: value `t < k` of the row and of column `j`.
                sum += unsafe { float_at(rows.dtype, row, t) * *x.add(j * ldx + t) };
            }
            // SAFETY: output `r` of column `j`.
            unsafe { *y.add(j * ldy + r) = sum };
        }
    }
}

/// Columns four at a time.
///
/// # Safety
/// As [`crate::fast::simd::Gemv`]; NEON.
#[target_feature(enable = "neon")]
unsafe fn float(k: usize, rows: &Rows, x: *const f32, ldx: usize, n: usize, y: *mut f32, ldy: usize) {
    let mut j = 0;
    while j < n {
        // SAFETY: columns `j..j + 4` (or fewer) exist.
        unsafe {
            let (x, y) = (x.add(j * ldx), y.add(j * ldy));
            match n - j {
                1 => float_n::<1>(k, rows, x, ldx, y, ldy),
                2 => float_n::<2>(k, rows, x, ldx, y, ldy),
                3 => float_n::<3>(k, rows, x, ldx, y, ldy),
                _ => float_n::<4>(k, rows, x, ldx, y, ldy),
            }
        }
        j += 4;
    }
}

/// # Safety
/// As [`crate::fast::simd::Gemv`] for F32, F16 or BF16 rows; NEON.
pub unsafe fn any_float(k: usize, rows: &Rows, x: *const f32, ldx: usize, n: usize, y: *mut f32, ldy: usize) {
    debug_assert!(rows.dtype.is_float());
    // SAFETY: forwarded; the table is chosen only where NEON exists.
    unsafe { float(k, rows, x, ldx, n, y, ldy) }
}

/// The 32 signed weights of a Q8_0 or Q4_0 block (two registers), and its scale.
///
/// # Safety
/// `block` must point to a whole block of `Q4` (Q4_0) or Q8_0; NEON.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn weights<const Q4: bool>(block: *const u8) -> ([int8x16_t; 2], f32) {
    // SAFETY: the scale's two bytes start the block.
    let d = half::f16::from_le_bytes(unsafe { bytes(block) }).to_f32();
    let w = if Q4 {
        // SAFETY: 16 bytes of nibbles follow the scale.
        let q = unsafe { vld1q_u8(block.add(2)) };
        let eight = vdupq_n_s8(8);
        [
            vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0f))), eight),
            vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8::<4>(q)), eight),
        ]
    } else {
        // SAFETY: 32 value bytes follow the scale.
        unsafe { [vld1q_s8(block.add(2).cast()), vld1q_s8(block.add(18).cast())] }
    };
    (w, d)
}

/// `N` columns of int8 dot products for every row (`sdot`), one f32 accumulator per column.
///
/// # Safety
/// As [`crate::fast::simd::QGemv`] with `n = N`; NEON and dotprod.
#[target_feature(enable = "neon,dotprod")]
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
        let mut acc = [vdupq_n_f32(0.0); N];
        for b in 0..nblocks {
            // SAFETY: block `b` of the row and of each activation column.
            unsafe {
                let (w, da) = weights::<Q4>(row.add(b * bs));
                for (a, col) in acc.iter_mut().zip(&cols) {
                    let xb = col.q.add(QK * b);
                    let s = sdot(sdot(vdupq_n_s32(0), w[0], vld1q_s8(xb.cast())), w[1], vld1q_s8(xb.add(16).cast()));
                    *a = vfmaq_n_f32(*a, vcvtq_f32_s32(s), da * get_f32(col.d.add(4 * b)));
                }
            }
        }
        for (j, a) in acc.iter().enumerate() {
            // SAFETY: output `r` of column `j`.
            unsafe { *y.add(j * ldy + r) = vaddvq_f32(*a) };
        }
    }
}

/// # Safety
/// As [`crate::fast::simd::QGemv`]; NEON and dotprod.
#[target_feature(enable = "neon,dotprod")]
unsafe fn quant<const Q4: bool>(
    nblocks: usize,
    rows: &Rows,
    x: *const u8,
    ldx: usize,
    n: usize,
    y: *mut f32,
    ldy: usize,
) {
    let mut j = 0;
    while j < n {
        // SAFETY: columns `j..j + 4` (or fewer) exist.
        unsafe {
            let (x, y) = (x.add(j * ldx), y.add(j * ldy));
            match n - j {
                1 => quant_n::<1, Q4>(nblocks, rows, x, ldx, y, ldy),
                2 => quant_n::<2, Q4>(nblocks, rows, x, ldx, y, ldy),
                3 => quant_n::<3, Q4>(nblocks, rows, x, ldx, y, ldy),
                _ => quant_n::<4, Q4>(nblocks, rows, x, ldx, y, ldy),
            }
        }
        j += 4;
    }
}

/// # Safety
/// As [`crate::fast::simd::QGemv`] for Q8_0 rows; NEON and dotprod.
pub unsafe fn q8_0(nblocks: usize, rows: &Rows, x: *const u8, ldx: usize, n: usize, y: *mut f32, ldy: usize) {
    debug_assert_eq!(rows.dtype, DType::Q8_0);
    // SAFETY: forwarded; the table is chosen only where dotprod exists.
    unsafe { quant::<false>(nblocks, rows, x, ldx, n, y, ldy) }
}

/// # Safety
/// As [`crate::fast::simd::QGemv`] for Q4_0 rows; NEON and dotprod.
pub unsafe fn q4_0(nblocks: usize, rows: &Rows, x: *const u8, ldx: usize, n: usize, y: *mut f32, ldy: usize) {
    debug_assert_eq!(rows.dtype, DType::Q4_0);
    // SAFETY: forwarded; the table is chosen only where dotprod exists.
    unsafe { quant::<true>(nblocks, rows, x, ldx, n, y, ldy) }
}
