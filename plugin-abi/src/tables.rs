//! The function tables of the plugin ABI, each described once: `abi_table!` makes the C
//! table, its handle, the exporter's constructor and the host's checked view from each
//! description below (see [`crate::table`] for what it generates and how to add an entry).
//!
//! `required` entries must be present for the host to use the object; `optional` ones may
//! be missing (null, or past the end of an older plugin's table) and mean "not supported".
//! Fallible functions return a `STATUS_*` and fill the caller's `err`.

use crate::abi::{AbiBufferBase, AbiBufferRef, AbiBufferTypeRef, AbiError, AbiGraph, AbiStr, AbiTensor, Ctx};
use crate::table::abi_table;

abi_table! {
    /// A backend family: the table `tessera_backend_init` returns. It lives until the plugin
    /// is unloaded (after `release`, if given, was called).
    struct AbiReg("reg table"), exported by RegExports, imported as RegFns {
        data {
            /// The plugin ABI this table follows (`ABI_VERSION`).
            abi_version: u32,
            /// `EXT_*` bits.
            extensions: u32,
            ctx: Ctx,
        }
        required name: fn(ctx: Ctx) -> AbiStr;
        required device_count: fn(ctx: Ctx) -> usize;
        /// Fills `out` with device `index`; false if there is none.
        required device: fn(ctx: Ctx, index: usize, out: *mut AbiDevice) -> bool;
        /// Feature `index` as (name, value); false past the last one.
        optional feature: fn(ctx: Ctx, index: usize, name: *mut AbiStr, value: *mut AbiStr) -> bool;
        /// Called once before the plugin is unloaded, when no object of it is left.
        optional release: fn(ctx: Ctx);
    }
}

abi_table! {
    /// A device; it lives as long as the plugin.
    struct AbiDeviceFns("device table"), handle AbiDevice, exported by DeviceExports, imported as DeviceFns {
        required name: fn(ctx: Ctx) -> AbiStr;
        required description: fn(ctx: Ctx) -> AbiStr;
        required memory: fn(ctx: Ctx, free: *mut usize, total: *mut usize);
        /// `DEVICE_*`.
        required device_type: fn(ctx: Ctx) -> u32;
        /// `CAP_*` bits.
        required caps: fn(ctx: Ctx) -> u32;
        /// Lower-case PCI bus id, empty if none.
        optional pci_bus_id: fn(ctx: Ctx) -> AbiStr;
        /// Whether the device can compute `graph.nodes[node]`.
        required supports_op: fn(ctx: Ctx, graph: *const AbiGraph, node: usize) -> bool;
        required supports_buffer_type: fn(ctx: Ctx, buffer_type: *const AbiBufferTypeRef) -> bool;
        optional offload_op: fn(ctx: Ctx, graph: *const AbiGraph, node: usize) -> bool;
        required buffer_type: fn(ctx: Ctx, out: *mut AbiBufferType) -> bool;
        /// False if the device has no pinned host memory.
        optional host_buffer_type: fn(ctx: Ctx, out: *mut AbiBufferType) -> bool;
        required init_backend: fn(ctx: Ctx, out: *mut AbiBackend, err: *mut AbiError) -> i32;
        /// `STATUS_OK` with a null `out.fns` means the device has no events.
        optional new_event: fn(ctx: Ctx, out: *mut AbiEvent, err: *mut AbiError) -> i32;
        /// A buffer over `size` bytes of host memory at `ptr`, used in place (read-only);
        /// the host keeps the memory valid and unwritten until it has freed the buffer and
        /// every program and queued work using it. Fails when the device cannot
        /// (`CAP_BUFFER_FROM_HOST_PTR` unset).
        optional buffer_from_host_ptr: fn(
            ctx: Ctx,
            ptr: *const u8,
            size: usize,
            out: *mut AbiBuffer,
            err: *mut AbiError,
        ) -> i32;
        /// Like `new_event`, for an event that also measures device time.
        optional new_timing_event: fn(ctx: Ctx, out: *mut AbiEvent, err: *mut AbiError) -> i32;
    }
}

abi_table! {
    /// A buffer type; it lives as long as the plugin.
    struct AbiBufferTypeFns("buffer type table"), handle AbiBufferType,
        exported by BufferTypeExports, imported as BufferTypeFns {
        required name: fn(ctx: Ctx) -> AbiStr;
        required alignment: fn(ctx: Ctx) -> usize;
        required max_size: fn(ctx: Ctx) -> usize;
        required is_host: fn(ctx: Ctx) -> bool;
        /// Bytes the tensor needs (default: its size). The tensor's indices are unused.
        optional alloc_size: fn(ctx: Ctx, tensor: *const AbiTensor) -> usize;
        required alloc_buffer: fn(ctx: Ctx, size: usize, out: *mut AbiBuffer, err: *mut AbiError) -> i32;
    }
}

