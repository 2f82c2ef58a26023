//! Parsing a whole GGUF file: header, metadata, tensor infos and the data section.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use super::cursor::Cursor;
use super::field::Field;
use super::types::{dtype_from_ggml, ggml_type_name, ValueType};
use super::value::{decode, read_str, Array, Value};
use super::{ALIGNMENT_KEY, DEFAULT_ALIGNMENT, MAGIC};
use crate::dtype::DType;
use crate::error::{Error, Result, Shape};
use crate::tensor::MAX_DIMS;

/// The fewest bytes a metadata entry can take: an empty key, a type tag and a one-byte value.
const MIN_KV_BYTES: usize = 8 + 4 + 1;
/// The fewest bytes a tensor info can take: an empty name, `n_dims`, one dimension, the type
/// and the offset.
const MIN_TENSOR_INFO_BYTES: usize = 8 + 4 + 8 + 4 + 8;

/// One metadata entry.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KeyValue<'a> {
    pub key: &'a str,
    pub value: Value<'a>,
}

/// What the file says about one tensor, checked against the file: its data lies inside it.
#[derive(Clone, Copy, PartialEq)]
pub struct TensorInfo<'a> {
    name: &'a str,
    dtype: DType,
    n_dims: usize,
    ne: [usize; MAX_DIMS],
    offset: usize,
    file_offset: usize,
    data: &'a [u8],
}

impl<'a> TensorInfo<'a> {
    pub fn name(&self) -> &'a str {
        self.name
    }
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    /// Dimensions the file lists (1 to 4).
    pub fn n_dims(&self) -> usize {
        self.n_dims
    }
    /// Values along each dimension, ggml order (`ne[0]` is the row length); missing ones are 1.
    pub fn ne(&self) -> [usize; MAX_DIMS] {
        self.ne
    }
    pub fn shape(&self) -> Shape {
        Shape(self.ne)
    }
    /// Offset of the data from the start of the data section (what the file stores).
    pub fn offset(&self) -> usize {
        self.offset
    }
    /// Offset of the data from the start of the file.
    pub fn file_offset(&self) -> usize {
        self.file_offset
    }
    /// Bytes of data: `row_bytes(ne[0]) * ne[1] * ne[2] * ne[3]`.
    pub fn nbytes(&self) -> usize {
        self.data.len()
    }
    /// The tensor's bytes, borrowed from the file.
    pub fn data(&self) -> &'a [u8] {
        self.data
    }
}

/// Prints the info, not the data.
impl fmt::Debug for TensorInfo<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TensorInfo")
            .field("name", &self.name)
            .field("dtype", &self.dtype)
            .field("ne", &self.ne.get(..self.n_dims).unwrap_or(&self.ne))
            .field("offset", &self.offset)
            .field("file_offset", &self.file_offset)
            .field("nbytes", &self.data.len())
            .finish()
    }
}

