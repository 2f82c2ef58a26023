//! ggml's searches for the scale (and min) of a K-quant sub-block: each tries a few scales
//! around the plain range fit and keeps the one with the smallest weighted error. They are
//! written operation for operation as ggml's reference quantizer computes them (same order of
//! float operations, same rounding), so the blocks they lead to are ggml's bit for bit.
//!
//! Every function takes any f32 input (NaN, infinities, huge values): the results may then be
//! meaningless, but indices stay in range and nothing panics.

/// Rounds to the nearest integer, ties to even, as ggml does: adding 1.5 * 2^23 leaves the
/// integer in the low mantissa bits. Exact for `|v| < 2^22`; other inputs (ggml asserts against
/// them in debug builds) give ggml's release-build value, some integer in `-2^22..2^22`.
#[inline]
pub fn nearest_int(v: f32) -> i32 {
    let bits = (v + 12_582_912.0).to_bits();
    (bits & 0x007f_ffff) as i32 - 0x0040_0000
}

/// The square root, correctly rounded (as C's `sqrtf`, so blocks stay ggml's). libm's x86
/// version is inline assembly, which Miri cannot run; under Miri, std's.
#[inline]
pub fn sqrtf(v: f32) -> f32 {
    #[cfg(miri)]
    {
        extern crate std;
        std::primitive::f32::sqrt(v)
    }
    #[cfg(not(miri))]
    libm::sqrtf(v)
}

/// Below this largest magnitude (of values, or of a block's scales) a group counts as all
/// zeros (ggml's `GROUP_MAX_EPS`).
pub(crate) const GROUP_MAX_EPS: f32 = 1e-15;

/// The value of largest magnitude (sign kept, first on ties) and that magnitude.
fn signed_max(x: &[f32]) -> (f32, f32) {
    let (mut max, mut amax) = (0.0f32, 0.0f32);
    for &v in x {
        let a = libm::fabsf(v);
        if a > amax {
            amax = a;
            max = v;
        }
    }
    (max, amax)
}

