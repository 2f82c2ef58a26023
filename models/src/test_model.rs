//! A tiny BERT with deterministic weights, written as safetensors (with its `config.json`)
//! or GGUF, and a float64 reference of what it computes: what the unit tests load, embed
//! and convert without the downloaded model.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tessera_core::gguf::Gguf;
use tessera_core::{DType, Graph};
use tessera_std::gguf_writer::{GgufWriter, MetaValue};

use crate::bert::{self, Layout};
use crate::config::BertConfig;

/// Two layers of hidden size 32 (one q8_0 block per row) with four heads.
pub const TINY: BertConfig = BertConfig {
    vocab: 40,
    max_positions: 16,
    type_vocab: 2,
    hidden: 32,
    heads: 4,
    layers: 2,
    intermediate: 64,
    eps: 1e-12,
};

/// A WordPiece tokenizer over a handful of words, as `tokenizers` writes them.
pub const TOKENIZER_JSON: &str = r###"{
  "version": "1.0",
  "truncation": null,
  "padding": null,
  "added_tokens": [],
  "normalizer": {"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true,
                 "strip_accents": null, "lowercase": true},
  "pre_tokenizer": {"type": "BertPreTokenizer"},
  "post_processor": {"type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
               {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
    "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
    "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [2], "tokens": ["[CLS]"]},
                       "[SEP]": {"id": "[SEP]", "ids": [3], "tokens": ["[SEP]"]}}},
  "decoder": null,
  "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
            "max_input_chars_per_word": 100,
            "vocab": {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "a": 4, "sentence": 5,
                      ".": 6, "an": 7, "##other": 8, "one": 9}}
}"###;

/// A fresh, empty directory under the system's temporary directory.
pub fn temp_dir(what: &str) -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("tessera-models-{what}-{}-{n}", std::process::id()));
    std::fs::remove_dir_all(&dir).ok();
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Every weight of a model of shape `c`: name, `ne` (tessera's order) and values.
pub fn weights(c: &BertConfig) -> Vec<(String, [usize; 4], Vec<f32>)> {
    let mut g = Graph::new();
    let model = bert::build(&mut g, c, &bert::uniform_weight_type(DType::F32), Layout::packed(&[1])).unwrap();
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut uniform = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    };
    model
        .weights
        .iter()
        .map(|(name, _, id)| {
            let ne = g.tensor(*id).unwrap().ne();
            let n = ne.iter().product();
            let values = if name.contains("LayerNorm.weight") {
                (0..n).map(|_| 1.0 + 0.2 * uniform()).collect()
            } else if name.ends_with(".bias") || name.contains("LayerNorm") {
                (0..n).map(|_| 0.1 * uniform()).collect()
            } else {
                // Matrices scaled to keep activations near unit size.
                let scale = 2.0 / (ne[0] as f32).sqrt();
                (0..n).map(|_| scale * uniform()).collect()
            };
            (name.clone(), ne, values)
        })
        .collect()
}

/// The model as GGUF with its matrices in `matrix_type` (as `convert` lays it out).
pub fn gguf_bytes(c: &BertConfig, matrix_type: DType) -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.add_string("general.architecture", "bert");
    w.add_u32("bert.block_count", c.layers as u32);
    w.add_u32("bert.embedding_length", c.hidden as u32);
    w.add_u32("bert.feed_forward_length", c.intermediate as u32);
    w.add_u32("bert.attention.head_count", c.heads as u32);
    w.add_f32("bert.attention.layer_norm_epsilon", c.eps);
    let weight_type = bert::uniform_weight_type(matrix_type);
    for (name, ne, values) in weights(c) {
        let dims: Vec<usize> = if ne[1] > 1 { vec![ne[0], ne[1]] } else { vec![ne[0]] };
        w.add_tensor_f32(&name, weight_type(&name), &dims, &values).unwrap();
    }
    w.to_bytes()
}

