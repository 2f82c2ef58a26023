//! The C ABI between a host and a backend plugin: `#[repr(C)]` plain data and tables of
//! `extern "C"` functions. Nothing here is a Rust type with a layout of its own; every
//! struct a plugin hands out starts with its size, so a host can tell which fields a plugin
//! built against an older ABI lacks.
//!
//! Conventions, for a plugin written in any language:
//! - Every struct starts with its size in bytes (`usize`); a reader refuses one shorter than
//!   the fields it needs and ignores fields past those it knows. (Two-word strings and object
//!   handles, and the fixed-size error record, are the exceptions.)
//! - Every function pointer field is nullable (`Option`). A host refuses a table that lacks
//!   a required function and treats a missing optional one as "not supported".
//! - Objects are a pair of a function table and an opaque context pointer (`fns`, `ctx`);
//!   every function takes the context first.
//! - Fallible functions return a status (`STATUS_*`) and, on failure, write a message into
//!   the caller's [`AbiError`]. No function unwinds: a panic or exception is caught and
//!   reported as `STATUS_PANIC`.
//! - Strings ([`AbiStr`]) are UTF-8, not NUL-terminated, and owned by the side that returns
//!   them; they stay valid for as long as the object they describe. The host copies them.
//! - Reg, device and buffer type functions may be called from any thread at once; one
//!   backend (stream) is used by one thread at a time; buffers may be used from several
//!   threads on disjoint bytes.

use core::ffi::c_void;

use crate::tensor::MAX_SRC;

/// The version of this ABI. A host loads only plugins that report the same number; within
/// one version tables may grow at their end (their `size` tells how far they go).
pub const ABI_VERSION: u32 = 1;

/// Name of the entry point that returns the plugin's [`AbiReg`].
pub const INIT_SYMBOL: &str = "tessera_backend_init";
/// Name of the entry point that returns the ABI version the plugin was built for.
pub const ABI_VERSION_SYMBOL: &str = "tessera_backend_abi_version";
/// Name of the optional entry point that scores the plugin on this machine (0 = cannot run).
pub const SCORE_SYMBOL: &str = "tessera_backend_score";

/// `tessera_backend_abi_version`.
pub type AbiVersionFn = unsafe extern "C" fn() -> u32;
/// `tessera_backend_score`.
pub type ScoreFn = unsafe extern "C" fn() -> u32;
/// `tessera_backend_init`: the plugin's reg table, or null with `err` filled in.
pub type InitFn = unsafe extern "C" fn(host: *const AbiHostInfo, err: *mut AbiError) -> *const AbiReg;

/// An opaque object context.
pub type Ctx = *mut c_void;

pub const STATUS_OK: i32 = 0;
/// A failure described by the message.
pub const STATUS_ERROR: i32 = 1;
pub const STATUS_OUT_OF_MEMORY: i32 = 2;
/// The object cannot do what was asked (an op, a buffer it cannot read).
pub const STATUS_UNSUPPORTED: i32 = 3;
/// An argument was malformed (a bad descriptor, an index out of range).
pub const STATUS_INVALID: i32 = 4;
/// The plugin panicked; the message says where.
pub const STATUS_PANIC: i32 = 5;

/// `"None"` in a `u32` index field.
pub const NO_INDEX: u32 = u32::MAX;

/// Device types.
pub const DEVICE_CPU: u32 = 0;
pub const DEVICE_GPU: u32 = 1;
pub const DEVICE_IGPU: u32 = 2;
pub const DEVICE_ACCEL: u32 = 3;

/// Device capability bits.
pub const CAP_ASYNC: u32 = 1;
pub const CAP_HOST_BUFFER: u32 = 2;
pub const CAP_BUFFER_FROM_HOST_PTR: u32 = 4;
pub const CAP_EVENTS: u32 = 8;

/// Reg extension bits.
pub const EXT_SET_N_THREADS: u32 = 1;

/// A borrowed UTF-8 string.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AbiStr {
    pub ptr: *const u8,
    pub len: usize,
}

impl AbiStr {
    pub const EMPTY: AbiStr = AbiStr { ptr: core::ptr::null(), len: 0 };

    /// Borrows `s`; the result is valid for as long as `s` is.
    pub fn new(s: &str) -> AbiStr {
        AbiStr { ptr: s.as_ptr(), len: s.len() }
    }
}

