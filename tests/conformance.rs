//! Op conformance: every op and type, on every device of the runtime registry, against the CPU
//! reference (see `conformance/mod.rs`). Also proves that the checker can fail.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "conformance/mod.rs"]
mod conformance;

use std::any::Any;
use std::collections::BTreeSet;
use std::ops::Range;

use conformance::runner::{compare_f32, compare_i32, run_cases, Target};
use conformance::{cases, Case, Summary};
use tessera::cpu::CpuBackend;
use tessera::host_buffer::HOST_BUFFER_TYPE;
use tessera::{Backend, DType, Device, Graph, Op, TensorId};

#[test]
fn every_op_matches_the_reference_on_every_device() {
    // The devices every program gets: built in and plugins, as the environment says
    // (`TESSERA_DISABLE_CPU=builtin TESSERA_BACKEND_DIR=target/plugins` runs the CPU plugin).
    let registry = tessera::discover();
    let devices: Vec<&'static dyn Device> = registry.devices().collect();
    assert!(!devices.is_empty(), "the registry has no devices: {:?}", registry.skipped());
    let summary = conformance::run_suite(&devices);
    summary.print();
    assert_eq!(summary.failed, 0, "{} case(s) failed: {}", summary.failed, summary.line());
    // With TESSERA_VULKAN_VALIDATION=1 the Khronos layer checked every Vulkan call above.
    #[cfg(feature = "vulkan")]
    assert_eq!(
        tessera::vulkan::validation_messages(),
        0,
        "the Vulkan validation layer reported problems (see the log)"
    );
    assert!(
        summary.ops >= 30 || std::env::var("TESSERA_CONFORMANCE_FILTER").is_ok(),
        "only {} ops covered",
        summary.ops
    );
}

#[test]
fn the_case_list_is_well_formed() {
    let all = cases::all();
    assert!(all.len() >= 300, "only {} cases", all.len());
    let mut names = BTreeSet::new();
    for case in &all {
        assert!(names.insert(case.name.as_str()), "duplicate case name {}", case.name);
        assert!(case.name.starts_with(case.op), "{} does not start with its op {}", case.name, case.op);
        let (g, out) = case.build().unwrap_or_else(|e| panic!("{}: {e}", case.name));
        assert_eq!(g.tensor(out).unwrap().op().name(), case.op, "{}: the output is not the op under test", case.name);
    }
    let ops: BTreeSet<&str> = all.iter().map(|c| c.op).collect();
    for op in [
        "ADD",
        "SUB",
        "MUL",
        "DIV",
        "SCALE",
        "SQR",
        "SQRT",
        "NEG",
        "ABS",
        "EXP",
        "RELU",
        "GELU",
        "GELU_ERF",
        "SILU",
        "SIGMOID",
        "TANH",
        "SUM_ROWS",
        "MEAN",
        "ARGMAX",
        "SOFT_MAX",
        "NORM",
        "RMS_NORM",
        "MUL_MAT",
        "GET_ROWS",
        "CPY",
        "CONT",
        "CONCAT",
        "ROPE",
        "DIAG_MASK_INF",
        "IM2COL",
        "POOL_2D",
    ] {
        assert!(ops.contains(op), "no case tests {op}");
    }
}

/// What a faulty backend does wrong.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Fault {
    /// Adds 1 to the first value of every result.
    WrongValue,
    /// Writes one byte just past the end of every result.
    WriteOutOfBounds,
    /// Computes nothing, leaving the results as they were.
    SkipCompute,
    /// Turns the first value of every result into +inf.
    Infinity,
}

/// The CPU backend with a deliberate fault.
struct Faulty {
    inner: CpuBackend,
    fault: Fault,
}

