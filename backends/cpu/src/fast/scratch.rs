//! Work memory of the fast kernels: one 64-byte aligned allocation that grows to the largest
//! size a node asked for and is never shrunk, split into a region shared by the team and one
//! private region per thread. Once it is large enough, computing allocates nothing.

use alloc::vec::Vec;

use tessera_core::{Error, Result};

/// Cache-line alignment, so that packed panels start on a line and threads' private regions
/// never share one.
pub const ALIGN: usize = 64;

#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; ALIGN]);

/// Rounds `bytes` up to whole cache lines.
pub const fn round_up(bytes: usize) -> usize {
    bytes.div_ceil(ALIGN) * ALIGN
}

#[derive(Default)]
pub struct WorkMemory {
    lines: Vec<Line>,
}

/// Where the shared and per-thread regions of one node's work memory start.
#[derive(Clone, Copy)]
pub struct Regions {
    base: *mut u8,
    shared: usize,
    per_thread: usize,
}

// SAFETY: `Regions` is a set of addresses into a `WorkMemory` that the node's kernel borrows
// mutably for the whole run; threads write disjoint parts (their own private region, or the
// disjoint parts of the shared region the kernel gives them) and separate writes from reads
// with barriers.
unsafe impl Send for Regions {}
// SAFETY: as for `Send`.
unsafe impl Sync for Regions {}

impl Regions {
    /// The region shared by all threads.
    pub fn shared(&self) -> *mut u8 {
        self.base
    }

    /// The private region of thread `ith`.
    pub fn private(&self, ith: usize) -> *mut u8 {
        // SAFETY: `reserve` sized the allocation for `threads` private regions after the
        // shared one, and kernels ask only for `ith < threads`.
        unsafe { self.base.add(self.shared + ith * self.per_thread) }
    }
}

impl WorkMemory {
    /// Makes room for `shared` bytes plus `per_thread` bytes for each of `threads` threads,
    /// each region cache-line aligned. This is the only place the compute path allocates.
    pub fn reserve(&mut self, shared: usize, per_thread: usize, threads: usize) -> Result<Regions> {
        let (shared, per_thread) = (round_up(shared), round_up(per_thread));
        let total = per_thread
            .checked_mul(threads)
            .and_then(|p| p.checked_add(shared))
            .ok_or(Error::Overflow { what: "CPU kernel work memory" })?;
        let lines = total / ALIGN;
        if self.lines.len() < lines {
            self.lines
                .try_reserve_exact(lines - self.lines.len())
                .map_err(|_| Error::OutOfMemory { what: "CPU kernel work memory".into(), requested: total })?;
            self.lines.resize(lines, Line([0; ALIGN]));
        }
        Ok(Regions { base: self.lines.as_mut_ptr().cast(), shared, per_thread })
    }
}
