//! The backend table: transfers, computes and events (programs are in `program.rs`).

use alloc::boxed::Box;
use alloc::format;
use alloc::string::String;

use tessera_core::registry::{extension, Extension};
use tessera_core::{Backend, Error, Event, Result, TensorData};

use super::{fallible, free_boxed, obj_mut, resolve, Exporter};
use crate::abi::*;
use crate::desc::{decode_graph, read_sized};
use crate::tables::{AbiBackend, AbiBackendFns, BackendExports};

/// A backend handed to the host (its context, freed by the host's `free`).
struct ExportedBackend {
    backend: Box<dyn Backend>,
}

/// The backend behind a context.
///
/// # Safety
/// `ctx` must be a live backend context this plugin handed out, used by one thread at a time.
pub(super) unsafe fn exported<'a>(ctx: Ctx) -> Result<&'a mut (dyn Backend + 'static)> {
    // SAFETY: forwarded from the caller.
    unsafe { obj_mut::<ExportedBackend>(ctx) }.map(|b| &mut *b.backend)
}

/// The memory behind a buffer reference, as tensor data at offset 0.
///
/// # Safety
/// `r` must be null or a valid reference following the ABI.
unsafe fn tensor_data(r: *const AbiBufferRef) -> Result<TensorData> {
    // SAFETY: forwarded from the caller.
    let r = unsafe { read_sized(r, "buffer") }?;
    // SAFETY: forwarded from the caller.
    Ok(TensorData { buffer: unsafe { resolve(&r) }?, offset: 0 })
}

/// Fails unless `first..last` is a range of a graph's `n` nodes.
pub(super) fn check_range(op: &'static str, first: usize, last: usize, n: usize) -> Result<()> {
    if first > last || last > n {
        return Err(Error::InvalidParam {
            op,
            message: format!("node range {first}..{last} is outside the {n} nodes given"),
        });
    }
    Ok(())
}

impl<E: Exporter> BackendExports<E> {
    const TABLE: &'static AbiBackendFns = &Self::table();

    /// Hands `backend` out; the host frees the handle exactly once.
    pub(super) fn handle(backend: Box<dyn Backend>) -> AbiBackend {
        AbiBackend { fns: Self::TABLE, ctx: Box::into_raw(Box::new(ExportedBackend { backend })).cast() }
    }

    pub(crate) unsafe extern "C" fn free(ctx: Ctx) {
        // SAFETY: `ctx` came from `Box::into_raw` in `handle`; the host frees each backend once.
        unsafe { free_boxed::<E, ExportedBackend>(ctx) }
    }

    pub(crate) unsafe extern "C" fn name(ctx: Ctx) -> AbiStr {
        // SAFETY: `ctx` is a live backend context; the name lives as long as the backend.
        E::catch(|| unsafe { exported(ctx) }.map_or(AbiStr::EMPTY, |b| AbiStr::new(b.name()))).unwrap_or(AbiStr::EMPTY)
    }

    pub(crate) unsafe extern "C" fn set_tensor_async(
        ctx: Ctx,
        dst: *const AbiBufferRef,
        offset: usize,
        src: *const u8,
        len: usize,
        err: *mut AbiError,
    ) -> i32 {
        fallible::<E>(err, "set_tensor_async", || {
            // SAFETY: the host passes a live backend context and a valid reference, and keeps
            // `src` valid for `len` bytes until the next synchronize.
            unsafe {
                let td = tensor_data(dst)?;
                if len > 0 && src.is_null() {
                    return Err(Error::InvalidParam { op: "SET_TENSOR", message: "null source".into() });
                }
                exported(ctx)?.set_tensor_async(&td, offset, src, len)
            }
        })
    }

    pub(crate) unsafe extern "C" fn get_tensor_async(
        ctx: Ctx,
        src: *const AbiBufferRef,
        offset: usize,
        dst: *mut u8,
        len: usize,
        err: *mut AbiError,
    ) -> i32 {
        fallible::<E>(err, "get_tensor_async", || {
            // SAFETY: the host passes a live backend context and a valid reference, and keeps
            // `dst` valid and untouched for `len` bytes until the next synchronize.
            unsafe {
                let td = tensor_data(src)?;
                if len > 0 && dst.is_null() {
                    return Err(Error::InvalidParam { op: "GET_TENSOR", message: "null destination".into() });
                }
                exported(ctx)?.get_tensor_async(&td, offset, dst, len)
            }
        })
    }

    pub(crate) unsafe extern "C" fn synchronize(ctx: Ctx, err: *mut AbiError) -> i32 {
        // SAFETY: `ctx` is a live backend context of this plugin.
        fallible::<E>(err, "synchronize", || unsafe { exported(ctx) }?.synchronize())
    }

    pub(crate) unsafe extern "C" fn compute(
        ctx: Ctx,
        graph: *const AbiGraph,
        first: usize,
        last: usize,
        err: *mut AbiError,
    ) -> i32 {
        fallible::<E>(err, "compute", || {
            // SAFETY: the host passes a valid graph whose buffer references follow the ABI.
            let g = unsafe { decode_graph(graph, Some(&mut |r: &AbiBufferRef| resolve(r))) }?;
            check_range("COMPUTE", first, last, g.nodes().len())?;
            // SAFETY: `ctx` is a live backend context of this plugin.
            unsafe { exported(ctx) }?.compute(&g, first..last)
        })
    }

    pub(crate) unsafe extern "C" fn record_event(ctx: Ctx, ev: Ctx, err: *mut AbiError) -> i32 {
        // SAFETY: `ctx` and `ev` are live backend and event contexts of this plugin.
        fallible::<E>(err, "record_event", || unsafe { exported(ctx)?.record_event(event(ev)?) })
    }

    pub(crate) unsafe extern "C" fn wait_event(ctx: Ctx, ev: Ctx, err: *mut AbiError) -> i32 {
        // SAFETY: `ctx` and `ev` are live backend and event contexts of this plugin.
        fallible::<E>(err, "wait_event", || unsafe { exported(ctx)?.wait_event(event(ev)?) })
    }

    pub(crate) unsafe extern "C" fn set_n_threads(ctx: Ctx, n: usize, err: *mut AbiError) -> i32 {
        fallible::<E>(err, "set_n_threads", || {
            let Some(Extension::SetThreads(f)) = E::reg().extension(extension::SET_THREADS) else {
                return Err(Error::Unsupported {
                    backend: E::reg().name().into(),
                    op: "SET_N_THREADS",
                    tensor: String::new(),
                });
            };
            // SAFETY: `ctx` is a live backend context of this plugin.
            f(unsafe { exported(ctx) }?, n)
        })
    }
}

/// # Safety
/// `ctx` must be a live event context this plugin handed out.
unsafe fn event<'a>(ctx: Ctx) -> Result<&'a dyn Event> {
    // SAFETY: forwarded from the caller.
    unsafe { super::event::exported(ctx) }
}
