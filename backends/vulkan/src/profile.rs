//! `TESSERA_VULKAN_PROFILE=1`: the device time of every dispatch, from timestamps written
//! around it in the recorded command buffer, summed per shader and shape and printed when
//! the backend goes. Barriers stay as they are, so the times add up to the split's.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use ash::vk;
use tessera_core::DType;

use crate::args::{dtype_code, Args};
use crate::context::Context;
use crate::ops::Dispatch;

/// Whether the environment asks for a profile.
pub(crate) fn enabled() -> bool {
    std::env::var("TESSERA_VULKAN_PROFILE").is_ok_and(|v| v.trim() == "1")
}

/// Device time per label: (dispatches, nanoseconds).
#[derive(Default)]
pub(crate) struct Profile {
    times: BTreeMap<String, (u64, f64)>,
}

pub(crate) type Shared = Arc<Mutex<Profile>>;

/// "MulMatCoopmatF16 f16 x f32 -> [4096, 4096, 1, 1]": what a dispatch computes.
pub(crate) fn label(d: &Dispatch) -> String {
    let name =
        |code: u32| DType::ALL.iter().find(|&&t| dtype_code(t) == code).map_or("?".to_string(), |t| t.to_string());
    let Args { dst, src, .. } = d.args;
    let srcs: Vec<String> = src.iter().filter(|s| s.data != 0).map(|s| name(s.dtype)).collect();
    format!("{:?} {} -> {} {:?}", d.shader, srcs.join(" x "), name(dst.dtype), dst.ne)
}

/// The timestamps of one recorded split: two per dispatch.
pub(crate) struct Stamps {
    pub queries: vk::QueryPool,
    labels: Vec<String>,
    profile: Shared,
    period: f64,
}

impl Stamps {
    pub(crate) fn new(ctx: &Context, labels: Vec<String>, profile: &Shared) -> Option<Stamps> {
        let period = f64::from(ctx.physical.timestamp_period?);
        let count = u32::try_from(labels.len() * 2).ok()?;
        let info = vk::QueryPoolCreateInfo::default().query_type(vk::QueryType::TIMESTAMP).query_count(count.max(2));
        // SAFETY: a valid create info for this device.
        let queries = unsafe { ctx.device.create_query_pool(&info, None) }.ok()?;
        Some(Stamps { queries, labels, profile: profile.clone(), period })
    }

    /// Adds the times of the finished submission to the profile.
    pub(crate) fn collect(&self, ctx: &Context) {
        let mut ticks = vec![0u64; self.labels.len() * 2];
        // SAFETY: every query was written by the finished submission (callers wait for it).
        let read =
            unsafe { ctx.device.get_query_pool_results(self.queries, 0, &mut ticks, vk::QueryResultFlags::TYPE_64) };
        if read.is_err() {
            return;
        }
        let mut profile = self.profile.lock().unwrap_or_else(|p| p.into_inner());
        for (label, pair) in self.labels.iter().zip(ticks.chunks_exact(2)) {
            let e = profile.times.entry(label.clone()).or_default();
            e.0 += 1;
            e.1 += pair[1].saturating_sub(pair[0]) as f64 * self.period;
        }
    }

    /// # Safety
    /// The query pool must not be in use.
    pub(crate) unsafe fn destroy(&self, ctx: &Context) {
        // SAFETY: the caller promises the pool is unused.
        unsafe { ctx.device.destroy_query_pool(self.queries, None) };
    }
}

impl Profile {
    /// The report: time per label, most first, with the share of the total.
    pub(crate) fn report(&self, device: &str) -> String {
        let total: f64 = self.times.values().map(|(_, ns)| ns).sum();
        let mut rows: Vec<(&String, &(u64, f64))> = self.times.iter().collect();
        rows.sort_by(|a, b| b.1 .1.total_cmp(&a.1 .1));
        let mut out = format!("{device} profile: {:.3} ms of dispatches\n", total / 1e6);
        for (label, (n, ns)) in rows {
            let share = if total > 0.0 { 100.0 * ns / total } else { 0.0 };
            out += &format!("  {:>10.3} ms {share:5.1}% {n:>7}x  {label}\n", ns / 1e6);
        }
        out
    }
}
