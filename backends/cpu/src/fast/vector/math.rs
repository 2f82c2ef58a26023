//! Scalar functions written so that LLVM vectorises them when they are mapped over the
//! lanes of [`super::lanes::V`]: no branches (only selects), no calls, integer tricks instead
//! of `round`/`ldexp`. Each keeps NaN as NaN and saturates like the `libm` function it
//! replaces.

/// 1.5 * 2^23: adding it rounds an f32 below 2^22 in magnitude to an integer (to nearest,
/// ties to even), which then sits in the low mantissa bits.
const ROUNDER: f32 = 12_582_912.0;
const ROUNDER_BITS: i32 = 0x4b40_0000;
const SIGN: u32 = 0x8000_0000;

/// `e^x` within about 2 ulp: `x = n ln2 + r` with `|r| <= ln2 / 2` (Cody and Waite's two-part
/// ln2), `e^r` by a degree-7 polynomial (Cephes' `expf` coefficients), then `2^n` applied as
/// two halves so that results up to overflow come out right. Results below the smallest
/// normal f32 (`x < -87.34`) are 0: subnormal arithmetic costs a hundred cycles per value
/// on some processors, and such values vanish in every sum they meet.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    // Clamped with comparisons (not `min`/`max`) so that NaN stays NaN; above the bound the
    // result is infinity anyway, below the other it is replaced by 0.
    let tiny = x < -87.336_54;
    let x = if tiny { -87.0 } else { x };
    let x = if x > 89.0 { 89.0 } else { x };
    let (er, t) = exp_reduced(x);
    let ni = (t.to_bits() as i32).wrapping_sub(ROUNDER_BITS);
    let lo = ni >> 1;
    let hi = ni.wrapping_sub(lo);
    let e = er * pow2(lo) * pow2(hi);
    if tiny {
        0.0
    } else {
        e
    }
}

/// `e^x` as [`exp`] for `-87 <= x <= 88`, and outside that range the value at the nearer
/// bound (about 1.6e-38 or 1.7e38): for the functions that only need `e^x` to vanish next
/// to 1 or to swamp it (sigmoid, SiLU, tanh, erf), whose results are the same. One
/// power of two, no special case: about a quarter fewer instructions than [`exp`].
#[inline(always)]
fn exp_saturating(x: f32) -> f32 {
    let x = if x < -87.0 { -87.0 } else { x };
    let x = if x > 88.0 { 88.0 } else { x };
    let (er, t) = exp_reduced(x);
    er * pow2((t.to_bits() as i32).wrapping_sub(ROUNDER_BITS))
}

/// `e^r` for the reduced argument of `x` (in range), and `t`, whose low mantissa bits hold
/// `n = round(x / ln2)` (`e^x = e^r 2^n`).
#[inline(always)]
fn exp_reduced(x: f32) -> (f32, f32) {
    const LOG2E: f32 = core::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    const P: [f32; 6] = [1.987_569_1e-4, 1.398_2e-3, 8.333_452e-3, 4.166_579_6e-2, 0.166_666_65, 0.5];
    let t = x * LOG2E + ROUNDER;
    let n = t - ROUNDER;
    let r = x - n * LN2_HI - n * LN2_LO;
    let p = ((((P[0] * r + P[1]) * r + P[2]) * r + P[3]) * r + P[4]) * r + P[5];
    (1.0 + r + r * r * p, t)
}

/// `2^n` for `-126 <= n <= 127`.
#[inline(always)]
fn pow2(n: i32) -> f32 {
    f32::from_bits((n.wrapping_add(127) as u32) << 23)
}

#[inline(always)]
fn abs(x: f32) -> f32 {
    f32::from_bits(x.to_bits() & !SIGN)
}

/// `y` with the sign of `x`, for `y >= 0`.
#[inline(always)]
fn with_sign_of(y: f32, x: f32) -> f32 {
    f32::from_bits(y.to_bits() | (x.to_bits() & SIGN))
}

