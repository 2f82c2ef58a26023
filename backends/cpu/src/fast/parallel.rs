//! How a kernel sees the threads that run it: its index in the team, the team's size, a
//! barrier, and counters that hand out work items. Without `std` (or with one thread) the
//! team is the calling thread alone and the barrier does nothing.
//!
//! Kernels must compute every output value on exactly one thread with an order of operations
//! that does not depend on the team's size, so that results are bitwise identical for any
//! thread count: split work by rows or tiles, never inside a reduction.

use core::sync::atomic::{AtomicUsize, Ordering};

use tessera_core::Result;

/// One thread of a team running a kernel.
pub struct Worker<'a> {
    /// This thread's index, `0..nth`; the calling thread is 0.
    pub ith: usize,
    /// Threads in the team.
    pub nth: usize,
    #[cfg(feature = "std")]
    sync: Option<&'a super::pool::TeamSync>,
    #[cfg(not(feature = "std"))]
    _team: core::marker::PhantomData<&'a ()>,
}

impl<'a> Worker<'a> {
    /// The only thread of a one-thread team.
    pub fn alone() -> Worker<'static> {
        Worker {
            ith: 0,
            nth: 1,
            #[cfg(feature = "std")]
            sync: None,
            #[cfg(not(feature = "std"))]
            _team: core::marker::PhantomData,
        }
    }

    #[cfg(feature = "std")]
    pub(super) fn in_team(ith: usize, nth: usize, sync: &'a super::pool::TeamSync) -> Worker<'a> {
        Worker { ith, nth, sync: Some(sync) }
    }

    /// This thread's share of `n` items when they are split evenly and statically: a
    /// contiguous range, the first `n % nth` threads taking one item more.
    pub fn share(&self, n: usize) -> core::ops::Range<usize> {
        let (base, extra) = (n / self.nth, n % self.nth);
        let start = self.ith * base + self.ith.min(extra);
        start..start + base + usize::from(self.ith < extra)
    }

    /// Waits until every thread of the team has called `barrier` as often as this one.
    pub fn barrier(&self) {
        #[cfg(feature = "std")]
        if let Some(sync) = self.sync {
            sync.barrier(self.nth);
        }
    }
}

/// Hands out the indices `0..n` of work items, each to exactly one thread, in increasing
/// order (dynamic scheduling: fast threads take more items).
pub struct WorkCounter(AtomicUsize);

impl WorkCounter {
    pub const fn new() -> WorkCounter {
        WorkCounter(AtomicUsize::new(0))
    }

    /// The next unclaimed item below `n`, if any.
    pub fn next(&self, n: usize) -> Option<usize> {
        let i = self.0.fetch_add(1, Ordering::Relaxed);
        (i < n).then_some(i)
    }
}

impl Default for WorkCounter {
    fn default() -> WorkCounter {
        WorkCounter::new()
    }
}

/// A kernel body, run once on every thread of a team.
pub type Job<'a> = dyn Fn(&Worker<'_>) + Sync + 'a;

/// The threads a backend computes with: the caller plus, under `std`, pool workers that are
/// started on first use and kept until the thread count changes or the backend is dropped.
pub struct Team {
    threads: usize,
    #[cfg(feature = "std")]
    pool: Option<super::pool::Pool>,
}

impl Team {
    /// A team of `threads` threads (at least 1; always 1 without `std`).
    pub fn new(threads: usize) -> Team {
        Team {
            threads: if cfg!(feature = "std") { threads.max(1) } else { 1 },
            #[cfg(feature = "std")]
            pool: None,
        }
    }

    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Changes the team's size; the workers of the old size are stopped (joined) now and
    /// the new ones started on the next parallel run.
    #[cfg(feature = "std")]
    pub fn set_threads(&mut self, threads: usize) {
        let threads = threads.max(1);
        if threads != self.threads {
            self.pool = None;
            self.threads = threads;
        }
    }

    /// Runs `job` on `min(wanted, threads)` threads (at least one) and returns when all of
    /// them have finished. A panic on a worker thread comes back as an error.
    pub fn run(&mut self, wanted: usize, job: &Job<'_>) -> Result<()> {
        let nth = wanted.clamp(1, self.threads);
        if nth == 1 {
            job(&Worker::alone());
            return Ok(());
        }
        #[cfg(feature = "std")]
        {
            let pool = match &mut self.pool {
                Some(pool) => pool,
                None => self.pool.insert(super::pool::Pool::spawn(self.threads)?),
            };
            pool.run(nth, job)
        }
        #[cfg(not(feature = "std"))]
        {
            // Without std a team has one thread, handled above.
            job(&Worker::alone());
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_shares_cover_every_item_once() {
        for nth in 1..6 {
            for n in 0..20 {
                let mut next = 0;
                for ith in 0..nth {
                    let w = Worker { ith, nth, ..Worker::alone() };
                    let r = w.share(n);
                    assert_eq!(r.start, next);
                    assert!(r.len() == n / nth || r.len() == n / nth + 1);
                    next = r.end;
                }
                assert_eq!(next, n);
            }
        }
    }
}