impl Backend for Faulty {
    fn name(&self) -> &str {
        "FAULTY"
    }
    fn device(&self) -> &'static dyn Device {
        &tessera::cpu::CPU_DEVICE
    }
    fn compute(&mut self, graph: &Graph, nodes: Range<usize>) -> tessera::Result<()> {
        if self.fault == Fault::SkipCompute {
            return Ok(());
        }
        self.inner.compute(graph, nodes.clone())?;
        for &id in &graph.nodes()[nodes] {
            let t = graph.tensor(id)?;
            if t.op().is_view() || t.dtype().is_quantized() || t.dtype() == DType::I32 {
                continue;
            }
            match self.fault {
                Fault::WrongValue | Fault::Infinity => {
                    let first = graph.get_f32(id)?[0];
                    let v = if self.fault == Fault::Infinity { f32::INFINITY } else { first + 1.0 };
                    graph.set_bytes(id, 0, &tessera::convert::to_bytes(t.dtype(), &[v])?)?;
                }
                Fault::WriteOutOfBounds => {
                    let d = graph.data(id).unwrap();
                    let at = d.offset + t.nbytes();
                    let mut b = [0u8];
                    d.buffer.get_bytes(at, &mut b)?;
                    d.buffer.set_bytes(at, &[!b[0]])?;
                }
                Fault::SkipCompute => {}
            }
        }
        Ok(())
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// A few cases that only need the element-wise kernels.
fn small_cases() -> Vec<Case> {
    cases::all().into_iter().filter(|c| c.name.starts_with("ADD(type=f32,") || c.name.starts_with("SCALE(")).collect()
}

fn run_faulty(fault: Fault, cases: &[Case]) -> Summary {
    let mut backend = Faulty { inner: CpuBackend::new(), fault };
    let mut target = Target::new(&mut backend);
    target.name = format!("FAULTY({fault:?})");
    let summary = run_cases(cases, &mut target);
    for f in summary.failures.iter().take(2) {
        println!("expected: {f}");
    }
    summary
}

#[test]
fn wrong_values_are_reported() {
    let cases = small_cases();
    let s = run_faulty(Fault::WrongValue, &cases);
    assert_eq!((s.failed, s.passed), (cases.len(), 0), "{}", s.line());
    assert!(s.failures.iter().all(|f| f.error.contains("NMSE")), "{:?}", s.failures[0]);
}

#[test]
fn infinities_that_differ_are_reported() {
    let cases = small_cases();
    let s = run_faulty(Fault::Infinity, &cases);
    assert_eq!((s.failed, s.passed), (cases.len(), 0), "{}", s.line());
    assert!(s.failures.iter().all(|f| f.error.contains("infinities differ")), "{:?}", s.failures[0]);
}

#[test]
fn out_of_bounds_writes_are_reported() {
    let cases = small_cases();
    let s = run_faulty(Fault::WriteOutOfBounds, &cases);
    assert_eq!((s.failed, s.passed), (cases.len(), 0), "{}", s.line());
    assert!(s.failures.iter().all(|f| f.error.contains("out-of-bounds write")), "{:?}", s.failures[0]);
}

#[test]
fn unwritten_results_are_reported() {
    let cases = small_cases();
    let s = run_faulty(Fault::SkipCompute, &cases);
    assert_eq!((s.failed, s.passed), (cases.len(), 0), "{}", s.line());
    assert!(s.failures.iter().all(|f| f.error.contains("NaN")), "{:?}", s.failures[0]);
}

#[test]
fn unsupported_cases_are_skipped() {
    let cases = small_cases();
    let mut backend = CpuBackend::new();
    let no_scale = |g: &Graph, id: TensorId| !matches!(g.tensor(id).map(|t| t.op()), Ok(Op::Scale(_)));
    let mut target = Target {
        name: "CPU-without-SCALE".into(),
        backend: &mut backend,
        buffer_type: &HOST_BUFFER_TYPE,
        supports_op: Some(&no_scale),
    };
    let s = run_cases(&cases, &mut target);
    let scales = cases.iter().filter(|c| c.op == "SCALE").count();
    assert_eq!((s.failed, s.skipped, s.passed), (0, scales, cases.len() - scales), "{}", s.line());
}

#[test]
fn the_comparison_rules() {
    assert!(compare_f32(&[1.0, 2.0], &[1.0, 2.0], 1e-7).is_ok());
    assert!(compare_f32(&[1.0, 2.0], &[1.0, 2.001], 1e-7).is_err());
    assert!(compare_f32(&[1.0, 2.0], &[1.0, 2.001], 5e-4).is_ok());
    assert!(compare_f32(&[1.0, f32::NAN], &[1.0, f32::NAN], 1.0).is_err());
    assert!(compare_f32(&[1.0, 2.0], &[1.0, f32::NAN], 1.0).is_err());
    assert!(compare_f32(&[1.0, f32::NEG_INFINITY], &[1.0, f32::NEG_INFINITY], 1e-7).is_ok());
    assert!(compare_f32(&[1.0, f32::NEG_INFINITY], &[1.0, f32::INFINITY], 1.0).is_err());
    assert!(compare_f32(&[1.0, 2.0], &[1.0, f32::INFINITY], 1.0).is_err());
    assert!(compare_f32(&[0.0, 0.0], &[0.0, 0.0], 1e-7).is_ok());
    assert!(compare_f32(&[0.0, 0.0], &[0.0, 1e-3], 1e-7).is_err());
    assert!(compare_f32(&[1.0], &[1.0, 2.0], 1.0).is_err());
    assert!(compare_i32(&[1, 2, 3], &[1, 2, 3]).is_ok());
    assert!(compare_i32(&[1, 2, 3], &[1, 2, 4]).is_err());
}
