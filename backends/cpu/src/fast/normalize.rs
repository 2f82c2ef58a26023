//! NORM, RMS_NORM and SOFT_MAX on the vectorised row kernels, rows split over the threads.

use tessera_core::{soft_max_mask_fits, soft_max_mask_row, Result};
use tessera_reference::NodeTensors;

use super::parallel::Team;
use super::row_tensor::{f32_destination, f32_source, threads_for_values};
use super::simd::Kernels;

/// Which normalisation.
#[derive(Clone, Copy)]
pub enum Norm {
    Norm { eps: f32 },
    Rms { eps: f32 },
}

/// NORM or RMS_NORM of node `id`. `Ok(false)`: a layout the fast path does not take.
pub fn norm(kernels: &Kernels, team: &mut Team, n: &NodeTensors, which: Norm) -> Result<bool> {
    let (Some(a), Some(d)) = (f32_source(n, 0), f32_destination(n)) else { return Ok(false) };
    if a.ne != d.ne {
        return Ok(false);
    }
    let (n, rows) = (d.len(), d.rows());
    if n == 0 {
        return Ok(true);
    }
    let (kernel, eps) = match which {
        Norm::Norm { eps } => (kernels.rows.norm, eps),
        Norm::Rms { eps } => (kernels.rows.rms_norm, eps),
    };
    team.run(threads_for_values(team.threads(), rows * n), &|w| {
        for r in w.share(rows) {
            let (i1, i2, i3) = d.index(r);
            // SAFETY: rows of `n > 0` values; this thread alone writes row `r`.
            unsafe { kernel(n, a.row(i1, i2, i3), eps, d.row(i1, i2, i3)) };
        }
    })?;
    Ok(true)
}

/// SOFT_MAX of node `id`, with its optional mask (src 1, rows repeated over dimensions 1
/// to 3). `Ok(false)`: a layout the fast path does not take.
pub fn soft_max(kernels: &Kernels, team: &mut Team, n: &NodeTensors, scale: f32) -> Result<bool> {
    let (Some(a), Some(d)) = (f32_source(n, 0), f32_destination(n)) else { return Ok(false) };
    let has_mask = n.opt_src(1).is_some();
    let mask = if has_mask {
        match f32_source(n, 1) {
            Some(m) => Some(m),
            None => return Ok(false),
        }
    } else {
        None
    };
    let n = d.len();
    if let Some(m) = &mask {
        if !soft_max_mask_fits(m.ne, a.ne) {
            return Ok(false);
        }
    }
    if a.ne != d.ne {
        return Ok(false);
    }
    let rows = d.rows();
    let kernel = kernels.rows.soft_max;
    team.run(threads_for_values(team.threads(), rows * n), &|w| {
        for r in w.share(rows) {
            let (i1, i2, i3) = d.index(r);
            let m = mask.map_or(core::ptr::null(), |m| {
                let (j1, j2, j3) = soft_max_mask_row(m.ne, i1, i2, i3);
                m.row(j1, j2, j3).cast_const()
            });
            // SAFETY: rows of `n` values (the mask's too, or null); this thread alone
            // writes row `r`.
            unsafe { kernel(n, a.row(i1, i2, i3), m, scale, d.row(i1, i2, i3)) };
        }
    })?;
    Ok(true)
}
