//! ADD, SUB, MUL and DIV (with `src1` repeated over `src0`), SCALE and the unary ops on the
//! vectorised row kernels, rows split over the threads.

use tessera_core::{BinaryOp, DType, Result, UnaryOp};
use tessera_reference::{HostTensor, NodeTensors};

use super::parallel::Team;
use super::row_tensor::{threads_for_values, RowTensor};
use super::scratch::WorkMemory;
use super::simd::Kernels;

/// Destinations of same-shape binary ops from this size on are written with streaming
/// stores where the kernel set has them: past the caches, reading the destination's lines
/// before writing them is wasted traffic. (Measured on a 2-core Xeon: 4096 x 8192 ADD 27 ->
/// 40 GB/s; 4096 x 512, which stays in its L3, is unchanged either way, but the op reading
/// the result would then find it in memory, not in L3.)
const STREAMING_BYTES: usize = 32 << 20;

/// `dst = src0 op src1` of f32, f16 or bf16 rows. Rows of 16-bit values are widened to f32 in
/// the thread's work memory, computed, and rounded back, as the reference kernel computes
/// them. `Ok(false)`: a layout the fast path does not take.
pub fn binary(
    kernels: &Kernels,
    team: &mut Team,
    memory: &mut WorkMemory,
    n: &NodeTensors,
    op: BinaryOp,
) -> Result<bool> {
    let rows_of =
        |t: &HostTensor| RowTensor::of(t).filter(|r| matches!(r.dtype, DType::F32 | DType::F16 | DType::BF16));
    let (Some(a), Some(b), Some(d)) =
        (n.opt_src(0).as_ref().and_then(rows_of), n.opt_src(1).as_ref().and_then(rows_of), rows_of(&n.dst))
    else {
        return Ok(false);
    };
    let (n, nb) = (d.len(), b.len());
    // `src1` must repeat a whole number of times along every dimension.
    let repeats = a.ne.iter().zip(b.ne).all(|(&an, bn)| bn != 0 && an % bn == 0);
    if a.ne != d.ne || !repeats {
        return Ok(false);
    }
    let rows = d.rows();
    let widened = [a.dtype, b.dtype, d.dtype].iter().any(|&t| t != DType::F32);
    let (mut binary, binary_scalar) = (kernels.rows.binary, kernels.rows.binary_scalar);
    if nb == n && rows * n * 4 >= STREAMING_BYTES && !widened {
        binary = kernels.rows.binary_streaming;
    }
    let threads = threads_for_values(team.threads(), rows * n);
    // A widened row of src0 (also the result before rounding) and one of src1.
    let regions = memory.reserve(0, if widened { (n + nb) * 4 } else { 0 }, threads)?;
    let rk = kernels.rows;
    team.run(threads, &|w| {
        let work = regions.private(w.ith).cast::<f32>();
        for r in w.share(rows) {
            let (i1, i2, i3) = d.index(r);
            let (b1, b2, b3) = (i1 % b.ne[1], i2 % b.ne[2], i3 % b.ne[3]);
            // SAFETY: rows of `n` (`x`, `y`) and `nb` (`z`) values, `nb` dividing `n`, the work
            // rows this thread's own (`n + nb` f32); this thread alone writes row `r` of the
            // destination.
            unsafe {
                let (x, y, z) = if widened {
                    let z = work.add(n);
                    (rk.to_f32)(a.dtype, n, a.row_ptr(i1, i2, i3), work);
                    (rk.to_f32)(b.dtype, nb, b.row_ptr(b1, b2, b3), z);
                    (work, work, z)
                } else {
                    (a.row(i1, i2, i3), d.row(i1, i2, i3), b.row(b1, b2, b3))
                };
                if nb == n {
                    binary(op, n, x, z, y);
                } else if nb == 1 {
                    binary_scalar(op, n, x, *z, y);
                } else {
                    for at in (0..n).step_by(nb) {
                        binary(op, nb, x.add(at), z, y.add(at));
                    }
                }
                if widened {
                    (rk.from_f32)(d.dtype, n, work, d.row_ptr(i1, i2, i3));
                }
            }
        }
    })?;
    Ok(true)
}

/// `dst = f(src0)` for SCALE (`Some(s)`) or a unary op, of f32 or f16 rows (f16 values are
/// widened to f32 in the thread's work memory, computed, and rounded back, as the reference
/// kernel computes them). `Ok(false)`: a layout the fast path does not take.
pub fn map(kernels: &Kernels, team: &mut Team, memory: &mut WorkMemory, n: &NodeTensors, f: Map) -> Result<bool> {
    let rows_of = |t: &HostTensor| RowTensor::of(t).filter(|r| matches!(r.dtype, DType::F32 | DType::F16));
    let (Some(a), Some(d)) = (n.opt_src(0).as_ref().and_then(rows_of), rows_of(&n.dst)) else { return Ok(false) };
    if a.ne != d.ne {
        return Ok(false);
    }
    let (n, rows) = (d.len(), d.rows());
    let widened = a.dtype != DType::F32 || d.dtype != DType::F32;
    let threads = threads_for_values(team.threads(), rows * n);
    let regions = memory.reserve(0, if widened { n * 4 } else { 0 }, threads)?;
    let rk = kernels.rows;
    team.run(threads, &|w| {
        let row = regions.private(w.ith).cast::<f32>();
        for r in w.share(rows) {
            let (i1, i2, i3) = d.index(r);
            let (x, y) = if widened { (row, row) } else { (a.row(i1, i2, i3), d.row(i1, i2, i3)) };
            // SAFETY: rows of `n` values (the work row holds `n` f32 of this thread's own);
            // this thread alone writes row `r`.
            unsafe {
                if widened {
                    (rk.to_f32)(a.dtype, n, a.row_ptr(i1, i2, i3), row);
                }
                match f {
                    Map::Scale(s) => (rk.binary_scalar)(BinaryOp::Mul, n, x, s, y),
                    Map::Unary(op) => (rk.unary)(op, n, x, y),
                }
                if widened {
                    (rk.from_f32)(d.dtype, n, row, d.row_ptr(i1, i2, i3));
                }
            }
        }
    })?;
    Ok(true)
}

/// A value-by-value op.
#[derive(Clone, Copy)]
pub enum Map {
    Scale(f32),
    Unary(UnaryOp),
}
