//! The edge-digits classifier on the host, under the same memory discipline as on a
//! microcontroller: tessera-alloc is the global allocator, and the engine gets a fixed heap
//! budget on top of what the Rust runtime had allocated before it started.
//!
//! ```sh
//! cargo run --release --example digits              # both weight files
//! cargo run --release --example digits -- q8_0      # one of them (f32, q8_0)
//! cargo run --release --example digits -- q8_0 4096 # with a heap budget of 4096 bytes
//! ```
//!
//! For each model it prints the training script's accuracy for the same weights and the line
//! `digits: accuracy <a> on <n> images, peak heap <bytes> B, <us> us/image, device <name>`,
//! and fails if the two accuracies differ by more than half a point.

#[macro_use]
#[path = "common/mod.rs"]
mod common;

use std::process::ExitCode;
use std::time::Instant;

use edge_digits::{evaluate, Classifier, Report, TestSet, MODEL_F32, MODEL_Q8_0, TEST_SET};
use tessera::Device;
use tessera_alloc::{BoundedHeap, Region};

/// The whole process heap (the Rust runtime, stdout, the engine).
static REGION: Region<{ 1024 * 1024 }> = Region::new();
#[global_allocator]
static HEAP: BoundedHeap = BoundedHeap::new(&REGION);

/// Heap the engine may use for one model: loading, planning, one inference (the issue's
/// ceiling for Q8_0 weights).
const ENGINE_BUDGET: usize = 32 * 1024;
/// Bytes granted past the budget right after a failure, to build the error that reports it.
const ERROR_RESERVE: usize = 512;

fn run(name: &str, file: &'static [u8], budget: usize) -> Result<bool, edge_digits::Error> {
    let set = TestSet::parse(TEST_SET)?;
    // The budget counts from what is live now; the peak is measured from here too.
    let baseline = HEAP.stats().current;
    HEAP.set_error_reserve(ERROR_RESERVE);
    HEAP.set_limit(baseline + budget);
    HEAP.reset_peak();
    let result = (|| {
        let mut classifier = Classifier::new(file)?;
        let start = Instant::now();
        let evaluation = evaluate(&mut classifier, &set)?;
        let elapsed = start.elapsed();
        Ok::<_, edge_digits::Error>((evaluation, elapsed, classifier.compute_bytes()))
    })();
    let stats = HEAP.stats();
    HEAP.set_limit(usize::MAX);
    let (evaluation, elapsed, compute_bytes) = result?;
    let peak = stats.peak - baseline;
    let us_per_image = (elapsed.as_micros() / evaluation.total.max(1) as u128) as u64;
    let device = tessera::cpu::CPU_DEVICE.name();
    outln!(
        "edge-digits: {name} weights ({} B, used in place), compute buffer {compute_bytes} B, heap budget {budget} B, {}/{} predictions as the script's, python accuracy {:.4}",
        file.len(),
        evaluation.agree_with_python,
        evaluation.total,
        evaluation.python_accuracy()
    );
    outln!("{}", Report { evaluation: &evaluation, peak_heap: peak, us_per_image, device });
    let diff = (evaluation.accuracy() - evaluation.python_accuracy()).abs();
    let ok = diff <= 0.005;
    if !ok {
        eprintln!("digits: accuracy differs from the training script's by {:.2} points", diff * 100.0);
    }
    Ok(ok)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let which = args.first().map_or("both", String::as_str);
    let budget = match args.get(1).map(|b| b.parse::<usize>()) {
        None => ENGINE_BUDGET,
        Some(Ok(b)) => b,
        Some(Err(_)) => {
            eprintln!("digits: the budget must be a number of bytes, got '{}'", args[1]);
            return ExitCode::FAILURE;
        }
    };
    let models: &[(&str, &'static [u8])] = match which {
        "both" => &[("f32", MODEL_F32), ("q8_0", MODEL_Q8_0)],
        "f32" => &[("f32", MODEL_F32)],
        "q8_0" => &[("q8_0", MODEL_Q8_0)],
        other => {
            eprintln!("digits: unknown weights '{other}'; expected f32, q8_0 or both");
            return ExitCode::FAILURE;
        }
    };
    let mut ok = true;
    for &(name, file) in models {
        match run(name, file, budget) {
            Ok(matches) => ok &= matches,
            Err(e) => {
                eprintln!("digits: {name}: {e}");
                ok = false;
            }
        }
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
