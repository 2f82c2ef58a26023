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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use tessera_core::gguf::Gguf;
    use tessera_std::gguf_writer::{GgufWriter, MetaValue};

    use super::*;
    use crate::random_llama::TINY;

    /// The error of reading `TINY`'s metadata after `edit`.
    fn error_after(edit: impl Fn(&mut GgufWriter)) -> String {
        let mut w = GgufWriter::new();
        TINY.write_gguf(&mut w);
        edit(&mut w);
        let bytes = w.to_bytes();
        LlamaConfig::from_gguf(&Gguf::parse(&bytes).unwrap(), "m.gguf").unwrap_err().to_string()
    }

    #[test]
    fn metadata_written_reads_back_the_same() {
        let mut w = GgufWriter::new();
        TINY.write_gguf(&mut w);
        let bytes = w.to_bytes();
        assert_eq!(LlamaConfig::from_gguf(&Gguf::parse(&bytes).unwrap(), "m.gguf").unwrap(), TINY);
    }

    #[test]
    fn bad_or_missing_metadata_is_an_error_naming_the_key() {
        let e = error_after(|w| {
            w.add_string(keys::ARCHITECTURE, "bert");
        });
        assert_eq!(
            e,
            "m.gguf: metadata 'general.architecture' is \"bert\"; tessera generates text with \"llama\" models"
        );
        let e = error_after(|w| {
            w.add_value(keys::HEADS, MetaValue::String("eight".into()));
        });
        assert_eq!(e, "m.gguf: metadata 'llama.attention.head_count' is of type string; expected an unsigned integer");
        let e = error_after(|w| {
            w.add_u32(keys::KV_HEADS, 3);
        });
        assert_eq!(e, "m.gguf: metadata 'llama.attention.head_count_kv' is 3, which does not divide the 8 query heads");
        let e = error_after(|w| {
            w.add_u32(keys::ROPE_DIMS, 17);
        });
        assert!(e.contains("'llama.rope.dimension_count' is 17"), "{e}");
        let e = error_after(|w| {
            w.add_f32(keys::EPS, f32::NAN);
        });
        assert!(e.contains("'llama.attention.layer_norm_rms_epsilon' is NaN"), "{e}");
        // A missing key: a file with every key but the layer count.
        let mut w = GgufWriter::new();
        for (key, value) in
            [(keys::ARCHITECTURE, MetaValue::String("llama".into())), (keys::HIDDEN, MetaValue::U32(64))]
        {
            w.add_value(key, value);
        }
        let bytes = w.to_bytes();
        let e = LlamaConfig::from_gguf(&Gguf::parse(&bytes).unwrap(), "m.gguf").unwrap_err().to_string();
        assert!(e.starts_with("m.gguf: metadata 'llama.") && e.contains("is missing"), "{e}");
    }
}
