//! The CUDA kernels and the layer that launches them.
//!
//! The kernels are CUDA C in `backends/cuda/kernels/*.cu`, one file per op family, compiled
//! ahead of time into the fatbins this module embeds (`modules.rs`) and loaded once per context
//! with `cuModuleLoadData` ([`Kernels::load`]). A backend resolves each node to
//! [`TensorArg`]s (device address of the first value, shape, byte strides) and calls
//! [`launch`]; [`supports`] says exactly which nodes `launch` runs. Semantics are those of the
//! reference kernels (`tessera-reference`): the same broadcasting, strides, masks, rope modes,
//! im2col and pooling parameters, and bit-identical conversions and quantization.
//!
//! What [`supports`] accepts (float = f32, f16 or bf16; quantized = q8_0, q4_0, q4_1, q5_0,
//! q5_1 and the K-quants q2_K to q6_K; any strides unless said otherwise; quantized operands
//! always have packed rows, as the graph requires):
//!
//! | op | types |
//! |---|---|
//! | ADD, SUB, MUL, DIV | a float, b float (repeated over a), dst = a's type |
//! | SCALE, SQR … TANH, NORM, RMS_NORM, DIAG_MASK_INF | float, dst = source's type |
//! | SUM_ROWS / MEAN | float into the same type / into f32 |
//! | ARGMAX | float matrix into i32 |
//! | SOFT_MAX | float, no mask or an f32 or f16 mask, dst = source's type |
//! | ROPE | float with i32 positions, normal and neox |
//! | MUL_MAT | a float or quantized (packed rows), b f32, dst f32 (packed columns) |
//! | GET_ROWS | float or quantized into f32; i32 into i32 |
//! | SET_ROWS | f32 rows into float rows, i32 row numbers |
//! | FLASH_ATTN | q f32, k and v float (the same type), heads of up to 128 values, no mask or an f32 or f16 mask, dst f32 |
//! | CPY, CONT | between the float types and q8_0, q4_0, q4_1, q5_0, q5_1 (each way, same or other shape); q8_0 and q4_0 into q8_0 or q4_0; the K-quants into the float types; i32 to i32 |
//! | CONCAT | f32, f16, bf16 or i32, all three the same |
//! | IM2COL | float input (kernel: shape only) into f32 or f16, 1-D and 2-D |
//! | POOL_2D | float into f32, max and avg |
//! | VIEW, RESHAPE, PERMUTE, TRANSPOSE, leaves | no kernel |
//!
//! What runs where:
//! - element-wise ops, CPY/CONT/GET_ROWS/CONCAT, ROPE, IM2COL, POOL_2D, DIAG_MASK_INF: 2-D blocks
//!   of 256 threads (x along dimension 0, y along rows), grid-strided over rows; ADD, SUB, MUL
//!   and DIV of packed, 16-byte aligned f32 operands (b of a's shape or one row of it, rows of a
//!   multiple of 4 values) by 16-byte loads, grid-strided over the values;
//! - SUM_ROWS, MEAN, ARGMAX, SOFT_MAX, NORM, RMS_NORM: one block per row (32 to 512 threads),
//!   warp and block reductions, sums in f64; except SOFT_MAX, NORM and RMS_NORM of f32 rows
//!   that are packed, of a multiple of 4 values, at most 8192, each starting on a 16-byte
//!   boundary: each row loaded once into registers by 16-byte loads, a warp per row up to 1024
//!   values, a block per row beyond, sums in f32;
//! - MUL_MAT: up to 8 columns by matrix-vector kernels that read the weights once for all
//!   columns (float weights times f32 activations in place; quantized weights with dp4a against
//!   activations quantized to 8 bits once per run for all products of one activation, as GEMMs
//!   pack or split theirs once;
//!   several columns of q8_0/q4_0 on int8 tensor cores),
//!   optionally adding a fused ADD's operand as they store, or computing a gate and an up
//!   projection and storing silu(gate) * up, or computing up to three products of one column
//!   and storing each through its own ROPE and SET_ROWS (`projections.rs`); more columns by cuBLAS (`cublasGemmEx` and its
//!   batched forms, f32 accumulation) for f32 weights (large ones split into TF32 parts and remainders, `mul_mat.rs`), f16 and bf16 weights
//!   (activations converted to the weight type), and quantized weights (dequantized to f16 in
//!   scratch).