/// Bytes of message an [`AbiError`] holds (longer messages are cut at a character boundary).
pub const ERROR_MESSAGE_CAP: usize = 500;

/// A failure reported by the callee into memory the caller owns.
#[repr(C)]
pub struct AbiError {
    /// One of `STATUS_*`.
    pub code: i32,
    /// Bytes of `message` used.
    pub len: u32,
    pub message: [u8; ERROR_MESSAGE_CAP],
}

impl AbiError {
    pub const fn new() -> AbiError {
        AbiError { code: STATUS_OK, len: 0, message: [0; ERROR_MESSAGE_CAP] }
    }

    /// Records `code` and `message` (cut to [`ERROR_MESSAGE_CAP`] bytes on a character
    /// boundary, newlines turned into spaces so that reasons stay one line).
    pub fn set(&mut self, code: i32, message: &str) {
        let mut end = message.len().min(ERROR_MESSAGE_CAP);
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        self.code = code;
        for (dst, b) in self.message.iter_mut().zip(message.as_bytes()[..end].iter()) {
            *dst = if *b == b'\n' || *b == b'\r' { b' ' } else { *b };
        }
        self.len = end as u32;
    }

    /// The message (lossy if the callee wrote invalid UTF-8).
    pub fn message(&self) -> alloc::string::String {
        let len = (self.len as usize).min(ERROR_MESSAGE_CAP);
        alloc::string::String::from_utf8_lossy(&self.message[..len]).into_owned()
    }
}

impl Default for AbiError {
    fn default() -> Self {
        AbiError::new()
    }
}

/// What the host tells a plugin's init.
#[repr(C)]
pub struct AbiHostInfo {
    pub size: usize,
    pub abi_version: u32,
}

/// A backend family: the table `tessera_backend_init` returns. It lives until the plugin is
/// unloaded (after `release`, if given, was called).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct AbiReg {
    pub size: usize,
    pub abi_version: u32,
    /// `EXT_*` bits.
    pub extensions: u32,
    pub ctx: Ctx,
    pub name: Option<unsafe extern "C" fn(ctx: Ctx) -> AbiStr>,
    pub device_count: Option<unsafe extern "C" fn(ctx: Ctx) -> usize>,
    /// Fills `out` with device `index`; false if there is none.
    pub device: Option<unsafe extern "C" fn(ctx: Ctx, index: usize, out: *mut AbiDevice) -> bool>,
    /// Optional: feature `index` as (name, value); false past the last one.
    pub feature: Option<unsafe extern "C" fn(ctx: Ctx, index: usize, name: *mut AbiStr, value: *mut AbiStr) -> bool>,
    /// Optional: called once before the plugin is unloaded, when no object of it is left.
    pub release: Option<unsafe extern "C" fn(ctx: Ctx)>,
}

/// A device handle.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AbiDevice {
    pub fns: *const AbiDeviceFns,
    pub ctx: Ctx,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct AbiDeviceFns {
    pub size: usize,
    pub name: Option<unsafe extern "C" fn(ctx: Ctx) -> AbiStr>,
    pub description: Option<unsafe extern "C" fn(ctx: Ctx) -> AbiStr>,
    pub memory: Option<unsafe extern "C" fn(ctx: Ctx, free: *mut usize, total: *mut usize)>,
    /// `DEVICE_*`.
    pub device_type: Option<unsafe extern "C" fn(ctx: Ctx) -> u32>,
    /// `CAP_*` bits.
    pub caps: Option<unsafe extern "C" fn(ctx: Ctx) -> u32>,
    /// Optional: lower-case PCI bus id, empty if none.
    pub pci_bus_id: Option<unsafe extern "C" fn(ctx: Ctx) -> AbiStr>,
    /// Whether the device can compute `graph.nodes[node]`.
    pub supports_op: Option<unsafe extern "C" fn(ctx: Ctx, graph: *const AbiGraph, node: usize) -> bool>,
    pub supports_buffer_type: Option<unsafe extern "C" fn(ctx: Ctx, buffer_type: *const AbiBufferTypeRef) -> bool>,
    /// Optional.
    pub offload_op: Option<unsafe extern "C" fn(ctx: Ctx, graph: *const AbiGraph, node: usize) -> bool>,
    pub buffer_type: Option<unsafe extern "C" fn(ctx: Ctx, out: *mut AbiBufferType) -> bool>,
    /// Optional: false if the device has no pinned host memory.
    pub host_buffer_type: Option<unsafe extern "C" fn(ctx: Ctx, out: *mut AbiBufferType) -> bool>,
    pub init_backend: Option<unsafe extern "C" fn(ctx: Ctx, out: *mut AbiBackend, err: *mut AbiError) -> i32>,
    /// Optional: `STATUS_OK` with a null `out.fns` means the device has no events.
    pub new_event: Option<unsafe extern "C" fn(ctx: Ctx, out: *mut AbiEvent, err: *mut AbiError) -> i32>,
}

