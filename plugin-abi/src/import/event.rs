//! An event of a loaded plugin.

use alloc::sync::Arc;
use core::any::Any;
use core::mem::offset_of;
use core::time::Duration;

use tessera_core::{Event, Result};

use super::{free_handle, PluginShared};
use crate::abi::Ctx;
use crate::tables::{AbiEvent, AbiEventFns, EventFns};

/// An event of a loaded plugin.
pub struct PluginEvent {
    shared: Arc<PluginShared>,
    fns: EventFns,
    ctx: Ctx,
}

// SAFETY: event functions may be called from any thread (the ABI's contract).
unsafe impl Send for PluginEvent {}
// SAFETY: as above.
unsafe impl Sync for PluginEvent {}

impl PluginEvent {
    /// Wraps an event handle; on failure the handle is freed.
    ///
    /// # Safety
    /// `handle` must be an event handle the plugin of `shared` just returned.
    pub(super) unsafe fn wrap(shared: &Arc<PluginShared>, handle: AbiEvent) -> Result<PluginEvent> {
        // SAFETY: the plugin's event function table.
        let fns = match unsafe { EventFns::read(handle.fns) } {
            Ok(fns) => fns,
            Err(e) => {
                // SAFETY: the handle's own free function (if readable), exactly once.
                unsafe { free_handle(handle.fns, handle.ctx, offset_of!(AbiEventFns, free), |t| t.free) };
                return Err(e);
            }
        };
        shared.hold();
        Ok(PluginEvent { shared: shared.clone(), fns, ctx: handle.ctx })
    }

    /// Whether this is an event of the plugin of `shared`.
    pub(super) fn belongs_to(&self, shared: &Arc<PluginShared>) -> bool {
        Arc::ptr_eq(&self.shared, shared)
    }

    pub(super) fn ctx(&self) -> Ctx {
        self.ctx
    }
}

impl Drop for PluginEvent {
    fn drop(&mut self) {
        // SAFETY: the event's own free function and context, called exactly once.
        unsafe { self.shared.release(self.fns.free, self.ctx) };
    }
}

impl Event for PluginEvent {
    fn synchronize(&self) -> Result<()> {
        // SAFETY: a function of the event's table with its context.
        self.shared.call("event", |err| unsafe { (self.fns.synchronize)(self.ctx, err) })
    }
    fn elapsed_since(&self, start: &dyn Event) -> Result<Option<Duration>> {
        let Some(f) = self.fns.elapsed_since else { return Ok(None) };
        let Some(start) = start.as_any().downcast_ref::<PluginEvent>().filter(|s| s.belongs_to(&self.shared)) else {
            return Ok(None);
        };
        let mut ns = u64::MAX;
        // SAFETY: a function of the event's table with two live events of its plugin and a
        // writable output.
        self.shared.call("event", |err| unsafe { f(self.ctx, start.ctx, &mut ns, err) })?;
        Ok((ns != u64::MAX).then(|| Duration::from_nanos(ns)))
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}