mod arg;
mod gemm_choices;
mod gemm_lt;
mod launch;
mod modules;
mod mul_mat;
mod names;
mod projections;
mod scratch;
mod split_gemm;
mod validate;

use std::collections::HashMap;
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaFunction, CudaStream};
use cudarc::nvrtc::Ptx;
use tessera_core::tensor::MAX_SRC;
use tessera_core::{DType, Error, Graph, Op, Result, TensorId};

pub use arg::TensorArg;
pub(crate) use mul_mat::{gemm_packed, MMV_MAX_COLS};
pub use projections::{launch_projections, ProjectionOut, ProjectionRope};
use scratch::BLayout;
pub use scratch::Scratch;

use validate::{validate, Node};

/// A tensor operand: its memory and its type.
pub type Operand = (TensorArg, DType);

/// How errors name this backend.
const BACKEND: &str = "CUDA";

pub(crate) fn backend_error(message: &str) -> Error {
    Error::Backend { backend: BACKEND.into(), message: message.into() }
}

/// Every kernel of every embedded fatbin, loaded into one CUDA context.
pub struct Kernels {
    functions: HashMap<&'static str, CudaFunction>,
    /// Whether launches let each kernel begin before the previous one ends: on compute
    /// capability 9.0 and later, where every kernel waits for its predecessor itself
    /// (`await_prior_kernel` in common.cuh). `TESSERA_CUDA_OVERLAP=0` turns it off.
    overlap: bool,
    /// The device's multiprocessors.
    multiprocessors: i64,
}

