//! `TESSERA_SCHED_DEBUG`: how much a scheduler prints of its plans (the `no_std` core reads
//! no environment; programs take the level from here).

use tessera_core::{Backend, BufferType, Result, Scheduler, SchedulerOptions};

/// `TESSERA_SCHED_DEBUG`: 0 (default) prints nothing, 1 each plan as it is made, 2 also
/// every node's backend and the pass that chose it.
pub fn level() -> u8 {
    std::env::var("TESSERA_SCHED_DEBUG").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(0)
}

/// A scheduler over `backends` (see [`Scheduler::with_buffer_types`]) that prints its plans
/// as `TESSERA_SCHED_DEBUG` asks.
pub fn scheduler(
    backends: Vec<Box<dyn Backend>>,
    buffer_types: &[Option<&'static dyn BufferType>],
    options: SchedulerOptions,
) -> Result<Scheduler> {
    let mut sched = Scheduler::with_buffer_types(backends, buffer_types, options)?;
    sched.set_debug(level());
    Ok(sched)
}
