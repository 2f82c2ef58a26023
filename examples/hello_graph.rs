//! A two-layer perceptron as a tessera graph, run on the best device this program finds:
//! built in or from a plugin, as `TESSERA_DISABLE_<FAMILY>`, `TESSERA_BACKEND_DIR` and the
//! other variables of the registry say. Ops the device cannot run fall back to the CPU through
//! the scheduler. It prints the device, where it came from and which device ran what.
//!
//! `cargo run --release --example hello_graph`

#[macro_use]
#[path = "common/mod.rs"]
mod common;

use std::process::ExitCode;

use tessera::allocator::alloc_tensors;
use tessera::{Backend, BufferUsage, DType, Graph, Result, Scheduler, SchedulerOptions};

/// Deterministic weights: a fixed pattern so every run prints the same numbers.
fn pattern(n: usize, seed: f32) -> Vec<f32> {
    (0..n).map(|i| ((i as f32 + seed) * 0.731).sin() * 0.5).collect()
}

fn run() -> Result<()> {
    let registry = tessera::discover();
    common::report_plugins(registry);
    let device = registry.select(None)?;
    let origin = registry.entry_of(device).map_or_else(|| "unknown".into(), |e| e.origin().to_string());
    let mut backends: Vec<Box<dyn Backend>> = vec![device.init_backend()?];
    if !device.is_host_cpu() {
        backends.push(registry.select(Some("cpu"))?.init_backend()?);
    }
    let mut sched: Scheduler = Scheduler::new(backends, SchedulerOptions::default())?;

    // y = softmax(W2 · relu(W1 · x + b1) + b2) for a batch of two 4-feature inputs.
    let (n_in, n_hidden, n_out, batch) = (4, 8, 3, 2);
    let mut g = Graph::new();
    let w1 = g.new_tensor(DType::F32, &[n_in, n_hidden])?;
    let b1 = g.new_tensor(DType::F32, &[n_hidden])?;
    let w2 = g.new_tensor(DType::F16, &[n_hidden, n_out])?;
    let b2 = g.new_tensor(DType::F32, &[n_out])?;
    let x = g.new_tensor(DType::F32, &[n_in, batch])?;
    for (id, name) in [(w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"), (x, "x")] {
        g.set_name(id, name)?;
    }
    g.set_input(x)?;
    let h = g.mul_mat(w1, x)?;
    let h = g.add(h, b1)?;
    let h = g.relu(h)?;
    let logits = g.mul_mat(w2, h)?;
    let logits = g.add(logits, b2)?;
    let y = g.soft_max(logits, None, 1.0)?;
    g.set_name(y, "y")?;
    g.set_output(y)?;
    g.build_forward(y)?;

    // Weights in one buffer of the device's memory, tagged as weights; the scheduler places
    // everything else (ops the device cannot run go to the CPU).
    for buffer in alloc_tensors(&mut g, &[w1, b1, w2, b2], device.buffer_type())? {
        buffer.set_usage(BufferUsage::Weights);
    }
    g.set_f32(w1, &pattern(n_in * n_hidden, 1.0))?;
    g.set_f32(b1, &pattern(n_hidden, 2.0))?;
    g.set_f32(w2, &pattern(n_hidden * n_out, 3.0))?;
    g.set_f32(b2, &pattern(n_out, 4.0))?;

    let plan = sched.alloc_graph(&g)?.clone();
    let scheduled = sched.graph().ok_or(tessera::Error::Cancelled)?;
    scheduled.set_f32(x, &[1.0, 0.5, -0.5, 2.0, -1.0, 0.0, 0.25, 1.5])?;
    sched.compute()?;
    let probs = sched.graph().ok_or(tessera::Error::Cancelled)?.get_f32(y)?;
    outln!("device: {}", tessera::runtime::describe_device(device));
    outln!("from: {origin}");
    outln!("graph: {} nodes, {} leafs", g.nodes().len(), g.leafs().len());
    for (i, name) in plan.backends.iter().enumerate() {
        let nodes = plan.assignments.iter().filter(|a| a.backend == i).count();
        outln!("ran on {name}: {nodes} node(s)");
    }
    for (i, row) in probs.chunks(n_out).enumerate() {
        let formatted: Vec<String> = row.iter().map(|p| format!("{p:.4}")).collect();
        outln!("sample {i}: class probabilities [{}]", formatted.join(", "));
    }
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hello_graph: {e}");
            ExitCode::FAILURE
        }
    }
}
