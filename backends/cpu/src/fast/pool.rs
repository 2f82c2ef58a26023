//! The thread pool (`std` only): a fixed set of workers that run one job at a time together
//! with the calling thread, and a cheap barrier.
//!
//! Waiting spins first (a job usually follows the previous one within microseconds, and a
//! barrier is usually reached by all threads at about the same time), then yields the
//! processor; idle workers finally sleep on a condition variable so that an idle backend
//! costs nothing.

extern crate std;

use alloc::format;
use alloc::vec::Vec;
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tessera_core::{Error, Result};

use super::parallel::{Job, Worker};

/// How long a waiting thread spins before it yields the processor.
const SPIN: Duration = Duration::from_micros(50);
/// How long an idle worker keeps checking for a new job before it sleeps.
const IDLE: Duration = Duration::from_micros(500);

/// Spins, then yields, until `ready()` or `give_up()`.
fn wait_until(ready: impl Fn() -> bool, give_up: impl Fn() -> bool) {
    let start = Instant::now();
    let mut spins = 0u32;
    while !ready() {
        if give_up() {
            return;
        }
        spins = spins.wrapping_add(1);
        // Reading the clock costs more than a spin: look at it every 64 spins only.
        if spins.is_multiple_of(64) && start.elapsed() > SPIN {
            std::thread::yield_now();
        } else {
            core::hint::spin_loop();
        }
    }
}

/// What the threads of a running job share: the barrier, and whether a thread panicked.
pub struct TeamSync {
    arrived: AtomicUsize,
    generation: AtomicUsize,
    poisoned: AtomicBool,
}

impl TeamSync {
    /// A sense-reversing barrier: the last of `nth` arrivals resets the count and opens the
    /// next generation. A panicked team opens every barrier so that no thread waits forever.
    pub fn barrier(&self, nth: usize) {
        let generation = self.generation.load(Ordering::Acquire);
        if self.arrived.fetch_add(1, Ordering::AcqRel) + 1 == nth {
            self.arrived.store(0, Ordering::Relaxed);
            self.generation.store(generation.wrapping_add(1), Ordering::Release);
        } else {
            wait_until(
                || self.generation.load(Ordering::Acquire) != generation,
                || self.poisoned.load(Ordering::Relaxed),
            );
        }
    }
}

struct Shared {
    /// The job of the current epoch; written by the caller only while no worker runs one.
    job: UnsafeCell<Option<*const Job<'static>>>,
    /// Threads taking part in the current job (the caller and workers `1..job_threads`).
    job_threads: AtomicUsize,
    /// Bumped once per job (and once to stop).
    epoch: AtomicUsize,
    /// Workers that finished the current epoch.
    done: AtomicUsize,
    stop: AtomicBool,
    sleepers: AtomicUsize,
    lock: Mutex<()>,
    wake: Condvar,
    sync: TeamSync,
}

// SAFETY: `job` is written by the calling thread only before it bumps `epoch` (release) and
// after every worker has reported `done` (acquire) for that epoch; workers read it only after
// seeing the new epoch (acquire) and before reporting done. So no read races a write. The job
// itself is `Sync`, so sharing `&Job` among the threads is sound. Everything else is atomics
// or std synchronisation.
unsafe impl Sync for Shared {}
// SAFETY: see `Sync`; the raw pointer is only dereferenced under that protocol.
unsafe impl Send for Shared {}

/// `size - 1` worker threads; the thread that calls `run` is the team's thread 0.
pub struct Pool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
}

impl Pool {
    /// Starts `size - 1` workers.
    pub fn spawn(size: usize) -> Result<Pool> {
        let shared = Arc::new(Shared {
            job: UnsafeCell::new(None),
            job_threads: AtomicUsize::new(0),
            epoch: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            sleepers: AtomicUsize::new(0),
            lock: Mutex::new(()),
            wake: Condvar::new(),
            sync: TeamSync {
                arrived: AtomicUsize::new(0),
                generation: AtomicUsize::new(0),
                poisoned: AtomicBool::new(false),
            },
        });
        let mut pool = Pool { shared, workers: Vec::new() };
        for ith in 1..size.max(1) {
            let shared = pool.shared.clone();
            let handle = std::thread::Builder::new()
                .name(format!("tessera-cpu-{ith}"))
                .spawn(move || worker_loop(&shared, ith))
                .map_err(|e| Error::Backend {
                    backend: "CPU".into(),
                    message: format!("could not start worker thread {ith} of {size}: {e}"),
                })?;
            // On an error above, dropping `pool` stops the workers started so far.
            pool.workers.push(handle);
        }
        Ok(pool)
    }

    /// Runs `job` on `nth` threads (this one and workers `1..nth`); returns once all of them
    /// have finished it.
    pub fn run(&mut self, nth: usize, job: &Job<'_>) -> Result<()> {
        let s = &*self.shared;
        let nth = nth.clamp(1, self.workers.len() + 1);
        // SAFETY: only the lifetime is erased. The pointer is cleared below, and this function
        // returns only after every worker has reported that it is done with this epoch, so no
        // worker uses the job after the borrow it came from ends.
        let erased: *const Job<'static> = unsafe { core::mem::transmute::<*const Job<'_>, _>(job) };
        // SAFETY: no worker reads `job` now: all reported done for the previous epoch (or
        // none ran yet), and the new epoch is published only below.
        unsafe { *s.job.get() = Some(erased) };
        s.job_threads.store(nth, Ordering::Relaxed);
        s.epoch.fetch_add(1, Ordering::SeqCst);
        if s.sleepers.load(Ordering::SeqCst) > 0 {
            let _guard = s.lock.lock().unwrap_or_else(|p| p.into_inner());
            s.wake.notify_all();
        }

