//! Op benchmarks of a device (the CPU unless `--device` says otherwise), printed like ggml's
//! `test-backend-ops perf` so the two can be read line by line:
//!
//! ```text
//! MUL_MAT(type_a=f32,type_b=f32,m=1024,n=1024,k=1024):  74 runs - 13575.26 us/run - 2.15 GFLOP/run - 158.19 GFLOPS
//! ```
//!
//! `cargo run --release --example bench -- [-o OP] [-p FILTER] [--device|--backend NAME] [--threads N] [--kernels SET] [--time SECONDS] [--copies auto|N]`
//!
//! `-p` keeps the cases whose parameter string contains the filter, or one of its parts
//! separated by `|` (`-p 'type_a=f16,type_b=f32,m=4096,n=1,|type_a=q4_0'`).
//!
//! The device comes from the registry every program uses (`cpu`, `gpu`, a device name; the
//! CPU plugin when the built-in one is disabled with `TESSERA_DISABLE_CPU=builtin`).
//! `--kernels` picks a kernel set of the built-in CPU backend; `--threads` goes to any
//! family that takes a thread count.
//!
//! Each case runs as a prepared program after one warm-up run, until about `--time` seconds
//! (default 1) have passed, and reports the median: on a device with timing events (CUDA)
//! the median of batches of runs queued back to back, timed by the device's clock; elsewhere
//! the median of at least 3 runs (2 for cases slower than a second), each timed by the host
//! clock through a synchronize. A run of a product computes it many times, as ggml's perf mode
//! repeats the product's node in one graph (`--copies auto`: enough copies for 100 GFLOP a
//! run on a GPU, 8 on a CPU; `--copies 1` runs one product a program), each copy with its own
//! `b` and all sharing the weights; the time printed is per copy. FLOP counts are ggml's
//! (MUL_MAT: 2 m n k per matrix); bandwidth is sources plus destination bytes per run, in
//! GB/s of 2^30 bytes as ggml prints it.
//!
//! Adding an op: write a function returning its [`Case`]s and add it to [`OPS`].

#[macro_use]
#[path = "common/mod.rs"]
mod common;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use tessera::allocator::alloc_graph_tensors;
use tessera::cpu::CpuBackend;
use tessera::registry::{extension, Extension};
use tessera::{
    Backend, BinaryOp, DType, Device, Error, Event, Graph, Precision, Result, RopeMode, RopeParams, SplitRef, TensorId,
    UnaryOp,
};

/// What a case's figure of merit counts per run.
enum Work {
    /// Floating-point operations (printed as GFLOPS).
    Flops(f64),
    /// Bytes read and written (printed as GB/s), counted as ggml counts them for the op.
    Bytes(f64),
}

/// Builds a case's graph (its float leafs are filled with values in `[-spread, spread)`, its
/// I32 leafs with integers in `0..256`); returns the node that is timed.
type Build = Box<dyn Fn(&mut Graph) -> Result<TensorId>>;

/// Builds `copies` of a case's op into one graph, as ggml's `test-backend-ops perf` repeats the
/// op's node in one graph: the weights are shared, every copy has its own other inputs (so that
/// no copy reuses what another converted or quantized); returns the copies' nodes.
type Repeat = Box<dyn Fn(&mut Graph, usize) -> Result<Vec<TensorId>>>;

/// One benchmark: ggml's parameter string and a graph builder whose output node is timed.
struct Case {
    op: &'static str,
    params: String,
    build: Build,
    /// For the ops that ggml times as many copies in one graph (the products): their builder.
    repeat: Option<Repeat>,
    work: Work,
    spread: f32,
}

/// The cases of one op.
type OpCases = fn() -> Vec<Case>;

/// Every op with its cases, in ggml's perf order.
const OPS: &[(&str, OpCases)] = &[
    ("MUL_MAT", mul_mat),
    ("ADD", add),
    ("MUL", mul),
    ("SOFT_MAX", soft_max),
    ("NORM", norm),
    ("RMS_NORM", rms_norm),
    ("GELU", gelu),
    ("GELU_ERF", gelu_erf),
    ("SILU", silu),
    ("ROPE", rope),
    ("GET_ROWS", get_rows),
    ("CPY", cpy),
    ("FLASH_ATTN", flash_attn),
];

