//! The error type of tessera-core. Every message says what was wrong and what was expected.

use alloc::string::String;
use core::fmt;

use crate::dtype::DType;

pub type Result<T, E = Error> = core::result::Result<T, E>;

/// A shape written the way the messages print it: `[4, 3, 1, 1]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape(pub [usize; 4]);

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c, d] = self.0;
        write!(f, "[{a}, {b}, {c}, {d}]")
    }
}

#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Error {
    /// An operand of an op has a shape the op cannot use.
    ShapeMismatch { op: &'static str, tensor: String, shape: Shape, expected: String },
    /// An operand of an op has a type the op cannot use.
    TypeMismatch { op: &'static str, tensor: String, dtype: DType, expected: &'static str },
    /// An op parameter is out of its range.
    InvalidParam { op: &'static str, message: String },
    /// A row length is not a whole number of blocks of a quantized type.
    BlockAlignment { dtype: DType, len: usize },
    /// A view reaches outside the bytes of the tensor it views.
    ViewOutOfBounds { tensor: String, source: String, end: usize, source_bytes: usize },
    /// A byte range given for a tensor lies outside it.
    TensorRange { tensor: String, offset: usize, len: usize, nbytes: usize },
    /// A byte range given for a buffer lies outside it.
    BufferRange { buffer: String, offset: usize, len: usize, size: usize },
    /// A tensor id that does not belong to the graph.
    UnknownTensor { id: usize, tensors: usize },
    /// A tensor that needs memory has none bound.
    NotAllocated { tensor: String },
    /// A tensor is already bound to memory.
    AlreadyAllocated { tensor: String },
    /// A tensor lives in memory that cannot be written (weights borrowed from flash, say).
    ReadOnly { tensor: String, buffer: String },
    /// A tensor lives in a buffer the backend cannot use.
    IncompatibleBuffer { tensor: String, buffer: String, backend: String },
    /// The buffer or allocator ran out of memory.
    OutOfMemory { what: String, requested: usize },
    /// A backend cannot run an op with these operand types or shapes.
    Unsupported { backend: String, op: &'static str, tensor: String },
    /// A fixed-capacity table is full.
    CapacityExceeded { what: &'static str, limit: usize },
    /// No backend can run an op where its tensor lives (or at all, when `buffer` is empty).
    NoBackend { tensor: String, op: &'static str, buffer: String, backends: String },
    /// A size computation overflowed.
    Overflow { what: &'static str },
    /// A device was asked for by a name that does not exist.
    UnknownDevice { name: String, available: String },
    /// A request for the best device (`wanted` "device") or a GPU (`wanted` "GPU") found none.
    NoDevice { wanted: &'static str, request: String, available: String },
    /// A backend-specific failure (driver errors and the like).
    Backend { backend: String, message: String },
    /// A backend plugin could not be loaded or used; `plugin` is its path (while loading) or
    /// its family's name, `message` a one-line reason.
    Plugin { plugin: String, message: String },
    /// A model or data file could not be read.
    File { path: String, message: String },
    /// The compute was stopped by the eval callback.
    Cancelled,
    /// A GGUF model file is malformed or uses something tessera does not support. `field`
    /// locates the offending part (`metadata[3].key`, `tensors[0].offset`, a metadata key);
    /// `message` says what was wrong and what was expected.
    Gguf { field: String, message: String },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::ShapeMismatch { op, tensor, shape, expected } => {
                write!(f, "{op}: tensor '{tensor}' has shape {shape}, expected {expected}")
            }
            Error::TypeMismatch { op, tensor, dtype, expected } => {
                write!(f, "{op}: tensor '{tensor}' has type {dtype}, expected {expected}")
            }
            Error::InvalidParam { op, message } => write!(f, "{op}: {message}"),
            Error::BlockAlignment { dtype, len } => {
                write!(f, "a row of {len} values is not a whole number of {dtype} blocks of {}", dtype.block_len())
            }
            Error::ViewOutOfBounds { tensor, source, end, source_bytes } => {
                write!(f, "view '{tensor}' reaches byte {end} of '{source}', which has only {source_bytes} bytes")
            }
            Error::TensorRange { tensor, offset, len, nbytes } => write!(
                f,
                "bytes {offset}..{} are outside tensor '{tensor}' of {nbytes} bytes",
                offset.saturating_add(*len)
            ),
            Error::BufferRange { buffer, offset, len, size } => write!(
                f,
                "bytes {offset}..{} are outside buffer '{buffer}' of {size} bytes",
                offset.saturating_add(*len)
            ),
            Error::UnknownTensor { id, tensors } => {
                write!(f, "tensor id {id} does not belong to this graph (it has {tensors} tensors)")
            }
            Error::NotAllocated { tensor } => {
                write!(f, "tensor '{tensor}' has no memory bound to it")
            }
            Error::AlreadyAllocated { tensor } => {
                write!(f, "tensor '{tensor}' is already bound to memory")
            }
            Error::ReadOnly { tensor, buffer } if tensor.is_empty() => {
                write!(f, "buffer '{buffer}' is read-only and cannot be written")
            }
            Error::ReadOnly { tensor, buffer } => {
                write!(f, "tensor '{tensor}' lives in read-only buffer '{buffer}' and cannot be written")
            }
            Error::IncompatibleBuffer { tensor, buffer, backend } => {
                write!(f, "tensor '{tensor}' lives in buffer '{buffer}', which backend {backend} cannot use")
            }
            Error::OutOfMemory { what, requested } => {
                write!(f, "out of memory: {what} needs {requested} bytes")
            }
            Error::Unsupported { backend, op, tensor } => {
                write!(f, "backend {backend} does not support {op} as used by tensor '{tensor}'")
            }
            Error::CapacityExceeded { what, limit } => {
                write!(f, "capacity exceeded: at most {limit} {what} (raise the const generic limit)")
            }
            Error::NoBackend { tensor, op, buffer, backends } if buffer.is_empty() => {
                write!(f, "no backend can run {op} for tensor '{tensor}' (backends: {backends})")
            }
            Error::NoBackend { tensor, op, buffer, backends } => write!(
                f,
                "tensor '{tensor}' ({op}) lives in buffer '{buffer}', which no backend able to run {op} can use (backends: {backends})"
            ),
            Error::Overflow { what } => write!(f, "size overflow computing {what}"),
            Error::UnknownDevice { name, available } => {
                write!(f, "unknown device '{name}'; devices: {available}")
            }
            Error::NoDevice { wanted, request, available } => {
                write!(f, "no {wanted} found for '{request}'; devices: {available}")
            }
            Error::Backend { backend, message } => write!(f, "{backend}: {message}"),
            Error::Plugin { plugin, message } => write!(f, "plugin {plugin}: {message}"),
            Error::File { path, message } => write!(f, "{path}: {message}"),
            Error::Cancelled => f.write_str("compute stopped by the eval callback"),
            Error::Gguf { message, .. } => write!(f, "gguf: {message}"),
        }
    }
}

impl core::error::Error for Error {}
