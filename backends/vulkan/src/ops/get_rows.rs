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

#[cfg(test)]
mod tests {
    use tessera_core::tensor::MAX_SRC;

    use super::*;
    use crate::ops::plan as plan_node;
    use crate::ops::rows::dense;

    fn get_rows(a: Operand, b: Operand, dst: Operand) -> Result<Dispatch, Why> {
        let mut srcs = [None; MAX_SRC];
        srcs[0] = Some(a);
        srcs[1] = Some(b);
        plan_node(&crate::ops::Caps::default(), Op::GetRows, dst, &srcs)
    }

    #[test]
    fn rows_of_any_type_come_out_f32_and_i32_rows_i32() {
        let idx = dense(DType::I32, [9, 3, 1, 1]);
        let d =
            get_rows(dense(DType::Q5_K, [512, 7, 3, 1]), idx, dense(DType::F32, [512, 9, 3, 1])).expect("q5_K rows");
        assert_eq!((d.shader, d.groups), (Shader::GetRows, [54, 1, 1]));
        assert!(get_rows(dense(DType::I32, [33, 7, 3, 1]), idx, dense(DType::I32, [33, 9, 3, 1])).is_ok());
        assert!(get_rows(dense(DType::F16, [33, 7, 3, 1]), idx, dense(DType::F16, [33, 9, 3, 1])).is_err());
        assert!(get_rows(dense(DType::F32, [33, 7, 2, 1]), idx, dense(DType::F32, [33, 9, 2, 1])).is_err());
    }
}