        let own = catch_unwind(AssertUnwindSafe(|| job(&Worker::in_team(0, nth, &s.sync))));
        if own.is_err() {
            s.sync.poisoned.store(true, Ordering::Relaxed);
        }
        let workers = self.workers.len();
        wait_until(|| s.done.load(Ordering::Acquire) == workers, || false);
        s.done.store(0, Ordering::Relaxed);
        // SAFETY: every worker reported done for this epoch (acquire above): none reads `job`.
        unsafe { *s.job.get() = None };

        if s.sync.poisoned.swap(false, Ordering::Relaxed) {
            s.sync.arrived.store(0, Ordering::Relaxed);
            return Err(Error::Backend {
                backend: "CPU".into(),
                message: "a kernel panicked on one of the CPU threads; its results are invalid".into(),
            });
        }
        Ok(())
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let s = &*self.shared;
        s.stop.store(true, Ordering::SeqCst);
        s.epoch.fetch_add(1, Ordering::SeqCst);
        {
            let _guard = s.lock.lock().unwrap_or_else(|p| p.into_inner());
            s.wake.notify_all();
        }
        for handle in self.workers.drain(..) {
            // A worker catches the panics of jobs, so joining cannot fail in practice; there
            // is nothing useful to do if it did.
            let _ = handle.join();
        }
    }
}

fn worker_loop(s: &Shared, ith: usize) {
    let mut seen = 0usize;
    loop {
        seen = next_epoch(s, seen);
        if s.stop.load(Ordering::Acquire) {
            return;
        }
        let nth = s.job_threads.load(Ordering::Relaxed);
        if ith < nth {
            // SAFETY: the caller wrote `job` before publishing this epoch (we saw it with
            // acquire) and does not touch it again until we report done below.
            let job = unsafe { *s.job.get() };
            if let Some(job) = job {
                // SAFETY: the caller keeps the job alive until every worker reported done.
                let job = unsafe { &*job };
                if catch_unwind(AssertUnwindSafe(|| job(&Worker::in_team(ith, nth, &s.sync)))).is_err() {
                    s.sync.poisoned.store(true, Ordering::Relaxed);
                }
            }
        }
        s.done.fetch_add(1, Ordering::AcqRel);
    }
}

/// Waits for an epoch other than `seen`: spinning, then yielding, then asleep.
fn next_epoch(s: &Shared, seen: usize) -> usize {
    let start = Instant::now();
    let mut spins = 0u32;
    loop {
        let epoch = s.epoch.load(Ordering::Acquire);
        if epoch != seen {
            return epoch;
        }
        spins = spins.wrapping_add(1);
        if !spins.is_multiple_of(64) {
            core::hint::spin_loop();
            continue;
        }
        let idle = start.elapsed();
        if idle < SPIN {
            core::hint::spin_loop();
        } else if idle < IDLE {
            std::thread::yield_now();
        } else {
            let mut guard = s.lock.lock().unwrap_or_else(|p| p.into_inner());
            // Announce the sleep before the last look at the epoch: `run` bumps the epoch
            // before it looks at `sleepers` (both sequentially consistent), so either it sees
            // us and notifies under the lock, or we see its epoch here.
            s.sleepers.fetch_add(1, Ordering::SeqCst);
            while s.epoch.load(Ordering::SeqCst) == seen {
                guard = s.wake.wait(guard).unwrap_or_else(|p| p.into_inner());
            }
            s.sleepers.fetch_sub(1, Ordering::SeqCst);
            return s.epoch.load(Ordering::Acquire);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fast::parallel::WorkCounter;
    use core::sync::atomic::AtomicU64;

    #[test]
    fn every_item_runs_once_and_barriers_order_phases() {
        let mut pool = Pool::spawn(3).unwrap();
        for round in 0..200u64 {
            let items = WorkCounter::new();
            let phase1 = AtomicU64::new(0);
            let seen_after_barrier = AtomicU64::new(u64::MAX);
            pool.run(3, &|w| {
                while let Some(i) = items.next(100) {
                    phase1.fetch_add(i as u64 + round, Ordering::Relaxed);
                }
                w.barrier();
                seen_after_barrier.fetch_min(phase1.load(Ordering::Relaxed), Ordering::Relaxed);
            })
            .unwrap();
            let want = (0..100).sum::<u64>() + 100 * round;
            assert_eq!(phase1.load(Ordering::Relaxed), want);
            assert_eq!(seen_after_barrier.load(Ordering::Relaxed), want);
        }
    }

    #[test]
    fn a_panicking_job_is_an_error_and_the_pool_survives() {
        let mut pool = Pool::spawn(2).unwrap();
        let r = pool.run(2, &|w| {
            if w.ith == 1 {
                panic!("deliberate");
            }
            w.barrier();
        });
        assert!(matches!(r, Err(Error::Backend { .. })));
        let count = AtomicUsize::new(0);
        pool.run(2, &|w| {
            w.barrier();
            count.fetch_add(1, Ordering::Relaxed);
        })
        .unwrap();
        assert_eq!(count.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn sleeping_workers_wake_up() {
        let mut pool = Pool::spawn(2).unwrap();
        let count = AtomicUsize::new(0);
        for _ in 0..3 {
            std::thread::sleep(IDLE * 4);
            pool.run(2, &|_| {
                count.fetch_add(1, Ordering::Relaxed);
            })
            .unwrap();
        }
        assert_eq!(count.load(Ordering::Relaxed), 6);
    }
}
