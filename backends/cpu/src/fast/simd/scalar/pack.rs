//! Packing weights and activations into the panel layouts of `simd/mod.rs`, value by value.
//! These are also the other instruction sets' fallbacks for edges and unusual types.

use half::{bf16, f16};
use tessera_core::DType;

use crate::fast::simd::{qa_block_bytes, Cols, Rows, QK};

/// Reads `N` bytes at `p`.
///
/// # Safety
/// `p` must be valid for reads of `N` bytes.
#[inline(always)]
pub unsafe fn bytes<const N: usize>(p: *const u8) -> [u8; N] {
    // SAFETY: the caller guarantees `N` readable bytes; `[u8; N]` has no alignment needs.
    unsafe { core::ptr::read_unaligned(p.cast::<[u8; N]>()) }
}

/// Value `k` of a row of float type `dtype`, as f32.
///
/// # Safety
/// The row must hold at least `k + 1` values of `dtype`.
#[inline(always)]
pub unsafe fn float_at(dtype: DType, row: *const u8, k: usize) -> f32 {
    match dtype {
        // SAFETY: value `k` (4 bytes at `4 * k`) lies inside the row, as the caller guarantees.
        DType::F32 => f32::from_le_bytes(unsafe { bytes(row.add(4 * k)) }),
        // SAFETY: value `k` (2 bytes at `2 * k`) lies inside the row, as the caller guarantees.
        DType::F16 => f16::from_le_bytes(unsafe { bytes(row.add(2 * k)) }).to_f32(),
        // SAFETY: as for F16.
        DType::BF16 => bf16::from_le_bytes(unsafe { bytes(row.add(2 * k)) }).to_f32(),
        // The drivers send only float types here.
        _ => 0.0,
    }
}

/// Writes an f32 at `p` (any alignment).
///
/// # Safety
/// `p` must be valid for writes of 4 bytes.
#[inline(always)]
pub unsafe fn put_f32(p: *mut u8, v: f32) {
    // SAFETY: the caller guarantees 4 writable bytes.
    unsafe { core::ptr::write_unaligned(p.cast::<[u8; 4]>(), v.to_le_bytes()) }
}

/// Reads an f32 at `p` (any alignment).
///
/// # Safety
/// `p` must be valid for reads of 4 bytes.
#[inline(always)]
pub unsafe fn get_f32(p: *const u8) -> f32 {
    // SAFETY: the caller guarantees 4 readable bytes.
    f32::from_le_bytes(unsafe { bytes(p) })
}

/// Reads an i32 at `p` (any alignment).
///
/// # Safety
/// `p` must be valid for reads of 4 bytes.
#[inline(always)]
pub unsafe fn get_i32(p: *const u8) -> i32 {
    // SAFETY: the caller guarantees 4 readable bytes.
    i32::from_le_bytes(unsafe { bytes(p) })
}

/// The 32 values and the scale of a Q8_0 or Q4_0 block: signed (`w` as i8 bits) or, with
/// `unsigned`, `w + bias` (128 for Q8_0, 8 for Q4_0) as u8.
///
/// # Safety
/// `block` must point to one whole block of `dtype`.
#[inline(always)]
pub unsafe fn weight_block(dtype: DType, block: *const u8, unsigned: bool) -> ([u8; QK], f32) {
    let mut v = [0u8; QK];
    // SAFETY: the block's first two bytes are its f16 scale.
    let d = f16::from_le_bytes(unsafe { bytes(block) }).to_f32();
    match dtype {
        DType::Q8_0 => {
            // SAFETY: a Q8_0 block is the scale followed by 32 bytes.
            let q: [u8; QK] = unsafe { bytes(block.add(2)) };
            for (o, b) in v.iter_mut().zip(q) {
                *o = if unsigned { b ^ 0x80 } else { b };
            }
        }
        DType::Q4_0 => {
            // SAFETY: a Q4_0 block is the scale followed by 16 bytes of nibbles.
            let q: [u8; QK / 2] = unsafe { bytes(block.add(2)) };
            for (j, b) in q.into_iter().enumerate() {
                let (lo, hi) = (b & 0x0f, b >> 4);
                if unsigned {
                    (v[j], v[j + QK / 2]) = (lo, hi);
                } else {
                    (v[j], v[j + QK / 2]) = ((lo as i8 - 8) as u8, (hi as i8 - 8) as u8);
                }
            }
        }
        _ => return ([0; QK], 0.0),
    }
    (v, d)
}

/// The generic [`super::super::PackA`].
///
/// # Safety
/// `rows` must describe readable rows holding values `k0..k0 + kc`; `dst` must be valid for
/// `kc * mr` f32 writes.
pub unsafe fn pack_a(rows: &Rows, k0: usize, kc: usize, mr: usize, dst: *mut f32) {
    for r in 0..mr {
        if r < rows.count {
            // SAFETY: row `r` exists.
            let row = unsafe { rows.ptr.add(r * rows.stride) };
            for kk in 0..kc {
                // SAFETY: value `k0 + kk` lies in the row; `kk * mr + r < kc * mr`.
                unsafe { *dst.add(kk * mr + r) = float_at(rows.dtype, row, k0 + kk) };
            }
        } else {
            for kk in 0..kc {
                // SAFETY: as above.
                unsafe { *dst.add(kk * mr + r) = 0.0 };
            }
        }
    }
}

/// The generic [`super::super::PackB`].
///
/// # Safety
/// `cols` must describe readable columns holding values `k0..k0 + kc`; `dst` must be valid
/// for `kc * nr` f32 writes.
pub unsafe fn pack_b(cols: &Cols, k0: usize, kc: usize, nr: usize, dst: *mut f32) {
    for kk in 0..kc {
        for j in 0..nr {
            let v = if j < cols.count {
                // SAFETY: value `k0 + kk` of column `j` exists.
                unsafe { get_f32(cols.ptr.add((k0 + kk) * cols.k_stride + j * cols.col_stride)) }
            } else {
                0.0
            };
            // SAFETY: `kk * nr + j < kc * nr`.
            unsafe { *dst.add(kk * nr + j) = v };
        }
    }
}

/// The generic [`super::super::PackAQ`].
///
/// # Safety
/// `rows` must describe readable Q8_0/Q4_0 rows holding blocks `b0..b0 + nblocks`; `dst`
/// must be valid for `nblocks * qa_block_bytes(mr)` writes.
pub unsafe fn pack_a_q(rows: &Rows, b0: usize, nblocks: usize, mr: usize, unsigned: bool, dst: *mut u8) {
    let block_bytes = rows.dtype.block_bytes();
    for blk in 0..nblocks {
        // SAFETY: within the `nblocks` blocks of `dst`.
        let out = unsafe { dst.add(blk * qa_block_bytes(mr)) };
        for r in 0..mr {
            let (v, d) = if r < rows.count {
                // SAFETY: row `r` holds block `b0 + blk`.
                unsafe { weight_block(rows.dtype, rows.ptr.add(r * rows.stride + (b0 + blk) * block_bytes), unsigned) }
            } else {
                ([0; QK], 0.0)
            };
            for g in 0..QK / 4 {
                for t in 0..4 {
                    // SAFETY: `(g * mr + r) * 4 + t < 32 * mr`.
                    unsafe { *out.add((g * mr + r) * 4 + t) = v[4 * g + t] };
                }
            }
            // SAFETY: the scales follow the `32 * mr` value bytes.
            unsafe { put_f32(out.add(QK * mr + 4 * r), d) };
        }
    }
}