/// A buffer type handle; it lives as long as the plugin.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AbiBufferType {
    pub fns: *const AbiBufferTypeFns,
    pub ctx: Ctx,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct AbiBufferTypeFns {
    pub size: usize,
    pub name: Option<unsafe extern "C" fn(ctx: Ctx) -> AbiStr>,
    pub alignment: Option<unsafe extern "C" fn(ctx: Ctx) -> usize>,
    pub max_size: Option<unsafe extern "C" fn(ctx: Ctx) -> usize>,
    pub is_host: Option<unsafe extern "C" fn(ctx: Ctx) -> bool>,
    /// Optional: bytes the tensor needs (default: its size). The tensor's indices are unused.
    pub alloc_size: Option<unsafe extern "C" fn(ctx: Ctx, tensor: *const AbiTensor) -> usize>,
    pub alloc_buffer:
        Option<unsafe extern "C" fn(ctx: Ctx, size: usize, out: *mut AbiBuffer, err: *mut AbiError) -> i32>,
}

/// A description of a buffer type that may belong to another backend, for
/// `supports_buffer_type`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AbiBufferTypeRef {
    pub size: usize,
    /// The plugin's own buffer type context, or null for a buffer type of someone else.
    pub own: Ctx,
    pub name: AbiStr,
    pub alignment: usize,
    pub max_size: usize,
    pub is_host: bool,
}

/// A buffer handle, owned by whoever received it: it must be freed exactly once.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AbiBuffer {
    pub fns: *const AbiBufferFns,
    pub ctx: Ctx,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct AbiBufferFns {
    pub size: usize,
    pub free: Option<unsafe extern "C" fn(ctx: Ctx)>,
    pub buffer_size: Option<unsafe extern "C" fn(ctx: Ctx) -> usize>,
    /// Host address of the first byte, or null for memory the host cannot address.
    pub host_base: Option<unsafe extern "C" fn(ctx: Ctx) -> *mut u8>,
    pub host_writable: Option<unsafe extern "C" fn(ctx: Ctx) -> bool>,
    pub usage: Option<unsafe extern "C" fn(ctx: Ctx) -> u8>,
    pub set_usage: Option<unsafe extern "C" fn(ctx: Ctx, usage: u8)>,
    pub set_bytes:
        Option<unsafe extern "C" fn(ctx: Ctx, offset: usize, src: *const u8, len: usize, err: *mut AbiError) -> i32>,
    pub get_bytes:
        Option<unsafe extern "C" fn(ctx: Ctx, offset: usize, dst: *mut u8, len: usize, err: *mut AbiError) -> i32>,
    pub fill: Option<unsafe extern "C" fn(ctx: Ctx, offset: usize, len: usize, value: u8, err: *mut AbiError) -> i32>,
    /// Optional: copies from `src`; `*copied = false` means "cannot, stage it through the host".
    pub copy_from: Option<
        unsafe extern "C" fn(
            ctx: Ctx,
            dst_offset: usize,
            src: *const AbiBufferRef,
            src_offset: usize,
            len: usize,
            copied: *mut bool,
            err: *mut AbiError,
        ) -> i32,
    >,
    /// Optional.
    pub reset: Option<unsafe extern "C" fn(ctx: Ctx)>,
}

