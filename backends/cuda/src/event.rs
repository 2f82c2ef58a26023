//! Events: a point in a stream that other streams or the host wait for.

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaContext, DriverError};
use tessera_core::{Event, Result};

use crate::driver;

/// A CUDA event. Plain events only order work (timing disabled, the cheaper kind); timing
/// events also measure the device time between two of them.
pub struct CudaEvent {
    pub(crate) event: cudarc::driver::CudaEvent,
    timing: bool,
}

impl CudaEvent {
    pub(crate) fn new(ctx: &Arc<CudaContext>, timing: bool) -> std::result::Result<CudaEvent, DriverError> {
        let flags = if timing { CUevent_flags::CU_EVENT_DEFAULT } else { CUevent_flags::CU_EVENT_DISABLE_TIMING };
        Ok(CudaEvent { event: ctx.new_event(Some(flags))?, timing })
    }
}

impl Event for CudaEvent {
    fn synchronize(&self) -> Result<()> {
        self.event.synchronize().map_err(|e| driver::error("CUDA", "waiting for an event", e))
    }
    fn elapsed_since(&self, start: &dyn Event) -> Result<Option<Duration>> {
        let Some(start) = start.as_any().downcast_ref::<CudaEvent>() else { return Ok(None) };
        if !(self.timing && start.timing) {
            return Ok(None);
        }
        let ms = start.event.elapsed_ms(&self.event).map_err(|e| driver::error("CUDA", "timing between events", e))?;
        Ok(Some(Duration::from_secs_f64(f64::from(ms.max(0.0)) / 1e3)))
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}
