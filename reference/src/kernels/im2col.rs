//! IM2COL: unfolding convolution patches into rows.

use alloc::format;

use tessera_core::{Error, Im2ColParams, Result};

use super::{NodeTensors, Scratch};

/// 2-D, input `[IW, IH, IC, N]`, kernel `[KW, KH, IC, OC]`, dst `[IC*KH*KW, OW, OH, N]`:
/// `dst[(ic*KH + kh)*KW + kw, ow, oh, n] = input[ow*s0 + kw*d0 - p0, oh*s1 + kh*d1 - p1, ic, n]`,
/// or 0 where that index falls outside the input.
///
/// 1-D, input `[IW, IC, N]`, kernel `[KW, IC, OC]`, dst `[IC*KW, OW, N, 1]`:
/// `dst[ic*KW + kw, ow, n] = input[ow*s0 + kw*d0 - p0, ic, n]`, or 0 outside the input.
///
/// Only the kernel's shape is used, never its values.
pub fn im2col(n: &NodeTensors, scratch: &mut Scratch, p: Im2ColParams) -> Result<()> {
    let (kernel, input, dst) = (n.src(0)?, n.src(1)?, &n.dst);
    // The 1-D case is the 2-D one with a kernel and input of height 1 (no stride, dilation
    // or padding along the height); `nb` is the batch count.
    let (kw_n, kh_n, iw, ih, ic_n, nb, oh_n) = if p.is_2d {
        (kernel.ne[0], kernel.ne[1], input.ne[0], input.ne[1], input.ne[2], input.ne[3], dst.ne[2])
    } else {
        (kernel.ne[0], 1, input.ne[0], 1, input.ne[1], input.ne[2], 1)
    };
    let (s1, d1, p1) = if p.is_2d { (p.s1, p.d1, p.p1) } else { (1, 1, 0) };
    let ow_n = dst.ne[1];
    let expected = if p.is_2d { [ic_n * kh_n * kw_n, ow_n, oh_n, nb] } else { [ic_n * kw_n, ow_n, nb, 1] };
    if dst.ne != expected || input.dtype.is_quantized() {
        return Err(Error::InvalidParam {
            op: "IM2COL",
            message: format!(
                "result {:?} does not fit input {:?} ({}) and kernel {:?}: expected {:?} from a float input",
                dst.ne, input.ne, input.dtype, kernel.ne, expected
            ),
        });
    }
    // Input coordinate of output position `o` and kernel tap `k`, if inside `0..size`.
    let coord = |o: usize, s: usize, k: usize, d: usize, pad: usize, size: usize| -> Option<usize> {
        (o * s + k * d).checked_sub(pad).filter(|&x| x < size)
    };

    // Scratch: the input rows one output row `oh` reads, row `ic*KH + kh` holding input row
    // `(oh*s1 + kh*d1 - p1, ic, n)` (IC * KH * IW values), then one result row.
    let rows_len = ic_n * kh_n * iw;
    let (rows, out) = scratch.take(rows_len + dst.ne[0])?.split_at_mut(rows_len);
    for n_i in 0..nb {
        for oh in 0..oh_n {
            for ic in 0..ic_n {
                for kh in 0..kh_n {
                    if let Some(iy) = coord(oh, s1, kh, d1, p1, ih) {
                        let at = (ic * kh_n + kh) * iw;
                        let row = &mut rows[at..at + iw];
                        if p.is_2d {
                            input.read_row(iy, ic, n_i, row);
                        } else {
                            input.read_row(ic, n_i, 0, row);
                        }
                    }
                }
            }
            for ow in 0..ow_n {
                for ic in 0..ic_n {
                    for kh in 0..kh_n {
                        let iy = coord(oh, s1, kh, d1, p1, ih);
                        for kw in 0..kw_n {
                            let ix = coord(ow, p.s0, kw, p.d0, p.p0, iw);
                            out[(ic * kh_n + kh) * kw_n + kw] = match (ix, iy) {
                                (Some(ix), Some(_)) => rows[(ic * kh_n + kh) * iw + ix],
                                _ => 0.0,
                            };
                        }
                    }
                }
                if p.is_2d {
                    dst.write_row(ow, oh, n_i, out);
                } else {
                    dst.write_row(ow, n_i, 0, out);
                }
            }
        }
    }
    Ok(())
}
