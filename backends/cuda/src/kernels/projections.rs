//! Up to three matrix-vector products of one column in one launch, each stored through its own
//! epilogue: an attention block's query, key and value projections with the ROPE that rotates
//! the queries and keys and the SET_ROWS that stores keys and values into their caches
//! (`mul_mat_vec_proj_<type>`, `MmvProjections` in mul_mat_vec.cuh). A decoded token then takes
//! one kernel where the nodes one by one take seven, with the same bits: each product is summed
//! as the matrix-vector kernel sums it, and rotated and converted as ROPE and SET_ROWS do.

use std::sync::Arc;

use cudarc::driver::{CudaStream, LaunchConfig};
use tessera_core::{DType, Op, Result, RopeMode, RopeParams};

use super::arg::TensorArg;
use super::launch::{div_ceil, launch_kernel, RopePowers};
use super::mul_mat::{mmv_rows, plan, q8_0_pieces, quantized_b, Path, MMV_BLOCK};
use super::scratch::BLayout;
use super::validate::{validate, Node};
use super::{backend_error, names, Kernels, Operand, Scratch};

/// Where one product's results go.
#[derive(Clone, Copy, Debug)]
pub struct ProjectionOut {
    /// The weights.
    pub a: Operand,
    /// The tensor the results are stored in: the product's own result or its ROPE's (holding
    /// exactly the product's values, packed), or a SET_ROWS destination (rows of the product's
    /// length) with `rows`, the I32 index of the row.
    pub dst: Operand,
    pub rows: Option<TensorArg>,
    /// Whether the results are rotated (by the launch's ROPE) before they are stored.
    pub rope: bool,
}

/// The ROPE the rotated products share: its parameters, positions (I32, one) and row length.
#[derive(Clone, Copy, Debug)]
pub struct ProjectionRope {
    pub params: RopeParams,
    pub pos: TensorArg,
    pub ne0: i64,
}

/// `MmvProjection` in mul_mat_vec.cuh.
#[repr(C)]
struct MmvProjection {
    a: TensorArg,
    dst: TensorArg,
    rows: TensorArg,
    first: i64,
    dst_type: i32,
    rope: i32,
}

/// `MmvProjections` in mul_mat_vec.cuh.
#[repr(C)]
struct MmvProjections {
    out: [MmvProjection; 3],
    count: i32,
    unused: i32,
    pos: TensorArg,
    rope_ne0: i64,
    n_dims: i64,
    freq_base: f32,
    freq_scale: f32,
    powers: RopePowers,
}

const _: () = assert!(std::mem::size_of::<MmvProjections>() == 1064);

/// The element code of a stored result (`dst_type`), for the types the kernels store.
fn dst_type(t: DType) -> Option<i32> {
    match t {
        DType::F32 => Some(0),
        DType::F16 => Some(1),
        DType::BF16 => Some(2),
        _ => None,
    }
}

