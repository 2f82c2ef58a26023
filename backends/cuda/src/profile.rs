//! Per-node GPU times (`TESSERA_CUDA_PROFILE=1`): every kernel node is bracketed by timing
//! events, splits run node by node instead of as CUDA graphs (so that each node is seen), and
//! when the backend is dropped it prints the time per op, types and result shape, largest
//! first. Timing every node costs launch overhead: the figures are for finding where the time
//! goes, not for end-to-end timing.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use cudarc::driver::{CudaContext, CudaStream};
use tessera_core::{Event, Op, Result};

use crate::driver;
use crate::event::CudaEvent;
use crate::kernels::Operand;

/// Whether `TESSERA_CUDA_PROFILE` asks for profiles (read once).
pub(crate) fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("TESSERA_CUDA_PROFILE").is_ok_and(|v| !matches!(v.trim(), "" | "0")))
}

/// The node times of one backend.
#[derive(Default)]
pub(crate) struct Profile {
    /// Nodes queued and not yet read: label, start, end.
    pending: Vec<(String, CudaEvent, CudaEvent)>,
    /// Per label: calls and total milliseconds.
    totals: HashMap<String, (u64, f64)>,
}

/// How a node is named in the profile: op, source and result types, result shape.
pub(crate) fn label(op: Op, dst: Operand, srcs: &[Option<Operand>]) -> String {
    let types: Vec<&str> = srcs.iter().flatten().map(|(_, t)| t.name()).collect();
    format!("{}({} -> {}) {:?}", op.name(), types.join(","), dst.1.name(), dst.0.ne)
}

impl Profile {
    /// Records the start of a node on `stream`.
    pub(crate) fn start(ctx: &Arc<CudaContext>, stream: &CudaStream) -> Result<CudaEvent> {
        let event = CudaEvent::new(ctx, true).map_err(|e| driver::error("CUDA", "creating a timing event", e))?;
        event.event.record(stream).map_err(|e| driver::error("CUDA", "recording a timing event", e))?;
        Ok(event)
    }

    /// Records the end of the node `label` started at `start`.
    pub(crate) fn end(
        &mut self,
        ctx: &Arc<CudaContext>,
        stream: &CudaStream,
        label: String,
        start: CudaEvent,
    ) -> Result<()> {
        let end = Self::start(ctx, stream)?;
        self.pending.push((label, start, end));
        Ok(())
    }

    /// Adds the times of every node queued so far (waits for them).
    pub(crate) fn collect(&mut self) -> Result<()> {
        for (label, start, end) in self.pending.drain(..) {
            let ms = end.elapsed_since(&start)?.map_or(0.0, |d| d.as_secs_f64() * 1e3);
            let entry = self.totals.entry(label).or_default();
            entry.0 += 1;
            entry.1 += ms;
        }
        Ok(())
    }

    /// The table printed when the backend goes: one line per label, largest total first.
    pub(crate) fn report(&self, device: &str) -> String {
        let total: f64 = self.totals.values().map(|(_, ms)| ms).sum();
        let mut rows: Vec<_> = self.totals.iter().collect();
        rows.sort_by(|a, b| b.1 .1.total_cmp(&a.1 .1));
        let mut out = format!("CUDA profile of {device}: {total:.3} ms in kernels\n");
        for (label, (calls, ms)) in rows {
            let share = if total > 0.0 { 100.0 * ms / total } else { 0.0 };
            let mean_us = ms * 1e3 / *calls as f64;
            out.push_str(&format!("  {ms:10.3} ms {share:5.1}% {calls:7} calls {mean_us:10.1} us  {label}\n"));
        }
        out
    }
}
