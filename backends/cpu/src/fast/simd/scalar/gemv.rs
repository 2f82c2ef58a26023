//! Portable matrix-vector kernels.

use tessera_core::DType;

use crate::fast::simd::scalar::pack::{float_at, get_f32, weight_block};
use crate::fast::simd::{QvColumn, Rows};

/// Dot products of each row with `n` columns, in 8 interleaved partial sums (which LLVM can
/// keep in vector registers), reduced in a fixed order.
///
/// # Safety
/// As [`crate::fast::simd::Gemv`]: rows of `k` values of `dtype`, `n` columns of `k` f32 at
/// `x + j * ldx`, outputs at `y + j * ldy + r`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn gemv_of(dtype: DType, k: usize, rows: &Rows, x: *const f32, ldx: usize, n: usize, y: *mut f32, ldy: usize) {
    for r in 0..rows.count {
        // SAFETY: row `r` exists.
        let row = unsafe { rows.ptr.add(r * rows.stride) };
        for j in 0..n {
            let mut lanes = [0.0f32; 8];
            for kk in 0..k {
                // SAFETY: value `kk < k` of the row and of column `j`.
                lanes[kk % 8] += unsafe { float_at(dtype, row, kk) * *x.add(j * ldx + kk) };
            }
            let sum = ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5])) + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]));
            // SAFETY: output `r` of column `j`.
            unsafe { *y.add(j * ldy + r) = sum };
        }
    }
}

/// # Safety
/// As [`crate::fast::simd::Gemv`].
pub unsafe fn f32(k: usize, rows: &Rows, x: *const f32, ldx: usize, n: usize, y: *mut f32, ldy: usize) {
    // SAFETY: forwarded.
    unsafe { gemv_of(DType::F32, k, rows, x, ldx, n, y, ldy) }
}

/// # Safety
/// As [`crate::fast::simd::Gemv`].
pub unsafe fn f16(k: usize, rows: &Rows, x: *const f32, ldx: usize, n: usize, y: *mut f32, ldy: usize) {
    // SAFETY: forwarded.
    unsafe { gemv_of(DType::F16, k, rows, x, ldx, n, y, ldy) }
}

/// # Safety
/// As [`crate::fast::simd::Gemv`].
pub unsafe fn bf16(k: usize, rows: &Rows, x: *const f32, ldx: usize, n: usize, y: *mut f32, ldy: usize) {
    // SAFETY: forwarded.
    unsafe { gemv_of(DType::BF16, k, rows, x, ldx, n, y, ldy) }
}

/// [`crate::fast::simd::QGemv`] for signed weights (the correction is zero and not read).
///
/// # Safety
/// As [`crate::fast::simd::QGemv`].
pub unsafe fn quant(nblocks: usize, rows: &Rows, x: *const u8, ldx: usize, n: usize, y: *mut f32, ldy: usize) {
    let block_bytes = rows.dtype.block_bytes();
    for r in 0..rows.count {
        for j in 0..n {
            let col = QvColumn::at(x.wrapping_add(j * ldx), nblocks);
            let mut acc = 0.0f32;
            for b in 0..nblocks {
                // SAFETY: block `b` of row `r` and of activation column `j`.
                let ((w, da), xb, db) = unsafe {
                    (
                        weight_block(rows.dtype, rows.ptr.add(r * rows.stride + b * block_bytes), false),
                        col.q.add(32 * b),
                        get_f32(col.d.add(4 * b)),
                    )
                };
                let mut s = 0i32;
                for (i, &wi) in w.iter().enumerate() {
                    // SAFETY: value `i < 32` of the activation block.
                    s += i32::from(wi as i8) * i32::from(unsafe { *xb.add(i) } as i8);
                }
                acc += s as f32 * (da * db);
            }
            // SAFETY: output `r` of column `j`.
            unsafe { *y.add(j * ldy + r) = acc };
        }
    }
}
