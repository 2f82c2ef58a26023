//! MUL_MAT of f16 or bf16 weights on tensor cores (`mul_mat_coopmat.comp`), where the device
//! has 16x16x16 cooperative matrices of the type over subgroups of 32 and the operands' rows are
//! 16-byte aligned; every other product takes the portable shaders.

use tessera_core::DType;

use super::mul_mat_tiled::aligned_rows;
use super::{args_of, Caps, Dispatch, Operand};
use crate::shaders::Shader;

/// Rows of a and columns of b per workgroup (`BM`, `BN` in the shader).
const BLOCK: u32 = 128;

/// Columns of b below which the matrix-vector shader is faster.
const MIN_COLUMNS: u32 = 16;

/// Whether a product has f16 or bf16 weights, f32 b and dst, k a multiple of 8, 16-byte
/// aligned rows of a and b and enough columns for tensor cores: what both tensor-core shaders
/// take.
pub(super) fn float16_product_fits(a: &Operand, b: &Operand, dst: &Operand) -> bool {
    let (ad, bd, dd) = (&a.desc, &b.desc, &dst.desc);
    matches!(a.dtype, DType::F16 | DType::BF16)
        && b.dtype == DType::F32
        && dst.dtype == DType::F32
        && ad.ne[0] % 8 == 0
        && ad.nb[0] == 2
        && bd.nb[0] == 4
        && dd.nb[0] == 4
        && aligned_rows(ad)
        && aligned_rows(bd)
        && bd.ne[1] >= MIN_COLUMNS
}

/// The tensor-core dispatch of a validated MUL_MAT, or `None` where it does not apply.
pub(super) fn plan(caps: &Caps, a: Operand, b: Operand, dst: Operand, srcs: &[Option<Operand>]) -> Option<Dispatch> {
    let shader = match a.dtype {
        DType::F16 if caps.coopmat_f16 => Shader::MulMatCoopmatF16,
        DType::BF16 if caps.coopmat_bf16 => Shader::MulMatCoopmatBf16,
        _ => return None,
    };
    if !float16_product_fits(&a, &b, &dst) {
        return None;
    }
    let dd = &dst.desc;
    let x = dd.ne[0].div_ceil(BLOCK);
    let y = dd.ne[1].div_ceil(BLOCK);
    let z = dd.ne[2].checked_mul(dd.ne[3])?;
    if x > 65535 || y > 65535 || z > 65535 {
        return None;
    }
    Some(Dispatch { shader, args: args_of(dst, srcs), groups: [x, y, z] })
}
