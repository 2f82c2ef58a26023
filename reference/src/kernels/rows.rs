//! Row kernels: SUM_ROWS and MEAN, ARGMAX, SOFT_MAX, NORM, RMS_NORM and DIAG_MASK_INF.
//!
//! Each reads a whole source row into f32 scratch before writing the destination row, so the
//! destination may alias the source. Sums are accumulated in f64.

use alloc::format;

use tessera_core::{soft_max_mask_fits, soft_max_mask_row, DType, Error, Result};

use super::{rows_of, NodeTensors, Scratch};
use crate::host_tensor::HostTensor;

/// Fails with an error naming `op` unless `ok`. The op constructors already guarantee these
/// conditions; the kernels check them again because their memory accesses rely on them.
fn ensure(ok: bool, op: &'static str, expected: &str) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidParam { op, message: format!("the CPU kernel expected {expected}") })
    }
}

/// Fails unless `dst` has the shape of `src`.
fn ensure_same_shape(op: &'static str, src: &HostTensor, dst: &HostTensor) -> Result<()> {
    ensure(src.ne == dst.ne, op, "a destination of the source's shape")
}

/// `dst[0, i1, i2, i3] = sum_i0 src0[i0, i1, i2, i3]`, divided by `ne0` when `mean`.
pub fn sum_rows(n: &NodeTensors, scratch: &mut Scratch, mean: bool) -> Result<()> {
    let op = if mean { "MEAN" } else { "SUM_ROWS" };
    let (a, dst) = (n.src(0)?, &n.dst);
    let [n0, n1, n2, n3] = a.ne;
    ensure(dst.ne == [1, n1, n2, n3], op, "a destination of shape [1, ne1, ne2, ne3]")?;
    let x = scratch.take(n0)?;
    for (i1, i2, i3) in rows_of(a.ne) {
        a.read_row(i1, i2, i3, x);
        let sum: f64 = x.iter().map(|&v| f64::from(v)).sum();
        let v = if mean { sum / n0 as f64 } else { sum };
        dst.write_row(i1, i2, i3, &[v as f32]);
    }
    Ok(())
}

/// `dst[i1] = argmax_i0 src0[i0, i1]` (I32): the first index of the largest value. NaN values
/// are skipped; a row of only NaN gives 0.
pub fn argmax(n: &NodeTensors, scratch: &mut Scratch) -> Result<()> {
    let (a, dst) = (n.src(0)?, &n.dst);
    let [n0, n1, n2, n3] = a.ne;
    ensure(n2 == 1 && n3 == 1, "ARGMAX", "a source matrix [n, m, 1, 1]")?;
    ensure(dst.dtype == DType::I32, "ARGMAX", "an i32 destination")?;
    ensure(dst.ne == [n1, 1, 1, 1], "ARGMAX", "a destination of shape [m, 1, 1, 1]")?;
    let x = scratch.take(n0)?;
    for i1 in 0..n1 {
        a.read_row(i1, 0, 0, x);
        let mut best: Option<(usize, f32)> = None;
        for (i, &v) in x.iter().enumerate() {
            if !v.is_nan() && best.is_none_or(|(_, b)| v > b) {
                best = Some((i, v));
            }
        }
        let index = best.map_or(0, |(i, _)| i);
        let index = i32::try_from(index).map_err(|_| Error::Overflow { what: "ARGMAX index" })?;
        dst.set_i32([i1, 0, 0, 0], index);
    }
    Ok(())
}