/// f32 bytes of `ne`.
fn bytes(ne: [usize; 4]) -> f64 {
    4.0 * ne.iter().product::<usize>() as f64
}

/// MUL_MAT: square products, a 4096 x 14336 weight matrix against 1 to 8 columns (batched
/// decoding) and 512, the one-column products of a 1B Llama's decoding (hidden 2048,
/// feed-forward 5632, vocabulary 32000), and a BERT layer's products over many tokens.
fn mul_mat() -> Vec<Case> {
    let mut shapes: Vec<(usize, usize, usize)> = [1024, 2048, 4096].iter().map(|&s| (s, s, s)).collect();
    shapes.extend([1, 2, 3, 4, 5, 6, 7, 8, 512].iter().map(|&n| (4096, n, 14336)));
    shapes.extend([(2048, 1, 2048), (5632, 1, 2048), (2048, 1, 5632), (32000, 1, 2048)]);
    // The products of a MiniLM layer (hidden 384, feed-forward 1536) over 1024 x 128 tokens,
    // and over 16 and 64 x 128.
    shapes.extend([(384, 131072, 384), (1536, 131072, 384), (384, 131072, 1536)]);
    shapes.extend([(384, 2048, 384), (1536, 2048, 384), (384, 8192, 384), (1536, 8192, 384)]);
    let mut cases = Vec::new();
    for (m, n, k) in shapes {
        // Every weight type (I32 is no weight type).
        for ta in DType::ALL.into_iter().filter(|&t| t != DType::I32) {
            let copies = move |g: &mut Graph, copies: usize| -> Result<Vec<TensorId>> {
                let a = g.new_tensor(ta, &[k, m])?;
                (0..copies)
                    .map(|_| {
                        let b = g.new_tensor(DType::F32, &[k, n])?;
                        g.mul_mat(a, b)
                    })
                    .collect()
            };
            cases.push(Case {
                op: "MUL_MAT",
                params: format!("type_a={ta},type_b=f32,m={m},n={n},k={k},bs=[1,1],nr=[1,1]"),
                build: Box::new(move |g| Ok(copies(g, 1)?[0])),
                repeat: Some(Box::new(copies)),
                work: Work::Flops(2.0 * (m * n * k) as f64),
                spread: 1.0,
            });
        }
    }
    cases
}

/// FLASH_ATTN over a MiniLM batch of 1024 x 128 tokens (12 heads of 32, a key mask per
/// sequence) and 16 x 128, with queries, keys and values laid out as the BERT graph's views of
/// its projections ([head_dim, tokens, heads, sequences] over [hidden, tokens, sequences]).
/// The mask holds random values like every input, no -inf: no key is skipped. Each shape in
/// full and in reduced precision (`--compute-type f16`), and in reduced precision with keys and
/// values in f16 as the BERT graph then writes them.
fn flash_attn() -> Vec<Case> {
    [(1024usize, 128usize), (16, 128)]
        .into_iter()
        .flat_map(|shape| {
            [
                (shape, Precision::Full, DType::F32),
                (shape, Precision::Reduced, DType::F32),
                (shape, Precision::Reduced, DType::F16),
            ]
        })
        .map(|((seqs, tokens), precision, kv_type)| {
            let (hd, heads) = (32usize, 12usize);
            let prec = if precision == Precision::Reduced { ",prec=reduced" } else { "" };
            Case {
                op: "FLASH_ATTN",
                params: format!("hsk=32,nh=12,kv={tokens},nb={seqs},type_kv={kv_type},mask=1{prec}"),
                build: Box::new(move |g| {
                    let head_view = |g: &mut Graph, t: DType| -> tessera::Result<TensorId> {
                        let x = g.new_tensor(t, &[hd * heads, tokens, seqs])?;
                        let x = g.reshape(x, &[hd, heads, tokens, seqs])?;
                        g.permute(x, [0, 2, 1, 3])
                    };
                    let (q, k, v) = (head_view(g, DType::F32)?, head_view(g, kv_type)?, head_view(g, kv_type)?);
                    let mask = g.new_tensor(DType::F32, &[tokens, 1, 1, seqs])?;
                    let out = g.flash_attn(q, k, v, Some(mask), 1.0 / (hd as f32).sqrt())?;
                    g.set_flash_attn_precision(out, precision)?;
                    Ok(out)
                }),
                repeat: None,
                work: Work::Flops(4.0 * (hd * tokens * tokens * heads * seqs) as f64),
                spread: 1.0,
            }
        })
        .chain(llama_prompt_attention())
        .collect()
}