impl Kernels {
    /// Loads every fatbin into `ctx` (`cuModuleLoadData`) and looks up every kernel.
    pub fn load(ctx: &Arc<CudaContext>) -> Result<Kernels> {
        let mut functions = HashMap::new();
        for module in modules::MODULES {
            let loaded = ctx.load_module(Ptx::from_binary(module.fatbin.to_vec())).map_err(|e| {
                backend_error(&format!(
                    "loading the kernels of {}.cu failed: {e} (a CUDA 13.0 driver is needed)",
                    module.name
                ))
            })?;
            for &name in module.kernels {
                let function = loaded
                    .load_function(name)
                    .map_err(|e| backend_error(&format!("kernel {name} of {}.cu is missing: {e}", module.name)))?;
                functions.insert(name, function);
            }
        }
        let major = ctx
            .attribute(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
            .map_err(|e| backend_error(&format!("reading the compute capability failed: {e}")))?;
        let multiprocessors = ctx
            .attribute(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(|e| backend_error(&format!("reading the multiprocessor count failed: {e}")))?;
        let allowed = std::env::var("TESSERA_CUDA_OVERLAP").map_or(true, |v| v.trim() != "0");
        Ok(Kernels { functions, overlap: major >= 9 && allowed, multiprocessors: i64::from(multiprocessors.max(1)) })
    }

    /// The device's multiprocessors.
    pub(crate) fn multiprocessors(&self) -> i64 {
        self.multiprocessors
    }

    pub(crate) fn get(&self, name: &str) -> Result<&CudaFunction> {
        self.functions.get(name).ok_or_else(|| backend_error(&format!("kernel {name} is not loaded")))
    }
}

/// Whether [`launch`] runs node `node` of `graph` (its op, types, shapes and strides). View ops
/// and leaves need no kernel and are supported.
pub fn supports(graph: &Graph, node: TensorId) -> bool {
    let Ok(t) = graph.tensor(node) else { return false };
    let operand = |id: TensorId| graph.tensor(id).ok().map(|s| (TensorArg::from_parts(0, s.ne(), s.nb()), s.dtype()));
    let mut srcs: [Option<Operand>; MAX_SRC] = [None; MAX_SRC];
    for (slot, id) in t.srcs() {
        match operand(id) {
            Some(o) => srcs[slot] = Some(o),
            None => return false,
        }
    }
    let dst = (TensorArg::from_parts(0, t.ne(), t.nb()), t.dtype());
    validate(&Node { op: t.op(), dst, srcs: &srcs }).is_ok()
}

/// Device memory [`launch`] needs in its [`Scratch`] for this node (0 for most ops), so that a
/// program captured into a CUDA graph can reserve it before capturing.
pub fn scratch_bytes(op: Op, dst: Operand, srcs: &[Option<Operand>]) -> usize {
    match (op, srcs.first().copied().flatten(), srcs.get(1).copied().flatten()) {
        (Op::MulMat, Some(a), Some(b)) if validate(&Node { op, dst, srcs }).is_ok() => {
            mul_mat::plan(a, b, dst).scratch_bytes
        }
        (Op::FlashAttn { .. }, Some(q), Some(k)) if q.0.ne[1] == 1 && validate(&Node { op, dst, srcs }).is_ok() => {
            let v = srcs.get(2).copied().flatten().map_or(k.0, |v| v.0);
            launch::flash_attn_split(&q.0, &k.0, &v).map_or(0, |plan| plan.bytes)
        }
        _ => 0,
    }
}

/// Queues MUL_MAT of `a` and `b` followed by the ADD of `bias` as one kernel, into `dst`: a
/// product of up to 8 columns adds any f32 `bias` of the result's shape or repeated along some
/// of its dimensions (a bias row, a residual connection) as it stores; a GEMM adds an f32 row
/// (one value per row of the result) in its cuBLASLt epilogue. `Ok(false)` (nothing queued)
/// where neither applies (the nodes then run one by one). The results differ from the two
/// nodes' by the rounding of a different summation order at most (not at all for the
/// matrix-vector kernels). With `gelu_b`, the product reads GELU_ERF of `b` (a GELU_ERF node
/// before it, fused too, with its bits; of f16 values, widened to f32 by a CPY node, fused
/// too), where a GEMM converts `b` anyway; `Ok(false)` for other plans. `product_b` is the
/// product node's own b, as validated. An f16 `dst` is the sum cast to f16 (with an f16 bias).
/// With `gelu_after`, `dst` is GELU (tanh form) of the sum, which a GEMM's epilogue takes from
/// the f32 sum; `Ok(false)` for other plans. The addresses are as for [`launch`].
#[allow(clippy::too_many_arguments)]
pub fn launch_mul_mat_bias(
    kernels: &Kernels,
    stream: &Arc<CudaStream>,
    scratch: &mut Scratch,
    a: Operand,
    product_b: Operand,
    (b, gelu_b): (Operand, bool),
    (dst, gelu_after): (Operand, bool),
    bias: Operand,
) -> Result<bool> {
    let srcs = [Some(a), Some(product_b)];
    if validate(&Node { op: Op::MulMat, dst, srcs: &srcs }).is_err() || dst.0.nelements() == 0 || a.0.ne[0] == 0 {
        return Ok(false);
    }
    // The product writes while it reads: its result may not lie on its operands (one by one,
    // the ADD's result may reuse the memory of the product's operands).
    if TensorArg::overlap(dst, a) || TensorArg::overlap(dst, b) {
        return Ok(false);
    }
    stream.context().bind_to_thread().map_err(|e| backend_error(&format!("binding the CUDA context failed: {e}")))?;
    mul_mat::launch_with_bias(kernels, stream, scratch, a, (b, gelu_b), (dst, gelu_after), bias)
}

/// Queues the FLASH_ATTN `attn` (its result operand and sources, as validated) with its result
/// cast to f16 into `dst` (a CPY to f16 fused in) as one kernel; `Ok(false)` (nothing queued)
/// where no kernel writes f16 for these operands (the nodes then run one by one). The addresses
/// are as for [`launch`].
pub fn launch_flash_attn_to_f16(
    kernels: &Kernels,
    stream: &Arc<CudaStream>,
    attn: (Op, Operand, &[Option<Operand>]),
    dst: Operand,
) -> Result<bool> {
    let (op, result, srcs) = attn;
    let Op::FlashAttn { scale, precision } = op else { return Ok(false) };
    if validate(&Node { op, dst: result, srcs }).is_err() || dst.1 != DType::F16 || dst.0.ne != result.0.ne {
        return Ok(false);
    }
    if srcs.iter().flatten().any(|&s| TensorArg::overlap(dst, s)) {
        return Ok(false);
    }
    stream.context().bind_to_thread().map_err(|e| backend_error(&format!("binding the CUDA context failed: {e}")))?;
    launch::flash_attn_tensor_cores(kernels, stream, srcs, dst, scale, precision)
}

/// Queues the MUL_MAT of a CONT's copy of `x` (the CONT's source, a view) by the one column
/// `b` into `dst` as one kernel that reads `x` where it lies: a transposed view of packed rows
/// (values along dimension 1 packed, as a BERT graph's mean pooling transposes its hidden
/// states), so that nothing is copied. `x` is f32, or f16 with an even number of values along
/// dimension 1 and its address and strides multiples of 4 (read two values at a time); f32
/// sums in order of `k`, within rounding of the product of the copy. `Ok(false)` (nothing
/// queued) for other operands; the nodes then run one by one. The addresses are as for
/// [`launch`].
pub fn launch_transposed_product(
    kernels: &Kernels,
    stream: &Arc<CudaStream>,
    x: Operand,
    b: Operand,
    dst: Operand,
) -> Result<bool> {
    let ((xa, xt), (ba, bt), (da, dt)) = (x, b, dst);
    let floats = |t: &TensorArg| t.data % 4 == 0 && t.nb.iter().all(|nb| nb % 4 == 0);
    let halves = |t: &TensorArg| t.data % 4 == 0 && [0, 2, 3].into_iter().all(|d| t.nb[d] % 4 == 0);
    let x_fits = match xt {
        DType::F32 => floats(&xa) && xa.nb[1] == 4,
        DType::F16 => halves(&xa) && xa.nb[1] == 2 && xa.ne[1] % 2 == 0,
        _ => false,
    };
    let fits = x_fits
        && [bt, dt] == [DType::F32; 2]
        && [&ba, &da].into_iter().all(floats)
        && xa.ne[2] > 0
        && xa.ne[3] > 0
        && ba.ne[0] == xa.ne[0]
        && ba.ne[1] == 1
        && ba.ne[2] % xa.ne[2] == 0
        && ba.ne[3] % xa.ne[3] == 0
        && (1..=65535).contains(&ba.ne[2])
        && (1..=65535).contains(&ba.ne[3])
        && da.ne == [xa.ne[1], 1, ba.ne[2], ba.ne[3]]
        && (1..=i64::from(i32::MAX)).contains(&xa.ne[1]);
    if !fits || TensorArg::overlap(dst, x) || TensorArg::overlap(dst, b) {
        return Ok(false);
    }
    stream.context().bind_to_thread().map_err(|e| backend_error(&format!("binding the CUDA context failed: {e}")))?;
    launch::mul_mat_vec_t(kernels, stream, (&xa, xt), &ba, &da).map(|()| true)
}

/// Queues the products of `gate` and `up` with `b` (one column), then silu(gate product) *
/// (up product), into `dst` as one kernel: a SwiGLU feed-forward's MUL_MAT, SILU, MUL_MAT and
/// MUL nodes, with the bits of the nodes one after another. `Ok(false)` (nothing queued) where
/// the products are not matrix-vector products of weights of one type and shape; the nodes
/// then run one by one. The addresses are as for [`launch`].
pub fn launch_swiglu(
    kernels: &Kernels,
    stream: &Arc<CudaStream>,
    scratch: &mut Scratch,
    gate: Operand,
    up: Operand,
    b: Operand,
    dst: Operand,
) -> Result<bool> {
    if dst.0.nelements() == 0 || gate.0.ne[0] == 0 {
        return Ok(false);
    }
    stream.context().bind_to_thread().map_err(|e| backend_error(&format!("binding the CUDA context failed: {e}")))?;
    mul_mat::launch_swiglu(kernels, stream, scratch, gate, up, b, dst)
}

/// Queues a layer norm as one kernel: NORM (or RMS_NORM when `rms`) of `src` (plus
/// `residual`, of its shape, if given: the ADD of a residual connection before the norm) times
/// the row `w`, plus the row `b` if given, into `dst`, the bits of the nodes one after another.
/// The result is also left converted in `scratch` for the products that read it next: with at
/// most [`MMV_MAX_COLS`] rows (of a multiple of 32 values, `scratch` large enough) quantized for
/// the matrix-vector kernels; with more, packed as the GEMM of `next` (the weights and result
/// of the MUL_MAT after the norm, which reads its result) takes it. `Ok(false)` (nothing queued)
/// when the fused kernel does not take these operands; the nodes then run one by one. The
/// addresses are as for [`launch`].
#[allow(clippy::too_many_arguments)]
pub fn launch_norm_affine(
    kernels: &Kernels,
    stream: &Arc<CudaStream>,
    src: Operand,
    residual: Option<Operand>,
    dst: Operand,
    eps: f32,
    rms: bool,
    w: Operand,
    b: Option<Operand>,
    scratch: &mut Scratch,
    next: Option<(Operand, Operand)>,
) -> Result<bool> {
    // Each row is read before it is written: the result may lie exactly on a source, but not
    // across other rows of it.
    let apart = |s: Operand| s == dst || !TensorArg::overlap(s, dst);
    if src.0.nelements() == 0 || src.0.ne != dst.0.ne || !apart(src) || !residual.is_none_or(apart) {
        return Ok(false);
    }
    let rows = dst.0.nrows();
    let q8_bytes = usize::try_from(rows * (dst.0.ne[0] / 32)).unwrap_or(usize::MAX).saturating_mul(mul_mat::Q8_1_BYTES);
    let quantize =
        dst.1 == DType::F32 && dst.0.ne[0] % 32 == 0 && rows <= MMV_MAX_COLS && q8_bytes <= scratch.capacity();
    let packed = next
        .and_then(|(a, d)| mul_mat::packed_b(a, dst, d))
        .filter(|&(_, _, bytes)| !quantize && bytes <= scratch.capacity());
    // Where the next product reads q8_0 rows as 16-byte pieces, b quantized into their byte
    // layout (38 bytes a block, within the Q8_1 blocks' 40).
    let pieces = next.is_some_and(|(a, d)| d.0.ne[1] == 1 && mul_mat::q8_0_pieces(a));
    // The copy the kernel stores, and where the scratch holds it.
    let copy = match packed {
        _ if quantize && pieces => Some((launch::NormCopy::Q8_0Rows(scratch.reserve(q8_bytes)?), BLayout::Q8_0Rows, 0)),
        _ if quantize => Some((launch::NormCopy::Q8_1(scratch.reserve(q8_bytes)?), BLayout::Blocks, 0)),
        Some((layout @ BLayout::Packed { gemm, .. }, offset, bytes)) => {
            let at = scratch.reserve(bytes)? + offset as u64;
            Some((launch::NormCopy::Packed16 { at, bf16: gemm == DType::BF16 }, layout, offset))
        }
        _ => None,
    };
    let kind = copy.map_or(launch::NormCopy::None, |(kind, _, _)| kind);
    let launched = launch::norm_affine(kernels, stream, src, residual, dst, eps, rms, w, b, kind)?;
    if let (true, Some((_, layout, offset))) = (launched, copy) {
        scratch.set_converted(dst.0, layout, offset);
    }
    Ok(launched)
}

/// Queues an embeddings layer as one kernel: the layer norm (NORM, or RMS_NORM when `rms`, times
/// the row `w`, plus the row `b` if given) of rows `(a[ia[i]] + e) + c[ic[i]]`: the GET_ROWS of
/// tables `a` and `c` by I32 indices, the ADD of a row `e` to the first and the residual ADD of
/// the second, with the bits of the nodes one after another, into `dst` (f32 or f16 rows).
/// `Ok(false)` (nothing queued) when the kernel does not take these operands; the nodes then
/// run one by one. The addresses are as for [`launch`].
#[allow(clippy::too_many_arguments)]
pub fn launch_embeddings_norm(
    kernels: &Kernels,
    stream: &Arc<CudaStream>,
    first: (Operand, Operand),
    e: Operand,
    second: (Operand, Operand),
    dst: Operand,
    eps: f32,
    rms: bool,
    w: Operand,
    b: Option<Operand>,
) -> Result<bool> {
    let sources = [first.0, first.1, e, second.0, second.1, w].into_iter().chain(b);
    if sources.into_iter().any(|s| TensorArg::overlap(dst, s)) {
        return Ok(false);
    }
    stream.context().bind_to_thread().map_err(|e| backend_error(&format!("binding the CUDA context failed: {e}")))?;
    launch::norm_gathered(kernels, stream, first, e, second, dst, eps, rms, w, b)
}

/// Queues the kernel(s) of one node on `stream`.
///
/// `dst` and `srcs` are the node's destination and sources (slot `i` = source `i`), each with
/// the device address of its first value: for CPY the destination is source 1's memory. Every
/// address must point into device memory of `stream`'s context that stays allocated, and is not
/// written by other streams, until this work has run. `scratch` must serve `stream`
/// ([`Scratch::new`] with it). Nodes [`supports`] rejects are errors; view ops and leaves do
/// nothing.
pub fn launch(
    kernels: &Kernels,
    stream: &Arc<CudaStream>,
    scratch: &mut Scratch,
    op: Op,
    dst: Operand,
    srcs: &[Option<Operand>],
) -> Result<()> {
    let node = Node { op, dst, srcs };
    validate(&node).map_err(|why| Error::InvalidParam { op: op.name(), message: why })?;
    if op == Op::None || op.is_view() {
        return Ok(());
    }
    for (arg, dtype) in std::iter::once(&dst).chain(srcs.iter().flatten()) {
        let align = if dtype.is_quantized() { 2 } else { dtype.block_bytes() as u64 };
        if arg.data % align != 0 {
            return Err(Error::InvalidParam {
                op: op.name(),
                message: format!(
                    "a {} tensor at device address {:#x} is not {align}-byte aligned",
                    dtype.name(),
                    arg.data
                ),
            });
        }
    }
    if !Arc::ptr_eq(scratch.stream(), stream) && scratch.stream().cu_stream() != stream.cu_stream() {
        return Err(backend_error("the scratch given to launch serves another stream"));
    }
    if dst.0.nelements() == 0 {
        return Ok(());
    }
    // cuBLAS calls run in the thread's current context, which kernel launches set but a GEMM
    // needing no conversion would not.
    stream.context().bind_to_thread().map_err(|e| backend_error(&format!("binding the CUDA context failed: {e}")))?;
    launch::node(kernels, stream, scratch, &node)
}
