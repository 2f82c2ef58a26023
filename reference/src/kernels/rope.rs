//! ROPE: rotary position embedding.

use alloc::format;

use tessera_core::{DType, Error, Result, RopeMode, RopeParams};

use super::{rows_of, NodeTensors, Scratch};

/// Rotates the pairs of each row of `src0: [head_dim, heads, tokens, d3]` by angles that grow
/// with the token's position `pos = src1[i2]` (I32):
///
/// `theta_k = freq_scale * pos * freq_base^(-2k / n_dims)` for `k < n_dims / 2`, and
/// `(a, b) -> (a cos theta_k - b sin theta_k, a sin theta_k + b cos theta_k)` where the pair
/// `(a, b)` is `(x[2k], x[2k + 1])` in [`RopeMode::Normal`] and `(x[k], x[k + n_dims / 2])` in
/// [`RopeMode::Neox`]. Values at `i0 >= n_dims` pass through unchanged. All in f32.
pub fn rope(n: &NodeTensors, scratch: &mut Scratch, p: RopeParams) -> Result<()> {
    let (a, pos, dst) = (n.src(0)?, n.src(1)?, &n.dst);
    let n0 = a.ne[0];
    let n_dims = p.n_dims;
    let fail =
        |expected: &str| Error::InvalidParam { op: "ROPE", message: format!("the CPU kernel expected {expected}") };
    if dst.ne != a.ne {
        return Err(fail("a destination of the source's shape"));
    }
    if pos.dtype != DType::I32 || pos.ne != [a.ne[2], 1, 1, 1] {
        return Err(fail("i32 positions, one per index of dimension 2"));
    }
    if n_dims == 0 || n_dims % 2 != 0 || n_dims > n0 {
        return Err(fail("n_dims even, positive and at most the row length"));
    }
    let half = n_dims / 2;
    let x = scratch.take(n0)?;
    for (i1, i2, i3) in rows_of(a.ne) {
        a.read_row(i1, i2, i3, x);
        let position = pos.get_i32([i2, 0, 0, 0]) as f32;
        let theta = |k: usize| {
            let exponent = -((2 * k) as f32) / n_dims as f32;
            p.freq_scale * position * libm::powf(p.freq_base, exponent)
        };
        let (rotated, _) = x.split_at_mut(n_dims);
        match p.mode {
            RopeMode::Normal => {
                for (k, pair) in rotated.chunks_exact_mut(2).enumerate() {
                    if let [x0, x1] = pair {
                        rotate(x0, x1, theta(k));
                    }
                }
            }
            RopeMode::Neox => {
                let (lo, hi) = rotated.split_at_mut(half);
                for (k, (x0, x1)) in lo.iter_mut().zip(hi.iter_mut()).enumerate() {
                    rotate(x0, x1, theta(k));
                }
            }
        }
        dst.write_row(i1, i2, i3, x);
    }
    Ok(())
}

/// `(a, b) -> (a cos theta - b sin theta, a sin theta + b cos theta)`.
fn rotate(a: &mut f32, b: &mut f32, theta: f32) {
    let (sin, cos) = (libm::sinf(theta), libm::cosf(theta));
    let (x0, x1) = (*a, *b);
    *a = x0 * cos - x1 * sin;
    *b = x0 * sin + x1 * cos;
}
