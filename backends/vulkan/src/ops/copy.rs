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
    if dst.dtype.is_quantized() {
        let blocks = n / dst.dtype.block_len() as u64;
        return Ok(Dispatch { shader: Shader::Quantize, args, groups: linear_groups(blocks, BLOCKS_PER_GROUP)? });
    }
    Ok(Dispatch { shader: Shader::Copy, args, groups: linear_groups(n, 256)? })
}
