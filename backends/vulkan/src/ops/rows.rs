//! Row ops, one workgroup per row: SUM_ROWS and MEAN (`sum_rows.comp`), NORM and RMS_NORM
//! (`norm.comp`), SOFT_MAX (`soft_max.comp`) and ARGMAX (`argmax.comp`). Sources may have any
//! strides and float type; sums are taken in f32.

use tessera_core::{soft_max_mask_fits, DType, Op};

use super::{args_of, linear_groups, need, no_shader, src, Dispatch, Operand, Why};
use crate::shaders::Shader;

/// One workgroup for each row `(i1, i2, i3)` of a tensor of sizes `ne`.
fn row_groups(ne: [u32; 4]) -> Result<[u32; 3], Why> {
    let rows = u64::from(ne[1]) * u64::from(ne[2]) * u64::from(ne[3]);
    linear_groups(rows, 1)
}

fn same_shape(dst: &Operand, a: &Operand) -> Result<(), Why> {
    need(dst.desc.ne == a.desc.ne, || format!("destination {:?} is not the shape of {:?}", dst.desc.ne, a.desc.ne))
}

/// SUM_ROWS and MEAN: `[n, a, b, c] -> [1, a, b, c]`.
pub(super) fn sum_rows(op: Op, dst: Operand, srcs: &[Option<Operand>]) -> Result<Dispatch, Why> {
    let a = src(srcs, 0)?;
    need(a.dtype.is_float() && dst.dtype.is_float(), || no_shader(op, &[a.dtype, dst.dtype]))?;
    let [_, n1, n2, n3] = a.desc.ne;
    need(dst.desc.ne == [1, n1, n2, n3], || {
        format!("destination {:?} is not [1, {n1}, {n2}, {n3}], one value per row of {:?}", dst.desc.ne, a.desc.ne)
    })?;
    let mut args = args_of(dst, srcs);
    args.i[0] = i32::from(op == Op::Mean);
    Ok(Dispatch { shader: Shader::SumRows, args, groups: row_groups(a.desc.ne)? })
}

/// NORM and RMS_NORM, in the source's shape.
pub(super) fn norm(op: Op, dst: Operand, srcs: &[Option<Operand>]) -> Result<Dispatch, Why> {
    let a = src(srcs, 0)?;
    let (rms, eps) = match op {
        Op::Norm { eps } => (false, eps),
        Op::RmsNorm { eps } => (true, eps),
        _ => return Err(no_shader(op, &[a.dtype])),
    };
    need(a.dtype.is_float() && dst.dtype.is_float(), || no_shader(op, &[a.dtype, dst.dtype]))?;
    same_shape(&dst, &a)?;
    let mut args = args_of(dst, srcs);
    args.i[0] = i32::from(rms);
    args.f[0] = eps;
    Ok(Dispatch { shader: Shader::Norm, args, groups: row_groups(a.desc.ne)? })
}

/// SOFT_MAX with an optional f32 or f16 mask repeated over the rows as
/// [`tessera_core::soft_max_mask_row`] says.
pub(super) fn soft_max(op: Op, dst: Operand, srcs: &[Option<Operand>]) -> Result<Dispatch, Why> {
    let a = src(srcs, 0)?;
    let Op::SoftMax { scale } = op else { return Err(no_shader(op, &[a.dtype])) };
    need(a.dtype.is_float() && dst.dtype.is_float(), || no_shader(op, &[a.dtype, dst.dtype]))?;
    same_shape(&dst, &a)?;
    let mask = srcs.get(1).copied().flatten();
    if let Some(m) = mask {
        need(matches!(m.dtype, DType::F32 | DType::F16), || no_shader(op, &[a.dtype, m.dtype]))?;
        let (mne, ane) = (m.desc.ne.map(|n| n as usize), a.desc.ne.map(|n| n as usize));
        need(soft_max_mask_fits(mne, ane), || format!("mask {mne:?} does not repeat over the rows of {ane:?}"))?;
    }
    let mut args = args_of(dst, srcs);
    args.i[0] = i32::from(mask.is_some());
    args.f[0] = scale;
    Ok(Dispatch { shader: Shader::SoftMax, args, groups: row_groups(a.desc.ne)? })
}

/// ARGMAX: `[n, m, 1, 1] -> [m]` (I32).
pub(super) fn argmax(op: Op, dst: Operand, srcs: &[Option<Operand>]) -> Result<Dispatch, Why> {
    let a = src(srcs, 0)?;
    need(a.dtype.is_float() && dst.dtype == DType::I32, || no_shader(op, &[a.dtype, dst.dtype]))?;
    let [_, m, n2, n3] = a.desc.ne;
    need(n2 == 1 && n3 == 1 && dst.desc.ne == [m, 1, 1, 1], || {
        format!("ARGMAX maps a matrix [n, m, 1, 1] to [m, 1, 1, 1], not {:?} to {:?}", a.desc.ne, dst.desc.ne)
    })?;
    let args = args_of(dst, srcs);
    Ok(Dispatch { shader: Shader::Argmax, args, groups: row_groups(a.desc.ne)? })
}
