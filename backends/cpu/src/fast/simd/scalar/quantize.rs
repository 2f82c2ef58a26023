//! Quantizing activations to 8-bit blocks, value by value.

use crate::fast::simd::scalar::pack::put_f32;
use crate::fast::simd::{QuantOut, QK};

/// The generic [`crate::fast::simd::Quantize`]: per block `d = max|x| / 127`,
/// `q = round_half_even(x / d)` (computed as `x * (1 / d)`), correction `-bias * sum(q)`.
///
/// # Safety
/// `x` must hold `nblocks * 32` values; `out` must be valid for `nblocks` blocks.
pub unsafe fn quantize(x: *const f32, nblocks: usize, bias: i32, out: &QuantOut) {
    for b in 0..nblocks {
        // SAFETY: block `b < nblocks` of the input.
        let xs = unsafe { &*x.add(b * QK).cast::<[f32; QK]>() };
        let amax = xs.iter().fold(0.0f32, |m, v| m.max(libm::fabsf(*v)));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut sum = 0i32;
        for (i, v) in xs.iter().enumerate() {
            // `as` saturates (NaN becomes 0); |v * id| <= 127 otherwise.
            let q = libm::rintf(v * id) as i32;
            sum += q;
            // SAFETY: value `i` of block `b` of the output.
            unsafe { *out.q.add(b * out.q_stride + i) = q as i8 as u8 };
        }
        // SAFETY: block `b`'s scale and correction slots.
        unsafe {
            put_f32(out.d.add(b * out.dc_stride), d);
            core::ptr::write_unaligned(out.c.add(b * out.dc_stride).cast::<[u8; 4]>(), (-bias * sum).to_le_bytes());
        }
    }
}
