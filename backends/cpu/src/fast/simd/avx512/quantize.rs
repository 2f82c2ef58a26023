//! Quantizing activations to 8-bit blocks with AVX-512.

use core::arch::x86_64::*;

use crate::fast::simd::scalar::pack::put_f32;
use crate::fast::simd::{QuantOut, QK};

/// [`crate::fast::simd::Quantize`]: the same rule as the portable quantizer (round half to
/// even of `x * (1 / d)`).
///
/// # Safety
/// As [`crate::fast::simd::Quantize`]; AVX-512F/BW/VL.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub unsafe fn quantize(x: *const f32, nblocks: usize, bias: i32, out: &QuantOut) {
    for b in 0..nblocks {
        // SAFETY: block `b` of the input.
        let (v0, v1) = unsafe { (_mm512_loadu_ps(x.add(b * QK)), _mm512_loadu_ps(x.add(b * QK + 16))) };
        let amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
        let d = amax / 127.0;
        let id = _mm512_set1_ps(if d != 0.0 { 1.0 / d } else { 0.0 });
        const NEAREST: i32 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
        let q0 = _mm512_cvt_roundps_epi32::<NEAREST>(_mm512_mul_ps(v0, id));
        let q1 = _mm512_cvt_roundps_epi32::<NEAREST>(_mm512_mul_ps(v1, id));
        let sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
        // SAFETY: block `b`'s 32 value bytes, scale and correction.
        unsafe {
            let q = out.q.add(b * out.q_stride);
            _mm_storeu_si128(q.cast(), _mm512_cvtepi32_epi8(q0));
            _mm_storeu_si128(q.add(16).cast(), _mm512_cvtepi32_epi8(q1));
            put_f32(out.d.add(b * out.dc_stride), d);
            core::ptr::write_unaligned(out.c.add(b * out.dc_stride).cast::<[u8; 4]>(), (-bias * sum).to_le_bytes());
        }
    }
}
