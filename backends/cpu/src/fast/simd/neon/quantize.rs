//! Quantizing activations to 8-bit blocks with NEON.

use core::arch::aarch64::*;

use crate::fast::simd::scalar::pack::put_f32;
use crate::fast::simd::{QuantOut, QK};

/// [`crate::fast::simd::Quantize`]: the same rule as the portable quantizer (round half to
/// even of `x * (1 / d)`).
///
/// # Safety
/// As [`crate::fast::simd::Quantize`]; NEON.
#[target_feature(enable = "neon")]
pub unsafe fn quantize(x: *const f32, nblocks: usize, bias: i32, out: &QuantOut) {
    for b in 0..nblocks {
        // SAFETY: block `b` of the input: 8 x 4 values.
        let v: [float32x4_t; 8] = core::array::from_fn(|i| unsafe { vld1q_f32(x.add(b * QK + 4 * i)) });
        let m = v.iter().fold(vdupq_n_f32(0.0), |m, &vi| vmaxq_f32(m, vabsq_f32(vi)));
        let d = vmaxvq_f32(m) / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let q = v.map(|vi| vcvtnq_s32_f32(vmulq_n_f32(vi, id)));
        let sum = q.iter().fold(0i32, |s, &qi| s + vaddvq_s32(qi));
        let h: [int16x8_t; 4] = core::array::from_fn(|i| vcombine_s16(vmovn_s32(q[2 * i]), vmovn_s32(q[2 * i + 1])));
        let bytes = [vcombine_s8(vmovn_s16(h[0]), vmovn_s16(h[1])), vcombine_s8(vmovn_s16(h[2]), vmovn_s16(h[3]))];
        // SAFETY: block `b`'s 32 value bytes, scale and correction.
        unsafe {
            let q = out.q.add(b * out.q_stride).cast::<i8>();
            vst1q_s8(q, bytes[0]);
            vst1q_s8(q.add(16), bytes[1]);
            put_f32(out.d.add(b * out.dc_stride), d);
            core::ptr::write_unaligned(out.c.add(b * out.dc_stride).cast::<[u8; 4]>(), (-bias * sum).to_le_bytes());
        }
    }
}
