//! Writing GGUF model files (version 3), the counterpart of [`tessera_core::gguf::Gguf`].
//!
//! ```
//! use tessera_core::DType;
//! use tessera_std::gguf_writer::{GgufWriter, MetaArray};
//!
//! let mut w = GgufWriter::new();
//! w.add_string("general.architecture", "toy").add_u32("toy.block_count", 2);
//! w.add_array("toy.tokens", &["<s>", "</s>"]);
//! w.add_array("toy.nested", &[MetaArray::of(&[1u8, 2]), MetaArray::of(&["x"])]);
//! w.add_tensor_f32("w", DType::F16, &[2, 2], &[1.0, 2.0, 3.0, 4.0]).unwrap();
//! let bytes = w.to_bytes();
//! let file = tessera_core::gguf::Gguf::parse(&bytes).unwrap();
//! assert_eq!(file.get_u32("toy.block_count").unwrap(), 2);
//! ```

use std::path::Path;

use tessera_core::convert;
use tessera_core::gguf::{ggml_type_id, Value, ValueType, ALIGNMENT_KEY, DEFAULT_ALIGNMENT, MAGIC, VERSION};
use tessera_core::{DType, Error, Result, Shape};

/// A metadata value to write; strings and arrays are owned.
#[derive(Clone, Debug, PartialEq)]
pub enum MetaValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(MetaArray),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl MetaValue {
    pub fn value_type(&self) -> ValueType {
        match self {
            MetaValue::U8(_) => ValueType::U8,
            MetaValue::I8(_) => ValueType::I8,
            MetaValue::U16(_) => ValueType::U16,
            MetaValue::I16(_) => ValueType::I16,
            MetaValue::U32(_) => ValueType::U32,
            MetaValue::I32(_) => ValueType::I32,
            MetaValue::F32(_) => ValueType::F32,
            MetaValue::Bool(_) => ValueType::Bool,
            MetaValue::String(_) => ValueType::String,
            MetaValue::Array(_) => ValueType::Array,
            MetaValue::U64(_) => ValueType::U64,
            MetaValue::I64(_) => ValueType::I64,
            MetaValue::F64(_) => ValueType::F64,
        }
    }

    /// Appends the encoded value (without its type tag).
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            MetaValue::U8(v) => out.push(*v),
            MetaValue::I8(v) => out.extend_from_slice(&v.to_le_bytes()),
            MetaValue::U16(v) => out.extend_from_slice(&v.to_le_bytes()),
            MetaValue::I16(v) => out.extend_from_slice(&v.to_le_bytes()),
            MetaValue::U32(v) => out.extend_from_slice(&v.to_le_bytes()),
            MetaValue::I32(v) => out.extend_from_slice(&v.to_le_bytes()),
            MetaValue::F32(v) => out.extend_from_slice(&v.to_le_bytes()),
            MetaValue::Bool(v) => out.push(u8::from(*v)),
            MetaValue::String(s) => put_str(out, s),
            MetaValue::Array(a) => {
                put_u32(out, a.elem.tag());
                put_u64(out, a.items.len() as u64);
                for item in &a.items {
                    item.encode(out);
                }
            }
            MetaValue::U64(v) => out.extend_from_slice(&v.to_le_bytes()),
            MetaValue::I64(v) => out.extend_from_slice(&v.to_le_bytes()),
            MetaValue::F64(v) => out.extend_from_slice(&v.to_le_bytes()),
        }
    }
}

/// Copies a value read from a file (to write it into another).
impl From<Value<'_>> for MetaValue {
    fn from(value: Value<'_>) -> MetaValue {
        match value {
            Value::U8(v) => MetaValue::U8(v),
            Value::I8(v) => MetaValue::I8(v),
            Value::U16(v) => MetaValue::U16(v),
            Value::I16(v) => MetaValue::I16(v),
            Value::U32(v) => MetaValue::U32(v),
            Value::I32(v) => MetaValue::I32(v),
            Value::F32(v) => MetaValue::F32(v),
            Value::Bool(v) => MetaValue::Bool(v),
            Value::String(v) => MetaValue::String(v.to_owned()),
            Value::Array(a) => {
                MetaValue::Array(MetaArray { elem: a.elem_type(), items: a.iter().map(MetaValue::from).collect() })
            }
            Value::U64(v) => MetaValue::U64(v),
            Value::I64(v) => MetaValue::I64(v),
            Value::F64(v) => MetaValue::F64(v),
        }
    }
}

