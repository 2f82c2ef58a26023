//! Row ops, one workgroup per row: SUM_ROWS and MEAN (`sum_rows.comp`), NORM and RMS_NORM
//! (`norm.comp`), SOFT_MAX (`soft_max.comp`) and ARGMAX (`argmax.comp`). Sources may have any
//! strides and float type; sums are taken in f32.

use tessera_core::{soft_max_mask_fits, DType, Op};

use super::{args_of, linear_groups, need, no_shader, packed_f32, src, Caps, Dispatch, Operand, Why};
use crate::shaders::Shader;

/// One workgroup for each row `(i1, i2, i3)` of a tensor of sizes `ne`.
fn row_groups(ne: [u32; 4]) -> Result<[u32; 3], Why> {
    let rows = u64::from(ne[1]) * u64::from(ne[2]) * u64::from(ne[3]);
    linear_groups(rows, 1)
}

/// The packed-row shader (`rows_f32.comp`) for packed f32 rows of a multiple of 4 values up
/// to 8192 (8 vectors per invocation): `args.i[4]` = invocations per row, the workgroups.
fn packed_rows(a: &Operand, dst: &Operand, args: &mut crate::args::Args) -> Option<[u32; 3]> {
    let n = a.desc.ne[0];
    if !(packed_f32(a) && packed_f32(dst) && n > 0 && n <= 8192) {
        return None;
    }
    // Short rows take few invocations each (8 for the 128 values of an attention row), so
    // that each does some work for the arguments it reads.
    let per_row = (n / 4).div_ceil(8).next_power_of_two().clamp(8, 256);
    args.i[4] = i32::try_from(per_row).ok()?;
    let rows = u64::from(a.desc.ne[1]) * u64::from(a.desc.ne[2]) * u64::from(a.desc.ne[3]);
    linear_groups(rows, 256 / per_row).ok()
}

