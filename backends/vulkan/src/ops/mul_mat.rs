//! MUL_MAT: a (f32, f16, bf16 or quantized) times f32 b into f32, broadcasting a over dims 2
//! and 3 as ggml does. One column (n = 1) takes the matrix-vector shader, where each
//! workgroup reduces a few rows over k (`mul_mat_vec.comp`; for q8_0 and q4_0 weights on a
//! device with packed 8-bit dot products, `mul_mat_vec_q8.comp`); wider products take a
//! tensor-core shader where the device has one and the operands fit it (workgroup-scope
//! matrices, `mul_mat_cm2.rs`, before subgroup-scope ones, `mul_mat_coopmat.rs`), else
//! float weights with aligned rows the 128 x 128 tiled shader (`mul_mat_tiled.rs`), else
//! the general one, 64 x 64 results per workgroup (`mul_mat.comp`).

use tessera_core::{DType, Op};

use super::{
    args_of, linear_groups, mul_mat_cm2, mul_mat_coopmat, mul_mat_tiled, need, no_shader, src, Caps, Dispatch, Operand,
    Why,
};
use crate::shaders::Shader;

/// Rows of the result per workgroup of `mul_mat_vec.comp` (`ROWS` there).
const VEC_ROWS: u32 = 4;
/// Rows of the result per workgroup of `mul_mat_vec_q8.comp` (`ROWS` there): more than the
/// float shader's, since each workgroup quantizes the whole column again.
const VEC_Q8_ROWS: u32 = 16;
/// The tile of the result per workgroup of `mul_mat.comp` (`BM`, `BN` there).
const TILE: u32 = 64;
/// Columns up to which a product of few row tiles runs as matrix-vector products.
const FEW_COLUMNS: u32 = 32;
/// Row tiles (of `TILE`) below which a product counts as small.
const FEW_TILES: u32 = 64;
/// The most workgroups along any side of a dispatch (z counts the matrices of the result).
const MAX_GROUPS: u32 = 65535;

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
    let layers = b2
        .checked_mul(b3)
        .filter(|&z| z <= MAX_GROUPS)
        .ok_or_else(|| format!("{b2} x {b3} matrices are more than the {MAX_GROUPS} workgroup layers of a dispatch"))?;
    if let Some(d) = mul_mat_cm2::plan(caps, a, b, dst, srcs).or_else(|| mul_mat_coopmat::plan(caps, a, b, dst, srcs)) {
        return Ok(d);
    }
    let args = args_of(dst, srcs);
    // q8_0 and q4_0 weights take packed 8-bit dot products where the device has them.
    let (vec, vec_rows) = if caps.integer_dot && matches!(a.dtype, DType::Q8_0 | DType::Q4_0) {
        (Shader::MulMatVecQ8, VEC_Q8_ROWS)
    } else {
        (Shader::MulMatVec, VEC_ROWS)
    };
    if n == 1 {
        let [x, y, _] = linear_groups(u64::from(m), vec_rows)?;
        return Ok(Dispatch { shader: vec, args, groups: [x, y, layers] });
    }
    // A few columns of one small matrix would leave the tiled shaders a handful of
    // workgroups: one matrix-vector product per column spreads them over the device.
    if n <= FEW_COLUMNS && layers == 1 && m.div_ceil(TILE) < FEW_TILES {
        let mut args = args;
        args.i[2] = 1;
        let [x, y, _] = linear_groups(u64::from(m), vec_rows)?;
        return Ok(Dispatch { shader: vec, args, groups: [x, y, n] });
    }
    if let Some(d) = mul_mat_tiled::plan(a, b, dst, srcs) {
        return Ok(d);
    }
    let (x, y) = (m.div_ceil(TILE), n.div_ceil(TILE));
    need(x <= MAX_GROUPS && y <= MAX_GROUPS, || {
        format!("a {m} x {n} result needs more than 65535 tiles of {TILE} along a side")
    })?;
    Ok(Dispatch { shader: Shader::MulMat, args, groups: [x, y, layers] })
}

#[cfg(test)]
mod tests {
    use tessera_core::tensor::MAX_SRC;

    use super::*;
    use crate::ops::plan as plan_node;
    use crate::ops::rows::dense;

    fn product(caps: &Caps, a: Operand, b: Operand) -> Result<Dispatch, Why> {
        let dst = dense(
            DType::F32,
            [a.desc.ne[1] as usize, b.desc.ne[1] as usize, b.desc.ne[2] as usize, b.desc.ne[3] as usize],
        );
        let mut srcs = [None; MAX_SRC];
        srcs[0] = Some(a);
        srcs[1] = Some(b);
        plan_node(caps, Op::MulMat, dst, &srcs)
    }