/// Memory a tensor may live in, as the host passes it to a plugin: the plugin's own buffer,
/// or host memory of someone else, valid until the call returns (for queued work: until the
/// backend's next synchronize).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AbiBufferRef {
    /// Bytes of this struct.
    pub size: usize,
    /// The context of a buffer this plugin allocated, or null.
    pub own: Ctx,
    /// Host address of the memory, or null.
    pub host_base: *mut u8,
    /// Bytes of the memory.
    pub bytes: usize,
    pub writable: bool,
    /// The buffer type's name, for messages.
    pub name: AbiStr,
}

/// A backend (stream) handle, owned by the host: it must be freed exactly once.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AbiBackend {
    pub fns: *const AbiBackendFns,
    pub ctx: Ctx,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct AbiBackendFns {
    pub size: usize,
    pub free: Option<unsafe extern "C" fn(ctx: Ctx)>,
    pub name: Option<unsafe extern "C" fn(ctx: Ctx) -> AbiStr>,
    /// Writes `len` bytes at `offset` of `dst` (queued: `src` stays valid until synchronize).
    pub set_tensor_async: Option<
        unsafe extern "C" fn(
            ctx: Ctx,
            dst: *const AbiBufferRef,
            offset: usize,
            src: *const u8,
            len: usize,
            err: *mut AbiError,
        ) -> i32,
    >,
    /// Reads `len` bytes at `offset` of `src` (queued: `dst` stays valid until synchronize).
    pub get_tensor_async: Option<
        unsafe extern "C" fn(
            ctx: Ctx,
            src: *const AbiBufferRef,
            offset: usize,
            dst: *mut u8,
            len: usize,
            err: *mut AbiError,
        ) -> i32,
    >,
    pub synchronize: Option<unsafe extern "C" fn(ctx: Ctx, err: *mut AbiError) -> i32>,
    /// Computes `graph.nodes[first..last]`.
    pub compute: Option<
        unsafe extern "C" fn(ctx: Ctx, graph: *const AbiGraph, first: usize, last: usize, err: *mut AbiError) -> i32,
    >,
    /// Optional: records an event of this plugin (its context) on the stream.
    pub record_event: Option<unsafe extern "C" fn(ctx: Ctx, event: Ctx, err: *mut AbiError) -> i32>,
    /// Optional: makes the stream wait for an event of this plugin.
    pub wait_event: Option<unsafe extern "C" fn(ctx: Ctx, event: Ctx, err: *mut AbiError) -> i32>,
    /// Optional (`EXT_SET_N_THREADS`).
    pub set_n_threads: Option<unsafe extern "C" fn(ctx: Ctx, n: usize, err: *mut AbiError) -> i32>,
}

/// An event handle, owned by the host: it must be freed exactly once.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AbiEvent {
    pub fns: *const AbiEventFns,
    pub ctx: Ctx,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct AbiEventFns {
    pub size: usize,
    pub free: Option<unsafe extern "C" fn(ctx: Ctx)>,
    pub synchronize: Option<unsafe extern "C" fn(ctx: Ctx, err: *mut AbiError) -> i32>,
}

/// One tensor of a graph crossing the boundary.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AbiTensor {
    /// Bytes of this struct (in an array: the distance from one to the next).
    pub size: usize,
    /// ggml's type id ([`super::desc::dtype_id`]).
    pub dtype: u32,
    /// [`super::desc`]'s op id.
    pub op: u32,
    /// Op parameters (f32 as bits, integers as they are).
    pub op_params: [u64; 8],
    pub ne: [usize; 4],
    pub nb: [usize; 4],
    /// Indices into the graph's tensors, `NO_INDEX` for none.
    pub src: [u32; MAX_SRC],
    pub view_src: u32,
    pub flags: u32,
    pub view_offset: usize,
    /// Index into the graph's buffers, `NO_INDEX` when the tensor has no memory of its own.
    pub buffer: u32,
    pub data_offset: usize,
    pub name: AbiStr,
}

/// A graph (or the part of one a call needs): tensors, the nodes to look at, and the
/// buffers the tensors live in. Array entries of tensors and buffers are each as large as
/// their first field says (a newer host may send longer ones; a plugin reads what it knows).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AbiGraph {
    pub size: usize,
    pub tensors: *const AbiTensor,
    pub n_tensors: usize,
    /// Indices into `tensors`.
    pub nodes: *const u32,
    pub n_nodes: usize,
    pub buffers: *const AbiBufferRef,
    pub n_buffers: usize,
}