/// `erf(x)` within about 3e-7 absolutely: its Taylor series below 0.6 (where the other form
/// loses digits to cancellation), Abramowitz and Stegun's 7.1.26 above.
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    const P: f32 = 0.327_591_1;
    const A: [f32; 5] = [0.254_829_6, -0.284_496_74, 1.421_413_7, -1.453_152_1, 1.061_405_4];
    // 2/sqrt(pi) (-1)^n / (n! (2n + 1)), n = 0..7.
    const T: [f32; 8] = [
        core::f32::consts::FRAC_2_SQRT_PI,
        -0.376_126_4,
        0.112_837_92,
        -0.026_866_17,
        0.005_223_977_6,
        -8.548_326e-4,
        1.205_533_3e-4,
        -1.492_565e-5,
    ];
    let a = abs(x);
    let t = 1.0 / (1.0 + P * a);
    let poly = ((((A[4] * t + A[3]) * t + A[2]) * t + A[1]) * t + A[0]) * t;
    let large = 1.0 - poly * exp_saturating(-a * a);
    let z = a * a;
    let series = a * (T[0] + z * (T[1] + z * (T[2] + z * (T[3] + z * (T[4] + z * (T[5] + z * (T[6] + z * T[7])))))));
    with_sign_of(if a < 0.6 { series } else { large }, x)
}

/// `tanh(x) = (1 - e^-2|x|) / (1 + e^-2|x|)` with the sign of `x`.
#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    let e = exp_saturating(-2.0 * abs(x));
    with_sign_of((1.0 - e) / (1.0 + e), x)
}

#[inline(always)]
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp_saturating(-x))
}

#[inline(always)]
pub fn silu(x: f32) -> f32 {
    // Below -88, `x e^x` is below 1e-36 in magnitude: 0 rather than `x / 1.7e38`.
    let s = x / (1.0 + exp_saturating(-x));
    if x < -88.0 {
        -0.0
    } else {
        s
    }
}

/// GELU, tanh form: `0.5 x (1 + tanh(u)) = x / (1 + e^-2u)` with
/// `u = sqrt(2/pi) (x + 0.044715 x^3)`: one exponential, no cancellation.
#[inline(always)]
pub fn gelu(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = core::f32::consts::FRAC_2_SQRT_PI * core::f32::consts::FRAC_1_SQRT_2;
    let u = SQRT_2_OVER_PI * (x + 0.044_715 * x * x * x);
    x / (1.0 + exp(-2.0 * u))
}

/// GELU, exact form: `0.5 x (1 + erf(x / sqrt 2))`.
#[inline(always)]
pub fn gelu_erf(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x * core::f32::consts::FRAC_1_SQRT_2))
}

/// The IEEE half-precision bits of `x` (in the low 16 bits), rounded to nearest even like
/// `half::f16::from_f32`: overflow gives infinity, NaN a quiet NaN, values below the smallest
/// normal half a subnormal half.
#[inline(always)]
pub fn f16_bits(x: f32) -> u32 {
    let bits = x.to_bits();
    let sign = (bits >> 16) & 0x8000;
    let a = bits & !SIGN;
    // At or above 65536 (the half range ends at 65520 after rounding): infinity, or NaN.
    let special = if a > 0x7f80_0000 { 0x7e00 } else { 0x7c00 };
    // Below 2^-14 the half is subnormal: adding 0.5 puts the value's bits where the float
    // adder rounds them (to nearest even) into the low mantissa bits.
    let subnormal = (f32::from_bits(a) + 0.5).to_bits().wrapping_sub(0x3f00_0000);
    // Normal: rebias the exponent (-112 << 23) and round the 13 dropped bits to nearest even.
    let odd = (a >> 13) & 1;
    let normal = a.wrapping_add(0xc800_0fff).wrapping_add(odd) >> 13;
    let h = if a >= 0x4780_0000 {
        special
    } else if a < 0x3880_0000 {
        subnormal
    } else {
        normal
    };
    h | sign
}

