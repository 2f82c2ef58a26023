//! The shape of a Llama-architecture model, from a GGUF file's `llama.*` metadata.

use tessera_core::gguf::{Gguf, Value};
use tessera_std::gguf_writer::GgufWriter;

use crate::error::{Error, Result};

/// The hyper-parameters of a Llama model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LlamaConfig {
    pub vocab: usize,
    pub hidden: usize,
    pub layers: usize,
    /// Width of the feed-forward network.
    pub ff: usize,
    pub heads: usize,
    /// Key/value heads (grouped-query attention: `heads` is a multiple of them).
    pub kv_heads: usize,
    /// Leading values of each head that the rotary embedding rotates.
    pub rope_dims: usize,
    pub rope_base: f32,
    pub eps: f32,
    /// Positions the model was trained for (`llama.context_length`).
    pub context: usize,
}

/// The metadata keys, as llama.cpp names them.
pub mod keys {
    pub const ARCHITECTURE: &str = "general.architecture";
    pub const CONTEXT: &str = "llama.context_length";
    pub const HIDDEN: &str = "llama.embedding_length";
    pub const LAYERS: &str = "llama.block_count";
    pub const FF: &str = "llama.feed_forward_length";
    pub const HEADS: &str = "llama.attention.head_count";
    pub const KV_HEADS: &str = "llama.attention.head_count_kv";
    pub const ROPE_BASE: &str = "llama.rope.freq_base";
    pub const ROPE_DIMS: &str = "llama.rope.dimension_count";
    pub const EPS: &str = "llama.attention.layer_norm_rms_epsilon";
    pub const VOCAB: &str = "llama.vocab_size";
}

impl LlamaConfig {
    /// Values of one attention head.
    pub const fn head_dim(&self) -> usize {
        self.hidden / self.heads
    }

    /// Values of all key (or value) heads of one token.
    pub const fn kv_dim(&self) -> usize {
        self.head_dim() * self.kv_heads
    }

    /// The config in `gguf`'s metadata (`path` names the file in errors, which name the key).
    /// The vocabulary size comes from `llama.vocab_size`, else from the token embedding's rows.
    pub fn from_gguf(gguf: &Gguf<'_>, path: &str) -> Result<LlamaConfig> {
        let error = |message: String| Error::Config { path: path.into(), message };
        match gguf.get(keys::ARCHITECTURE) {
            Some(Value::String("llama")) => {}
            Some(Value::String(other)) => {
                return Err(error(format!(
                    "metadata '{}' is \"{other}\"; tessera generates text with \"llama\" models",
                    keys::ARCHITECTURE
                )))
            }
            Some(v) => {
                return Err(error(format!(
                    "metadata '{}' is of type {}; expected a string",
                    keys::ARCHITECTURE,
                    v.value_type()
                )))
            }
            None => return Err(error(format!("metadata '{}' is missing; a Llama model has it", keys::ARCHITECTURE))),
        }
        let unsigned = |key: &str| -> Result<Option<usize>> {
            match gguf.get(key) {
                None => Ok(None),
                Some(v) => v.as_unsigned().and_then(|n| usize::try_from(n).ok()).map(Some).ok_or_else(|| {
                    error(format!("metadata '{key}' is of type {}; expected an unsigned integer", v.value_type()))
                }),
            }
        };
        let required = |key: &str| -> Result<usize> {
            unsigned(key)?.ok_or_else(|| error(format!("metadata '{key}' is missing; a Llama model has it")))
        };
        let float = |key: &str| -> Result<Option<f32>> {
            match gguf.get(key) {
                None => Ok(None),
                Some(v) => v
                    .as_f32()
                    .map(Some)
                    .ok_or_else(|| error(format!("metadata '{key}' is of type {}; expected an f32", v.value_type()))),
            }
        };
        let hidden = required(keys::HIDDEN)?;
        let heads = required(keys::HEADS)?;
        let kv_heads = unsigned(keys::KV_HEADS)?.unwrap_or(heads);
        let vocab = match unsigned(keys::VOCAB)? {
            Some(v) => v,
            None => gguf
                .tensors()
                .iter()
                .find(|t| t.name() == "token_embd.weight")
                .map(|t| t.ne()[1])
                .ok_or_else(|| error("has no tensor 'token_embd.weight'; a Llama model has it".into()))?,
        };
        let config = LlamaConfig {
            vocab,
            hidden,
            layers: required(keys::LAYERS)?,
            ff: required(keys::FF)?,
            heads,
            kv_heads,
            rope_dims: unsigned(keys::ROPE_DIMS)?.unwrap_or(hidden.checked_div(heads).unwrap_or(0)),
            rope_base: float(keys::ROPE_BASE)?.unwrap_or(10_000.0),
            eps: float(keys::EPS)?
                .ok_or_else(|| error(format!("metadata '{}' is missing; a Llama model has it", keys::EPS)))?,
            context: required(keys::CONTEXT)?,
        };
        config.validate().map_err(error)?;
        Ok(config)
    }

