//! What a compute call costs through the plugin tables compared with the built-in CPU
//! backend, on small graphs where the call overhead shows.
//!
//! `cargo run --release --example plugin_overhead [-- PLUGIN_FILE_OR_DIR]`
//!
//! Three ways to run the same graph with the same kernels:
//! - `built-in`: `CpuBackend` called directly;
//! - `tables`: the built-in CPU family exported through the C tables and wrapped back in this
//!   process (the graph is encoded into descriptors, decoded and re-checked on the far side);
//! - `plugin`: a CPU plugin library (`libtessera-cpu[-<variant>].so`, built by
//!   `scripts/build-cpu-plugins.sh`): the file given, else the best variant in the directory
//!   given (default `target/plugins`) or the plugin search paths (`TESSERA_BACKEND_DIR`, ...).
//!
//! Each way is timed calling `compute_graph` (the graph crosses the tables on every call) and
//! running a prepared program (`calls` = `program`: the graph crossed once, when it was
//! prepared, and each run only replays it).
//!
//! Columns follow ggml's `test-backend-ops perf`: backend, graph, memory, calls, runs, us/run,
//! and the ratio to the built-in backend.

#[macro_use]
#[path = "common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tessera::allocator::alloc_graph_tensors;
use tessera::cpu::CpuBackend;
use tessera::host_buffer::HOST_BUFFER_TYPE;
use tessera::plugin::export::panic_message;
use tessera::plugin::{loopback, Exporter};
use tessera::runtime::{RegistryConfig, RuntimeRegistry};
use tessera::{Backend, BackendReg, BufferType, DType, Device, Graph, Program, Result, SplitRef, TensorId};

struct CpuExport;

impl Exporter for CpuExport {
    fn reg() -> &'static dyn BackendReg {
        &tessera::cpu::CPU_REG
    }
    fn catch<R>(f: impl FnOnce() -> R) -> std::result::Result<R, String> {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|p| panic_message(&*p))
    }
}

/// A graph to time, with its leafs.
struct Bench {
    name: &'static str,
    graph: Graph,
    leafs: Vec<TensorId>,
}

/// Four element-wise nodes over 256 values.
fn small() -> Result<Bench> {
    let mut g = Graph::new();
    let x = g.new_tensor(DType::F32, &[256])?;
    let b = g.new_tensor(DType::F32, &[256])?;
    let y = g.add(x, b)?;
    let y = g.mul(y, x)?;
    let y = g.gelu(y)?;
    let y = g.scale(y, 0.5)?;
    g.build_forward(y)?;
    Ok(Bench { name: "4 element-wise nodes, 256 f32", graph: g, leafs: vec![x, b] })
}

/// One node: a single ADD of 64 values.
fn tiny() -> Result<Bench> {
    let mut g = Graph::new();
    let x = g.new_tensor(DType::F32, &[64])?;
    let y = g.add(x, x)?;
    g.build_forward(y)?;
    Ok(Bench { name: "1 ADD node, 64 f32", graph: g, leafs: vec![x] })
}

/// A small MLP block: MUL_MAT 128x128 by 8 columns, ADD, GELU.
fn mlp() -> Result<Bench> {
    let mut g = Graph::new();
    let w = g.new_tensor(DType::F32, &[128, 128])?;
    let x = g.new_tensor(DType::F32, &[128, 8])?;
    let b = g.new_tensor(DType::F32, &[128])?;
    let y = g.mul_mat(w, x)?;
    let y = g.add(y, b)?;
    let y = g.gelu(y)?;
    g.build_forward(y)?;
    Ok(Bench { name: "MUL_MAT 128x128x8 + ADD + GELU", graph: g, leafs: vec![w, x, b] })
}

/// One compute of `g`: a `compute_graph`, or a run of `program` and a synchronize.
fn step(backend: &mut dyn Backend, program: Option<&mut Box<dyn Program>>, g: &Graph) -> Result<()> {
    match program {
        Some(p) => {
            backend.run(&mut **p, g)?;
            backend.synchronize()
        }
        None => backend.compute_graph(g),
    }
}

