//! edge-digits: a handwritten-digit classifier run by tessera the way a microcontroller runs
//! it.
//!
//! The model is a small multilayer perceptron for scikit-learn's 8x8 `digits` images, trained
//! and exported by `scripts/train_digits.py` as GGUF ([`MODEL_F32`], [`MODEL_Q8_0`]) and
//! compiled into the program with `include_bytes!`. [`Classifier`] parses the file in place,
//! binds the weights to the file's bytes without copying (on a microcontroller they stay in
//! flash), builds the graph once, plans its compute memory, and then classifies images with
//! no further heap allocation. Only tessera-core and tessera-cpu are used: no threads, no
//! files, no `std`.
//!
//! Every failure is an [`Error`]; running out of heap is
//! `Error::Engine(tessera_core::Error::OutOfMemory { .. })`, never an abort, as long as the
//! global allocator returns null when it is out of memory (as `tessera-alloc` does).
//!
//! With the `defmt` feature, loading and evaluation are logged through `defmt` (the program
//! provides the global logger); without it nothing is logged.
#![no_std]
#![forbid(unsafe_op_in_unsafe_fn)]

extern crate alloc;

#[macro_use]
mod log;

mod classifier;
mod error;
mod evaluate;
mod model;
mod test_set;

pub use classifier::{Classifier, CLASSES, PIXELS};
pub use error::Error;
pub use evaluate::{evaluate, Evaluation};
pub use model::{MODEL_F32, MODEL_Q8_0, TEST_SET};
pub use test_set::{Sample, TestSet};

/// The name of the device the classifier runs on (tessera-cpu's: "CPU").
pub fn device_name() -> &'static str {
    use tessera_core::Device;
    tessera_cpu::CPU_DEVICE.name()
}

/// The accuracy line both runners print (the host example and the firmware):
/// `digits: accuracy <a> on <n> images, peak heap <bytes> B, <us> us/image, device <name>`.
pub struct Report<'a> {
    pub evaluation: &'a Evaluation,
    pub peak_heap: usize,
    pub us_per_image: u64,
    pub device: &'a str,
}

impl core::fmt::Display for Report<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "digits: accuracy {:.4} on {} images, peak heap {} B, {} us/image, device {}",
            self.evaluation.accuracy(),
            self.evaluation.total,
            self.peak_heap,
            self.us_per_image,
            self.device
        )
    }
}
