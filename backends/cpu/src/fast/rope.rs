//! ROPE on the vectorised row kernels. The angles depend on the position and the pair only,
//! so each thread computes the cosines and sines of one position once (the angles with the
//! reference kernel's formula, their sines and cosines with the vectorised `sin_cos`) and
//! applies them to every head: work items are positions.

use tessera_core::{DType, Result, RopeMode, RopeParams};
use tessera_reference::NodeTensors;

use super::parallel::{Team, WorkCounter};
use super::row_tensor::{f32_destination, f32_source, threads_for_values};
use super::scratch::WorkMemory;
use super::simd::Kernels;

/// The I32 positions, one per index of dimension 2.
#[derive(Clone, Copy)]
struct Positions {
    ptr: *const u8,
    stride: usize,
}

// SAFETY: read-only addresses into a tensor bound for the whole compute of the node.
unsafe impl Sync for Positions {}

impl Positions {
    /// Position `i` (below the tensor's length).
    fn get(&self, i: usize) -> f32 {
        let mut b = [0u8; 4];
        // SAFETY: value `i` of the positions, 4 bytes.
        unsafe { core::ptr::copy_nonoverlapping(self.ptr.add(i * self.stride), b.as_mut_ptr(), 4) };
        i32::from_le_bytes(b) as f32
    }
}

/// ROPE of node `id`. `Ok(false)`: a layout the fast path does not take.
pub fn rope(
    kernels: &Kernels,
    team: &mut Team,
    memory: &mut WorkMemory,
    node: &NodeTensors,
    p: RopeParams,
) -> Result<bool> {
    let (Some(a), Some(d)) = (f32_source(node, 0), f32_destination(node)) else { return Ok(false) };
    let Some(pos) = node.opt_src(1) else { return Ok(false) };
    let (n, n_dims) = (d.len(), p.n_dims);
    let valid = a.ne == d.ne
        && pos.dtype == DType::I32
        && pos.ne == [a.ne[2], 1, 1, 1]
        && n_dims != 0
        && n_dims % 2 == 0
        && n_dims <= n;
    if !valid {
        return Ok(false);
    }
    let positions = Positions { ptr: pos.ptr(), stride: pos.nb[0] };
    let half = n_dims / 2;
    let threads = threads_for_values(team.threads(), d.rows() * n);
    // Per thread: the table (cos, then sin, `n_dims` each), `freq_base^(-2k / n_dims)`, and
    // the angles' sines and cosines (`half` each).
    let regions = memory.reserve(0, (2 * n_dims + 3 * half) * 4, threads)?;
    let items = a.ne[2] * a.ne[3];
    let next = WorkCounter::new();
    let kernel = kernels.rows.rope;
    team.run(threads, &|w| {
        let table = regions.private(w.ith).cast::<f32>();
        // SAFETY: the private region holds `2 n_dims + 3 half` f32, this thread's alone.
        let (table, powers, sines) = unsafe {
            (
                core::slice::from_raw_parts_mut(table, 2 * n_dims),
                core::slice::from_raw_parts_mut(table.add(2 * n_dims), half),
                core::slice::from_raw_parts_mut(table.add(2 * n_dims + half), 2 * half),
            )
        };
        for (k, power) in powers.iter_mut().enumerate() {
            *power = libm::powf(p.freq_base, -((2 * k) as f32) / n_dims as f32);
        }
        while let Some(item) = next.next(items) {
            let (i2, i3) = (item % a.ne[2], item / a.ne[2]);
            let position = positions.get(i2);
            let (sin, cos) = sines.split_at_mut(half);
            let scaled = p.freq_scale * position;
            for (theta, &power) in sin.iter_mut().zip(powers.iter()) {
                *theta = scaled * power;
            }
            // SAFETY: `half` angles in `sin`, overwritten by their sines; `half` cosines.
            unsafe { (kernels.rows.sin_cos)(half, sin.as_ptr(), sin.as_mut_ptr(), cos.as_mut_ptr()) };
            fill_table(p.mode, sin, cos, table);
            for i1 in 0..a.ne[1] {
                // SAFETY: rows of `n` values and a table of `2 n_dims`; this item alone
                // writes the rows of position `(i2, i3)`.
                unsafe { kernel(p.mode, n, n_dims, a.row(i1, i2, i3), table.as_ptr(), d.row(i1, i2, i3)) };
            }
        }
    })?;
    Ok(true)
}

/// The cosines and signed sines of the angles of one position, laid out so that value `i` of
/// a row is rotated as `x[i] cos[i] + x[partner(i)] sin[i]` (see the ROPE row kernel).
fn fill_table(mode: RopeMode, sines: &[f32], cosines: &[f32], table: &mut [f32]) {
    let n_dims = table.len() / 2;
    let half = n_dims / 2;
    let (cos, sin) = table.split_at_mut(n_dims);
    for (k, (&s, &c)) in sines.iter().zip(cosines).enumerate() {
        let (first, second) = match mode {
            RopeMode::Normal => (2 * k, 2 * k + 1),
            RopeMode::Neox => (k, k + half),
        };
        (cos[first], sin[first]) = (c, -s);
        (cos[second], sin[second]) = (c, s);
    }
}