/// An array value: elements of one type (arrays of arrays may mix inner element types, as
/// GGUF allows).
#[derive(Clone, Debug, PartialEq)]
pub struct MetaArray {
    elem: ValueType,
    items: Vec<MetaValue>,
}

impl MetaArray {
    /// An empty array of `elem` values.
    pub fn new(elem: ValueType) -> MetaArray {
        MetaArray { elem, items: Vec::new() }
    }

    /// An array of the given elements.
    pub fn of<T: ArrayElement>(items: &[T]) -> MetaArray {
        MetaArray { elem: T::VALUE_TYPE, items: items.iter().map(ArrayElement::to_value).collect() }
    }

    /// Appends an element, which must be of the array's element type.
    pub fn push(&mut self, value: MetaValue) -> Result<()> {
        if value.value_type() != self.elem {
            return Err(Error::Gguf {
                field: "array".into(),
                message: format!("cannot add a {} to an array of {}", value.value_type(), self.elem),
            });
        }
        self.items.push(value);
        Ok(())
    }

    pub fn elem_type(&self) -> ValueType {
        self.elem
    }

    pub fn items(&self) -> &[MetaValue] {
        &self.items
    }
}

/// A Rust type that can be an array element.
pub trait ArrayElement {
    const VALUE_TYPE: ValueType;
    fn to_value(&self) -> MetaValue;
}

macro_rules! array_element {
    ($($ty:ty => $variant:ident),* $(,)?) => {
        $(
            impl ArrayElement for $ty {
                const VALUE_TYPE: ValueType = ValueType::$variant;
                fn to_value(&self) -> MetaValue {
                    MetaValue::$variant(*self)
                }
            }
        )*
    };
}

array_element!(u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32, f32 => F32, bool => Bool, u64 => U64,
    i64 => I64, f64 => F64);

impl ArrayElement for &str {
    const VALUE_TYPE: ValueType = ValueType::String;
    fn to_value(&self) -> MetaValue {
        MetaValue::String((*self).to_owned())
    }
}

impl ArrayElement for String {
    const VALUE_TYPE: ValueType = ValueType::String;
    fn to_value(&self) -> MetaValue {
        MetaValue::String(self.clone())
    }
}

impl ArrayElement for MetaArray {
    const VALUE_TYPE: ValueType = ValueType::Array;
    fn to_value(&self) -> MetaValue {
        MetaValue::Array(self.clone())
    }
}

struct PendingTensor {
    name: String,
    dtype: DType,
    ne: Vec<usize>,
    data: Vec<u8>,
}

/// Builds a GGUF file in memory: metadata in the order added, tensors in the order added, each
/// tensor's data at the next multiple of the alignment.
pub struct GgufWriter {
    alignment: usize,
    metadata: Vec<(String, MetaValue)>,
    tensors: Vec<PendingTensor>,
}

impl Default for GgufWriter {
    fn default() -> Self {
        GgufWriter::new()
    }
}

macro_rules! add_scalar {
    ($($name:ident: $ty:ty => $variant:ident),* $(,)?) => {
        $(
            #[doc = concat!("Adds (or replaces) a `", stringify!($ty), "` entry.")]
            pub fn $name(&mut self, key: &str, value: $ty) -> &mut Self {
                self.add_value(key, MetaValue::$variant(value))
            }
        )*
    };
}

impl GgufWriter {
    pub fn new() -> GgufWriter {
        GgufWriter { alignment: DEFAULT_ALIGNMENT, metadata: Vec::new(), tensors: Vec::new() }
    }

    /// Alignment of tensor data in the file.
    pub fn alignment(&self) -> usize {
        self.alignment
    }

