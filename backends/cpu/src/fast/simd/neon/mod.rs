//! aarch64 NEON kernels (dotprod for the int8 dot products; without it the int8 kernels are
//! the portable ones).

mod gemm;
mod gemv;
mod kgemv;
mod qgemm;
mod quantize;

use super::{scalar, GemmKernels, GemvKernels, KQuantGemv, Kernels, QGemmKernels};

/// The float GEMM (BF16 weights widened to f32 while packing).
const GEMM: GemmKernels = GemmKernels::f32(gemm::MR, gemm::NR, gemm::tile, gemm::pack_a, scalar::pack::pack_b);

/// NEON float kernels with the portable int8 kernels.
pub static KERNELS: Kernels = Kernels {
    name: "neon",
    gemm: GEMM,
    gemm_bf16: GEMM,
    gemv: GemvKernels { f32: gemv::any_float, f16: gemv::any_float, bf16: gemv::any_float, ..scalar::TABLE.gemv },
    quantize: quantize::quantize,
    rows: crate::fast::vector::NEON,
    ..scalar::TABLE
};

/// Everything on NEON, int8 dot products with `sdot`.
pub static KERNELS_DOT: Kernels = Kernels {
    name: "neon-dotprod",
    qgemm: QGemmKernels {
        mr: qgemm::MR,
        nr: qgemm::NR,
        tile: qgemm::tile,
        pack_a: scalar::pack::pack_a_q,
        q4_0_tile: None,
    },
    gemv: GemvKernels {
        q8_0: gemv::q8_0,
        q4_0: gemv::q4_0,
        arrange: super::as_quantized,
        kquant: Some(KQuantGemv { gemv: kgemv::gemv, quantize: kgemv::quantize }),
        ..KERNELS.gemv
    },
    ..KERNELS
};
