//! Model graphs built from tessera ops, and their loaders.
//!
//! Today: a BERT encoder for sentence embeddings (the all-MiniLM-L6-v2 family).
//!
//! - [`bert`]: the graph, for any [`BertConfig`] and token [`Layout`];
//! - [`inputs`]: the values of its positional, attention and pooling inputs;
//! - [`config`]: the model's shape, from its tensors and its `config.json` (or GGUF metadata);
//! - [`Embedder`]: loads a safetensors or GGUF file (Hugging Face's or llama.cpp's tensor names,
//!   see [`TensorNames`]) onto the devices of a per-module
//!   [`Placement`](tessera_std::placement::Placement), tokenizes (with its `tokenizer.json`, or
//!   a GGUF file's own [`Vocab`]) and embeds sentences;
//! - [`convert()`]: writes a model as GGUF in llama.cpp's layout, with its vocabulary and its
//!   matrices in f32, f16, q8_0 or a K-quant.
//!
//! ```no_run
//! use tessera_models::{Embedder, MODULES};
//! use tessera_std::placement::Placement;
//!
//! let devices = [&tessera_cpu::CPU_DEVICE as &'static dyn tessera_core::Device];
//! let placement = Placement::resolve("", "", &MODULES, &devices)?;
//! let mut embedder = Embedder::load("weights/all-MiniLM-L6-v2/model.safetensors", placement)?;
//! let embeddings = embedder.embed(&["A sentence.", "Another one."])?;
//! assert_eq!(embeddings[0].len(), embedder.config().hidden);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_op_in_unsafe_fn)]

pub mod bert;
pub mod config;
pub mod convert;
pub mod embedder;
pub mod error;
pub mod generator;
pub mod gguf_vocab;
pub mod inputs;
pub mod kv_cache;
pub mod llama;
pub mod llama_config;
pub mod llama_module;
pub mod llama_vocab;
mod logits_memory;
pub mod module;
pub mod random_llama;
pub mod sampler;
pub mod splitmix;
pub mod spm;
mod staged_inputs;
pub mod tensor_names;
pub mod tokenize;

#[cfg(test)]
mod test_model;

pub use bert::{BertGraph, Layout};
pub use config::{BertConfig, HfConfig};
pub use convert::{convert, converted_type, Recipe};
pub use embedder::{Embedder, LoadOptions, Timing};
pub use error::{Error, Result};
pub use generator::{GenerationTiming, Generator, GeneratorOptions, MemoryPlan};
pub use gguf_vocab::Vocab;
pub use llama_config::LlamaConfig;
pub use llama_module::{LlamaModule, LLAMA_MODULES};
pub use module::{Module, MODULES};
pub use tensor_names::TensorNames;
pub use tokenize::{Encoded, Tokenizer, MAX_TOKENS};
