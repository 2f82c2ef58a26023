//! One transformer block run across a simulated accelerator (which holds the weights but has
//! no SOFT_MAX) and the CPU, compared with the built-in CPU backend alone. The CPU side is the
//! CPU device of the registry every program uses (`tessera::discover()`).
//!
//! `cargo run --release --example split_plan` (`TESSERA_SCHED_DEBUG=2` also lists every
//! node's backend and the pass that chose it).

#[macro_use]
#[path = "common/mod.rs"]
mod common;

use std::process::ExitCode;

use tessera::allocator::alloc_tensors;
use tessera::cpu::CpuBackend;
use tessera::host_buffer::HOST_BUFFER_TYPE;
use tessera::{Backend, BufferType, BufferUsage, DType, Device, Graph, Result, Scheduler, SchedulerOptions, TensorId};
use tessera_sim::{SimConfig, SimDevice};

const D: usize = 64; // model width
const F: usize = 256; // feed-forward width
const T: usize = 16; // tokens

struct Block {
    graph: Graph,
    x: TensorId,
    weights: Vec<TensorId>,
    out: TensorId,
}

fn block() -> Result<Block> {
    let mut g = Graph::new();
    let x = g.new_tensor(DType::F32, &[D, T])?;
    g.set_name(x, "x")?;
    g.set_input(x)?;
    let mut weights = Vec::new();
    let mut weight = |g: &mut Graph, name: &str, ne: &[usize]| -> Result<TensorId> {
        let id = g.new_tensor(DType::F32, ne)?;
        g.set_name(id, name)?;
        weights.push(id);
        Ok(id)
    };
    let (wq, wk, wv, wo) = (
        weight(&mut g, "wq", &[D, D])?,
        weight(&mut g, "wk", &[D, D])?,
        weight(&mut g, "wv", &[D, D])?,
        weight(&mut g, "wo", &[D, D])?,
    );
    let (w1, w2) = (weight(&mut g, "w1", &[D, F])?, weight(&mut g, "w2", &[F, D])?);
    let h = g.norm(x, 1e-5)?;
    let q = g.mul_mat(wq, h)?;
    let k = g.mul_mat(wk, h)?;
    let v = g.mul_mat(wv, h)?;
    let scores = g.mul_mat(k, q)?; // [T keys, T queries]
    let probs = g.soft_max(scores, None, 1.0 / (D as f32).sqrt())?;
    let vt = g.transpose(v)?;
    let vt = g.cont(vt)?; // [T, D]
    let ctx = g.mul_mat(vt, probs)?; // [D, T]
    let attn = g.mul_mat(wo, ctx)?;
    let x1 = g.add(x, attn)?;
    let h1 = g.norm(x1, 1e-5)?;
    let up = g.mul_mat(w1, h1)?;
    let up = g.gelu(up)?;
    let down = g.mul_mat(w2, up)?;
    let out = g.add(x1, down)?;
    g.set_name(out, "out")?;
    g.set_output(out)?;
    g.build_forward(out)?;
    Ok(Block { graph: g, x, weights, out })
}

fn values(n: usize, seed: f32) -> Vec<f32> {
    (0..n).map(|i| ((i as f32 * 0.618 + seed).sin()) * 0.2).collect()
}

/// Writes the same weights into `g` (where they are bound).
fn fill_weights(g: &Graph, b: &Block) -> Result<()> {
    for (i, &w) in b.weights.iter().enumerate() {
        g.set_f32(w, &values(g.tensor(w)?.nelements(), i as f32))?;
    }
    Ok(())
}

fn run() -> Result<()> {
    // The reference: everything on the CPU.
    let reference = {
        let b = block()?;
        let mut g = b.graph.clone();
        tessera::allocator::alloc_graph_tensors(&mut g, &HOST_BUFFER_TYPE)?;
        fill_weights(&g, &b)?;
        g.set_f32(b.x, &values(D * T, 99.0))?;
        CpuBackend::new().compute_graph(&g)?;
        g.get_f32(b.out)?
    };

    let mut config = SimConfig::new("SIM0");
    config.unsupported_ops.push("SOFT_MAX");
    let sim: &'static SimDevice = SimDevice::create(config);
    let b = block()?;
    let mut g = b.graph.clone();
    // The weights live in the accelerator's memory.
    let sim_type: &'static dyn BufferType = sim.buffer_type();
    for buffer in alloc_tensors(&mut g, &b.weights, sim_type)? {
        buffer.set_usage(BufferUsage::Weights);
    }
    fill_weights(&g, &b)?; // the input is set below, on the scheduled graph

    let registry = tessera::discover();
    common::report_plugins(registry);
    let cpu = registry.select(Some("cpu"))?;
    let origin = registry.entry_of(cpu).map_or_else(String::new, |e| e.origin().to_string());
    outln!("CPU side: {} ({origin})", cpu.name());
    let backends: Vec<Box<dyn Backend>> = vec![sim.init_backend()?, cpu.init_backend()?];
    let mut sched: Scheduler = tessera::runtime::sched_debug::scheduler(backends, &[], SchedulerOptions::default())?;
    let plan = sched.alloc_graph(&g)?.clone();
    out!("{plan}");
    let scheduled = sched.graph().ok_or(tessera::Error::Cancelled)?;
    scheduled.set_f32(b.x, &values(D * T, 99.0))?;
    sched.compute()?;
    let out = sched.graph().ok_or(tessera::Error::Cancelled)?.get_f32(b.out)?;
    let max_diff = out.iter().zip(&reference).map(|(a, r)| (a - r).abs()).fold(0.0f32, f32::max);
    outln!(
        "split_plan: {} splits, {} input copies, max abs diff vs CPU {max_diff}",
        plan.splits.len(),
        plan.n_input_copies()
    );
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("split_plan: {e}");
            ExitCode::FAILURE
        }
    }
}
