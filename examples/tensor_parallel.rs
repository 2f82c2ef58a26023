//! Tensor parallelism benchmark: MUL_MAT of one large weight matrix on one GPU against the
//! same product with the weight split by rows over every CUDA GPU
//! (`tessera::cuda::split_buffer_type`), in one process, rounds alternating.
//!
//! `cargo run --release --features cuda --example tensor_parallel -- [--m M] [--k K] [--n N] [--type f16|bf16|f32] [--rounds R] [--devices 0,1] [--min-speedup X]`
//!
//! The weight is `[K, M]` (K values per row, M rows; default 16384 x 16384 f16, random
//! values in [-1, 1)), the activation `[K, N]` f32 (default N = 4096). Each round runs both
//! products once, timed by CUDA0's clock (timing events on its backend's stream, which the
//! split product forks from and joins), and prints their times, TFLOPS (2 M N K per product)
//! and ratio; then the median ratio with its min and max over the rounds, and the largest
//! difference between the two results relative to the largest value of the one-GPU result.
//! The run fails (exit 1) if that exceeds 1e-3 (both products take f16 activations and sum
//! in f32; only the order of the sums may differ), or if the median ratio is below
//! `--min-speedup` when one is given.
//!
//! Two or more GPUs need NCCL: `libnccl.so` on `LD_LIBRARY_PATH` (the nvidia-nccl pip wheel
//! has only `libnccl.so.2`: link `libnccl.so` to it). `TESSERA_CUDA_SPLIT_CHUNKS` sets the
//! column chunks the transfers are pipelined over: a count of even chunks (`8`) or relative
//! widths (`1,3,8,3,1`, the default from 2560 columns). With one GPU the program runs the split over that one device (no NCCL), says why
//! it cannot compare, and exits 0; with none, it says so and exits 0.

#[macro_use]
#[path = "common/mod.rs"]
mod common;

use std::process::ExitCode;
use std::time::Duration;

use tessera::allocator::alloc_graph_tensors;
use tessera::cuda::{split_buffer_type, CUDA_REG};
use tessera::{Backend, BackendReg, Buffer, DType, Device, Error, Event, Graph, Program, Result, SplitRef, TensorId};

struct Args {
    m: usize,
    k: usize,
    n: usize,
    dtype: DType,
    rounds: usize,
    devices: Option<Vec<usize>>,
    proportions: Vec<f32>,
    min_speedup: Option<f64>,
}

const USAGE: &str = "usage: tensor_parallel [--m M] [--k K] [--n N] [--type f16|bf16|f32] [--rounds R] [--devices 0,1] [--proportions 1,1] [--min-speedup X]";

/// The largest relative difference the two results may have.
const BOUND: f64 = 1e-3;

