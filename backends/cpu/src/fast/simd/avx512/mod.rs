//! AVX-512 kernels (F, BW, VL, DQ; VNNI for the int8 dot products, BF16 for the bf16 ones,
//! AMX tiles for the bf16 GEMM where the processor and the operating system allow them).
//! Without VNNI the int8 kernels are the AVX2 ones; without BF16, BF16 weights are widened to
//! f32.

mod amx_gemm;
mod amx_gemv;
mod bf16_gemm;
mod bf16_gemv;
mod gemm;
mod gemv;
mod kgemm;
mod kgemv;
mod qgemm;
mod quantize;
mod silu;
mod stream;

use super::{avx2, Bf16Columns, GemmKernels, GemvKernels, KQuantGemv, KQuantKernels, Kernels, QGemmKernels};
use crate::fast::vector::RowKernels;

/// The float GEMM (BF16 weights widened to f32 while packing).
const GEMM: GemmKernels = GemmKernels::f32(gemm::MR, gemm::NR, gemm::tile, gemm::pack_a, gemm::pack_b);

/// The float kernels (AVX-512F) with the AVX2 int8 kernels.
pub static KERNELS: Kernels = Kernels {
    name: "avx512",
    gemm: GEMM,
    gemm_bf16: GEMM,
    qgemm: avx2::QGEMM,
    gemv: GemvKernels { f32: gemv::f32, f16: gemv::f16, bf16: gemv::bf16, ..avx2::GEMV },
    quantize: quantize::quantize,
    rows: RowKernels { unary: silu::unary, binary_streaming: stream::binary, ..crate::fast::vector::AVX512 },
    kquant: None,
    unsigned_weights: false,
};

/// Everything on AVX-512, int8 dot products with `vpdpbusd`.
pub static KERNELS_VNNI: Kernels = Kernels {
    name: "avx512-vnni",
    qgemm: QGemmKernels { mr: qgemm::MR, nr: qgemm::NR, tile: qgemm::tile, pack_a: qgemm::pack_a, q4_0_tile: None },
    gemv: GemvKernels {
        q8_0: gemv::q8_0,
        q4_0: gemv::q4_0,
        q8_0_bias: 128,
        q4_0_bias: 8,
        arrange: gemv::arrange,
        kquant: Some(KQuantGemv { gemv: kgemv::gemv, quantize: kgemv::quantize }),
        ..KERNELS.gemv
    },
    kquant: Some(KQuantKernels {
        mr: kgemm::MR,
        nr: kgemm::NR,
        tile: kgemm::tile::<false>,
        tile_halves: kgemm::tile::<true>,
        pack_a: kgemm::pack_a,
        quantize: kgemm::quantize,
    }),
    unsigned_weights: true,
    ..KERNELS
};

/// Everything of [`KERNELS_VNNI`], BF16 weights on native bf16 dot products (`vdpbf16ps`).
pub static KERNELS_BF16: Kernels = Kernels {
    name: "avx512-bf16",
    gemm_bf16: GemmKernels {
        mr: bf16_gemm::MR,
        nr: bf16_gemm::NR,
        k_pack: 2,
        k_block: 2,
        tile: bf16_gemm::tile,
        pack_a: bf16_gemm::pack_a,
        pack_b: bf16_gemm::pack_b,
    },
    gemv: GemvKernels { bf16_rounded: Some(bf16_gemv::bf16), ..KERNELS_VNNI.gemv },
    ..KERNELS_VNNI
};

/// Everything of [`KERNELS_BF16`], BF16 weights on AMX tiles.
pub static KERNELS_AMX: Kernels = Kernels {
    name: "amx-bf16",
    gemm_bf16: GemmKernels {
        mr: amx_gemm::MR,
        nr: amx_gemm::NR,
        k_pack: 2,
        k_block: amx_gemm::K_BLOCK,
        tile: amx_gemm::tile,
        pack_a: amx_gemm::pack_a,
        pack_b: amx_gemm::pack_b,
    },
    gemv: GemvKernels {
        bf16_rounded: Some(amx_gemv::bf16),
        bf16_columns: Bf16Columns::Paired { pad: amx_gemv::K_PAD },
        ..KERNELS_BF16.gemv
    },
    ..KERNELS_BF16
};

