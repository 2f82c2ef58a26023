//! The error type of edge-digits. Building one never allocates, so it can report running out
//! of memory.

use core::fmt;

use tessera_core::Shape;

/// What went wrong, and what was expected.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Error {
    /// The engine failed: out of memory (`tessera_core::Error::OutOfMemory`), a malformed GGUF
    /// file, an op it cannot run, ...
    Engine(tessera_core::Error),
    /// The file is valid GGUF but not a digits classifier.
    Model(ModelError),
    /// The test-set bytes are not in the format `scripts/train_digits.py` writes.
    TestSet { what: &'static str, offset: usize },
}

/// Why a GGUF file is not a digits classifier.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum ModelError {
    /// `general.architecture` is not `digits-mlp`.
    Architecture,
    /// `digits.layer_count` is 0 or more than the classifier supports.
    LayerCount { count: u32, max: usize },
    /// `fc{layer}.weight` or `fc{layer}.bias` is missing.
    MissingTensor { layer: usize, part: &'static str },
    /// A tensor's shape does not chain: `expected` is what the previous layer implies.
    Shape { layer: usize, part: &'static str, found: Shape, expected: Shape },
}

impl Error {
    /// Whether this is the engine running out of memory.
    pub fn is_out_of_memory(&self) -> bool {
        matches!(self, Error::Engine(tessera_core::Error::OutOfMemory { .. }))
    }
}

impl From<tessera_core::Error> for Error {
    fn from(e: tessera_core::Error) -> Error {
        Error::Engine(e)
    }
}

impl From<ModelError> for Error {
    fn from(e: ModelError) -> Error {
        Error::Model(e)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Engine(e) => write!(f, "engine: {e}"),
            Error::Model(e) => write!(f, "model: {e}"),
            Error::TestSet { what, offset } => write!(f, "test set: {what} (at byte {offset})"),
        }
    }
}

impl fmt::Display for ModelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelError::Architecture => f.write_str("general.architecture is not 'digits-mlp'"),
            ModelError::LayerCount { count, max } => {
                write!(f, "digits.layer_count is {count}, expected 1 to {max}")
            }
            ModelError::MissingTensor { layer, part } => write!(f, "tensor 'fc{layer}.{part}' is missing"),
            ModelError::Shape { layer, part, found, expected } => {
                write!(f, "tensor 'fc{layer}.{part}' has shape {found}, expected {expected}")
            }
        }
    }
}

impl core::error::Error for Error {}