/// A parsed GGUF file that borrows its bytes: nothing is copied but the tables of entries.
#[derive(Clone)]
pub struct Gguf<'a> {
    bytes: &'a [u8],
    version: u32,
    alignment: usize,
    data_offset: usize,
    metadata: Vec<KeyValue<'a>>,
    /// `(key, entry)` sorted by key.
    keys: Vec<(&'a str, usize)>,
    tensors: Vec<TensorInfo<'a>>,
    /// `(name, tensor)` sorted by name.
    names: Vec<(&'a str, usize)>,
}

macro_rules! typed_getters {
    ($($name:ident: $as:ident -> $ty:ty, $expected:literal;)*) => {
        $(
            #[doc = concat!("The ", $expected, " value of `key`; an error if it is missing or of another type.")]
            pub fn $name(&self, key: &str) -> Result<$ty> {
                let value = self.require(key)?;
                value.$as().ok_or_else(|| wrong_type(key, value.value_type(), $expected))
            }
        )*
    };
}

impl<'a> Gguf<'a> {
    /// Parses and checks a whole file. Every count, length and offset is checked against the
    /// bytes before it is used; a malformed file is an [`Error::Gguf`] naming the field.
    pub fn parse(bytes: &'a [u8]) -> Result<Gguf<'a>> {
        let mut c = Cursor::new(bytes);
        let version = read_header(&mut c)?;
        let tensor_count = c.u64().map_err(|s| Field::TensorCount.truncated(s))?;
        let kv_count = c.u64().map_err(|s| Field::KvCount.truncated(s))?;

        let (metadata, keys) = read_metadata(&mut c, kv_count)?;
        let alignment = read_alignment(&metadata, &keys)?;
        let (pending, names) = read_tensor_infos(&mut c, tensor_count, alignment)?;

        let data_offset = align_up(c.pos(), alignment).ok_or_else(|| {
            Field::TensorCount.error(format!("the data section offset overflows (tensor infos end at {})", c.pos()))
        })?;
        let infos = locate_data(bytes, data_offset, pending)?;
        check_overlaps(&infos)?;
        Ok(Gguf { bytes, version, alignment, data_offset, metadata, keys, tensors: infos, names })
    }

    /// The format version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The whole file.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Alignment of tensor data: `general.alignment`, or 32.
    pub fn alignment(&self) -> usize {
        self.alignment
    }

    /// Where the data section starts in the file.
    pub fn data_offset(&self) -> usize {
        self.data_offset
    }

    /// Every metadata entry, in file order.
    pub fn metadata(&self) -> &[KeyValue<'a>] {
        &self.metadata
    }

    /// The value of `key`, if the file has it.
    pub fn get(&self, key: &str) -> Option<Value<'a>> {
        lookup(&self.keys, key).and_then(|i| self.metadata.get(i)).map(|kv| kv.value)
    }

    fn require(&self, key: &str) -> Result<Value<'a>> {
        self.get(key)
            .ok_or_else(|| Error::Gguf { field: key.into(), message: format!("metadata entry '{key}' is missing") })
    }

    typed_getters! {
        get_u8: as_u8 -> u8, "u8";
        get_i8: as_i8 -> i8, "i8";
        get_u16: as_u16 -> u16, "u16";
        get_i16: as_i16 -> i16, "i16";
        get_u32: as_u32 -> u32, "u32";
        get_i32: as_i32 -> i32, "i32";
        get_f32: as_f32 -> f32, "f32";
        get_bool: as_bool -> bool, "bool";
        get_u64: as_u64 -> u64, "u64";
        get_i64: as_i64 -> i64, "i64";
        get_f64: as_f64 -> f64, "f64";
        get_str: as_str -> &'a str, "string";
        get_array: as_array -> Array<'a>, "array";
    }

    /// The value of `key` if it is any unsigned integer type, widened.
    pub fn get_unsigned(&self, key: &str) -> Result<u64> {
        let value = self.require(key)?;
        value.as_unsigned().ok_or_else(|| wrong_type(key, value.value_type(), "unsigned integer"))
    }

    /// Every tensor, in file order.
    pub fn tensors(&self) -> &[TensorInfo<'a>] {
        &self.tensors
    }

    /// The tensor called `name`, if there is one.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo<'a>> {
        lookup(&self.names, name).and_then(|i| self.tensors.get(i))
    }

    /// A tensor's bytes, borrowed from the file.
    pub fn tensor_data(&self, info: &TensorInfo<'a>) -> &'a [u8] {
        info.data
    }
}

/// Prints the header and the tables, not the file's bytes.
impl fmt::Debug for Gguf<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gguf")
            .field("version", &self.version)
            .field("file_bytes", &self.bytes.len())
            .field("alignment", &self.alignment)
            .field("data_offset", &self.data_offset)
            .field("metadata", &self.metadata)
            .field("tensors", &self.tensors)
            .finish()
    }
}

fn wrong_type(key: &str, found: ValueType, expected: &str) -> Error {
    Error::Gguf { field: key.into(), message: format!("metadata entry '{key}' has type {found}, expected {expected}") }
}

