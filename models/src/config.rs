//! The shape of a BERT model: read from its tensors, with the head count and layer-norm
//! epsilon from the model's `config.json` (safetensors checkpoints) or its GGUF metadata.
//!
//! The tensors are the authority on sizes; a declared config that disagrees with them is an
//! error rather than a silently wrong graph.

use std::path::Path;

use serde::Deserialize;
use tessera_core::gguf::{Gguf, Value};
use tessera_std::model_file::ModelFile;

use crate::error::{Error, Result};

/// The shape of a BERT model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BertConfig {
    pub vocab: usize,
    pub max_positions: usize,
    pub type_vocab: usize,
    pub hidden: usize,
    pub heads: usize,
    pub layers: usize,
    pub intermediate: usize,
    pub eps: f32,
}

impl BertConfig {
    /// all-MiniLM-L6-v2: 6 layers, hidden 384, 12 heads, intermediate 1536.
    pub const MINILM_L6: BertConfig = BertConfig {
        vocab: 30522,
        max_positions: 512,
        type_vocab: 2,
        hidden: 384,
        heads: 12,
        layers: 6,
        intermediate: 1536,
        eps: 1e-12,
    };

    /// The layer-norm epsilon when neither `config.json` nor the metadata give one.
    pub const DEFAULT_EPS: f32 = 1e-12;

    /// The shape of the model in `file`: the sizes from its tensors; the head count and the
    /// layer-norm epsilon from its GGUF metadata (`bert.attention.head_count`, ...), else
    /// from the `config.json` beside it, else `hidden / 32` heads and
    /// [`DEFAULT_EPS`](Self::DEFAULT_EPS). Sizes the declared config also gives must agree
    /// with the tensors.
    pub fn of_file(file: &ModelFile) -> Result<BertConfig> {
        let model = file.path().display().to_string();
        let from_gguf = match file.gguf() {
            Some(gguf) => HfConfig::from_gguf(&gguf, &model)?,
            None => None,
        };
        let declared = match from_gguf {
            Some(c) => Some((c, model.clone())),
            None => {
                let path = file.path().with_file_name("config.json");
                HfConfig::read(&path)?.map(|c| (c, path.display().to_string()))
            }
        };
        let shape = |name: &str| file.tensor(name).map(|t| t.ne);
        from_tensors(&model, &shape, declared.as_ref().map(|(c, p)| (c, p.as_str())))
    }
}

/// The hyper-parameters of a Hugging Face BERT checkpoint's `config.json` that tessera reads
/// (other keys are ignored). Only `num_attention_heads` is required: the tensors give every
/// size, and the sizes given here are checked against them.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct HfConfig {
    pub num_attention_heads: usize,
    pub hidden_size: Option<usize>,
    pub num_hidden_layers: Option<usize>,
    pub intermediate_size: Option<usize>,
    pub vocab_size: Option<usize>,
    pub max_position_embeddings: Option<usize>,
    pub type_vocab_size: Option<usize>,
    pub layer_norm_eps: Option<f32>,
    /// The FFN activation; this graph computes `"gelu"` (the exact, erf-based GELU).
    pub hidden_act: Option<String>,
}

impl HfConfig {
    /// Parses the text of a `config.json`; `path` names it in errors.
    pub fn from_json(text: &str, path: &str) -> Result<HfConfig> {
        serde_json::from_str(text).map_err(|e| Error::Config {
            path: path.into(),
            message: format!(
                "malformed config.json: {e}; expected a JSON object with at least \
                 \"num_attention_heads\" (a positive integer)"
            ),
        })
    }