    /// Sets the alignment of tensor data (a power of two) and records it as the `u32` entry
    /// `general.alignment`.
    pub fn set_alignment(&mut self, alignment: u32) -> Result<&mut Self> {
        if !alignment.is_power_of_two() {
            return Err(Error::Gguf {
                field: ALIGNMENT_KEY.into(),
                message: format!("the alignment must be a power of two, got {alignment}"),
            });
        }
        Ok(self.add_u32(ALIGNMENT_KEY, alignment))
    }

    /// Adds an entry, or replaces the value of an existing one where it stands. An unsigned
    /// `general.alignment` that is a power of two also sets the alignment; any other value of
    /// it is written as given (a file readers reject, useful for tests) and the data keeps the
    /// previous alignment.
    pub fn add_value(&mut self, key: &str, value: MetaValue) -> &mut Self {
        if key == ALIGNMENT_KEY {
            let align = match value {
                MetaValue::U8(v) => Some(u64::from(v)),
                MetaValue::U16(v) => Some(u64::from(v)),
                MetaValue::U32(v) => Some(u64::from(v)),
                MetaValue::U64(v) => Some(v),
                _ => None,
            };
            if let Some(a) = align.and_then(|a| usize::try_from(a).ok()).filter(|a| a.is_power_of_two()) {
                self.alignment = a;
            }
        }
        match self.metadata.iter_mut().find(|(k, _)| k == key) {
            Some((_, v)) => *v = value,
            None => self.metadata.push((key.to_owned(), value)),
        }
        self
    }

    add_scalar!(
        add_u8: u8 => U8,
        add_i8: i8 => I8,
        add_u16: u16 => U16,
        add_i16: i16 => I16,
        add_u32: u32 => U32,
        add_i32: i32 => I32,
        add_f32: f32 => F32,
        add_bool: bool => Bool,
        add_u64: u64 => U64,
        add_i64: i64 => I64,
        add_f64: f64 => F64,
    );

    /// Adds (or replaces) a string entry.
    pub fn add_string(&mut self, key: &str, value: &str) -> &mut Self {
        self.add_value(key, MetaValue::String(value.to_owned()))
    }

    /// Adds (or replaces) an array entry: scalars, strings, or arrays ([`MetaArray`]).
    pub fn add_array<T: ArrayElement>(&mut self, key: &str, items: &[T]) -> &mut Self {
        self.add_value(key, MetaValue::Array(MetaArray::of(items)))
    }

    /// The entries added so far.
    pub fn metadata(&self) -> &[(String, MetaValue)] {
        &self.metadata
    }

    /// Adds a tensor of `dtype` with shape `ne` (1 to 4 dimensions, ggml order) whose data is
    /// `bytes`, which must be exactly its size.
    pub fn add_tensor(&mut self, name: &str, dtype: DType, ne: &[usize], bytes: &[u8]) -> Result<&mut Self> {
        let err = |message: String| Error::Gguf { field: name.to_owned(), message };
        if ne.is_empty() || ne.len() > 4 {
            return Err(err(format!("tensor '{name}' has {} dimensions; GGUF tensors have 1 to 4", ne.len())));
        }
        if self.tensors.iter().any(|t| t.name == name) {
            return Err(err(format!("a tensor named '{name}' was already added")));
        }
        let mut shape = [1usize; 4];
        shape[..ne.len()].copy_from_slice(ne);
        let nbytes = dtype
            .row_bytes(ne[0])
            .and_then(|row| {
                ne[1..]
                    .iter()
                    .try_fold(row, |acc, &n| acc.checked_mul(n))
                    .ok_or(Error::Overflow { what: "tensor size" })
            })
            .map_err(|e| err(format!("tensor '{name}' of type {dtype} and shape {}: {e}", Shape(shape))))?;
        if nbytes != bytes.len() {
            return Err(err(format!(
                "tensor '{name}' of type {dtype} and shape {} needs {nbytes} bytes, got {}",
                Shape(shape),
                bytes.len()
            )));
        }
        self.tensors.push(PendingTensor { name: name.to_owned(), dtype, ne: ne.to_vec(), data: bytes.to_vec() });
        Ok(self)
    }

    /// Adds a tensor from f32 values, converted (or quantized) to `dtype`.
    pub fn add_tensor_f32(&mut self, name: &str, dtype: DType, ne: &[usize], values: &[f32]) -> Result<&mut Self> {
        let bytes = convert::to_bytes(dtype, values)
            .map_err(|e| Error::Gguf { field: name.to_owned(), message: format!("tensor '{name}': {e}") })?;
        self.add_tensor(name, dtype, ne, &bytes)
    }

