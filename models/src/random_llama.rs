//! Llama-shaped models with random weights, written as GGUF in llama.cpp's layout with a
//! made-up vocabulary: what tests and benchmarks run (tessera and llama.cpp alike) where real
//! weights cannot be downloaded. The same shape, type and seed always give the same file.

use std::path::Path;

use tessera_core::DType;
use tessera_std::gguf_writer::GgufWriter;

use crate::error::{Error, Result};
use crate::llama_config::LlamaConfig;
use crate::llama_vocab::LlamaVocab;
use crate::splitmix::SplitMix;

/// A 2-block model with grouped-query attention (8 query heads, 2 KV heads): the one the
/// float64 reference (`scripts/llama_reference.py`) checks.
pub const TINY: LlamaConfig = LlamaConfig {
    vocab: 512,
    hidden: 128,
    layers: 2,
    ff: 320,
    heads: 8,
    kv_heads: 2,
    rope_dims: 16,
    rope_base: 10_000.0,
    eps: 1e-5,
    context: 512,
};

/// About 1.1 billion parameters, shaped like TinyLlama: what the speed comparisons run.
pub const ONE_B: LlamaConfig = LlamaConfig {
    vocab: 32_000,
    hidden: 2048,
    layers: 16,
    ff: 5632,
    heads: 32,
    kv_heads: 8,
    rope_dims: 64,
    rope_base: 10_000.0,
    eps: 1e-5,
    context: 4096,
};

/// About 7.2 billion parameters, shaped like Mistral 7B: its feed-forward products are the
/// 4096 x 14336 ones of the MUL_MAT benchmarks.
pub const SEVEN_B: LlamaConfig = LlamaConfig {
    vocab: 32_000,
    hidden: 4096,
    layers: 32,
    ff: 14_336,
    heads: 32,
    kv_heads: 8,
    rope_dims: 128,
    rope_base: 1_000_000.0,
    eps: 1e-5,
    context: 8192,
};

/// The shape called `name` (`tiny`, `1b`, `7b`).
pub fn shape(name: &str) -> Option<LlamaConfig> {
    match name.to_lowercase().as_str() {
        "tiny" => Some(TINY),
        "1b" => Some(ONE_B),
        "7b" => Some(SEVEN_B),
        _ => None,
    }
}

/// FNV-1a of `name`, to give every tensor its own stream.
fn name_seed(name: &str, seed: u64) -> u64 {
    name.bytes().fold(0xCBF2_9CE4_8422_2325 ^ seed, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01B3))
}

/// One tensor of the model: name, shape (ggml order) and how its values are drawn.
struct Spec {
    name: String,
    ne: Vec<usize>,
    /// Norm weights are `1 + 0.1 u`, everything else `amplitude * u`, `u` uniform in [-1, 1).
    norm: bool,
    amplitude: f32,
}

fn specs(c: &LlamaConfig) -> Vec<Spec> {
    let (h, kv, ff) = (c.hidden, c.kv_dim(), c.ff);
    // Uniform amplitude sqrt(3 / fan_in) gives unit variance per output for unit inputs; the
    // head's is larger so that logits spread over a few units and greedy choices are clear.
    let matrix = |name: String, fan_in: usize, out: usize, gain: f32| Spec {
        name,
        ne: vec![fan_in, out],
        norm: false,
        amplitude: gain * (3.0 / fan_in as f32).sqrt(),
    };
    let norm = |name: String| Spec { name, ne: vec![h], norm: true, amplitude: 0.0 };
    let mut out = vec![Spec { name: "token_embd.weight".into(), ne: vec![h, c.vocab], norm: false, amplitude: 1.0 }];
    for l in 0..c.layers {
        let p = format!("blk.{l}");
        out.push(norm(format!("{p}.attn_norm.weight")));
        out.push(matrix(format!("{p}.attn_q.weight"), h, h, 1.0));
        out.push(matrix(format!("{p}.attn_k.weight"), h, kv, 1.0));
        out.push(matrix(format!("{p}.attn_v.weight"), h, kv, 1.0));
        out.push(matrix(format!("{p}.attn_output.weight"), h, h, 0.5));
        out.push(norm(format!("{p}.ffn_norm.weight")));
        out.push(matrix(format!("{p}.ffn_gate.weight"), h, ff, 1.0));
        out.push(matrix(format!("{p}.ffn_up.weight"), h, ff, 1.0));
        out.push(matrix(format!("{p}.ffn_down.weight"), ff, h, 0.5));
    }
    out.push(norm("output_norm.weight".into()));
    out.push(matrix("output.weight".into(), h, c.vocab, 3.0));
    out
}

