//! The row kernels, written once over [`lanes`](super::lanes) and compiled for every
//! instruction set by [`row_kernels!`](super::row_kernels). Every body is `#[inline(always)]`
//! so that it takes the target features of the function it is expanded into.
//!
//! A row is always computed by one thread with the same operations in the same order, so
//! results never depend on the thread count.

use tessera_core::{convert, BinaryOp, DType, RopeMode, UnaryOp};

use super::lanes::{load, map, map_row, max, steps, store, sum, sum_row, zip, LANES, V};
use super::{math, quantize};

/// `y = a op b` over rows of `n` values.
///
/// # Safety
/// `a`, `b` readable and `y` writable for `n` f32.
#[inline(always)]
pub unsafe fn binary(op: BinaryOp, n: usize, a: *const f32, b: *const f32, y: *mut f32) {
    // One loop per op, so that the op is not decided per value.
    macro_rules! each {
        ($f:expr) => {
            steps!(n, |i, c| {
                // SAFETY: values `i..i + c` of the three rows.
                unsafe { store(y.add(i), c, zip(load(a.add(i), c, 0.0), load(b.add(i), c, 0.0), $f)) }
            })
        };
    }
    match op {
        BinaryOp::Add => each!(|p, q| p + q),
        BinaryOp::Sub => each!(|p, q| p - q),
        BinaryOp::Mul => each!(|p, q| p * q),
        BinaryOp::Div => each!(|p, q| p / q),
    }
}

/// `y = a op s` over a row of `n` values.
///
/// # Safety
/// `a` readable and `y` writable for `n` f32.
#[inline(always)]
pub unsafe fn binary_scalar(op: BinaryOp, n: usize, a: *const f32, s: f32, y: *mut f32) {
    macro_rules! each {
        ($f:expr) => {
            map_row!(n, a, y, |u| map(u, $f))
        };
    }
    match op {
        BinaryOp::Add => each!(|p| p + s),
        BinaryOp::Sub => each!(|p| p - s),
        BinaryOp::Mul => each!(|p| p * s),
        BinaryOp::Div => each!(|p| p / s),
    }
}

/// `y = f(x)` over a row of `n` values. (SQRT calls `libm::sqrtf` per value: `core` has no
/// square root LLVM could vectorise.)
///
/// # Safety
/// `x` readable and `y` writable for `n` f32.
#[inline(always)]
pub unsafe fn unary(op: UnaryOp, n: usize, x: *const f32, y: *mut f32) {
    macro_rules! each {
        ($f:expr) => {
            map_row!(n, x, y, |u| map(u, $f))
        };
    }
    match op {
        UnaryOp::Sqr => each!(|p| p * p),
        UnaryOp::Neg => each!(|p| -p),
        UnaryOp::Abs => each!(|p| f32::from_bits(p.to_bits() & 0x7fff_ffff)),
        UnaryOp::Exp => each!(math::exp),
        UnaryOp::Relu => each!(|p| if p > 0.0 { p } else { 0.0 }),
        UnaryOp::Gelu => each!(math::gelu),
        UnaryOp::GeluErf => each!(math::gelu_erf),
        UnaryOp::Silu => each!(math::silu),
        UnaryOp::Sigmoid => each!(math::sigmoid),
        UnaryOp::Tanh => each!(math::tanh),
        UnaryOp::Sqrt => each!(libm::sqrtf),
    }
}

