//! SET_ROWS: rows of f32 values written into a float tensor at the rows i32 indices name
//! (`set_rows.comp`), one invocation per value written.

use tessera_core::{DType, Op};

use super::{args_of, linear_groups, need, no_shader, src, Dispatch, Operand, Why};
use crate::shaders::Shader;

pub(super) fn plan(op: Op, dst: Operand, srcs: &[Option<Operand>]) -> Result<Dispatch, Why> {
    let (b, idx) = (src(srcs, 0)?, src(srcs, 1)?);
    let float = matches!(dst.dtype, DType::F32 | DType::F16 | DType::BF16);
    need(b.dtype == DType::F32 && idx.dtype == DType::I32 && float, || {
        no_shader(op, &[b.dtype, idx.dtype, dst.dtype])
    })?;
    let ([n0, m, d2, d3], d) = (b.desc.ne, dst.desc.ne);
    need(idx.desc.ne == [m, d2, d3, 1] && d[0] == n0 && d[2] == d2 && d[3] == d3, || {
        format!("indices {:?} and destination {:?} do not take the rows of {:?}", idx.desc.ne, d, b.desc.ne)
    })?;
    Ok(Dispatch { shader: Shader::SetRows, args: args_of(dst, srcs), groups: linear_groups(b.desc.nelements(), 256)? })
}
