//! MUL_MAT: `dst[i, j, i2, i3] = sum_k a[k, i, i2 / r2, i3 / r3] * b[k, j, i2, i3]`.
//!
//! In cuBLAS's column-major terms, `a` holds `M` columns of `K` values (`lda` = its row stride),
//! `b` holds `N` columns of `K` values and `dst` `N` columns of `M` values, so each matrix of
//! the result is `dst = a^T b` (`CUBLAS_OP_T`, `CUBLAS_OP_N`), accumulated in f32.
//!
//! The plan, chosen from shapes and strides alone ([`plan`]):
//! - `K = 0`: the result is zeros;
//! - `N <= 8`: a matrix-vector kernel (mul_mat_vec.cu, mul_mat_vec_kquant.cu, and for several
//!   columns of q8_0, q4_0, f16 and bf16 the tensor-core mul_mat_vec_mma.cu) that reads the weights once
//!   for all columns: quantized weights with `b` quantized to Q8_1 blocks in scratch first (any
//!   strides; q4_K and q5_K rows must start on 16-byte boundaries; one column of q8_0 rows on
//!   16-byte boundaries, 7936 values and longer, reads them 16 bytes at a time, `b` quantized
//!   into their byte layout: [`q8_0_pieces`]), float
//!   weights with `b` read in place when both operands' rows start on 16-byte boundaries and are
//!   packed;
//! - otherwise a GEMM of type f32 (f32 weights), bf16 (bf16 weights) or f16 (f16 and quantized
//!   weights) with f32 output: an operand that is not of that type or whose columns are not
//!   packed (`nb[0]`) is first converted into packed scratch (quantized weights, and f32 `b`
//!   with rows on 16-byte boundaries, by the packing kernels of mul_mat.cu, 16 bytes a thread;
//!   everything else by the CPY kernels); then one GEMM
//!   (a single matrix, or every matrix of `b` and `dst` folded into the columns of one product
//!   when `a` is a single matrix), one strided-batched GEMM (uniform batch strides, no
//!   broadcast), or a pointer-array batched GEMM whose pointers a kernel computes in scratch.
//!   Large f32 products that are one GEMM run split into TF32 parts and remainders, near f32
//!   accuracy and faster ([`split_gemm`](super::split_gemm), [`F32Products`]).

use std::ffi::{c_int, c_longlong, c_void};
use std::sync::Arc;

use cudarc::cublas::sys::{self as cublas_sys, cublasComputeType_t, cublasGemmAlgo_t, cublasOperation_t, cudaDataType};
use cudarc::driver::CudaStream;
use tessera_core::{DType, Op, Result};

use super::arg::TensorArg;
use super::gemm_lt::LtGemm;
use super::launch::{copy, div_ceil, elementwise_config, launch_kernel, rows_16_byte_aligned};
use super::scratch::{f32_products, BLayout, F32Products};
use super::split_gemm::{self, SplitProduct};
use super::validate::{validate, Node};
use super::{backend_error, names, Kernels, Operand, Scratch};

/// Largest `N` the matrix-vector kernels take.
pub(crate) const MMV_MAX_COLS: i64 = 8;
/// Warps per block of the matrix-vector kernels (`MMV_WARPS` in mul_mat_vec.cu).
const MMV_WARPS: i64 = 4;
/// Threads of a matrix-vector block.
pub(crate) const MMV_BLOCK: (u32, u32, u32) = (32 * MMV_WARPS as u32, 1, 1);
/// Bytes of one Q8_1 block of quantized `b` (`Q8_1` in mul_mat_vec.cu).
pub(crate) const Q8_1_BYTES: usize = 40;
/// Bytes of one block of all 8 columns of `b` quantized for the tensor-core kernels (`MmaB` in
/// mul_mat_vec_mma.cu).
const MMA_B_BYTES: usize = 320;
/// Weight rows one block of the tensor-core matrix-vector kernels computes (`MMA_ROWS` in
/// mul_mat_vec_mma.cu), its threads (`MMA_WARPS` warps), and the weight blocks each warp
/// copies from a row at a time (`MMA_RUN`): K must be a multiple of 32 times that.
const MMA_ROWS: i64 = 16;
const MMA_BLOCK: (u32, u32, u32) = (32 * 8, 1, 1);
const MMA_RUN: i64 = 8;
/// Values of K each warp of the 16-bit tensor-core matrix-vector kernels copies from a row at a
/// time (`MMA_16BIT_RUN`): K must be a multiple of it.
const MMA_16BIT_RUN: i64 = 128;
/// Bytes of one step of 16 values of K of all 8 columns of `b` in the 16-bit kernels' B
/// fragments (`convert_b_mma` in mul_mat_vec_mma.cu).
const MMA_16BIT_STEP_BYTES: usize = 256;

/// Weight rows one block of the matrix-vector kernels computes (`MmvRows` in mul_mat_vec.cu).
pub(crate) fn mmv_rows(ncols: i64) -> i64 {
    match ncols {
        ..=1 => 4,
        2 => 2,
        3..=4 => 4,
        _ => 8,
    }
}

/// Scratch regions start at multiples of this.
const ALIGN: usize = 256;

/// How the matrices of the batch are multiplied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Batch {
    /// One matrix.
    Single,
    /// `a` is one matrix and the columns of every matrix of `b` (and `dst`) are evenly spaced:
    /// one product with `N * b2 * b3` columns of stride `ldb` (`ldc`).
    Folded { ldb: i64, ldc: i64 },
    /// Uniform batch strides (in values) and no broadcast.
    Strided { stride_a: i64, stride_b: i64, stride_c: i64 },
    /// Pointer arrays computed on the device.
    Pointers,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Path {
    /// `K = 0`: zeros.
    Fill,
    /// A matrix-vector kernel; `b` first quantized into scratch for quantized weights.
    MatVec { quantize_b: bool },
    /// The tensor-core matrix-vector kernel (q8_0 weights with 2 to 8 columns, q4_0 with 5 to
    /// 8, K a multiple of 256; f16 and bf16 with 4 to 8, K a multiple of 128; rows on 16-byte
    /// boundaries); `b` first quantized (or rounded to the weights' type) into scratch.
    MatVecMma,
    /// cuBLAS in `gemm` type, after converting `a` and/or `b` into scratch.
    Gemm { gemm: DType, convert_a: bool, convert_b: bool, batch: Batch },
    /// An f32 product split into TF32 parts and remainders ([`split_gemm`](super::split_gemm)):
    /// one matrix, or b's matrices folded into its columns, `dst`'s columns `folded_ldc` values
    /// apart.
    Split { folded_ldc: Option<i64> },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    pub path: Path,
    /// Scratch offsets of the converted `a`, the converted `b` and the pointer arrays.
    pub a_offset: usize,
    pub b_offset: usize,
    pub ptr_offset: usize,
    pub scratch_bytes: usize,
}

/// The column stride (in values of `es` bytes) of `t` seen as one matrix whose columns are all
/// of its dimensions 1, 2 and 3 in order, if they are evenly spaced, at least `rows` apart and
/// within 32 bits.
fn fold_stride(t: &TensorArg, es: i64, rows: i64, from: usize) -> Option<i64> {
    let mut stride: Option<i64> = None;
    let mut count = 1i64;
    for d in from..4 {
        if t.ne[d] > 1 {
            match stride {
                None => stride = Some(t.nb[d]),
                Some(s) if t.nb[d] == s.checked_mul(count)? => {}
                Some(_) => return None,
            }
            count = count.checked_mul(t.ne[d])?;
        }
    }
    let ld = match stride {
        None => rows.max(1),
        Some(bytes) if bytes % es == 0 => bytes / es,
        Some(_) => return None,
    };
    (ld >= rows && ld <= i64::from(i32::MAX)).then_some(ld)
}

/// The leading dimension of the matrices of `t` (columns along dimension 1, `rows` values each,
/// packed along dimension 0) in values of `es` bytes, if cuBLAS can take it.
fn leading_dim(t: &TensorArg, es: i64, rows: i64) -> Option<i64> {
    if t.ne[0] > 1 && t.nb[0] != es {
        return None;
    }
    if t.ne[1] <= 1 {
        return Some(rows.max(1));
    }
    let ld = t.nb[1] / es;
    (t.nb[1] % es == 0 && ld >= rows && ld <= i64::from(i32::MAX)).then_some(ld)
}

/// The batch stride (in values of `es` bytes) of `t`'s matrices over dimensions 2 and 3 taken
/// as one index `i2 + ne2 * i3`, if uniform.
fn batch_stride(t: &TensorArg, es: i64) -> Option<i64> {
    let mut stride: Option<i64> = None;
    let mut count = 1i64;
    for d in 2..4 {
        if t.ne[d] > 1 {
            match stride {
                None => stride = Some(t.nb[d]),
                Some(s) if t.nb[d] == s.checked_mul(count)? => {}
                Some(_) => return None,
            }
            count = count.checked_mul(t.ne[d])?;
        }
    }
    match stride {
        None => Some(0),
        Some(bytes) if bytes % es == 0 => Some(bytes / es),
        Some(_) => None,
    }
}

