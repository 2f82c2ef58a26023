//! The buffer type table.

use alloc::string::String;

use tessera_core::{BufferType, Result};

use super::{fallible, obj, put, Exporter};
use crate::abi::{AbiError, AbiStr, AbiTensor, Ctx};
use crate::desc::{decode_lone_tensor, read_sized};
use crate::tables::{AbiBuffer, AbiBufferType, AbiBufferTypeFns, BufferExports, BufferTypeExports};

/// A buffer type of an exported device (its context; it lives as long as the plugin).
pub(super) struct ExportedBufferType {
    buffer_type: &'static dyn BufferType,
}

impl ExportedBufferType {
    pub(super) fn new(buffer_type: &'static dyn BufferType) -> ExportedBufferType {
        ExportedBufferType { buffer_type }
    }

    pub(super) fn handle<E: Exporter>(&self) -> AbiBufferType {
        AbiBufferType { fns: BufferTypeExports::<E>::TABLE, ctx: (self as *const ExportedBufferType).cast_mut().cast() }
    }
}

/// The buffer type behind a context.
///
/// # Safety
/// `ctx` must be a buffer type context this plugin handed out.
pub(super) unsafe fn exported(ctx: Ctx) -> Result<&'static dyn BufferType> {
    // SAFETY: forwarded from the caller; buffer type contexts live as long as the plugin.
    unsafe { obj::<ExportedBufferType>(ctx) }.map(|b| b.buffer_type)
}

impl<E: Exporter> BufferTypeExports<E> {
    const TABLE: &'static AbiBufferTypeFns = &Self::table();

    pub(crate) unsafe extern "C" fn name(ctx: Ctx) -> AbiStr {
        // SAFETY: `ctx` is a buffer type context of this plugin.
        E::catch(|| unsafe { exported(ctx) }.map_or(AbiStr::EMPTY, |b| AbiStr::new(b.name()))).unwrap_or(AbiStr::EMPTY)
    }

    pub(crate) unsafe extern "C" fn alignment(ctx: Ctx) -> usize {
        // SAFETY: as in `name`.
        E::catch(|| unsafe { exported(ctx) }.map_or(0, |b| b.alignment())).unwrap_or(0)
    }

    pub(crate) unsafe extern "C" fn max_size(ctx: Ctx) -> usize {
        // SAFETY: as in `name`.
        E::catch(|| unsafe { exported(ctx) }.map_or(0, |b| b.max_size())).unwrap_or(0)
    }

    pub(crate) unsafe extern "C" fn is_host(ctx: Ctx) -> bool {
        // SAFETY: as in `name`.
        E::catch(|| unsafe { exported(ctx) }.is_ok_and(|b| b.is_host())).unwrap_or(false)
    }

    pub(crate) unsafe extern "C" fn alloc_size(ctx: Ctx, tensor: *const AbiTensor) -> usize {
        E::catch(|| {
            // SAFETY: as in `name`.
            let Ok(b) = (unsafe { exported(ctx) }) else { return 0 };
            // SAFETY: the host passes a valid descriptor or null.
            let Ok(d) = (unsafe { read_sized(tensor, "tensor") }) else { return 0 };
            decode_lone_tensor(&d, String::new()).map_or(0, |t| b.alloc_size(&t))
        })
        .unwrap_or(0)
    }

    pub(crate) unsafe extern "C" fn alloc_buffer(
        ctx: Ctx,
        size: usize,
        out: *mut AbiBuffer,
        err: *mut AbiError,
    ) -> i32 {
        fallible::<E>(err, "alloc_buffer", || {
            // SAFETY: as in `name`.
            let buffer = unsafe { exported(ctx) }?.alloc_buffer(size)?;
            if out.is_null() {
                return Err(super::null_output());
            }
            // SAFETY: non-null (checked above) and writable (the host's promise).
            unsafe { put(out, BufferExports::<E>::handle(buffer)) }
        })
    }
}