fn align_up(at: usize, alignment: usize) -> Option<usize> {
    Some(at.checked_add(alignment - 1)? & !(alignment - 1))
}

/// Checks the magic and the version; returns the version.
fn read_header(c: &mut Cursor<'_>) -> Result<u32> {
    let magic = c.take(MAGIC.len()).map_err(|s| Field::Magic.truncated(s))?;
    if magic != MAGIC {
        return Err(Field::Magic
            .error(format!("not a GGUF file: it starts with b\"{}\", expected b\"GGUF\"", magic.escape_ascii())));
    }
    let version = c.u32().map_err(|s| Field::Version.truncated(s))?;
    match version {
        2 | 3 => Ok(version),
        1 => Err(Field::Version.error(String::from(
            "unsupported version 1 (32-bit counts); tessera reads versions 2 and 3, so convert the file with a current gguf tool",
        ))),
        v if matches!(v.swap_bytes(), 2 | 3) => Err(Field::Version.error(format!(
            "unsupported version {v}: this looks like a big-endian file of version {}; tessera reads little-endian files",
            v.swap_bytes()
        ))),
        v => Err(Field::Version.error(format!("unsupported version {v}; tessera reads versions 2 and 3"))),
    }
}

/// Fails unless `count` items of at least `min_bytes` each fit in what is left.
fn check_count(c: &Cursor<'_>, field: Field<'_>, count: u64, min_bytes: usize, what: &str) -> Result<usize> {
    let left = c.remaining();
    usize::try_from(count).ok().filter(|n| n.checked_mul(min_bytes).is_some_and(|b| b <= left)).ok_or_else(|| {
        field.error(format!(
            "the file declares {count} {what}, but the {left} bytes left can hold at most {} (each takes at least {min_bytes} bytes)",
            left / min_bytes
        ))
    })
}

fn reserve<T>(v: &mut Vec<T>, n: usize, what: &str) -> Result<()> {
    v.try_reserve_exact(n).map_err(|_| {
        crate::fallible::out_of_memory_fmt(
            format_args!("gguf {what} table"),
            n.saturating_mul(core::mem::size_of::<T>()),
        )
    })
}

/// `(name, index)` pairs sorted by name: a lookup table built with fallible allocation
/// (a `BTreeMap` cannot report running out of memory).
type Index<'a> = Vec<(&'a str, usize)>;

/// Sorts `index` by name and returns the first repeated name, as `(name, first index, repeat
/// index)` with the smallest repeat index: the repetition a reader in file order meets first.
fn sort_index<'a>(index: &mut Index<'a>) -> Option<(&'a str, usize, usize)> {
    index.sort_unstable();
    index.windows(2).filter(|w| w[0].0 == w[1].0).map(|w| (w[0].0, w[0].1, w[1].1)).min_by_key(|&(_, _, repeat)| repeat)
}

/// The index of `name` in a sorted index.
fn lookup(index: &Index<'_>, name: &str) -> Option<usize> {
    index.binary_search_by(|(n, _)| (*n).cmp(name)).ok().map(|at| index[at].1)
}

type Metadata<'a> = (Vec<KeyValue<'a>>, Index<'a>);

fn read_metadata<'a>(c: &mut Cursor<'a>, kv_count: u64) -> Result<Metadata<'a>> {
    let n = check_count(c, Field::KvCount, kv_count, MIN_KV_BYTES, "metadata entries")?;
    let mut metadata = Vec::new();
    reserve(&mut metadata, n, "metadata")?;
    let mut keys = Vec::new();
    reserve(&mut keys, n, "metadata key")?;
    for entry in 0..n {
        let key = read_str(c).map_err(|p| Field::Key { entry }.problem(p))?;
        let type_field = Field::ValueType { entry, key };
        let tag = c.u32().map_err(|s| type_field.truncated(s))?;
        let ty = ValueType::from_u32(tag).ok_or_else(|| {
            type_field.error(format!("{} is {tag}, which is no GGUF value type (0 to 12)", type_field.describe()))
        })?;
        let value = decode(c, ty, 0).map_err(|p| Field::Value { entry, key }.problem(p))?;
        keys.push((key, entry));
        metadata.push(KeyValue { key, value });
    }
    if let Some((key, first, entry)) = sort_index(&mut keys) {
        let field = Field::Key { entry };
        return Err(field.error(format!("metadata key '{key}' appears twice (entries {first} and {entry})")));
    }
    Ok((metadata, keys))
}

