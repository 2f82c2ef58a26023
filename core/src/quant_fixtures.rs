//! Every block type against ggml's own results (fixtures made by
//! scripts/make_kquant_fixture.py): dequantization bit for bit as the `gguf` package computes
//! it, quantization byte for byte as ggml's reference quantizer writes it; then the quantizers
//! on hostile input, and ggml's scale searches against the range fit they replaced.

use alloc::vec;
use alloc::vec::Vec;

use crate::convert::{row_from_f32, row_to_f32};
use crate::dtype::DType;

macro_rules! fixture {
    ($name:literal, $ext:literal) => {
        include_bytes!(concat!("../../tests/data/kquant/", $name, $ext)).as_slice()
    };
}

/// Two fixture files: `(blocks, values)` for dequantization, `(values, blocks)` for quantization.
type Pair = (&'static [u8], &'static [u8]);

/// Each type with its dequantization and quantization fixtures.
fn fixtures() -> [(DType, Pair, Pair); 8] {
    macro_rules! entry {
        ($t:expr, $name:literal) => {
            (
                $t,
                (fixture!($name, ".blocks"), fixture!($name, ".f32")),
                (fixture!("quantizer_input", ".f32"), fixture!($name, ".quant.blocks")),
            )
        };
    }
    [
        entry!(DType::Q4_1, "q4_1"),
        entry!(DType::Q5_0, "q5_0"),
        entry!(DType::Q5_1, "q5_1"),
        entry!(DType::Q2_K, "q2_K"),
        entry!(DType::Q3_K, "q3_K"),
        entry!(DType::Q4_K, "q4_K"),
        entry!(DType::Q5_K, "q5_K"),
        entry!(DType::Q6_K, "q6_K"),
    ]
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
}

/// Random blocks and their values as llama.cpp's `gguf` package dequantizes them: equal bit
/// for bit.
#[test]
#[cfg_attr(miri, ignore = "safe arithmetic only, and minutes under Miri")]
fn dequantization_is_bit_identical_to_the_gguf_package() {
    for (t, (blocks, values), _) in fixtures() {
        let want = f32s(values);
        assert_eq!(blocks.len() / t.block_bytes() * t.block_len(), want.len(), "{t}");
        let mut got = vec![0.0f32; want.len()];
        row_to_f32(t, blocks, &mut got);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.to_bits(), w.to_bits(), "{t} value {i}: {g} != {w}");
        }
    }
}

/// Rows of varied character quantized as ggml's reference quantizer does: the same bytes.
#[test]
#[cfg_attr(miri, ignore = "safe arithmetic only, and minutes under Miri")]
fn quantization_is_byte_identical_to_ggml() {
    for (t, _, (values, blocks)) in fixtures() {
        let x = f32s(values);
        let mut got = vec![0u8; t.row_bytes(x.len()).unwrap()];
        row_from_f32(t, &x, &mut got);
        assert_eq!(got.len(), blocks.len(), "{t}");
        for (b, (g, w)) in got.chunks_exact(t.block_bytes()).zip(blocks.chunks_exact(t.block_bytes())).enumerate() {
            assert_eq!(g, w, "{t} block {b}");
        }
    }
}

/// A small deterministic generator: uniform in `[-1, 1)` and (Box-Muller) Gaussian values.
struct Rng(u64);