/// The f32 value of the half-precision bits `h` (exact).
#[inline(always)]
pub fn f16_value(h: u32) -> f32 {
    const EXP: u32 = 0x7c00 << 13;
    let shifted = (h & 0x7fff) << 13;
    let exp = shifted & EXP;
    // Rebias the exponent (+112 << 23); infinity and NaN need the rest of the way to 255.
    let o = shifted.wrapping_add(0x3800_0000);
    let special = o.wrapping_add(0x3800_0000);
    // Zero and subnormal halves: renormalise by subtracting 2^-14 in float arithmetic.
    let subnormal = (f32::from_bits(o.wrapping_add(0x0080_0000)) - f32::from_bits(0x3880_0000)).to_bits();
    let r = if exp == EXP {
        special
    } else if exp == 0 {
        subnormal
    } else {
        o
    };
    f32::from_bits(r | ((h & 0x8000) << 16))
}

/// `x` truncated toward zero, saturating at `±2^30`; NaN gives 0. (Rust's `as` saturates
/// too, but LLVM checks each lane for NaN and overflow one at a time; clamping first lets it
/// use one vector conversion.)
#[inline(always)]
pub fn trunc_i32(x: f32) -> i32 {
    const LIMIT: f32 = (1 << 30) as f32;
    let x = if x > LIMIT { LIMIT } else { x };
    let x = if x < -LIMIT { -LIMIT } else { x };
    let x = if x.is_nan() { 0.0 } else { x };
    // SAFETY: `x` is finite and within the i32 range.
    unsafe { x.to_int_unchecked::<i32>() }
}

/// `x` rounded to the nearest integer, halfway cases away from zero (like `roundf`), for
/// `|x| < 2^30`; NaN gives 0.
#[inline(always)]
pub fn round_away(x: f32) -> i32 {
    let t = trunc_i32(x);
    let frac = x - t as f32;
    t + i32::from(frac >= 0.5) - i32::from(frac <= -0.5)
}

