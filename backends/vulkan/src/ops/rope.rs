//! ROPE (`rope.comp`): one invocation per rotated pair and per passed-through value.

use tessera_core::{DType, Op, RopeMode, RopeParams};

use super::{args_of, linear_groups, need, no_shader, src, Dispatch, Operand, Why};
use crate::shaders::Shader;

pub(super) fn rope(p: RopeParams, dst: Operand, srcs: &[Option<Operand>]) -> Result<Dispatch, Why> {
    let op = Op::Rope(p);
    let (a, pos) = (src(srcs, 0)?, src(srcs, 1)?);
    need(a.dtype.is_float() && dst.dtype.is_float() && pos.dtype == DType::I32, || {
        no_shader(op, &[a.dtype, pos.dtype, dst.dtype])
    })?;
    need(dst.desc.ne == a.desc.ne, || format!("destination {:?} is not the shape of {:?}", dst.desc.ne, a.desc.ne))?;
    let [n0, n1, n2, n3] = a.desc.ne;
    need(pos.desc.ne == [n2, 1, 1, 1], || format!("positions {:?} are not [{n2}, 1, 1, 1]", pos.desc.ne))?;
    let n_dims = u32::try_from(p.n_dims).ok().filter(|&n| n > 0 && n % 2 == 0 && n <= n0);
    let n_dims = n_dims.ok_or_else(|| format!("n_dims {} is not even, positive and at most {n0}", p.n_dims))?;
    let mut args = args_of(dst, srcs);
    args.i[0] = match p.mode {
        RopeMode::Normal => 0,
        RopeMode::Neox => 1,
    };
    args.i[1] = n_dims as i32;
    args.f[0] = p.freq_scale;
    // Taken in f64 here: the shaders' log2 is less precise than the f32 result.
    args.f[1] = f64::from(p.freq_base).log2() as f32;
    let per_row = u64::from(n0 - n_dims / 2);
    let items = per_row * u64::from(n1) * u64::from(n2) * u64::from(n3);
    need(items < u64::from(u32::MAX), || format!("{items} rotations are more than the shader counts"))?;
    Ok(Dispatch { shader: Shader::Rope, args, groups: linear_groups(items, 256)? })
}

#[cfg(test)]
mod tests {
    use tessera_core::tensor::MAX_SRC;

    use super::*;
    use crate::ops::plan;
    use crate::ops::rows::dense;

    #[test]
    fn one_invocation_per_pair_and_per_passed_value() {
        let a = dense(DType::F16, [10, 3, 5, 2]);
        let mut srcs = [None; MAX_SRC];
        srcs[0] = Some(a);
        srcs[1] = Some(dense(DType::I32, [5, 1, 1, 1]));
        let p = RopeParams { mode: RopeMode::Neox, n_dims: 6, freq_base: 10000.0, freq_scale: 1.0 };
        let d = plan(&crate::ops::Caps::default(), Op::Rope(p), a, &srcs).expect("a rope the shader runs");
        // (10 - 3) items in each of 30 rows.
        assert_eq!((d.args.i[0], d.args.i[1], d.groups), (1, 6, [1, 1, 1]));
        assert!((d.args.f[1] - 10000f32.log2()).abs() < 1e-6);
        for n_dims in [0, 7, 12] {
            assert!(
                plan(&crate::ops::Caps::default(), Op::Rope(RopeParams { n_dims, ..p }), a, &srcs).is_err(),
                "n_dims {n_dims}"
            );
        }
        srcs[1] = Some(dense(DType::I32, [3, 1, 1, 1]));
        assert!(
            plan(&crate::ops::Caps::default(), Op::Rope(p), a, &srcs).is_err(),
            "one position per index of dimension 2"
        );
    }
}