fn packed(dtype: DType, ne: [i64; 4]) -> Result<TensorArg> {
    TensorArg::contiguous(0, dtype, ne)
}

fn bytes_of(t: &TensorArg, dtype: DType) -> usize {
    let n = usize::try_from(t.nelements()).unwrap_or(usize::MAX);
    (n / dtype.block_len()).saturating_mul(dtype.block_bytes())
}

pub(super) fn align(n: usize) -> usize {
    n.checked_next_multiple_of(ALIGN).unwrap_or(usize::MAX)
}

/// The plan for a validated MUL_MAT of `a` and `b` into `dst`.
pub(crate) fn plan(a: Operand, b: Operand, dst: Operand) -> Plan {
    plan_for(a, b, dst, f32_products())
}

/// [`plan`] with f32 products made as `mode` says.
fn plan_for(a: Operand, b: Operand, dst: Operand, mode: F32Products) -> Plan {
    let ((a, at), (b, bt), (dst, dt)) = (a, b, dst);
    // The result's values: f32, or f16 where a CPY to f16 is fused in.
    let ds = dt.block_bytes() as i64;
    let [k, m, a2, a3] = a.ne;
    let [_, n, b2, b3] = b.ne;
    let none = |path| Plan { path, a_offset: 0, b_offset: 0, ptr_offset: 0, scratch_bytes: 0 };
    if k == 0 {
        return none(Path::Fill);
    }
    if n <= MMV_MAX_COLS {
        // q4_K and q5_K blocks are read 16 bytes at a time.
        let vec_loads = !matches!(at, DType::Q4_K | DType::Q5_K) || rows_16_byte_aligned(&a, at.block_bytes() as i64);
        // From how many columns the tensor-core kernels are the faster (an H100, 4096 x 14336:
        // q8_0 31.7 against 32.3 us at 2 columns, 32.2 against 44.5 at 8; q4_0 23.0 against
        // 21.7 us at 4, 23.3 against 30.4 at 8). They run at a quarter of the SM's warps (a
        // warp per 16 rows and 8 blocks of K), so their time hardly grows with the columns.
        let mma_from = match at {
            DType::Q8_0 => 2,
            // f16 and bf16 on an H200, 4096 x 14336: 33.5 against 34.6 us at 2 columns, 36.5
            // against 34.7 at 4, 42.9 against 34.6 at 8 (bf16 48.1 against 34.6).
            DType::F16 | DType::BF16 => 4,
            _ => 5,
        };
        let aligned = rows_16_byte_aligned(&a, at.block_bytes() as i64);
        let mma = names::mul_mat_vec_mma(at).is_some()
            && n >= mma_from
            && if at.is_quantized() { k % (32 * MMA_RUN) == 0 } else { k % MMA_16BIT_RUN == 0 }
            && aligned;
        if mma {
            let bytes = if at.is_quantized() {
                usize::try_from(k / 32 * b2 * b3).unwrap_or(usize::MAX).saturating_mul(MMA_B_BYTES)
            } else {
                usize::try_from(k / 16 * b2 * b3).unwrap_or(usize::MAX).saturating_mul(MMA_16BIT_STEP_BYTES)
            };
            return Plan { scratch_bytes: bytes, ..none(Path::MatVecMma) };
        }
        if at.is_quantized() && vec_loads {
            let blocks = usize::try_from(b.nelements() / 32).unwrap_or(usize::MAX);
            return Plan {
                scratch_bytes: blocks.saturating_mul(Q8_1_BYTES),
                ..none(Path::MatVec { quantize_b: true })
            };
        }
        // The one-column float kernel counts a row's 16-byte vectors in 32 bits.
        let vectors_fit = k.saturating_mul(at.block_bytes() as i64) / 16 < 1 << 30;
        if rows_16_byte_aligned(&a, at.block_bytes() as i64) && rows_16_byte_aligned(&b, 4) && vectors_fit {
            return none(Path::MatVec { quantize_b: false });
        }
    }
    let gemm = match at {
        DType::F32 => DType::F32,
        DType::BF16 => DType::BF16,
        _ => DType::F16,
    };
    let es = gemm.block_bytes() as i64;
    let nmat = b2 * b3;
    // Split products are single GEMMs (one matrix, or b's matrices folded into its columns).
    let one_gemm = nmat == 1 || (a2 == 1 && a3 == 1 && fold_stride(&dst, ds, m, 1).is_some());
    let split = gemm == DType::F32 && one_gemm && split_gemm::chosen(mode, m, n.saturating_mul(nmat), k);
    if split {
        let folded_ldc = fold_stride(&dst, ds, m, 1).filter(|_| nmat > 1);
        let (a_bytes, b_bytes) = split_gemm::scratch_bytes(m, n.saturating_mul(nmat), k, align);
        return Plan {
            path: Path::Split { folded_ldc },
            a_offset: 0,
            b_offset: a_bytes,
            ptr_offset: a_bytes.saturating_add(b_bytes),
            scratch_bytes: a_bytes.saturating_add(b_bytes),
        };
    }
    let convert_a = at != gemm || leading_dim(&a, es, k).is_none();
    // f16 values (widened by a fused CPY) go to an f16 GEMM as they are.
    let convert_b = (gemm != DType::F32 && bt != gemm) || leading_dim(&b, es, k).is_none();
    // The operands as cuBLAS will see them (addresses do not matter here).
    let ga = if convert_a { packed(gemm, a.ne).unwrap_or(a) } else { a };
    let gb = if convert_b { packed(gemm, b.ne).unwrap_or(b) } else { b };

    let batch = if nmat == 1 {
        Batch::Single
    } else if let (1, 1, Some(ldb), Some(ldc)) = (a2, a3, fold_stride(&gb, es, k, 1), fold_stride(&dst, ds, m, 1)) {
        Batch::Folded { ldb, ldc }
    } else if let (true, Some(stride_a), Some(stride_b), Some(stride_c)) =
        (a2 == b2 && a3 == b3, batch_stride(&ga, es), batch_stride(&gb, es), batch_stride(&dst, ds))
    {
        Batch::Strided { stride_a, stride_b, stride_c }
    } else {
        Batch::Pointers
    };

    let a_bytes = if convert_a { align(bytes_of(&a, gemm)) } else { 0 };
    let b_bytes = if convert_b { align(bytes_of(&b, gemm)) } else { 0 };
    let ptr_bytes =
        if batch == Batch::Pointers { usize::try_from(nmat).unwrap_or(usize::MAX).saturating_mul(24) } else { 0 };
    Plan {
        path: Path::Gemm { gemm, convert_a, convert_b, batch },
        a_offset: 0,
        b_offset: a_bytes,
        ptr_offset: a_bytes.saturating_add(b_bytes),
        scratch_bytes: a_bytes.saturating_add(b_bytes).saturating_add(ptr_bytes),
    }
}

fn cuda_type(t: DType) -> cudaDataType {
    match t {
        DType::BF16 => cudaDataType::CUDA_R_16BF,
        DType::F16 => cudaDataType::CUDA_R_16F,
        _ => cudaDataType::CUDA_R_32F,
    }
}

fn int(v: i64) -> Result<c_int> {
    c_int::try_from(v).map_err(|_| backend_error("a MUL_MAT size exceeds cuBLAS's 32-bit arguments"))
}

