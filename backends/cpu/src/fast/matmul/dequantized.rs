//! Weights the packing and int8 kernels do not read (the K-quants), over more columns than
//! the matrix-vector driver takes (which dequantizes as it goes): each weight matrix is
//! dequantized to f32 once per product, by the team, and the float GEMM computes with it. The
//! dequantized values are exactly the reference kernel's, so only the summation order differs
//! from it, as for float weights.

use tessera_core::{Error, Result};

use super::{gemm, gemv, threads_for, MatMul, GEMV_MAX_N};
use crate::fast::parallel::Team;
use crate::fast::scratch::WorkMemory;
use crate::fast::simd::Kernels;

/// Largest dequantized copy of the weights made; larger products run the reference kernel
/// rather than hold four bytes per weight.
pub const MAX_BYTES: usize = 256 << 20;

/// Computes `mm` through f32 copies of its weights. `Ok(false)`: the copy would be larger than
/// [`MAX_BYTES`].
pub fn run(kernels: &Kernels, team: &mut Team, memory: &mut WorkMemory, mm: &MatMul) -> Result<bool> {
    if mm.n <= GEMV_MAX_N {
        gemv::run_float(kernels, team, memory, mm)?;
        return Ok(true);
    }
    let (k, m, matrices) = (mm.k, mm.m, mm.weight_matrices());
    let rows = matrices.checked_mul(m).ok_or(Error::Overflow { what: "MUL_MAT weights" })?;
    let bytes = rows.checked_mul(k).and_then(|v| v.checked_mul(4));
    let Some(bytes) = bytes.filter(|&b| b <= MAX_BYTES) else { return Ok(false) };
    // Apart from `memory`, which the float driver reserves for itself.
    let mut copy = WorkMemory::default();
    let regions = copy.reserve(bytes, 0, 1)?;
    let (to_f32, dtype) = (kernels.rows.to_f32, mm.a_type);
    team.run(threads_for(team.threads(), rows * k), &|w| {
        let out = regions.shared().cast::<f32>();
        for r in w.share(rows) {
            // SAFETY: row `r % m` of weight matrix `r / m` holds `k` values of `dtype`; row `r`
            // of the copy (`k` f32 in a region of `rows * k`) is written by this thread alone.
            unsafe { to_f32(dtype, k, mm.weight_row(r / m, r % m), out.add(r * k)) };
        }
    })?;
    gemm::run(kernels, team, memory, &mm.with_f32_weights(regions.shared().cast_const()))?;
    Ok(true)
}
