//! AVX2 + FMA + F16C kernels.

mod gemm;
mod gemv;
mod kgemv;
mod qgemm;
mod quantize;

use super::{GemmKernels, GemvKernels, KQuantGemv, Kernels, QGemmKernels};

/// The int8 GEMM kernels (signed weights; Q4_0 as its stored nibbles), also used by the
/// AVX-512 table without VNNI.
pub const QGEMM: QGemmKernels = QGemmKernels {
    mr: qgemm::MR,
    nr: qgemm::NR,
    tile: qgemm::tile,
    pack_a: qgemm::pack_a,
    q4_0_tile: Some(qgemm::tile_nibbles),
};
/// The matrix-vector kernels (int8 ones for signed weights; Q4_0 as its stored nibbles).
pub const GEMV: GemvKernels = GemvKernels {
    f32: gemv::f32,
    f16: gemv::f16,
    bf16: gemv::bf16,
    bf16_rounded: None,
    bf16_columns: super::Bf16Columns::Separate,
    q8_0: gemv::q8_0,
    q4_0: gemv::q4_0,
    q8_0_bias: 0,
    q4_0_bias: gemv::Q4_0_BIAS,
    arrange: super::as_quantized,
    kquant: Some(KQuantGemv { gemv: kgemv::gemv, quantize: kgemv::quantize }),
};

/// The float GEMM (BF16 weights widened to f32 while packing).
const GEMM: GemmKernels = GemmKernels::f32(gemm::MR, gemm::NR, gemm::tile, gemm::pack_a, gemm::pack_b);

pub static KERNELS: Kernels = Kernels {
    name: "avx2",
    gemm: GEMM,
    gemm_bf16: GEMM,
    qgemm: QGEMM,
    gemv: GEMV,
    quantize: quantize::quantize,
    rows: crate::fast::vector::AVX2,
    kquant: None,
    unsigned_weights: false,
};