/// ggml's `make_qkx2_quants`: fits `x ~ scale * l - min` with `l` in `0..=nmax` (`min >= 0`)
/// minimising the `weights`-weighted squared error (absolute error with `use_mad`). Starting
/// from the range fit, it tries `nstep + 1` inverse scales `(rmin + rdelta * is + nmax) /
/// range`, each followed by the least-squares scale and min for its quants. Writes the quants
/// to `l` and returns `(scale, min)`.
#[allow(clippy::too_many_arguments)] // ggml's parameters, in ggml's order.
pub fn make_qkx2_quants(
    nmax: i32,
    x: &[f32],
    weights: &[f32],
    l: &mut [u8],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
    use_mad: bool,
) -> (f32, f32) {
    let n = x.len();
    let (mut min, mut max) = (x[0], x[0]);
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l[..n].fill(0);
        return (0.0, -min);
    }
    let error = |diff: f32| if use_mad { libm::fabsf(diff) } else { diff * diff };
    let quant = |iscale: f32, v: f32, min: f32| nearest_int(iscale * (v - min)).clamp(0, nmax) as u8;
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0.0f32;
    for i in 0..n {
        l[i] = quant(iscale, x[i], min);
        best_error += weights[i] * error(scale * f32::from(l[i]) + min - x[i]);
    }
    if nstep < 1 {
        return (scale, -min);
    }
    let mut aux = [0u8; 32];
    let aux = &mut aux[..n];
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for i in 0..n {
            aux[i] = quant(iscale, x[i], min);
            let (w, q) = (weights[i], f32::from(aux[i]));
            sum_l += w * q;
            sum_l2 += w * q * q;
            sum_xl += w * q * x[i];
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0.0f32;
            for i in 0..n {
                cur_error += weights[i] * error(this_scale * f32::from(aux[i]) + this_min - x[i]);
            }
            if cur_error < best_error {
                l[..n].copy_from_slice(aux);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// ggml's `make_q3_quants` with its error search (`do_rmse`): symmetric quants `l` in
/// `-nmax..nmax` for `x ~ scale * l`, each improved in up to five passes by moving it to the
/// level that the least-squares scale of the others prefers, weighted by `x^2`. Writes
/// `l + nmax` to `out` and returns the scale.
pub fn make_q3_quants(nmax: i32, x: &[f32], out: &mut [i8]) -> f32 {
    let n = x.len();
    let (max, amax) = signed_max(x);
    if amax < GROUP_MAX_EPS {
        out[..n].fill(0);
        return 0.0;
    }
    let iscale = -(nmax as f32) / max;
    let mut l = [0i32; 16];
    let l = &mut l[..n];
    let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
    for i in 0..n {
        l[i] = nearest_int(iscale * x[i]).clamp(-nmax, nmax - 1);
        let w = x[i] * x[i];
        sumlx += w * x[i] * l[i] as f32;
        suml2 += w * l[i] as f32 * l[i] as f32;
    }
    for _ in 0..5 {
        let mut changed = false;
        for i in 0..n {
            let w = x[i] * x[i];
            let mut slx = sumlx - w * x[i] * l[i] as f32;
            if slx > 0.0 {
                let mut sl2 = suml2 - w * l[i] as f32 * l[i] as f32;
                let new_l = nearest_int(x[i] * sl2 / slx).clamp(-nmax, nmax - 1);
                if new_l != l[i] {
                    slx += w * x[i] * new_l as f32;
                    sl2 += w * new_l as f32 * new_l as f32;
                    if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                        l[i] = new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        changed = true;
                    }
                }
            }
        }
        if !changed {
            break;
        }
    }
    for (o, l) in out.iter_mut().zip(l.iter()) {
        *o = (l + nmax) as i8;
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

/// ggml's `make_qx_quants` with `x^2` weights (its `rmse_type` 1, no importance weights):
/// symmetric quants `l` in `-nmax..nmax` for `x ~ scale * l`, the least-squares scale of the
/// range fit compared with that of 18 nearby inverse scales. Writes `l + nmax` to `out` and
/// returns the scale.
pub fn make_qx_quants(nmax: i32, x: &[f32], out: &mut [i8]) -> f32 {
    let n = x.len();
    let (max, amax) = signed_max(x);
    if amax < GROUP_MAX_EPS {
        out[..n].fill(0);
        return 0.0;
    }
    let quant = |iscale: f32, v: f32| nearest_int(iscale * v).clamp(-nmax, nmax - 1);
    let sums = |iscale: f32| {
        let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
        for &v in x {
            let (l, w) = (quant(iscale, v) as f32, v * v);
            sumlx += w * v * l;
            suml2 += w * l * l;
        }
        (sumlx, suml2)
    };
    let mut iscale = -(nmax as f32) / max;
    for (o, &v) in out.iter_mut().zip(x) {
        *o = (quant(iscale, v) + nmax) as i8;
    }
    let (sumlx, suml2) = sums(iscale);
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in -9..=9 {
        if is == 0 {
            continue;
        }
        iscale = -(nmax as f32 + 0.1 * is as f32) / max;
        let (sumlx, suml2) = sums(iscale);
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for (o, &v) in out.iter_mut().zip(x) {
                *o = (quant(iscale, v) + nmax) as i8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_rounds_half_to_even() {
        assert_eq!(nearest_int(2.5), 2);
        assert_eq!(nearest_int(3.5), 4);
        assert_eq!(nearest_int(-2.5), -2);
        assert_eq!(nearest_int(-0.4), 0);
        assert_eq!(nearest_int(1000.6), 1001);
        for v in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 1e30, -1e30] {
            assert!((-(1 << 22)..(1 << 22)).contains(&nearest_int(v)));
        }
    }

    #[test]
    fn searches_fit_exact_grids_exactly() {
        // 0.5 * (0..=15) - 1: a Q4 grid with scale 0.5 and min 1.
        let x: [f32; 32] = core::array::from_fn(|i| 0.5 * (i % 16) as f32 - 1.0);
        let w = [1.0f32; 32];
        let mut l = [0u8; 32];
        let (scale, min) = make_qkx2_quants(15, &x, &w, &mut l, -1.0, 0.1, 20, false);
        assert_eq!((scale, min), (0.5, 1.0));
        assert!(l.iter().enumerate().all(|(i, &q)| usize::from(q) == i % 16));
        // 0.25 * (-4..4): a symmetric 3-bit grid.
        let x: [f32; 16] = core::array::from_fn(|i| 0.25 * ((i % 8) as f32 - 4.0));
        let mut q = [0i8; 16];
        let scale = make_q3_quants(4, &x, &mut q);
        assert_eq!(scale, 0.25);
        assert!(q.iter().enumerate().all(|(i, &q)| q as usize == i % 8));
    }
}