/// Queues a validated MUL_MAT.
pub(crate) fn launch(
    kernels: &Kernels,
    stream: &Arc<CudaStream>,
    scratch: &mut Scratch,
    a: Operand,
    b: Operand,
    dst: Operand,
) -> Result<()> {
    let p = plan(a, b, dst);
    let ((a, at), (b, _), (d, _)) = (a, b, dst);
    let m = a.ne[1];
    let [_, n, b2, b3] = b.ne;
    match p.path {
        Path::Fill => {
            let zero = 0.0f32;
            let cfg = elementwise_config(d.ne[0], d.nrows());
            // fill_f32(TensorArg dst, float value)
            launch_kernel!(kernels, stream, names::FILL_F32, cfg, &d, &zero)
        }
        Path::MatVecMma => mat_vec_mma(kernels, stream, scratch, p.scratch_bytes, (a, at), b, d, &TensorArg::NONE),
        Path::MatVec { quantize_b } => mat_vec(
            kernels,
            stream,
            scratch,
            quantize_b,
            p.scratch_bytes,
            (a, at),
            b,
            d,
            Epilogue::Add(&TensorArg::NONE),
        ),
        Path::Split { folded_ldc } => {
            let product = split_product(a, b, d, folded_ldc)?;
            split_gemm::launch(kernels, stream, scratch, &product, None)
        }
        Path::Gemm { gemm, batch, .. } => {
            let (ga, gb, base) = gemm_operands(kernels, stream, scratch, &p, (a, at), ((b, DType::F32), false))?;
            let es = gemm.block_bytes() as i64;
            let k = ga.ne[0];
            let lda = leading_dim(&ga, es, k).ok_or_else(|| backend_error("a is not a cuBLAS matrix"))?;
            let ldb = leading_dim(&gb, es, k).ok_or_else(|| backend_error("b is not a cuBLAS matrix"))?;
            let ldc = leading_dim(&d, 4, m).ok_or_else(|| backend_error("dst is not a cuBLAS matrix"))?;
            let single = |(cols, ldb, ldc): (i64, i64, i64)| {
                lt_gemm(gemm, (m, cols, k), (ga.data, lda), (gb.data, ldb), (d.data, ldc), None)
            };
            let product = match batch {
                Batch::Single => single((n, ldb, ldc))?,
                Batch::Folded { ldb, ldc } => single((n * b2 * b3, ldb, ldc))?,
                Batch::Strided { .. } | Batch::Pointers => {
                    return batched(kernels, stream, scratch, (ga, gb, d), (gemm, batch), base + p.ptr_offset as u64)
                }
            };
            if [(ga, gemm), (gb, gemm)].into_iter().any(|s| TensorArg::overlap((d, DType::F32), s)) {
                return Err(backend_error("a MUL_MAT's result overlaps its operands"));
            }
            // SAFETY: the operands are validated device matrices of the stream's context
            // (converted ones in scratch reserved for them), the result apart from them.
            unsafe { scratch.matmul(&product) }
        }
    }
}

/// The cuBLASLt product `c (m x n, f32) = a^T b` of matrices of type `gemm` given as (device
/// address, leading dimension in values), plus `bias` where given; f32 ones on TF32 tensor cores
/// in the `tf32` mode.
pub(super) fn lt_gemm(
    gemm: DType,
    (m, n, k): (i64, i64, i64),
    a: (u64, i64),
    b: (u64, i64),
    c: (u64, i64),
    bias: Option<u64>,
) -> Result<LtGemm> {
    let dims = |v: i64| u64::try_from(v).map_err(|_| backend_error("a negative MUL_MAT size"));
    Ok(LtGemm {
        m: dims(m)?,
        n: dims(n)?,
        k: dims(k)?,
        ty: match gemm {
            DType::F16 => cudarc::cublaslt::sys::cudaDataType::CUDA_R_16F,
            DType::BF16 => cudarc::cublaslt::sys::cudaDataType::CUDA_R_16BF,
            _ => cudarc::cublaslt::sys::cudaDataType::CUDA_R_32F,
        },
        a,
        b,
        c,
        c_ty: cudarc::cublaslt::sys::cudaDataType::CUDA_R_32F,
        bias,
        gelu: false,
        tf32: f32_products() == F32Products::Tf32,
    })
}

/// Queues the batched cuBLAS GEMM of a plan's `batch` (strided, or through pointer arrays
/// written at device address `ptrs`) over the matrices of `a`, `b` and `d`.
fn batched(
    kernels: &Kernels,
    stream: &Arc<CudaStream>,
    scratch: &mut Scratch,
    (a, b, d): (TensorArg, TensorArg, TensorArg),
    (gemm, batch): (DType, Batch),
    ptrs: u64,
) -> Result<()> {
    let es = gemm.block_bytes() as i64;
    let ([k, m, a2, a3], [_, n, b2, b3]) = (a.ne, b.ne);
    let lda = leading_dim(&a, es, k).ok_or_else(|| backend_error("a is not a cuBLAS matrix"))?;
    let ldb = leading_dim(&b, es, k).ok_or_else(|| backend_error("b is not a cuBLAS matrix"))?;
    let ldc = leading_dim(&d, 4, m).ok_or_else(|| backend_error("dst is not a cuBLAS matrix"))?;
    let gemm_args = Gemm::new(scratch.blas()?, int(m)?, int(k)?, cuda_type(gemm));
    match batch {
        Batch::Strided { stride_a, stride_b, stride_c } => gemm_args.strided(
            (a.data, int(lda)?, stride_a),
            (b.data, int(ldb)?, stride_b),
            (d.data, int(ldc)?, stride_c),
            int(n)?,
            int(b2 * b3)?,
        ),
        _ => {
            let (r2, r3) = (b2 / a2, b3 / a3);
            let nmat = b2 * b3;
            let cfg = cudarc::driver::LaunchConfig {
                grid_dim: (div_ceil(nmat, 256).clamp(1, 65535) as u32, 1, 1),
                block_dim: (256, 1, 1),
                shared_mem_bytes: 0,
            };
            // mul_mat_ptrs(TensorArg a, TensorArg b, TensorArg dst, long long r2,
            //              long long r3, unsigned long long *out)
            launch_kernel!(kernels, stream, names::MUL_MAT_PTRS, cfg, &a, &b, &d, &r2, &r3, &ptrs)?;
            gemm_args.pointers(ptrs, int(nmat)?, int(lda)?, int(ldb)?, int(ldc)?, int(n)?)
        }
    }
}

