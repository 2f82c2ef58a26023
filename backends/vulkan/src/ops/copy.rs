//! CPY and CONT: the destination's values in row-major order are the source's, converted.
//! Into a plain type one invocation writes one value (`copy.comp`); into a quantized type one
//! invocation gathers and quantizes one block (`quantize.comp`), as the CPU does.

use tessera_core::{DType, Op};

use super::{args_of, linear_groups, need, no_shader, src, Dispatch, Operand, Why};
use crate::shaders::Shader;

/// Destination blocks per `quantize.comp` workgroup.
const BLOCKS_PER_GROUP: u32 = 64;

pub(super) fn plan(op: Op, dst: Operand, srcs: &[Option<Operand>]) -> Result<Dispatch, Why> {
    let a = src(srcs, 0)?;
    // i32 only to and from i32 (copied exactly); every other pair converts through f32.
    need((a.dtype == DType::I32) == (dst.dtype == DType::I32), || no_shader(op, &[a.dtype, dst.dtype]))?;
    let n = dst.desc.nelements();
    need(a.desc.nelements() == n, || {
        format!("the source {:?} and the destination {:?} hold different numbers of values", a.desc.ne, dst.desc.ne)
    })?;
    // CPY's second source names the destination's memory; only the first is read.
    let args = args_of(dst, &srcs[..1]);
    // `quantize.comp` writes the 32-value block types as the CPU does; the K-quants search
    // their scales as ggml does, so copies into them are left to the CPU.
    if dst.dtype.is_quantized() {
        need(matches!(dst.dtype, DType::Q8_0 | DType::Q4_0 | DType::Q4_1 | DType::Q5_0 | DType::Q5_1), || {
            no_shader(op, &[a.dtype, dst.dtype])
        })?;
        let blocks = n / dst.dtype.block_len() as u64;
        return Ok(Dispatch { shader: Shader::Quantize, args, groups: linear_groups(blocks, BLOCKS_PER_GROUP)? });
    }
    Ok(Dispatch { shader: Shader::Copy, args, groups: linear_groups(n, 256)? })
}

#[cfg(test)]
mod tests {
    use tessera_core::tensor::MAX_SRC;

    use super::*;
    use crate::ops::plan as plan_node;
    use crate::ops::rows::dense;

    fn copy(op: Op, src: Operand, dst: Operand) -> Result<Dispatch, Why> {
        let mut srcs = [None; MAX_SRC];
        srcs[0] = Some(src);
        if op == Op::Cpy {
            srcs[1] = Some(dst);
        }
        plan_node(&crate::ops::Caps::default(), op, dst, &srcs)
    }

    #[test]
    fn quantized_destinations_take_one_invocation_per_block() {
        let src = dense(DType::Q4_0, [32, 8, 2, 1]);
        let d = copy(Op::Cpy, src, dense(DType::Q8_0, [256, 2, 1, 1])).expect("values in another shape");
        assert_eq!((d.shader, d.groups), (Shader::Quantize, [1, 1, 1]));
        assert!(copy(Op::Cpy, src, dense(DType::Q6_K, [256, 2, 1, 1])).is_err(), "K-quants quantize on the CPU");
        // CPY's second source is the destination itself: the shader gets only the first.
        assert_eq!(d.args.src[1], crate::args::TensorDesc::default());
        let d = copy(Op::Cont, src, dense(DType::BF16, [32, 8, 2, 1])).expect("a dequantizing copy");
        assert_eq!((d.shader, d.groups), (Shader::Copy, [2, 1, 1]));
    }

    #[test]
    fn i32_copies_only_to_i32_and_value_counts_match() {
        let ints = dense(DType::I32, [10, 5, 1, 1]);
        assert!(copy(Op::Cpy, ints, dense(DType::I32, [50, 1, 1, 1])).is_ok());
        assert!(copy(Op::Cpy, ints, dense(DType::F32, [10, 5, 1, 1])).is_err());
        assert!(copy(Op::Cpy, dense(DType::F16, [10, 5, 1, 1]), ints).is_err());
        assert!(copy(Op::Cpy, dense(DType::F32, [10, 4, 1, 1]), dense(DType::F32, [10, 5, 1, 1])).is_err());
    }
}