/// The GGUF file `bytes` written anew with `edit` applied to its metadata entries (to drop or
/// change keys); tensors are copied as they are.
pub fn edit_gguf(bytes: &[u8], edit: impl FnOnce(&mut Vec<(String, MetaValue)>)) -> Vec<u8> {
    let gguf = Gguf::parse(bytes).unwrap();
    let mut metadata: Vec<(String, MetaValue)> =
        gguf.metadata().iter().map(|kv| (kv.key.to_string(), MetaValue::from(kv.value))).collect();
    edit(&mut metadata);
    let mut w = GgufWriter::new();
    for (key, value) in metadata {
        w.add_value(&key, value);
    }
    for t in gguf.tensors() {
        w.add_tensor(t.name(), t.dtype(), &t.ne()[..t.n_dims()], gguf.tensor_data(t)).unwrap();
    }
    w.to_bytes()
}

/// Writes the model as `model.safetensors` in `dir` (f32, checkpoint layout); returns its path.
pub fn write_safetensors(dir: &Path, c: &BertConfig) -> PathBuf {
    write_safetensors_in(dir, c, DType::F32)
}

/// [`write_safetensors`] with every tensor stored as `dtype` (F32, F16 or BF16), as checkpoints
/// saved in half precision store even their biases and layer norms.
pub fn write_safetensors_in(dir: &Path, c: &BertConfig, dtype: DType) -> PathBuf {
    let weights = weights(c);
    let bytes: Vec<Vec<u8>> =
        weights.iter().map(|(_, _, v)| tessera_core::convert::to_bytes(dtype, v).unwrap()).collect();
    let stored = match dtype {
        DType::F16 => safetensors::Dtype::F16,
        DType::BF16 => safetensors::Dtype::BF16,
        _ => safetensors::Dtype::F32,
    };
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = weights
        .iter()
        .zip(&bytes)
        .map(|((name, ne, _), data)| {
            let shape = if ne[1] > 1 { vec![ne[1], ne[0]] } else { vec![ne[0]] };
            (name.clone(), safetensors::tensor::TensorView::new(stored, shape, data).unwrap())
        })
        .collect();
    let path = dir.join("model.safetensors");
    safetensors::tensor::serialize_to_file(views, None, &path).unwrap();
    path
}

/// The `config.json` of a model of shape `c`, as Hugging Face writes it.
pub fn config_json(c: &BertConfig) -> String {
    format!(
        r#"{{"architectures": ["BertModel"], "hidden_act": "gelu", "hidden_size": {}, "intermediate_size": {},
            "layer_norm_eps": {:e}, "max_position_embeddings": {}, "model_type": "bert",
            "num_attention_heads": {}, "num_hidden_layers": {}, "type_vocab_size": {}, "vocab_size": {}}}"#,
        c.hidden, c.intermediate, c.eps, c.max_positions, c.heads, c.layers, c.type_vocab, c.vocab
    )
}

