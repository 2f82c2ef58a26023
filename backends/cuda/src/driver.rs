//! Finding the driver and the GPUs, without panicking where there is none.

use std::sync::Arc;

use cudarc::driver::{sys, CudaContext, DriverError};
use tessera_core::Error;

/// The GPUs the driver lists, each with its primary context; empty, with the reason, when
/// the driver library is absent or reports no device.
pub fn contexts() -> (Vec<Arc<CudaContext>>, Option<String>) {
    // SAFETY: only probes whether the driver library can be opened; it loads nothing else.
    if !unsafe { sys::is_culib_present() } {
        return (Vec::new(), Some("no CUDA driver library (libcuda) found".into()));
    }
    let count = match CudaContext::device_count() {
        Ok(n) => usize::try_from(n).unwrap_or(0),
        Err(e) => return (Vec::new(), Some(format!("the CUDA driver did not initialise: {}", describe(e)))),
    };
    let mut contexts = Vec::new();
    let mut failures = Vec::new();
    for ordinal in 0..count {
        match CudaContext::new(ordinal) {
            Ok(ctx) => contexts.push(ctx),
            Err(e) => failures.push(format!("GPU {ordinal}: {}", describe(e))),
        }
    }
    let why = match (contexts.is_empty(), failures.is_empty()) {
        (true, true) => Some("the CUDA driver lists no GPU".into()),
        (_, false) => Some(failures.join("; ")),
        (false, true) => None,
    };
    (contexts, why)
}

/// A driver error as text: its name and description.
pub fn describe(e: DriverError) -> String {
    let name = e.error_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let text = e.error_string().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    format!("{name} ({text})")
}

/// A driver error as a backend error of `device`.
pub fn error(device: &str, what: &str, e: DriverError) -> Error {
    Error::Backend { backend: device.into(), message: format!("{what}: {}", describe(e)) }
}
