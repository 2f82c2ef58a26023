//! Quantizing activations to 8-bit blocks with AVX2.

use core::arch::x86_64::*;

use crate::fast::simd::scalar::pack::put_f32;
use crate::fast::simd::{QuantOut, QK};

/// [`crate::fast::simd::Quantize`]: the same rule as the portable quantizer (round half to
/// even of `x * (1 / d)`).
///
/// # Safety
/// As [`crate::fast::simd::Quantize`]; AVX2.
#[target_feature(enable = "avx2")]
pub unsafe fn quantize(x: *const f32, nblocks: usize, bias: i32, out: &QuantOut) {
    let sign = _mm256_set1_ps(-0.0);
    for b in 0..nblocks {
        let mut v = [_mm256_setzero_ps(); 4];
        for (i, vi) in v.iter_mut().enumerate() {
            // SAFETY: values `8i..8i + 8` of block `b` of the input.
            *vi = unsafe { _mm256_loadu_ps(x.add(b * QK + 8 * i)) };
        }
        let abs = |v: __m256| _mm256_andnot_ps(sign, v);
        let m = _mm256_max_ps(_mm256_max_ps(abs(v[0]), abs(v[1])), _mm256_max_ps(abs(v[2]), abs(v[3])));
        let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
        let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        let amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
        let d = amax / 127.0;
        let id = _mm256_set1_ps(if d != 0.0 { 1.0 / d } else { 0.0 });
        let q = v.map(|vi| {
            _mm256_cvtps_epi32(_mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(
                vi, id,
            )))
        });
        let s = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
        let s = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256::<1>(s));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0x4e>(s));
        let sum = _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32::<0xb1>(s)));
        // Pack 32 x i32 to 32 x i8 (the packs interleave lanes; the permute restores order).
        let w01 = _mm256_packs_epi32(q[0], q[1]);
        let w23 = _mm256_packs_epi32(q[2], q[3]);
        let bytes8 = _mm256_packs_epi16(w01, w23);
        let ordered = _mm256_permutevar8x32_epi32(bytes8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        // SAFETY: block `b`'s 32 value bytes, scale and correction.
        unsafe {
            _mm256_storeu_si256(out.q.add(b * out.q_stride).cast(), ordered);
            put_f32(out.d.add(b * out.dc_stride), d);
            core::ptr::write_unaligned(out.c.add(b * out.dc_stride).cast::<[u8; 4]>(), (-bias * sum).to_le_bytes());
        }
    }
}
