//! Times the scheduler's planning (the five passes) and planning plus allocation for deep
//! encoder graphs over three backends: a simulated GPU holding the weights, a second one
//! without SOFT_MAX, and the CPU. Planning is linear in the node count.
//!
//! `cargo run --release --example sched_bench`

#[macro_use]
#[path = "common/mod.rs"]
mod common;

use std::process::ExitCode;
use std::time::Instant;

use tessera::allocator::alloc_tensors;
use tessera::cpu::CpuBackend;
use tessera::{Backend, BufferUsage, DType, Device, Graph, Scheduler, SchedulerOptions, TensorId};
use tessera_models::{bert, BertConfig};
use tessera_sim::{SimConfig, SimDevice};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn run() -> Result<()> {
    let gpu0: &'static SimDevice = SimDevice::create(SimConfig::new("SIM0"));
    let mut config = SimConfig::new("SIM1");
    config.unsupported_ops.push("SOFT_MAX");
    let gpu1: &'static SimDevice = SimDevice::create(config);
    outln!(
        "{:>8} {:>6} {:>12} {:>10} {:>16} {:>10}",
        "nodes",
        "splits",
        "plan us",
        "ns/node",
        "plan+alloc us",
        "ns/node"
    );
    for target in [1_000usize, 10_000, 100_000] {
        let layers = target / 35;
        let c = BertConfig {
            layers,
            vocab: 64,
            max_positions: 16,
            hidden: 64,
            heads: 4,
            intermediate: 128,
            ..BertConfig::MINILM_L6
        };
        let mut g = Graph::new();
        let model = bert::build(&mut g, &c, &bert::uniform_weight_type(DType::F32), bert::Layout::padded(8, 1))?;
        // Weights of even layers on SIM0, of odd layers on SIM1, embeddings on the CPU.
        let mut even: Vec<TensorId> = Vec::new();
        let mut odd: Vec<TensorId> = Vec::new();
        let mut host: Vec<TensorId> = Vec::new();
        for (name, _, id) in &model.weights {
            let layer = name
                .strip_prefix("encoder.layer.")
                .and_then(|r| r.split('.').next())
                .and_then(|n| n.parse::<usize>().ok());
            match layer {
                Some(l) if l % 2 == 0 => even.push(*id),
                Some(_) => odd.push(*id),
                None => host.push(*id),
            }
        }
        for (ids, device) in [(&even, gpu0 as &dyn Device), (&odd, gpu1), (&host, &tessera::cpu::CPU_DEVICE)] {
            for b in alloc_tensors(&mut g, ids, device.buffer_type())? {
                b.set_usage(BufferUsage::Weights);
            }
        }
        let backends: Vec<Box<dyn Backend>> =
            vec![gpu0.init_backend()?, gpu1.init_backend()?, Box::new(CpuBackend::new())];
        let mut sched: Scheduler = Scheduler::new(backends, SchedulerOptions::default())?;
        let (mut plan_t, mut alloc_t) = (Vec::new(), Vec::new());
        let mut splits = 0;
        for _ in 0..9 {
            let t = Instant::now();
            splits = sched.split_graph(&g)?.splits.len();
            plan_t.push(t.elapsed().as_secs_f64());
            let t = Instant::now();
            sched.alloc_graph(&g)?;
            alloc_t.push(t.elapsed().as_secs_f64());
        }
        let n = g.nodes().len() as f64;
        let (p, a) = (median(plan_t), median(alloc_t));
        outln!(
            "{:>8} {:>6} {:>12.1} {:>10.0} {:>16.1} {:>10.0}",
            n,
            splits,
            p * 1e6,
            p * 1e9 / n,
            a * 1e6,
            a * 1e9 / n
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sched_bench: {e}");
            ExitCode::FAILURE
        }
    }
}
