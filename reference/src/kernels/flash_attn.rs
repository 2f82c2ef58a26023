//! FLASH_ATTN: attention of each query row over all keys, without a score matrix in memory.

use alloc::format;
use alloc::vec::Vec;

use tessera_core::{flash_attn_fits, soft_max_mask_row, Error, Result};

use super::{rows_of, NodeTensors, Scratch};

fn invalid(message: alloc::string::String) -> Error {
    Error::InvalidParam { op: "FLASH_ATTN", message }
}

/// `dst[:, h, i, i3] = sum_p softmax_p(scale * q[:, i, h, i3] . k[:, p, h / g, i3 % bk]
/// + mask[p, ...]) v[:, p, h / g, i3 % bk]` with `g = hq / hk` (see `Graph::flash_attn`).
/// Dot products, the soft-max and the weighted sum of values are computed in f64; a query
/// whose scores are all `-inf` gets zeros.
pub fn flash_attn(n: &NodeTensors, scratch: &mut Scratch, scale: f32) -> Result<()> {
    let (q, k, v, mask, dst) = (n.src(0)?, n.src(1)?, n.src(2)?, n.opt_src(3), &n.dst);
    let [d, nq, hq, b] = q.ne;
    let [_, kv, hk, bk] = k.ne;
    let dv = v.ne[0];
    let fits = flash_attn_fits(q.ne, k.ne, v.ne, dst.ne, mask.as_ref().map(|m| m.ne));
    if !fits {
        let m = mask.map(|m| m.ne);
        return Err(invalid(format!(
            "queries {:?}, keys {:?}, values {:?}, mask {m:?} and destination {:?} do not fit",
            q.ne, k.ne, v.ne, dst.ne
        )));
    }
    let group = hq / hk;
    let too_big = || Error::OutOfMemory { what: "FLASH_ATTN accumulators".into(), requested: (kv + dv) * 8 };
    let mut acc: Vec<f64> = Vec::new();
    acc.try_reserve_exact(dv + kv).map_err(|_| too_big())?;
    acc.resize(dv + kv, 0.0);
    let (out, scores) = acc.split_at_mut(dv);
    let rows = scratch.take(d + d.max(dv).max(kv) + dv)?;
    let (qrow, rest) = rows.split_at_mut(d);
    let (row, result) = rest.split_at_mut(d.max(dv).max(kv));
    for (i, h, i3) in rows_of([d, nq, hq, b]) {
        let (kh, kb) = (h / group, i3 % bk);
        q.read_row(i, h, i3, qrow);
        for (p, s) in scores.iter_mut().enumerate() {
            k.read_row(p, kh, kb, row);
            let dot: f64 = qrow.iter().zip(&row[..d]).map(|(&a, &b)| f64::from(a) * f64::from(b)).sum();
            *s = dot * f64::from(scale);
        }
        if let Some(m) = &mask {
            let (j1, j2, j3) = soft_max_mask_row(m.ne, i, h, i3);
            m.read_row(j1, j2, j3, row);
            scores.iter_mut().zip(&row[..kv]).for_each(|(s, &w)| *s += f64::from(w));
        }
        let max = scores.iter().fold(f64::NEG_INFINITY, |m, &s| if s > m || s.is_nan() { s } else { m });
        out.fill(0.0);
        if max != f64::NEG_INFINITY {
            let mut sum = 0.0;
            for (p, &s) in scores.iter().enumerate() {
                let w = libm::exp(s - max);
                sum += w;
                v.read_row(p, kh, kb, row);
                out.iter_mut().zip(&row[..dv]).for_each(|(o, &x)| *o += w * f64::from(x));
            }
            out.iter_mut().for_each(|o| *o /= sum);
        }
        result.iter_mut().zip(out.iter()).for_each(|(r, &o)| *r = o as f32);
        dst.write_row(h, i, i3, result);
    }
    Ok(())
}
