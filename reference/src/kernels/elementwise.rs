//! Element-wise kernels: binary ops with broadcasting, SCALE and the unary functions.

use core::f32::consts::{FRAC_1_SQRT_2, FRAC_2_SQRT_PI};

use tessera_core::{BinaryOp, Result, UnaryOp};

use super::{rows_of, NodeTensors, Scratch};

/// `dst = src0 op src1`, with `src1` repeated over `src0` along every dimension.
pub fn binary(op: BinaryOp, n: &NodeTensors, scratch: &mut Scratch) -> Result<()> {
    let (a, b, dst) = (n.src(0)?, n.src(1)?, &n.dst);
    let (n0, nb0) = (a.ne[0], b.ne[0]);
    let (x, y) = scratch.take(n0 + nb0)?.split_at_mut(n0);
    for (i1, i2, i3) in rows_of(dst.ne) {
        a.read_row(i1, i2, i3, x);
        b.read_row(i1 % b.ne[1], i2 % b.ne[2], i3 % b.ne[3], y);
        for (i, v) in x.iter_mut().enumerate() {
            let w = y[i % nb0];
            *v = match op {
                BinaryOp::Add => *v + w,
                BinaryOp::Sub => *v - w,
                BinaryOp::Mul => *v * w,
                BinaryOp::Div => *v / w,
            };
        }
        dst.write_row(i1, i2, i3, x);
    }
    Ok(())
}

/// `dst = f(src0)` value by value.
pub fn map(n: &NodeTensors, scratch: &mut Scratch, f: impl Fn(f32) -> f32) -> Result<()> {
    let (a, dst) = (n.src(0)?, &n.dst);
    let x = scratch.take(a.ne[0])?;
    for (i1, i2, i3) in rows_of(dst.ne) {
        a.read_row(i1, i2, i3, x);
        x.iter_mut().for_each(|v| *v = f(*v));
        dst.write_row(i1, i2, i3, x);
    }
    Ok(())
}

pub fn unary(op: UnaryOp, n: &NodeTensors, scratch: &mut Scratch) -> Result<()> {
    map(n, scratch, unary_fn(op))
}

/// The scalar function of a unary op.
pub fn unary_fn(op: UnaryOp) -> fn(f32) -> f32 {
    match op {
        UnaryOp::Sqr => |x| x * x,
        UnaryOp::Sqrt => libm::sqrtf,
        UnaryOp::Neg => |x| -x,
        UnaryOp::Abs => libm::fabsf,
        UnaryOp::Exp => libm::expf,
        UnaryOp::Relu => |x| if x > 0.0 { x } else { 0.0 },
        UnaryOp::Gelu => |x| {
            // sqrt(2/pi) = (2/sqrt(pi)) / sqrt(2), both constants: nothing computed per value.
            const SQRT_2_OVER_PI: f32 = FRAC_2_SQRT_PI * FRAC_1_SQRT_2;
            0.5 * x * (1.0 + libm::tanhf(SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))
        },
        UnaryOp::GeluErf => |x| 0.5 * x * (1.0 + libm::erff(x * FRAC_1_SQRT_2)),
        UnaryOp::Silu => |x| x / (1.0 + libm::expf(-x)),
        UnaryOp::Sigmoid => |x| 1.0 / (1.0 + libm::expf(-x)),
        UnaryOp::Tanh => libm::tanhf,
    }
}
