//! FLASH_ATTN on the vectorised row kernels. A work item is one key head of one sequence: its
//! thread widens that head's keys (transposed) and values to f32 once, then attends every
//! query row of the query heads that share them (`attend`: scores, soft-max, weighted sum of
//! values, in f32). Each query row is computed by one thread in a fixed order, so results do not
//! depend on the thread count.

use tessera_core::{flash_attn_fits, soft_max_mask_row, DType, Result};
use tessera_reference::NodeTensors;

use super::parallel::{Team, WorkCounter};
use super::row_tensor::{f32_destination, threads_for_values, RowTensor};
use super::scratch::WorkMemory;
use super::simd::Kernels;

/// Key and value types widened here (the others take the reference kernel).
fn widened(dtype: DType) -> bool {
    matches!(dtype, DType::F32 | DType::F16 | DType::BF16)
}

/// FLASH_ATTN of node `n` (queries, keys, values, optional mask; see `Graph::flash_attn`).
/// `Ok(false)`: a layout or type the fast path does not take (the reference kernel then
/// computes it, or names what does not fit).
pub fn flash_attn(
    kernels: &Kernels,
    team: &mut Team,
    memory: &mut WorkMemory,
    n: &NodeTensors,
    scale: f32,
) -> Result<bool> {
    let (Some(q), Some(dst)) = (n.opt_src(0).and_then(|t| RowTensor::of(&t)), f32_destination(n)) else {
        return Ok(false);
    };
    let (Some(k), Some(v)) =
        (n.opt_src(1).and_then(|t| RowTensor::of(&t)), n.opt_src(2).and_then(|t| RowTensor::of(&t)))
    else {
        return Ok(false);
    };
    let mask = match n.opt_src(3) {
        None => None,
        Some(m) => match RowTensor::of(&m) {
            Some(m) if matches!(m.dtype, DType::F32 | DType::F16) => Some(m),
            _ => return Ok(false),
        },
    };
    let [d, nq, hq, b] = q.ne;
    let [_, kv, hk, bk] = k.ne;
    let dv = v.ne[0];
    let fits = matches!(q.dtype, DType::F32 | DType::F16)
        && widened(k.dtype)
        && widened(v.dtype)
        && flash_attn_fits(q.ne, k.ne, v.ne, dst.ne, mask.as_ref().map(|m| m.ne));
    if !fits {
        return Ok(false);
    }
    if dv == 0 || nq == 0 || hq == 0 || b == 0 {
        return Ok(true);
    }
    let group = hq / hk;
    let items = hk * b;
    // Per thread: the keys (transposed) and values in f32, the scores, an f32 mask row, one
    // key row and one query row.
    let floats = kv
        .checked_mul(d + dv + 2)
        .and_then(|f| f.checked_add(2 * d))
        .ok_or(tessera_core::Error::Overflow { what: "FLASH_ATTN work memory" })?;
    let work = [nq, hq, b, kv, d + dv].iter().fold(1usize, |w, &x| w.saturating_mul(x));
    let threads = threads_for_values(team.threads(), work).min(items);
    let regions = memory.reserve(0, floats * 4, threads)?;
    let next = WorkCounter::new();
    let (to_f32, attend) = (kernels.rows.to_f32, kernels.rows.attend);
    team.run(threads, &|w| {
        let base = regions.private(w.ith).cast::<f32>();
        // SAFETY: the private region holds `kv (d + dv + 2) + 2 d` f32, this thread's alone.
        let (keys, values, scores, mask_row, key_row, query_row) = unsafe {
            let rows = base.add(kv * (d + dv + 2));
            (base, base.add(kv * d), base.add(kv * (d + dv)), base.add(kv * (d + dv + 1)), rows, rows.add(d))
        };
        while let Some(item) = next.next(items) {
            let (kh, i3) = (item % hk, item / hk);
            let kb = i3 % bk;
            for p in 0..kv {
                // SAFETY: key and value row `p` of head `kh` of sequence `kb` (dense rows of
                // `d` and `dv` values of a widened type) into f32 rows of the scratch, the key
                // then into column `p` of the transposed keys.
                unsafe {
                    to_f32(k.dtype, d, k.row_ptr(p, kh, kb), key_row);
                    for i in 0..d {
                        *keys.add(i * kv + p) = *key_row.add(i);
                    }
                    to_f32(v.dtype, dv, v.row_ptr(p, kh, kb), values.add(p * dv));
                }
            }
            for h in kh * group..(kh + 1) * group {
                for i in 0..nq {
                    let m = match &mask {
                        None => core::ptr::null(),
                        Some(m) => {
                            let (j1, j2, j3) = soft_max_mask_row(m.ne, i, h, i3);
                            if m.dtype == DType::F32 {
                                m.row(j1, j2, j3).cast_const()
                            } else {
                                // SAFETY: an f16 mask row of `kv` values into the scratch.
                                unsafe { to_f32(m.dtype, kv, m.row_ptr(j1, j2, j3), mask_row) };
                                mask_row.cast_const()
                            }
                        }
                    };
                    let query = if q.dtype == DType::F32 {
                        q.row(i, h, i3).cast_const()
                    } else {
                        // SAFETY: an f16 query row of `d` values into the scratch.
                        unsafe { to_f32(q.dtype, d, q.row_ptr(i, h, i3), query_row) };
                        query_row.cast_const()
                    };
                    // SAFETY: query row `(i, h, i3)` of `d` values (or its widened copy), the
                    // widened rows, the mask row of `kv` values (or null), `kv` scores of the
                    // scratch and result row `(h, i, i3)` of `dv` values, which this item alone
                    // writes.
                    unsafe { attend((d, dv, kv), query, keys, values, m, scale, scores, dst.row(h, i, i3)) };
                }
            }
        }
    })?;
    Ok(true)
}
