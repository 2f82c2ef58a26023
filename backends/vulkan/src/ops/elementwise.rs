//! Value-by-value ops: the unary ops, SCALE, DIAG_MASK_INF (`unary.comp`) and the binary
//! ops with broadcasting (`binary.comp`); packed f32 rows of a multiple of 4 values take
//! `unary_f32.comp` and `binary_f32.comp`, four values per invocation with 16-byte accesses.

use tessera_core::{BinaryOp, DType, Op, UnaryOp};

use super::{args_of, linear_groups, need, no_shader, packed_f32, src, Dispatch, Operand, Why};
use crate::shaders::Shader;

fn is_float(t: DType) -> bool {
    matches!(t, DType::F32 | DType::F16 | DType::BF16)
}

/// Vectors of 4 values per invocation of the packed shaders (`VPI` there).
const VPI: u32 = 4;

/// Ops whose result depends on the value alone (not DIAG_MASK_INF, which needs coordinates).
fn op_is_value_only(op: Op) -> bool {
    !matches!(op, Op::DiagMaskInf { .. })
}

/// The op's code in `unary_ops.glsl`: the unary ops in `UnaryOp::ALL` order, then SCALE and
/// DIAG_MASK_INF.
fn unary_code(op: Op) -> Option<i32> {
    let code = match op {
        Op::Unary(u) => UnaryOp::ALL.iter().position(|&x| x == u)?,
        Op::Scale(_) => UnaryOp::ALL.len(),
        Op::DiagMaskInf { .. } => UnaryOp::ALL.len() + 1,
        _ => return None,
    };
    i32::try_from(code).ok()
}

pub(super) fn unary(op: Op, dst: Operand, srcs: &[Option<Operand>]) -> Result<Dispatch, Why> {
    let a = src(srcs, 0)?;
    let code = unary_code(op).ok_or_else(|| no_shader(op, &[a.dtype]))?;
    need(is_float(a.dtype) && dst.dtype == a.dtype, || no_shader(op, &[a.dtype, dst.dtype]))?;
    need(dst.desc.ne == a.desc.ne, || format!("destination {:?} is not the shape of {:?}", dst.desc.ne, a.desc.ne))?;
    let mut args = args_of(dst, srcs);
    args.i[0] = code;
    match op {
        Op::Scale(s) => args.f[0] = s,
        Op::DiagMaskInf { n_past } => {
            args.i[1] = i32::try_from(n_past).map_err(|_| format!("n_past {n_past} is too large"))?;
        }
        _ => {}
    }
    if op_is_value_only(op) && packed_f32(&a) && packed_f32(&dst) {
        return Ok(Dispatch {
            shader: Shader::UnaryF32,
            args,
            groups: linear_groups(dst.desc.nelements() / 4, 256 * VPI)?,
        });
    }
    Ok(Dispatch { shader: Shader::Unary, args, groups: linear_groups(dst.desc.nelements(), 256)? })
}

pub(super) fn binary(op: Op, dst: Operand, srcs: &[Option<Operand>]) -> Result<Dispatch, Why> {
    let (a, b) = (src(srcs, 0)?, src(srcs, 1)?);
    let Op::Binary(kind) = op else { return Err(no_shader(op, &[a.dtype])) };
    need(is_float(a.dtype) && is_float(b.dtype) && dst.dtype == a.dtype, || {
        no_shader(op, &[a.dtype, b.dtype, dst.dtype])
    })?;
    need(dst.desc.ne == a.desc.ne, || format!("destination {:?} is not the shape of {:?}", dst.desc.ne, a.desc.ne))?;
    need((0..4).all(|i| b.desc.ne[i] > 0 && a.desc.ne[i] % b.desc.ne[i] == 0), || {
        format!("{:?} does not repeat to {:?}", b.desc.ne, a.desc.ne)
    })?;
    let mut args = args_of(dst, srcs);
    args.i[0] = match kind {
        BinaryOp::Add => 0,
        BinaryOp::Sub => 1,
        BinaryOp::Mul => 2,
        BinaryOp::Div => 3,
    };
    let b_rows = b.dtype == DType::F32
        && b.desc.ne[0] == a.desc.ne[0]
        && b.desc.nb[0] == 4
        && b.desc.data % 16 == 0
        && (1..4).all(|d| b.desc.ne[d] <= 1 || b.desc.nb[d] % 16 == 0);
    if packed_f32(&a) && packed_f32(&dst) && b_rows {
        args.i[1] = if packed_f32(&b) && b.desc.ne == a.desc.ne {
            1
        } else if b.desc.ne[1..].iter().all(|&n| n == 1) {
            2
        } else {
            0
        };
        return Ok(Dispatch {
            shader: Shader::BinaryF32,
            args,
            groups: linear_groups(dst.desc.nelements() / 4, 256 * VPI)?,
        });
    }
    Ok(Dispatch { shader: Shader::Binary, args, groups: linear_groups(dst.desc.nelements(), 256)? })
}