/// FLASH_ATTN over a 512-token prompt of a 1B Llama (32 query heads of 64 over 8 key heads,
/// keys and values in f16 as its cache holds them, a mask row per query), in full and in
/// reduced precision.
fn llama_prompt_attention() -> impl Iterator<Item = Case> {
    [Precision::Full, Precision::Reduced].into_iter().map(|precision| {
        let (hd, heads, kv_heads, n) = (64usize, 32usize, 8usize, 512usize);
        let prec = if precision == Precision::Reduced { ",prec=reduced" } else { "" };
        Case {
            op: "FLASH_ATTN",
            params: format!("hsk={hd},nh={heads},nkv={kv_heads},n={n},kv={n},type_kv=f16,mask=1{prec}"),
            build: Box::new(move |g| {
                let q = g.new_tensor(DType::F32, &[hd, heads, n])?;
                let q = g.permute(q, [0, 2, 1, 3])?;
                let k = g.new_tensor(DType::F16, &[hd, n, kv_heads])?;
                let v = g.new_tensor(DType::F16, &[hd, n, kv_heads])?;
                let mask = g.new_tensor(DType::F32, &[n, n])?;
                let out = g.flash_attn(q, k, v, Some(mask), 1.0 / (hd as f32).sqrt())?;
                g.set_flash_attn_precision(out, precision)?;
                Ok(out)
            }),
            repeat: None,
            work: Work::Flops(4.0 * (hd * n * n * heads) as f64),
            spread: 1.0,
        }
    })
}

/// `a op b` with `b: ne` repeated `nr` times over `a`; ggml counts three times the result.
fn bin_bcast(op: BinaryOp, cases: &[([usize; 4], [usize; 4])]) -> Vec<Case> {
    cases
        .iter()
        .map(|&(ne, nr)| {
            let ne_a = [ne[0] * nr[0], ne[1] * nr[1], ne[2] * nr[2], ne[3] * nr[3]];
            Case {
                op: op.name(),
                params: format!("type=f32,ne={},nr={}", fmt_ne(ne), fmt_ne(nr)),
                build: Box::new(move |g| {
                    let (a, b) = (g.new_tensor(DType::F32, &ne_a)?, g.new_tensor(DType::F32, &ne)?);
                    g.binary(op, a, b)
                }),
                repeat: None,
                work: Work::Bytes(3.0 * bytes(ne_a)),
                spread: 1.0,
            }
        })
        .collect()
}

/// ADD as ggml's perf list has it (one row, a row broadcast over 512), plus a result too
/// big for the caches and two same-shape operands (in the caches, and past a GPU's L2).
fn add() -> Vec<Case> {
    bin_bcast(
        BinaryOp::Add,
        &[
            ([4096, 1, 1, 1], [1, 1, 1, 1]),
            ([4096, 1, 1, 1], [1, 512, 1, 1]),
            ([4096, 1, 1, 1], [1, 8192, 1, 1]),
            ([4096, 512, 1, 1], [1, 1, 1, 1]),
            ([4096, 8192, 1, 1], [1, 1, 1, 1]),
        ],
    )
}

fn mul() -> Vec<Case> {
    bin_bcast(BinaryOp::Mul, &[([4096, 1, 1, 1], [1, 512, 1, 1])])
}

