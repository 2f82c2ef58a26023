//! MUL_MAT of f16 or bf16 weights on workgroup-scope cooperative matrices (`mul_mat_cm2.comp`),
//! where the device has `VK_NV_cooperative_matrix2` and every operand's base and rows are
//! 16-byte aligned.

use tessera_core::DType;

use super::mul_mat_coopmat::float16_product_fits;
use super::mul_mat_tiled::aligned_rows;
use super::{args_of, Caps, Dispatch, Operand};
use crate::shaders::Shader;

/// Columns of b per workgroup (`TN` in the shader).
const COLUMNS: u32 = 128;

/// Workgroups from which blocks of 256 rows of a fill the device: below, blocks of 128 rows
/// give twice the workgroups. On an H200 (132 SMs), 4096^3 runs at 199 TFLOPS in 512 blocks
/// of 256 rows against 147 in blocks of 128; 4096 x 512 x 14336 at 151 in 128 blocks of 128
/// rows against 106 in 64 of 256.
const WIDE_GROUPS: u32 = 256;

/// The dispatch of a validated MUL_MAT, or `None` where it does not apply.
pub(super) fn plan(caps: &Caps, a: Operand, b: Operand, dst: Operand, srcs: &[Option<Operand>]) -> Option<Dispatch> {
    let (narrow, wide) = match a.dtype {
        DType::F16 if caps.coopmat2_f16 => (Shader::MulMatCm2, Shader::MulMatCm2Wide),
        DType::BF16 if caps.coopmat2_bf16 => (Shader::MulMatCm2Bf16, Shader::MulMatCm2Bf16Wide),
        _ => return None,
    };
    let dd = &dst.desc;
    // The store's base must be 16-byte aligned too, and a tensor layout's rows may not overlap.
    let apart = |t: &Operand| t.desc.ne[1] <= 1 || t.desc.nb[1] >= t.desc.ne[0] as u64 * t.desc.nb[0];
    if !float16_product_fits(&a, &b, &dst) || !aligned_rows(dd) || ![a, b, dst].iter().all(apart) {
        return None;
    }
    let y = dd.ne[1].div_ceil(COLUMNS);
    let z = dd.ne[2].checked_mul(dd.ne[3])?;
    let fills = dd.ne[0].div_ceil(256).saturating_mul(y).saturating_mul(z) >= WIDE_GROUPS;
    let (shader, rows) = if fills { (wide, 256) } else { (narrow, 128) };
    let x = dd.ne[0].div_ceil(rows);
    if x > 65535 || y > 65535 || z > 65535 {
        return None;
    }
    Some(Dispatch { shader, args: args_of(dst, srcs), groups: [x, y, z] })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::rows::dense;

    fn product_of(caps: &Caps, weights: DType, m: usize, n: usize, k: usize) -> Option<Dispatch> {
        let (a, b) = (dense(weights, [k, m, 1, 1]), dense(DType::F32, [k, n, 1, 1]));
        plan(caps, a, b, dense(DType::F32, [m, n, 1, 1]), &[Some(a), Some(b)])
    }

    fn product(m: usize, n: usize, k: usize) -> Option<Dispatch> {
        product_of(&Caps { coopmat2_f16: true, ..Caps::default() }, DType::F16, m, n, k)
    }

    #[test]
    fn blocks_of_256_rows_only_where_they_fill_the_device() {
        let d = product(4096, 4096, 4096).expect("a square product");
        assert_eq!((d.shader, d.groups), (Shader::MulMatCm2Wide, [16, 32, 1]));
        let d = product(4096, 512, 14336).expect("a prompt-sized product");
        assert_eq!((d.shader, d.groups), (Shader::MulMatCm2, [32, 4, 1]));
        assert!(product(4096, 8, 4096).is_none(), "few columns take the matrix-vector shader");
        assert!(product(4096, 64, 4100).is_none(), "k not a multiple of 8");
        // The conformance suite's case for the wide blocks: 2 x 2 blocks over 64 matrices.
        let (a, b) = (dense(DType::F16, [32, 300, 1, 1]), dense(DType::F32, [32, 129, 8, 8]));
        let caps = Caps { coopmat2_f16: true, ..Caps::default() };
        let d = plan(&caps, a, b, dense(DType::F32, [300, 129, 8, 8]), &[Some(a), Some(b)]).expect("batched");
        assert_eq!((d.shader, d.groups), (Shader::MulMatCm2Wide, [2, 2, 64]));
        let (a, b) = (dense(DType::F16, [64, 256, 1, 1]), dense(DType::F32, [64, 32, 1, 1]));
        let mut overlapping = b;
        overlapping.desc.nb[1] = 16;
        let caps = Caps { coopmat2_f16: true, ..Caps::default() };
        let dst = dense(DType::F32, [256, 32, 1, 1]);
        assert!(plan(&caps, a, b, dst, &[Some(a), Some(b)]).is_some());
        assert!(plan(&caps, a, overlapping, dst, &[Some(a), Some(overlapping)]).is_none(), "rows overlap");
    }

    #[test]
    fn each_weight_type_takes_its_shader_where_the_device_has_it() {
        let bf16 = Caps { coopmat2_bf16: true, ..Caps::default() };
        let d = product_of(&bf16, DType::BF16, 4096, 512, 4096).expect("a bf16 product");
        assert_eq!(d.shader, Shader::MulMatCm2Bf16);
        assert!(product_of(&bf16, DType::F16, 4096, 512, 4096).is_none(), "no f16 workgroup-scope matrices");
        assert!(product_of(&bf16, DType::F32, 4096, 512, 4096).is_none(), "f32 weights");
    }
}