    /// Reads and parses the `config.json` at `path`; `None` if there is no such file.
    pub fn read(path: &Path) -> Result<Option<HfConfig>> {
        match std::fs::read_to_string(path) {
            Ok(text) => HfConfig::from_json(&text, &path.display().to_string()).map(Some),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::Config { path: path.display().to_string(), message: format!("cannot read: {e}") }),
        }
    }

    /// The same hyper-parameters from a GGUF's `bert.*` metadata (as [`convert`](crate::convert())
    /// writes it); `None` if it has no `bert.attention.head_count`. `path` names the file in errors.
    pub fn from_gguf(gguf: &Gguf<'_>, path: &str) -> Result<Option<HfConfig>> {
        let unsigned = |key: &str| -> Result<Option<usize>> {
            match gguf.get(key) {
                None => Ok(None),
                Some(v) => v
                    .as_unsigned()
                    .and_then(|n| usize::try_from(n).ok())
                    .map(Some)
                    .ok_or_else(|| metadata_type_error(path, key, v, "an unsigned integer")),
            }
        };
        let Some(heads) = unsigned("bert.attention.head_count")? else { return Ok(None) };
        let eps = match gguf.get("bert.attention.layer_norm_epsilon") {
            None => None,
            Some(v) => Some(
                v.as_f32()
                    .ok_or_else(|| metadata_type_error(path, "bert.attention.layer_norm_epsilon", v, "an f32"))?,
            ),
        };
        Ok(Some(HfConfig {
            num_attention_heads: heads,
            hidden_size: unsigned("bert.embedding_length")?,
            num_hidden_layers: unsigned("bert.block_count")?,
            intermediate_size: unsigned("bert.feed_forward_length")?,
            layer_norm_eps: eps,
            ..HfConfig::default()
        }))
    }
}

fn metadata_type_error(path: &str, key: &str, value: Value<'_>, expected: &str) -> Error {
    Error::Config {
        path: path.into(),
        message: format!("metadata '{key}' is of type {}; expected {expected}", value.value_type()),
    }
}