/// `general.alignment` if present (a non-zero power of two of any unsigned type), else 32.
fn read_alignment(metadata: &[KeyValue<'_>], keys: &Index<'_>) -> Result<usize> {
    let Some(entry) = lookup(keys, ALIGNMENT_KEY) else {
        return Ok(DEFAULT_ALIGNMENT);
    };
    let Some(value) = metadata.get(entry).map(|kv| kv.value) else {
        return Ok(DEFAULT_ALIGNMENT);
    };
    let field = Field::Value { entry, key: ALIGNMENT_KEY };
    let Some(align) = value.as_unsigned() else {
        return Err(field.error(format!(
            "metadata entry '{ALIGNMENT_KEY}' has type {}, expected an unsigned integer (u32)",
            value.value_type()
        )));
    };
    match usize::try_from(align) {
        Ok(a) if a.is_power_of_two() => Ok(a),
        _ => Err(field.error(format!(
            "metadata entry '{ALIGNMENT_KEY}' is {align}, but the alignment must be a power of two (and fit in memory)"
        ))),
    }
}

/// A tensor info as read, before its data is located.
struct PendingInfo<'a> {
    name: &'a str,
    dtype: DType,
    n_dims: usize,
    ne: [usize; MAX_DIMS],
    offset: usize,
    nbytes: usize,
}

type TensorInfos<'a> = (Vec<PendingInfo<'a>>, Index<'a>);

fn read_tensor_infos<'a>(c: &mut Cursor<'a>, tensor_count: u64, alignment: usize) -> Result<TensorInfos<'a>> {
    let n = check_count(c, Field::TensorCount, tensor_count, MIN_TENSOR_INFO_BYTES, "tensors")?;
    let mut infos = Vec::new();
    reserve(&mut infos, n, "tensor")?;
    let mut names = Vec::new();
    reserve(&mut names, n, "tensor name")?;
    for tensor in 0..n {
        let name = read_str(c).map_err(|p| Field::TensorName { tensor }.problem(p))?;
        names.push((name, tensor));
        let part = |part| Field::Tensor { tensor, name, part };

        let n_dims = c.u32().map_err(|s| part("n_dims").truncated(s))?;
        let n_dims = match usize::try_from(n_dims) {
            Ok(n @ 1..=MAX_DIMS) => n,
            _ => {
                return Err(part("n_dims")
                    .error(format!("tensor '{name}' has {n_dims} dimensions; tessera supports 1 to {MAX_DIMS}")))
            }
        };
        let mut ne = [1usize; MAX_DIMS];
        for (dim, slot) in ne.iter_mut().enumerate().take(n_dims) {
            let field = Field::TensorDim { tensor, name, dim };
            let d = c.u64().map_err(|s| field.truncated(s))?;
            *slot = usize::try_from(d).map_err(|_| {
                field.error(format!("tensor '{name}' has {d} values along dimension {dim}, more than memory can hold"))
            })?;
        }

        let id = c.u32().map_err(|s| part("type").truncated(s))?;
        let dtype = dtype_from_ggml(id).ok_or_else(|| unsupported_type(part("type"), name, id))?;

        let offset = c.u64().map_err(|s| part("offset").truncated(s))?;
        let offset = usize::try_from(offset).ok().filter(|o| o % alignment == 0).ok_or_else(|| {
            part("offset").error(format!(
                "tensor '{name}' has data offset {offset}, which is not a multiple of the alignment {alignment}"
            ))
        })?;

        let nbytes =
            tensor_bytes(dtype, ne).map_err(|message| part("type").error(format!("tensor '{name}' {message}")))?;
        infos.push(PendingInfo { name, dtype, n_dims, ne, offset, nbytes });
    }
    if let Some((name, first, tensor)) = sort_index(&mut names) {
        let field = Field::TensorName { tensor };
        return Err(field.error(format!("tensor name '{name}' appears twice (tensors {first} and {tensor})")));
    }
    Ok((infos, names))
}

