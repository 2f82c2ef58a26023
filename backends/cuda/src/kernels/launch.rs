//! Launch configurations and the launch of every op but MUL_MAT (see `mul_mat.rs`).
//!
//! Every node reaching here passed `validate`, which guarantees the kernel exists for its
//! types and that its shapes and strides are what the kernel addresses.

use std::ffi::c_void;
use std::sync::Arc;

use cudarc::driver::{sys, CudaFunction, CudaStream, DriverError, LaunchConfig};
use tessera_core::{BinaryOp, DType, Op, PoolKind, Precision, Result, RopeMode, UnaryOp};

use super::arg::TensorArg;
use super::validate::Node;
use super::{backend_error, mul_mat, names, Kernels, Operand, Scratch};

/// Most blocks of a grid; kernels stride over the rest.
const MAX_BLOCKS: i64 = 1 << 16;

/// Blocks that keep every multiprocessor of a large GPU busy (132 on an H100, two each).
const FILL_BLOCKS: i64 = 264;

/// Launches kernel `$name` with arguments `$arg` (references to values whose types match the
/// kernel's parameters one to one: `TensorArg`, `i32` for `int`, `i64` for `long long`, `f32`
/// for `float`, `u64` for a pointer).
macro_rules! launch_kernel {
    ($kernels:expr, $stream:expr, $name:expr, $cfg:expr, $($arg:expr),+ $(,)?) => {{
        let name: &str = $name;
        let kernels: &$crate::kernels::Kernels = $kernels;
        let function = kernels.get(name)?;
        let mut args = [$( ($arg) as *const _ as *mut ::std::ffi::c_void ),+];
        // SAFETY: the arguments match the parameters of kernel `name` in kernels/*.cu in number,
        // order and type (see each call), and every tensor they describe was validated: its
        // shape and strides are what the kernel addresses, inside memory the caller of `launch`
        // vouched for. The values `args` points to outlive the call, which copies them.
        unsafe { $crate::kernels::launch::launch_raw(kernels, $stream, function, $cfg, &mut args) }
            .map_err(|e| $crate::kernels::backend_error(&format!("launching {name} failed: {e}")))
    }};
}
pub(crate) use launch_kernel;

/// Queues `function` on `stream` with `args`, pointers to its parameters in order. Where the
/// kernels wait for the previous kernel themselves (`Kernels::overlap`), the launch allows it
/// to begin before that kernel ends (programmatic stream serialization).
///
/// # Safety
/// `args` must match the kernel's parameters in number, order and type, and the memory they
/// address must be valid for what the kernel does with it.
pub(crate) unsafe fn launch_raw(
    kernels: &Kernels,
    stream: &CudaStream,
    function: &CudaFunction,
    cfg: LaunchConfig,
    args: &mut [*mut c_void],
) -> std::result::Result<(), DriverError> {
    let mut overlap = sys::CUlaunchAttribute {
        id: sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
        pad: [0; 4],
        // SAFETY: the attribute's value is a plain integer inside a union of plain data.
        value: unsafe { std::mem::zeroed() },
    };
    overlap.value.programmaticStreamSerializationAllowed = 1;
    let config = sys::CUlaunchConfig {
        gridDimX: cfg.grid_dim.0,
        gridDimY: cfg.grid_dim.1,
        gridDimZ: cfg.grid_dim.2,
        blockDimX: cfg.block_dim.0,
        blockDimY: cfg.block_dim.1,
        blockDimZ: cfg.block_dim.2,
        sharedMemBytes: cfg.shared_mem_bytes,
        hStream: stream.cu_stream(),
        attrs: &mut overlap,
        numAttrs: u32::from(kernels.overlap),
    };
    // SAFETY: `config` and the attribute it points to live through the call; the function is a
    // loaded kernel of `stream`'s context; the arguments are the caller's promise.
    unsafe { sys::cuLaunchKernelEx(&config, function.cu_function(), args.as_mut_ptr(), std::ptr::null_mut()) }.result()
}

/// Threads of a FLASH_ATTN block of 16 query rows (`FA_THREADS` in flash_attn.cu), and query
/// rows per block beyond one.
const FLASH_ATTN_THREADS: u32 = 128;
const FLASH_ATTN_ROWS: i64 = 16;
/// Threads of a tensor-core FLASH_ATTN block (`FAM_THREADS` in flash_attn_mma.cu, 32 `WARPS` in
/// flash_attn_half.cu), and flash_attn_mma's query rows (`FAM_ROWS`; flash_attn_half's come
/// with its kernel's name from [`names::flash_attn_half`]).
const FLASH_ATTN_MMA_THREADS: u32 = 128;
const FLASH_ATTN_MMA_ROWS: i64 = 64;
/// Threads of a one-row FLASH_ATTN block (`FA_SPLIT_THREADS`), and the key positions it takes
/// (`FA_SPLIT_POSITIONS`).
const FLASH_ATTN_SPLIT_THREADS: u32 = 128;
const FLASH_ATTN_SPLIT_POSITIONS: i64 = 32;

