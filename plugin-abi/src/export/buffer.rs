//! The buffer table.

use alloc::boxed::Box;
use alloc::string::String;
use alloc::sync::Arc;

use tessera_core::{Buffer, BufferBase, BufferUsage, Error, Result};

use super::{fallible, free_boxed, obj, put, resolve, Exporter};
use crate::abi::*;
use crate::desc::{abi_slice, decode_lone_tensor, read_sized};
use crate::tables::{AbiBuffer, AbiBufferFns, BufferExports};

/// A buffer handed to the host (its context, freed by the host's `free`).
struct ExportedBuffer {
    buffer: Arc<dyn Buffer>,
}

/// The buffer behind a context.
///
/// # Safety
/// `ctx` must be a live buffer context this plugin handed out.
pub(super) unsafe fn exported<'a>(ctx: Ctx) -> Result<&'a Arc<dyn Buffer>> {
    // SAFETY: forwarded from the caller.
    unsafe { obj::<ExportedBuffer>(ctx) }.map(|b| &b.buffer)
}

/// How a buffer's base crosses the boundary.
fn abi_base(base: BufferBase) -> AbiBufferBase {
    let (kind, address) = match base {
        BufferBase::Host(p) => (BASE_HOST, p.expose_provenance() as u64),
        BufferBase::HostReadOnly(p) => (BASE_HOST_READ_ONLY, p.expose_provenance() as u64),
        BufferBase::Device(address) => (BASE_DEVICE, address),
        BufferBase::Opaque(handle) => (BASE_OPAQUE, handle),
    };
    AbiBufferBase { kind, address }
}

impl<E: Exporter> BufferExports<E> {
    const TABLE: &'static AbiBufferFns = &Self::table();

    /// Hands `buffer` out; the host frees the handle exactly once.
    pub(super) fn handle(buffer: Arc<dyn Buffer>) -> AbiBuffer {
        AbiBuffer { fns: Self::TABLE, ctx: Box::into_raw(Box::new(ExportedBuffer { buffer })).cast() }
    }

    pub(crate) unsafe extern "C" fn free(ctx: Ctx) {
        // SAFETY: `ctx` came from `Box::into_raw` in `handle`; the host frees each buffer once.
        unsafe { free_boxed::<E, ExportedBuffer>(ctx) }
    }

    pub(crate) unsafe extern "C" fn buffer_size(ctx: Ctx) -> usize {
        // SAFETY: `ctx` is a live buffer context of this plugin.
        E::catch(|| unsafe { exported(ctx) }.map_or(0, |b| b.size())).unwrap_or(0)
    }

    pub(crate) unsafe extern "C" fn base(ctx: Ctx) -> AbiBufferBase {
        let unknown = AbiBufferBase { kind: BASE_OPAQUE, address: 0 };
        // SAFETY: as in `buffer_size`.
        E::catch(|| unsafe { exported(ctx) }.map_or(unknown, |b| abi_base(b.base()))).unwrap_or(unknown)
    }

    pub(crate) unsafe extern "C" fn usage(ctx: Ctx) -> u8 {
        // SAFETY: as in `buffer_size`.
        E::catch(|| unsafe { exported(ctx) }.map_or(0, |b| b.usage() as u8)).unwrap_or(0)
    }

    pub(crate) unsafe extern "C" fn set_usage(ctx: Ctx, usage: u8) {
        // SAFETY: as in `buffer_size`.
        let _ = E::catch(|| unsafe { exported(ctx) }.map(|b| b.set_usage(BufferUsage::from_u8(usage))));
    }

    pub(crate) unsafe extern "C" fn set_bytes(
        ctx: Ctx,
        offset: usize,
        src: *const u8,
        len: usize,
        err: *mut AbiError,
    ) -> i32 {
        fallible::<E>(err, "set_bytes", || {
            // SAFETY: `ctx` is a live buffer context; the host promises `src` holds `len` bytes.
            unsafe { exported(ctx)?.set_bytes(offset, abi_slice(src, len, "source bytes")?) }
        })
    }

    pub(crate) unsafe extern "C" fn get_bytes(
        ctx: Ctx,
        offset: usize,
        dst: *mut u8,
        len: usize,
        err: *mut AbiError,
    ) -> i32 {
        fallible::<E>(err, "get_bytes", || {
            // SAFETY: `ctx` is a live buffer context of this plugin.
            let b = unsafe { exported(ctx) }?;
            if len == 0 {
                return Ok(());
            }
            if dst.is_null() {
                return Err(Error::InvalidParam { op: "GET_BYTES", message: "null destination".into() });
            }
            // SAFETY: non-null; the host promises `dst` is writable for `len` bytes and not
            // otherwise accessed during the call.
            b.get_bytes(offset, unsafe { core::slice::from_raw_parts_mut(dst, len) })
        })
    }

    pub(crate) unsafe extern "C" fn fill(ctx: Ctx, offset: usize, len: usize, value: u8, err: *mut AbiError) -> i32 {
        // SAFETY: `ctx` is a live buffer context of this plugin.
        fallible::<E>(err, "fill", || unsafe { exported(ctx) }?.fill(offset, len, value))
    }

    pub(crate) unsafe extern "C" fn copy_from(
        ctx: Ctx,
        dst_offset: usize,
        src: *const AbiBufferRef,
        src_offset: usize,
        len: usize,
        copied: *mut bool,
        err: *mut AbiError,
    ) -> i32 {
        fallible::<E>(err, "copy_from", || {
            // SAFETY: `ctx` is a live buffer context of this plugin.
            let b = unsafe { exported(ctx) }?;
            // SAFETY: the host passes a valid reference or null.
            let r = unsafe { read_sized(src, "source buffer") }?;
            // SAFETY: the reference follows the ABI (the host's side of the contract).
            let source = unsafe { resolve(&r) }?;
            let done = b.copy_from(dst_offset, &*source, src_offset, len)?;
            // SAFETY: `copied` is writable or null (refused by `put`).
            unsafe { put(copied, done) }
        })
    }

    pub(crate) unsafe extern "C" fn reset(ctx: Ctx) {
        // SAFETY: `ctx` is a live buffer context of this plugin.
        let _ = E::catch(|| unsafe { exported(ctx) }.map(|b| b.reset()));
    }

    pub(crate) unsafe extern "C" fn init_tensor(
        ctx: Ctx,
        tensor: *const AbiTensor,
        offset: usize,
        err: *mut AbiError,
    ) -> i32 {
        fallible::<E>(err, "init_tensor", || {
            // SAFETY: `ctx` is a live buffer context of this plugin.
            let b = unsafe { exported(ctx) }?;
            // SAFETY: the host passes a valid descriptor or null.
            let d = unsafe { read_sized(tensor, "tensor") }?;
            b.init_tensor(&decode_lone_tensor(&d, String::new())?, offset)
        })
    }
}
