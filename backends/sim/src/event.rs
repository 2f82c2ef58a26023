//! Simulated events: a marker in a stream's queue, done once the queue has drained past it.

use alloc::sync::Arc;
use core::any::Any;
use core::sync::atomic::{AtomicU64, Ordering};

use tessera_core::{Error, Event, Result};

use crate::backend::Stream;

pub(crate) struct EventState {
    /// Times recorded, and times the recorded point was reached.
    pub recorded: AtomicU64,
    pub reached: AtomicU64,
    /// The stream it was last recorded on (drained to reach the point).
    pub stream: spin::Mutex<Option<Arc<spin::Mutex<Stream>>>>,
}

/// An event of a simulated device.
pub struct SimEvent {
    pub(crate) state: Arc<EventState>,
}

impl SimEvent {
    pub fn new() -> SimEvent {
        SimEvent {
            state: Arc::new(EventState {
                recorded: AtomicU64::new(0),
                reached: AtomicU64::new(0),
                stream: spin::Mutex::new(None),
            }),
        }
    }
}

impl Default for SimEvent {
    fn default() -> Self {
        SimEvent::new()
    }
}

impl EventState {
    /// Waits (by draining the recording stream) until recorded point `point` is reached.
    pub fn wait_for(&self, point: u64) -> Result<()> {
        if self.reached.load(Ordering::Acquire) >= point {
            return Ok(());
        }
        let stream = self.stream.lock().clone();
        let Some(stream) = stream else { return Ok(()) };
        // The stream being drained right now is the one waiting: the point lies later in its
        // own queue and can never be reached first.
        let Some(mut queue) = stream.try_lock() else {
            return Err(Error::Backend {
                backend: "SIM".into(),
                message: "a stream waits for an event recorded later on itself".into(),
            });
        };
        queue.drain()
    }
}

impl Event for SimEvent {
    fn synchronize(&self) -> Result<()> {
        self.state.wait_for(self.state.recorded.load(Ordering::Acquire))
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}