/// `y = softmax(x * scale + mask)` over a row of `n` values (`mask` may be null). A row of
/// only `-inf` becomes zeros; a NaN makes the whole row NaN (as the reference kernel does).
///
/// # Safety
/// `x` (and `mask` unless null) readable and `y` writable for `n` f32; `y` may be `x`.
#[inline(always)]
pub unsafe fn soft_max(n: usize, x: *const f32, mask: *const f32, scale: f32, y: *mut f32) {
    let mut top = [f32::NEG_INFINITY; LANES];
    steps!(n, |i, c| {
        // SAFETY: values `i..i + c` of the rows.
        let mut v = map(unsafe { load(x.add(i), c, 0.0) }, |p| p * scale);
        if !mask.is_null() {
            // SAFETY: as above.
            v = zip(v, unsafe { load(mask.add(i), c, 0.0) }, |p, q| p + q);
        }
        // SAFETY: as above.
        unsafe { store(y.add(i), c, v) };
        v.iter_mut().skip(c).for_each(|p| *p = f32::NEG_INFINITY);
        top = zip(top, v, |m, p| if p > m { p } else { m });
    });
    let top = max(top);
    if top == f32::NEG_INFINITY {
        // Only -inf (and NaN) values: zeros, or NaN if there is one.
        // SAFETY: the row's `n` values.
        let nan = (0..n).any(|i| unsafe { *y.add(i) }.is_nan());
        let fill = if nan { f32::NAN } else { 0.0 };
        // SAFETY: as above.
        (0..n).for_each(|i| unsafe { *y.add(i) = fill });
        return;
    }
    let mut total = [0.0; LANES];
    steps!(n, |i, c| {
        // SAFETY: values `i..i + c` of `y`; padding lanes are -inf, whose exponential is 0.
        let v = unsafe { load(y.add(i), c, f32::NEG_INFINITY) };
        // Masked-out steps (all -inf: most of a causal or block-diagonal mask) are zeros
        // without computing their exponentials.
        let masked = v.iter().fold(true, |all, &p| all & (p == f32::NEG_INFINITY));
        let e = if masked { [0.0; LANES] } else { map(v, |p| math::exp(p - top)) };
        // SAFETY: as above.
        unsafe { store(y.add(i), c, e) };
        total = zip(total, e, |a, b| a + b);
    });
    let inv = 1.0 / sum(total);
    map_row!(n, y, y, |v| map(v, |p| p * inv));
}

/// One query row's attention over `kv` keys and values held as f32: `keys` transposed
/// (`d x kv`: value `i` of key `p` at `i * kv + p`, so that sixteen keys' scores are summed
/// in sixteen lanes with no sum across lanes), `values` as rows (`kv x dv`). The scores
/// `q . key_p` go to `scores`, then their SOFT_MAX after `scale` and the mask row (null:
/// none), then `y = sum_p scores[p] values[p]` (keys of weight 0, the masked-out ones,
/// skipped). A row whose scores are all -inf gets zeros, as the reference's.
///
/// # Safety
/// `q` readable for `d` f32, `keys` for `d * kv`, `values` for `kv * dv`, `mask` null or
/// readable for `kv`; `scores` writable for `kv` and `y` for `dv`, neither overlapping the
/// others.
#[inline(always)]
#[allow(clippy::too_many_arguments)] // one row of an op with four operands
pub unsafe fn attend(
    (d, dv, kv): (usize, usize, usize),
    q: *const f32,
    keys: *const f32,
    values: *const f32,
    mask: *const f32,
    scale: f32,
    scores: *mut f32,
    y: *mut f32,
) {
    steps!(kv, |p, c| {
        let mut acc = [0.0; LANES];
        for i in 0..d {
            // SAFETY: value `i` of the query; values `p..p + c` of row `i` of the keys.
            let (a, b) = unsafe { (*q.add(i), load(keys.add(i * kv + p), c, 0.0)) };
            acc = zip(acc, b, |s, t| s + a * t);
        }
        // SAFETY: scores `p..p + c`.
        unsafe { store(scores.add(p), c, acc) };
    });
    // SAFETY: `kv` scores, in place, and the mask row (or null).
    unsafe { soft_max(kv, scores, mask, scale, scores) };
    steps!(dv, |i, c| {
        // SAFETY: values `i..i + c` of `y`.
        unsafe { store(y.add(i), c, [0.0; LANES]) };
    });
    for p in 0..kv {
        // SAFETY: `p < kv`.
        let w = unsafe { *scores.add(p) };
        if w == 0.0 {
            continue;
        }
        // SAFETY: value row `p` of `dv` values.
        let value = unsafe { values.add(p * dv) };
        steps!(dv, |i, c| {
            // SAFETY: values `i..i + c` of `y` and of the value row.
            let (acc, x) = unsafe { (load(y.add(i), c, 0.0), load(value.add(i), c, 0.0)) };
            // SAFETY: as above.
            unsafe { store(y.add(i), c, zip(acc, x, |s, t| s + w * t)) };
        });
    }
}

