//! `TESSERA_SCHED_DEBUG`: how much a scheduler prints of its plans (the `no_std` core reads
//! no environment; programs take the level from here).

use tessera_core::{Backend, BufferType, Error, Result, Scheduler, SchedulerOptions};

/// `TESSERA_SCHED_DEBUG`: unset, empty or 0 prints nothing, 1 each plan as it is made, 2 also
/// every node's backend and the pass that chose it. Any other value is an error that says so,
/// rather than a setting silently ignored.
pub fn level() -> Result<u8> {
    parse_level(std::env::var("TESSERA_SCHED_DEBUG").ok().as_deref())
}

/// The level a value of `TESSERA_SCHED_DEBUG` asks for.
pub fn parse_level(value: Option<&str>) -> Result<u8> {
    match value.map(str::trim) {
        None | Some("") => Ok(0),
        Some(v) => match v.parse::<u8>() {
            Ok(level @ 0..=2) => Ok(level),
            _ => Err(Error::InvalidParam {
                op: "TESSERA_SCHED_DEBUG",
                message: format!("'{v}' is not a debug level; expected 0 (off), 1 (plans) or 2 (plans and every node)"),
            }),
        },
    }
}

/// A scheduler over `backends` (see [`Scheduler::with_buffer_types`]) that prints its plans
/// as `TESSERA_SCHED_DEBUG` asks.
pub fn scheduler(
    backends: Vec<Box<dyn Backend>>,
    buffer_types: &[Option<&'static dyn BufferType>],
    options: SchedulerOptions,
) -> Result<Scheduler> {
    let level = level()?;
    let mut sched = Scheduler::with_buffer_types(backends, buffer_types, options)?;
    sched.set_debug(level);
    Ok(sched)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_debug_level_that_is_not_0_1_or_2_is_an_error() {
        assert_eq!(parse_level(None), Ok(0));
        assert_eq!(parse_level(Some(" 2 ")), Ok(2));
        assert_eq!(parse_level(Some("")), Ok(0));
        for bad in ["garbage", "3", "-1", "1.0"] {
            let err = parse_level(Some(bad)).unwrap_err();
            assert!(err.to_string().contains(&format!("TESSERA_SCHED_DEBUG: '{bad}' is not a debug level")), "{err}");
        }
    }
}
