//! edge-digits on a Cortex-M3: classifies the held-out digits with the GGUF models compiled
//! into flash, with a 32 KiB heap (tessera-alloc) in the chip's 64 KiB of RAM, and prints the
//! accuracy line over semihosting. Exits qemu with success when both weight files reach the
//! training script's accuracy within half a point and a budget too small for the model fails
//! with the engine's out-of-memory error.
//!
//! ```sh
//! cd examples/edge-digits/firmware && cargo run --release     # qemu-system-arm, lm3s6965evb
//! ```
#![no_std]
#![no_main]

use cortex_m_rt::entry;
use cortex_m_semihosting::debug;
use edge_digits::{evaluate, Classifier, Error, Report, TestSet, MODEL_F32, MODEL_Q8_0, TEST_SET};
use panic_semihosting as _;
use tessera_alloc::{BoundedHeap, Region};

#[cfg(feature = "defmt")]
use defmt_semihosting as _;

/// The heap: all the engine gets. The weights stay in flash.
const HEAP_BYTES: usize = 32 * 1024;
static REGION: Region<HEAP_BYTES> = Region::new();
#[global_allocator]
static HEAP: BoundedHeap = BoundedHeap::new(&REGION);

/// Bytes granted past the limit after a failure, to build the error that reports it.
const ERROR_RESERVE: usize = 256;
/// Where the lm3s6965 maps its RAM; everything below is flash.
const RAM_START: usize = 0x2000_0000;

/// Host output. With defmt, stdout carries defmt's binary frames, so text goes to stderr.
#[cfg(not(feature = "defmt"))]
macro_rules! say {
    ($($arg:tt)*) => { cortex_m_semihosting::hprintln!($($arg)*) };
}
#[cfg(feature = "defmt")]
macro_rules! say {
    ($($arg:tt)*) => { cortex_m_semihosting::heprintln!($($arg)*) };
}

#[cfg(feature = "defmt")]
static LOG_SEQUENCE: core::sync::atomic::AtomicU32 = core::sync::atomic::AtomicU32::new(0);
#[cfg(feature = "defmt")]
defmt::timestamp!("{=u32}", LOG_SEQUENCE.fetch_add(1, core::sync::atomic::Ordering::Relaxed));

/// Host wall-clock time in centiseconds (semihosting SYS_CLOCK).
fn centiseconds() -> usize {
    // SAFETY: SYS_CLOCK takes no argument and only reads the host's clock.
    unsafe { cortex_m_semihosting::syscall!(CLOCK) }
}

/// Classifies the test set with one model; true if it matches the script's accuracy.
fn run(name: &str, file: &'static [u8]) -> Result<bool, Error> {
    let set = TestSet::parse(TEST_SET)?;
    let baseline = HEAP.stats().current;
    HEAP.reset_peak();
    let mut classifier = Classifier::new(file)?;
    let start = centiseconds();
    let evaluation = evaluate(&mut classifier, &set)?;
    let elapsed = centiseconds().wrapping_sub(start);
    let peak_heap = HEAP.stats().peak - baseline;
    let compute_bytes = classifier.compute_bytes();
    drop(classifier);

    let in_flash = (file.as_ptr() as usize) < RAM_START;
    say!(
        "edge-digits: {} weights ({} B at {:p}, {}), compute buffer {} B, heap {} B, python accuracy {:.4}",
        name,
        file.len(),
        file.as_ptr(),
        if in_flash { "in flash" } else { "NOT in flash" },
        compute_bytes,
        HEAP_BYTES,
        evaluation.python_accuracy()
    );
    let us_per_image = (elapsed as u64 * 10_000) / evaluation.total.max(1) as u64;
    let report = Report { evaluation: &evaluation, peak_heap, us_per_image, device: edge_digits::device_name() };
    say!("{}", report);
    #[cfg(feature = "defmt")]
    defmt::info!("{}", defmt::Display2Format(&report));
    Ok(in_flash && (evaluation.accuracy() - evaluation.python_accuracy()).abs() <= 0.005)
}

/// A budget too small for the model: loading must fail with the engine's OutOfMemory error.
fn too_small_budget() -> bool {
    const BUDGET: usize = 2048;
    let baseline = HEAP.stats().current;
    HEAP.set_limit(baseline + BUDGET);
    let result = Classifier::new(MODEL_Q8_0).map(|_| ());
    HEAP.set_limit(HEAP_BYTES);
    match result {
        Err(e) if e.is_out_of_memory() => {
            say!("edge-digits: with a {}-byte heap budget: {}", BUDGET, e);
            true
        }
        Err(e) => {
            say!("edge-digits: with a {}-byte heap budget: expected out of memory, got: {}", BUDGET, e);
            false
        }
        Ok(()) => {
            say!("edge-digits: a {}-byte heap budget was enough, expected out of memory", BUDGET);
            false
        }
    }
}

#[entry]
fn main() -> ! {
    HEAP.set_error_reserve(ERROR_RESERVE);
    say!("edge-digits: Cortex-M3 (qemu lm3s6965evb), us/image is emulated time on the host clock");
    let mut ok = true;
    for (name, file) in [("f32", MODEL_F32), ("q8_0", MODEL_Q8_0)] {
        match run(name, file) {
            Ok(matches) => ok &= matches,
            Err(e) => {
                say!("digits: {}: {}", name, e);
                ok = false;
            }
        }
    }
    ok &= too_small_budget();
    say!("edge-digits: heap {}", HEAP.stats());
    debug::exit(if ok { debug::EXIT_SUCCESS } else { debug::EXIT_FAILURE });
    loop {
        cortex_m::asm::wfi();
    }
}
