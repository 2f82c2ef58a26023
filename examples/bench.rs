//! Op benchmarks of the CPU backend, printed like ggml's `test-backend-ops perf` so the two
//! can be read line by line:
//!
//! ```text
//! MUL_MAT(type_a=f32,type_b=f32,m=1024,n=1024,k=1024):  74 runs - 13575.26 us/run - 2.15 GFLOP/run - 158.19 GFLOPS
//! ```
//!
//! `cargo run --release --example bench -- [-o OP] [-p FILTER] [--threads N] [--kernels SET] [--time SECONDS]`
//!
//! Each case runs until about `--time` seconds (default 1) have passed, at least 3 times
//! (2 for cases slower than a second), and reports the median run. FLOP counts are ggml's
//! (MUL_MAT: 2 m n k per matrix); bandwidth is sources plus destination bytes per run, in
//! GB/s of 2^30 bytes as ggml prints it.
//!
//! Adding an op: write a function returning its [`Case`]s and add it to [`OPS`].

use std::process::ExitCode;
use std::time::{Duration, Instant};

use tessera::allocator::alloc_graph_tensors;
use tessera::cpu::CpuBackend;
use tessera::host_buffer::HOST_BUFFER_TYPE;
use tessera::{Backend, DType, Graph, Result, TensorId};

/// What a case's figure of merit counts per run.
enum Work {
    /// Floating-point operations (printed as GFLOPS).
    Flops(f64),
    /// Bytes read and written (printed as GB/s): for the bandwidth-bound ops (ADD, SOFT_MAX,
    /// NORM, ...) that have no cases here yet.
    #[allow(dead_code)]
    Bytes(f64),
}

/// Builds a case's graph (its leafs are filled with values in [-1, 1)); returns the node
/// that is timed.
type Build = Box<dyn Fn(&mut Graph) -> Result<TensorId>>;

/// One benchmark: ggml's parameter string and a graph builder whose output node is timed.
struct Case {
    op: &'static str,
    params: String,
    build: Build,
    work: Work,
}

/// The cases of one op.
type OpCases = fn() -> Vec<Case>;

/// Every op with its cases, in ggml's perf order.
const OPS: &[(&str, OpCases)] = &[("MUL_MAT", mul_mat)];

const MUL_MAT_TYPES: [DType; 5] = [DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0];

/// MUL_MAT: square products, and a 4096 x 14336 weight matrix against 1 to 512 columns.
fn mul_mat() -> Vec<Case> {
    let mut shapes: Vec<(usize, usize, usize)> = [1024, 2048, 4096].iter().map(|&s| (s, s, s)).collect();
    shapes.extend([1, 4, 8, 512].iter().map(|&n| (4096, n, 14336)));
    let mut cases = Vec::new();
    for (m, n, k) in shapes {
        for ta in MUL_MAT_TYPES {
            cases.push(Case {
                op: "MUL_MAT",
                params: format!("type_a={ta},type_b=f32,m={m},n={n},k={k},bs=[1,1],nr=[1,1]"),
                build: Box::new(move |g| {
                    let a = g.new_tensor(ta, &[k, m])?;
                    let b = g.new_tensor(DType::F32, &[k, n])?;
                    g.mul_mat(a, b)
                }),
                work: Work::Flops(2.0 * (m * n * k) as f64),
            });
        }
    }
    cases
}

/// Deterministic values in [-1, 1).
fn fill(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

struct Timing {
    runs: usize,
    median: Duration,
}

fn run_case(case: &Case, backend: &mut CpuBackend, budget: Duration) -> Result<Timing> {
    let mut g = Graph::new();
    let out = (case.build)(&mut g)?;
    g.build_forward(out)?;
    alloc_graph_tensors(&mut g, &HOST_BUFFER_TYPE)?;
    for (i, &leaf) in g.leafs().to_vec().iter().enumerate() {
        let n = g.tensor(leaf)?.nelements();
        g.set_f32(leaf, &fill(n, i as u64 + 1))?;
    }
    backend.compute_graph(&g)?; // warm-up: work memory, threads, page faults
    let mut times = Vec::new();
    let start = Instant::now();
    while times.len() < 3 || start.elapsed() < budget {
        let t = Instant::now();
        backend.compute_graph(&g)?;
        times.push(t.elapsed());
        if times.len() >= 2 && start.elapsed() > budget && times[0] > budget {
            break;
        }
    }
    times.sort();
    Ok(Timing { runs: times.len(), median: times[times.len() / 2] })
}

fn print_line(case: &Case, t: &Timing) {
    let us = t.median.as_secs_f64() * 1e6;
    let head = format!("  {}({}):", case.op, case.params);
    let rate = match case.work {
        Work::Flops(f) => format!("{:6.2} GFLOP/run - {:8.2} GFLOPS", f / 1e9, f / t.median.as_secs_f64() / 1e9),
        Work::Bytes(b) => {
            format!("{:8} kB/run - {:7.2} GB/s", (b / 1024.0) as u64, b / t.median.as_secs_f64() / (1u64 << 30) as f64)
        }
    };
    println!("{head:<90} {:8} runs - {us:10.2} us/run - {rate}", t.runs);
}

struct Args {
    op: Option<String>,
    filter: Option<String>,
    threads: Option<usize>,
    kernels: Option<String>,
    budget: Duration,
}

fn parse_args() -> std::result::Result<Args, String> {
    let mut args = Args { op: None, filter: None, threads: None, kernels: None, budget: Duration::from_secs(1) };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "-o" => args.op = Some(value()?),
            "-p" => args.filter = Some(value()?),
            "--threads" | "-t" => args.threads = Some(value()?.parse().map_err(|e| format!("--threads: {e}"))?),
            "--kernels" => args.kernels = Some(value()?),
            "--time" => {
                let s: f64 = value()?.parse().map_err(|e| format!("--time: {e}"))?;
                args.budget = Duration::from_secs_f64(s);
            }
            "-h" | "--help" => {
                return Err("usage: bench [-o OP] [-p FILTER] [--threads N] [--kernels SET] [--time SECONDS]".into())
            }
            other => return Err(format!("unknown argument '{other}' (try --help)")),
        }
    }
    Ok(args)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let threads = args.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let backend = match &args.kernels {
        Some(set) => CpuBackend::with_kernels(set, threads),
        None => Ok(CpuBackend::with_threads(threads)),
    };
    let mut backend = match backend {
        Ok(b) => b,
        Err(e) => {
            eprintln!("bench: {e}");
            return ExitCode::FAILURE;
        }
    };
    let known: Vec<&str> = OPS.iter().map(|(name, _)| *name).collect();
    if let Some(op) = &args.op {
        if !known.iter().any(|k| k.eq_ignore_ascii_case(op)) {
            eprintln!("bench: unknown op '{op}'; ops: {}", known.join(", "));
            return ExitCode::FAILURE;
        }
    }
    println!(
        "Backend CPU: {} ({} kernels, {} threads)",
        tessera::Device::description(&tessera::cpu::CPU_DEVICE),
        backend.kernel_set(),
        backend.threads()
    );
    for (name, cases) in OPS {
        if args.op.as_ref().is_some_and(|op| !op.eq_ignore_ascii_case(name)) {
            continue;
        }
        for case in cases() {
            if args.filter.as_ref().is_some_and(|f| !case.params.contains(f.as_str())) {
                continue;
            }
            match run_case(&case, &mut backend, args.budget) {
                Ok(t) => print_line(&case, &t),
                Err(e) => println!("  {}({}): failed: {e}", case.op, case.params),
            }
        }
    }
    ExitCode::SUCCESS
}