impl Rng {
    fn uniform(&mut self) -> f32 {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    fn gaussian(&mut self) -> f32 {
        let u = (self.uniform() + 1.0) * 0.5 + 1e-7;
        let v = self.uniform();
        crate::kquant_search::sqrtf(-2.0 * libm::logf(u)) * libm::cosf(core::f32::consts::PI * v)
    }
}

/// Quantizers must take any f32 without panicking (in debug builds too, where arithmetic
/// overflow would), and dequantize to something of the right length.
#[test]
#[cfg_attr(miri, ignore = "safe arithmetic only, and minutes under Miri")]
fn quantizers_never_panic() {
    let mut rng = Rng(7);
    let specials = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, f32::MAX, f32::MIN, 1e-45, -0.0, 0.0, 65504.0, 1e30];
    let rows: Vec<Vec<f32>> = vec![
        vec![0.0; 256],
        vec![f32::NAN; 256],
        vec![f32::INFINITY; 256],
        vec![f32::MAX; 256],
        vec![-1e38; 256],
        (0..256).map(|i| specials[i % specials.len()]).collect(),
        (0..256).map(|i| if i == 17 { f32::NAN } else { rng.gaussian() }).collect(),
        (0..256).map(|i| if i % 16 == 3 { 1e35 } else { rng.uniform() * 1e-30 }).collect(),
        (0..256).map(|_| rng.uniform() * 3e38).collect(),
    ];
    for t in DType::ALL.into_iter().filter(|t| t.is_quantized()) {
        for x in &rows {
            let mut q = vec![0u8; t.row_bytes(x.len()).unwrap()];
            row_from_f32(t, x, &mut q);
            let mut y = vec![0.0f32; x.len()];
            row_to_f32(t, &q, &mut y);
        }
        // Zeros stay zeros.
        let mut q = vec![0xa5u8; t.row_bytes(256).unwrap()];
        row_from_f32(t, &[0.0; 256], &mut q);
        let mut y = vec![1.0f32; 256];
        row_to_f32(t, &q, &mut y);
        assert!(y.iter().all(|v| *v == 0.0), "{t}");
    }
}

/// Root mean squared error of a round trip through `quantize` (Q4_K, Q5_K or Q6_K).
fn rmse(t: DType, quantize: fn(&[f32], &mut [u8]), x: &[f32]) -> f32 {
    let mut q = vec![0u8; t.row_bytes(x.len()).unwrap()];
    quantize(x, &mut q);
    let mut y = vec![0.0f32; x.len()];
    row_to_f32(t, &q, &mut y);
    let err: f32 = x.iter().zip(&y).map(|(a, b)| (a - b) * (a - b)).sum();
    crate::kquant_search::sqrtf(err / x.len() as f32)
}

/// ggml's scale searches (now the K-quant quantizers) lose less than the range fit tessera
/// used before, on uniform and on Gaussian data. Measured RMSE, range fit -> search
/// (64 blocks each): uniform q4_K 0.0359 -> 0.0317, q5_K 0.0176 -> 0.0160, q6_K 0.0086 ->
/// 0.0076; Gaussian q4_K 0.0798 -> 0.0712, q5_K 0.0391 -> 0.0361, q6_K 0.0196 -> 0.0176.
#[test]
#[cfg_attr(miri, ignore = "safe arithmetic only, and minutes under Miri")]
fn scale_searches_beat_the_range_fit() {
    use crate::{kquant, kquant_minmax};
    type Quantize = fn(&[f32], &mut [u8]);
    let types: [(DType, Quantize, Quantize); 3] = [
        (DType::Q4_K, kquant_minmax::quantize_row_q4_k, kquant::quantize_row_q4_k),
        (DType::Q5_K, kquant_minmax::quantize_row_q5_k, kquant::quantize_row_q5_k),
        (DType::Q6_K, kquant_minmax::quantize_row_q6_k, kquant::quantize_row_q6_k),
    ];
    let mut rng = Rng(2019);
    let uniform: Vec<f32> = (0..64 * 256).map(|_| rng.uniform()).collect();
    let gaussian: Vec<f32> = (0..64 * 256).map(|_| rng.gaussian()).collect();
    for (data, x) in [("uniform", &uniform), ("gaussian", &gaussian)] {
        for (t, before, after) in types {
            let (old, new) = (rmse(t, before, x), rmse(t, after, x));
            #[cfg(feature = "std")]
            std::println!("{data} {t}: RMSE range fit {old:.4}, ggml search {new:.4}");
            assert!(new < old, "{data} {t}: the search's RMSE {new} is not below the range fit's {old}");
        }
    }
}