fn unsupported_type(field: Field<'_>, name: &str, id: u32) -> Error {
    let supported = "f32, f16, bf16, i32, q8_0, q4_0, q4_1, q5_0, q5_1, q2_K, q3_K, q4_K, q5_K, q6_K";
    match ggml_type_name(id) {
        Some(ty) => field.error(format!(
            "tensor '{name}' has type {ty} (ggml type {id}), which tessera does not support (supported: {supported})"
        )),
        None => field.error(format!("tensor '{name}' has ggml type {id}, which is no known ggml type")),
    }
}

/// Bytes of a tensor, or what is wrong with its shape.
fn tensor_bytes(dtype: DType, ne: [usize; MAX_DIMS]) -> core::result::Result<usize, String> {
    let overflow = || format!("of type {dtype} and shape {} has a size that overflows", Shape(ne));
    let row = dtype.row_bytes(ne[0]).map_err(|e| match e {
        Error::BlockAlignment { .. } => format!(
            "of type {dtype} has rows of {} values, which is not a whole number of blocks of {}",
            ne[0],
            dtype.block_len()
        ),
        _ => overflow(),
    })?;
    ne[1..].iter().try_fold(row, |acc, &n| acc.checked_mul(n)).ok_or_else(overflow)
}

/// Finds each tensor's data in the file, checking that it lies inside it.
fn locate_data<'a>(bytes: &'a [u8], data_offset: usize, pending: Vec<PendingInfo<'a>>) -> Result<Vec<TensorInfo<'a>>> {
    let mut infos = Vec::new();
    reserve(&mut infos, pending.len(), "tensor")?;
    for (tensor, p) in pending.into_iter().enumerate() {
        let start = data_offset.checked_add(p.offset);
        let Some((file_offset, data)) = start.and_then(|s| Some((s, bytes.get(s..s.checked_add(p.nbytes)?)?))) else {
            let field = Field::Tensor { tensor, name: p.name, part: "data" };
            return Err(field.error(format!(
                "tensor '{}' data (offset {}, {} bytes) runs past the end of the file ({} bytes; the data section starts at {data_offset})",
                p.name,
                p.offset,
                p.nbytes,
                bytes.len()
            )));
        };
        let PendingInfo { name, dtype, n_dims, ne, offset, .. } = p;
        infos.push(TensorInfo { name, dtype, n_dims, ne, offset, file_offset, data });
    }
    Ok(infos)
}

/// Fails if two tensors' data overlap (sorted by offset, only neighbours can).
fn check_overlaps(infos: &[TensorInfo<'_>]) -> Result<()> {
    let mut order: Vec<(usize, &TensorInfo<'_>)> = Vec::new();
    reserve(&mut order, infos.len(), "tensor order")?;
    order.extend(infos.iter().enumerate().filter(|(_, t)| t.nbytes() > 0));
    order.sort_unstable_by_key(|(_, t)| t.offset);
    for pair in order.windows(2) {
        let [(_, a), (tensor, b)] = pair else { continue };
        // Both ranges lie inside the file (checked by `locate_data`), so the sums cannot overflow.
        let a_end = a.offset + a.nbytes();
        if b.offset < a_end {
            let field = Field::Tensor { tensor: *tensor, name: b.name, part: "offset" };
            return Err(field.error(format!(
                "tensor '{}' data (offsets {}..{}) overlaps tensor '{}' (offsets {}..{a_end})",
                b.name,
                b.offset,
                b.offset + b.nbytes(),
                a.name,
                a.offset
            )));
        }
    }
    Ok(())
}