/// The sentence embedding of `ids` in float64, written from the definition of BERT (as
/// scripts/minilm_reference.py does): embeddings, post-norm layers with erf GELU, mean
/// pooling, L2 normalisation.
pub fn reference_embedding(c: &BertConfig, ids: &[u32]) -> Vec<f64> {
    let w: BTreeMap<String, ([usize; 4], Vec<f64>)> =
        weights(c).into_iter().map(|(name, ne, v)| (name, (ne, v.into_iter().map(f64::from).collect()))).collect();
    let (h, n) = (c.hidden, ids.len());
    let get = |name: &str| &w[name].1;
    // Rows of `x` are tokens; `y = x W^T + b` with W stored [out][in].
    let linear = |x: &Vec<Vec<f64>>, prefix: &str| -> Vec<Vec<f64>> {
        let (ne, m) = &w[&format!("{prefix}.weight")];
        let b = get(&format!("{prefix}.bias"));
        x.iter()
            .map(|row| (0..ne[1]).map(|o| b[o] + (0..ne[0]).map(|i| m[o * ne[0] + i] * row[i]).sum::<f64>()).collect())
            .collect()
    };
    let layer_norm = |x: Vec<Vec<f64>>, prefix: &str| -> Vec<Vec<f64>> {
        let (g, b) = (get(&format!("{prefix}.weight")), get(&format!("{prefix}.bias")));
        x.into_iter()
            .map(|row| {
                let mean = row.iter().sum::<f64>() / row.len() as f64;
                let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / row.len() as f64;
                let inv = 1.0 / (var + c.eps as f64).sqrt();
                row.iter().enumerate().map(|(i, v)| (v - mean) * inv * g[i] + b[i]).collect()
            })
            .collect()
    };
    let (word, pos, types) = (
        get("embeddings.word_embeddings.weight"),
        get("embeddings.position_embeddings.weight"),
        get("embeddings.token_type_embeddings.weight"),
    );
    let x: Vec<Vec<f64>> =
        (0..n).map(|t| (0..h).map(|i| word[ids[t] as usize * h + i] + pos[t * h + i] + types[i]).collect()).collect();
    let mut x = layer_norm(x, "embeddings.LayerNorm");
    let d = h / c.heads;
    for l in 0..c.layers {
        let p = format!("encoder.layer.{l}");
        let q = linear(&x, &format!("{p}.attention.self.query"));
        let k = linear(&x, &format!("{p}.attention.self.key"));
        let v = linear(&x, &format!("{p}.attention.self.value"));
        let mut ctx = vec![vec![0.0; h]; n];
        for head in 0..c.heads {
            let r = head * d..(head + 1) * d;
            for i in 0..n {
                let s: Vec<f64> =
                    (0..n).map(|j| r.clone().map(|e| q[i][e] * k[j][e]).sum::<f64>() / (d as f64).sqrt()).collect();
                let max = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = s.iter().map(|v| (v - max).exp()).collect();
                let sum: f64 = e.iter().sum();
                for j in 0..n {
                    for dim in r.clone() {
                        ctx[i][dim] += e[j] / sum * v[j][dim];
                    }
                }
            }
        }
        let add = |a: Vec<Vec<f64>>, b: &Vec<Vec<f64>>| -> Vec<Vec<f64>> {
            a.into_iter().zip(b).map(|(r, s)| r.iter().zip(s).map(|(u, v)| u + v).collect()).collect()
        };
        let attn = layer_norm(
            add(linear(&ctx, &format!("{p}.attention.output.dense")), &x),
            &format!("{p}.attention.output.LayerNorm"),
        );
        let up: Vec<Vec<f64>> = linear(&attn, &format!("{p}.intermediate.dense"))
            .into_iter()
            .map(|r| r.into_iter().map(|v| 0.5 * v * (1.0 + erf(v / std::f64::consts::SQRT_2))).collect())
            .collect();
        x = layer_norm(add(linear(&up, &format!("{p}.output.dense")), &attn), &format!("{p}.output.LayerNorm"));
    }
    let mean: Vec<f64> = (0..h).map(|i| x.iter().map(|r| r[i]).sum::<f64>() / n as f64).collect();
    let norm = mean.iter().map(|v| v * v).sum::<f64>().sqrt();
    mean.iter().map(|v| v / norm).collect()
}

/// The error function to about 1e-16 (Abramowitz and Stegun 7.1.26 is too coarse for this):
/// its Maclaurin series for |x| < 2, the continued fraction of erfc beyond.
fn erf(x: f64) -> f64 {
    let a = x.abs();
    let r = if a < 2.0 {
        let (mut term, mut sum, mut k) = (a, a, 0.0);
        while term.abs() > 1e-17 * sum.abs() {
            k += 1.0;
            term *= -a * a / k;
            sum += term / (2.0 * k + 1.0);
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    } else {
        // erfc(a) = exp(-a^2)/sqrt(pi) * 1/(a + 1/2/(a + 1/(a + 3/2/(a + ...)))).
        let mut f = a;
        for k in (1..400).rev() {
            f = a + (k as f64 / 2.0) / f;
        }
        1.0 - (-a * a).exp() / (std::f64::consts::PI.sqrt() * f)
    };
    r.copysign(x)
}

/// Cosine similarity.
pub fn cosine(a: &[f32], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| f64::from(*x) * y).sum();
    let na = a.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    let nb = b.iter().map(|y| y * y).sum::<f64>().sqrt();
    dot / (na * nb)
}

#[test]
fn erf_matches_known_values() {
    for (x, want) in [
        (0.0, 0.0),
        (0.5, 0.520_499_877_813_046_5),
        (1.0, 0.842_700_792_949_714_9),
        (2.5, 0.999_593_047_982_555),
        (3.5, 0.999_999_256_901_627_7),
    ] {
        assert!((erf(x) - want).abs() < 1e-12, "erf({x}) = {} != {want}", erf(x));
        assert!((erf(-x) + want).abs() < 1e-12);
    }
}
