//! The plugin side: a Rust backend family exported through the C tables.
//!
//! A backend crate builds a `cdylib` and calls [`crate::export_backend!`], which implements
//! [`Exporter`] (the reg to export, and panic catching with the plugin's `std`) and defines
//! the entry points. Each table's functions live in the file of its object (`reg.rs`,
//! `device.rs`, ...), as functions of the table's exporter (`DeviceExports<E>`, ...) named
//! after the entries they fill. Every one runs its body inside [`Exporter::catch`], so no
//! panic unwinds into the host.

mod backend;
mod buffer;
mod buffer_type;
mod device;
mod entry_points;
mod event;
mod program;
mod reg;

use alloc::boxed::Box;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::sync::Arc;
use core::any::Any;
use core::ptr::NonNull;

use tessera_core::host_buffer::HostBuffer;
use tessera_core::{Buffer, Error, Result};

use crate::abi::*;
use crate::desc::abi_string;
pub use reg::{export_reg, RegHandle};
#[doc(hidden)]
pub use tessera_core::registry::BackendReg;

/// What a plugin crate provides to the export: its reg, and a way to catch panics (which
/// needs `std`; [`crate::export_backend!`] implements it with `std::panic::catch_unwind`).
pub trait Exporter: 'static {
    /// The family to export.
    fn reg() -> &'static dyn BackendReg;
    /// Runs `f`; a panic comes back as `Err` with its message instead of unwinding.
    fn catch<R>(f: impl FnOnce() -> R) -> core::result::Result<R, String>;
}

/// The message of a caught panic payload.
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).into()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a non-string payload".into()
    }
}

/// The body of `tessera_backend_init`: checks the host's ABI, then returns the reg table
/// (`table` makes or fetches it), or null with `err` filled in.
///
/// # Safety
/// `host` must be null or point to an [`AbiHostInfo`]; `err` must be null or point to an
/// [`AbiError`] the callee may write.
pub unsafe fn init<E: Exporter>(
    host: *const AbiHostInfo,
    err: *mut AbiError,
    table: impl FnOnce() -> RegHandle,
) -> *const crate::tables::AbiReg {
    let host_abi = if host.is_null() {
        None
    } else {
        // SAFETY: non-null, and the caller promises it points to an AbiHostInfo, whose first
        // two fields every version shares.
        Some(unsafe { (*host).abi_version })
    };
    if let Some(v) = host_abi.filter(|v| *v != ABI_VERSION) {
        report(err, STATUS_UNSUPPORTED, &format!("the host speaks plugin ABI {v}, this plugin {ABI_VERSION}"));
        return core::ptr::null();
    }
    match E::catch(table) {
        Ok(handle) => handle.0,
        Err(panic) => {
            report(err, STATUS_PANIC, &format!("panicked in tessera_backend_init: {panic}"));
            core::ptr::null()
        }
    }
}

/// The body of `tessera_backend_score`: `score()`, or 0 if it panics.
pub fn score<E: Exporter>(score: fn() -> u32) -> u32 {
    E::catch(score).unwrap_or(0)
}

/// Writes a failure into `err` (if the caller gave one).
pub fn report(err: *mut AbiError, code: i32, message: &str) {
    if let Some(mut e) = NonNull::new(err) {
        // SAFETY: the caller of the exported function passed a writable AbiError.
        unsafe { e.as_mut() }.set(code, message);
    }
}

/// The status an error travels as.
pub fn status_of(e: &Error) -> i32 {
    match e {
        Error::OutOfMemory { .. } => STATUS_OUT_OF_MEMORY,
        Error::Unsupported { .. } | Error::IncompatibleBuffer { .. } | Error::NoBackend { .. } => STATUS_UNSUPPORTED,
        Error::InvalidParam { .. }
        | Error::UnknownTensor { .. }
        | Error::BufferRange { .. }
        | Error::ViewOutOfBounds { .. }
        | Error::TensorRange { .. } => STATUS_INVALID,
        _ => STATUS_ERROR,
    }
}