    #[test]
    fn one_column_takes_the_matrix_vector_shader_and_more_the_tiles() {
        let caps = Caps::default();
        let a = dense(DType::Q4_K, [512, 67, 2, 1]);
        let d = product(&caps, a, dense(DType::F32, [512, 1, 4, 3])).expect("a q4_K matrix-vector product");
        assert_eq!((d.shader, d.groups), (Shader::MulMatVec, [17, 1, 12]));
        let d = product(&caps, a, dense(DType::F32, [512, 65, 2, 3])).expect("a q4_K product");
        assert_eq!((d.shader, d.groups), (Shader::MulMat, [2, 2, 6]));
        let wide = product(&caps, dense(DType::F32, [4, 8, 1, 1]), dense(DType::F32, [4, 65536 * 64 + 1, 1, 1]));
        assert!(wide.is_err(), "more tiles than a dispatch has");
    }

    #[test]
    fn b_repeats_a_over_dims_2_and_3_only_by_whole_multiples() {
        let caps = Caps::default();
        let a = dense(DType::F16, [32, 7, 2, 3]);
        assert!(product(&caps, a, dense(DType::F32, [32, 5, 4, 3])).is_ok());
        assert!(product(&caps, a, dense(DType::F32, [32, 5, 3, 3])).is_err(), "3 matrices for 2");
        assert!(product(&caps, a, dense(DType::F32, [33, 5, 2, 3])).is_err(), "another k");
        assert!(product(&caps, dense(DType::I32, [32, 7, 1, 1]), dense(DType::F32, [32, 5, 1, 1])).is_err());
        assert!(product(&caps, a, dense(DType::F16, [32, 5, 2, 3])).is_err(), "b is f32");
    }

    #[test]
    fn tensor_cores_take_the_16_bit_products_that_fit_them_where_the_device_has_them() {
        let (a, b) = (dense(DType::F16, [256, 64, 1, 1]), dense(DType::F32, [256, 64, 1, 1]));
        let with = Caps { coopmat_f16: true, ..Caps::default() };
        assert_eq!(product(&with, a, b).map(|d| d.shader), Ok(Shader::MulMatCoopmatF16));
        assert_eq!(product(&Caps::default(), a, b).map(|d| d.shader), Ok(Shader::MulMatTiledF16));
        // Workgroup-scope matrices first; bf16 weights by their own flags.
        let both = Caps { coopmat2_f16: true, ..with };
        assert_eq!(product(&both, a, b).map(|d| d.shader), Ok(Shader::MulMatCm2));
        let h = dense(DType::BF16, [256, 64, 1, 1]);
        assert_eq!(product(&both, h, b).map(|d| d.shader), Ok(Shader::MulMatTiledBf16));
        let bf16 = Caps { coopmat_bf16: true, ..Caps::default() };
        assert_eq!(product(&bf16, h, b).map(|d| d.shader), Ok(Shader::MulMatCoopmatBf16));
        let q = dense(DType::Q8_0, [256, 64, 1, 1]);
        assert_eq!(product(&with, q, b).map(|d| d.shader), Ok(Shader::MulMat));
        // A few columns of a small matrix: one matrix-vector product per column.
        let few = product(&Caps::default(), a, dense(DType::F32, [256, 16, 1, 1])).unwrap();
        assert_eq!((few.shader, few.groups, few.args.i[2]), (Shader::MulMatVec, [16, 1, 16], 1));
    }

    #[test]
    fn q8_0_and_q4_0_columns_take_integer_dot_products_where_the_device_has_them() {
        let with = Caps { integer_dot: true, ..Caps::default() };
        let (one, few) = (dense(DType::F32, [256, 1, 1, 1]), dense(DType::F32, [256, 8, 1, 1]));
        for t in [DType::Q8_0, DType::Q4_0] {
            let a = dense(t, [256, 64, 1, 1]);
            assert_eq!(product(&with, a, one).map(|d| d.shader), Ok(Shader::MulMatVecQ8));
            assert_eq!(product(&with, a, few).map(|d| d.shader), Ok(Shader::MulMatVecQ8));
            assert_eq!(product(&Caps::default(), a, one).map(|d| d.shader), Ok(Shader::MulMatVec));
        }
        let k = dense(DType::Q4_K, [256, 64, 1, 1]);
        assert_eq!(product(&with, k, one).map(|d| d.shader), Ok(Shader::MulMatVec));
    }
}