    /// The file's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&MAGIC);
        put_u32(&mut out, VERSION);
        put_u64(&mut out, self.tensors.len() as u64);
        put_u64(&mut out, self.metadata.len() as u64);
        for (key, value) in &self.metadata {
            put_str(&mut out, key);
            put_u32(&mut out, value.value_type().tag());
            value.encode(&mut out);
        }
        let mut offset = 0usize;
        for t in &self.tensors {
            put_str(&mut out, &t.name);
            put_u32(&mut out, t.ne.len() as u32);
            for &n in &t.ne {
                put_u64(&mut out, n as u64);
            }
            put_u32(&mut out, ggml_type_id(t.dtype));
            put_u64(&mut out, offset as u64);
            offset = (offset + t.data.len()).next_multiple_of(self.alignment);
        }
        if !self.tensors.is_empty() {
            pad(&mut out, self.alignment);
            for t in &self.tensors {
                out.extend_from_slice(&t.data);
                pad(&mut out, self.alignment);
            }
        }
        out
    }

    /// Writes the file to `path`.
    pub fn write_to(&self, path: impl AsRef<Path>) -> std::io::Result<()> {
        std::fs::write(path, self.to_bytes())
    }
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_u64(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

fn pad(out: &mut Vec<u8>, alignment: usize) {
    out.resize(out.len().next_multiple_of(alignment), 0);
}

#[cfg(test)]
mod tests {
    use tessera_core::gguf::Gguf;

    use super::*;

    #[test]
    fn the_layout_is_aligned_and_readable() {
        let mut w = GgufWriter::new();
        w.add_u8("a", 1).add_string("s", "text");
        w.add_tensor("t0", DType::F32, &[3], &[0; 12]).unwrap();
        w.add_tensor("t1", DType::F16, &[5], &[1; 10]).unwrap();
        let bytes = w.to_bytes();
        assert_eq!(&bytes[..4], b"GGUF");
        assert_eq!(bytes.len() % 32, 0);
        let g = Gguf::parse(&bytes).unwrap();
        assert_eq!(g.version(), 3);
        assert_eq!(g.tensor("t1").unwrap().offset(), 32);
        assert_eq!(g.tensor_data(g.tensor("t1").unwrap()), &[1; 10]);
        assert_eq!(g.get("s"), Some(Value::String("text")));
    }

    #[test]
    fn replacing_a_key_keeps_its_place() {
        let mut w = GgufWriter::new();
        w.add_u8("a", 1).add_u8("b", 2).add_i64("a", -1);
        assert_eq!(w.metadata(), [("a".to_owned(), MetaValue::I64(-1)), ("b".to_owned(), MetaValue::U8(2))]);
    }

    #[test]
    fn tensors_and_arrays_are_checked() {
        let mut w = GgufWriter::new();
        let err = w.add_tensor("w", DType::F32, &[4, 2], &[0; 31]).err().unwrap();
        assert_eq!(err.to_string(), "gguf: tensor 'w' of type f32 and shape [4, 2, 1, 1] needs 32 bytes, got 31");
        assert!(w.add_tensor("q", DType::Q8_0, &[16], &[0; 17]).is_err());
        assert!(w.add_tensor("e", DType::F32, &[], &[]).is_err());
        assert!(w.add_tensor("e", DType::F32, &[1, 1, 1, 1, 1], &[0; 4]).is_err());
        w.add_tensor("w", DType::F32, &[1], &[0; 4]).unwrap();
        assert!(w.add_tensor("w", DType::F32, &[1], &[0; 4]).is_err());
        assert!(w.set_alignment(48).is_err());
        assert_eq!(w.set_alignment(64).unwrap().alignment(), 64);

        let mut a = MetaArray::new(ValueType::U16);
        a.push(MetaValue::U16(1)).unwrap();
        assert!(a.push(MetaValue::U32(1)).is_err());
        assert_eq!(a.items(), [MetaValue::U16(1)]);
    }
}
