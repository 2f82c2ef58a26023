//! Plans the compute memory of an all-MiniLM-L6-v2-shaped encoder and reports it against the
//! liveness lower bound, then times planning of large graphs.
//!
//! `cargo run --release --example alloc_report`

#[macro_use]
#[path = "common/mod.rs"]
mod common;

use std::process::ExitCode;
use std::time::Instant;

use tessera::allocator::{alloc_tensors, GraphAllocator};
use tessera::host_buffer::HOST_BUFFER_TYPE;
use tessera::{DType, Graph, TensorId};
use tessera_models::{bert, BertConfig};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// The encoder graph for `batch` sequences of `tokens` tokens, weights bound (zeroed).
fn encoder(config: &BertConfig, tokens: usize, batch: usize) -> Result<Graph> {
    let mut g = Graph::new();
    let model =
        bert::build(&mut g, config, &bert::uniform_weight_type(DType::F32), bert::Layout::padded(tokens, batch))?;
    let weights: Vec<TensorId> = model.weights.iter().map(|w| w.2).collect();
    alloc_tensors(&mut g, &weights, &HOST_BUFFER_TYPE)?;
    Ok(g)
}

fn report(name: &str, g: &Graph) -> Result<()> {
    let mut galloc: GraphAllocator = GraphAllocator::new(&[&HOST_BUFFER_TYPE]);
    let r = &galloc.reserve(g, None)?.buffer_types[0];
    outln!(
        "alloc {name}: planned {} B, lower bound {} B, ratio {:.3}, {} in-place ({} nodes, {} tensors placed)",
        r.planned,
        r.lower_bound,
        r.planned as f64 / r.lower_bound.max(1) as f64,
        r.in_place,
        g.nodes().len(),
        r.tensors
    );
    Ok(())
}

/// Median wall time of planning `g` from scratch.
fn time_planning(g: &Graph) -> Result<f64> {
    let mut times = Vec::new();
    for _ in 0..15 {
        let mut galloc: GraphAllocator = GraphAllocator::new(&[&HOST_BUFFER_TYPE]);
        let start = Instant::now();
        galloc.reserve(g, None)?;
        times.push(start.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

fn run() -> Result<()> {
    let minilm = BertConfig::MINILM_L6;
    report("minilm-l6 batch 1x128", &encoder(&minilm, 128, 1)?)?;
    report("minilm-l6 batch 32x128", &encoder(&minilm, 128, 32)?)?;

    // Planning time grows linearly with the node count: deeper stacks of the same layer.
    for target in [1_000, 10_000, 100_000] {
        let per_layer = 35; // nodes of one encoder layer
        let config = BertConfig { layers: target / per_layer, vocab: 64, max_positions: 16, ..minilm };
        let g = encoder(&config, 8, 1)?;
        let seconds = time_planning(&g)?;
        outln!(
            "plan {} nodes: {:.3} ms, {:.0} ns/node",
            g.nodes().len(),
            seconds * 1e3,
            seconds * 1e9 / g.nodes().len() as f64
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("alloc_report: {e}");
            ExitCode::FAILURE
        }
    }
}
