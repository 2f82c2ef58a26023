//! Scheduler conformance: every conformance graph, alone or extended by a short random tail
//! of ops (so that plans have several splits), is scheduled over one or two simulated
//! accelerators and the CPU with random op and type support, buffer caps, weights in device
//! or host memory, user inputs, pins and pipeline copies. Every run must compute bitwise what
//! the CPU alone computes (the simulated devices run the CPU kernels on their own memory),
//! and every plan must satisfy the scheduler's invariants:
//!
//! - every node runs on a backend whose device supports it;
//! - every node reads its sources, and writes its result, in memory its backend can use (what
//!   it could not use was copied in);
//! - no tensor is copied to the same backend twice, and every input comes from where it lives;
//! - the splits cover the scheduled nodes in order, each user node exactly once;
//! - the allocation of the scheduled graph passes `check_allocation`.
//!
//! `TESSERA_CONFORMANCE_FILTER` narrows the cases, `TESSERA_SCHED_CONFIGS` sets the number of
//! configurations per case.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "conformance/mod.rs"]
mod conformance;

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Instant;

use conformance::rng::Rng;
use conformance::runner::{generate, selected_cases, Values};
use conformance::{Case, Init};
use tessera::allocator::{alloc_graph_tensors, alloc_tensors};
use tessera::cpu::CpuBackend;
use tessera::host_buffer::HOST_BUFFER_TYPE;
use tessera::sched::check::check_plan;
use tessera::{
    Backend, Buffer, BufferType, BufferUsage, DType, Device, Error, Graph, Op, Scheduler, SchedulerOptions, TensorId,
};
use tessera_sim::{SimConfig, SimDevice};

/// Configurations per case (the first one of each case runs the bare conformance graph); the
/// whole file takes about 3 s in the test profile.
const CONFIGS_PER_CASE: usize = 32;

/// Failures printed in full (each with its configuration and plan).
const MAX_PRINTED: usize = 30;

/// The case graph, its tail, the values of its leafs and what the CPU alone computes.
struct Built {
    /// Not bound to memory; the outputs are flagged OUTPUT.
    graph: Graph,
    /// The case's output, then the end of the tail (if there is one).
    outputs: Vec<TensorId>,
    /// Ops added after the case's op.
    tail: usize,
    values: Vec<(TensorId, Values)>,
    reference: Vec<Vec<u8>>,
}

fn shape_divides(small: [usize; 4], big: [usize; 4]) -> bool {
    (0..4).all(|i| small[i] != 0 && big[i] % small[i] == 0)
}

/// One op after `t` (the tail so far is `history`); new leafs are added to `inits`.
fn tail_step(
    g: &mut Graph,
    t: TensorId,
    history: &[TensorId],
    inits: &mut Vec<(TensorId, Init)>,
    rng: &mut Rng,
) -> tessera::Result<TensorId> {
    let tt = g.tensor(t)?;
    let (dtype, ne, rows_contiguous) = (tt.dtype(), tt.ne(), tt.rows_contiguous());
    if dtype.is_quantized() {
        return g.cast(t, DType::F32);
    }
    if dtype == DType::I32 {
        return match rng.below(3) {
            0 => g.cont(t),
            1 => g.concat(t, t, rng.below(2)),
            _ if !rows_contiguous => g.cont(t),
            _ => {
                let idx = g.new_tensor(DType::I32, &[3, ne[2], ne[3], 1])?;
                inits.push((idx, Init::Ints(0, ne[1] as i32)));
                g.get_rows(t, idx)
            }
        };
    }
    match rng.below(10) {
        0 => g.scale(t, 0.5),
        1 => g.neg(t),
        2 => g.tanh(t),
        3 => {
            // A binary op with an earlier float tensor that repeats over `t`.
            let others: Vec<TensorId> = history
                .iter()
                .copied()
                .filter(|&p| g.tensor(p).is_ok_and(|pt| pt.dtype().is_float() && shape_divides(pt.ne(), ne)))
                .collect();
            let p = others[rng.below(others.len())];
            let op = [tessera::BinaryOp::Add, tessera::BinaryOp::Sub, tessera::BinaryOp::Mul][rng.below(3)];
            g.binary(op, t, p)
        }
        4 => {
            let w = g.new_tensor(DType::F32, &[ne[0], 1, 1, 1])?;
            inits.push((w, Init::DEFAULT));
            g.mul(t, w)
        }
        5 => {
            let tr = g.transpose(t)?;
            g.cont(tr)
        }
        6 => g.soft_max(t, None, 1.0),
        7 => g.rms_norm(t, 1e-6),
        8 => {
            let to = [DType::F32, DType::F16, DType::BF16].into_iter().filter(|&d| d != dtype).nth(rng.below(2));
            g.cast(t, to.unwrap_or(DType::F32))
        }
        _ if rows_contiguous && ne[1] * ne[1] * ne[2] * ne[3] <= 1 << 14 => {
            let b = if dtype == DType::F32 { t } else { g.cast(t, DType::F32)? };
            g.mul_mat(t, b)
        }
        _ => g.scale(t, -2.0),
    }
}