/// Queues the products of `outs` (weights of one type and row length, one column `b`) as one
/// kernel. `Ok(false)` (nothing queued) where the kernel does not take them: more than three,
/// not matrix-vector products of one column, a ROPE it does not compute (not normal mode,
/// pairs across its rows), stores it does not address, or results that would overlap what the
/// kernel reads; the nodes then run one by one.
pub fn launch_projections(
    kernels: &Kernels,
    stream: &Arc<CudaStream>,
    scratch: &mut Scratch,
    outs: &[ProjectionOut],
    b: Operand,
    rope: Option<ProjectionRope>,
) -> Result<bool> {
    let (Some(first), true) = (outs.first(), outs.len() <= 3) else { return Ok(false) };
    let (at, k) = (first.a.1, first.a.0.ne[0]);
    let Some(name) = names::mul_mat_vec_proj(at) else { return Ok(false) };
    if b.0.ne[1..] != [1, 1, 1] || k == 0 {
        return Ok(false);
    }
    let rope_fits = |r: &ProjectionRope, m: i64| {
        let n_dims = r.params.n_dims as i64;
        r.params.mode == RopeMode::Normal
            && r.ne0 > 0
            && r.ne0 % 2 == 0
            && n_dims % 2 == 0
            && n_dims <= r.ne0
            && m % r.ne0 == 0
            && r.pos.nelements() >= 1
    };
    let mut params = Vec::with_capacity(outs.len());
    let mut quantize = None;
    let mut scratch_bytes = 0;
    let mut blocks = 0i64;
    for o in outs {
        let (a, m) = (o.a.0, o.a.0.ne[1]);
        if o.a.1 != at || a.ne[0] != k || a.ne[2..] != [1, 1] || m == 0 {
            return Ok(false);
        }
        let product = (TensorArg::contiguous(0, DType::F32, [m, 1, 1, 1])?, DType::F32);
        if validate(&Node { op: Op::MulMat, dst: product, srcs: &[Some(o.a), Some(b)] }).is_err() {
            return Ok(false);
        }
        let plan = plan(o.a, b, product);
        let Path::MatVec { quantize_b } = plan.path else { return Ok(false) };
        if *quantize.get_or_insert(quantize_b) != quantize_b {
            return Ok(false);
        }
        scratch_bytes = scratch_bytes.max(plan.scratch_bytes);
        if o.rope && !rope.is_some_and(|r| rope_fits(&r, m)) {
            return Ok(false);
        }
        let (Some(code), es) = (dst_type(o.dst.1), o.dst.1.block_bytes() as i64) else { return Ok(false) };
        let dst = match o.rows {
            // Rows of m values, the row index read from `rows`.
            Some(rows) if o.dst.0.ne[0] == m && o.dst.0.nb[0] == es && o.dst.0.ne[2..] == [1, 1] => {
                if rows.nelements() < 1 {
                    return Ok(false);
                }
                o.dst.0
            }
            Some(_) => return Ok(false),
            // The m packed values of the tensor.
            None => {
                let packed = TensorArg::contiguous(o.dst.0.data, o.dst.1, o.dst.0.ne)?;
                if packed != o.dst.0 || packed.nelements() != m {
                    return Ok(false);
                }
                TensorArg::contiguous(o.dst.0.data, o.dst.1, [m, 1, 1, 1])?
            }
        };
        params.push(MmvProjection {
            a,
            dst,
            rows: o.rows.unwrap_or_default(),
            first: blocks,
            dst_type: code,
            rope: i32::from(o.rope),
        });
        blocks += div_ceil(m, mmv_rows(1));
    }
    // Values are stored and indices read whole.
    let aligned = |t: &TensorArg, bytes: i64| t.data % bytes as u64 == 0;
    let stores_aligned = params.iter().zip(outs).all(|(p, o)| aligned(&p.dst, o.dst.1.block_bytes() as i64));
    if !stores_aligned
        || !rope.is_none_or(|r| aligned(&r.pos, 4))
        || !outs.iter().flat_map(|o| o.rows).all(|r| aligned(&r, 4))
    {
        return Ok(false);
    }
    // Every block reads the weights, b and the indices while others store: no store may land
    // on any of them, or on another product's store.
    let mut reads: Vec<Operand> = outs.iter().map(|o| o.a).chain([b]).collect();
    reads.extend(rope.map(|r| (r.pos, DType::I32)));
    reads.extend(outs.iter().filter_map(|o| o.rows.map(|r| (r, DType::I32))));
    for (i, o) in outs.iter().enumerate() {
        let stored = (params[i].dst, o.dst.1);
        let others = params.iter().zip(outs).enumerate().filter(|&(j, _)| j != i).map(|(_, (p, o))| (p.dst, o.dst.1));
        if reads.iter().copied().chain(others).any(|r| TensorArg::overlap(stored, r)) {
            return Ok(false);
        }
    }
    let grid = u32::try_from(blocks).map_err(|_| backend_error("too many rows"))?;
    let unused = || MmvProjection {
        a: TensorArg::default(),
        dst: TensorArg::default(),
        rows: TensorArg::default(),
        first: blocks,
        dst_type: 0,
        rope: 0,
    };
    let count = params.len() as i32;
    let mut out = params.into_iter();
    let out = [(); 3].map(|()| out.next().unwrap_or_else(unused));
    let (rope_params, pos, rope_ne0) = match rope {
        Some(r) => (r.params, r.pos, r.ne0),
        None => {
            (RopeParams { mode: RopeMode::Normal, n_dims: 0, freq_base: 1.0, freq_scale: 1.0 }, TensorArg::default(), 1)
        }
    };
    let n_dims = rope_params.n_dims as i64;
    let p = MmvProjections {
        out,
        count,
        unused: 0,
        pos,
        rope_ne0,
        n_dims,
        freq_base: rope_params.freq_base,
        freq_scale: rope_params.freq_scale,
        powers: RopePowers::new(rope_params.freq_base, n_dims),
    };
    let cfg = LaunchConfig { grid_dim: (grid, 1, 1), block_dim: MMV_BLOCK, shared_mem_bytes: 0 };
    stream.context().bind_to_thread().map_err(|e| backend_error(&format!("binding the CUDA context failed: {e}")))?;
    // mul_mat_vec_proj_<type>(MmvProjections p, TensorArg b | const Q8_1 *bq),
    // mul_mat_vec_proj_q8_0_rows(MmvProjections p, const char *bq)
    if quantize == Some(true) {
        let pieces = outs.iter().all(|o| q8_0_pieces(o.a));
        let (name, layout) =
            if pieces { (names::MUL_MAT_VEC_PROJ_Q8_0_ROWS, BLayout::Q8_0Rows) } else { (name, BLayout::Blocks) };
        let bq = quantized_b(kernels, stream, scratch, b.0, scratch_bytes, layout)?;
        launch_kernel!(kernels, stream, name, cfg, &p, &bq)?;
    } else {
        launch_kernel!(kernels, stream, name, cfg, &p, &b.0)?;
    }
    Ok(true)
}
