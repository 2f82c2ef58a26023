//! The event table.

use alloc::boxed::Box;

use tessera_core::{Event, Result};

use super::{fallible, free_boxed, obj, put, Exporter};
use crate::abi::{AbiError, Ctx};
use crate::tables::{AbiEvent, AbiEventFns, EventExports};

/// An event handed to the host (its context, freed by the host's `free`).
struct ExportedEvent {
    event: Box<dyn Event>,
}

/// The event behind a context.
///
/// # Safety
/// `ctx` must be a live event context this plugin handed out.
pub(super) unsafe fn exported<'a>(ctx: Ctx) -> Result<&'a dyn Event> {
    // SAFETY: forwarded from the caller.
    unsafe { obj::<ExportedEvent>(ctx) }.map(|e| &*e.event)
}

impl<E: Exporter> EventExports<E> {
    const TABLE: &'static AbiEventFns = &Self::table();

    /// Hands `event` out; the host frees the handle exactly once.
    pub(super) fn handle(event: Box<dyn Event>) -> AbiEvent {
        AbiEvent { fns: Self::TABLE, ctx: Box::into_raw(Box::new(ExportedEvent { event })).cast() }
    }

    pub(crate) unsafe extern "C" fn free(ctx: Ctx) {
        // SAFETY: `ctx` came from `Box::into_raw` in `handle`; the host frees each event once.
        unsafe { free_boxed::<E, ExportedEvent>(ctx) }
    }

    pub(crate) unsafe extern "C" fn synchronize(ctx: Ctx, err: *mut AbiError) -> i32 {
        // SAFETY: `ctx` is a live event context of this plugin.
        fallible::<E>(err, "event_synchronize", || unsafe { exported(ctx) }?.synchronize())
    }

    pub(crate) unsafe extern "C" fn elapsed_since(ctx: Ctx, start: Ctx, out_ns: *mut u64, err: *mut AbiError) -> i32 {
        fallible::<E>(err, "event_elapsed_since", || {
            // SAFETY: `ctx` and `start` are live event contexts of this plugin.
            let (end, start) = unsafe { (exported(ctx)?, exported(start)?) };
            let ns = match end.elapsed_since(start)? {
                Some(d) => u64::try_from(d.as_nanos()).unwrap_or(u64::MAX - 1),
                None => u64::MAX,
            };
            // SAFETY: the host's promise that `out_ns` is writable (null is refused).
            unsafe { put(out_ns, ns) }
        })
    }
}
