//! SET_ROWS: rows written into a tensor at positions given by I32 indices.

use alloc::format;

use tessera_core::{DType, Error, Result};

use super::{rows_of, NodeTensors, Scratch};

/// `dst[:, c[j, i2, i3], i2, i3] = b[:, j, i2, i3]` for F32 values `b: [n, m, d2, d3]` (src 0),
/// I32 indices `c: [m, d2, d3, 1]` (src 1) and `dst: [n, r, d2, d3]` (src 2's memory, already
/// resolved into `n.dst`), converting to `dst`'s type. Rows not named are left as they are; an
/// index outside `0..r` is an error.
pub fn set_rows(n: &NodeTensors, scratch: &mut Scratch) -> Result<()> {
    let (b, c, dst) = (n.src(0)?, n.src(1)?, &n.dst);
    let [n0, m, d2, d3] = b.ne;
    let r = dst.ne[1];
    if c.dtype != DType::I32 || c.ne != [m, d2, d3, 1] || dst.ne[0] != n0 || dst.ne[2] != d2 || dst.ne[3] != d3 {
        return Err(Error::InvalidParam {
            op: "SET_ROWS",
            message: format!(
                "values {:?}, indices {:?} ({}) and destination {:?} do not fit: expected [n, m, d2, d3], i32 [m, d2, d3] and [n, r, d2, d3]",
                b.ne, c.ne, c.dtype, dst.ne
            ),
        });
    }
    let x = scratch.take(n0)?;
    for (j, i2, i3) in rows_of(b.ne) {
        let idx = c.get_i32([j, i2, i3, 0]);
        let row = usize::try_from(idx).ok().filter(|&i| i < r).ok_or_else(|| Error::InvalidParam {
            op: "SET_ROWS",
            message: format!("row index {idx} at [{j}, {i2}, {i3}] is outside the valid range 0..{r}"),
        })?;
        b.read_row(j, i2, i3, x);
        dst.write_row(row, i2, i3, x);
    }
    Ok(())
}