abi_table! {
    /// A buffer, owned by whoever received it: it must be freed exactly once.
    struct AbiBufferFns("buffer table"), handle AbiBuffer, exported by BufferExports, imported as BufferFns {
        required free: fn(ctx: Ctx);
        required buffer_size: fn(ctx: Ctx) -> usize;
        /// What the memory is and where it starts; the same for the buffer's whole life.
        required base: fn(ctx: Ctx) -> AbiBufferBase;
        required usage: fn(ctx: Ctx) -> u8;
        required set_usage: fn(ctx: Ctx, usage: u8);
        required set_bytes: fn(ctx: Ctx, offset: usize, src: *const u8, len: usize, err: *mut AbiError) -> i32;
        required get_bytes: fn(ctx: Ctx, offset: usize, dst: *mut u8, len: usize, err: *mut AbiError) -> i32;
        required fill: fn(ctx: Ctx, offset: usize, len: usize, value: u8, err: *mut AbiError) -> i32;
        /// Copies from `src`; `*copied = false` means "cannot, stage it through the host".
        optional copy_from: fn(
            ctx: Ctx,
            dst_offset: usize,
            src: *const AbiBufferRef,
            src_offset: usize,
            len: usize,
            copied: *mut bool,
            err: *mut AbiError,
        ) -> i32;
        optional reset: fn(ctx: Ctx);
        /// Prepares the memory of the tensor placed at `offset` (its indices are unused).
        optional init_tensor: fn(ctx: Ctx, tensor: *const AbiTensor, offset: usize, err: *mut AbiError) -> i32;
    }
}

abi_table! {
    /// A backend (stream), owned by the host: it must be freed exactly once.
    struct AbiBackendFns("backend table"), handle AbiBackend, exported by BackendExports, imported as BackendFns {
        required free: fn(ctx: Ctx);
        required name: fn(ctx: Ctx) -> AbiStr;
        /// Writes `len` bytes at `offset` of `dst` (queued: `src` stays valid until synchronize).
        required set_tensor_async: fn(
            ctx: Ctx,
            dst: *const AbiBufferRef,
            offset: usize,
            src: *const u8,
            len: usize,
            err: *mut AbiError,
        ) -> i32;
        /// Reads `len` bytes at `offset` of `src` (queued: `dst` stays valid until synchronize).
        required get_tensor_async: fn(
            ctx: Ctx,
            src: *const AbiBufferRef,
            offset: usize,
            dst: *mut u8,
            len: usize,
            err: *mut AbiError,
        ) -> i32;
        required synchronize: fn(ctx: Ctx, err: *mut AbiError) -> i32;
        /// Computes `graph.nodes[first..last]`.
        required compute: fn(ctx: Ctx, graph: *const AbiGraph, first: usize, last: usize, err: *mut AbiError) -> i32;
        /// Records an event of this plugin (its context) on the stream.
        optional record_event: fn(ctx: Ctx, event: Ctx, err: *mut AbiError) -> i32;
        /// Makes the stream wait for an event of this plugin.
        optional wait_event: fn(ctx: Ctx, event: Ctx, err: *mut AbiError) -> i32;
        /// `EXT_SET_N_THREADS`.
        optional set_n_threads: fn(ctx: Ctx, n: usize, err: *mut AbiError) -> i32;
        /// Makes `graph.nodes[first..last]` (a split, with `graph.consumers`) a program to run
        /// many times. The memory the graph refers to stays valid until the program is
        /// updated or freed, and its addresses do not change meanwhile (`layout` numbers
        /// them).
        optional prepare: fn(
            ctx: Ctx,
            graph: *const AbiGraph,
            first: usize,
            last: usize,
            layout: u64,
            out: *mut AbiProgram,
            err: *mut AbiError,
        ) -> i32;
        /// Brings a program of this backend up to date with the split as `graph` now
        /// describes it (tensors moved: a new `layout`); the program keeps this graph from
        /// now on, as after `prepare`.
        optional update: fn(
            ctx: Ctx,
            program: Ctx,
            graph: *const AbiGraph,
            first: usize,
            last: usize,
            layout: u64,
            err: *mut AbiError,
        ) -> i32;
        /// Runs a program of this backend over the graph it was last prepared or updated
        /// with (same structure and addresses; the values may have changed). May return
        /// before the work is done.
        optional run: fn(ctx: Ctx, program: Ctx, err: *mut AbiError) -> i32;
        /// The runs of consecutive nodes of the split `graph.nodes[first..last]` (with
        /// `graph.consumers`; tensors need no memory yet) that this backend computes as one
        /// kernel (`Backend::fused_runs`): at most `cap` of them written to `out` as pairs of
        /// node indices, start and end (exclusive), and in `count` how many there are (more
        /// than `cap`: the host asks again with room for them all).
        optional fused_runs: fn(
            ctx: Ctx,
            graph: *const AbiGraph,
            first: usize,
            last: usize,
            out: *mut usize,
            cap: usize,
            count: *mut usize,
            err: *mut AbiError,
        ) -> i32;
    }
}

abi_table! {
    /// A split prepared by a backend (`prepare`), owned by the host: it must be freed exactly
    /// once, from any thread, and may outlive its backend.
    struct AbiProgramFns("program table"), handle AbiProgram, exported by ProgramExports, imported as ProgramFns {
        required free: fn(ctx: Ctx);
    }
}

abi_table! {
    /// An event, owned by the host: it must be freed exactly once.
    struct AbiEventFns("event table"), handle AbiEvent, exported by EventExports, imported as EventFns {
        required free: fn(ctx: Ctx);
        required synchronize: fn(ctx: Ctx, err: *mut AbiError) -> i32;
        /// Device nanoseconds from the event `start` (of this plugin) to this one, waiting for
        /// both; `u64::MAX` when they cannot be timed.
        optional elapsed_since: fn(ctx: Ctx, start: Ctx, out_ns: *mut u64, err: *mut AbiError) -> i32;
    }
}
