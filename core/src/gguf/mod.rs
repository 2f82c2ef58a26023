//! GGUF model files, read in place.
//!
//! A GGUF file (little-endian) is a header (`b"GGUF"`, a `u32` version, a `u64` tensor count
//! and a `u64` metadata count), the metadata entries (a string key, a `u32` [`ValueType`] and
//! the value; arrays carry an element type and a count and may nest), one info per tensor
//! (name, `u32` dimension count, that many `u64` dimensions in ggml order, `u32` ggml type id,
//! `u64` offset into the data section) and the data section, which starts at the end of the
//! infos rounded up to the alignment (`general.alignment`, else 32).
//!
//! [`Gguf::parse`] checks all of it against the bytes it is given and copies nothing: keys,
//! strings, arrays and tensor data borrow the input. [`bind_tensors`] (or [`bind_static`] for
//! `&'static [u8]`) turns the tensors into graph leafs bound to a buffer holding the file.

mod bind;
mod cursor;
mod field;
mod reader;
mod types;
mod value;

#[cfg(test)]
mod tests;

pub use bind::{bind_static, bind_tensors};
pub use reader::{Gguf, KeyValue, TensorInfo};
pub use types::{dtype_from_ggml, ggml_type_id, ggml_type_name, ValueType};
pub use value::{Array, ArrayIter, Value, MAX_ARRAY_DEPTH};

/// The first four bytes of every GGUF file.
pub const MAGIC: [u8; 4] = *b"GGUF";
/// The version this crate's writers produce.
pub const VERSION: u32 = 3;
/// Alignment of tensor data when the file does not set `general.alignment`.
pub const DEFAULT_ALIGNMENT: usize = 32;
/// The metadata key that sets the alignment of tensor data.
pub const ALIGNMENT_KEY: &str = "general.alignment";
