//! The one error type of this crate.

use std::fmt;

/// What went wrong loading, converting or running a model.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The engine failed: a model file it cannot read, a graph, scheduler or backend error.
    Engine(tessera_core::Error),
    /// A model file lacks a tensor that every BERT model has.
    NotBert { path: String, tensor: String },
    /// The model's `config.json` (or its GGUF metadata, `path` then names the GGUF file) is
    /// malformed, asks for something this graph does not do, or disagrees with the weights.
    Config { path: String, message: String },
    /// A model config ([`BertConfig`](crate::BertConfig), [`LlamaConfig`](crate::LlamaConfig))
    /// no graph can be built for.
    InvalidConfig { message: String },
    /// A tokenizer file cannot be loaded, or a text cannot be tokenized with it.
    Tokenizer { path: String, message: String },
    /// Text was given to an embedder that has no tokenizer.
    NoTokenizer { model: String },
    /// A token sequence is empty or longer than the model's position table.
    SequenceLength { index: usize, tokens: usize, max: usize },
    /// Generation needs more positions than the KV cache holds.
    ContextFull { tokens: usize, context: usize },
    /// Generation was asked for something it cannot do (no prompt, bad sampling settings).
    Generation { message: String },
    /// A file could not be written.
    Io { path: String, source: std::io::Error },
}

/// A result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Engine(e) => e.fmt(f),
            Error::NotBert { path, tensor } => write!(f, "{path}: has no tensor '{tensor}': not a BERT model"),
            Error::Config { path, message } => write!(f, "{path}: {message}"),
            Error::InvalidConfig { message } => write!(f, "invalid model config: {message}"),
            Error::Tokenizer { path, message } => write!(f, "tokenizer {path}: {message}"),
            Error::NoTokenizer { model } => write!(
                f,
                "no tokenizer for {model}: put its tokenizer.json next to it or give one with \
                 LoadOptions::tokenizer / Embedder::set_tokenizer (or embed token ids)"
            ),
            Error::SequenceLength { index, tokens, max } => {
                write!(f, "sequence {index} has {tokens} tokens; 1 to {max} are allowed")
            }
            Error::ContextFull { tokens, context } => write!(
                f,
                "{tokens} positions do not fit in a context of {context}; give a larger context or fewer tokens"
            ),
            Error::Generation { message } => f.write_str(message),
            Error::Io { path, source } => write!(f, "{path}: {source}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            // Transparent: its message is this error's message.
            Error::Engine(e) => e.source(),
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<tessera_core::Error> for Error {
    fn from(e: tessera_core::Error) -> Error {
        Error::Engine(e)
    }
}
