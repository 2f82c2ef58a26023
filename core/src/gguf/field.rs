//! Where in a GGUF file a read failed, and the error that says so.

use alloc::format;
use alloc::string::String;

use super::cursor::Short;
use super::value::{Problem, MAX_ARRAY_DEPTH};
use crate::error::Error;

/// A field of a GGUF file, named the way errors name it.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Field<'k> {
    Magic,
    Version,
    TensorCount,
    KvCount,
    Key {
        entry: usize,
    },
    ValueType {
        entry: usize,
        key: &'k str,
    },
    Value {
        entry: usize,
        key: &'k str,
    },
    TensorName {
        tensor: usize,
    },
    /// `part` is the field's name in the path (`n_dims`, `type`, `offset`, `data`).
    Tensor {
        tensor: usize,
        name: &'k str,
        part: &'static str,
    },
    TensorDim {
        tensor: usize,
        name: &'k str,
        dim: usize,
    },
}

impl Field<'_> {
    /// A short locator: `header.version`, `metadata[3].key`, `tensors[0].ne[1]`.
    pub(crate) fn path(&self) -> String {
        match *self {
            Field::Magic => "header.magic".into(),
            Field::Version => "header.version".into(),
            Field::TensorCount => "header.tensor_count".into(),
            Field::KvCount => "header.kv_count".into(),
            Field::Key { entry } => format!("metadata[{entry}].key"),
            Field::ValueType { entry, .. } => format!("metadata[{entry}].type"),
            Field::Value { entry, .. } => format!("metadata[{entry}].value"),
            Field::TensorName { tensor } => format!("tensors[{tensor}].name"),
            Field::Tensor { tensor, part, .. } => format!("tensors[{tensor}].{part}"),
            Field::TensorDim { tensor, dim, .. } => format!("tensors[{tensor}].ne[{dim}]"),
        }
    }

    /// The field in words: `the key of metadata entry 3`.
    pub(crate) fn describe(&self) -> String {
        match *self {
            Field::Magic => "the magic".into(),
            Field::Version => "the version".into(),
            Field::TensorCount => "the tensor count".into(),
            Field::KvCount => "the metadata entry count".into(),
            Field::Key { entry } => format!("the key of metadata entry {entry}"),
            Field::ValueType { entry, key } => format!("the value type of metadata entry {entry} '{key}'"),
            Field::Value { entry, key } => format!("the value of metadata entry {entry} '{key}'"),
            Field::TensorName { tensor } => format!("the name of tensor {tensor}"),
            Field::Tensor { tensor, name, part } => {
                let part = match part {
                    "n_dims" => "number of dimensions",
                    other => other,
                };
                format!("the {part} of tensor {tensor} '{name}'")
            }
            Field::TensorDim { tensor, name, dim } => format!("dimension {dim} of tensor {tensor} '{name}'"),
        }
    }

    /// An error about this field.
    pub(crate) fn error(&self, message: String) -> Error {
        Error::Gguf { field: self.path(), message }
    }

    /// The input ended inside this field.
    pub(crate) fn truncated(&self, short: Short) -> Error {
        let need =
            if short.need == usize::MAX { String::from("more than the file's") } else { format!("{}", short.need) };
        self.error(format!(
            "truncated while reading {} (needs {need} bytes at offset {}, {} left)",
            self.describe(),
            short.at,
            short.left
        ))
    }

    /// The error for a problem found while decoding this field.
    pub(crate) fn problem(&self, problem: Problem) -> Error {
        let what = self.describe();
        match problem {
            Problem::Short(short) => self.truncated(short),
            Problem::Bool(b) => self.error(format!("{what} holds a bool stored as {b}; bools are 0 or 1")),
            Problem::Utf8 { at, valid_up_to } => self.error(format!(
                "{what} has a string at offset {at} that is not UTF-8 (the bytes after the first {valid_up_to} are invalid)"
            )),
            Problem::ElemType(tag) => self.error(format!(
                "{what} is an array of element type {tag}, which is no GGUF value type (0 to 12)"
            )),
            Problem::TooDeep => {
                self.error(format!("{what} nests arrays more than {MAX_ARRAY_DEPTH} deep, tessera's limit"))
            }
            Problem::TooMany { count, elem, left } => self.error(format!(
                "{what} declares an array of {count} {elem} values, which cannot fit in the {left} bytes left in the file"
            )),
        }
    }
}