/// What a matrix-vector kernel does besides its product.
#[derive(Clone, Copy)]
enum Epilogue<'a> {
    /// Adds `add` to the results where its address is not 0 ([`addend`]).
    Add(&'a TensorArg),
    /// Computes the same rows of a second matrix `up` (of `a`'s shape) too, and stores
    /// silu(product of a) * (product of up): a SwiGLU feed-forward's gate and up projections.
    Glu(&'a TensorArg),
}

/// Queues the matrix-vector kernel of `a` and `b` into `d` (quantizing `b` into scratch first
/// when `quantize_b`, unless this run did already), with `epilogue`.
#[allow(clippy::too_many_arguments)]
fn mat_vec(
    kernels: &Kernels,
    stream: &Arc<CudaStream>,
    scratch: &mut Scratch,
    quantize_b: bool,
    scratch_bytes: usize,
    (a, at): Operand,
    b: TensorArg,
    d: TensorArg,
    epilogue: Epilogue<'_>,
) -> Result<()> {
    let m = a.ne[1];
    let [_, n, b2, b3] = b.ne;
    let (r2, r3) = (b2 / a.ne[2], b3 / a.ne[3]);
    let pieces = quantize_b
        && n == 1
        && q8_0_pieces((a, at))
        && match epilogue {
            Epilogue::Add(_) => true,
            Epilogue::Glu(up) => q8_0_pieces((*up, at)),
        };
    let name = match (epilogue, pieces) {
        (Epilogue::Add(_), true) => Some(names::MUL_MAT_VEC_Q8_0_ROWS),
        (Epilogue::Glu(_), true) => Some(names::MUL_MAT_VEC_GLU_Q8_0_ROWS),
        (Epilogue::Add(_), false) => names::mul_mat_vec(at, n as usize),
        (Epilogue::Glu(_), false) => names::mul_mat_vec_glu(at).filter(|_| n == 1),
    };
    let name = name.ok_or_else(|| backend_error("no matrix-vector kernel"))?;
    let nmat = (b2 * b3).clamp(1, 65535) as u32;
    let cfg = cudarc::driver::LaunchConfig {
        grid_dim: (u32::try_from(div_ceil(m, mmv_rows(n))).map_err(|_| backend_error("too many rows"))?, nmat, 1),
        block_dim: MMV_BLOCK,
        shared_mem_bytes: 0,
    };
    let layout = if pieces { BLayout::Q8_0Rows } else { BLayout::Blocks };
    let bq = if quantize_b { Some(quantized_b(kernels, stream, scratch, b, scratch_bytes, layout)?) } else { None };
    // mul_mat_vec_<type>_<n>(TensorArg a, TensorArg b | const Q8_1 *bq, TensorArg dst, TensorArg add,
    //                        long long r2, long long r3)
    // mul_mat_vec_glu_<type>(TensorArg gate, TensorArg up, TensorArg b | const Q8_1 *bq, TensorArg dst,
    //                        long long r2, long long r3)
    match (epilogue, bq) {
        (Epilogue::Add(add), None) => launch_kernel!(kernels, stream, name, cfg, &a, &b, &d, add, &r2, &r3),
        (Epilogue::Add(add), Some(bq)) => launch_kernel!(kernels, stream, name, cfg, &a, &bq, &d, add, &r2, &r3),
        (Epilogue::Glu(up), None) => launch_kernel!(kernels, stream, name, cfg, &a, up, &b, &d, &r2, &r3),
        (Epilogue::Glu(up), Some(bq)) => launch_kernel!(kernels, stream, name, cfg, &a, up, &bq, &d, &r2, &r3),
    }
}

/// Pieces of 16 bytes a q8_0 row needs at least for the `*q8_0_rows*` kernels: 4 a thread of
/// the block. On an H200 a 4096 x 14336 product (952 pieces a row) took 20.0 us against 22.3
/// through the 2-byte loads of `mul_mat_vec_q8_0_1`; a 1.1-billion-parameter model's decoding
/// (rows of 2048 and 5632 values: 136 and 374 pieces) went 1-3% slower with every one-column
/// q8_0 product on them (the SwiGLU kernel keeps 96 registers, against 80).
const Q8_0_MIN_PIECES: i64 = 512;

/// Whether q8_0 weights `a` are runs of 16-byte pieces for the `*q8_0_rows*` kernels: packed
/// rows of a multiple of 8 blocks (272 bytes), each starting on a 16-byte boundary, at least
/// [`Q8_0_MIN_PIECES`] pieces long and shorter than 2 GiB. Its `b` ([`BLayout::Q8_0Rows`], 38
/// bytes a block) fits the scratch planned for Q8_1 blocks (40). Every one-column q8_0 kernel
/// (a product, SwiGLU's pair, projections, a norm's quantized copy) decides by this, so that
/// fused products keep the bits of their nodes.
pub(crate) fn q8_0_pieces((a, at): Operand) -> bool {
    let nblocks = a.ne[0] / 32;
    at == DType::Q8_0
        && nblocks % 8 == 0
        && nblocks * 34 / 16 >= Q8_0_MIN_PIECES
        && nblocks * 34 < 1 << 31
        && rows_16_byte_aligned(&a, DType::Q8_0.block_bytes() as i64)
}

/// The device address of `b` quantized into Q8_1 blocks (`scratch_bytes` of them) in `layout`
/// for a matrix-vector kernel: quantized now, unless this run did already.
pub(crate) fn quantized_b(
    kernels: &Kernels,
    stream: &Arc<CudaStream>,
    scratch: &mut Scratch,
    b: TensorArg,
    scratch_bytes: usize,
    layout: BLayout,
) -> Result<u64> {
    let (bq, held) = scratch.reserve_for(scratch_bytes, &b, layout, 0)?;
    if held {
        return Ok(bq);
    }
    let [k, n, b2, b3] = b.ne;
    let nmat = (b2 * b3).clamp(1, 65535) as u32;
    let blocks = u32::try_from(div_ceil(k / 32, MMV_WARPS)).map_err(|_| backend_error("too many blocks"))?;
    // The tensor-core layouts hold 8 columns, zeros past b's last.
    let (name, grid_dim) = match layout {
        BLayout::Blocks => (names::QUANTIZE_Q8_1, (blocks, n as u32, nmat)),
        BLayout::Q8_0Rows => (names::QUANTIZE_Q8_0_ROWS, (blocks, n as u32, nmat)),
        BLayout::Fragments => (names::QUANTIZE_Q8_1_MMA, (blocks, MMV_MAX_COLS as u32, nmat)),
        // A warp for each step of 16 values, all columns.
        BLayout::Fragments16 { bf16 } => {
            let steps = u32::try_from(div_ceil(k / 16, MMV_WARPS)).map_err(|_| backend_error("too many blocks"))?;
            (if bf16 { names::CONVERT_B_MMA_BF16 } else { names::CONVERT_B_MMA_F16 }, (steps, nmat, 1))
        }
        BLayout::Packed { .. } | BLayout::Split { .. } => return Err(backend_error("not a matrix-vector layout")),
    };
    let cfg = cudarc::driver::LaunchConfig { grid_dim, block_dim: MMV_BLOCK, shared_mem_bytes: 0 };
    // quantize_q8_1(TensorArg b, Q8_1 *out), quantize_q8_0_rows(TensorArg b, char *out),
    // quantize_q8_1_mma(TensorArg b, MmaB *out),
    // convert_b_mma_<type>(TensorArg b, uint2 *out)
    launch_kernel!(kernels, stream, name, cfg, &b, &bq)?;
    scratch.set_converted(b, layout, 0);
    Ok(bq)
}

/// Queues the tensor-core matrix-vector kernel of `a` and `b` into `d`, plus `add` where its
/// address is not 0 ([`addend`]), quantizing `b` into scratch first unless this run did
/// already.
#[allow(clippy::too_many_arguments)]
fn mat_vec_mma(
    kernels: &Kernels,
    stream: &Arc<CudaStream>,
    scratch: &mut Scratch,
    scratch_bytes: usize,
    (a, at): Operand,
    b: TensorArg,
    d: TensorArg,
    add: &TensorArg,
) -> Result<()> {
    let name = names::mul_mat_vec_mma(at).ok_or_else(|| backend_error("no tensor-core matrix-vector kernel"))?;
    let (r2, r3) = (b.ne[2] / a.ne[2], b.ne[3] / a.ne[3]);
    let cfg = cudarc::driver::LaunchConfig {
        grid_dim: (
            u32::try_from(div_ceil(a.ne[1], MMA_ROWS)).map_err(|_| backend_error("too many rows"))?,
            (b.ne[2] * b.ne[3]).clamp(1, 65535) as u32,
            1,
        ),
        block_dim: MMA_BLOCK,
        shared_mem_bytes: 0,
    };
    let layout = match at {
        DType::F16 => BLayout::Fragments16 { bf16: false },
        DType::BF16 => BLayout::Fragments16 { bf16: true },
        _ => BLayout::Fragments,
    };
    let bq = quantized_b(kernels, stream, scratch, b, scratch_bytes, layout)?;
    // mul_mat_vec_mma_<type>(TensorArg a, const MmaB *bq (uint2 *bf for f16, bf16), TensorArg dst,
    //                        TensorArg add, long long r2, long long r3)
    launch_kernel!(kernels, stream, name, cfg, &a, &bq, &d, add, &r2, &r3)
}

/// Queues the products of `gate` and `up` (weights of one type and shape) with the one column
/// `b`, and silu(gate product) * (up product) into `dst`, as one matrix-vector kernel.
/// `Ok(false)` (nothing queued) where the products are not such (the nodes then run one by
/// one). The products are validated here.
pub(crate) fn launch_swiglu(
    kernels: &Kernels,
    stream: &Arc<CudaStream>,
    scratch: &mut Scratch,
    gate: Operand,
    up: Operand,
    b: Operand,
    dst: Operand,
) -> Result<bool> {
    let same_weights = gate.1 == up.1 && gate.0.ne == up.0.ne;
    let valid = |a: Operand| validate(&Node { op: Op::MulMat, dst, srcs: &[Some(a), Some(b)] }).is_ok();
    if !same_weights || b.0.ne[1] != 1 || names::mul_mat_vec_glu(gate.1).is_none() || !valid(gate) || !valid(up) {
        return Ok(false);
    }
    // The kernel writes while it reads: the result may not lie on an operand.
    if [gate, up, b].into_iter().any(|s| TensorArg::overlap(dst, s)) {
        return Ok(false);
    }
    let p = plan(gate, b, dst);
    let Path::MatVec { quantize_b } = p.path else { return Ok(false) };
    mat_vec(kernels, stream, scratch, quantize_b, p.scratch_bytes, gate, b.0, dst.0, Epilogue::Glu(&up.0))?;
    Ok(true)
}

/// `add` (an ADD's second source) as the mat-vec kernels' epilogue takes it: f32 and 4-byte
/// aligned, of `dst`'s shape with stride 0 along the dimensions it repeats, lying exactly on
/// `dst` or apart from it (each value is read before it is written, by the same thread).
/// `None` where it is not such a tensor.
fn addend((add, at): Operand, dst: TensorArg) -> Option<TensorArg> {
    if at != DType::F32 || add.data % 4 != 0 {
        return None;
    }
    let mut nb = [0i64; 4];
    for (d, stride) in nb.iter_mut().enumerate() {
        *stride = match add.ne[d] {
            n if n == dst.ne[d] => add.nb[d],
            1 => 0,
            _ => return None,
        };
    }
    let add = TensorArg { data: add.data, ne: dst.ne, nb };
    let apart = add == dst || !TensorArg::overlap((add, DType::F32), (dst, DType::F32));
    apart.then_some(add)
}

/// The split product of `a` and `b` into `d` for [`Path::Split`].
fn split_product(a: TensorArg, b: TensorArg, d: TensorArg, folded_ldc: Option<i64>) -> Result<SplitProduct> {
    let [k, m, _, _] = a.ne;
    let (cols, ldc) = match folded_ldc {
        Some(ldc) => (b.ne[1] * b.ne[2] * b.ne[3], Some(ldc)),
        None => (b.ne[1], leading_dim(&d, 4, m)),
    };
    let ldc = ldc.ok_or_else(|| backend_error("dst is not a cuBLAS matrix"))?;
    Ok(SplitProduct { a, b, gelu_b: false, d, m, k, cols, ldc })
}

/// The kernel packing `b` as `gemm`'s type for a GEMM (taking its values through GELU_ERF
/// first with `gelu`), if one takes `b`: f32 rows of a multiple of 8 values on 16-byte
/// boundaries; f16 values only through GELU_ERF (a GELU_ERF node of f16 values widened to f32
/// for the product), densely packed, a multiple of 8 from a 16-byte boundary.
fn pack_kernel(gemm: DType, (b, bt): (&TensorArg, DType), gelu: bool) -> Option<&'static str> {
    if bt == DType::F16 {
        let flat = gelu && is_packed(b, 2) && b.nelements() % 8 == 0 && b.data % 16 == 0;
        return match gemm {
            DType::F16 => Some(names::PACK_FLAT_GELU_ERF_F16_F16),
            DType::BF16 => Some(names::PACK_FLAT_GELU_ERF_F16_BF16),
            _ => None,
        }
        .filter(|_| flat);
    }
    let name = match (gemm, gelu) {
        (DType::F16, false) => names::PACK_F32_F16,
        (DType::BF16, false) => names::PACK_F32_BF16,
        (DType::F16, true) => names::PACK_GELU_ERF_F32_F16,
        (DType::BF16, true) => names::PACK_GELU_ERF_F32_BF16,
        _ => return None,
    };
    (bt == DType::F32 && b.ne[0] % 8 == 0 && rows_16_byte_aligned(b, 4)).then_some(name)
}