/// Runs a fallible body: its error or panic becomes a status and a message.
fn fallible<E: Exporter>(err: *mut AbiError, what: &str, f: impl FnOnce() -> Result<()>) -> i32 {
    match E::catch(f) {
        Ok(Ok(())) => STATUS_OK,
        Ok(Err(e)) => {
            let code = status_of(&e);
            report(err, code, &e.to_string());
            code
        }
        Err(panic) => {
            report(err, STATUS_PANIC, &format!("panicked in {what}: {panic}"));
            STATUS_PANIC
        }
    }
}

/// The object behind a context this plugin handed out.
///
/// # Safety
/// `ctx` must be a context of type `T` that this plugin handed out and that is still alive.
unsafe fn obj<'a, T>(ctx: Ctx) -> Result<&'a T> {
    // SAFETY: forwarded from the caller; a null context is refused rather than dereferenced.
    unsafe { ctx.cast::<T>().as_ref() }
        .ok_or_else(|| Error::InvalidParam { op: "PLUGIN", message: "null object context".into() })
}

/// # Safety
/// As [`obj`], and no other reference to the object may be in use (one backend, and its
/// programs, are used by one thread at a time).
unsafe fn obj_mut<'a, T>(ctx: Ctx) -> Result<&'a mut T> {
    // SAFETY: forwarded from the caller.
    unsafe { ctx.cast::<T>().as_mut() }
        .ok_or_else(|| Error::InvalidParam { op: "PLUGIN", message: "null object context".into() })
}

/// Drops the object behind a context this plugin handed out as a `Box<T>`.
///
/// # Safety
/// `ctx` must be null or have come from `Box::<T>::into_raw` in this plugin, and not be used
/// again (the host frees each object exactly once).
unsafe fn free_boxed<E: Exporter, T>(ctx: Ctx) {
    if !ctx.is_null() {
        // SAFETY: forwarded from the caller.
        let _ = E::catch(|| drop(unsafe { Box::from_raw(ctx.cast::<T>()) }));
    }
}

/// Writes `value` to `out` if it is not null.
///
/// # Safety
/// `out` must be null or valid for a write of `T`.
unsafe fn put<T>(out: *mut T, value: T) -> Result<()> {
    if out.is_null() {
        return Err(null_output());
    }
    // SAFETY: non-null; the caller promises it is writable.
    unsafe { out.write(value) };
    Ok(())
}

fn null_output() -> Error {
    Error::InvalidParam { op: "PLUGIN", message: "null output pointer".into() }
}

/// A buffer reference from the host as memory a kernel can use: one of this plugin's
/// buffers, or host memory wrapped without copying.
///
/// # Safety
/// `r` must come from the host following the ABI: `own` a live buffer context of this
/// plugin or null, `host_base` valid for `size` bytes (writable if `writable`) for as long
/// as the work using it runs (the call, the queued work until the next synchronize, or a
/// program until it is updated or freed).
unsafe fn resolve(r: &AbiBufferRef) -> Result<Arc<dyn Buffer>> {
    if !r.own.is_null() {
        // SAFETY: a context of one of this plugin's buffers, by the caller's promise.
        return Ok(unsafe { buffer::exported(r.own) }?.clone());
    }
    let Some(base) = NonNull::new(r.host_base) else {
        // SAFETY: the host passes valid strings.
        let name = unsafe { abi_string(r.name) };
        return Err(Error::IncompatibleBuffer {
            tensor: String::new(),
            buffer: name,
            backend: "this plugin (it can use its own buffers and host memory)".into(),
        });
    };
    // SAFETY: the caller promises `base` is valid for `bytes` bytes (and writes if `writable`)
    // for as long as the work using it runs.
    Ok(Arc::new(unsafe { HostBuffer::from_raw(base, r.bytes, r.writable, Box::new(())) }))
}