/// `(sin x, cos x)` within about 1e-7 (absolutely) for `|x| < 2^24`: `x = j pi/2 + r`
/// reduced in f64 (two-part pi/2, exact products for `|j| < 2^20`), then Cephes' `sinf` and
/// `cosf` polynomials on `|r| <= pi/4` and the quadrant `j mod 4`.
#[inline(always)]
pub fn sin_cos(x: f32) -> (f32, f32) {
    const ROUNDER: f64 = 6_755_399_441_055_744.0; // 1.5 * 2^52
    const PIO2_HI: f64 = 1.570_796_326_734_125_6;
    const PIO2_LO: f64 = 6.077_100_506_506_192e-11;
    const S: [f32; 3] = [-1.666_665_5e-1, 8.332_161e-3, -1.951_529_6e-4];
    const C: [f32; 3] = [4.166_664_6e-2, -1.388_731_6e-3, 2.443_315_7e-5];
    let xd = f64::from(x);
    let t = xd * core::f64::consts::FRAC_2_PI + ROUNDER;
    let quadrant = t.to_bits() as u32 & 3;
    let j = t - ROUNDER;
    let r = (xd - j * PIO2_HI - j * PIO2_LO) as f32;
    let z = r * r;
    let s = r + r * z * (S[0] + z * (S[1] + z * S[2]));
    let c = 1.0 - 0.5 * z + z * z * (C[0] + z * (C[1] + z * C[2]));
    let (s, c) = if quadrant & 1 == 0 { (s, c) } else { (c, s) };
    let s = if quadrant & 2 == 0 { s } else { -s };
    let c = if (quadrant + 1) & 2 == 0 { c } else { -c };
    (s, c)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Relative error of `f` against `reference` (absolute below `floor`).
    fn worst(f: fn(f32) -> f32, reference: fn(f64) -> f64, lo: f32, hi: f32, floor: f64) -> f64 {
        let steps = if cfg!(miri) { 200 } else { 200_000 };
        (0..=steps)
            .map(|i| {
                let x = lo + (hi - lo) * (i as f32 / steps as f32);
                let (got, want) = (f64::from(f(x)), reference(f64::from(x)));
                (got - want).abs() / want.abs().max(floor)
            })
            .fold(0.0, f64::max)
    }

    #[test]
    fn exp_is_within_a_few_ulp() {
        assert!(worst(exp, libm::exp, -87.0, 88.0, 0.0) < 4e-7);
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp(-200.0), 0.0);
        assert_eq!(exp(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp(100.0), f32::INFINITY);
        assert!(exp(f32::NAN).is_nan());
        assert_eq!(exp(0.0), 1.0);
        // Subnormal results are flushed to zero.
        assert_eq!(exp(-87.4), 0.0);
        assert!(exp(-87.3) > 0.0);
    }

    #[test]
    fn erf_tanh_and_gelus_are_close_to_libm() {
        assert!(worst(erf, libm::erf, -6.0, 6.0, 1.0) < 4e-7);
        assert!(worst(tanh, libm::tanh, -20.0, 20.0, 1.0) < 3e-7);
        let gelu_ref = |x: f64| 0.5 * x * (1.0 + libm::erf(x / core::f64::consts::SQRT_2));
        assert!(worst(gelu_erf, gelu_ref, -150.0, 150.0, 1.0) < 3e-7);
        let gelu_tanh_ref = |x: f64| {
            let c = core::f64::consts::FRAC_2_SQRT_PI * core::f64::consts::FRAC_1_SQRT_2;
            0.5 * x * (1.0 + libm::tanh(c * (x + 0.044715 * x * x * x)))
        };
        assert!(worst(gelu, gelu_tanh_ref, -150.0, 150.0, 1.0) < 3e-7);
        assert!(worst(silu, |x| x / (1.0 + libm::exp(-x)), -150.0, 150.0, 1.0) < 3e-7);
        for f in [erf, tanh, gelu, gelu_erf, silu, sigmoid] {
            assert!(f(f32::NAN).is_nan());
        }
        assert_eq!(gelu(-1e30), 0.0);
        assert_eq!(silu(-1e30), 0.0);
        assert_eq!(silu(1e30), 1e30);
        assert!(sigmoid(-1e30) < 1e-38 && sigmoid(1e30) == 1.0);
    }

    #[test]
    fn half_conversions_match_the_half_crate_for_every_half() {
        for h in (0..=u16::MAX).step_by(if cfg!(miri) { 97 } else { 1 }) {
            let v = half::f16::from_bits(h);
            let got = f16_value(u32::from(h));
            assert!(got.to_bits() == v.to_f32().to_bits() || (got.is_nan() && v.is_nan()), "{h:#x}");
            if !v.is_nan() {
                // Every half converts back to itself, and midpoints round like `half`.
                assert_eq!(f16_bits(got), u32::from(h), "{h:#x}");
                let next = f32::from_bits(got.to_bits() + 1);
                assert_eq!(f16_bits(next), u32::from(half::f16::from_f32(next).to_bits()), "{h:#x}+");
            }
        }
        for x in [65519.0f32, 65520.0, 1e10, f32::INFINITY, 5.9604645e-8, 2.9802322e-8, 1e-30] {
            assert_eq!(f16_bits(x), u32::from(half::f16::from_f32(x).to_bits()), "{x}");
            assert_eq!(f16_bits(-x), u32::from(half::f16::from_f32(-x).to_bits()), "-{x}");
        }
        assert_eq!(f16_bits(f32::NAN) & 0x7e00, 0x7e00);
    }

    #[test]
    fn sin_cos_is_close_to_libm() {
        let steps = if cfg!(miri) { 300 } else { 300_000 };
        for (lo, hi) in [(-4.0f32, 4.0f32), (-1e5, 1e5), (8e6, 1.6e7)] {
            for i in 0..=steps {
                let x = lo + (hi - lo) * (i as f32 / steps as f32);
                let (s, c) = sin_cos(x);
                let (ws, wc) = (libm::sin(f64::from(x)), libm::cos(f64::from(x)));
                assert!((f64::from(s) - ws).abs() < 2e-7 && (f64::from(c) - wc).abs() < 2e-7, "{x}: {s} {c}");
            }
        }
    }

    #[test]
    fn round_away_is_roundf() {
        for x in [0.5f32, -0.5, 1.5, -2.5, 0.49999997, 126.5, -127.49, 3.0, -0.0, 1e-8] {
            assert_eq!(round_away(x) as f32, libm::roundf(x), "{x}");
        }
        assert_eq!(round_away(f32::NAN), 0);
    }
}