/// `y = (x - mean) / sqrt(var + eps)` over a row of `n > 0` values.
///
/// # Safety
/// `x` readable and `y` writable for `n` f32; `y` may be `x`.
#[inline(always)]
pub unsafe fn norm(n: usize, x: *const f32, eps: f32, y: *mut f32) {
    let mean = sum_row!(n, x, 0.0, |v| v) / n as f32;
    // Padding lanes read as the mean, which this sum maps to 0.
    let var = sum_row!(n, x, mean, |v| map(v, |p| (p - mean) * (p - mean))) / n as f32;
    let inv = 1.0 / libm::sqrtf(var + eps);
    map_row!(n, x, y, |v| map(v, |p| (p - mean) * inv));
}

/// `y = x / sqrt(mean(x^2) + eps)` over a row of `n > 0` values.
///
/// # Safety
/// As for [`norm`].
#[inline(always)]
pub unsafe fn rms_norm(n: usize, x: *const f32, eps: f32, y: *mut f32) {
    let mean_sq = sum_row!(n, x, 0.0, |v| map(v, |p| p * p)) / n as f32;
    let inv = 1.0 / libm::sqrtf(mean_sq + eps);
    map_row!(n, x, y, |v| map(v, |p| p * inv));
}

/// `a cos + b sin`, lane by lane.
#[inline(always)]
fn rotate(a: V, b: V, cos: V, sin: V) -> V {
    zip(zip(a, cos, |p, q| p * q), zip(b, sin, |p, q| p * q), |p, q| p + q)
}

/// Rotates the first `n_dims` values of a row of `n` by a table from
/// [`rope_table`](crate::fast::rope): `cos[i]`, then `sin[i]` at `table + n_dims`, already
/// signed, so that `y[i] = x[i] cos[i] + x[partner(i)] sin[i]`; values from `n_dims` on are
/// copied.
///
/// # Safety
/// `x` readable and `y` writable for `n` f32 (`y` may be `x`); `table` readable for
/// `2 n_dims` f32; `n_dims <= n` and even.
#[inline(always)]
pub unsafe fn rope(mode: RopeMode, n: usize, n_dims: usize, x: *const f32, table: *const f32, y: *mut f32) {
    // SAFETY: every offset in the body below is inside the row or the table.
    unsafe {
        let (cos, sin) = (table, table.add(n_dims));
        match mode {
            RopeMode::Normal => steps!(n_dims, |i, c| {
                let v = load(x.add(i), c, 0.0);
                // The partner of value 2k is 2k + 1 and the other way round; `i` is even.
                let mut swapped: V = v;
                for pair in swapped.chunks_exact_mut(2) {
                    pair.swap(0, 1);
                }
                let r = zip(
                    zip(v, load(cos.add(i), c, 0.0), |p, q| p * q),
                    zip(swapped, load(sin.add(i), c, 0.0), |p, q| p * q),
                    |p, q| p + q,
                );
                store(y.add(i), c, r);
            }),
            RopeMode::Neox => {
                let half = n_dims / 2;
                steps!(half, |i, c| {
                    let (lo, hi) = (load(x.add(i), c, 0.0), load(x.add(half + i), c, 0.0));
                    let new_lo = rotate(lo, hi, load(cos.add(i), c, 0.0), load(sin.add(i), c, 0.0));
                    let new_hi = rotate(hi, lo, load(cos.add(half + i), c, 0.0), load(sin.add(half + i), c, 0.0));
                    store(y.add(i), c, new_lo);
                    store(y.add(half + i), c, new_hi);
                });
            }
        }
        if !core::ptr::eq(x, y.cast_const()) {
            core::ptr::copy(x.add(n_dims), y.add(n_dims), n - n_dims);
        }
    }
}