fn write_values(g: &Graph, values: &[(TensorId, Values)]) -> tessera::Result<()> {
    for (id, v) in values {
        match v {
            Values::F32(v) => g.set_f32(*id, v)?,
            Values::I32(v) => g.set_i32(*id, v)?,
        }
    }
    Ok(())
}

fn bytes_of(g: &Graph, id: TensorId) -> tessera::Result<Vec<u8>> {
    let mut out = vec![0u8; g.tensor(id)?.nbytes()];
    g.get_bytes(id, 0, &mut out)?;
    Ok(out)
}

/// Builds the case graph with a tail of up to `tail_len` ops and computes it on the CPU.
fn build(case: &Case, tail_len: usize, rng: &mut Rng) -> tessera::Result<Built> {
    let (cg, out) = case.build()?;
    let mut inits: Vec<(TensorId, Init)> = cg.leafs().iter().map(|&id| (id, cg.init_of(id))).collect();
    let (mut g, _) = cg.into_parts();
    let mut history = vec![out];
    let mut t = out;
    for _ in 0..tail_len {
        t = tail_step(&mut g, t, &history, &mut inits, rng)?;
        history.push(t);
    }
    g.set_output(out)?;
    let mut outputs = vec![out];
    if t != out {
        g.set_output(t)?;
        g.build_forward(t)?;
        outputs.push(t);
    }
    let mut values = Vec::new();
    for (stream, &(id, init)) in inits.iter().enumerate() {
        let lt = g.tensor(id)?;
        let mut r = Rng::seeded(&case.name, stream as u64);
        values.push((id, generate(lt.dtype(), lt.nelements(), lt.ne()[0], init, &mut r)));
    }
    let mut reference_graph = g.clone();
    alloc_graph_tensors(&mut reference_graph, &HOST_BUFFER_TYPE)?;
    write_values(&reference_graph, &values)?;
    // The reference kernels: the simulated accelerators and the scheduled CPU run them too.
    CpuBackend::reference().compute_graph(&reference_graph)?;
    let reference = outputs.iter().map(|&o| bytes_of(&reference_graph, o)).collect::<tessera::Result<_>>()?;
    Ok(Built { graph: g, outputs, tail: history.len() - 1, values, reference })
}

/// What one simulated device can do.
#[derive(Clone, Debug)]
struct SimSpec {
    unsupported_ops: Vec<&'static str>,
    unsupported_types: Vec<DType>,
    max_buffer: Option<usize>,
    events: bool,
    offload: bool,
}

/// Where a leaf is bound before scheduling.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Home {
    Sim(usize),
    Host,
}

/// One scheduling configuration.
#[derive(Clone, Debug)]
struct Config {
    sims: Vec<SimSpec>,
    /// Leafs bound as weights before scheduling.
    weights: Vec<(TensorId, Home)>,
    /// Leafs flagged INPUT.
    inputs: Vec<TensorId>,
    /// (tensor, backend) pins; backends are the sims in order, then the CPU.
    pins: Vec<(TensorId, usize)>,
    n_copies: usize,
    op_offload: bool,
}

const TYPE_MASKS: [&[DType]; 5] =
    [&[DType::Q4_0], &[DType::F16], &[DType::Q4_0, DType::Q8_0], &[DType::BF16], &[DType::F16, DType::BF16]];

fn aligned(n: usize) -> usize {
    n.div_ceil(64) * 64
}

