//! POOL_2D: max and average pooling over 2-D windows.

use alloc::format;

use tessera_core::{Error, Pool2dParams, PoolKind, Result};

use super::{rows_of, NodeTensors, Scratch};

/// `src: [IW, IH, C, N]` float, `dst: [OW, OH, C, N]` F32. The window of output `(ow, oh)`
/// covers `ix = ow*s0 + kx - p0` (`kx < k0`), `iy = oh*s1 + ky - p1` (`ky < k1`); positions
/// outside the input are skipped.
/// Max: the largest in-bounds value (`-f32::MAX` if none). Avg: the sum of the in-bounds
/// values (in f64) divided by `k0 * k1` (padding counts as zeros).
pub fn pool_2d(n: &NodeTensors, scratch: &mut Scratch, p: Pool2dParams) -> Result<()> {
    let (src, dst) = (n.src(0)?, &n.dst);
    let [iw, ih, c, nb] = src.ne;
    let ow_n = dst.ne[0];
    if dst.ne[2] != c || dst.ne[3] != nb {
        return Err(Error::InvalidParam {
            op: "POOL_2D",
            message: format!("result {:?} does not fit input {:?}: expected [OW, OH, {c}, {nb}]", dst.ne, src.ne),
        });
    }
    // Input coordinate of output position `o` and window tap `k`, if inside `0..size`.
    let coord = |o: usize, s: usize, k: usize, pad: usize, size: usize| -> Option<usize> {
        (o * s + k).checked_sub(pad).filter(|&x| x < size)
    };

    // Scratch: the k1 input rows of one output row (row `ky` holds input row `iy(ky)`), then
    // one result row.
    let rows_len = p.k1 * iw;
    let (rows, out) = scratch.take(rows_len + ow_n)?.split_at_mut(rows_len);
    for (oh, ci, ni) in rows_of(dst.ne) {
        for ky in 0..p.k1 {
            if let Some(iy) = coord(oh, p.s1, ky, p.p1, ih) {
                src.read_row(iy, ci, ni, &mut rows[ky * iw..(ky + 1) * iw]);
            }
        }
        for (ow, o) in out.iter_mut().enumerate() {
            let mut max = -f32::MAX;
            let mut sum = 0.0f64;
            for ky in 0..p.k1 {
                if coord(oh, p.s1, ky, p.p1, ih).is_none() {
                    continue;
                }
                for kx in 0..p.k0 {
                    if let Some(ix) = coord(ow, p.s0, kx, p.p0, iw) {
                        let v = rows[ky * iw + ix];
                        max = max.max(v);
                        sum += f64::from(v);
                    }
                }
            }
            *o = match p.kind {
                PoolKind::Max => max,
                PoolKind::Avg => (sum / (p.k0 * p.k1) as f64) as f32,
            };
        }
        dst.write_row(oh, ci, ni, out);
    }
    Ok(())
}
