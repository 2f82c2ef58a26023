//! Events: a point in a stream that other streams or the host wait for.

use std::any::Any;
use std::sync::Arc;

use cudarc::driver::{CudaContext, DriverError};
use tessera_core::{Event, Result};

use crate::driver;

/// A CUDA event (timing disabled: it only orders work).
pub struct CudaEvent {
    pub(crate) event: cudarc::driver::CudaEvent,
}

impl CudaEvent {
    pub(crate) fn new(ctx: &Arc<CudaContext>) -> std::result::Result<CudaEvent, DriverError> {
        Ok(CudaEvent { event: ctx.new_event(None)? })
    }
}

impl Event for CudaEvent {
    fn synchronize(&self) -> Result<()> {
        self.event.synchronize().map_err(|e| driver::error("CUDA", "waiting for an event", e))
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}