/// A random configuration for `b` (pins are drawn later, once the devices exist).
fn random_config(case: &Case, b: &Built, rng: &mut Rng) -> Config {
    let g = &b.graph;
    let mut ops: Vec<&'static str> = Vec::new();
    for &n in g.nodes() {
        let t = g.tensor(n).unwrap();
        if !t.op().is_view() && !ops.contains(&t.op().name()) {
            ops.push(t.op().name());
        }
    }
    let largest =
        g.tensors().iter().filter(|t| t.view_src().is_none()).map(|t| aligned(t.nbytes())).max().unwrap_or(64);
    let n_sims = 1 + rng.below(2);
    // Sometimes no sim can run the case's op: it must fall back to the CPU.
    let case_op_on_cpu = rng.below(4) == 0;
    let mut n_copies = match rng.below(8) {
        0 | 1 => 2,
        2 => 4,
        _ => 1,
    };
    let sims: Vec<SimSpec> = (0..n_sims)
        .map(|_| {
            let mut unsupported_ops: Vec<&'static str> = match rng.below(5) {
                0 => Vec::new(),
                _ => ops.iter().copied().filter(|_| rng.below(10) < 3).collect(),
            };
            if case_op_on_cpu && !unsupported_ops.contains(&case.op) {
                unsupported_ops.push(case.op);
            }
            let unsupported_types =
                if rng.below(10) < 3 { TYPE_MASKS[rng.below(TYPE_MASKS.len())].to_vec() } else { Vec::new() };
            let max_buffer = match rng.below(10) {
                0..=2 => Some(largest.max(64) * 2),
                3 | 4 => Some((largest * 2).max(4096)),
                _ => None,
            };
            SimSpec {
                unsupported_ops,
                unsupported_types,
                max_buffer,
                events: rng.below(3) != 0,
                offload: rng.below(2) == 0,
            }
        })
        .collect();
    if sims.iter().any(|s| s.max_buffer == Some(largest.max(64) * 2)) {
        // The tightest cap with four copies of every input may need more chunks than allowed.
        n_copies = n_copies.min(2);
    }
    let leafs: Vec<TensorId> = g.leafs().to_vec();
    let mut weights = Vec::new();
    if rng.below(10) < 4 {
        for &l in &leafs {
            if rng.below(2) == 0 {
                let home = if rng.below(5) == 0 { Home::Host } else { Home::Sim(rng.below(n_sims)) };
                weights.push((l, home));
            }
        }
    }
    let mut inputs = Vec::new();
    if rng.below(10) < 4 {
        inputs = leafs.iter().copied().filter(|l| !weights.iter().any(|w| w.0 == *l) && rng.below(2) == 0).collect();
    }
    let op_offload = weights.iter().any(|w| w.1 == Home::Host) && rng.below(2) == 0;
    Config { sims, weights, inputs, pins: Vec::new(), n_copies, op_offload }
}