/// An op of one f32 source of shape `ne` and a result of the same shape (ggml counts both).
fn one_source(
    op: &'static str,
    params: String,
    ne: [usize; 4],
    spread: f32,
    f: impl Fn(&mut Graph, TensorId) -> Result<TensorId> + 'static,
) -> Case {
    Case {
        op,
        params,
        build: Box::new(move |g| {
            let a = g.new_tensor(DType::F32, &ne)?;
            f(g, a)
        }),
        repeat: None,
        work: Work::Bytes(2.0 * bytes(ne)),
        spread,
    }
}

fn soft_max() -> Vec<Case> {
    [[4096, 4096, 5, 1], [4096, 8192, 1, 1], [1024, 1024, 10, 1], [77, 4096, 5, 1], [32768, 16, 1, 1]]
        .into_iter()
        .map(|ne| {
            one_source("SOFT_MAX", format!("type=f32,ne={},mask=0,scale=1", fmt_ne(ne)), ne, 1.0, |g, a| {
                g.soft_max(a, None, 1.0)
            })
        })
        .collect()
}

/// Shapes of the row ops: one that fits a CPU's caches, one past a GPU's L2.
const ROWS_NE: [[usize; 4]; 2] = [[4096, 512, 1, 1], [4096, 8192, 1, 1]];

fn norm() -> Vec<Case> {
    ROWS_NE
        .iter()
        .map(|&ne| {
            one_source("NORM", format!("type=f32,ne={},eps=0.000001", fmt_ne(ne)), ne, 1.0, |g, a| g.norm(a, 1e-6))
        })
        .collect()
}

fn rms_norm() -> Vec<Case> {
    ROWS_NE
        .iter()
        .map(|&ne| {
            one_source("RMS_NORM", format!("type=f32,ne={},eps=0.000001", fmt_ne(ne)), ne, 1.0, |g, a| {
                g.rms_norm(a, 1e-6)
            })
        })
        .collect()
}

/// Unary ops on inputs spread over +-150, as ggml's perf cases have them.
fn unary(op: UnaryOp) -> Vec<Case> {
    ROWS_NE
        .iter()
        .map(|&ne| {
            one_source(op.name(), format!("type=f32,ne_a={}", fmt_ne(ne)), ne, 150.0, move |g, a| g.unary(op, a))
        })
        .collect()
}

fn gelu() -> Vec<Case> {
    unary(UnaryOp::Gelu)
}

fn gelu_erf() -> Vec<Case> {
    unary(UnaryOp::GeluErf)
}

fn silu() -> Vec<Case> {
    unary(UnaryOp::Silu)
}

/// ROPE as in ggml's perf list (llama 7B and a NeoX model, 512 positions); ggml counts the
/// source, the positions and the result.
fn rope() -> Vec<Case> {
    [
        ([128, 32, 512, 1], 128, RopeMode::Normal),
        ([128, 64, 512, 1], 128, RopeMode::Normal),
        ([64, 8, 512, 1], 64, RopeMode::Neox),
    ]
    .into_iter()
    .map(|(ne, n_dims, mode)| Case {
        op: "ROPE",
        params: format!(
            "type=f32,ne_a={},n_dims={n_dims},mode={}",
            fmt_ne(ne),
            if mode == RopeMode::Neox { 2 } else { 0 }
        ),
        build: Box::new(move |g| {
            let a = g.new_tensor(DType::F32, &ne)?;
            let pos = g.new_tensor(DType::I32, &[ne[2]])?;
            g.rope(a, pos, RopeParams { mode, n_dims, freq_base: 10000.0, freq_scale: 1.0 })
        }),
        repeat: None,
        work: Work::Bytes(2.0 * bytes(ne) + 4.0 * ne[2] as f64),
        spread: 1.0,
    })
    .collect()
}

