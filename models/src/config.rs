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
use crate::tensor_names::TensorNames;

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
    /// from the `config.json` beside it (epsilon [`DEFAULT_EPS`](Self::DEFAULT_EPS) if neither
    /// gives one). The head count is never guessed: a model with neither is an error that says
    /// where it looked. Sizes the declared config also gives must agree with the tensors, and
    /// every size is checked ([`validate`](Self::validate)).
    pub fn of_file(file: &ModelFile) -> Result<BertConfig> {
        let model = file.path().display().to_string();
        let names = TensorNames::of_file(file);
        let from_gguf = match file.gguf() {
            Some(gguf) => {
                if names == TensorNames::LlamaCpp {
                    require_llama_cpp_keys(&gguf, &model)?;
                }
                HfConfig::from_gguf(&gguf, &model)?
            }
            None => None,
        };
        let config_json = file.path().with_file_name("config.json");
        let declared = match from_gguf {
            Some(c) => (c, Source::Gguf(model.clone())),
            None => match HfConfig::read(&config_json)? {
                Some(c) => (c, Source::Json(config_json.display().to_string())),
                None => {
                    return Err(Error::Config {
                        path: model,
                        message: format!(
                            "no attention head count: the file has no 'bert.attention.head_count' metadata \
                             and there is no {} beside it (give the model its config.json with \
                             \"num_attention_heads\")",
                            config_json.display()
                        ),
                    })
                }
            },
        };
        let shape = |name: &str| file.tensor(name).map(|t| t.ne);
        let unsupported = |name: &str| {
            let prefix = format!("{name}: ");
            file.skipped().iter().find(|s| s.starts_with(&prefix)).map(|s| s[prefix.len()..].to_string())
        };
        from_tensors(&model, names, &shape, &unsupported, (&declared.0, &declared.1))
    }

    /// The shape of the BERT model in a parsed GGUF file: the sizes from its tensors, the head
    /// count and epsilon from its `bert.*` metadata (required here: no `config.json` is
    /// consulted). `path` names the file in errors.
    pub fn from_gguf(gguf: &Gguf<'_>, path: &str) -> Result<BertConfig> {
        let declared = HfConfig::from_gguf(gguf, path)?.ok_or_else(|| Error::Config {
            path: path.into(),
            message: "no attention head count: metadata 'bert.attention.head_count' is missing".into(),
        })?;
        let shape = |name: &str| gguf.tensors().iter().find(|t| t.name() == name).map(|t| t.ne());
        let names = match shape("token_embd.weight") {
            Some(_) => TensorNames::LlamaCpp,
            None => TensorNames::HuggingFace,
        };
        from_tensors(path, names, &shape, &|_| None, (&declared, &Source::Gguf(path.into())))
    }

    /// Largest sizes a config may have: far beyond any BERT, small enough that every size
    /// computed from them (tables of `vocab * hidden` values, a layer's buffers) fits.
    pub const LIMITS: BertConfig = BertConfig {
        vocab: 1 << 24,
        max_positions: 1 << 16,
        type_vocab: 1 << 16,
        hidden: 1 << 16,
        heads: 1 << 12,
        layers: 1 << 10,
        intermediate: 1 << 18,
        eps: 1.0,
    };

    /// Checks every hyper-parameter: sizes positive and within [`LIMITS`](Self::LIMITS), the
    /// heads dividing the hidden size, the weight tables' byte sizes representable, the
    /// epsilon a small positive number. The error names the field (its `config.json` name).
    pub fn validate(&self) -> Result<(), InvalidField> {
        let l = &BertConfig::LIMITS;
        let sizes = [
            ("vocab_size", self.vocab, l.vocab),
            ("max_position_embeddings", self.max_positions, l.max_positions),
            ("type_vocab_size", self.type_vocab, l.type_vocab),
            ("hidden_size", self.hidden, l.hidden),
            ("num_attention_heads", self.heads, l.heads),
            ("num_hidden_layers", self.layers, l.layers),
            ("intermediate_size", self.intermediate, l.intermediate),
        ];
        for (field, value, limit) in sizes {
            if value == 0 || value > limit {
                return Err(InvalidField { field, message: format!("{field} is {value}; expected 1 to {limit}") });
            }
        }
        let (h, heads) = (self.hidden, self.heads);
        if h % heads != 0 {
            return Err(InvalidField {
                field: "num_attention_heads",
                message: format!(
                    "num_attention_heads is {heads}, which does not divide the hidden size {h}; expected a divisor of {h}"
                ),
            });
        }
        // The largest tables, in f32 bytes.
        let tables = [("vocab_size", self.vocab), ("intermediate_size", self.intermediate)];
        for (field, rows) in tables {
            if rows.checked_mul(h).and_then(|n| n.checked_mul(4)).is_none() {
                return Err(InvalidField {
                    field,
                    message: format!("{field} {rows} times hidden_size {h} overflows a size in bytes"),
                });
            }
        }
        let eps = self.eps;
        if !(eps.is_finite() && eps > 0.0 && eps < 1.0) {
            return Err(InvalidField {
                field: "layer_norm_eps",
                message: format!("layer_norm_eps is {eps}; expected a small positive number such as 1e-12"),
            });
        }
        Ok(())
    }
}

