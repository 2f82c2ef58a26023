//! Portable kernels: plain Rust that any target compiles (LLVM vectorises some of it with
//! the baseline instruction set). The fallback everywhere, and the only kernels of
//! `no_std` builds for targets without SIMD kernels.

mod gemm;
mod gemv;
// The K-quant int8 kernels exist only on x86-64 (AVX-512 VNNI); elsewhere K-quant products
// take the dequantizing driver, and only the activation writer here is linked.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub mod kquant;
pub mod pack;
mod qgemm;
pub mod quantize;

use super::{GemmKernels, GemvKernels, Kernels, QGemmKernels};

/// Float tile: 8 weight rows by 4 activation columns.
const MR: usize = 8;
const NR: usize = 4;
/// Int8 tile: 4 weight rows by 4 activation columns.
const QMR: usize = 4;
const QNR: usize = 4;

/// The float GEMM (BF16 weights widened to f32 while packing).
const GEMM: GemmKernels = GemmKernels::f32(MR, NR, gemm::tile::<MR, NR>, pack::pack_a, pack::pack_b);

/// The portable table (a `const` so that other tables can start from it).
pub const TABLE: Kernels = Kernels {
    name: "scalar",
    gemm: GEMM,
    gemm_bf16: GEMM,
    qgemm: QGemmKernels { mr: QMR, nr: QNR, tile: qgemm::tile::<QMR, QNR>, pack_a: pack::pack_a_q, q4_0_tile: None },
    gemv: GemvKernels {
        f32: gemv::f32,
        f16: gemv::f16,
        bf16: gemv::bf16,
        bf16_rounded: None,
        bf16_columns: super::Bf16Columns::Separate,
        q8_0: gemv::quant,
        q4_0: gemv::quant,
        q8_0_bias: 0,
        q4_0_bias: 0,
        arrange: super::as_quantized,
        kquant: None,
    },
    quantize: quantize::quantize,
    rows: crate::fast::vector::SCALAR,
    kquant: None,
    unsigned_weights: false,
};

pub static KERNELS: Kernels = TABLE;
