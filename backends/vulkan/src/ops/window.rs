//! Sliding-window ops, one invocation per destination value: IM2COL (`im2col.comp`) and
//! POOL_2D (`pool2d.comp`).

use tessera_core::{Im2ColParams, Op, Pool2dParams, PoolKind};

use super::{args_of, linear_groups, need, no_shader, src, Dispatch, Operand, Why};
use crate::shaders::Shader;

/// `values` as the shader's integer parameters, or why one is too large.
fn int_params<const N: usize>(op: Op, values: [usize; N]) -> Result<[i32; N], Why> {
    let mut out = [0; N];
    for (o, v) in out.iter_mut().zip(values) {
        *o = i32::try_from(v).map_err(|_| format!("{} parameter {v} is too large", op.name()))?;
    }
    Ok(out)
}

pub(super) fn im2col(p: Im2ColParams, dst: Operand, srcs: &[Option<Operand>]) -> Result<Dispatch, Why> {
    let op = Op::Im2Col(p);
    let (kernel, input) = (src(srcs, 0)?, src(srcs, 1)?);
    need(input.dtype.is_float() && dst.dtype.is_float(), || no_shader(op, &[kernel.dtype, input.dtype, dst.dtype]))?;
    let (k, x, d) = (kernel.desc.ne, input.desc.ne, dst.desc.ne);
    // The 1-D case is the 2-D one with a kernel and input of height 1.
    let expected = if p.is_2d {
        [x[2].checked_mul(k[1]).and_then(|v| v.checked_mul(k[0])), Some(d[1]), Some(d[2]), Some(x[3])]
    } else {
        [x[1].checked_mul(k[0]), Some(d[1]), Some(x[2]), Some(1)]
    };
    need((0..4).all(|i| expected[i] == Some(d[i])), || {
        format!("result {d:?} does not fit input {x:?} and kernel {k:?} (is_2d = {})", p.is_2d)
    })?;
    let mut args = args_of(dst, srcs);
    let ints = int_params(op, [p.s0, p.s1, p.p0, p.p1, p.d0, p.d1, usize::from(p.is_2d)])?;
    args.i[..ints.len()].copy_from_slice(&ints);
    Ok(Dispatch { shader: Shader::Im2Col, args, groups: linear_groups(dst.desc.nelements(), 256)? })
}

pub(super) fn pool_2d(p: Pool2dParams, dst: Operand, srcs: &[Option<Operand>]) -> Result<Dispatch, Why> {
    let op = Op::Pool2d(p);
    let a = src(srcs, 0)?;
    need(a.dtype.is_float() && dst.dtype.is_float(), || no_shader(op, &[a.dtype, dst.dtype]))?;
    need(dst.desc.ne[2] == a.desc.ne[2] && dst.desc.ne[3] == a.desc.ne[3], || {
        format!("result {:?} does not fit input {:?}", dst.desc.ne, a.desc.ne)
    })?;
    let kind = match p.kind {
        PoolKind::Max => 0,
        PoolKind::Avg => 1,
    };
    let mut args = args_of(dst, srcs);
    let ints = int_params(op, [kind, p.k0, p.k1, p.s0, p.s1, p.p0, p.p1])?;
    args.i[..ints.len()].copy_from_slice(&ints);
    Ok(Dispatch { shader: Shader::Pool2d, args, groups: linear_groups(dst.desc.nelements(), 256)? })
}

#[cfg(test)]
mod tests {
    use tessera_core::tensor::MAX_SRC;
    use tessera_core::DType;

    use super::*;
    use crate::ops::plan;
    use crate::ops::rows::dense;

    #[test]
    fn im2col_results_fit_the_input_and_kernel() {
        let mut srcs = [None; MAX_SRC];
        srcs[0] = Some(dense(DType::F16, [3, 3, 3, 4]));
        srcs[1] = Some(dense(DType::F32, [10, 9, 3, 2]));
        let p = Im2ColParams { s0: 1, s1: 1, p0: 0, p1: 0, d0: 1, d1: 1, is_2d: true };
        let d = plan(&crate::ops::Caps::default(), Op::Im2Col(p), dense(DType::F16, [27, 8, 7, 2]), &srcs)
            .expect("a 2-D unfolding");
        assert_eq!(&d.args.i[..7], &[1, 1, 0, 0, 1, 1, 1]);
        assert!(plan(&crate::ops::Caps::default(), Op::Im2Col(p), dense(DType::F16, [26, 8, 7, 2]), &srcs).is_err());
        let one_d = Im2ColParams { is_2d: false, ..p };
        srcs[0] = Some(dense(DType::F16, [5, 3, 4, 1]));
        srcs[1] = Some(dense(DType::F32, [20, 3, 2, 1]));
        assert!(plan(&crate::ops::Caps::default(), Op::Im2Col(one_d), dense(DType::F32, [15, 16, 2, 1]), &srcs).is_ok());
    }

    #[test]
    fn pool_parameters_reach_the_shader() {
        let mut srcs = [None; MAX_SRC];
        srcs[0] = Some(dense(DType::BF16, [10, 9, 3, 2]));
        let p = Pool2dParams { kind: PoolKind::Avg, k0: 3, k1: 2, s0: 1, s1: 2, p0: 1, p1: 0 };
        let d = plan(&crate::ops::Caps::default(), Op::Pool2d(p), dense(DType::F32, [10, 4, 3, 2]), &srcs)
            .expect("a pooling");
        assert_eq!(&d.args.i[..7], &[1, 3, 2, 1, 2, 1, 0]);
        assert!(plan(&crate::ops::Caps::default(), Op::Pool2d(p), dense(DType::F32, [10, 4, 2, 2]), &srcs).is_err());
    }
}
