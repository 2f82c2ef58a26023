//! Heap budgets: with tessera-alloc as the global allocator, a classifier given too little heap
//! fails with `tessera_core::Error::OutOfMemory` (not an abort), and one given its measured
//! peak works.
//!
//! Every budget from 0 bytes to the peak is tried:
//! - budgets too small to load the model (parse, graph, plan, compute buffer) run in this
//!   process: each must fail with `OutOfMemory`;
//! - budgets that load the model but run out during its first compute run each in a child
//!   process (this program again), so that an abort there (an infallible allocation on the
//!   compute path) is seen and fails the test instead of ending it.
//!
//! This is a plain program (`harness = false`): the test harness's threads would allocate
//! from the same heap and blur the measurement.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use edge_digits::{Classifier, Error, TestSet, MODEL_F32, MODEL_Q8_0, TEST_SET};
use tessera_alloc::{BoundedHeap, Region};

static REGION: Region<{ 512 * 1024 }> = Region::new();
#[global_allocator]
static HEAP: BoundedHeap = BoundedHeap::new(&REGION);

/// Set in a child process: `MODEL:BUDGET:RESERVE`, one attempt to run.
const CHILD_ENV: &str = "EDGE_DIGITS_BUDGET_CHILD";

/// How an attempt ended.
#[derive(Debug, PartialEq)]
enum Outcome {
    Classified(u8),
    OutOfMemory { message: String },
    Other(String),
}

#[derive(Clone, Copy, PartialEq)]
enum Stage {
    /// `Classifier::load` only.
    Load,
    /// `Classifier::new` (load and a first run) and one `classify`.
    Classify,
}

/// Runs `stage` with at most `budget` heap bytes beyond what is live now. Returns how it ended
/// (checked after everything it allocated is freed) and its peak heap.
fn attempt(file: &'static [u8], stage: Stage, budget: usize, reserve: usize) -> (Outcome, usize) {
    let pixels = first_image();
    let baseline = HEAP.stats().current;
    HEAP.set_error_reserve(reserve);
    HEAP.reset_peak();
    HEAP.set_limit(baseline + budget);
    let result = match stage {
        Stage::Load => Classifier::load(file).map(|_| 0),
        Stage::Classify => Classifier::new(file).and_then(|mut c| c.classify(pixels)),
    };
    let peak = HEAP.stats().peak - baseline;
    HEAP.set_limit(usize::MAX);
    let outcome = match result {
        Ok(label) => Outcome::Classified(label),
        Err(Error::Engine(tessera_core::Error::OutOfMemory { what, .. })) => Outcome::OutOfMemory { message: what },
        Err(e) => Outcome::Other(e.to_string()),
    };
    let held = match &outcome {
        Outcome::OutOfMemory { message } | Outcome::Other(message) => message.capacity(),
        Outcome::Classified(_) => 0,
    };
    assert_eq!(HEAP.stats().current, baseline + held, "everything but the error message is freed again");
    (outcome, peak)
}

fn first_image() -> &'static [u8; 64] {
    let set = TestSet::parse(TEST_SET).expect("the committed test set parses");
    set.iter().next().expect("the test set has images").pixels
}

fn model(name: &str) -> &'static [u8] {
    if name == "f32" {
        MODEL_F32
    } else {
        MODEL_Q8_0
    }
}

/// One-time initialisation outside the engine (the standard library's, on first use) must
/// not count against a budget: a first unbounded run does it.
fn warm_up() {
    let _ = Classifier::new(MODEL_Q8_0).and_then(|mut c| c.classify(first_image()));
}

/// The child: one attempt, its outcome on stdout.
fn child(spec: &str) {
    let mut parts = spec.split(':');
    let name = parts.next().unwrap_or("q8_0");
    let budget: usize = parts.next().and_then(|b| b.parse().ok()).expect("a budget");
    let reserve: usize = parts.next().and_then(|b| b.parse().ok()).expect("a reserve");
    warm_up();
    let (outcome, _) = attempt(model(name), Stage::Classify, budget, reserve);
    match outcome {
        Outcome::Classified(_) => println!("classified"),
        Outcome::OutOfMemory { .. } => println!("oom"),
        Outcome::Other(e) => println!("other {e}"),
    }
}

/// What a child reported.
enum ChildOutcome {
    Classified,
    OutOfMemory,
    /// Aborted by the allocation error handler (an infallible allocation failed).
    AllocAbort(String),
    Other(String),
}