/// A hyper-parameter that [`BertConfig::validate`] rejects: its `config.json` name and why.
#[derive(Clone, Debug, PartialEq)]
pub struct InvalidField {
    pub field: &'static str,
    pub message: String,
}

impl InvalidField {
    /// The GGUF metadata key of the field, where a GGUF file gives it.
    fn gguf_key(&self) -> Option<&'static str> {
        match self.field {
            "num_attention_heads" => Some("bert.attention.head_count"),
            "hidden_size" => Some("bert.embedding_length"),
            "num_hidden_layers" => Some("bert.block_count"),
            "intermediate_size" => Some("bert.feed_forward_length"),
            "layer_norm_eps" => Some("bert.attention.layer_norm_epsilon"),
            _ => None,
        }
    }
}

/// Where the declared hyper-parameters came from, for naming them in errors.
#[derive(Clone, Debug)]
enum Source {
    /// A GGUF file's `bert.*` metadata (the path of the file).
    Gguf(String),
    /// A `config.json` (its path).
    Json(String),
}

impl Source {
    fn path(&self) -> &str {
        match self {
            Source::Gguf(p) | Source::Json(p) => p,
        }
    }

    /// The field's name as this source spells it.
    fn field_name(&self, e: &InvalidField) -> String {
        match (self, e.gguf_key()) {
            (Source::Gguf(_), Some(key)) => format!("metadata '{key}'"),
            _ => e.field.to_string(),
        }
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
        match gguf.get(ARCHITECTURE_KEY) {
            None | Some(Value::String("bert")) => {}
            Some(Value::String(other)) => {
                return Err(Error::Config {
                    path: path.into(),
                    message: format!("metadata '{ARCHITECTURE_KEY}' is \"{other}\"; tessera reads \"bert\" models"),
                })
            }
            Some(v) => return Err(metadata_type_error(path, ARCHITECTURE_KEY, v, "a string")),
        }
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
            max_position_embeddings: unsigned("bert.context_length")?,
            type_vocab_size: unsigned("tokenizer.ggml.token_type_count")?,
            layer_norm_eps: eps,
            ..HfConfig::default()
        }))
    }
}

/// The metadata key naming a GGUF file's model architecture.
const ARCHITECTURE_KEY: &str = "general.architecture";

/// The keys llama.cpp requires of a BERT file, checked for files in its layout so that a
/// missing one is named rather than looked for in a `config.json`.
const LLAMA_CPP_KEYS: [&str; 7] = [
    ARCHITECTURE_KEY,
    "bert.context_length",
    "bert.embedding_length",
    "bert.feed_forward_length",
    "bert.block_count",
    "bert.attention.head_count",
    "bert.attention.layer_norm_epsilon",
];

fn require_llama_cpp_keys(gguf: &Gguf<'_>, path: &str) -> Result<()> {
    match LLAMA_CPP_KEYS.iter().find(|key| gguf.get(key).is_none()) {
        Some(key) => Err(Error::Config {
            path: path.into(),
            message: format!("metadata '{key}' is missing; a BERT model in llama.cpp's layout has it"),
        }),
        None => Ok(()),
    }
}

fn metadata_type_error(path: &str, key: &str, value: Value<'_>, expected: &str) -> Error {
    Error::Config {
        path: path.into(),
        message: format!("metadata '{key}' is of type {}; expected {expected}", value.value_type()),
    }
}

