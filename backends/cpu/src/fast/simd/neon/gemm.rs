//! The NEON float micro-kernel and weight packer: 16 weight rows (four registers) by 4
//! activation columns, 16 accumulators, each step one lane-indexed FMA per pair.

use core::arch::aarch64::*;

use tessera_core::DType;

use crate::fast::simd::scalar::pack::float_at;
use crate::fast::simd::Rows;

pub const MR: usize = 16;
pub const NR: usize = 4;

/// [`crate::fast::simd::GemmTile`] for a 16 x 4 tile.
///
/// # Safety
/// As [`crate::fast::simd::GemmTile`]; NEON.
#[target_feature(enable = "neon")]
pub unsafe fn tile(kc: usize, a: *const f32, b: *const f32, c: *mut f32, ldc: usize, accumulate: bool) {
    let mut acc = [[vdupq_n_f32(0.0); 4]; NR];
    for p in 0..kc {
        // SAFETY: step `p < kc` of the packed panels: 16 weights and 4 activations.
        let (av, bv) = unsafe {
            let ap = a.add(p * MR);
            (
                [vld1q_f32(ap), vld1q_f32(ap.add(4)), vld1q_f32(ap.add(8)), vld1q_f32(ap.add(12))],
                vld1q_f32(b.add(p * NR)),
            )
        };
        for (i, &ai) in av.iter().enumerate() {
            acc[0][i] = vfmaq_laneq_f32::<0>(acc[0][i], ai, bv);
            acc[1][i] = vfmaq_laneq_f32::<1>(acc[1][i], ai, bv);
            acc[2][i] = vfmaq_laneq_f32::<2>(acc[2][i], ai, bv);
            acc[3][i] = vfmaq_laneq_f32::<3>(acc[3][i], ai, bv);
        }
    }
    for (j, accj) in acc.iter().enumerate() {
        for (i, &v) in accj.iter().enumerate() {
            // SAFETY: values `4i..4i + 4` of column `j` of the tile.
            unsafe {
                let p = c.add(j * ldc + 4 * i);
                let v = if accumulate { vaddq_f32(vld1q_f32(p), v) } else { v };
                vst1q_f32(p, v);
            }
        }
    }
}

/// Four f16 values (as bits) to f32: the bits moved into place and rescaled by 2^112, which
/// also handles subnormals; infinities and NaNs get the top exponent.
#[target_feature(enable = "neon")]
#[inline]
pub fn f16x4_to_f32(h: uint16x4_t) -> float32x4_t {
    let h = vmovl_u16(h);
    let sign = vshlq_n_u32::<16>(vandq_u32(h, vdupq_n_u32(0x8000)));
    let em = vshlq_n_u32::<13>(vandq_u32(h, vdupq_n_u32(0x7fff)));
    let scaled = vmulq_f32(vreinterpretq_f32_u32(em), vdupq_n_f32(f32::from_bits(0x7780_0000)));
    let special = vceqq_u32(vandq_u32(h, vdupq_n_u32(0x7c00)), vdupq_n_u32(0x7c00));
    let inf_nan = vorrq_u32(em, vdupq_n_u32(0x7f80_0000));
    let bits = vbslq_u32(special, inf_nan, vreinterpretq_u32_f32(scaled));
    vreinterpretq_f32_u32(vorrq_u32(bits, sign))
}

/// 4 values of a float row from value `k`, as f32.
///
/// # Safety
/// Values `k..k + 4` must lie inside the row; NEON.
#[target_feature(enable = "neon")]
#[inline]
pub unsafe fn load4(dtype: DType, row: *const u8, k: usize) -> float32x4_t {
    // SAFETY: values `k..k + 4` lie inside the row (every arm loads those, and only those);
    // the caller guarantees NEON.
    unsafe {
        match dtype {
            DType::F16 => f16x4_to_f32(vld1_u16(row.add(2 * k).cast())),
            DType::BF16 => vreinterpretq_f32_u32(vshll_n_u16::<16>(vld1_u16(row.add(2 * k).cast()))),
            _ => vld1q_f32(row.add(4 * k).cast()),
        }
    }
}

/// [`crate::fast::simd::PackA`] for 16-row panels: 4 x 4 blocks converted to f32 and
/// transposed in registers.
///
/// # Safety
/// As [`crate::fast::simd::PackA`]; NEON.
#[target_feature(enable = "neon")]
pub unsafe fn pack_a(rows: &Rows, k0: usize, kc: usize, mr: usize, dst: *mut f32) {
    if mr != MR {
        // SAFETY: forwarded.
        return unsafe { crate::fast::simd::scalar::pack::pack_a(rows, k0, kc, mr, dst) };
    }
    let mut kk = 0;
    while kk + 4 <= kc {
        for q in 0..MR / 4 {
            let mut v = [vdupq_n_f32(0.0); 4];
            for (i, vi) in v.iter_mut().enumerate() {
                let r = 4 * q + i;
                if r < rows.count {
                    // SAFETY: row `r` exists and holds values `k0 + kk..k0 + kk + 4`.
                    *vi = unsafe { load4(rows.dtype, rows.ptr.add(r * rows.stride), k0 + kk) };
                }
            }
            let t0 = vreinterpretq_f64_f32(vtrn1q_f32(v[0], v[1]));
            let t1 = vreinterpretq_f64_f32(vtrn2q_f32(v[0], v[1]));
            let t2 = vreinterpretq_f64_f32(vtrn1q_f32(v[2], v[3]));
            let t3 = vreinterpretq_f64_f32(vtrn2q_f32(v[2], v[3]));
            let cols = [vtrn1q_f64(t0, t2), vtrn1q_f64(t1, t3), vtrn2q_f64(t0, t2), vtrn2q_f64(t1, t3)];
            for (t, &col) in cols.iter().enumerate() {
                // SAFETY: step `kk + t < kc` of the panel, rows `4q..4q + 4`.
                unsafe { vst1q_f32(dst.add((kk + t) * MR + 4 * q), vreinterpretq_f32_f64(col)) };
            }
        }
        kk += 4;
    }
    for kk in kk..kc {
        for r in 0..MR {
            let v = if r < rows.count {
                // SAFETY: value `k0 + kk` of row `r`.
                unsafe { float_at(rows.dtype, rows.ptr.add(r * rows.stride), k0 + kk) }
            } else {
                0.0
            };
            // SAFETY: step `kk < kc` of the panel.
            unsafe { *dst.add(kk * MR + r) = v };
        }
    }
}
