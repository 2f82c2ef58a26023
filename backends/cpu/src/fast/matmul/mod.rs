//! MUL_MAT on the fast kernels: `dst = a x b` for F32, F16, BF16, Q8_0, Q4_0 and K-quant
//! weights `a` and f32 activations `b` of any strides, broadcast over dims 2 and 3.
//!
//! Three drivers, chosen by shape and type only (never by thread count or alignment, so a
//! node gives the same bits wherever and however often it runs):
//! - up to [`GEMV_MAX_N`] columns: [`gemv`], memory-bound matrix-vector products;
//! - float weights: [`gemm`], packed and cache-blocked around a register micro-kernel;
//! - quantized weights: [`qgemm`], int8 dot products on quantized activations (K-quants
//!   too, where the kernel set has int8 K-quant kernels);
//! - K-quant weights elsewhere: [`dequantized`], the float drivers on f32 copies of the
//!   weights.

mod dequantized;
mod gemm;
mod gemv;
mod operands;
mod qgemm;
#[cfg(test)]
mod tests;
mod tile;

use tessera_core::{DType, Error, Result};
use tessera_reference::NodeTensors;

use crate::fast::parallel::Team;
use crate::fast::scratch::WorkMemory;
use crate::fast::simd::{Cols, Kernels};
use operands::MatMul;

/// Widest product that takes the matrix-vector path.
pub const GEMV_MAX_N: usize = 8;

/// Weight rows of a GEMM work item with micro-panels of `mr` rows: about `target` rows,
/// rounded down to whole micro-panels.
fn rows_per_item(mr: usize, target: usize) -> usize {
    (target / mr).max(1) * mr
}

/// Multiply-adds below which a product runs on one thread (waking the others costs more).
const MIN_WORK_PER_THREAD: usize = 1 << 16;

/// Computes the MUL_MAT node `id`. `Ok(false)`: the layout is one the fast path does not take
/// (see [`MatMul::new`]); the caller runs the reference kernel.
pub fn mul_mat(kernels: &Kernels, team: &mut Team, memory: &mut WorkMemory, node: &NodeTensors) -> Result<bool> {
    let (Some(a), Some(b)) = (node.opt_src(0), node.opt_src(1)) else {
        return Err(Error::InvalidParam { op: "MUL_MAT", message: "MUL_MAT needs two sources".into() });
    };
    let dst = node.dst;
    let Some(mm) = MatMul::new(&a, &b, &dst)? else { return Ok(false) };
    if mm.m == 0 || mm.n == 0 || mm.batches() == 0 {
        return Ok(true);
    }
    if mm.k == 0 {
        // An empty sum: every output is zero.
        // SAFETY: the destination is contiguous: `m * n * batches` f32 values.
        unsafe { core::ptr::write_bytes(mm.out(0), 0, mm.m * mm.n * mm.batches()) };
        return Ok(true);
    }
    if matches!(mm.a_type, DType::Q4_K | DType::Q5_K | DType::Q6_K) {
        match (kernels.gemv.kquant, kernels.kquant) {
            (Some(k), _) if mm.n <= GEMV_MAX_N => gemv::run_kquant(k, team, memory, &mm)?,
            (_, Some(_)) if mm.n > GEMV_MAX_N => qgemm::run(kernels, team, memory, &mm)?,
            _ => return dequantized::run(kernels, team, memory, &mm),
        }
        return Ok(true);
    }
    if !mm.a_type.is_float() && !matches!(mm.a_type, DType::Q8_0 | DType::Q4_0) {
        return dequantized::run(kernels, team, memory, &mm);
    }
    let quantized = matches!(mm.a_type, DType::Q8_0 | DType::Q4_0);
    match (quantized, mm.n <= GEMV_MAX_N) {
        (false, true) => gemv::run_float(kernels, team, memory, &mm)?,
        (true, true) => gemv::run_quant(kernels, team, memory, &mm)?,
        (false, false) => gemm::run(kernels, team, memory, &mm)?,
        (true, false) => qgemm::run(kernels, team, memory, &mm)?,
    }
    Ok(true)
}

/// How many of the team's threads a product of `work` multiply-adds is worth.
fn threads_for(threads: usize, work: usize) -> usize {
    (work / MIN_WORK_PER_THREAD).clamp(1, threads)
}

/// The `k` values of a single activation column as a contiguous f32 slice: in place when the
/// activations are `dense`, else copied into `buf`.
///
/// # Safety
/// `col` must address a column of `k` f32 values; unless `dense`, `buf` must be valid for `k`
/// f32 writes.
unsafe fn gather_column(col: &Cols, k: usize, dense: bool, buf: *mut f32) -> *const f32 {
    if dense {
        return col.ptr.cast();
    }
    for kk in 0..k {
        // SAFETY: value `kk < k` of the column; slot `kk` of `buf`.
        unsafe { *buf.add(kk) = crate::fast::simd::scalar::pack::get_f32(col.ptr.add(kk * col.k_stride)) };
    }
    buf
}
