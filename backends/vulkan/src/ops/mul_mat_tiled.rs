//! MUL_MAT of float weights (f32, f16, bf16) with 16-byte aligned rows on the shader cores,
//! 128 x 128 results per workgroup (`mul_mat_tiled.comp`); unaligned or quantized operands
//! take the general tiled shader.

use tessera_core::DType;

use super::{args_of, Dispatch, Operand};
use crate::args::TensorDesc;
use crate::shaders::Shader;

/// Rows of a and columns of b per workgroup (`BM`, `BN` in the shader).
const BLOCK: u32 = 128;

/// Rows on 16-byte boundaries: the data and every stride past the first.
pub(super) fn aligned_rows(t: &TensorDesc) -> bool {
    t.data % 16 == 0 && (1..4).all(|d| t.ne[d] <= 1 || t.nb[d] % 16 == 0)
}

/// The dispatch of a validated MUL_MAT with at least two columns, or `None` where the
/// operands do not fit the shader.
pub(super) fn plan(a: Operand, b: Operand, dst: Operand, srcs: &[Option<Operand>]) -> Option<Dispatch> {
    let shader = match a.dtype {
        DType::F32 => Shader::MulMatTiledF32,
        DType::F16 => Shader::MulMatTiledF16,
        DType::BF16 => Shader::MulMatTiledBf16,
        _ => return None,
    };
    let (ad, bd, dd) = (&a.desc, &b.desc, &dst.desc);
    let fits = ad.ne[0] % 8 == 0
        && ad.nb[0] == a.dtype.block_bytes() as u64
        && b.dtype == DType::F32
        && bd.nb[0] == 4
        && dd.nb[0] == 4
        && aligned_rows(ad)
        && aligned_rows(bd);
    if !fits {
        return None;
    }
    let (x, y, z) = (dd.ne[0].div_ceil(BLOCK), dd.ne[1].div_ceil(BLOCK), dd.ne[2].checked_mul(dd.ne[3])?);
    if x > 65535 || y > 65535 || z > 65535 {
        return None;
    }
    Some(Dispatch { shader, args: args_of(dst, srcs), groups: [x, y, z] })
}
