//! tessera-plugin-abi: backend plugins, a versioned C ABI between a host and backends loaded
//! at run time.
//!
//! A plugin is a shared library (`libtessera-<name>[-<variant>].so`) exporting
//! - `tessera_backend_abi_version() -> u32`: the [`abi::ABI_VERSION`] it was built for; a
//!   host loads only plugins of its own version;
//! - `tessera_backend_init(host, err) -> *const AbiReg`: its family, as [`tables::AbiReg`];
//! - optionally `tessera_backend_score() -> u32`: how well this build suits the machine, 0
//!   when it cannot run here (a CPU build for AVX-512 on a machine without it). A host picks
//!   the highest-scoring variant of each family.
//!
//! Nothing crosses the boundary as a Rust type. Objects are `#[repr(C)]` tables of
//! `extern "C"` functions plus a context pointer; each table starts with its size, so a host
//! sees which functions an older plugin lacks. Graphs cross as plain descriptors
//! ([`abi::AbiTensor`]: type id, shape, strides, op id and parameters, source indices, view
//! source and offset, flags, and the memory as (buffer, offset)); the plugin rebuilds and
//! re-checks a [`tessera_core::Graph`] before its kernels run. A split the scheduler runs
//! many times crosses once: the plugin's backend prepares it into a program (an opaque
//! handle) and replays it on each `run`. Buffers a plugin allocates stay opaque handles
//! with their own functions; the host wraps them as `Arc<dyn Buffer>`. No panic crosses the
//! boundary: the exporting side catches every one and returns it as an error.
//!
//! - [`abi`]: the constants, entry points and plain data that cross;
//! - [`tables`]: the function tables, each described once (`table`'s `abi_table!` makes the
//!   C struct, the exporter's constructor and the importer's checked view from it);
//! - [`desc`]: encoding a graph into descriptors and rebuilding it, checked;
//! - [`export`]: a Rust backend family exported through the tables (with
//!   [`export_backend!`] defining the entry points);
//! - [`import`]: a loaded table wrapped back into the Rust traits.
//!
//! Loading shared libraries needs an operating system and lives in tessera-std; this crate
//! is `no_std` and also lets a program route a family through the tables in-process
//! ([`loopback`]), which is how the tables are tested without a build of a library.
#![no_std]
#![forbid(unsafe_op_in_unsafe_fn)]

extern crate alloc;

pub mod abi;
pub mod desc;
pub mod export;
pub mod import;
mod table;
pub mod tables;

#[cfg(test)]
mod tests;

pub use abi::ABI_VERSION;
pub use export::Exporter;
pub use import::{
    wrap_reg, PluginBackend, PluginBuffer, PluginBufferType, PluginDevice, PluginEvent, PluginProgram, PluginReg,
};

use tessera_core::Result;

/// Exports `E`'s family through the C tables and wraps the tables back, in this process:
/// every call then crosses the same boundary a loaded plugin's calls cross.
pub fn loopback<E: Exporter>(origin: &str) -> Result<&'static PluginReg> {
    let table = export::export_reg::<E>();
    // SAFETY: the table was just built by `export_reg`, which leaks it: it stays valid for
    // the life of the process, longer than any shutdown.
    unsafe { wrap_reg(table.0, origin) }
}