/// Bytes of a row of `n` values of `dtype` (`n` a whole number of blocks).
#[inline(always)]
fn row_bytes(dtype: DType, n: usize) -> usize {
    n / dtype.block_len() * dtype.block_bytes()
}

/// Reads a row of `n` values of `dtype` into f32: F32 (a copy) and F16 here, the other
/// types with `tessera_core`'s conversions (plain loops LLVM vectorises for the baseline
/// instruction set, or for this one where it inlines them).
///
/// # Safety
/// `x` readable for the row's bytes, `y` writable for `n` f32, not overlapping; `n` a whole
/// number of blocks.
#[inline(always)]
pub unsafe fn to_f32(dtype: DType, n: usize, x: *const u8, y: *mut f32) {
    match dtype {
        // SAFETY: `n` f32 on each side, not overlapping.
        DType::F32 => return unsafe { core::ptr::copy_nonoverlapping(x, y.cast::<u8>(), 4 * n) },
        // SAFETY: forwarded.
        DType::F16 => return unsafe { quantize::from_f16(n, x, y) },
        _ => {}
    }
    // SAFETY: the caller's guarantees, as slices.
    let (x, y) =
        unsafe { (core::slice::from_raw_parts(x, row_bytes(dtype, n)), core::slice::from_raw_parts_mut(y, n)) };
    convert::row_to_f32(dtype, x, y);
}

/// Writes a row of `n` f32 as `dtype`: F16, Q8_0 and Q4_0 here (the same results as
/// `tessera_core`'s), the other types with `tessera_core`'s conversions.
///
/// # Safety
/// As for [`to_f32`], with the roles swapped.
#[inline(always)]
pub unsafe fn from_f32(dtype: DType, n: usize, x: *const f32, y: *mut u8) {
    match dtype {
        // SAFETY: `n` f32 on each side, not overlapping.
        DType::F32 => unsafe { core::ptr::copy_nonoverlapping(x.cast::<u8>(), y, 4 * n) },
        // SAFETY: the caller's guarantees are the quantizer's.
        DType::F16 => unsafe { quantize::to_f16(n, x, y) },
        // SAFETY: as for F16.
        DType::Q8_0 => unsafe { quantize::to_q8_0(n, x, y) },
        // SAFETY: as for F16.
        DType::Q4_0 => unsafe { quantize::to_q4_0(n, x, y) },
        _ => {
            // SAFETY: the caller's guarantees, as slices.
            let (x, y) =
                unsafe { (core::slice::from_raw_parts(x, n), core::slice::from_raw_parts_mut(y, row_bytes(dtype, n))) };
            convert::row_from_f32(dtype, x, y);
        }
    }
}

/// `sin[i], cos[i] = sin(theta[i]), cos(theta[i])` for `n` angles.
///
/// # Safety
/// `theta` readable, `sin` and `cos` writable for `n` f32 (`sin` or `cos` may be `theta`).
#[inline(always)]
pub unsafe fn sin_cos(n: usize, theta: *const f32, sin: *mut f32, cos: *mut f32) {
    steps!(n, |i, c| {
        // SAFETY: values `i..i + c` of the three rows.
        let t = unsafe { load(theta.add(i), c, 0.0) };
        let (mut s, mut k) = ([0.0; LANES], [0.0; LANES]);
        for l in 0..LANES {
            (s[l], k[l]) = math::sin_cos(t[l]);
        }
        // SAFETY: as above.
        unsafe {
            store(sin.add(i), c, s);
            store(cos.add(i), c, k);
        }
    });
}
