//! The C ABI between a host and a backend plugin: constants, entry points and the
//! `#[repr(C)]` plain data that crosses it (the function tables are in [`crate::tables`]).
//! Nothing here is a Rust type with a layout of its own; every struct a plugin hands out
//! starts with its size, so a host can tell which fields a plugin built against an older ABI
//! lacks.
//!
//! Conventions, for a plugin written in any language:
//! - Every struct starts with its size in bytes (`usize`); a reader refuses one shorter than
//!   the fields it needs and ignores fields past those it knows. (Two-word strings and object
//!   handles, and the fixed-size error record, are the exceptions.)
//! - Every function pointer field is nullable (`Option`). A host refuses a table that lacks
//!   a required function and treats a missing optional one as "not supported".
//! - Objects are a pair of a function table and an opaque context pointer (`fns`, `ctx`);
//!   every function takes the context first. Buffers, backends, programs and events are
//!   owned by the host, which frees each exactly once.
//! - Fallible functions return a status (`STATUS_*`) and, on failure, write a message into
//!   the caller's [`AbiError`]. No function unwinds: a panic or exception is caught and
//!   reported as `STATUS_PANIC`.
//! - Strings ([`AbiStr`]) are UTF-8, not NUL-terminated, and owned by the side that returns
//!   them; they stay valid for as long as the object they describe. The host copies them.
//! - Reg, device and buffer type functions may be called from any thread at once; one
//!   backend (stream), and the programs it prepared, are used by one thread at a time;
//!   buffers may be used from several threads on disjoint bytes.

use core::ffi::c_void;

use tessera_core::tensor::MAX_SRC;

use crate::tables::AbiReg;

/// The version of this ABI. A host loads only plugins that report the same number; within
/// one version tables may grow at their end (their `size` tells how far they go).
///
/// 2: programs (backend `prepare`, `update`, `run`; the program table), buffer `base`
/// (replacing `host_base` and `host_writable`) and `init_tensor`, device
/// `buffer_from_host_ptr`, and the graph descriptor's consumer counts. Later within 2: the
/// backend's `fused_runs` (a plugin without it fuses nothing the allocator needs to know of).
pub const ABI_VERSION: u32 = 2;

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
pub const CAP_PROMPT_FLASH_ATTN: u32 = 16;

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

/// What a buffer's memory is (`kind`, one of `BASE_*`) and where it starts (`address`: a
/// host address for the host kinds, a device address, or a handle only the plugin knows).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AbiBufferBase {
    pub kind: u32,
    pub address: u64,
}

/// Host memory the host may read and write.
pub const BASE_HOST: u32 = 0;
/// Host memory the host may read but must not write.
pub const BASE_HOST_READ_ONLY: u32 = 1;
/// An address in the device's own address space.
pub const BASE_DEVICE: u32 = 2;
/// A handle only the plugin understands.
pub const BASE_OPAQUE: u32 = 3;

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

/// Memory a tensor may live in, as the host passes it to a plugin: the plugin's own buffer,
/// or host memory of someone else, valid until the call returns (for queued work: until the
/// backend's next synchronize; for a program: until the program is updated or freed).
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

/// One tensor of a graph crossing the boundary.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AbiTensor {
    /// Bytes of this struct (in an array: the distance from one to the next).
    pub size: usize,
    /// ggml's type id ([`crate::desc::dtype_id`]).
    pub dtype: u32,
    /// [`crate::desc`]'s op id.
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
    /// `n_tensors` counts, for `prepare` and `update`: how many nodes of the host's whole
    /// graph read each tensor, outputs counted once more (a result read only by the next
    /// node of the split need not be stored); null when unknown (every tensor is then taken
    /// as read elsewhere).
    pub consumers: *const u32,
}