/// Whether tensor `t` of `es`-byte values is densely packed.
fn is_packed(t: &TensorArg, es: i64) -> bool {
    let mut stride = es;
    for (&ne, &nb) in t.ne.iter().zip(&t.nb) {
        if ne > 1 && nb != stride {
            return false;
        }
        stride = stride.saturating_mul(ne);
    }
    true
}

/// The kernel packing densely packed `b` (one [`pack_kernel`] takes) as `gemm`'s type,
/// through GELU_ERF with `gelu`, as one run of values, and its launch: blocks of 256 threads,
/// 8 a multiprocessor (one wave where a thread needs at most 32 registers), or fewer where
/// `b` has fewer groups of 8 values. `None` for types no such kernel takes.
fn pack_flat(
    kernels: &Kernels,
    gemm: DType,
    (b, bt): (&TensorArg, DType),
    gelu: bool,
) -> Option<(&'static str, cudarc::driver::LaunchConfig)> {
    let name = match (bt, gemm, gelu) {
        (DType::F16, DType::BF16, true) => names::PACK_FLAT_GELU_ERF_F16_BF16,
        (DType::F16, DType::F16, true) => names::PACK_FLAT_GELU_ERF_F16_F16,
        (DType::F32, DType::BF16, false) => names::PACK_FLAT_F32_BF16,
        (DType::F32, DType::BF16, true) => names::PACK_FLAT_GELU_ERF_F32_BF16,
        (DType::F32, DType::F16, false) => names::PACK_FLAT_F32_F16,
        (DType::F32, DType::F16, true) => names::PACK_FLAT_GELU_ERF_F32_F16,
        _ => return None,
    };
    let blocks = div_ceil(b.nelements() / 8, 256).clamp(1, 8 * kernels.multiprocessors());
    let cfg = cudarc::driver::LaunchConfig {
        grid_dim: (blocks.min(i64::from(u32::MAX)) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    Some((name, cfg))
}

/// Where the GEMM of a MUL_MAT of `a` and `b` into `dst` takes `b` packed as 16-bit values
/// (f16 or bf16) from the scratch, as its layout, offset and the plan's scratch bytes: what a
/// kernel that produces `b` may leave there for it ([`Scratch::set_converted`]). `None` where
/// the GEMM packs no b of these rows.
pub(crate) fn packed_b(a: Operand, b: Operand, dst: Operand) -> Option<(BLayout, usize, usize)> {
    let p = plan(a, b, dst);
    match p.path {
        Path::Gemm { gemm, convert_b: true, .. } if pack_kernel(gemm, (&b.0, b.1), false).is_some() => {
            Some((BLayout::Packed { gemm, gelu: false }, p.b_offset, p.scratch_bytes))
        }
        _ => None,
    }
}

/// The operands of plan `p`'s GEMM: `a` and `b` as they are, or converted (queued) into the
/// plan's scratch; and the scratch's address. With `gelu_b`, `b` is packed through GELU_ERF
/// (the caller checked that [`pack_kernel`] takes it).
fn gemm_operands(
    kernels: &Kernels,
    stream: &Arc<CudaStream>,
    scratch: &mut Scratch,
    p: &Plan,
    (a, at): Operand,
    ((b, bt), gelu_b): (Operand, bool),
) -> Result<(TensorArg, TensorArg, u64)> {
    let Path::Gemm { gemm, convert_a, convert_b, .. } = p.path else {
        return Err(backend_error("not a GEMM plan"));
    };
    // b's packed copy is kept for the next products of the same b (a layer's query, key and
    // value projections) in this run; a's lies before it.
    let b_layout = BLayout::Packed { gemm, gelu: gelu_b };
    let (base, b_held) = match (p.scratch_bytes, convert_b) {
        (0, _) => (0, false),
        (bytes, true) => scratch.reserve_for(bytes, &b, b_layout, p.b_offset)?,
        (bytes, false) => (scratch.reserve(bytes)?, false),
    };
    let ga = if convert_a {
        let t = TensorArg::contiguous(base + p.a_offset as u64, gemm, a.ne)?;
        match names::dequantize_f16(at).filter(|_| gemm == DType::F16) {
            // dequantize_f16_<type>(TensorArg a, TensorArg dst)
            Some(name) => launch_kernel!(kernels, stream, name, pack16_config(&a, 1), &a, &t)?,
            None => copy(kernels, stream, (a, at), (t, gemm))?,
        }
        t
    } else {
        a
    };
    let gb = if convert_b {
        let t = TensorArg::contiguous(base + p.b_offset as u64, gemm, b.ne)?;
        if !b_held {
            match pack_kernel(gemm, (&b, bt), gelu_b) {
                Some(_) if is_packed(&b, bt.block_bytes() as i64) => {
                    let flat = pack_flat(kernels, gemm, (&b, bt), gelu_b);
                    let (name, cfg) = flat.ok_or_else(|| backend_error("a product's b that no kernel packs"))?;
                    // pack_flat_(gelu_erf_)f32_<type>(TensorArg a, TensorArg dst)
                    launch_kernel!(kernels, stream, name, cfg, &b, &t)?
                }
                // pack_(gelu_erf_)f32_<type>(TensorArg a, TensorArg dst)
                Some(name) => launch_kernel!(kernels, stream, name, pack16_config(&b, PACK16_F32_ROWS), &b, &t)?,
                None if !gelu_b => copy(kernels, stream, (b, DType::F32), (t, gemm))?,
                None => return Err(backend_error("GELU_ERF fused into a product whose b no kernel packs")),
            }
            scratch.set_converted(b, b_layout, p.b_offset);
        }
        t
    } else {
        b
    };
    Ok((ga, gb, base))
}

/// Rows of f32 values a thread of the packing kernels takes (`PACK16_F32_ROWS` in mul_mat.cu);
/// the dequantizing kernels take 1.
const PACK16_F32_ROWS: i64 = 4;

/// The launch of a kernel of mul_mat.cu packing the rows of `a`, `rows` rows a thread
/// (`pack16`): x over runs of a row's values, 8 a thread, at most 256 threads a block and no
/// more warps than a row needs (a MiniLM row of 1536 values takes 192 threads, where blocks
/// of 256 left a quarter idle); y over groups of `rows` rows.
fn pack16_config(a: &TensorArg, rows: i64) -> cudarc::driver::LaunchConfig {
    let eighths = a.ne[0] / 8;
    let threads = (div_ceil(eighths, 32) * 32).clamp(32, 256);
    cudarc::driver::LaunchConfig {
        grid_dim: (
            div_ceil(eighths, threads).clamp(1, i64::from(u32::MAX)) as u32,
            div_ceil(a.nrows(), rows).clamp(1, 65535) as u32,
            1,
        ),
        block_dim: (threads as u32, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Queues a validated MUL_MAT followed by the ADD of `bias` as one kernel writing `dst`: the
/// matrix-vector kernel with `bias` as its addend ([`addend`]), or a cuBLASLt product with a
/// bias epilogue (`bias` one value per row of the result, packed). With `gelu_b`, the
/// product's b is GELU_ERF of `b` (a GELU_ERF node fused in), applied as a GEMM converts b
/// (packing it to 16 bits, or splitting it); an f16 `b` is a GELU_ERF of f16 values widened to
/// f32 by a CPY (both fused in), packed by GEMMs only. An f16 `dst` (the sum cast to f16 by a
/// CPY fused in) is written by cuBLASLt GEMMs only, rounding their f32 results; its bias is
/// f16, or f32 rounded to f16 into the scratch (a CPY fused in). `Ok(false)` (nothing queued)
/// where the plan is none of these or `bias` does not fit it.
pub(crate) fn launch_with_bias(
    kernels: &Kernels,
    stream: &Arc<CudaStream>,
    scratch: &mut Scratch,
    a: Operand,
    (b, gelu_b): (Operand, bool),
    (dst, gelu_after): (Operand, bool),
    bias: Operand,
) -> Result<bool> {
    // A GELU is taken as b is converted: planned as for f32 values (a 16-bit b of the GEMM's
    // type is taken as it is otherwise).
    let p = plan(a, if gelu_b { (b.0, DType::F32) } else { b }, dst);
    // An f16 result only from f16 GEMMs (cuBLASLt writes no f16 from f32 or bf16 operands).
    let half = dst.1 == DType::F16;
    if half && !matches!(p.path, Path::Gemm { gemm: DType::F16, .. }) {
        return Ok(false);
    }
    // An f32 b as any plan takes it, through GELU as splits or GEMMs convert it; an f16 b
    // (widened by a CPY) through GELU as a GEMM packs it, or as it is by an f16 GEMM.
    let b_taken = match (p.path, b.1, gelu_b) {
        (_, DType::F32, false) | (Path::Split { .. }, DType::F32, true) => true,
        (Path::Gemm { gemm, convert_b: true, .. }, _, true) => pack_kernel(gemm, (&b.0, b.1), true).is_some(),
        (Path::Gemm { convert_b: false, .. }, DType::F16, false) => true,
        _ => false,
    };
    if !b_taken {
        return Ok(false);
    }
    // A GELU after the sum only in a cuBLASLt epilogue.
    if gelu_after && !matches!(p.path, Path::Gemm { .. }) {
        return Ok(false);
    }
    if p.path == Path::MatVecMma {
        let Some(add) = addend(bias, dst.0) else { return Ok(false) };
        mat_vec_mma(kernels, stream, scratch, p.scratch_bytes, a, b.0, dst.0, &add)?;
        return Ok(true);
    }
    if let Path::MatVec { quantize_b } = p.path {
        let Some(add) = addend(bias, dst.0) else { return Ok(false) };
        mat_vec(kernels, stream, scratch, quantize_b, p.scratch_bytes, a, b.0, dst.0, Epilogue::Add(&add))?;
        return Ok(true);
    }
    let m = a.0.ne[1];
    // A packed column of m values: f32, or f16 for an f16 result.
    let bias_type = bias.1 == DType::F32 || (half && bias.1 == DType::F16);
    let bias_fits =
        bias_type && bias.0.ne == [m, 1, 1, 1] && bias.0.nb[0] == bias.1.block_bytes() as i64 && bias.0.data % 16 == 0;
    if let (Path::Split { folded_ldc }, true) = (p.path, bias_fits) {
        let product = SplitProduct { gelu_b, ..split_product(a.0, b.0, dst.0, folded_ldc)? };
        split_gemm::launch(kernels, stream, scratch, &product, Some(bias.0.data))?;
        return Ok(true);
    }
    let Path::Gemm { gemm, batch, .. } = p.path else { return Ok(false) };
    let cols = match batch {
        Batch::Single => Some((b.0.ne[1], None)),
        Batch::Folded { ldb, ldc } => Some((b.0.ne[1] * b.0.ne[2] * b.0.ne[3], Some((ldb, ldc)))),
        _ => None,
    };
    let (Some((n, folded)), true) = (cols, bias_fits) else { return Ok(false) };
    // cuBLASLt adds no f32 bias to an f16 result: an f32 bias goes rounded to f16 (as the
    // graph rounds it) into the scratch, after the operands.
    let round_bias = half && bias.1 == DType::F32;
    let bias_at = align(p.scratch_bytes);
    let p = if round_bias { Plan { scratch_bytes: bias_at.saturating_add(2 * m as usize), ..p } } else { p };
    let (ga, gb, base) = gemm_operands(kernels, stream, scratch, &p, a, (b, gelu_b))?;
    let bias_data = if round_bias {
        let rounded = TensorArg::contiguous(base + bias_at as u64, DType::F16, bias.0.ne)?;
        copy(kernels, stream, bias, (rounded, DType::F16))?;
        rounded.data
    } else {
        bias.0.data
    };
    let k = ga.ne[0];
    let es = gemm.block_bytes() as i64;
    let d = dst.0;
    let (lda, ldb, ldc) = match folded {
        Some((ldb, ldc)) => (leading_dim(&ga, es, k), Some(ldb), Some(ldc)),
        None => (leading_dim(&ga, es, k), leading_dim(&gb, es, k), leading_dim(&d, dst.1.block_bytes() as i64, m)),
    };
    let (Some(lda), Some(ldb), Some(ldc)) = (lda, ldb, ldc) else {
        return Err(backend_error("an operand is not a cuBLASLt matrix"));
    };
    let mut g = lt_gemm(gemm, (m, n, k), (ga.data, lda), (gb.data, ldb), (d.data, ldc), Some(bias_data))?;
    if half {
        g.c_ty = cudarc::cublaslt::sys::cudaDataType::CUDA_R_16F;
    }
    g.gelu = gelu_after;
    if [(ga, gemm), (gb, gemm), bias].into_iter().any(|s| TensorArg::overlap(dst, s)) {
        return Err(backend_error("a MUL_MAT's result overlaps its operands"));
    }
    // SAFETY: the operands are validated device matrices of the stream's context (converted
    // ones in scratch reserved for them), the bias a packed column of m values of the result's
    // type (an f16 one in that scratch too), the result apart from them all.
    unsafe { scratch.matmul(&g) }?;
    Ok(true)
}

/// Queues on `scratch`'s stream, with its cuBLAS handle, one product of packed matrices as
/// MUL_MAT's GEMMs run: `c (m x n, f32) = a^T b` with `a` (`k x m`) and `b` (`k x n`) of type
/// `ty` (f32, f16 or bf16), each given as (device address, leading dimension in values).
/// The addresses must be memory of the stream's context holding those matrices until the work
/// has run.
pub(crate) fn gemm_packed(
    scratch: &mut Scratch,
    ty: DType,
    (m, n, k): (i64, i64, i64),
    a: (u64, i64),
    b: (u64, i64),
    c: (u64, i64),
) -> Result<()> {
    let ctx = scratch.stream().context().clone();
    ctx.bind_to_thread().map_err(|e| backend_error(&format!("binding the CUDA context failed: {e}")))?;
    let handle = scratch.blas()?;
    let gemm = Gemm::new(handle, int(m)?, int(k)?, cuda_type(ty));
    gemm.single(a.0, int(a.1)?, b.0, int(b.1)?, c.0, int(c.1)?, int(n)?)
}

/// One cuBLAS product `C (m x n) = A^T (m x k) B (k x n)` with A and B of type `ty`, C f32,
/// in `compute`.
pub(super) struct Gemm {
    handle: cublas_sys::cublasHandle_t,
    m: c_int,
    k: c_int,
    ty: cudaDataType,
    compute: cublasComputeType_t,
}

impl Gemm {
    /// A product in f32 compute (tensor cores for 16-bit operands).
    fn new(handle: cublas_sys::cublasHandle_t, m: c_int, k: c_int, ty: cudaDataType) -> Gemm {
        Gemm { handle, m, k, ty, compute: cublasComputeType_t::CUBLAS_COMPUTE_32F }
    }
}

const ALPHA: f32 = 1.0;
const BETA: f32 = 0.0;

fn cublas_error(e: cudarc::cublas::result::CublasError) -> tessera_core::Error {
    backend_error(&format!("cuBLAS GEMM failed: {e}"))
}

impl Gemm {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn single(&self, a: u64, lda: c_int, b: u64, ldb: c_int, c: u64, ldc: c_int, n: c_int) -> Result<()> {
        // SAFETY: `handle` is live and bound to the launch's stream; A, B and C are validated
        // device matrices of the given leading dimensions and sizes (converted operands lie in
        // scratch reserved for them); alpha and beta are host f32 values as the compute type
        // and the default host pointer mode require.
        unsafe {
            cublas_sys::cublasGemmEx(
                self.handle,
                cublasOperation_t::CUBLAS_OP_T,
                cublasOperation_t::CUBLAS_OP_N,
                self.m,
                n,
                self.k,
                (&ALPHA as *const f32).cast::<c_void>(),
                a as *const c_void,
                self.ty,
                lda,
                b as *const c_void,
                self.ty,
                ldb,
                (&BETA as *const f32).cast::<c_void>(),
                c as *mut c_void,
                cudaDataType::CUDA_R_32F,
                ldc,
                self.compute,
                cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .result()
        .map_err(cublas_error)
    }

    fn strided(
        &self,
        a: (u64, c_int, i64),
        b: (u64, c_int, i64),
        c: (u64, c_int, i64),
        n: c_int,
        count: c_int,
    ) -> Result<()> {
        // SAFETY: as in `single`; each of the `count` matrices of A, B and C lies at its base
        // plus a multiple of its stride (in values) inside the validated tensors.
        unsafe {
            cublas_sys::cublasGemmStridedBatchedEx(
                self.handle,
                cublasOperation_t::CUBLAS_OP_T,
                cublasOperation_t::CUBLAS_OP_N,
                self.m,
                n,
                self.k,
                (&ALPHA as *const f32).cast::<c_void>(),
                a.0 as *const c_void,
                self.ty,
                a.1,
                a.2 as c_longlong,
                b.0 as *const c_void,
                self.ty,
                b.1,
                b.2 as c_longlong,
                (&BETA as *const f32).cast::<c_void>(),
                c.0 as *mut c_void,
                cudaDataType::CUDA_R_32F,
                c.1,
                c.2 as c_longlong,
                count,
                self.compute,
                cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .result()
        .map_err(cublas_error)
    }

    #[allow(clippy::too_many_arguments)]
    fn pointers(&self, ptrs: u64, count: c_int, lda: c_int, ldb: c_int, ldc: c_int, n: c_int) -> Result<()> {
        let count_usize = usize::try_from(count).unwrap_or(0) as u64;
        let (pa, pb, pc) = (ptrs, ptrs + 8 * count_usize, ptrs + 16 * count_usize);
        // SAFETY: as in `single`; `ptrs` is device scratch holding 3 * count matrix addresses
        // written by mul_mat_ptrs earlier on the same stream (A's, then B's, then C's).
        unsafe {
            cublas_sys::cublasGemmBatchedEx(
                self.handle,
                cublasOperation_t::CUBLAS_OP_T,
                cublasOperation_t::CUBLAS_OP_N,
                self.m,
                n,
                self.k,
                (&ALPHA as *const f32).cast::<c_void>(),
                pa as *const *const c_void,
                self.ty,
                lda,
                pb as *const *const c_void,
                self.ty,
                ldb,
                (&BETA as *const f32).cast::<c_void>(),
                pc as *const *mut c_void,
                cudaDataType::CUDA_R_32F,
                ldc,
                count,
                self.compute,
                cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .result()
        .map_err(cublas_error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plan in the default f32 mode, whatever the environment says.
    fn plan(a: Operand, b: Operand, dst: Operand) -> Plan {
        plan_for(a, b, dst, F32Products::Auto)
    }

    fn t(dtype: DType, ne: [i64; 4]) -> Operand {
        (TensorArg::contiguous(0, dtype, ne).unwrap(), dtype)
    }

    #[test]
    fn packing_launches_fit_rows_and_take_the_rows_a_thread_the_kernels_do() {
        let config = |ne0, rows, per_thread| {
            let c = pack16_config(&t(DType::F32, [ne0, rows, 1, 1]).0, per_thread);
            (c.block_dim.0, c.grid_dim.0, c.grid_dim.1)
        };
        // MiniLM's rows: 1536 values take 192 threads, 384 take 64; 4 rows a thread.
        assert_eq!(config(1536, 131072, PACK16_F32_ROWS), (192, 1, 32768));
        assert_eq!(config(384, 10, PACK16_F32_ROWS), (64, 1, 3));
        // Long rows in runs of 2048 values; rows beyond the grid are strided over.
        assert_eq!(config(14336, 1 << 20, 1), (256, 7, 65535));
        let source = include_str!("../../kernels/mul_mat.cu");
        assert!(source.contains(&format!("#define PACK16_F32_ROWS {PACK16_F32_ROWS}\n")));
        assert!(source.contains(&format!("#define SPLIT_ROWS {}\n", split_gemm::SPLIT_ROWS)));
    }

    fn permuted(dtype: DType, ne: [i64; 4], perm: [usize; 4]) -> Operand {
        // A leaf of shape ne' with ne'[perm[i]]... built as the conformance suite does: the
        // view's axis perm[i] is the leaf's axis i.
        let leaf_ne = [ne[perm[0]], ne[perm[1]], ne[perm[2]], ne[perm[3]]];
        let leaf = TensorArg::contiguous(0, dtype, leaf_ne).unwrap();
        let mut nb = [0i64; 4];
        for i in 0..4 {
            nb[perm[i]] = leaf.nb[i];
        }
        (TensorArg { data: 0, ne, nb }, dtype)
    }

    #[test]
    fn few_columns_use_the_matrix_vector_kernels() {
        let p = plan(t(DType::Q4_1, [256, 5, 1, 1]), t(DType::F32, [256, 8, 1, 1]), t(DType::F32, [5, 8, 1, 1]));
        assert_eq!((p.path, p.scratch_bytes), (Path::MatVec { quantize_b: true }, 8 * 8 * Q8_1_BYTES));
        // q8_0 takes the tensor cores from 2 columns, q4_0 from 5, with 8 columns of b always.
        let p = plan(t(DType::Q8_0, [256, 5, 1, 1]), t(DType::F32, [256, 2, 3, 1]), t(DType::F32, [5, 2, 3, 1]));
        assert_eq!((p.path, p.scratch_bytes), (Path::MatVecMma, 3 * 8 * MMA_B_BYTES));
        let p = plan(t(DType::Q4_0, [256, 5, 1, 1]), t(DType::F32, [256, 4, 1, 1]), t(DType::F32, [5, 4, 1, 1]));
        assert_eq!(p.path, Path::MatVec { quantize_b: true });
        let p = plan(t(DType::Q4_0, [256, 5, 1, 1]), t(DType::F32, [256, 5, 1, 1]), t(DType::F32, [5, 5, 1, 1]));
        assert_eq!((p.path, p.scratch_bytes), (Path::MatVecMma, 8 * MMA_B_BYTES));
        let p = plan(t(DType::Q8_0, [256, 5, 1, 1]), t(DType::F32, [256, 1, 1, 1]), t(DType::F32, [5, 1, 1, 1]));
        assert_eq!(p.path, Path::MatVec { quantize_b: true });
        // f16 and bf16 from 4 columns, K a multiple of 128: 16 values of 8 columns a step.
        for at in [DType::F16, DType::BF16] {
            let p = plan(t(at, [384, 5, 1, 1]), t(DType::F32, [384, 4, 2, 1]), t(DType::F32, [5, 4, 2, 1]));
            assert_eq!((p.path, p.scratch_bytes), (Path::MatVecMma, 2 * 24 * MMA_16BIT_STEP_BYTES));
            let p = plan(t(at, [384, 5, 1, 1]), t(DType::F32, [384, 3, 1, 1]), t(DType::F32, [5, 3, 1, 1]));
            assert_eq!(p.path, Path::MatVec { quantize_b: false });
            let p = plan(t(at, [392, 5, 1, 1]), t(DType::F32, [392, 8, 1, 1]), t(DType::F32, [5, 8, 1, 1]));
            assert_eq!(p.path, Path::MatVec { quantize_b: false });
        }
        // ... where K is a multiple of 256 and the rows start on 16-byte boundaries.
        let p = plan(t(DType::Q8_0, [288, 5, 1, 1]), t(DType::F32, [288, 8, 1, 1]), t(DType::F32, [5, 8, 1, 1]));
        assert_eq!(p.path, Path::MatVec { quantize_b: true });
        let (mut a, _) = t(DType::Q8_0, [256, 5, 1, 1]);
        a.data += 2;
        let p = plan((a, DType::Q8_0), t(DType::F32, [256, 8, 1, 1]), t(DType::F32, [5, 8, 1, 1]));
        assert_eq!(p.path, Path::MatVec { quantize_b: true });
        let p = plan(t(DType::F16, [256, 5, 1, 1]), t(DType::F32, [256, 3, 2, 1]), t(DType::F32, [5, 3, 2, 1]));
        assert_eq!((p.path, p.scratch_bytes), (Path::MatVec { quantize_b: false }, 0));
        // Float weights whose rows do not start on 16-byte boundaries go to cuBLAS.
        let p = plan(t(DType::F16, [252, 5, 1, 1]), t(DType::F32, [252, 3, 1, 1]), t(DType::F32, [5, 3, 1, 1]));
        assert!(matches!(p.path, Path::Gemm { .. }), "{p:?}");
        let b = permuted(DType::F32, [256, 3, 1, 1], [1, 0, 2, 3]);
        let p = plan(t(DType::F32, [256, 5, 1, 1]), b, t(DType::F32, [5, 3, 1, 1]));
        assert!(matches!(p.path, Path::Gemm { convert_b: true, .. }), "{p:?}");
        let p = plan(t(DType::Q8_0, [256, 5, 1, 1]), t(DType::F32, [256, 9, 1, 1]), t(DType::F32, [5, 9, 1, 1]));
        assert_eq!(p.path, Path::Gemm { gemm: DType::F16, convert_a: true, convert_b: true, batch: Batch::Single });
        assert_eq!(p.b_offset, 2560);
        assert_eq!(p.scratch_bytes, p.b_offset + align(256 * 9 * 2));
    }

    #[test]
    fn k_quant_weights_take_the_matrix_vector_kernels_or_a_dequantized_gemm() {
        for at in [DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K] {
            let p = plan(t(at, [512, 5, 1, 1]), t(DType::F32, [512, 8, 1, 1]), t(DType::F32, [5, 8, 1, 1]));
            assert_eq!((p.path, p.scratch_bytes), (Path::MatVec { quantize_b: true }, 16 * 8 * Q8_1_BYTES), "{at}");
            let p = plan(t(at, [512, 5, 1, 1]), t(DType::F32, [512, 9, 1, 1]), t(DType::F32, [5, 9, 1, 1]));
            assert_eq!(p.path, Path::Gemm { gemm: DType::F16, convert_a: true, convert_b: true, batch: Batch::Single });
        }
        // q4_K and q5_K rows off 16-byte boundaries (a view 2 bytes in) go to the GEMM; the
        // other blocks are read 2 bytes at a time anyway.
        let cases =
            [(DType::Q2_K, true), (DType::Q3_K, true), (DType::Q4_K, false), (DType::Q5_K, false), (DType::Q6_K, true)];
        for (at, vec) in cases {
            let (mut a, _) = t(at, [512, 5, 1, 1]);
            a.data += 2;
            let p = plan((a, at), t(DType::F32, [512, 1, 1, 1]), t(DType::F32, [5, 1, 1, 1]));
            assert_eq!(matches!(p.path, Path::MatVec { .. }), vec, "{at}: {p:?}");
        }
    }

    #[test]
    fn only_densely_packed_activations_take_the_flat_packing_kernel() {
        assert!(is_packed(&t(DType::F32, [384, 7, 2, 3]).0, 4));
        // Strides of dimensions of one value do not matter.
        assert!(is_packed(&TensorArg { data: 0, ne: [64, 1, 5, 1], nb: [4, 12, 256, 7] }, 4));
        // Rows further apart than their values (a view of every other row), and a permutation.
        assert!(!is_packed(&TensorArg { data: 0, ne: [64, 4, 1, 1], nb: [4, 512, 2048, 2048] }, 4));
        assert!(!is_packed(&permuted(DType::F32, [64, 4, 3, 1], [0, 2, 1, 3]).0, 4));
    }

    #[test]
    fn f32_weights_use_their_operands_in_place() {
        let p = plan(t(DType::F32, [33, 17, 1, 1]), t(DType::F32, [33, 9, 1, 1]), t(DType::F32, [17, 9, 1, 1]));
        assert_eq!(p.path, Path::Gemm { gemm: DType::F32, convert_a: false, convert_b: false, batch: Batch::Single });
        assert_eq!(p.scratch_bytes, 0);
        // A transposed b is packed first.
        let b = permuted(DType::F32, [33, 5, 1, 1], [1, 0, 2, 3]);
        let p = plan(t(DType::F32, [33, 7, 1, 1]), b, t(DType::F32, [7, 5, 1, 1]));
        assert_eq!(p.path, Path::Gemm { gemm: DType::F32, convert_a: false, convert_b: true, batch: Batch::Single });
    }

    #[test]
    fn batches_fold_stride_or_use_pointers() {
        // One weight matrix, contiguous activations: one product over all columns.
        let p = plan(t(DType::F16, [64, 7, 1, 1]), t(DType::F32, [64, 9, 2, 3]), t(DType::F32, [7, 9, 2, 3]));
        assert_eq!(
            p.path,
            Path::Gemm {
                gemm: DType::F16,
                convert_a: false,
                convert_b: true,
                batch: Batch::Folded { ldb: 64, ldc: 7 }
            }
        );
        // As many weight matrices as activations: strided.
        let p = plan(t(DType::F32, [64, 7, 2, 3]), t(DType::F32, [64, 9, 2, 3]), t(DType::F32, [7, 9, 2, 3]));
        assert_eq!(
            p.path,
            Path::Gemm {
                gemm: DType::F32,
                convert_a: false,
                convert_b: false,
                batch: Batch::Strided { stride_a: 64 * 7, stride_b: 64 * 9, stride_c: 63 }
            }
        );
        // Broadcast weights over several matrices: pointer arrays after the converted b.
        let p = plan(t(DType::BF16, [64, 9, 2, 1]), t(DType::F32, [64, 9, 4, 2]), t(DType::F32, [9, 9, 4, 2]));
        assert_eq!(p.path, Path::Gemm { gemm: DType::BF16, convert_a: false, convert_b: true, batch: Batch::Pointers });
        assert_eq!(p.ptr_offset, align(64 * 9 * 8 * 2));
        assert_eq!(p.scratch_bytes, p.ptr_offset + 8 * 3 * 8);
        // Weights permuted over dims 1 and 2 (rows still packed) batch with pointers too.
        let a = permuted(DType::F32, [64, 7, 2, 1], [0, 2, 1, 3]);
        let p = plan(a, t(DType::F32, [64, 9, 4, 1]), t(DType::F32, [7, 9, 4, 1]));
        assert_eq!(p.path, Path::Gemm { gemm: DType::F32, convert_a: false, convert_b: false, batch: Batch::Pointers });
    }

    #[test]
    fn empty_products_are_zeros() {
        let p = plan(t(DType::F32, [0, 7, 1, 1]), t(DType::F32, [0, 5, 1, 1]), t(DType::F32, [7, 5, 1, 1]));
        assert_eq!(p.path, Path::Fill);
    }

    #[test]
    fn large_f32_products_split_into_tf32_parts_and_remainders() {
        let exact = Path::Gemm { gemm: DType::F32, convert_a: false, convert_b: false, batch: Batch::Single };
        let (w, x, y) =
            (t(DType::F32, [384, 384, 1, 1]), t(DType::F32, [384, 2048, 1, 1]), t(DType::F32, [384, 2048, 1, 1]));
        // 384 x 2048 x 384 multiply-adds (2^28.2): split, both operands three times in scratch
        // (all of b's columns in one chunk).
        let p = plan(w, x, y);
        assert_eq!(p.path, Path::Split { folded_ldc: None });
        let (a_bytes, b_bytes) = (align(3 * 384 * 384 * 4), align(3 * 384 * 2048 * 4));
        assert_eq!((p.b_offset, p.scratch_bytes), (a_bytes, a_bytes + b_bytes));
        // Folded matrices count together; half as many columns stay exact.
        let p = plan(w, t(DType::F32, [384, 512, 4, 1]), t(DType::F32, [384, 512, 4, 1]));
        assert_eq!(p.path, Path::Split { folded_ldc: Some(384) });
        let p = plan(w, t(DType::F32, [384, 1024, 1, 1]), t(DType::F32, [384, 1024, 1, 1]));
        assert_eq!((p.path, p.scratch_bytes), (exact, 0));
        // The modes: split always, exact and tf32 never.
        let small = (t(DType::F32, [64, 7, 1, 1]), t(DType::F32, [64, 9, 1, 1]), t(DType::F32, [7, 9, 1, 1]));
        assert_eq!(plan_for(small.0, small.1, small.2, F32Products::Split).path, Path::Split { folded_ldc: None });
        for mode in [F32Products::Exact, F32Products::Tf32] {
            assert_eq!(plan_for(w, x, y, mode).path, exact);
        }
        // Batched products (a matrix of a per matrix of b) and 16-bit weights are never split.
        let (a3, b3) = (t(DType::F32, [64, 7, 9, 1]), t(DType::F32, [64, 9, 9, 1]));
        let p = plan_for(a3, b3, t(DType::F32, [7, 9, 9, 1]), F32Products::Split);
        assert!(matches!(p.path, Path::Gemm { batch: Batch::Strided { .. }, .. }), "{p:?}");
        let p = plan_for(t(DType::F16, [384, 384, 1, 1]), x, y, F32Products::Split);
        assert!(matches!(p.path, Path::Gemm { gemm: DType::F16, .. }), "{p:?}");
    }
}