/// Pins a random node (sometimes two) to a backend that supports it, and sometimes a leaf.
/// Pins never contradict each other or an INPUT flag: a node writing into the memory of a
/// leaf (CPY) is not pinned when that leaf is an input, and a leaf is not pinned away from a
/// pinned node writing into it.
fn random_pins(g: &Graph, cfg: &Config, devices: &[&'static dyn Device], rng: &mut Rng) -> Vec<(TensorId, usize)> {
    let mut pins: Vec<(TensorId, usize)> = Vec::new();
    let writes_into = |n: TensorId| g.tensor(n).ok().and_then(|t| if t.op().is_view() { None } else { t.view_src() });
    let candidates: Vec<TensorId> = g
        .nodes()
        .iter()
        .copied()
        .filter(|&n| g.tensor(n).is_ok_and(|t| !t.op().is_view()))
        .filter(|&n| writes_into(n).is_none_or(|r| g.data(r).is_none() && !cfg.inputs.contains(&r)))
        .collect();
    if candidates.is_empty() || rng.below(10) >= 4 {
        return pins;
    }
    for _ in 0..1 + rng.below(2) {
        let n = candidates[rng.below(candidates.len())];
        let able: Vec<usize> = (0..devices.len()).filter(|&b| devices[b].supports_op(g, n)).collect();
        if !able.is_empty() && !pins.iter().any(|p| p.0 == n) {
            pins.push((n, able[rng.below(able.len())]));
        }
    }
    if rng.below(4) == 0 {
        let free: Vec<TensorId> =
            g.leafs().iter().copied().filter(|&l| !cfg.weights.iter().any(|w| w.0 == l)).collect();
        if !free.is_empty() {
            let (leaf, b) = (free[rng.below(free.len())], rng.below(devices.len()));
            let contradicts = pins.iter().any(|&(n, nb)| nb != b && writes_into(n) == Some(leaf));
            if !contradicts {
                pins.push((leaf, b));
            }
        }
    }
    pins
}

/// Counts over all runs.
#[derive(Default, Debug)]
struct Totals {
    runs: usize,
    computes: usize,
    splits: usize,
    copies: usize,
    mismatches: usize,
    violations: usize,
    errors: usize,
    max_splits: usize,
    runs_3_splits: usize,
    multi_backend_runs: usize,
    multi_chunk_runs: usize,
    capped_runs: usize,
    weight_runs: usize,
    pinned_runs: usize,
    pipelined_runs: usize,
    expected_no_backend: usize,
    case_op_on_sim: usize,
    case_op_on_cpu: usize,
    tails: usize,
}

/// Whether planning must fail with `NoBackend`: a node writes into memory (the view it writes,
/// as CPY does) that is placed, bound or pinned by the user, where no backend able to run the
/// node can use it.
fn no_backend_expected(g: &Graph, devices: &[&'static dyn Device], pins: &[(TensorId, usize)]) -> bool {
    g.nodes().iter().any(|&n| {
        let t = g.tensor(n).unwrap();
        if t.op() == Op::None || t.op().is_view() {
            return false;
        }
        let Some(root) = t.view_src() else { return false };
        let placed: Option<&dyn BufferType> = match g.data(root) {
            Some(d) => Some(d.buffer.buffer_type()),
            None => pins.iter().find(|p| p.0 == root).map(|p| devices[p.1].buffer_type()),
        };
        placed.is_some_and(|bt| !devices.iter().any(|dev| dev.supports_buffer_type(bt) && dev.supports_op(g, n)))
    })
}

fn buffer_key(b: &Arc<dyn Buffer>) -> usize {
    Arc::as_ptr(b) as *const () as usize
}

fn describe(cfg: &Config) -> String {
    let mut s = String::new();
    for (k, sim) in cfg.sims.iter().enumerate() {
        let _ = write!(
            s,
            "SIM{k}: unsupported ops {:?}, types {:?}, cap {:?}, events {}, offload {}; ",
            sim.unsupported_ops,
            sim.unsupported_types.iter().map(|d| d.name()).collect::<Vec<_>>(),
            sim.max_buffer,
            sim.events,
            sim.offload
        );
    }
    let backend = |b: usize| if b < cfg.sims.len() { format!("SIM{b}") } else { "CPU".to_string() };
    let _ = write!(
        s,
        "weights {:?}, inputs {:?}, pins {:?}, n_copies {}, op_offload {}",
        cfg.weights.iter().map(|(t, h)| (t.0, *h)).collect::<Vec<_>>(),
        cfg.inputs.iter().map(|t| t.0).collect::<Vec<_>>(),
        cfg.pins.iter().map(|&(t, b)| (t.0, backend(b))).collect::<Vec<_>>(),
        cfg.n_copies,
        cfg.op_offload
    );
    s
}

fn run_config(
    case: &Case,
    built: &Built,
    cfg: &mut Config,
    rng: &mut Rng,
    totals: &mut Totals,
    failures: &mut Vec<String>,
) -> Result<(), String> {
    let sims: Vec<&'static SimDevice> = cfg
        .sims
        .iter()
        .enumerate()
        .map(|(k, s)| {
            let mut c = SimConfig::new(&format!("SIM{k}"));
            c.unsupported_ops = s.unsupported_ops.clone();
            c.unsupported_types = s.unsupported_types.clone();
            c.max_buffer = s.max_buffer.unwrap_or(usize::MAX);
            c.events = s.events;
            c.offload_min_batch = s.offload.then_some(1);
            SimDevice::create(c)
        })
        .collect();
    let cpu_device = CpuBackend::new().device();
    let mut devices: Vec<&'static dyn Device> = sims.iter().map(|&s| s as &'static dyn Device).collect();
    devices.push(cpu_device);

    let mut g = built.graph.clone();
    for &i in &cfg.inputs {
        g.set_input(i).unwrap();
    }
    for (k, &sim) in sims.iter().enumerate() {
        let ids: Vec<TensorId> = cfg.weights.iter().filter(|w| w.1 == Home::Sim(k)).map(|w| w.0).collect();
        let bt: &'static dyn BufferType = sim.buffer_type();
        for buffer in alloc_tensors(&mut g, &ids, bt).map_err(|e| format!("binding weights to {}: {e}", sim.name()))? {
            buffer.set_usage(BufferUsage::Weights);
        }
    }
    let host: Vec<TensorId> = cfg.weights.iter().filter(|w| w.1 == Home::Host).map(|w| w.0).collect();
    for buffer in alloc_tensors(&mut g, &host, &HOST_BUFFER_TYPE).map_err(|e| format!("binding host weights: {e}"))? {
        buffer.set_usage(BufferUsage::Weights);
    }
    cfg.pins = random_pins(&g, cfg, &devices, rng);
    let expect_no_backend = no_backend_expected(&g, &devices, &cfg.pins);

    let mut backends: Vec<Box<dyn Backend>> = sims.iter().map(|s| s.init_backend().unwrap()).collect();
    backends.push(Box::new(CpuBackend::reference()));
    let options = SchedulerOptions { n_copies: cfg.n_copies, op_offload: cfg.op_offload };
    let mut sched: Scheduler = Scheduler::new(backends, options).map_err(|e| format!("Scheduler::new: {e}"))?;
    for &(t, b) in &cfg.pins {
        sched.set_tensor_backend(t, b).map_err(|e| format!("set_tensor_backend: {e}"))?;
    }

    totals.runs += 1;
    let rounds = if cfg.n_copies > 1 { 2 } else { 1 };
    for round in 0..rounds {
        let plan = match sched.alloc_graph(&g) {
            Ok(p) => p.clone(),
            Err(Error::NoBackend { .. }) if expect_no_backend => {
                totals.expected_no_backend += 1;
                return Ok(());
            }
            Err(e) => return Err(format!("alloc_graph (round {round}): {e}")),
        };
        if expect_no_backend {
            return Err("alloc_graph succeeded where a node's memory is usable by no backend able to run it".into());
        }
        let sg = sched.graph().expect("a planned graph");
        let violations = check_plan(&plan, sg, &g, &devices).unwrap();
        if !violations.is_empty() {
            totals.violations += violations.len();
            failures.push(format!(
                "VIOLATION {} [{}] round {round}:\n    {}\n{}",
                case.name,
                describe(cfg),
                violations.join("\n    "),
                plan.detailed()
            ));
        }
        // Statistics (first round only).
        if round == 0 {
            totals.splits += plan.splits.len();
            totals.copies += plan.n_input_copies();
            totals.max_splits = totals.max_splits.max(plan.splits.len());
            totals.runs_3_splits += usize::from(plan.splits.len() >= 3);
            let backends_used: BTreeSet<usize> = plan.splits.iter().map(|s| s.backend).collect();
            totals.multi_backend_runs += usize::from(backends_used.len() >= 2);
            let case_out = built.outputs[0];
            if let Some(a) = plan.assignments.iter().find(|a| a.tensor == case_out) {
                if a.backend + 1 == devices.len() {
                    totals.case_op_on_cpu += 1;
                } else {
                    totals.case_op_on_sim += 1;
                }
            }
            let mut multi_chunk = false;
            for (k, sim) in sims.iter().enumerate() {
                let bt = sim.buffer_type();
                let mut compute: BTreeSet<usize> = BTreeSet::new();
                for t in sg.tensors() {
                    let Some(d) = t.data() else { continue };
                    if !tessera::buffer::same_buffer_type(d.buffer.buffer_type(), bt) {
                        continue;
                    }
                    if let Some(cap) = cfg.sims[k].max_buffer {
                        if d.buffer.size() > cap {
                            totals.violations += 1;
                            failures.push(format!(
                                "VIOLATION {}: a {} buffer of {} bytes exceeds the cap of {cap}",
                                case.name,
                                sim.name(),
                                d.buffer.size()
                            ));
                        }
                    }
                    if d.buffer.usage() == BufferUsage::Compute {
                        compute.insert(buffer_key(&d.buffer));
                    }
                }
                multi_chunk |= compute.len() >= 2;
            }
            totals.multi_chunk_runs += usize::from(multi_chunk);
        }

        write_values(sg, &built.values).map_err(|e| format!("setting the leafs (round {round}): {e}"))?;
        sched.compute().map_err(|e| format!("compute (round {round}): {e}\n{}", plan.detailed()))?;
        totals.computes += 1;
        let sg = sched.graph().expect("a planned graph");
        for (k, &out) in built.outputs.iter().enumerate() {
            let got = bytes_of(sg, out).map_err(|e| format!("reading output {k}: {e}"))?;
            let want = &built.reference[k];
            if got != *want {
                totals.mismatches += 1;
                let first = got.iter().zip(want).position(|(a, b)| a != b).unwrap_or(0);
                let differing = got.iter().zip(want).filter(|(a, b)| a != b).count();
                failures.push(format!(
                    "MISMATCH {} [{}] round {round}: output '{}' ({}): {differing} of {} bytes differ, first at byte {first} (got {:#04x}, expected {:#04x})\n{}",
                    case.name,
                    describe(cfg),
                    sg.label(out),
                    if k == 0 { "the case's" } else { "the tail's" },
                    want.len(),
                    got.get(first).copied().unwrap_or(0),
                    want.get(first).copied().unwrap_or(0),
                    plan.detailed()
                ));
            }
        }
    }
    Ok(())
}

#[test]
fn scheduled_runs_match_the_cpu_bitwise_and_plans_keep_their_invariants() {
    let start = Instant::now();
    let cases = selected_cases();
    let configs: usize =
        std::env::var("TESSERA_SCHED_CONFIGS").ok().and_then(|v| v.parse().ok()).unwrap_or(CONFIGS_PER_CASE);
    let mut totals = Totals::default();
    let mut failures: Vec<String> = Vec::new();
    for case in &cases {
        for c in 0..configs {
            let mut rng = Rng::seeded(&case.name, 0x5c4e_d000 + c as u64);
            // The first configuration runs the bare conformance graph.
            let tail_len = if c == 0 { 0 } else { 1 + rng.below(4) };
            let built = match build(case, tail_len, &mut rng) {
                Ok(b) => b,
                Err(e) => {
                    totals.errors += 1;
                    failures
                        .push(format!("ERROR {} (config {c}): building the graph or its reference: {e}", case.name));
                    continue;
                }
            };
            totals.tails += usize::from(built.tail > 0);
            let mut cfg = random_config(case, &built, &mut rng);
            totals.capped_runs += usize::from(cfg.sims.iter().any(|s| s.max_buffer.is_some()));
            totals.weight_runs += usize::from(!cfg.weights.is_empty());
            totals.pipelined_runs += usize::from(cfg.n_copies > 1);
            if let Err(e) = run_config(case, &built, &mut cfg, &mut rng, &mut totals, &mut failures) {
                totals.errors += 1;
                failures.push(format!("ERROR {} (config {c}) [{}]: {e}", case.name, describe(&cfg)));
            }
            totals.pinned_runs += usize::from(!cfg.pins.is_empty());
        }
    }
    for f in failures.iter().take(MAX_PRINTED) {
        println!("{f}");
    }
    if failures.len() > MAX_PRINTED {
        println!("... and {} more failures", failures.len() - MAX_PRINTED);
    }
    println!("{totals:?}");
    println!(
        "scheduler conformance: {} cases x {configs} configs: {} runs, {} splits, {} input copies, {} mismatches ({} violations, {} errors) in {:.2} s",
        cases.len(),
        totals.runs,
        totals.splits,
        totals.copies,
        totals.mismatches,
        totals.violations,
        totals.errors,
        start.elapsed().as_secs_f64()
    );
    assert_eq!(totals.mismatches, 0, "results differ from the CPU's");
    assert_eq!(totals.violations, 0, "plans break their invariants");
    assert_eq!(totals.errors, 0, "runs failed");
    if cases.len() >= 100 && configs >= 3 {
        // The configurations really exercised multi-device plans.
        assert!(totals.splits > totals.runs, "{totals:?}");
        assert!(totals.runs_3_splits > 0, "{totals:?}");
        assert!(totals.multi_backend_runs * 10 > totals.runs, "{totals:?}");
        assert!(totals.multi_chunk_runs > 0, "{totals:?}");
        assert!(totals.case_op_on_sim > 0 && totals.case_op_on_cpu > 0, "{totals:?}");
        assert!(totals.pinned_runs > 0 && totals.pipelined_runs > 0 && totals.weight_runs > 0, "{totals:?}");
    }
}
