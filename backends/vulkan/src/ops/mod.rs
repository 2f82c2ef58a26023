//! From a node to a dispatch: which shader, with which arguments, over how many workgroups.
//!
//! [`plan`] both decides whether the device runs a node (`supports_op` calls it with
//! addresses 0) and builds the dispatch the program records, so the two never disagree. Each
//! op family checks the types, shapes and strides its shader relies on.

mod concat;
mod copy;
mod elementwise;
mod flash_attn;
mod get_rows;
mod mul_mat;
mod mul_mat_cm2;
mod mul_mat_coopmat;
mod mul_mat_tiled;
mod rope;
mod rows;
mod set_rows;
mod window;

use tessera_core::tensor::MAX_SRC;
use tessera_core::{DType, Op};

use crate::args::{Args, TensorDesc};
use crate::shaders::Shader;

/// Why a node cannot run, built only when a check fails.
pub(crate) type Why = String;

/// The shader paths a device has beyond the portable ones. Which nodes run never depends on
/// these (the portable shaders cover every case); only how they run does.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Caps {
    /// `mul_mat_coopmat.comp`: f16 cooperative matrices over subgroups of 32.
    pub coopmat_f16: bool,
    /// `mul_mat_cm2.comp`: f16 workgroup-scope cooperative matrices (`VK_NV_cooperative_matrix2`).
    pub coopmat2_f16: bool,
    /// The two for bf16 weights.
    pub coopmat_bf16: bool,
    pub coopmat2_bf16: bool,
    /// Subgroup add and max: the packed-row shaders' `_sg` variants.
    pub subgroup_arithmetic: bool,
    /// Packed 8-bit dot products: `mul_mat_vec_q8.comp` for q8_0 and q4_0 weights.
    pub integer_dot: bool,
}

/// A tensor as a shader takes it, with its type.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Operand {
    pub desc: TensorDesc,
    pub dtype: DType,
}

/// One shader dispatch.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Dispatch {
    pub shader: Shader,
    pub args: Args,
    pub groups: [u32; 3],
}

pub(crate) fn need(ok: bool, why: impl FnOnce() -> Why) -> Result<(), Why> {
    if ok {
        Ok(())
    } else {
        Err(why())
    }
}

pub(crate) fn no_shader(op: Op, types: &[DType]) -> Why {
    let names: Vec<&str> = types.iter().map(|t| t.name()).collect();
    format!("no Vulkan shader computes {} for types ({})", op.name(), names.join(", "))
}

/// The most workgroups along x; larger grids spill into y.
const MAX_GROUPS_X: u32 = 65535;

/// Workgroups for `n` items of `per_group` each, over x and then y.
pub(crate) fn linear_groups(n: u64, per_group: u32) -> Result<[u32; 3], Why> {
    let groups = n.div_ceil(u64::from(per_group));
    let y = groups.div_ceil(u64::from(MAX_GROUPS_X)).max(1);
    let x = if y > 1 { u64::from(MAX_GROUPS_X) } else { groups };
    match (u32::try_from(x), u32::try_from(y)) {
        (Ok(x), Ok(y)) if y <= MAX_GROUPS_X => Ok([x, y, 1]),
        _ => Err(format!("{n} items need more workgroups than a dispatch has")),
    }
}

/// The arguments of a node with the destination and sources filled in.
pub(crate) fn args_of(dst: Operand, srcs: &[Option<Operand>]) -> Args {
    let mut args = Args { dst: dst.desc, ..Args::default() };
    for (slot, src) in args.src.iter_mut().zip(srcs) {
        if let Some(s) = src {
            *slot = s.desc;
        }
    }
    args
}

pub(crate) fn src(srcs: &[Option<Operand>], i: usize) -> Result<Operand, Why> {
    srcs.get(i).copied().flatten().ok_or_else(|| format!("source {i} is missing"))
}

/// Strides the shaders can address: plain values aligned to their size, quantized rows of
/// packed blocks (whole blocks, 2-byte aligned); at most 2^32 - 1 values.
fn addressable(t: &Operand) -> Result<(), Why> {
    let (d, dtype) = (&t.desc, t.dtype);
    need(d.nelements() < u64::from(u32::MAX), || format!("{:?} values are more than the shaders count", d.ne))?;
    let align = if dtype.is_quantized() { 2 } else { dtype.block_bytes() as u64 };
    if dtype.is_quantized() {
        need(d.ne[0] as usize % dtype.block_len() == 0, || {
            format!("rows of {} values are not whole {} blocks", d.ne[0], dtype.name())
        })?;
        need(d.ne[0] == 0 || d.nb[0] == dtype.block_bytes() as u64, || {
            format!("{} rows must be packed blocks (nb[0] = {})", dtype.name(), dtype.block_bytes())
        })?;
    }
    for i in 0..4 {
        let first = i == 0 && dtype.is_quantized();
        need(first || d.ne[i] <= 1 || d.nb[i] % align == 0, || {
            format!("stride nb[{i}] = {} of a {} tensor is not a multiple of {align} bytes", d.nb[i], dtype.name())
        })?;
    }
    need(d.data % align == 0, || format!("a {} tensor at an address not a multiple of {align}", dtype.name()))
}

/// Packed f32 (rows after rows, no gaps) in rows of a multiple of 4 values, 16-byte aligned.
pub(crate) fn packed_f32(t: &Operand) -> bool {
    let d = &t.desc;
    let mut stride = 4u64;
    for i in 0..4 {
        if d.ne[i] > 1 && d.nb[i] != stride {
            return false;
        }
        stride *= u64::from(d.ne[i]);
    }
    t.dtype == DType::F32 && d.ne[0] % 4 == 0 && d.data % 16 == 0
}

/// The dispatch computing `op` into `dst` from `srcs`, or why the shaders cannot.
pub(crate) fn plan(caps: &Caps, op: Op, dst: Operand, srcs: &[Option<Operand>; MAX_SRC]) -> Result<Dispatch, Why> {
    addressable(&dst)?;
    for s in srcs.iter().flatten() {
        addressable(s)?;
    }
    match op {
        Op::Unary(_) | Op::Scale(_) | Op::DiagMaskInf { .. } => elementwise::unary(op, dst, srcs),
        Op::Binary(_) => elementwise::binary(op, dst, srcs),
        Op::SumRows | Op::Mean => rows::sum_rows(op, dst, srcs),
        Op::Norm { .. } | Op::RmsNorm { .. } => rows::norm(caps, op, dst, srcs),
        Op::SoftMax { .. } => rows::soft_max(caps, op, dst, srcs),
        Op::Argmax => rows::argmax(op, dst, srcs),
        Op::Rope(p) => rope::rope(p, dst, srcs),
        Op::Concat { dim } => concat::concat(dim, dst, srcs),
        Op::Im2Col(p) => window::im2col(p, dst, srcs),
        Op::Pool2d(p) => window::pool_2d(p, dst, srcs),
        Op::Cpy | Op::Cont => copy::plan(op, dst, srcs),
        Op::GetRows => get_rows::plan(op, dst, srcs),
        Op::SetRows => set_rows::plan(op, dst, srcs),
        Op::FlashAttn { .. } => flash_attn::plan(op, dst, srcs),
        Op::MulMat => mul_mat::plan(caps, op, dst, srcs),
        _ => Err(format!("no Vulkan shader computes {} yet", op.name())),
    }
}