/// 512 rows of a 4096 x 4096 matrix; ggml counts the whole matrix, the indices and the result.
fn get_rows() -> Vec<Case> {
    [DType::Q8_0, DType::F32]
        .into_iter()
        .map(|t| {
            let (n, m, r) = (4096usize, 4096usize, 512usize);
            let matrix = (n * m / t.block_len() * t.block_bytes()) as f64;
            Case {
                op: "GET_ROWS",
                params: format!("type={t},n={n},m={m},r={r}"),
                build: Box::new(move |g| {
                    let a = g.new_tensor(t, &[n, m])?;
                    let rows = g.new_tensor(DType::I32, &[r])?;
                    g.get_rows(a, rows)
                }),
                repeat: None,
                work: Work::Bytes(matrix + 4.0 * r as f64 + bytes([n, r, 1, 1])),
                spread: 1.0,
            }
        })
        .collect()
}

/// CPY between same-shape tensors, converting: f32 to f16, f32 to q4_0 and back.
fn cpy() -> Vec<Case> {
    [
        (DType::F32, DType::F16, [512, 3072, 1, 1]),
        (DType::F32, DType::Q4_0, [8192, 512, 2, 1]),
        (DType::Q4_0, DType::F32, [8192, 512, 2, 1]),
    ]
    .into_iter()
    .map(|(ts, td, ne)| {
        let n = ne.iter().product::<usize>();
        let size = |t: DType| (n / t.block_len() * t.block_bytes()) as f64;
        Case {
            op: "CPY",
            params: format!("type_src={ts},type_dst={td},ne_src={}", fmt_ne(ne)),
            build: Box::new(move |g| {
                let (a, b) = (g.new_tensor(ts, &ne)?, g.new_tensor(td, &ne)?);
                g.cpy(a, b)
            }),
            repeat: None,
            work: Work::Bytes(size(ts) + size(td)),
            spread: 1.0,
        }
    })
    .collect()
}

