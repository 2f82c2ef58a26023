//! MUL_MAT: the matrix product of a (possibly quantized) matrix and F32 vectors.

use alloc::format;

use tessera_core::{Error, Result};

use super::{NodeTensors, Scratch};

/// `dst[i, j, i2, i3] = sum_k a[k, i, i2 / (b2 / a2), i3 / (b3 / a3)] * b[k, j, i2, i3]`,
/// accumulated in f64. `a: [K, M, a2, a3]` is of any non-integer type (rows dequantized by
/// `read_row`), `b: [K, N, b2, b3]` F32 with any strides, `dst: [M, N, b2, b3]` F32.
pub fn mul_mat(n: &NodeTensors, scratch: &mut Scratch) -> Result<()> {
    let (a, b, dst) = (n.src(0)?, n.src(1)?, &n.dst);
    let [k, m, a2, a3] = a.ne;
    let [_, nn, b2, b3] = b.ne;
    if b.ne[0] != k || dst.ne != [m, nn, b2, b3] || a2 == 0 || a3 == 0 || b2 % a2 != 0 || b3 % a3 != 0 {
        return Err(Error::InvalidParam {
            op: "MUL_MAT",
            message: format!(
                "shapes a {:?}, b {:?}, dst {:?} do not form a product [K, M, a2, a3] x [K, N, b2, b3] -> [M, N, b2, b3]",
                a.ne, b.ne, dst.ne
            ),
        });
    }
    // How many consecutive matrices of `b` share one matrix of `a` (broadcast over dims 2, 3).
    let (r2, r3) = (b2 / a2, b3 / a3);

    // Scratch: the N rows of b (N * K), one row of a (K), the result plane (N * M).
    let (bs, rest) = scratch.take(nn * k + k + nn * m)?.split_at_mut(nn * k);
    let (arow, out) = rest.split_at_mut(k);
    for i3 in 0..b3 {
        for i2 in 0..b2 {
            for j in 0..nn {
                b.read_row(j, i2, i3, &mut bs[j * k..(j + 1) * k]);
            }
            for i in 0..m {
                a.read_row(i, i2 / r2, i3 / r3, arow);
                for j in 0..nn {
                    let brow = &bs[j * k..(j + 1) * k];
                    let dot: f64 = arow.iter().zip(brow).map(|(&x, &y)| f64::from(x) * f64::from(y)).sum();
                    out[j * m + i] = dot as f32;
                }
            }
            for j in 0..nn {
                dst.write_row(j, i2, i3, &out[j * m..(j + 1) * m]);
            }
        }
    }
    Ok(())
}
