//! Launch configurations and the launch of every op but MUL_MAT (see `mul_mat.rs`).
//!
//! Every node reaching here passed `validate`, which guarantees the kernel exists for its
//! types and that its shapes and strides are what the kernel addresses.

use std::sync::Arc;

use cudarc::driver::{CudaStream, LaunchConfig, PushKernelArg};
use tessera_core::{BinaryOp, DType, Op, PoolKind, Result, RopeMode, UnaryOp};

use super::arg::TensorArg;
use super::validate::Node;
use super::{backend_error, mul_mat, names, Kernels, Scratch};

/// Most blocks of a grid; kernels stride over the rest.
const MAX_BLOCKS: i64 = 1 << 16;

/// Launches kernel `$name` with arguments `$arg` (references to values whose types match the
/// kernel's parameters one to one: `TensorArg`, `i32` for `int`, `i64` for `long long`, `f32`
/// for `float`, `u64` for a pointer).
macro_rules! launch_kernel {
    ($kernels:expr, $stream:expr, $name:expr, $cfg:expr, $($arg:expr),+ $(,)?) => {{
        let name: &str = $name;
        let function = $kernels.get(name)?;
        let mut builder = $stream.launch_builder(function);
        $( builder.arg($arg); )+
        // SAFETY: the arguments match the parameters of kernel `name` in kernels/*.cu in number,
        // order and type (see each call), and every tensor they describe was validated: its
        // shape and strides are what the kernel addresses, inside memory the caller of `launch`
        // vouched for.
        unsafe { builder.launch($cfg) }
            .map(|_| ())
            .map_err(|e| $crate::kernels::backend_error(&format!("launching {name} failed: {e}")))
    }};
}
pub(crate) use launch_kernel;

/// `n / d` rounded up, for `n >= 0`, `d > 0`.
pub(crate) fn div_ceil(n: i64, d: i64) -> i64 {
    n / d + i64::from(n % d != 0)
}

fn blocks(n: i64) -> u32 {
    n.clamp(1, MAX_BLOCKS) as u32
}

/// Element-wise kernels: 256 threads, `x` along dimension 0 (the power of two from 32 to 256
/// closest above `ne0`), `y` along rows; one grid row per `y` rows, at most 65536 blocks.
pub(crate) fn elementwise_config(ne0: i64, nrows: i64) -> LaunchConfig {
    let bx = (ne0.clamp(1, 256) as u32).next_power_of_two().max(32);
    let by = 256 / bx;
    LaunchConfig {
        grid_dim: (blocks(div_ceil(nrows, i64::from(by))), 1, 1),
        block_dim: (bx, by, 1),
        shared_mem_bytes: 0,
    }
}

/// Row reductions: one block per row (the power of two from 32 to 512 closest above `ne0`
/// threads), at most 65536 blocks.
pub(crate) fn row_config(ne0: i64, nrows: i64) -> LaunchConfig {
    let threads = (ne0.clamp(1, 512) as u32).next_power_of_two().max(32);
    LaunchConfig { grid_dim: (blocks(nrows), 1, 1), block_dim: (threads, 1, 1), shared_mem_bytes: 0 }
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
            let cfg = elementwise_config(dst.ne[0], dst.nrows());
            // binary_*(TensorArg a, TensorArg b, TensorArg dst, int op)
            launch_kernel!(kernels, stream, kernel(names::binary(at, bt))?, cfg, &a, &b, &dst, &code)
        }
        Op::Scale(_) | Op::Unary(_) => {
            let (a, at) = src(0)?;
            let (code, s) = match node.op {
                Op::Scale(s) => (SCALE_CODE, s),
                Op::Unary(u) => (unary_code(u), 1.0f32),
                _ => return Err(backend_error("not a unary op")),
            };
            let cfg = elementwise_config(dst.ne[0], dst.nrows());
            // unary_*(TensorArg src, TensorArg dst, int op, float s)
            launch_kernel!(kernels, stream, kernel(names::unary(at))?, cfg, &a, &dst, &code, &s)
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
            let cfg = row_config(a.ne[0], a.nrows());
            // soft_max_*(TensorArg src, TensorArg mask, TensorArg dst, float scale, int has_mask)
            launch_kernel!(kernels, stream, kernel(names::soft_max(at, mt))?, cfg, &a, &m, &dst, &scale, &has_mask)
        }
        Op::Norm { eps } | Op::RmsNorm { eps } => {
            let (a, at) = src(0)?;
            let rms = i32::from(matches!(node.op, Op::RmsNorm { .. }));
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
            // rope_*(TensorArg src, TensorArg pos, TensorArg dst, long long n_dims, int mode,
            //        float freq_base, float freq_scale)
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
                &freq_scale
            )
        }
        Op::MulMat => mul_mat::launch(kernels, stream, scratch, src(0)?, src(1)?, node.dst),
        Op::GetRows => {
            let ((a, at), (idx, _)) = (src(0)?, src(1)?);
            let cfg = elementwise_config(dst.ne[0], dst.nrows());
            // get_rows_*(TensorArg a, TensorArg idx, TensorArg dst)
            launch_kernel!(kernels, stream, kernel(names::get_rows(at))?, cfg, &a, &idx, &dst)
        }
        Op::Cpy | Op::Cont => copy(kernels, stream, src(0)?, node.dst),
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
    // Quantizing kernels take one block of 32 values per thread.
    let per_row = if dt.is_quantized() { d.ne[0] / dt.block_len() as i64 } else { d.ne[0] };
    let cfg = elementwise_config(per_row, d.nrows());
    // cpy_*(TensorArg src, TensorArg dst)
    launch_kernel!(kernels, stream, kernel(names::cpy(at, dt))?, cfg, &a, &d)
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