/// Queues a validated FLASH_ATTN of `srcs` (queries, keys, values, mask) into `dst` on tensor
/// cores where a kernel takes it; `Ok(false)` (nothing queued) otherwise. `dst` is f32, or
/// packed f16 rows (a CPY of the result to f16 fused in) for the f16 kernel.
pub(crate) fn flash_attn_tensor_cores(
    kernels: &Kernels,
    stream: &Arc<CudaStream>,
    srcs: &[Option<Operand>],
    (dst, dt): Operand,
    scale: f32,
    precision: Precision,
) -> Result<bool> {
    let src = |i: usize| srcs.get(i).copied().flatten().ok_or_else(|| backend_error("FLASH_ATTN without its operands"));
    let ((q, _), (k, kt), (v, vt)) = (src(0)?, src(1)?, src(2)?);
    let mask = srcs.get(3).copied().flatten();
    // Without a mask the kernel never reads its mask argument: pass the queries.
    let (m, mt) = mask.unwrap_or((q, DType::F32));
    let (has_mask, mask_f16) = (i32::from(mask.is_some()), i32::from(mt == DType::F16));
    let reduced = precision == Precision::Reduced;
    // Validated: at most 65535 heads and batches.
    let cfg = |rows_a_block| LaunchConfig {
        grid_dim: (div_ceil(q.ne[1], rows_a_block) as u32, q.ne[2] as u32, q.ne[3] as u32),
        block_dim: (FLASH_ATTN_MMA_THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    // f16 keys and values in reduced precision: on f16 tensor cores, copied 16 bytes at a time
    // (queries read 8 bytes at a time, an f16 result written 16 bytes at a time).
    let one_mask_row = mask.is_none_or(|(m, _)| m.ne[1] == 1);
    let wide_blocks = div_ceil(q.ne[1], 128).saturating_mul(q.ne[2]).saturating_mul(q.ne[3]);
    let many_blocks =
        wide_blocks >= names::FLASH_ATTN_HALF_WIDE_BLOCKS_PER_SM.saturating_mul(kernels.multiprocessors());
    let half = names::flash_attn_half(kt, vt, (q.ne[0], v.ne[0]), (q.ne[1], k.ne[1]), one_mask_row, many_blocks)
        .filter(|_| reduced && rows_on_16_bytes(&k) && rows_on_16_bytes(&v) && rows_on(&q, 8));
    let out_f16 = match dt {
        DType::F32 => 0i32,
        DType::F16 if half.is_some() && dst.nb[0] == 2 && rows_on_16_bytes(&dst) => 1,
        _ => return Ok(false),
    };
    if let Some((name, rows)) = half {
        // flash_attn_half_*(TensorArg q, TensorArg k, TensorArg v, TensorArg mask, TensorArg dst,
        //                   float scale, int has_mask, int mask_f16, int out_f16)
        let cfg = cfg(rows);
        launch_kernel!(kernels, stream, name, cfg, &q, &k, &v, &m, &dst, &scale, &has_mask, &mask_f16, &out_f16)?;
        return Ok(true);
    }
    let Some(name) = names::flash_attn_mma(kt, q.ne[0], v.ne[0], q.ne[1], reduced) else { return Ok(false) };
    // flash_attn_mma_*(TensorArg q, TensorArg k, TensorArg v, TensorArg mask, TensorArg dst,
    //                  float scale, int has_mask, int mask_f16)
    let cfg = cfg(FLASH_ATTN_MMA_ROWS);
    launch_kernel!(kernels, stream, name, cfg, &q, &k, &v, &m, &dst, &scale, &has_mask, &mask_f16)?;
    Ok(true)
}

/// Threads a block of `mul_mat_vec_t_f32` and `_f16` (`MMVT_THREADS` in mul_mat_vec_t.cu).
const MMVT_THREADS: u32 = 128;

/// Queues `mul_mat_vec_t_f32`, or `mul_mat_vec_t_f16` for an f16 `x` (mul_mat_vec_t.cu), for
/// operands checked by [`super::launch_transposed_product`].
pub(crate) fn mul_mat_vec_t(
    kernels: &Kernels,
    stream: &Arc<CudaStream>,
    x: (&TensorArg, DType),
    b: &TensorArg,
    dst: &TensorArg,
) -> Result<()> {
    let (name, per_thread) = if x.1 == DType::F16 { (names::MUL_MAT_VEC_T_F16, 2) } else { (names::MUL_MAT_VEC_T, 1) };
    let x = x.0;
    // Checked: at most i32::MAX values along dimension 1, at most 65535 matrices each way.
    let cfg = LaunchConfig {
        grid_dim: (div_ceil(x.ne[1], per_thread * i64::from(MMVT_THREADS)) as u32, b.ne[2] as u32, b.ne[3] as u32),
        block_dim: (MMVT_THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    // mul_mat_vec_t_f32/_f16(TensorArg x, TensorArg b, TensorArg dst)
    launch_kernel!(kernels, stream, name, cfg, x, b, dst)
}

/// Whether every row of `t` starts on a 16-byte boundary.
fn rows_on_16_bytes(t: &TensorArg) -> bool {
    rows_on(t, 16)
}

/// Whether every row of `t` starts on a multiple of `bytes`.
fn rows_on(t: &TensorArg, bytes: i64) -> bool {
    t.data % bytes.unsigned_abs() == 0 && t.nb[1..].iter().all(|nb| nb % bytes == 0)
}

/// How a one-row FLASH_ATTN is split: key chunks per head, the kernels' row width, and the
/// bytes of the partial results (per chunk, head and batch: maximum, sum, `width` sums).
pub(crate) struct FlashAttnSplit {
    pub chunks: i64,
    pub width: i64,
    pub bytes: usize,
}

/// The split of a one-row FLASH_ATTN of `q` over `k` and `v`; `None` past what one launch
/// addresses.
pub(crate) fn flash_attn_split(q: &TensorArg, k: &TensorArg, v: &TensorArg) -> Option<FlashAttnSplit> {
    let width = names::flash_attn_width(q.ne[0].max(v.ne[0]))?;
    let chunks = div_ceil(k.ne[1], FLASH_ATTN_SPLIT_POSITIONS).max(1);
    let floats = chunks.checked_mul(q.ne[2])?.checked_mul(q.ne[3])?.checked_mul(2 + width)?;
    (chunks <= i64::from(i32::MAX)).then_some(FlashAttnSplit {
        chunks,
        width,
        bytes: usize::try_from(floats).ok()?.checked_mul(4)?,
    })
}

/// `freq_base^(-2k / n_dims)` of ROPE's first 64 pairs k, as the kernel computes them (f32
/// exponent, f64 power rounded to f32): `RopePowers` in rope.cuh.
#[repr(C)]
pub(crate) struct RopePowers {
    p: [f32; 64],
    count: i32,
}

impl RopePowers {
    pub(crate) fn new(freq_base: f32, n_dims: i64) -> RopePowers {
        let count = (n_dims / 2).clamp(0, 64) as usize;
        let mut p = [0.0f32; 64];
        for (k, power) in p.iter_mut().enumerate().take(count) {
            let exponent = -((2 * k) as f32) / n_dims as f32;
            *power = f64::from(freq_base).powf(f64::from(exponent)) as f32;
        }
        RopePowers { p, count: count as i32 }
    }
}

/// `n / d` rounded up, for `n >= 0`, `d > 0`.
pub(crate) fn div_ceil(n: i64, d: i64) -> i64 {
    n / d + i64::from(n % d != 0)
}

fn blocks(n: i64) -> u32 {
    n.clamp(1, MAX_BLOCKS) as u32
}

/// Element-wise kernels: 256 threads, `x` along dimension 0 (the power of two from 32 to 256
/// closest above `ne0`), `y` along rows; one grid row per `y` rows, at most 65536 blocks. Where
/// that makes fewer than [`FILL_BLOCKS`] blocks, grid `y` splits dimension 0 too (a decoded
/// token's activations are one row of thousands of values).
pub(crate) fn elementwise_config(ne0: i64, nrows: i64) -> LaunchConfig {
    let bx = (ne0.clamp(1, 256) as u32).next_power_of_two().max(32);
    let by = 256 / bx;
    let grid_x = blocks(div_ceil(nrows, i64::from(by)));
    let pieces = div_ceil(ne0, i64::from(bx)).min(div_ceil(FILL_BLOCKS, i64::from(grid_x))).clamp(1, 65535);
    LaunchConfig { grid_dim: (grid_x, pieces as u32, 1), block_dim: (bx, by, 1), shared_mem_bytes: 0 }
}

/// Row reductions: one block per row (the power of two from 32 to 512 closest above `ne0`
/// threads), at most 65536 blocks.
pub(crate) fn row_config(ne0: i64, nrows: i64) -> LaunchConfig {
    let threads = (ne0.clamp(1, 512) as u32).next_power_of_two().max(32);
    LaunchConfig { grid_dim: (blocks(nrows), 1, 1), block_dim: (threads, 1, 1), shared_mem_bytes: 0 }
}

/// Whether every row of `t` (dimension 0, values of `es` bytes) is packed and starts on a
/// 16-byte boundary, as the kernels that load rows 16 bytes at a time need.
pub(crate) fn rows_16_byte_aligned(t: &TensorArg, es: i64) -> bool {
    (t.ne[0] <= 1 || t.nb[0] == es) && t.data % 16 == 0 && (1..4).all(|d| t.ne[d] <= 1 || t.nb[d] % 16 == 0)
}

/// Blocks of a fused layer norm per SM, so that each row group takes several rows: 8 times what
/// an SM holds at once of the warp-per-row kernels (6 blocks of 128 threads), 16 times of the
/// block-per-row ones (3 of 256), 4 times of the f16 kernel's rows of up to 384 values (12). On
/// an H200 MiniLM's 131072 rows of 384 values took 130 us this way, 134 with 16 blocks an SM,
/// 146 with a block for every 4 rows (one each warp, no next row to prefetch); in f16, with a
/// residual, 85 us in the model's graph against 92 with a block for every 4 rows (ncu: 47.3
/// against 61.8 million instructions issued: each warp's set-up serves several rows), and the
/// whole f16 model at 1024 x 128 tokens 1.3-1.8% less time.
const NORM_BLOCKS_PER_SM: i64 = 48;

/// Longest row the packed-row kernels (rows_packed.cu) take, and the longest they take on a
/// warp per row rather than a block per row.
const PACKED_ROW_MAX: i64 = 8192;
const PACKED_WARP_ROW_MAX: i64 = 1024;

/// The packed-row kernel (rows_packed.cu) for SOFT_MAX, NORM and RMS_NORM of `src` into `dst`,
/// if both are f32 with packed rows of a multiple of 4 values, at most 8192, every row starting
/// on a 16-byte boundary: the longest row it takes (its name's `row<N>`), the power of two
/// from 128 up closest above `ne0`, so that each thread holds as few 16-byte pieces as it can.
pub(crate) fn packed_rows(src: Operand, dst: Operand) -> Option<i64> {
    let ((s, st), (d, dt)) = (src, dst);
    let ok = st == DType::F32 && dt == DType::F32 && rows_16_byte_aligned(&s, 4) && rows_16_byte_aligned(&d, 4);
    packed_row_kernel(s.ne[0]).filter(|_| ok)
}

/// The longest row of the packed-row kernel that takes rows of `ne0` values, if one does (see
/// [`packed_rows`]).
fn packed_row_kernel(ne0: i64) -> Option<i64> {
    let ok = ne0 > 0 && ne0 % 4 == 0 && ne0 <= PACKED_ROW_MAX;
    // ne0 is positive: the conversions are exact.
    ok.then(|| (ne0.max(128) as u64).next_power_of_two() as i64)
}

/// Packed-row kernels for rows of up to `max_ne0` values: a warp per row (blocks of 128
/// threads, 4 rows each) up to 1024 values, else a block of 256 threads per row; at most 65536
/// blocks (the kernels stride over the rest).
pub(crate) fn packed_rows_config(max_ne0: i64, nrows: i64) -> LaunchConfig {
    let (threads, rows_per_block) = if max_ne0 <= PACKED_WARP_ROW_MAX { (128, 4) } else { (256, 1) };
    LaunchConfig {
        grid_dim: (blocks(div_ceil(nrows, rows_per_block)), 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Whether `t` is one packed run of `es`-byte values (dimensions of one value may have any
/// stride) starting on a 16-byte boundary.
fn packed_16_byte_aligned(t: &TensorArg, es: i64) -> bool {
    let mut stride = es;
    for d in 0..4 {
        if t.ne[d] > 1 && t.nb[d] != stride {
            return false;
        }
        stride = stride.saturating_mul(t.ne[d]);
    }
    t.data % 16 == 0
}

/// Whether ADD, SUB, MUL or DIV of `a` and `b` into `dst` runs `binary_f32_packed`: all three
/// f32, packed and 16-byte aligned, rows of a multiple of 4 values, and `b` either of `a`'s
/// shape or one row repeated over all of `a`'s.
pub(crate) fn binary_packed(a: Operand, b: Operand, dst: Operand) -> bool {
    let ((a, at), (b, bt), (d, dt)) = (a, b, dst);
    [at, bt, dt].iter().all(|&t| t == DType::F32)
        && a.ne[0] % 4 == 0
        && (b.ne == a.ne || b.ne == [a.ne[0], 1, 1, 1])
        && [a, b, d].iter().all(|t| packed_16_byte_aligned(t, 4))
}

/// How many values a thread of `unary_f32_packed` (4, both f32) or `unary_f16_packed` (8, both
/// f16) takes at a time where a unary op or SCALE of `a` into `dst` runs one of them: both packed
/// and 16-byte aligned, with a multiple of that many values; `None` otherwise.
pub(crate) fn unary_packed(a: Operand, dst: Operand) -> Option<i64> {
    let ((a, at), (d, dt)) = (a, dst);
    match (at, dt) {
        (DType::F32, DType::F32) => {
            let packed = d.nelements() % 4 == 0 && [a, d].iter().all(|t| packed_16_byte_aligned(t, 4));
            packed.then_some(4)
        }
        (DType::F16, DType::F16) => {
            let packed = d.nelements() % 8 == 0 && [a, d].iter().all(|t| packed_16_byte_aligned(t, 2));
            packed.then_some(8)
        }
        _ => None,
    }
}

/// Threads of `binary_f32_packed` and `unary_f32_packed` per block, and float4s per thread
/// per iteration (`BINARY_PACKED_UNROLL` in elementwise.cu).
const BINARY_PACKED_THREADS: u32 = 256;
const BINARY_PACKED_UNROLL: i64 = 4;

/// `binary_f32_packed` over `n4` float4s: one iteration per thread where 65536 blocks suffice.
pub(crate) fn binary_packed_config(n4: i64) -> LaunchConfig {
    let per_block = i64::from(BINARY_PACKED_THREADS) * BINARY_PACKED_UNROLL;
    LaunchConfig {
        grid_dim: (blocks(div_ceil(n4, per_block)), 1, 1),
        block_dim: (BINARY_PACKED_THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// The kernel's name, which validation guarantees exists.
fn kernel(name: Option<&'static str>) -> Result<&'static str> {
    name.ok_or_else(|| backend_error("no kernel for a validated node"))
}

/// The kernels' code of each binary op (`OP_*` in elementwise.cu).
fn binary_code(op: BinaryOp) -> i32 {
    match op {
        BinaryOp::Add => 0,
        BinaryOp::Sub => 1,
        BinaryOp::Mul => 2,
        BinaryOp::Div => 3,
    }
}

/// The kernels' code of each unary function (`UOP_*` in elementwise.cu); SCALE is 11.
fn unary_code(op: UnaryOp) -> i32 {
    match op {
        UnaryOp::Sqr => 0,
        UnaryOp::Sqrt => 1,
        UnaryOp::Neg => 2,
        UnaryOp::Abs => 3,
        UnaryOp::Exp => 4,
        UnaryOp::Relu => 5,
        UnaryOp::Gelu => 6,
        UnaryOp::GeluErf => 7,
        UnaryOp::Silu => 8,
        UnaryOp::Sigmoid => 9,
        UnaryOp::Tanh => 10,
    }
}
const SCALE_CODE: i32 = 11;

fn to_i64(v: usize) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Launches the kernels of a validated node whose destination is not empty.
pub(crate) fn node(kernels: &Kernels, stream: &Arc<CudaStream>, scratch: &mut Scratch, node: &Node) -> Result<()> {
    let src = |i: usize| node.src(i).map_err(|why| backend_error(&why));
    let (dst, dt) = node.dst;
    match node.op {
        Op::None | Op::View | Op::Reshape | Op::Permute(_) | Op::Transpose => Ok(()),
        Op::Binary(op) => {
            let ((a, at), (b, bt)) = (src(0)?, src(1)?);
            let code = binary_code(op);
            let (name, cfg) = if binary_packed((a, at), (b, bt), node.dst) {
                (names::BINARY_F32_PACKED, binary_packed_config(dst.nelements() / 4))
            } else {
                (kernel(names::binary(at, bt))?, elementwise_config(dst.ne[0], dst.nrows()))
            };
            // binary_*(TensorArg a, TensorArg b, TensorArg dst, int op)
            launch_kernel!(kernels, stream, name, cfg, &a, &b, &dst, &code)
        }
        Op::Scale(_) | Op::Unary(_) => {
            let (a, at) = src(0)?;
            let (code, s) = match node.op {
                Op::Scale(s) => (SCALE_CODE, s),
                Op::Unary(u) => (unary_code(u), 1.0f32),
                _ => return Err(backend_error("not a unary op")),
            };
            let (name, cfg) = if let Some(values) = unary_packed((a, at), node.dst) {
                let name = if values == 8 { names::UNARY_F16_PACKED } else { names::UNARY_F32_PACKED };
                (name, binary_packed_config(dst.nelements() / values))
            } else {
                (kernel(names::unary(at))?, elementwise_config(dst.ne[0], dst.nrows()))
            };
            // unary_*(TensorArg src, TensorArg dst, int op, float s)
            launch_kernel!(kernels, stream, name, cfg, &a, &dst, &code, &s)
        }
        Op::SumRows | Op::Mean => {
            let (a, at) = src(0)?;
            let mean = i32::from(node.op == Op::Mean);
            let cfg = row_config(a.ne[0], a.nrows());
            // sum_rows_*(TensorArg src, TensorArg dst, int mean)
            launch_kernel!(kernels, stream, kernel(names::sum_rows(at, dt))?, cfg, &a, &dst, &mean)
        }
        Op::Argmax => {
            let (a, at) = src(0)?;
            let cfg = row_config(a.ne[0], a.ne[1]);
            // argmax_*(TensorArg src, TensorArg dst)
            launch_kernel!(kernels, stream, kernel(names::argmax(at))?, cfg, &a, &dst)
        }
        Op::SoftMax { scale } => {
            let (a, at) = src(0)?;
            let mask = node.srcs.get(1).copied().flatten();
            // Without a mask the kernel never reads its mask argument: pass the source.
            let (m, mt) = mask.unwrap_or((a, DType::F32));
            let has_mask = i32::from(mask.is_some());
            let (name, cfg) = match packed_rows((a, at), node.dst) {
                Some(max_ne0) => (names::soft_max_packed(mt, max_ne0), packed_rows_config(max_ne0, a.nrows())),
                None => (names::soft_max(at, mt), row_config(a.ne[0], a.nrows())),
            };
            // soft_max_*(TensorArg src, TensorArg mask, TensorArg dst, float scale, int has_mask)
            launch_kernel!(kernels, stream, kernel(name)?, cfg, &a, &m, &dst, &scale, &has_mask)
        }
        Op::Norm { eps } | Op::RmsNorm { eps } => {
            let (a, at) = src(0)?;
            let rms = i32::from(matches!(node.op, Op::RmsNorm { .. }));
            if let Some(max_ne0) = packed_rows((a, at), node.dst) {
                let cfg = packed_rows_config(max_ne0, a.nrows());
                // norm_f32_row*(TensorArg src, int src_half, TensorArg dst, int dst_half,
                //               float eps, int rms, TensorArg w, TensorArg b, int affine,
                //               TensorArg r, int residual, void *copy, int copy_type): f32 rows;
                //               no weight, bias, residual (never read) or copy.
                let (half, affine, residual, copy, copy_type) = (0i32, 0i32, 0i32, 0u64, 0i32);
                return launch_kernel!(
                    kernels,
                    stream,
                    kernel(names::norm_packed_for(a.ne[0], max_ne0))?,
                    cfg,
                    &a,
                    &half,
                    &dst,
                    &half,
                    &eps,
                    &rms,
                    &a,
                    &a,
                    &affine,
                    &a,
                    &residual,
                    &copy,
                    &copy_type
                );
            }
            let cfg = row_config(a.ne[0], a.nrows());
            // norm_*(TensorArg src, TensorArg dst, float eps, int rms)
            launch_kernel!(kernels, stream, kernel(names::norm(at))?, cfg, &a, &dst, &eps, &rms)
        }
        Op::DiagMaskInf { n_past } => {
            let (a, at) = src(0)?;
            let n_past = to_i64(n_past);
            let cfg = elementwise_config(dst.ne[0], dst.nrows());
            // diag_mask_inf_*(TensorArg src, TensorArg dst, long long n_past)
            launch_kernel!(kernels, stream, kernel(names::diag_mask_inf(at))?, cfg, &a, &dst, &n_past)
        }
        Op::Rope(p) => {
            let ((a, at), (pos, _)) = (src(0)?, src(1)?);
            let n_dims = to_i64(p.n_dims);
            let mode: i32 = match p.mode {
                RopeMode::Normal => 0,
                RopeMode::Neox => 2,
            };
            let (freq_base, freq_scale) = (p.freq_base, p.freq_scale);
            // One thread per rotated pair and per passed-through value.
            let slots = n_dims / 2 + (dst.ne[0] - n_dims);
            let cfg = elementwise_config(slots, dst.nrows());
            let powers = RopePowers::new(freq_base, n_dims);
            // rope_*(TensorArg src, TensorArg pos, TensorArg dst, long long n_dims, int mode,
            //        float freq_base, float freq_scale, RopePowers powers)
            launch_kernel!(
                kernels,
                stream,
                kernel(names::rope(at))?,
                cfg,
                &a,
                &pos,
                &dst,
                &n_dims,
                &mode,
                &freq_base,
                &freq_scale,
                &powers
            )
        }
        Op::MulMat => mul_mat::launch(kernels, stream, scratch, src(0)?, src(1)?, node.dst),
        Op::GetRows => {
            let ((a, at), (idx, _)) = (src(0)?, src(1)?);
            // Packed float rows of a multiple of 8 values on 16-byte boundaries: 8 a thread.
            let x8 = names::get_rows_x8(at).filter(|_| {
                dt == DType::F32
                    && dst.ne[0] % 8 == 0
                    && rows_16_byte_aligned(&a, at.block_bytes() as i64)
                    && rows_16_byte_aligned(&dst, 4)
            });
            if let Some(name) = x8 {
                let cfg = LaunchConfig {
                    grid_dim: (blocks(div_ceil(dst.nelements() / 8, 256)), 1, 1),
                    block_dim: (256, 1, 1),
                    shared_mem_bytes: 0,
                };
                // get_rows_x8_*(TensorArg a, TensorArg idx, TensorArg dst)
                return launch_kernel!(kernels, stream, name, cfg, &a, &idx, &dst);
            }
            let cfg = elementwise_config(dst.ne[0], dst.nrows());
            // get_rows_*(TensorArg a, TensorArg idx, TensorArg dst)
            launch_kernel!(kernels, stream, kernel(names::get_rows(at))?, cfg, &a, &idx, &dst)
        }
        Op::Cpy | Op::Cont => copy(kernels, stream, src(0)?, node.dst),
        Op::SetRows => {
            let ((b, _), (idx, _)) = (src(0)?, src(1)?);
            let cfg = elementwise_config(b.ne[0], b.nrows());
            // set_rows_*(TensorArg b, TensorArg idx, TensorArg dst)
            launch_kernel!(kernels, stream, kernel(names::set_rows(dt))?, cfg, &b, &idx, &dst)
        }
        Op::FlashAttn { scale, precision } => {
            if flash_attn_tensor_cores(kernels, stream, node.srcs, node.dst, scale, precision)? {
                return Ok(());
            }
            let ((q, _), (k, kt), (v, _)) = (src(0)?, src(1)?, src(2)?);
            let mask = node.srcs.get(3).copied().flatten();
            // Without a mask the kernel never reads its mask argument: pass the queries.
            let (m, mt) = mask.unwrap_or((q, DType::F32));
            let (has_mask, mask_f16) = (i32::from(mask.is_some()), i32::from(mt == DType::F16));
            let head = q.ne[0].max(v.ne[0]);
            let name = kernel(names::flash_attn(kt, head, q.ne[1]))?;
            if q.ne[1] == 1 {
                // One query row: per chunk of keys, then merged per head (validated: at most
                // 65535 heads and batches).
                let plan = flash_attn_split(&q, &k, &v).ok_or_else(|| backend_error("FLASH_ATTN split too large"))?;
                let partials = scratch.reserve(plan.bytes)?;
                let cfg = LaunchConfig {
                    grid_dim: (plan.chunks as u32, q.ne[2] as u32, q.ne[3] as u32),
                    block_dim: (FLASH_ATTN_SPLIT_THREADS, 1, 1),
                    shared_mem_bytes: 0,
                };
                // flash_attn_*_r1_*(TensorArg q, TensorArg k, TensorArg v, TensorArg mask,
                //                   TensorArg dst, float scale, int has_mask, int mask_f16, float *partials)
                launch_kernel!(
                    kernels, stream, name, cfg, &q, &k, &v, &m, &dst, &scale, &has_mask, &mask_f16, &partials
                )?;
                let cfg = LaunchConfig {
                    grid_dim: (q.ne[2] as u32, q.ne[3] as u32, 1),
                    block_dim: (plan.width as u32, 1, 1),
                    shared_mem_bytes: 0,
                };
                let chunks = plan.chunks as i32;
                // flash_attn_combine_*(const float *partials, TensorArg dst, int chunks)
                return launch_kernel!(
                    kernels,
                    stream,
                    kernel(names::flash_attn_combine(head))?,
                    cfg,
                    &partials,
                    &dst,
                    &chunks
                );
            }
            // Validated: at most 65535 heads and batches; query tiles fit the grid's x.
            let cfg = LaunchConfig {
                grid_dim: (div_ceil(q.ne[1], FLASH_ATTN_ROWS) as u32, q.ne[2] as u32, q.ne[3] as u32),
                block_dim: (FLASH_ATTN_THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            let no_partials = 0u64;
            // flash_attn_*_r16_*(TensorArg q, TensorArg k, TensorArg v, TensorArg mask,
            //                    TensorArg dst, float scale, int has_mask, int mask_f16, float *partials)
            launch_kernel!(kernels, stream, name, cfg, &q, &k, &v, &m, &dst, &scale, &has_mask, &mask_f16, &no_partials)
        }
        Op::Concat { dim } => {
            let ((a, at), (b, _)) = (src(0)?, src(1)?);
            let dim = i32::try_from(dim).map_err(|_| backend_error("CONCAT dimension out of range"))?;
            let cfg = elementwise_config(dst.ne[0], dst.nrows());
            // concat_*(TensorArg a, TensorArg b, TensorArg dst, int dim)
            launch_kernel!(kernels, stream, kernel(names::concat(at))?, cfg, &a, &b, &dst, &dim)
        }
        Op::Im2Col(p) => {
            let ((k, _), (input, it)) = (src(0)?, src(1)?);
            let (s0, s1, p0, p1, d0, d1) =
                (to_i64(p.s0), to_i64(p.s1), to_i64(p.p0), to_i64(p.p1), to_i64(p.d0), to_i64(p.d1));
            // The 1-D form is the 2-D one with a dimension of size 1 inserted: the input
            // [IW, IC, N] seen as [IW, 1, IC, N], the result [IC*KW, OW, N] as [IC*KW, OW, 1, N].
            let (input, out, kw, kh, s1, p1, d1) = if p.is_2d {
                (input, dst, k.ne[0], k.ne[1], s1, p1, d1)
            } else {
                let input = TensorArg {
                    data: input.data,
                    ne: [input.ne[0], 1, input.ne[1], input.ne[2]],
                    nb: [input.nb[0], input.nb[1], input.nb[1], input.nb[2]],
                };
                let out = TensorArg {
                    data: dst.data,
                    ne: [dst.ne[0], dst.ne[1], 1, dst.ne[2]],
                    nb: [dst.nb[0], dst.nb[1], dst.nb[2], dst.nb[2]],
                };
                (input, out, k.ne[0], 1, 1, 0, 1)
            };
            let cfg = elementwise_config(out.ne[0], out.nrows());
            // im2col_*(TensorArg input, TensorArg dst, long long kw, long long kh, long long s0,
            //          long long s1, long long p0, long long p1, long long d0, long long d1)
            launch_kernel!(
                kernels,
                stream,
                kernel(names::im2col(it, dt))?,
                cfg,
                &input,
                &out,
                &kw,
                &kh,
                &s0,
                &s1,
                &p0,
                &p1,
                &d0,
                &d1
            )
        }
        Op::Pool2d(p) => {
            let (a, at) = src(0)?;
            let kind: i32 = match p.kind {
                PoolKind::Max => 0,
                PoolKind::Avg => 1,
            };
            let (k0, k1, s0, s1, p0, p1) =
                (to_i64(p.k0), to_i64(p.k1), to_i64(p.s0), to_i64(p.s1), to_i64(p.p0), to_i64(p.p1));
            let cfg = elementwise_config(dst.ne[0], dst.nrows());
            // pool_2d_*(TensorArg src, TensorArg dst, int kind, long long k0, long long k1,
            //           long long s0, long long s1, long long p0, long long p1)
            launch_kernel!(
                kernels,
                stream,
                kernel(names::pool_2d(at))?,
                cfg,
                &a,
                &dst,
                &kind,
                &k0,
                &k1,
                &s0,
                &s1,
                &p0,
                &p1
            )
        }
    }
}

/// CPY and CONT (also MUL_MAT's conversions of its operands): `src`'s values in row-major order
/// into `dst`, converted to `dst`'s type.
pub(crate) fn copy(
    kernels: &Kernels,
    stream: &Arc<CudaStream>,
    src: (TensorArg, DType),
    dst: (TensorArg, DType),
) -> Result<()> {
    let ((a, at), (d, dt)) = (src, dst);
    if let Some((name, cfg)) = transposed_copy((&a, at), (&d, dt)) {
        // cpy_transposed_*(TensorArg src, TensorArg dst)
        return launch_kernel!(kernels, stream, name, cfg, &a, &d);
    }
    // Quantizing kernels take one block of 32 values per thread.
    let per_row = if dt.is_quantized() { d.ne[0] / dt.block_len() as i64 } else { d.ne[0] };
    let cfg = elementwise_config(per_row, d.nrows());
    // cpy_*(TensorArg src, TensorArg dst)
    launch_kernel!(kernels, stream, kernel(names::cpy(at, dt))?, cfg, &a, &d)
}

/// The tiled kernel and launch for a copy of `a` into packed rows of `d` of its type and shape
/// where `a` is a transposed view (its dimension 1 packed, dimension 0 strided); `None` for
/// other copies, or grids too large (over 65535 tiles down dimension 0, or 65535 planes).
fn transposed_copy((a, at): (&TensorArg, DType), (d, dt): (&TensorArg, DType)) -> Option<(&'static str, LaunchConfig)> {
    let name = names::cpy_transposed(at).filter(|_| at == dt && a.ne == d.ne)?;
    let es = at.block_bytes() as i64;
    let transposed = a.ne[0] > 1 && a.ne[1] > 1 && a.nb[1] == es && a.nb[0] != es && d.nb[0] == es;
    let (tiles0, tiles1, planes) = (div_ceil(a.ne[0], 32), div_ceil(a.ne[1], 32), a.ne[2] * a.ne[3]);
    if !transposed || tiles0 > 65535 || planes > 65535 || tiles1 > i64::from(u32::MAX >> 1) {
        return None;
    }
    let cfg = LaunchConfig {
        grid_dim: (tiles1 as u32, tiles0 as u32, planes as u32),
        block_dim: (32, 8, 1),
        shared_mem_bytes: 0,
    };
    Some((name, cfg))
}

/// What a fused norm also stores of its result (`NORM_COPY_*` in rows_packed.cu).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NormCopy {
    None,
    /// Q8_1 blocks at this address.
    Q8_1(u64),
    /// Quants in q8_0 rows' byte layout and their scales at this address
    /// ([`BLayout::Q8_0Rows`](super::scratch::BLayout::Q8_0Rows)).
    Q8_0Rows(u64),
    /// Packed f16 (or bf16) rows at `at`.
    Packed16 {
        at: u64,
        bf16: bool,
    },
}

/// A layer norm fused into one kernel: NORM or RMS_NORM (`rms`) of `src` (plus `residual`, of
/// its shape, if given), times the row `w`, plus the row `b` if given, into `dst`, the same bits
/// as the ops one after another. `Ok(false)` (nothing queued) unless the packed-row kernel
/// takes `src` and `w` and `b` are packed f32 rows of `src`'s length on 16-byte boundaries.
/// `src`, `residual` and `dst` are packed rows of one shape, of f32 or f16 values, each row
/// on a 16-byte boundary (an f16 `src` is widened exactly, as a CPY before the nodes; an f16
/// `dst` takes the result rounded to f16, as a CPY after them). The result is also stored as
/// `copy` says.
#[allow(clippy::too_many_arguments)]
pub(crate) fn norm_affine(
    kernels: &Kernels,
    stream: &Arc<CudaStream>,
    src: Operand,
    residual: Option<Operand>,
    dst: Operand,
    eps: f32,
    rms: bool,
    w: Operand,
    b: Option<Operand>,
    copy: NormCopy,
) -> Result<bool> {
    // f32 or f16 rows of `src`'s shape, packed on 16-byte boundaries.
    let rows_like_src = |(t, dt): Operand| {
        let size = match dt {
            DType::F32 => 4,
            DType::F16 => 2,
            _ => return false,
        };
        t.ne == src.0.ne && rows_16_byte_aligned(&t, size)
    };
    let operands = rows_like_src(src) && rows_like_src(dst) && residual.is_none_or(rows_like_src);
    let Some(max_ne0) = packed_row_kernel(src.0.ne[0]).filter(|_| operands) else { return Ok(false) };
    let row = |(t, dt): Operand| dt == DType::F32 && t.ne == [src.0.ne[0], 1, 1, 1] && packed_16_byte_aligned(&t, 4);
    if !row(w) || !b.is_none_or(row) {
        return Ok(false);
    }
    let (a, d) = (src.0, dst.0);
    let (wt, bt) = (w.0, b.map_or(w.0, |b| b.0));
    let (rms, affine) = (i32::from(rms), if b.is_some() { 2i32 } else { 1 });
    // 0: no residual, 1: f32 rows, 2: f16 rows.
    let (r, has_r) = match residual {
        None => (a, 0i32),
        Some((r, dt)) => (r, if dt == DType::F16 { 2 } else { 1 }),
    };
    let (src_half, dst_half) = (i32::from(src.1 == DType::F16), i32::from(dst.1 == DType::F16));
    // At most NORM_BLOCKS_PER_SM blocks an SM: each row group then takes several rows.
    let mut cfg = packed_rows_config(max_ne0, a.nrows());
    let most = u32::try_from(NORM_BLOCKS_PER_SM * kernels.multiprocessors()).unwrap_or(u32::MAX);
    cfg.grid_dim.0 = cfg.grid_dim.0.min(most);
    // f16 rows into f16 rows with no copy (a residual stream kept in f16): a warp a row, the
    // weight and bias rows staged in shared memory once a block.
    let f16_rows = src_half == 1 && dst_half == 1 && has_r != 1 && copy == NormCopy::None;
    if let Some(name) = names::norm_packed_f16(a.ne[0], max_ne0).filter(|_| f16_rows) {
        // norm_f16_row*(TensorArg src, TensorArg dst, float eps, int rms, TensorArg w, TensorArg b,
        //               int affine, TensorArg r, int residual)
        let has_r = i32::from(has_r != 0);
        launch_kernel!(kernels, stream, name, cfg, &a, &d, &eps, &rms, &wt, &bt, &affine, &r, &has_r)?;
        return Ok(true);
    }
    // Else each row group prefetches its next row into L1 while it reduces one.
    let (at, copy_type) = match copy {
        NormCopy::None => (0u64, 0i32),
        NormCopy::Q8_1(at) => (at, 1),
        NormCopy::Packed16 { at, bf16 } => (at, if bf16 { 3 } else { 2 }),
        NormCopy::Q8_0Rows(at) => (at, 4),
    };
    // norm_f32_row*(TensorArg src, int src_half, TensorArg dst, int dst_half, float eps, int rms,
    //               TensorArg w, TensorArg b, int affine, TensorArg r, int residual, void *copy,
    //               int copy_type)
    let name = kernel(names::norm_packed_for(a.ne[0], max_ne0))?;
    launch_kernel!(
        kernels, stream, name, cfg, &a, &src_half, &d, &dst_half, &eps, &rms, &wt, &bt, &affine, &r, &has_r, &at,
        &copy_type
    )?;
    Ok(true)
}

/// Queues `norm_gathered_f32_row*` (rows_packed.cu): the layer norm of `dst`'s rows, row i
/// being `(a[ia[i]] + e) + c[ic[i]]` (rows of the tables `a` and `c` picked by I32 indices, a
/// row `e` added to every one), with weight `w` and bias `b` (f32 rows), written as `dst`'s
/// f32 or f16 packed rows. `Ok(false)` (nothing queued) where the kernel does not take these
/// operands: tables, `e` and `dst` of other types or not packed on 16-byte boundaries (8 for
/// f16 rows), indices not one packed I32 per row of `dst`, rows of more than 512 values.
#[allow(clippy::too_many_arguments)]
pub(crate) fn norm_gathered(
    kernels: &Kernels,
    stream: &Arc<CudaStream>,
    (a, ia): (Operand, Operand),
    e: Operand,
    (c, ic): (Operand, Operand),
    dst: Operand,
    eps: f32,
    rms: bool,
    w: Operand,
    b: Option<Operand>,
) -> Result<bool> {
    let h = dst.0.ne[0];
    let rows = dst.0.nrows();
    // f32 or f16 rows of `h` values, packed, each on a boundary of its 4 values' bytes.
    let rows_of_h = |(t, dt): Operand| match dt {
        DType::F32 | DType::F16 => {
            let es = dt.block_bytes() as i64;
            t.ne[0] == h && t.nb[0] == es && rows_on(&t, 4 * es)
        }
        _ => false,
    };
    let table = |t: Operand| rows_of_h(t) && t.0.ne[2] == 1 && t.0.ne[3] == 1 && t.0.ne[1] <= i64::from(i32::MAX);
    let indices = |(t, dt): Operand| dt == DType::I32 && t.nelements() == rows && packed_16_byte_aligned(&t, 4);
    let row = |(t, dt): Operand| dt == DType::F32 && t.ne == [h, 1, 1, 1] && packed_16_byte_aligned(&t, 4);
    let dst_packed =
        matches!(dst.1, DType::F32 | DType::F16) && packed_16_byte_aligned(&dst.0, dst.1.block_bytes() as i64);
    let fits = rows > 0
        && table(a)
        && table(c)
        && indices(ia)
        && indices(ic)
        && rows_of_h(e)
        && e.0.nelements() == h
        && dst_packed
        && row(w)
        && b.is_none_or(row);
    let (Some(max_ne0), Some(name)) = (packed_row_kernel(h).filter(|_| fits), names::norm_gathered(h)) else {
        return Ok(false);
    };
    let (wt, bt) = (w.0, b.map_or(w.0, |b| b.0));
    let (rms, affine, dst_half) = (i32::from(rms), if b.is_some() { 2i32 } else { 1 }, i32::from(dst.1 == DType::F16));
    // At most NORM_BLOCKS_PER_SM blocks an SM: each block reads the rows it keeps in shared
    // memory once for several rows (on an H200, MiniLM's embeddings took 72 us this way, 81
    // with a block for every 4 rows).
    let mut cfg = packed_rows_config(max_ne0, rows);
    let most = u32::try_from(NORM_BLOCKS_PER_SM * kernels.multiprocessors()).unwrap_or(u32::MAX);
    cfg.grid_dim.0 = cfg.grid_dim.0.min(most);
    // norm_gathered_f32_row*(TensorArg a, TensorArg ia, TensorArg e, TensorArg c, TensorArg ic,
    //                        TensorArg dst, int dst_half, float eps, int rms, TensorArg w,
    //                        TensorArg b, int affine)
    let name = kernel(Some(name))?;
    launch_kernel!(
        kernels, stream, name, cfg, &a.0, &ia.0, &e.0, &c.0, &ic.0, &dst.0, &dst_half, &eps, &rms, &wt, &bt, &affine
    )?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elementwise_blocks_cover_dimension_0_then_rows() {
        let c = elementwise_config(10, 60);
        assert_eq!((c.block_dim, c.grid_dim), ((32, 8, 1), (8, 1, 1)));
        let c = elementwise_config(129, 3);
        assert_eq!((c.block_dim, c.grid_dim), ((256, 1, 1), (3, 1, 1)));
        // One long row is split along dimension 0.
        let c = elementwise_config(5632, 1);
        assert_eq!((c.block_dim, c.grid_dim), ((256, 1, 1), (1, 22, 1)));
        let c = elementwise_config(1 << 20, 2);
        assert_eq!((c.block_dim, c.grid_dim), ((256, 1, 1), (2, 132, 1)));
        let c = elementwise_config(4096, 1 << 40);
        assert_eq!((c.block_dim, c.grid_dim), ((256, 1, 1), (65536, 1, 1)));
        let c = elementwise_config(0, 0);
        assert_eq!((c.block_dim, c.grid_dim), ((32, 8, 1), (1, 1, 1)));
    }

    #[test]
    fn row_blocks_are_one_per_row() {
        let c = row_config(7, 33);
        assert_eq!((c.block_dim, c.grid_dim), ((32, 1, 1), (33, 1, 1)));
        let c = row_config(129, 2);
        assert_eq!((c.block_dim, c.grid_dim), ((256, 1, 1), (2, 1, 1)));
        let c = row_config(100_000, 1 << 20);
        assert_eq!((c.block_dim, c.grid_dim), ((512, 1, 1), (65536, 1, 1)));
    }

    fn f32s(ne: [i64; 4]) -> Operand {
        (TensorArg::contiguous(0x1000, DType::F32, ne).unwrap(), DType::F32)
    }

    /// `t` with dimensions `d0` and `d1` swapped (a transposed view).
    fn swapped(t: Operand, d0: usize, d1: usize) -> Operand {
        let (mut arg, dtype) = t;
        arg.ne.swap(d0, d1);
        arg.nb.swap(d0, d1);
        (arg, dtype)
    }

    fn at(t: Operand, data: u64) -> Operand {
        (TensorArg { data, ..t.0 }, t.1)
    }

    #[test]
    fn packed_rows_take_the_shortest_kernel_that_holds_the_row() {
        let kernel = |ne0: i64| packed_rows(f32s([ne0, 3, 2, 1]), f32s([ne0, 3, 2, 1]));
        let expected = [
            (4, Some(128)),
            (128, Some(128)),
            (132, Some(256)),
            (384, Some(512)),
            (1000, Some(1024)),
            (1024, Some(1024)),
            (1028, Some(2048)),
            (4096, Some(4096)),
            (8192, Some(8192)),
            (8196, None),
            (130, None),
            (7, None),
        ];
        for (ne0, max_ne0) in expected {
            assert_eq!(kernel(ne0), max_ne0, "rows of {ne0}");
            if let Some(n) = max_ne0 {
                assert!(names::soft_max_packed(DType::F16, n).is_some() && names::norm_packed(n).is_some());
            }
        }
    }

    #[test]
    fn packed_rows_need_f32_rows_packed_on_16_byte_boundaries() {
        let t = f32s([64, 5, 4, 3]);
        assert_eq!(packed_rows(t, t), Some(128));
        // Rows of a view with a gap between them, still on 16-byte boundaries.
        let mut gapped = t;
        gapped.0.nb[1] = 272;
        assert_eq!(packed_rows(gapped, t), Some(128));
        gapped.0.nb[1] = 264;
        assert_eq!(packed_rows(gapped, t), None);
        assert_eq!(packed_rows(t, at(t, 0x1008)), None);
        assert_eq!(packed_rows(at(t, 0x1004), t), None);
        assert_eq!(packed_rows(swapped(f32s([5, 64, 4, 3]), 0, 1), t), None);
        let half = (TensorArg::contiguous(0x1000, DType::F16, [64, 5, 4, 3]).unwrap(), DType::F16);
        assert_eq!(packed_rows(half, half), None);
    }

    #[test]
    fn packed_rows_run_a_warp_or_a_block_per_row() {
        let c = packed_rows_config(1024, 9);
        assert_eq!((c.block_dim, c.grid_dim), ((128, 1, 1), (3, 1, 1)));
        let c = packed_rows_config(128, 1 << 20);
        assert_eq!((c.block_dim, c.grid_dim), ((128, 1, 1), (65536, 1, 1)));
        let c = packed_rows_config(2048, 9);
        assert_eq!((c.block_dim, c.grid_dim), ((256, 1, 1), (9, 1, 1)));
        let c = packed_rows_config(8192, 1 << 20);
        assert_eq!((c.block_dim, c.grid_dim), ((256, 1, 1), (65536, 1, 1)));
    }

    #[test]
    fn packed_row_kernels_are_built_for_their_launch() {
        // Each `row<N>` kernel runs on a warp (GROUP 32, blocks of 128 threads) for N <= 1024,
        // else on a block of 256, each thread holding N / (4 * GROUP) float4s.
        let source = include_str!("../../kernels/rows_packed.cu");
        assert!(source.contains("static constexpr int value = GROUP == 32 ? 128 : GROUP;"));
        for max_ne0 in [128, 256, 512, 1024, 2048, 4096, 8192] {
            let group = if max_ne0 <= PACKED_WARP_ROW_MAX { 32 } else { 256 };
            let v4 = max_ne0 / (4 * group);
            let kernels = [
                names::soft_max_packed(DType::F32, max_ne0),
                names::soft_max_packed(DType::F16, max_ne0),
                names::norm_packed(max_ne0),
            ];
            for name in kernels.map(Option::unwrap) {
                assert!(source.contains(&format!("({name}, {group}, {v4}")), "{name}");
            }
        }
        assert_eq!(names::norm_packed_for(384, 512), Some("norm_f32_row384"));
        assert_eq!(names::norm_packed_for(388, 512), Some("norm_f32_row512"));
        assert!(source.contains("(norm_f32_row384, 32, 3)"));
        // The f16 norms: a warp a row, a float4 slot of 4 values per 32 threads.
        for (ne0, max_ne0, v4) in [(128, 128, 1), (256, 256, 2), (384, 512, 3), (388, 512, 4), (1024, 1024, 8)] {
            let name = names::norm_packed_f16(ne0, max_ne0).unwrap();
            assert!(source.contains(&format!("({name}, {v4}, ")), "{name}");
        }
        assert_eq!(names::norm_packed_f16(2048, 2048), None);
    }

    #[test]
    fn packed_binary_ops_take_same_shapes_and_one_repeated_row() {
        let a = f32s([64, 5, 4, 3]);
        assert!(binary_packed(a, a, a));
        assert!(binary_packed(a, f32s([64, 1, 1, 1]), a));
        // Any other repetition, rows not a multiple of 4 values, other types, gaps, misaligned
        // starts and transposed operands take the generic kernel.
        assert!(!binary_packed(a, f32s([64, 5, 1, 1]), a));
        assert!(!binary_packed(a, f32s([1, 1, 1, 1]), a));
        let odd = f32s([66, 5, 1, 1]);
        assert!(!binary_packed(odd, odd, odd));
        let half = (a.0, DType::F16);
        assert!(!binary_packed(a, half, a));
        let mut gapped = a;
        gapped.0.nb[1] = 272;
        assert!(!binary_packed(gapped, a, a));
        assert!(!binary_packed(a, a, at(a, 0x1008)));
        assert!(!binary_packed(a, at(f32s([64, 1, 1, 1]), 0x1004), a));
        let t = swapped(f32s([64, 64, 1, 1]), 0, 1);
        assert!(!binary_packed(t, f32s([64, 64, 1, 1]), f32s([64, 64, 1, 1])));
        // Dimensions of one value may have any stride.
        let mut one = f32s([64, 1, 5, 1]);
        one.0.nb[1] = 12;
        assert!(binary_packed(one, one, one));
    }

    #[test]
    fn packed_unary_ops_take_packed_aligned_f32_or_f16_with_whole_loads() {
        let a = f32s([64, 5, 4, 3]);
        assert_eq!(unary_packed(a, a), Some(4));
        // f16: 8 values a load.
        let mut h = (a.0, DType::F16);
        h.0.nb = [2, 128, 640, 2560];
        assert_eq!(unary_packed(h, h), Some(8));
        // Odd value counts, mixed types, gaps, misaligned starts and transposed sources take
        // the generic kernel.
        let odd = f32s([3, 5, 1, 1]);
        assert_eq!(unary_packed(odd, odd), None);
        assert_eq!(unary_packed(h, a), None);
        let mut gapped = a;
        gapped.0.nb[1] = 272;
        assert_eq!(unary_packed(gapped, a), None);
        assert_eq!(unary_packed(a, at(a, 0x1008)), None);
        let t = swapped(f32s([64, 64, 1, 1]), 0, 1);
        assert_eq!(unary_packed(t, f32s([64, 64, 1, 1])), None);
        let mut h4 = h;
        h4.0.ne = [4, 5, 1, 1];
        h4.0.nb = [2, 8, 40, 40];
        assert_eq!(unary_packed(h4, h4), None, "20 f16 values are no whole loads");
    }

    #[test]
    fn packed_binary_blocks_cover_4_float4s_per_thread() {
        let c = binary_packed_config(5000);
        assert_eq!((c.block_dim, c.grid_dim), ((256, 1, 1), (5, 1, 1)));
        let c = binary_packed_config(1 << 40);
        assert_eq!((c.block_dim, c.grid_dim), ((256, 1, 1), (65536, 1, 1)));
        let source = include_str!("../../kernels/elementwise.cu");
        assert!(source.contains(&format!("#define BINARY_PACKED_UNROLL {BINARY_PACKED_UNROLL}\n")));
    }

    #[test]
    fn op_codes_follow_the_kernels() {
        let source = include_str!("../../kernels/elementwise.cu");
        for (i, op) in UnaryOp::ALL.iter().enumerate() {
            assert_eq!(unary_code(*op), i as i32);
            let line = format!("#define UOP_{} {i}\n", op.name());
            assert!(source.contains(&line), "{line}");
        }
        assert!(source.contains(&format!("#define UOP_SCALE {SCALE_CODE}\n")));
        for op in [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div] {
            assert!(source.contains(&format!("#define OP_{} {}\n", op.name(), binary_code(op))));
        }
    }
}