/// Whether `rows_f32.comp` reads the rows of SOFT_MAX's mask as vectors: packed f32 values
/// with every row on a 16-byte boundary, or f16 values on an 8-byte one.
fn mask_rows_are_vectors(m: &Operand) -> bool {
    let d = &m.desc;
    let (size, align) = match m.dtype {
        DType::F32 => (4, 16),
        DType::F16 => (2, 8),
        _ => return false,
    };
    d.nb[0] == size && d.ne[0] % 4 == 0 && d.data % align == 0 && (1..4).all(|i| d.ne[i] <= 1 || d.nb[i] % align == 0)
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
pub(super) fn norm(caps: &Caps, op: Op, dst: Operand, srcs: &[Option<Operand>]) -> Result<Dispatch, Why> {
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
    if let Some(groups) = packed_rows(&a, &dst, &mut args) {
        let shader = if caps.subgroup_arithmetic { Shader::NormF32Subgroup } else { Shader::NormF32 };
        return Ok(Dispatch { shader, args, groups });
    }
    Ok(Dispatch { shader: Shader::Norm, args, groups: row_groups(a.desc.ne)? })
}

/// SOFT_MAX with an optional f32 or f16 mask repeated over the rows as
/// [`tessera_core::soft_max_mask_row`] says.
pub(super) fn soft_max(caps: &Caps, op: Op, dst: Operand, srcs: &[Option<Operand>]) -> Result<Dispatch, Why> {
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
    // Rows in registers run at twice the speed of three passes over memory on an H200 (rows
    // of 4096: 3.5 against 1.7 TB/s).
    let packed = match mask {
        Some(m) => mask_rows_are_vectors(&m),
        None => true,
    };
    if let Some(groups) = packed.then(|| packed_rows(&a, &dst, &mut args)).flatten() {
        let shader = if caps.subgroup_arithmetic { Shader::SoftMaxF32Subgroup } else { Shader::SoftMaxF32 };
        return Ok(Dispatch { shader, args, groups });
    }
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

/// A tensor of `dtype` and sizes `ne` laid out densely at address 0, as `supports_op` plans.
#[cfg(test)]
pub(super) fn dense(dtype: DType, ne: [usize; 4]) -> Operand {
    let mut nb = [dtype.block_bytes(), 0, 0, 0];
    for d in 1..4 {
        nb[d] = nb[d - 1] * ne[d - 1];
    }
    Operand { desc: crate::args::TensorDesc::from_parts(0, dtype, ne, nb).expect("small sizes fit"), dtype }
}

#[cfg(test)]
mod tests {
    use tessera_core::tensor::MAX_SRC;

    use super::*;
    use crate::ops::plan;

    fn srcs(list: &[Operand]) -> [Option<Operand>; MAX_SRC] {
        let mut s = [None; MAX_SRC];
        for (slot, o) in s.iter_mut().zip(list) {
            *slot = Some(*o);
        }
        s
    }

    #[test]
    fn soft_max_takes_masks_that_repeat_over_the_rows() {
        let a = dense(DType::F32, [16, 5, 4, 3]);
        let op = Op::SoftMax { scale: 0.5 };
        for mne in [[16, 1, 1, 3], [16, 8, 2, 3], [16, 5, 4, 3]] {
            let d = plan(&crate::ops::Caps::default(), op, a, &srcs(&[a, dense(DType::F16, mne)]))
                .expect("a mask that repeats");
            // Packed f32 rows of 16: 8 invocations a row, 32 rows a workgroup.
            assert_eq!(
                (d.shader, d.args.i[0], d.args.f[0], d.args.i[4], d.groups),
                (Shader::SoftMaxF32, 1, 0.5, 8, [2, 1, 1])
            );
        }
        // Mask rows off the 8-byte boundaries of vector loads take the general shader.
        let unaligned = Operand {
            desc: crate::args::TensorDesc::from_parts(0, DType::F16, [16, 5, 1, 1], [2, 34, 170, 170]).expect("fits"),
            dtype: DType::F16,
        };
        let d = plan(&crate::ops::Caps::default(), op, a, &srcs(&[a, unaligned])).expect("a strided mask");
        assert_eq!((d.shader, d.groups), (Shader::SoftMax, [60, 1, 1]));
        assert!(
            plan(&crate::ops::Caps::default(), op, a, &srcs(&[a, dense(DType::F32, [15, 5, 1, 1])])).is_err(),
            "rows of another length"
        );
        assert!(
            plan(&crate::ops::Caps::default(), op, a, &srcs(&[a, dense(DType::F32, [16, 3, 1, 1])])).is_err(),
            "3 mask rows for 5"
        );
        assert!(
            plan(&crate::ops::Caps::default(), op, a, &srcs(&[a, dense(DType::BF16, [16, 5, 1, 1])])).is_err(),
            "a bf16 mask"
        );
        assert_eq!(plan(&crate::ops::Caps::default(), op, a, &srcs(&[a])).map(|d| d.args.i[0]), Ok(0));
    }

    #[test]
    fn rows_spill_into_a_second_grid_dimension() {
        let a = dense(DType::F16, [2, 70000, 1, 1]);
        let d =
            plan(&crate::ops::Caps::default(), Op::RmsNorm { eps: 1e-6 }, a, &srcs(&[a])).expect("a plain f16 tensor");
        assert_eq!(d.groups, [65535, 2, 1]);
        let sums = dense(DType::F16, [1, 70000, 1, 1]);
        assert_eq!(
            plan(&crate::ops::Caps::default(), Op::Mean, sums, &srcs(&[a])).map(|d| (d.shader, d.args.i[0])),
            Ok((Shader::SumRows, 1))
        );
        assert!(
            plan(&crate::ops::Caps::default(), Op::SumRows, a, &srcs(&[a])).is_err(),
            "SUM_ROWS keeps one value a row"
        );
    }

    #[test]
    fn argmax_maps_a_matrix_to_i32_indices() {
        let a = dense(DType::BF16, [33, 9, 1, 1]);
        assert!(plan(&crate::ops::Caps::default(), Op::Argmax, dense(DType::I32, [9, 1, 1, 1]), &srcs(&[a])).is_ok());
        assert!(plan(&crate::ops::Caps::default(), Op::Argmax, dense(DType::F32, [9, 1, 1, 1]), &srcs(&[a])).is_err());
        let b = dense(DType::F32, [33, 9, 2, 1]);
        assert!(plan(&crate::ops::Caps::default(), Op::Argmax, dense(DType::I32, [9, 1, 1, 1]), &srcs(&[b])).is_err());
    }
}
