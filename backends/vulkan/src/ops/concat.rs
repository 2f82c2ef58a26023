//! CONCAT (`concat.comp`): values copied bit for bit from one source or the other.

use tessera_core::{DType, Op};

use super::{args_of, linear_groups, need, no_shader, src, Dispatch, Operand, Why};
use crate::shaders::Shader;

pub(super) fn concat(dim: usize, dst: Operand, srcs: &[Option<Operand>]) -> Result<Dispatch, Why> {
    let op = Op::Concat { dim };
    let (a, b) = (src(srcs, 0)?, src(srcs, 1)?);
    let bytes = match dst.dtype {
        DType::F32 | DType::I32 => 4,
        DType::F16 | DType::BF16 => 2,
        _ => return Err(no_shader(op, &[a.dtype, b.dtype, dst.dtype])),
    };
    need(a.dtype == dst.dtype && b.dtype == dst.dtype, || no_shader(op, &[a.dtype, b.dtype, dst.dtype]))?;
    let (na, nb, nd) = (a.desc.ne, b.desc.ne, dst.desc.ne);
    let fits = dim < 4
        && (0..4).all(|d| {
            if d == dim {
                na[d].checked_add(nb[d]) == Some(nd[d])
            } else {
                na[d] == nd[d] && nb[d] == nd[d]
            }
        });
    need(fits, || format!("{na:?} and {nb:?} do not join along dimension {dim} into {nd:?}"))?;
    let mut args = args_of(dst, srcs);
    args.i[0] = dim as i32;
    args.i[1] = bytes;
    Ok(Dispatch { shader: Shader::Concat, args, groups: linear_groups(dst.desc.nelements(), 256)? })
}

#[cfg(test)]
mod tests {
    use tessera_core::tensor::MAX_SRC;

    use super::*;
    use crate::ops::plan;
    use crate::ops::rows::dense;

    #[test]
    fn joins_along_one_dimension_by_value_size() {
        let mut srcs = [None; MAX_SRC];
        srcs[0] = Some(dense(DType::BF16, [10, 5, 4, 3]));
        srcs[1] = Some(dense(DType::BF16, [10, 5, 1, 3]));
        let d = plan(&crate::ops::Caps::default(), Op::Concat { dim: 2 }, dense(DType::BF16, [10, 5, 5, 3]), &srcs)
            .expect("a join along dim 2");
        assert_eq!((d.args.i[0], d.args.i[1]), (2, 2));
        assert!(plan(&crate::ops::Caps::default(), Op::Concat { dim: 1 }, dense(DType::BF16, [10, 5, 5, 3]), &srcs)
            .is_err());
        assert!(
            plan(&crate::ops::Caps::default(), Op::Concat { dim: 2 }, dense(DType::F16, [10, 5, 5, 3]), &srcs).is_err()
        );
    }
}
