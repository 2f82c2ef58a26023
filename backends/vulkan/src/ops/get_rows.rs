//! GET_ROWS: rows of a tensor of any type picked by i32 indices (`get_rows.comp`), one
//! invocation per value of the result.

use tessera_core::{DType, Op};

use super::{args_of, linear_groups, need, no_shader, src, Dispatch, Operand, Why};
use crate::shaders::Shader;

pub(super) fn plan(op: Op, dst: Operand, srcs: &[Option<Operand>]) -> Result<Dispatch, Why> {
    let (a, b) = (src(srcs, 0)?, src(srcs, 1)?);
    let want = if a.dtype == DType::I32 { DType::I32 } else { DType::F32 };
    need(b.dtype == DType::I32 && dst.dtype == want, || no_shader(op, &[a.dtype, b.dtype, dst.dtype]))?;
    let ([n0, _, d2, d3], [m, b1, b2, b3]) = (a.desc.ne, b.desc.ne);
    need(b1 == d2 && b2 == d3 && b3 == 1 && dst.desc.ne == [n0, m, d2, d3], || {
        format!("indices {:?} and result {:?} do not pick rows of {:?}", b.desc.ne, dst.desc.ne, a.desc.ne)
    })?;
    Ok(Dispatch {
        shader: Shader::GetRows,
        args: args_of(dst, srcs),
        groups: linear_groups(dst.desc.nelements(), 256)?,
    })
}
