//! CPY and CONT: copying values in row-major order, converting the type.

use alloc::format;

use tessera_core::{DType, Error, Result};

use super::{rows_of, NodeTensors, Scratch};

/// `flat(dst)[i] = flat(src0)[i]`, where `flat` lists a tensor's values in row-major order;
/// the shapes may differ (only the value counts must match) and either side may be strided.
/// Values are converted (and quantized) to the destination type; I32 to I32 is exact.
///
/// For CPY the destination is src 1's memory (already resolved into `n.dst`); src 1 itself is
/// not read.
pub fn copy(n: &NodeTensors, scratch: &mut Scratch) -> Result<()> {
    let (src, dst) = (n.src(0)?, &n.dst);
    if src.nelements() != dst.nelements() {
        return Err(Error::InvalidParam {
            op: "CPY",
            message: format!(
                "the source {:?} has {} values but the destination {:?} has {}",
                src.ne,
                src.nelements(),
                dst.ne,
                dst.nelements()
            ),
        });
    }

    if src.dtype == DType::I32 && dst.dtype == DType::I32 {
        for flat in 0..dst.nelements() {
            dst.set_i32(dst.unflatten(flat), src.get_i32(src.unflatten(flat)));
        }
        return Ok(());
    }

    if src.ne == dst.ne {
        let x = scratch.take(src.ne[0])?;
        for (i1, i2, i3) in rows_of(src.ne) {
            src.read_row(i1, i2, i3, x);
            dst.write_row(i1, i2, i3, x);
        }
        return Ok(());
    }

    // Different shapes: fill each destination row from the source values in flat order,
    // reading the next source row whenever the current one is used up.
    let (s0, d0) = (src.ne[0], dst.ne[0]);
    let (x, y) = scratch.take(s0 + d0)?.split_at_mut(s0);
    let mut src_rows = rows_of(src.ne);
    let mut at = s0; // position in `x`; `s0` means the current source row is used up
    for (i1, i2, i3) in rows_of(dst.ne) {
        for v in y.iter_mut() {
            if at == s0 {
                // Value counts are equal, so a source row remains while a value is wanted.
                let (j1, j2, j3) = src_rows
                    .next()
                    .ok_or(Error::InvalidParam { op: "CPY", message: "the source ran out of values".into() })?;
                src.read_row(j1, j2, j3, x);
                at = 0;
            }
            *v = x[at];
            at += 1;
        }
        dst.write_row(i1, i2, i3, y);
    }
    Ok(())
}