fn fmt_ne(ne: [usize; 4]) -> String {
    format!("[{},{},{},{}]", ne[0], ne[1], ne[2], ne[3])
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

/// How many copies of a product one run computes (`--copies`).
#[derive(Clone, Copy)]
enum Copies {
    /// As ggml's `test-backend-ops perf` does: enough for 100 GFLOP a run on a device with
    /// timing events (a GPU), 8 on others, plus one; at most [`MAX_COPIES`].
    Auto,
    Fixed(usize),
}

/// Most copies of a product in one run (ggml's graphs hold 8192 nodes).
const MAX_COPIES: usize = 1024;

impl Copies {
    fn of(self, case: &Case, timed_on_device: bool) -> usize {
        let target = if timed_on_device { 100e9 } else { 8e9 };
        match (self, &case.repeat, &case.work) {
            (_, None, _) => 1,
            (Copies::Fixed(n), Some(_), _) => n,
            (Copies::Auto, Some(_), Work::Flops(flops)) => ((target / flops) as usize).min(MAX_COPIES - 1) + 1,
            (Copies::Auto, Some(_), Work::Bytes(_)) => 1,
        }
    }
}

fn run_case(case: &Case, backend: &mut dyn Backend, budget: Duration, copies: Copies) -> Result<Timing> {
    let mut g = Graph::new();
    let timed_on_device = backend.device().new_timing_event()?.is_some();
    let outs = match (&case.repeat, copies.of(case, timed_on_device)) {
        (Some(repeat), n) if n > 1 => repeat(&mut g, n)?,
        _ => vec![(case.build)(&mut g)?],
    };
    for &out in &outs {
        g.build_forward(out)?;
    }
    alloc_graph_tensors(&mut g, backend.device().buffer_type())?;
    for (i, &leaf) in g.leafs().to_vec().iter().enumerate() {
        let t = g.tensor(leaf)?;
        let n = t.nelements();
        if t.dtype() == DType::I32 {
            let ints: Vec<i32> = fill(n, i as u64 + 1).iter().map(|v| ((v + 1.0) * 128.0) as i32 % 256).collect();
            g.set_i32(leaf, &ints)?;
        } else {
            let values: Vec<f32> = fill(n, i as u64 + 1).iter().map(|v| v * case.spread).collect();
            g.set_f32(leaf, &values)?;
        }
    }
    // The graph runs as the scheduler runs a split: a program prepared once (a CUDA graph on
    // CUDA), replayed. Every result counts as read elsewhere, so nothing is fused away.
    let consumers = vec![u32::MAX; g.tensors().len()];
    let mut program =
        backend.prepare(&SplitRef { graph: &g, nodes: 0..g.nodes().len(), consumers: &consumers, layout: 1 })?;
    let mut run = |backend: &mut dyn Backend| backend.run(&mut *program, &g);
    run(backend)?; // warm-up: work memory, threads, page faults, the GPU's clocks
    backend.synchronize()?;
    let device = backend.device();
    let timing = match (device.new_timing_event()?, device.new_timing_event()?) {
        (Some(start), Some(end)) => time_on_device(&mut run, backend, (&*start, &*end), budget)?,
        _ => time_on_host(&mut run, backend, budget)?,
    };
    // Per copy of the op, as ggml divides its time by the nodes it repeated.
    let n = outs.len();
    Ok(Timing { runs: timing.runs * n, median: timing.median / n as u32 })
}

/// Each run timed by the host clock around the run and a synchronize; the median run.
fn time_on_host(
    run: &mut dyn FnMut(&mut dyn Backend) -> Result<()>,
    backend: &mut dyn Backend,
    budget: Duration,
) -> Result<Timing> {
    let mut times = Vec::new();
    let start = Instant::now();
    while times.len() < 3 || start.elapsed() < budget {
        let t = Instant::now();
        run(backend)?;
        backend.synchronize()?;
        times.push(t.elapsed());
        if times.len() >= 2 && start.elapsed() > budget && times[0] > budget {
            break;
        }
    }
    Ok(Timing { runs: times.len(), median: median(times) })
}

/// Batches of runs queued back to back between two timing events, timed by the device's
/// own clock (as ggml times a GPU); a batch is long enough (about a twentieth of the
/// budget, at most 1000 runs) that the host's launch cost hides behind the work. The median
/// of the batches' time per run.
fn time_on_device(
    run: &mut dyn FnMut(&mut dyn Backend) -> Result<()>,
    backend: &mut dyn Backend,
    (start, end): (&dyn Event, &dyn Event),
    budget: Duration,
) -> Result<Timing> {
    let mut batch = |backend: &mut dyn Backend, reps: u32| -> Result<Duration> {
        backend.record_event(start)?;
        for _ in 0..reps {
            run(backend)?;
        }
        backend.record_event(end)?;
        let elapsed = end.elapsed_since(start)?.ok_or_else(|| Error::Backend {
            backend: backend.name().into(),
            message: "its timing events gave no time".into(),
        })?;
        Ok(elapsed / reps)
    };
    let one = batch(backend, 1)?.as_secs_f64().max(1e-7);
    let reps = (budget.as_secs_f64() / 20.0 / one).clamp(1.0, 1000.0) as u32;
    let (mut times, mut runs) = (Vec::new(), 0);
    let clock = Instant::now();
    while times.len() < 3 || clock.elapsed() < budget {
        times.push(batch(backend, reps)?);
        runs += reps as usize;
    }
    Ok(Timing { runs, median: median(times) })
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
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
    outln!("{head:<90} {:8} runs - {us:10.2} us/run - {rate}", t.runs);
}

struct Args {
    op: Option<String>,
    filter: Option<String>,
    device: String,
    threads: Option<usize>,
    kernels: Option<String>,
    budget: Duration,
    copies: Copies,
}

const USAGE: &str =
    "usage: bench [-o OP] [-p FILTER] [--device|--backend NAME] [--threads N] [--kernels SET] [--time SECONDS] [--copies auto|N]";

/// The arguments, or `None` for `--help`.
fn parse_args() -> std::result::Result<Option<Args>, String> {
    let mut args = Args {
        op: None,
        filter: None,
        device: "cpu".into(),
        threads: None,
        kernels: None,
        budget: Duration::from_secs(1),
        copies: Copies::Auto,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "-o" => args.op = Some(value()?),
            "-p" => args.filter = Some(value()?),
            "--device" | "-d" | "--backend" => args.device = value()?,
            "--threads" | "-t" => {
                let count = tessera::runtime::threads::parse_threads(&value()?)?;
                if let Some(notice) = count.notice {
                    eprintln!("bench: {notice}");
                }
                args.threads = Some(count.threads);
            }
            "--kernels" => args.kernels = Some(value()?),
            "--time" => {
                let s: f64 = value()?.parse().map_err(|e| format!("--time: {e}"))?;
                if !(s > 0.0 && s <= 3600.0) {
                    return Err(format!("--time {s}: seconds per case, more than 0 and at most 3600"));
                }
                args.budget = Duration::from_secs_f64(s);
            }
            "--copies" => {
                let v = value()?;
                args.copies = match v.as_str() {
                    "auto" => Copies::Auto,
                    n => match n.parse::<usize>() {
                        Ok(n) if (1..=MAX_COPIES).contains(&n) => Copies::Fixed(n),
                        _ => return Err(format!("--copies {v}: `auto` or a count from 1 to {MAX_COPIES}")),
                    },
                };
            }
            "-h" | "--help" => return Ok(None),
            other => return Err(format!("unknown argument '{other}' (try --help)")),
        }
    }
    Ok(Some(args))
}

