//! MUL_MAT: a (f32, f16, bf16 or quantized) times f32 b into f32, broadcasting a over dims 2
//! and 3 as ggml does. One column (n = 1) takes the matrix-vector shader, where each
//! workgroup reduces a few rows over k (`mul_mat_vec.comp`); wider products take the tiled
//! shader, 64 x 64 results per workgroup (`mul_mat.comp`), or the tensor-core shader where
//! the device has it and the operands fit it (`mul_mat_coopmat.rs`).

use tessera_core::{DType, Op};

use super::{args_of, linear_groups, mul_mat_coopmat, need, no_shader, src, Caps, Dispatch, Operand, Why};
use crate::shaders::Shader;

/// Rows of the result per workgroup of `mul_mat_vec.comp` (`ROWS` there).
const VEC_ROWS: u32 = 2;
/// The tile of the result per workgroup of `mul_mat.comp` (`BM`, `BN` there).
const TILE: u32 = 64;
/// The most workgroups along z: the matrices of the result, one per workgroup layer.
const MAX_GROUPS_Z: u32 = 65535;

pub(super) fn plan(caps: &Caps, op: Op, dst: Operand, srcs: &[Option<Operand>]) -> Result<Dispatch, Why> {
    let (a, b) = (src(srcs, 0)?, src(srcs, 1)?);
    need(a.dtype != DType::I32 && b.dtype == DType::F32 && dst.dtype == DType::F32, || {
        no_shader(op, &[a.dtype, b.dtype, dst.dtype])
    })?;
    let ([k, m, a2, a3], [bk, n, b2, b3]) = (a.desc.ne, b.desc.ne);
    need(bk == k && dst.desc.ne == [m, n, b2, b3] && a2 > 0 && a3 > 0 && b2 % a2 == 0 && b3 % a3 == 0, || {
        format!(
            "a {:?}, b {:?}, dst {:?} do not form a product [K, M, a2, a3] x [K, N, b2, b3] -> [M, N, b2, b3]",
            a.desc.ne, b.desc.ne, dst.desc.ne
        )
    })?;
    let layers = b2.checked_mul(b3).filter(|&z| z <= MAX_GROUPS_Z).ok_or_else(|| {
        format!("{b2} x {b3} matrices are more than the {MAX_GROUPS_Z} workgroup layers of a dispatch")
    })?;
    if caps.coopmat_f16 {
        if let Some(d) = mul_mat_coopmat::plan(a, b, dst, srcs) {
            return Ok(d);
        }
    }
    let args = args_of(dst, srcs);
    if n == 1 {
        let [x, y, _] = linear_groups(u64::from(m), VEC_ROWS)?;
        return Ok(Dispatch { shader: Shader::MulMatVec, args, groups: [x, y, layers] });
    }
    Ok(Dispatch { shader: Shader::MulMat, args, groups: [m.div_ceil(TILE), n.div_ceil(TILE), layers] })
}