/// Mean time of one compute of `bench` on `backend`, tensors in `buffer_type`, through a
/// program prepared once when `programs` is set.
fn time(
    bench: &Bench,
    backend: &mut dyn Backend,
    buffer_type: &'static dyn BufferType,
    programs: bool,
) -> Result<(usize, f64)> {
    let mut g = bench.graph.clone();
    alloc_graph_tensors(&mut g, buffer_type)?;
    for (i, &leaf) in bench.leafs.iter().enumerate() {
        let n = g.tensor(leaf)?.nelements();
        g.set_f32(leaf, &(0..n).map(|k| ((k + i) as f32 * 0.01).sin()).collect::<Vec<_>>())?;
    }
    let mut program = match programs {
        true => {
            let consumers = vec![u32::MAX; g.tensors().len()];
            Some(backend.prepare(&SplitRef {
                graph: &g,
                nodes: 0..g.nodes().len(),
                consumers: &consumers,
                layout: 1,
            })?)
        }
        false => None,
    };
    for _ in 0..100 {
        step(backend, program.as_mut(), &g)?;
    }
    // Calibrate to about 0.3 s, then take the best of five rounds.
    let start = Instant::now();
    let mut calib = 0usize;
    while start.elapsed() < Duration::from_millis(50) {
        step(backend, program.as_mut(), &g)?;
        calib += 1;
    }
    let runs = (calib * 6).max(10);
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        for _ in 0..runs {
            step(backend, program.as_mut(), &g)?;
        }
        best = best.min(t.elapsed().as_secs_f64() * 1e6 / runs as f64);
    }
    Ok((runs, best))
}

/// A CPU plugin library: the argument if it is a file, else the best variant in the argument's
/// directory (default `target/plugins`) and the search paths. The registry has no built-in
/// family, which would keep a plugin of the CPU family out.
fn find_plugin() -> (RuntimeRegistry, Option<&'static dyn Device>) {
    let arg = std::env::args_os().nth(1).map(PathBuf::from);
    let dir = match &arg {
        Some(p) if p.is_file() => None,
        Some(dir) => Some(dir.clone()),
        None => Some(Path::new(env!("CARGO_MANIFEST_DIR")).join("target").join("plugins")),
    };
    let config = RegistryConfig::from_env();
    let mut registry = RuntimeRegistry::with_config(&[], dir.map_or(config.clone(), |d| config.with_backend_dir(d)));
    let loaded = match &arg {
        Some(file) if file.is_file() => registry.load(file).map(|e| e.devices().first().copied()),
        _ => registry.load_best("cpu", None).map(|e| e.devices().first().copied()),
    };
    match loaded {
        Ok(device) => (registry, device),
        Err(e) => {
            outln!("(no CPU plugin library: {e}; build one with scripts/build-cpu-plugins.sh)\n");
            (registry, None)
        }
    }
}

fn main() -> Result<()> {
    let Some(tables) = loopback::<CpuExport>("in-process tables")?.device(0) else {
        return Err(tessera::Error::UnknownDevice { name: "CPU".into(), available: "none".into() });
    };
    let (registry, plugin) = find_plugin();
    if let Some(entry) = registry.regs().next() {
        outln!("plugin: {}\n", entry.origin());
    }
    outln!(
        "{:<12} {:<32} {:<14} {:<8} {:>9} {:>10} {:>7}",
        "backend",
        "graph",
        "memory",
        "calls",
        "runs",
        "us/run",
        "ratio"
    );
    for bench in [tiny()?, small()?, mlp()?] {
        let (runs, base) = time(&bench, &mut CpuBackend::new(), &HOST_BUFFER_TYPE, false)?;
        outln!(
            "{:<12} {:<32} {:<14} {:<8} {runs:>9} {base:>10.3} {:>7.2}",
            "built-in",
            bench.name,
            "host",
            "compute",
            1.0
        );
        let mut rows: Vec<(&str, &'static dyn Device, &'static dyn BufferType, &str)> = vec![
            ("tables", tables, tables.buffer_type(), "plugin buffer"),
            ("tables", tables, &HOST_BUFFER_TYPE, "host"),
        ];
        if let Some(p) = plugin {
            rows.push(("plugin", p, p.buffer_type(), "plugin buffer"));
            rows.push(("plugin", p, &HOST_BUFFER_TYPE, "host"));
        }
        for (label, device, buffer_type, memory) in rows {
            for (calls, programs) in [("compute", false), ("program", true)] {
                let mut backend = device.init_backend()?;
                let (runs, us) = time(&bench, &mut *backend, buffer_type, programs)?;
                outln!(
                    "{label:<12} {:<32} {memory:<14} {calls:<8} {runs:>9} {us:>10.3} {:>7.2}",
                    bench.name,
                    us / base
                );
            }
        }
        outln!();
    }
    Ok(())
}
