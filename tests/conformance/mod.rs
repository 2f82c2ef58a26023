//! tessera's op conformance suite, in the spirit of ggml's `test-backend-ops`: every op with
//! every type it accepts is computed on a tested backend and on the CPU reference, node by
//! node, and the results compared; guard regions around every tensor catch out-of-bounds
//! writes.
//!
//! Other integration tests reuse it with
//! `#[path = "conformance/mod.rs"] mod conformance;` and
//! [`runner::run_suite`] (devices) or [`runner::run_cases`] (an explicitly given backend).
#![allow(dead_code)]

pub mod cases;
pub mod rng;
pub mod runner;

#[allow(unused_imports)]
pub use cases::{Case, CaseGraph, Init};
#[allow(unused_imports)]
pub use runner::{run_cases, run_cases_on_devices, run_suite, selected_cases, Failure, Outcome, Summary, Target};