fn parse_args() -> std::result::Result<Option<Args>, String> {
    let mut args = Args {
        m: 16384,
        k: 16384,
        n: 4096,
        dtype: DType::F16,
        rounds: 7,
        devices: None,
        proportions: Vec::new(),
        min_speedup: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        let size = |v: String, what: &str| -> std::result::Result<usize, String> {
            match v.parse::<usize>() {
                Ok(s) if s > 0 && s <= i32::MAX as usize => Ok(s),
                _ => Err(format!("{what} {v}: a size from 1 to {}", i32::MAX)),
            }
        };
        match flag.as_str() {
            "--m" | "-m" => args.m = size(value()?, "--m")?,
            "--k" | "-k" => args.k = size(value()?, "--k")?,
            "--n" | "-n" => args.n = size(value()?, "--n")?,
            "--rounds" | "-r" => args.rounds = size(value()?, "--rounds")?,
            "--type" => {
                args.dtype = match value()?.to_ascii_lowercase().as_str() {
                    "f16" => DType::F16,
                    "bf16" => DType::BF16,
                    "f32" => DType::F32,
                    other => return Err(format!("--type {other}: f16, bf16 or f32")),
                }
            }
            "--devices" => {
                let list = value()?;
                let devices = list
                    .split(',')
                    .map(|d| d.trim().trim_start_matches("cuda").trim_start_matches("CUDA").parse::<usize>())
                    .collect::<std::result::Result<Vec<_>, _>>()
                    .map_err(|_| format!("--devices {list}: CUDA device numbers, e.g. 0,1"))?;
                args.devices = Some(devices);
            }
            "--proportions" => {
                let list = value()?;
                args.proportions = list
                    .split(',')
                    .map(|x| x.trim().parse::<f32>())
                    .collect::<std::result::Result<_, _>>()
                    .map_err(|_| format!("--proportions {list}: the share of rows of each device, e.g. 1,1"))?;
            }
            "--min-speedup" => {
                let x: f64 = value()?.parse().map_err(|e| format!("--min-speedup: {e}"))?;
                args.min_speedup = Some(x);
            }
            "-h" | "--help" => return Ok(None),
            other => return Err(format!("unknown argument '{other}' (try --help)")),
        }
    }
    Ok(Some(args))
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

/// One product graph, allocated, filled and prepared on the backend.
struct Case {
    graph: Graph,
    out: TensorId,
    program: Box<dyn Program>,
    _buffers: Vec<std::sync::Arc<dyn Buffer>>,
}

/// `y = w x`, `w` in CUDA0's memory (`split` None) or in a split buffer of `split`.
fn case(
    args: &Args,
    backend: &mut dyn Backend,
    split: Option<&'static tessera::cuda::SplitBufferType>,
    weights: &[f32],
    activations: &[f32],
) -> Result<Case> {
    let gpu = backend.device();
    let mut g = Graph::new();
    let w = g.new_tensor(args.dtype, &[args.k, args.m])?;
    let x = g.new_tensor(DType::F32, &[args.k, args.n])?;
    let y = g.mul_mat(w, x)?;
    g.build_forward(y)?;
    let mut buffers: Vec<std::sync::Arc<dyn Buffer>> = Vec::new();
    if let Some(split) = split {
        let b = split.bind_matrix(&mut g, w)?;
        outln!("  split: {b:?}");
        buffers.push(b);
    }
    buffers.extend(alloc_graph_tensors(&mut g, gpu.buffer_type())?);
    g.set_f32(w, weights)?;
    g.set_f32(x, activations)?;
    // Every result counts as read elsewhere: nothing is fused away.
    let consumers = vec![u32::MAX; g.tensors().len()];
    let program =
        backend.prepare(&SplitRef { graph: &g, nodes: 0..g.nodes().len(), consumers: &consumers, layout: 1 })?;
    Ok(Case { graph: g, out: y, program, _buffers: buffers })
}

/// One run of `c`, timed by the device between `start` and `end` on the backend's stream.
fn timed(backend: &mut dyn Backend, c: &mut Case, (start, end): (&dyn Event, &dyn Event)) -> Result<Duration> {
    backend.record_event(start)?;
    backend.run(&mut *c.program, &c.graph)?;
    backend.record_event(end)?;
    backend.synchronize()?;
    end.elapsed_since(start)?.ok_or_else(|| Error::Backend {
        backend: backend.name().into(),
        message: "its timing events gave no time".into(),
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The largest difference between `a` and `b` relative to the largest magnitude of `b`.
fn relative_difference(a: &[f32], b: &[f32]) -> f64 {
    let scale = b.iter().fold(0.0f64, |s, v| s.max(f64::from(v.abs()))).max(f64::MIN_POSITIVE);
    a.iter().zip(b).map(|(x, y)| f64::from((x - y).abs())).fold(0.0, f64::max) / scale
}

fn run(args: &Args) -> Result<ExitCode> {
    let count = CUDA_REG.device_count();
    if count == 0 {
        outln!("no CUDA device on this machine: nothing to measure");
        return Ok(ExitCode::SUCCESS);
    }
    let devices = args.devices.clone().unwrap_or_else(|| (0..count).collect());
    let compare = devices.len() >= 2;
    let devices = if compare { devices } else { devices.into_iter().take(1).collect() };
    if !compare {
        outln!(
            "{count} CUDA device(s) {}: a split needs two GPUs to be faster, so this runs the split over one device \
             (the same code path, no NCCL) to check its results, and reports no speedup",
            if args.devices.is_some() { "asked for" } else { "on this machine" }
        );
    }
    let split = split_buffer_type(&devices, &args.proportions)?;
    let gpu: &'static dyn Device = split.main_device();
    for d in split.devices() {
        outln!("{}: {}", d.name(), d.description());
    }
    let mut backend = gpu.init_backend()?;
    let flops = 2.0 * args.m as f64 * args.n as f64 * args.k as f64;
    outln!(
        "MUL_MAT {} [K={}, M={}] x f32 [K={}, N={}]: {:.2} TFLOP per product; weight on {} vs split over {}",
        args.dtype,
        args.k,
        args.m,
        args.k,
        args.n,
        flops / 1e12,
        gpu.name(),
        tessera::BufferType::name(split)
    );
    let (weights, activations) = (fill(args.k * args.m, 1), fill(args.k * args.n, 2));
    let mut one = case(args, &mut *backend, None, &weights, &activations)?;
    let mut many = case(args, &mut *backend, Some(split), &weights, &activations)?;
    drop((weights, activations));
    let (Some(start), Some(end)) = (gpu.new_timing_event()?, gpu.new_timing_event()?) else {
        return Err(Error::Backend { backend: gpu.name().into(), message: "no timing events".into() });
    };
    let events = (&*start, &*end);
    // Warm-up: cuBLAS handles, work memory, NCCL's communicators, the GPUs' clocks.
    for _ in 0..2 {
        timed(&mut *backend, &mut one, events)?;
        timed(&mut *backend, &mut many, events)?;
    }
    let (mut t_one, mut t_many, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    let tflops = |d: f64| flops / d / 1e12;
    for round in 0..args.rounds {
        // Alternate which goes first, so that neither always follows the other.
        let (a, b) = if round % 2 == 0 {
            let a = timed(&mut *backend, &mut one, events)?.as_secs_f64();
            (a, timed(&mut *backend, &mut many, events)?.as_secs_f64())
        } else {
            let b = timed(&mut *backend, &mut many, events)?.as_secs_f64();
            (timed(&mut *backend, &mut one, events)?.as_secs_f64(), b)
        };
        outln!(
            "round {round}: 1 GPU {:8.3} ms {:6.1} TFLOPS | split over {} {:8.3} ms {:6.1} TFLOPS | ratio {:.3}",
            a * 1e3,
            tflops(a),
            devices.len(),
            b * 1e3,
            tflops(b),
            a / b
        );
        t_one.push(a);
        t_many.push(b);
        ratios.push(a / b);
    }
    let (lo, hi) = ratios.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), &r| (lo.min(r), hi.max(r)));
    let (m_one, m_many, m_ratio) = (median(t_one), median(t_many), median(ratios));
    outln!(
        "median: 1 GPU {:.3} ms ({:.1} TFLOPS), split over {} {:.3} ms ({:.1} TFLOPS); ratio median {:.3} (min {:.3}, max {:.3}) over {} rounds",
        m_one * 1e3,
        tflops(m_one),
        devices.len(),
        m_many * 1e3,
        tflops(m_many),
        m_ratio,
        lo,
        hi,
        args.rounds
    );
    let (a, b) = (one.graph.get_f32(one.out)?, many.graph.get_f32(many.out)?);
    let diff = relative_difference(&b, &a);
    outln!("largest difference between the results: {diff:.3e} of the largest value (bound {BOUND:e})");
    let mut ok = true;
    if diff.is_nan() || diff > BOUND {
        eprintln!("tensor_parallel: the split result differs from the one-GPU result by {diff:e} (bound {BOUND:e})");
        ok = false;
    }
    match args.min_speedup {
        Some(x) if compare && (m_ratio.is_nan() || m_ratio < x) => {
            eprintln!("tensor_parallel: median speedup {m_ratio:.3} is below the required {x}");
            ok = false;
        }
        Some(x) if compare => outln!("median speedup {m_ratio:.3} meets the required {x}"),
        _ => {}
    }
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(Some(a)) => a,
        Ok(None) => {
            outln!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("tensor_parallel: {e}");
            return ExitCode::FAILURE;
        }
    };
    match run(&args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tensor_parallel: {e}");
            ExitCode::FAILURE
        }
    }
}