/// The config of a model whose tensor shapes `shape` gives by their names in the file (`None`:
/// no such tensor; the file names them as `names` says) and whose declared hyper-parameters are
/// `declared` (with where they came from). `unsupported(name)` is the type of a tensor the file
/// holds in a type tessera does not read. `model` names the model file.
fn from_tensors(
    model: &str,
    names: TensorNames,
    shape: &dyn Fn(&str) -> Option<[usize; 4]>,
    unsupported: &dyn Fn(&str) -> Option<String>,
    declared: (&HfConfig, &Source),
) -> Result<BertConfig> {
    let shape = |name: &str| shape(&names.file_name(name));
    let required = |name: &str| {
        let name = names.file_name(name);
        shape(&name).ok_or_else(|| match unsupported(&name) {
            Some(dtype) => Error::Config {
                path: model.into(),
                message: format!(
                    "tensor '{name}' is stored as {dtype}, a type tessera does not read (f32, f16, bf16 or i32)"
                ),
            },
            None => Error::NotBert { path: model.into(), tensor: name.to_string() },
        })
    };
    let word = required("embeddings.word_embeddings.weight")?;
    let (c, source) = declared;
    let hidden = word[0];
    let tensors = BertConfig {
        vocab: word[1],
        max_positions: required("embeddings.position_embeddings.weight")?[1],
        type_vocab: required("embeddings.token_type_embeddings.weight")?[1],
        hidden,
        heads: c.num_attention_heads,
        layers: (0..=BertConfig::LIMITS.layers)
            .take_while(|l| shape(&format!("encoder.layer.{l}.output.dense.weight")).is_some())
            .count(),
        intermediate: required("encoder.layer.0.intermediate.dense.weight")?[1],
        eps: c.layer_norm_eps.unwrap_or(BertConfig::DEFAULT_EPS),
    };
    let error = |message: String| Error::Config { path: source.path().into(), message };
    let sizes = [
        ("hidden_size", "bert.embedding_length", c.hidden_size, tensors.hidden),
        ("num_hidden_layers", "bert.block_count", c.num_hidden_layers, tensors.layers),
        ("intermediate_size", "bert.feed_forward_length", c.intermediate_size, tensors.intermediate),
        ("vocab_size", "", c.vocab_size, tensors.vocab),
        ("max_position_embeddings", "bert.context_length", c.max_position_embeddings, tensors.max_positions),
        ("type_vocab_size", "tokenizer.ggml.token_type_count", c.type_vocab_size, tensors.type_vocab),
    ];
    for (key, gguf_key, declared, actual) in sizes {
        if let Some(d) = declared.filter(|d| *d != actual) {
            let key = match source {
                Source::Gguf(_) => format!("metadata '{gguf_key}'"),
                Source::Json(_) => key.to_string(),
            };
            return Err(error(format!(
                "{key} is {d} but the weights in {model} have {actual}: the config does not describe these weights"
            )));
        }
    }
    if let Some(act) = c.hidden_act.as_deref().filter(|a| *a != "gelu") {
        return Err(error(format!(
            "hidden_act is \"{act}\"; this BERT graph computes \"gelu\" (the exact, erf-based GELU)"
        )));
    }
    tensors.validate().map_err(|e| {
        // Sizes read from tensors are the model file's; the rest the declared config's.
        let from_tensors = !matches!(e.field, "num_attention_heads" | "layer_norm_eps");
        let (path, field) = if from_tensors {
            (model.to_string(), e.field.to_string())
        } else {
            (source.path().into(), source.field_name(&e))
        };
        Error::Config { path, message: e.message.replacen(e.field, &field, 1) }
    })?;
    Ok(tensors)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::test_model::{self, TINY};

    const HF: TensorNames = TensorNames::HuggingFace;

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
        let c = from_tensors("model.safetensors", HF, &minilm_shapes, &none, (&json, &json_source())).unwrap();
        assert_eq!(c, BertConfig::MINILM_L6);
    }

    fn none(_: &str) -> Option<String> {
        None
    }

    fn json_source() -> Source {
        Source::Json("config.json".into())
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
            let err = from_tensors("m.safetensors", HF, &minilm_shapes, &none, (&json, &json_source())).unwrap_err();
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
        let no_shape = |_: &str| None;
        let json = HfConfig { num_attention_heads: 12, ..HfConfig::default() };
        let err = from_tensors("x.gguf", HF, &no_shape, &none, (&json, &json_source())).unwrap_err();
        assert_eq!(err.to_string(), "x.gguf: has no tensor 'embeddings.word_embeddings.weight': not a BERT model");
    }

    #[test]
    fn a_tensor_of_an_unsupported_type_is_reported_as_such_not_as_not_bert() {
        let only_others =
            |name: &str| (name != "embeddings.word_embeddings.weight").then(|| minilm_shapes(name)).flatten();
        let f64_word = |name: &str| (name == "embeddings.word_embeddings.weight").then(|| "F64".to_string());
        let json = HfConfig { num_attention_heads: 12, ..HfConfig::default() };
        let err = from_tensors("m.safetensors", HF, &only_others, &f64_word, (&json, &json_source())).unwrap_err();
        assert_eq!(
            err.to_string(),
            "m.safetensors: tensor 'embeddings.word_embeddings.weight' is stored as F64, a type tessera does not \
             read (f32, f16, bf16 or i32)"
        );
    }

    /// Hyper-parameters from a file are validated, never divided by or multiplied unchecked:
    /// each error names the file and the field.
    #[test]
    fn hyper_parameters_out_of_range_are_errors_naming_the_file_and_field() {
        let gguf = Source::Gguf("m.gguf".into());
        let check = |shapes: &dyn Fn(&str) -> Option<[usize; 4]>, heads: usize, source: &Source, expected: &str| {
            let json = HfConfig { num_attention_heads: heads, ..HfConfig::default() };
            let err = from_tensors("m.gguf", HF, shapes, &none, (&json, source)).unwrap_err();
            assert!(matches!(err, Error::Config { .. }), "{err:?}");
            assert_eq!(err.to_string(), expected);
        };
        check(&minilm_shapes, 0, &gguf, "m.gguf: metadata 'bert.attention.head_count' is 0; expected 1 to 4096");
        check(
            &minilm_shapes,
            5,
            &gguf,
            "m.gguf: metadata 'bert.attention.head_count' is 5, which does not divide the hidden size 384; \
             expected a divisor of 384",
        );
        check(&minilm_shapes, 0, &json_source(), "config.json: num_attention_heads is 0; expected 1 to 4096");
        let zero_hidden = |name: &str| {
            minilm_shapes(name).map(|mut ne| {
                if name.starts_with("embeddings.") {
                    ne[0] = 0;
                }
                ne
            })
        };
        check(&zero_hidden, 12, &gguf, "m.gguf: hidden_size is 0; expected 1 to 65536");
        let huge_vocab = |name: &str| {
            minilm_shapes(name).map(|mut ne| {
                if name == "embeddings.word_embeddings.weight" {
                    ne[1] = usize::MAX / 2;
                }
                ne
            })
        };
        check(&huge_vocab, 12, &gguf, &format!("m.gguf: vocab_size is {}; expected 1 to 16777216", usize::MAX / 2));
        let no_layers = |name: &str| (!name.contains(".output.dense.")).then(|| minilm_shapes(name)).flatten();
        check(&no_layers, 12, &gguf, "m.gguf: num_hidden_layers is 0; expected 1 to 1024");
        let json = HfConfig { num_attention_heads: 12, layer_norm_eps: Some(f32::NAN), ..HfConfig::default() };
        let err = from_tensors("m.gguf", HF, &minilm_shapes, &none, (&json, &gguf)).unwrap_err();
        assert!(err.to_string().starts_with("m.gguf: metadata 'bert.attention.layer_norm_epsilon' is NaN"), "{err}");
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
        assert_eq!(BertConfig::from_gguf(&gguf, "tiny.gguf").unwrap(), TINY);
    }

    #[test]
    fn of_file_reads_config_json_beside_safetensors_and_metadata_in_gguf() {
        let dir = test_model::temp_dir("config");
        // Safetensors: heads from config.json, a malformed one an error; without one, an
        // error that says where it looked (the head count is not guessed).
        let st = test_model::write_safetensors(&dir, &TINY);
        std::fs::write(dir.join("config.json"), test_model::config_json(&TINY)).unwrap();
        let file = ModelFile::open(&st).unwrap();
        assert_eq!(BertConfig::of_file(&file).unwrap(), TINY);
        std::fs::write(dir.join("config.json"), "{").unwrap();
        let err = BertConfig::of_file(&file).unwrap_err();
        assert!(matches!(&err, Error::Config { path, .. } if path.ends_with("config.json")), "{err:?}");
        std::fs::remove_file(dir.join("config.json")).unwrap();
        let err = BertConfig::of_file(&file).unwrap_err();
        let message = err.to_string();
        assert!(message.contains("no attention head count"), "{message}");
        assert!(message.contains(&dir.join("config.json").display().to_string()), "{message}");
        // GGUF: heads from the metadata, even beside a config.json that says otherwise.
        let gguf = dir.join("tiny.gguf");
        std::fs::write(&gguf, test_model::gguf_bytes(&TINY, tessera_core::DType::F32)).unwrap();
        std::fs::write(dir.join("config.json"), "{\"num_attention_heads\": 1}").unwrap();
        assert_eq!(BertConfig::of_file(&ModelFile::open(&gguf).unwrap()).unwrap(), TINY);
        std::fs::remove_dir_all(&dir).ok();
    }
}