/// `dst = softmax(src0 * scale + mask)` along rows: `y_i = exp(x_i - max x) / sum_j exp(x_j - max x)`.
///
/// The optional mask (src 1) has rows of the same length and repeats over dimensions 1 to 3:
/// row `(i1, i2, i3)` of the source uses mask row `(i1 % m1, i2 % m2, i3 % m3)`
/// ([`soft_max_mask_fits`]). A row whose values are all `-inf` (fully masked) becomes zeros; a
/// NaN anywhere in a row makes it all NaN.
pub fn soft_max(n: &NodeTensors, scratch: &mut Scratch, scale: f32) -> Result<()> {
    let (a, mask, dst) = (n.src(0)?, n.opt_src(1), &n.dst);
    ensure_same_shape("SOFT_MAX", &a, dst)?;
    let n0 = a.ne[0];
    if let Some(m) = &mask {
        let ok = soft_max_mask_fits(m.ne, a.ne);
        ensure(ok, "SOFT_MAX", "a mask [n, m1, m2, m3] with m1 >= r or dividing it, m2, m3 dividing the source's")?;
    }
    let (x, y) = scratch.take(2 * n0)?.split_at_mut(n0);
    for (i1, i2, i3) in rows_of(a.ne) {
        a.read_row(i1, i2, i3, x);
        x.iter_mut().for_each(|v| *v *= scale);
        if let Some(m) = &mask {
            let (j1, j2, j3) = soft_max_mask_row(m.ne, i1, i2, i3);
            m.read_row(j1, j2, j3, y);
            x.iter_mut().zip(y.iter()).for_each(|(v, w)| *v += w);
        }
        if x.iter().all(|&v| v == f32::NEG_INFINITY) {
            x.fill(0.0);
        } else {
            // NaN values are skipped by `max` but turn the whole row to NaN through `sum`.
            let max = x.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
            let mut sum = 0.0f64;
            for v in x.iter_mut() {
                *v = libm::expf(*v - max);
                sum += f64::from(*v);
            }
            x.iter_mut().for_each(|v| *v = (f64::from(*v) / sum) as f32);
        }
        dst.write_row(i1, i2, i3, x);
    }
    Ok(())
}

/// `dst = (x - mean) / sqrt(var + eps)` along rows, with `mean = sum_i x_i / n` and
/// `var = sum_i (x_i - mean)^2 / n`.
pub fn norm(n: &NodeTensors, scratch: &mut Scratch, eps: f32) -> Result<()> {
    let (a, dst) = (n.src(0)?, &n.dst);
    ensure_same_shape("NORM", &a, dst)?;
    let n0 = a.ne[0];
    let x = scratch.take(n0)?;
    for (i1, i2, i3) in rows_of(a.ne) {
        a.read_row(i1, i2, i3, x);
        let mean = x.iter().map(|&v| f64::from(v)).sum::<f64>() / n0 as f64;
        let var = x.iter().map(|&v| (f64::from(v) - mean) * (f64::from(v) - mean)).sum::<f64>() / n0 as f64;
        let inv_std = 1.0 / libm::sqrt(var + f64::from(eps));
        x.iter_mut().for_each(|v| *v = ((f64::from(*v) - mean) * inv_std) as f32);
        dst.write_row(i1, i2, i3, x);
    }
    Ok(())
}

/// `dst = x / sqrt(mean(x^2) + eps)` along rows.
pub fn rms_norm(n: &NodeTensors, scratch: &mut Scratch, eps: f32) -> Result<()> {
    let (a, dst) = (n.src(0)?, &n.dst);
    ensure_same_shape("RMS_NORM", &a, dst)?;
    let n0 = a.ne[0];
    let x = scratch.take(n0)?;
    for (i1, i2, i3) in rows_of(a.ne) {
        a.read_row(i1, i2, i3, x);
        let mean_sq = x.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>() / n0 as f64;
        let inv_rms = 1.0 / libm::sqrt(mean_sq + f64::from(eps));
        x.iter_mut().for_each(|v| *v = (f64::from(*v) * inv_rms) as f32);
        dst.write_row(i1, i2, i3, x);
    }
    Ok(())
}

/// `dst[i0, i1, i2, i3] = -inf` where `i0 > n_past + i1`, else `src0[i0, i1, i2, i3]`.
pub fn diag_mask_inf(n: &NodeTensors, scratch: &mut Scratch, n_past: usize) -> Result<()> {
    let (a, dst) = (n.src(0)?, &n.dst);
    ensure_same_shape("DIAG_MASK_INF", &a, dst)?;
    let x = scratch.take(a.ne[0])?;
    for (i1, i2, i3) in rows_of(a.ne) {
        a.read_row(i1, i2, i3, x);
        let first_masked = n_past.saturating_add(i1).saturating_add(1);
        x.iter_mut().skip(first_masked).for_each(|v| *v = f32::NEG_INFINITY);
        dst.write_row(i1, i2, i3, x);
    }
    Ok(())
}