/// The type a tensor gets in a model of `matrix_type`: norms stay F32; a matrix whose rows do
/// not fill `matrix_type`'s blocks falls back to F16.
fn tensor_type(spec: &Spec, matrix_type: DType) -> DType {
    if spec.norm {
        DType::F32
    } else if spec.ne[0] % matrix_type.block_len() == 0 {
        matrix_type
    } else {
        DType::F16
    }
}

/// The GGUF bytes of a random model of shape `c` with its matrices in `matrix_type`, drawn
/// from `seed`, with a made-up vocabulary of `c.vocab` tokens. Tensors are drawn and
/// quantized on up to `threads` threads; the result does not depend on how many.
pub fn gguf_writer(c: &LlamaConfig, matrix_type: DType, seed: u64, threads: usize) -> Result<GgufWriter> {
    c.validate().map_err(|message| Error::InvalidConfig { message })?;
    let vocab = LlamaVocab::made_up(c.vocab)?;
    let mut w = GgufWriter::new();
    w.add_string("general.name", "tessera random llama");
    c.write_gguf(&mut w);
    vocab.write_gguf(&mut w);
    let specs = specs(c);
    let mut data: Vec<Option<Result<Vec<u8>>>> = (0..specs.len()).map(|_| None).collect();
    let threads = threads.clamp(1, 64);
    std::thread::scope(|s| {
        for (t, chunk) in data.chunks_mut(specs.len().div_ceil(threads)).enumerate() {
            let specs = &specs;
            let first = t * specs.len().div_ceil(threads);
            s.spawn(move || {
                for (k, slot) in chunk.iter_mut().enumerate() {
                    let spec = &specs[first + k];
                    *slot = Some(draw(spec, tensor_type(spec, matrix_type), seed));
                }
            });
        }
    });
    for (spec, bytes) in specs.iter().zip(data) {
        let bytes = bytes.ok_or(Error::Engine(tessera_core::Error::Cancelled))??;
        w.add_tensor(&spec.name, tensor_type(spec, matrix_type), &spec.ne, &bytes)?;
    }
    Ok(w)
}

/// The values of one tensor, converted to `dtype`.
fn draw(spec: &Spec, dtype: DType, seed: u64) -> Result<Vec<u8>> {
    let mut rng = SplitMix(name_seed(&spec.name, seed));
    let n: usize = spec.ne.iter().product();
    let values: Vec<f32> = (0..n)
        .map(|_| if spec.norm { 1.0 + 0.1 * rng.symmetric() } else { spec.amplitude * rng.symmetric() })
        .collect();
    Ok(tessera_core::convert::to_bytes(dtype, &values)?)
}

/// Writes a random model to `path` (see [`gguf_writer`]).
pub fn write(path: &Path, c: &LlamaConfig, matrix_type: DType, seed: u64) -> Result<()> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let w = gguf_writer(c, matrix_type, seed, threads)?;
    w.write_to(path).map_err(|source| Error::Io { path: path.display().to_string(), source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_named_shape_is_a_model_the_loader_accepts() {
        for (name, expected) in [("tiny", TINY), ("1b", ONE_B), ("7B", SEVEN_B)] {
            let c = shape(name).unwrap_or_else(|| panic!("no shape '{name}'"));
            assert_eq!(c, expected, "{name}");
            c.validate().unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        assert_eq!(SEVEN_B.head_dim(), 128);
        assert!(shape("13b").is_none());
    }
}
