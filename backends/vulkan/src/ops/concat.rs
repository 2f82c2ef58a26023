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