/// The config of a model whose tensor shapes `shape` gives (`None`: no such tensor), with
/// `declared` = (config, where it came from) if there is one. `model` names the model file.
fn from_tensors(
    model: &str,
    shape: &dyn Fn(&str) -> Option<[usize; 4]>,
    declared: Option<(&HfConfig, &str)>,
) -> Result<BertConfig> {
    let required = |name: &str| shape(name).ok_or_else(|| Error::NotBert { path: model.into(), tensor: name.into() });
    let word = required("embeddings.word_embeddings.weight")?;
    let hidden = word[0];
    let tensors = BertConfig {
        vocab: word[1],
        max_positions: required("embeddings.position_embeddings.weight")?[1],
        type_vocab: required("embeddings.token_type_embeddings.weight")?[1],
        hidden,
        heads: (hidden / 32).max(1),
        layers: (0..).take_while(|l| shape(&format!("encoder.layer.{l}.output.dense.weight")).is_some()).count(),
        intermediate: required("encoder.layer.0.intermediate.dense.weight")?[1],
        eps: BertConfig::DEFAULT_EPS,
    };
    let Some((c, source)) = declared else { return Ok(tensors) };
    let error = |message: String| Error::Config { path: source.into(), message };
    let sizes = [
        ("hidden_size", c.hidden_size, tensors.hidden),
        ("num_hidden_layers", c.num_hidden_layers, tensors.layers),
        ("intermediate_size", c.intermediate_size, tensors.intermediate),
        ("vocab_size", c.vocab_size, tensors.vocab),
        ("max_position_embeddings", c.max_position_embeddings, tensors.max_positions),
        ("type_vocab_size", c.type_vocab_size, tensors.type_vocab),
    ];
    for (key, declared, actual) in sizes {
        if let Some(d) = declared.filter(|d| *d != actual) {
            return Err(error(format!(
                "{key} is {d} but the weights in {model} have {actual}: the config does not describe these weights"
            )));
        }
    }
    let heads = c.num_attention_heads;
    if heads == 0 || hidden % heads != 0 {
        return Err(error(format!(
            "num_attention_heads is {heads}, which does not divide the hidden size {hidden}; expected a divisor of {hidden}"
        )));
    }
    let eps = c.layer_norm_eps.unwrap_or(BertConfig::DEFAULT_EPS);
    if !(eps.is_finite() && eps > 0.0) {
        return Err(error(format!("layer_norm_eps is {eps}; expected a small positive number such as 1e-12")));
    }
    if let Some(act) = c.hidden_act.as_deref().filter(|a| *a != "gelu") {
        return Err(error(format!(
            "hidden_act is \"{act}\"; this BERT graph computes \"gelu\" (the exact, erf-based GELU)"
        )));
    }
    Ok(BertConfig { heads, eps, ..tensors })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::test_model::{self, TINY};

    /// all-MiniLM-L6-v2's config.json, as fetched.
    const MINILM_JSON: &str = r#"{
      "_name_or_path": "nreimers/MiniLM-L6-H384-uncased",
      "architectures": ["BertModel"],
      "attention_probs_dropout_prob": 0.1,
      "gradient_checkpointing": false,
      "hidden_act": "gelu",
      "hidden_dropout_prob": 0.1,
      "hidden_size": 384,
      "initializer_range": 0.02,
      "intermediate_size": 1536,
      "layer_norm_eps": 1e-12,
      "max_position_embeddings": 512,
      "model_type": "bert",
      "num_attention_heads": 12,
      "num_hidden_layers": 6,
      "pad_token_id": 0,
      "position_embedding_type": "absolute",
      "transformers_version": "4.8.2",
      "type_vocab_size": 2,
      "use_cache": true,
      "vocab_size": 30522
    }"#;

    fn minilm_shapes(name: &str) -> Option<[usize; 4]> {
        let c = BertConfig::MINILM_L6;
        match name {
            "embeddings.word_embeddings.weight" => Some([c.hidden, c.vocab, 1, 1]),
            "embeddings.position_embeddings.weight" => Some([c.hidden, c.max_positions, 1, 1]),
            "embeddings.token_type_embeddings.weight" => Some([c.hidden, c.type_vocab, 1, 1]),
            _ => {
                let layer: usize = name.strip_prefix("encoder.layer.")?.split('.').next()?.parse().ok()?;
                if layer >= c.layers {
                    None
                } else if name.ends_with(".intermediate.dense.weight") {
                    Some([c.hidden, c.intermediate, 1, 1])
                } else {
                    Some([c.intermediate, c.hidden, 1, 1])
                }
            }
        }
    }

    #[test]
    fn minilm_config_json_gives_minilm() {
        let json = HfConfig::from_json(MINILM_JSON, "config.json").unwrap();
        assert_eq!(json.num_attention_heads, 12);
        assert_eq!(json.hidden_act.as_deref(), Some("gelu"));
        let c = from_tensors("model.safetensors", &minilm_shapes, Some((&json, "config.json"))).unwrap();
        assert_eq!(c, BertConfig::MINILM_L6);
    }

    #[test]
    fn without_a_config_the_heads_are_a_32nd_of_the_hidden_size() {
        let c = from_tensors("model.safetensors", &minilm_shapes, None).unwrap();
        assert_eq!(c, BertConfig::MINILM_L6);
    }

    #[test]
    fn a_malformed_config_json_is_a_config_error() {
        let err = HfConfig::from_json("{\"num_attention_heads\": 12,", "dir/config.json").unwrap_err();
        assert!(matches!(&err, Error::Config { path, .. } if path == "dir/config.json"), "{err:?}");
        assert!(err.to_string().starts_with("dir/config.json: malformed config.json: EOF"), "{err}");
        let err = HfConfig::from_json("{\"hidden_size\": 384}", "config.json").unwrap_err();
        assert!(err.to_string().contains("missing field `num_attention_heads`"), "{err}");
        let err = HfConfig::from_json("{\"num_attention_heads\": \"twelve\"}", "config.json").unwrap_err();
        assert!(err.to_string().contains("invalid type: string \"twelve\""), "{err}");
        let err = HfConfig::from_json("[12]", "config.json").unwrap_err();
        assert!(matches!(err, Error::Config { .. }), "{err:?}");
    }

    #[test]
    fn a_config_that_disagrees_with_the_weights_is_an_error() {
        let check = |patch: &dyn Fn(&mut HfConfig), expected: &str| {
            let mut json = HfConfig::from_json(MINILM_JSON, "config.json").unwrap();
            patch(&mut json);
            let err = from_tensors("m.safetensors", &minilm_shapes, Some((&json, "config.json"))).unwrap_err();
            assert!(matches!(err, Error::Config { .. }), "{err:?}");
            assert!(err.to_string().contains(expected), "{err}");
        };
        check(
            &|c| c.hidden_size = Some(768),
            "config.json: hidden_size is 768 but the weights in m.safetensors have 384",
        );
        check(&|c| c.num_hidden_layers = Some(12), "num_hidden_layers is 12 but the weights in m.safetensors have 6");
        check(&|c| c.vocab_size = Some(1), "vocab_size is 1");
        check(&|c| c.num_attention_heads = 7, "num_attention_heads is 7, which does not divide the hidden size 384");
        check(&|c| c.num_attention_heads = 0, "num_attention_heads is 0");
        check(&|c| c.layer_norm_eps = Some(-1.0), "layer_norm_eps is -1");
        check(&|c| c.hidden_act = Some("relu".into()), "hidden_act is \"relu\"");
    }

    #[test]
    fn a_missing_tensor_says_it_is_not_bert() {
        let none = |_: &str| None;
        let err = from_tensors("x.gguf", &none, None).unwrap_err();
        assert_eq!(err.to_string(), "x.gguf: has no tensor 'embeddings.word_embeddings.weight': not a BERT model");
    }

    #[test]
    fn gguf_metadata_gives_the_same_config() {
        let bytes = test_model::gguf_bytes(&TINY, tessera_core::DType::F32);
        let gguf = Gguf::parse(&bytes).unwrap();
        let c = HfConfig::from_gguf(&gguf, "tiny.gguf").unwrap().unwrap();
        assert_eq!(c.num_attention_heads, TINY.heads);
        assert_eq!(c.hidden_size, Some(TINY.hidden));
        assert_eq!(c.num_hidden_layers, Some(TINY.layers));
        assert_eq!(c.layer_norm_eps, Some(TINY.eps));
    }

    #[test]
    fn of_file_reads_config_json_beside_safetensors_and_metadata_in_gguf() {
        let dir = test_model::temp_dir("config");
        // Safetensors: heads from config.json, a malformed one an error; without one,
        // hidden / 32.
        let st = test_model::write_safetensors(&dir, &TINY);
        std::fs::write(dir.join("config.json"), test_model::config_json(&TINY)).unwrap();
        let file = ModelFile::open(&st).unwrap();
        assert_eq!(BertConfig::of_file(&file).unwrap(), TINY);
        std::fs::write(dir.join("config.json"), "{").unwrap();
        let err = BertConfig::of_file(&file).unwrap_err();
        assert!(matches!(&err, Error::Config { path, .. } if path.ends_with("config.json")), "{err:?}");
        std::fs::remove_file(dir.join("config.json")).unwrap();
        assert_eq!(BertConfig::of_file(&file).unwrap().heads, TINY.hidden / 32);
        // GGUF: heads from the metadata, even beside a config.json that says otherwise.
        let gguf = dir.join("tiny.gguf");
        std::fs::write(&gguf, test_model::gguf_bytes(&TINY, tessera_core::DType::F32)).unwrap();
        std::fs::write(dir.join("config.json"), "{\"num_attention_heads\": 1}").unwrap();
        assert_eq!(BertConfig::of_file(&ModelFile::open(&gguf).unwrap()).unwrap(), TINY);
        std::fs::remove_dir_all(&dir).ok();
    }
}
