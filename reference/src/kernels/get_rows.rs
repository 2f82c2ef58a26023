//! GET_ROWS: rows of a tensor picked by I32 indices.

use alloc::format;

use tessera_core::{DType, Error, Result};

use super::{rows_of, NodeTensors, Scratch};

/// `dst[:, j, i2, i3] = a[:, b[j, i2, i3], i2, i3]` for `a: [n, r, d2, d3]` of any type and
/// I32 indices `b: [m, d2, d3, 1]`; `dst: [n, m, d2, d3]` is F32 (rows dequantized), or I32
/// copied exactly when `a` is I32. An index outside `0..r` is an error.
pub fn get_rows(n: &NodeTensors, scratch: &mut Scratch) -> Result<()> {
    let (a, b, dst) = (n.src(0)?, n.src(1)?, &n.dst);
    let [n0, r, d2, d3] = a.ne;
    if b.dtype != DType::I32 || b.ne[1] != d2 || b.ne[2] != d3 || b.ne[3] != 1 || dst.ne != [n0, b.ne[0], d2, d3] {
        return Err(Error::InvalidParam {
            op: "GET_ROWS",
            message: format!(
                "indices {:?} ({}) and result {:?} do not fit rows of {:?}: expected i32 [m, {d2}, {d3}, 1] and [{n0}, m, {d2}, {d3}]",
                b.ne, b.dtype, dst.ne, a.ne
            ),
        });
    }
    let exact = a.dtype == DType::I32 && dst.dtype == DType::I32;
    let x = scratch.take(n0)?;
    for (j, i2, i3) in rows_of(dst.ne) {
        let idx = b.get_i32([j, i2, i3, 0]);
        let row = usize::try_from(idx).ok().filter(|&i| i < r).ok_or_else(|| Error::InvalidParam {
            op: "GET_ROWS",
            message: format!("row index {idx} at [{j}, {i2}, {i3}] is outside the valid range 0..{r}"),
        })?;
        if exact {
            for i0 in 0..n0 {
                dst.set_i32([i0, j, i2, i3], a.get_i32([i0, row, i2, i3]));
            }
        } else {
            a.read_row(row, i2, i3, x);
            dst.write_row(j, i2, i3, x);
        }
    }
    Ok(())
}