#[cfg(all(test, feature = "std"))]
mod tests {
    extern crate std;
    use alloc::vec;
    use alloc::vec::Vec;

    use super::*;
    use crate::fast::simd::{QuantOut, QvColumn, QK, QV_BLOCK_BYTES};

    fn vnni() -> bool {
        std::is_x86_feature_detected!("avx512vnni") && std::is_x86_feature_detected!("avx512bw")
    }

    fn data(n: usize) -> Vec<f32> {
        (0..n).map(|i| ((i * 7919 % 1000) as f32 / 500.0 - 1.0) * 1.7).collect()
    }

    #[test]
    fn quantizers_agree_with_the_portable_one() {
        if !vnni() {
            return;
        }
        let x = data(4 * QK);
        let run = |f: crate::fast::simd::Quantize| {
            let mut buf = vec![0u8; 4 * QV_BLOCK_BYTES];
            let p = buf.as_mut_ptr();
            // SAFETY: 4 blocks in, 4 blocks out.
            unsafe {
                let out = QuantOut {
                    q: p,
                    q_stride: QV_BLOCK_BYTES,
                    d: p.add(QK),
                    c: p.add(QK + 4),
                    dc_stride: QV_BLOCK_BYTES,
                };
                f(x.as_ptr(), 4, 128, &out);
            }
            buf
        };
        assert_eq!(run(quantize::quantize), run(crate::fast::simd::scalar::quantize::quantize));
    }

    #[test]
    fn int8_matrix_vector_products_agree_with_the_portable_ones() {
        if !vnni() {
            return;
        }
        use tessera_core::DType;
        // 37 blocks: two groups of 16 and a tail of 5; 1 to 8 columns.
        let (nb, m) = (37, 3);
        let k = nb * QK;
        for (dtype, n) in [DType::Q8_0, DType::Q4_0].into_iter().flat_map(|t| (1..=8).map(move |n| (t, n))) {
            let w = tessera_core::convert::to_bytes(dtype, &data(k * m)).unwrap();
            let rows =
                crate::fast::simd::Rows { ptr: w.as_ptr(), stride: dtype.row_bytes(k).unwrap(), count: m, dtype };
            let x = data(n * k + 5);
            let run = |table: &Kernels| {
                let mut q = vec![0u8; n * nb * QV_BLOCK_BYTES];
                let mut y = vec![0.0f32; m * n];
                // SAFETY: n columns of nb blocks in and out; m rows of nb blocks.
                unsafe {
                    for j in 0..n {
                        let out = QvColumn::out(q.as_mut_ptr().add(j * nb * QV_BLOCK_BYTES), nb);
                        (table.quantize)(x[5 + j * k..].as_ptr(), nb, table.gemv.bias(dtype), &out);
                        (table.gemv.arrange)(q.as_mut_ptr().add(j * nb * QV_BLOCK_BYTES), nb);
                    }
                    let f = if dtype == DType::Q8_0 { table.gemv.q8_0 } else { table.gemv.q4_0 };
                    f(nb, &rows, q.as_ptr(), nb * QV_BLOCK_BYTES, n, y.as_mut_ptr(), m);
                }
                y
            };
            let (fast, slow) = (run(&KERNELS_VNNI), run(&crate::fast::simd::scalar::KERNELS));
            for (a, b) in fast.iter().zip(&slow) {
                assert!((a - b).abs() <= 1e-4 * b.abs().max(1.0), "{dtype}, {n} columns: {fast:?} vs {slow:?}");
            }
        }
    }
}