fn run_child(name: &str, budget: usize, reserve: usize) -> ChildOutcome {
    let exe = std::env::current_exe().expect("the test knows its executable");
    let out = Command::new(exe)
        .env(CHILD_ENV, format!("{name}:{budget}:{reserve}"))
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("the child runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    match stdout.trim() {
        "classified" => ChildOutcome::Classified,
        "oom" => ChildOutcome::OutOfMemory,
        _ if stderr.contains("memory allocation of") => {
            ChildOutcome::AllocAbort(stderr.lines().next().unwrap_or("").to_string())
        }
        other => ChildOutcome::Other(format!("status {:?}, stdout {other:?}, stderr {stderr:?}", out.status)),
    }
}

struct Tally {
    passed: usize,
    failed: usize,
}

impl Tally {
    fn check(&mut self, name: &str, ok: bool, detail: impl FnOnce() -> String) {
        if ok {
            self.passed += 1;
        } else {
            self.failed += 1;
            eprintln!("FAILED {name}: {}", detail());
        }
    }
}

fn main() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        child(&spec);
        return;
    }
    let set = TestSet::parse(TEST_SET).expect("the committed test set parses");
    let sample = set.iter().next().expect("the test set has images");
    let mut tally = Tally { passed: 0, failed: 0 };
    warm_up();

    for name in ["q8_0", "f32"] {
        let file = model(name);
        // What loading needs, and what loading plus one inference needs.
        let (loaded, load_peak) = attempt(file, Stage::Load, usize::MAX / 2, 0);
        tally.check(&format!("{name}: unbounded load"), loaded == Outcome::Classified(0), || format!("{loaded:?}"));
        let (result, needed) = attempt(file, Stage::Classify, usize::MAX / 2, 0);
        let expected = if name == "f32" { sample.python_f32 } else { sample.python_q8_0 };
        let ok = result == Outcome::Classified(expected);
        tally.check(&format!("{name}: unbounded run"), ok, || format!("{result:?}"));
        tally.check(&format!("{name}: peak under 32 KiB"), needed < 32 * 1024, || format!("peak {needed} B"));

        // Exactly the peak is enough (the allocator is deterministic).
        let (result, _) = attempt(file, Stage::Classify, needed, 0);
        let ok = matches!(result, Outcome::Classified(_));
        tally.check(&format!("{name}: budget = peak {needed} B"), ok, || format!("{result:?}"));

        for reserve in [0, 256] {
            // Budgets too small to load: in this process, each must be OutOfMemory.
            let mut not_oom = Vec::new();
            let mut with_message = 0;
            for budget in 0..load_peak {
                match attempt(file, Stage::Classify, budget, reserve).0 {
                    Outcome::OutOfMemory { message } => with_message += usize::from(!message.is_empty()),
                    other => not_oom.push((budget, other)),
                }
            }
            tally.check(
                &format!("{name}: budgets 0..{load_peak} B, error reserve {reserve} B"),
                not_oom.is_empty(),
                || format!("{} budgets did not fail with OutOfMemory, first: {:?}", not_oom.len(), not_oom.first()),
            );
            if reserve > 0 {
                tally.check(&format!("{name}: messages kept with a reserve"), with_message == load_peak, || {
                    format!("{with_message} of {load_peak} errors had a message")
                });
            }

            // Budgets that load but run out in the first compute: one child process each.
            let (mut oom, mut aborts, mut other) = (0, Vec::new(), Vec::new());
            for budget in load_peak..needed {
                match run_child(name, budget, reserve) {
                    ChildOutcome::OutOfMemory => oom += 1,
                    ChildOutcome::AllocAbort(line) => aborts.push((budget, line)),
                    ChildOutcome::Classified => other.push((budget, String::from("classified under its peak"))),
                    ChildOutcome::Other(e) => other.push((budget, e)),
                }
            }
            let window = format!("{name}: budgets {load_peak}..{needed} B (first compute), error reserve {reserve} B");
            tally.check(&window, other.is_empty(), || {
                format!("{} unexpected outcomes, first: {:?}", other.len(), other.first())
            });
            tally.check(&format!("{window}: no aborts"), aborts.is_empty(), || {
                format!(
                    "{} of {} budgets abort (an infallible allocation on the compute path), first: {:?}; {oom} fail with OutOfMemory",
                    aborts.len(),
                    needed - load_peak,
                    aborts.first()
                )
            });
        }
        println!("{name}: loading peaks at {load_peak} B, loading plus one inference at {needed} B");
    }

    // The error reads well.
    HEAP.set_error_reserve(256);
    HEAP.set_limit(HEAP.stats().current + 1000);
    let result = Classifier::new(MODEL_Q8_0).map(|_| ());
    HEAP.set_limit(usize::MAX);
    let message = result.map_or_else(|e| e.to_string(), |()| String::new());
    tally.check("message", message.starts_with("engine: out of memory:"), || message.clone());
    println!("with a 1000-byte budget: {message}");

    println!("{} passed, {} failed", tally.passed, tally.failed);
    if tally.failed > 0 {
        std::process::exit(1);
    }
}
