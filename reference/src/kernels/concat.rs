//! CONCAT: two tensors joined along one dimension.

use alloc::format;

use tessera_core::{DType, Error, Result};

use super::{rows_of, NodeTensors, Scratch};
use crate::host_tensor::HostTensor;

/// `dst[i] = a[i]` where `i[dim] < a.ne[dim]`, else `b[i]` with `i[dim] -= a.ne[dim]`.
/// Both sources have the destination's type (float, or I32 copied exactly).
pub fn concat(n: &NodeTensors, scratch: &mut Scratch, dim: usize) -> Result<()> {
    let (a, b, dst) = (n.src(0)?, n.src(1)?, &n.dst);
    let fits = dim < 4
        && (0..4).all(|d| {
            if d == dim {
                a.ne[d].checked_add(b.ne[d]) == Some(dst.ne[d])
            } else {
                a.ne[d] == dst.ne[d] && b.ne[d] == dst.ne[d]
            }
        });
    if !fits {
        return Err(Error::InvalidParam {
            op: "CONCAT",
            message: format!("{:?} and {:?} do not join along dimension {dim} into {:?}", a.ne, b.ne, dst.ne),
        });
    }

    if a.dtype == DType::I32 && b.dtype == DType::I32 && dst.dtype == DType::I32 {
        for (i1, i2, i3) in rows_of(dst.ne) {
            for i0 in 0..dst.ne[0] {
                let (src, i) = pick(&a, &b, dim, [i0, i1, i2, i3]);
                dst.set_i32([i0, i1, i2, i3], src.get_i32(i));
            }
        }
        return Ok(());
    }

    let x = scratch.take(dst.ne[0])?;
    for (i1, i2, i3) in rows_of(dst.ne) {
        if dim == 0 {
            let (xa, xb) = x.split_at_mut(a.ne[0]);
            a.read_row(i1, i2, i3, xa);
            b.read_row(i1, i2, i3, xb);
        } else {
            let (src, [_, j1, j2, j3]) = pick(&a, &b, dim, [0, i1, i2, i3]);
            src.read_row(j1, j2, j3, x);
        }
        dst.write_row(i1, i2, i3, x);
    }
    Ok(())
}

/// The source holding destination index `i`, and the index within it (`dim < 4`).
fn pick<'a, 'g>(
    a: &'a HostTensor<'g>,
    b: &'a HostTensor<'g>,
    dim: usize,
    mut i: [usize; 4],
) -> (&'a HostTensor<'g>, [usize; 4]) {
    match i.get_mut(dim) {
        Some(id) if *id >= a.ne[dim] => {
            *id -= a.ne[dim];
            (b, i)
        }
        _ => (a, i),
    }
}