/// The backend under test on the device `--device` names, and a line that says what it is.
/// The built-in CPU gets the kernel set and thread count asked for; another device the thread
/// count through its family's `set_n_threads`, if it has one.
fn backend(args: &Args) -> std::result::Result<(Box<dyn Backend>, String), String> {
    let threads = args.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let registry = tessera::discover();
    common::report_plugins(registry);
    let device = registry.select(Some(&args.device)).map_err(|e| e.to_string())?;
    let origin = registry.entry_of(device).map_or_else(String::new, |e| e.origin().to_string());
    let head = format!("Backend {}: {} ({origin}", device.name(), device.description());
    if std::ptr::addr_eq(device as *const dyn Device, &tessera::cpu::CPU_DEVICE as *const dyn Device) {
        let cpu = match &args.kernels {
            Some(set) => CpuBackend::with_kernels(set, threads).map_err(|e| e.to_string())?,
            None => CpuBackend::with_threads(threads),
        };
        let header = format!("{head}, {} kernels, {} threads)", cpu.kernel_set(), cpu.threads());
        return Ok((Box::new(cpu), header));
    }
    if let Some(set) = &args.kernels {
        return Err(format!(
            "--kernels {set}: kernel sets are the built-in CPU backend's; {} is {origin}",
            device.name()
        ));
    }
    let mut backend = device.init_backend().map_err(|e| e.to_string())?;
    let header = match device.reg().extension(extension::SET_THREADS) {
        Some(Extension::SetThreads(set_threads)) => {
            set_threads(&mut *backend, threads).map_err(|e| e.to_string())?;
            format!("{head}, {threads} threads)")
        }
        _ => format!("{head})"),
    };
    Ok((backend, header))
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(Some(a)) => a,
        Ok(None) => {
            outln!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("bench: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (mut backend, header) = match backend(&args) {
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
    let clock = match backend.device().new_timing_event() {
        Ok(Some(_)) => "timed by the device's events",
        _ => "timed by the host clock",
    };
    outln!("{header}, {clock}");
    for (name, cases) in OPS {
        if args.op.as_ref().is_some_and(|op| !op.eq_ignore_ascii_case(name)) {
            continue;
        }
        for case in cases() {
            if args.filter.as_ref().is_some_and(|f| !f.split('|').any(|part| case.params.contains(part))) {
                continue;
            }
            match run_case(&case, &mut *backend, args.budget, args.copies) {
                Ok(t) => print_line(&case, &t),
                Err(e) => outln!("  {}({}): failed: {e}", case.op, case.params),
            }
        }
    }
    ExitCode::SUCCESS
}
