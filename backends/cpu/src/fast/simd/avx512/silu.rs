//! SiLU with AVX-512 intrinsics: the portable row kernels cannot fuse multiply-adds (Rust does
//! not contract `a * b + c`, and `no_std` has no `mul_add`), which doubles the arithmetic of
//! the exponential's polynomial. Here every step is an FMA, `2^n` is one `vscalefps`, and
//! the division is a reciprocal estimate with one Newton step (within 2 ulp). The other unary
//! ops go to the portable kernel.

use core::arch::x86_64::*;

use tessera_core::UnaryOp;

use crate::fast::vector::AVX512 as PORTABLE;

/// `x / (1 + e^-x)` for 16 lanes: `e^-x` as `e^r 2^n` (the portable exponential's reduction
/// and polynomial) with `-x` clamped to `[-87, 80]`; 0 below `x = -80` (where `|x e^x|` is
/// below 2e-33). The bound keeps `1 / (1 + e^-x)` a normal number: subnormal operands cost
/// a hundred cycles each. NaN stays NaN.
#[target_feature(enable = "avx512f")]
#[inline]
fn silu16(x: __m512) -> __m512 {
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    const P: [f32; 6] = [1.987_569_1e-4, 1.398_2e-3, 8.333_452e-3, 4.166_579_6e-2, 0.166_666_65, 0.5];
    let set = _mm512_set1_ps;
    // `max`/`min` return their second operand for NaN: the clamped value stays NaN.
    let v = _mm512_min_ps(set(80.0), _mm512_max_ps(set(-87.0), _mm512_sub_ps(_mm512_setzero_ps(), x)));
    let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm512_mul_ps(
        v,
        set(core::f32::consts::LOG2_E),
    ));
    let r = _mm512_fnmadd_ps(n, set(LN2_LO), _mm512_fnmadd_ps(n, set(LN2_HI), v));
    let mut p = set(P[0]);
    for &c in &P[1..] {
        p = _mm512_fmadd_ps(p, r, set(c));
    }
    let er = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(r, r), p, r), set(1.0));
    let d = _mm512_add_ps(_mm512_scalef_ps(er, n), set(1.0));
    let y0 = _mm512_rcp14_ps(d);
    let inv = _mm512_mul_ps(y0, _mm512_fnmadd_ps(d, y0, set(2.0)));
    let s = _mm512_mul_ps(x, inv);
    let below = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, set(-80.0));
    _mm512_mask_mov_ps(s, below, set(-0.0))
}

/// [`crate::fast::vector::Unary`] for AVX-512: SiLU here, the other ops portable.
///
/// # Safety
/// As [`crate::fast::vector::Unary`]; AVX-512F.
#[target_feature(enable = "avx512f")]
pub unsafe fn unary(op: UnaryOp, n: usize, x: *const f32, y: *mut f32) {
    if op != UnaryOp::Silu {
        // SAFETY: forwarded; the table exists only where AVX-512 does.
        return unsafe { (PORTABLE.unary)(op, n, x, y) };
    }
    let mut i = 0;
    while i < n {
        let mask: __mmask16 = if n - i >= 16 { 0xffff } else { (1 << (n - i)) - 1 };
        // SAFETY: the masked values `i..` of both rows; each step loads before it stores, so
        // `y` may be `x`.
        unsafe {
            let v = _mm512_maskz_loadu_ps(mask, x.add(i));
            _mm512_mask_storeu_ps(y.add(i), mask, silu16(v));
        }
        i += 16;
    }
}