    /// Checks that a graph can be built: sizes in range and dividing as attention needs.
    pub fn validate(&self) -> Result<(), String> {
        let ranges = [
            (keys::VOCAB, self.vocab, 1 << 24),
            (keys::HIDDEN, self.hidden, 1 << 16),
            (keys::LAYERS, self.layers, 1024),
            (keys::FF, self.ff, 1 << 18),
            (keys::HEADS, self.heads, 4096),
            (keys::KV_HEADS, self.kv_heads, 4096),
            (keys::CONTEXT, self.context, 1 << 24),
        ];
        for (key, value, max) in ranges {
            if value == 0 || value > max {
                return Err(format!("metadata '{key}' is {value}; expected 1 to {max}"));
            }
        }
        if self.hidden % self.heads != 0 {
            return Err(format!(
                "metadata '{}' is {}, which does not divide the hidden size {}",
                keys::HEADS,
                self.heads,
                self.hidden
            ));
        }
        if self.heads % self.kv_heads != 0 {
            return Err(format!(
                "metadata '{}' is {}, which does not divide the {} query heads",
                keys::KV_HEADS,
                self.kv_heads,
                self.heads
            ));
        }
        if self.rope_dims > self.head_dim() || self.rope_dims % 2 != 0 {
            return Err(format!(
                "metadata '{}' is {}; expected an even number up to the head size {}",
                keys::ROPE_DIMS,
                self.rope_dims,
                self.head_dim()
            ));
        }
        if !(self.eps.is_finite() && self.eps > 0.0) {
            return Err(format!("metadata '{}' is {}; expected a positive number", keys::EPS, self.eps));
        }
        if !(self.rope_base.is_finite() && self.rope_base > 0.0) {
            return Err(format!("metadata '{}' is {}; expected a positive number", keys::ROPE_BASE, self.rope_base));
        }
        Ok(())
    }

    /// Writes the config as `llama.*` metadata (with `general.architecture`).
    pub fn write_gguf(&self, w: &mut GgufWriter) {
        let u32_of = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        w.add_string(keys::ARCHITECTURE, "llama");
        w.add_u32(keys::CONTEXT, u32_of(self.context));
        w.add_u32(keys::HIDDEN, u32_of(self.hidden));
        w.add_u32(keys::LAYERS, u32_of(self.layers));
        w.add_u32(keys::FF, u32_of(self.ff));
        w.add_u32(keys::HEADS, u32_of(self.heads));
        w.add_u32(keys::KV_HEADS, u32_of(self.kv_heads));
        w.add_f32(keys::ROPE_BASE, self.rope_base);
        w.add_u32(keys::ROPE_DIMS, u32_of(self.rope_dims));
        w.add_f32(keys::EPS, self.eps);
        w.add_u32(keys::VOCAB, u32_of(self.vocab));
    }
}
