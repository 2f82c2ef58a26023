//! Several CUDA backends in one graph: a chain of layers split over two streams of one GPU,
//! or over two GPUs, pipelined (runs queued without waiting, results read as they come) and
//! compared with one backend; MiniLM split the same ways where its weights are present. Each
//! test prints why it skipped where the GPUs (or the weights) are missing.
#![cfg(feature = "cuda")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use tessera::allocator::alloc_tensors;
use tessera::cpu::CpuBackend;
use tessera::runtime::placement::Placement;
use tessera::{Backend, BackendReg, Buffer, BufferUsage, DType, Device, Graph, Scheduler, SchedulerOptions, TensorId};
use tessera_models::{Embedder, LoadOptions, MODULES};

/// The first `n` GPUs, or `None` after printing why the test skips.
fn gpus(n: usize) -> Option<Vec<&'static dyn Device>> {
    let reg = &tessera::cuda::CUDA_REG;
    if reg.device_count() < n {
        eprintln!("skipped: {n} CUDA device(s) needed, this machine has {}", reg.device_count());
        return None;
    }
    Some((0..n).filter_map(|i| reg.device(i)).collect())
}

const HIDDEN: usize = 512;
const TOKENS: usize = 256;
const LAYERS: usize = 6;

/// `LAYERS` blocks `x = gelu(w x + b) + x`, block `l` on backend `on[l]` (its weights in that
/// backend's device memory), run `runs` times with new inputs, queued one after another with
/// `n_copies` pipeline copies and read back as they finish. The outputs' bits and the plan.
fn chain(
    devices: &[&'static dyn Device],
    on: &[usize; LAYERS],
    n_copies: usize,
    runs: usize,
) -> (Vec<Vec<u32>>, String) {
    let mut g = Graph::new();
    let x0 = g.new_tensor(DType::F32, &[HIDDEN, TOKENS]).unwrap();
    g.set_input(x0).unwrap();
    let mut x = x0;
    let mut layers: Vec<Vec<TensorId>> = Vec::new();
    let mut weights: Vec<(usize, TensorId, TensorId)> = Vec::new();
    for &b in on {
        let w = g.new_tensor(DType::F32, &[HIDDEN, HIDDEN]).unwrap();
        let bias = g.new_tensor(DType::F32, &[HIDDEN]).unwrap();
        let y = g.mul_mat(w, x).unwrap();
        let y = g.add(y, bias).unwrap();
        let y = g.gelu(y).unwrap();
        let next = g.add(y, x).unwrap();
        layers.push(vec![y, next]);
        weights.push((b, w, bias));
        x = next;
    }
    g.set_output(x).unwrap();
    g.build_forward(x).unwrap();
    let mut held: Vec<std::sync::Arc<dyn Buffer>> = Vec::new();
    for (l, &(b, w, bias)) in weights.iter().enumerate() {
        let buffers = alloc_tensors(&mut g, &[w, bias], devices[b].buffer_type()).unwrap();
        buffers.iter().for_each(|buf| buf.set_usage(BufferUsage::Weights));
        held.extend(buffers);
        let wv: Vec<f32> = (0..HIDDEN * HIDDEN).map(|i| ((i * (l + 3)) as f32 * 0.013).sin() * 0.04).collect();
        let bv: Vec<f32> = (0..HIDDEN).map(|i| ((i + l) as f32 * 0.7).cos() * 0.1).collect();
        g.set_f32(w, &wv).unwrap();
        g.set_f32(bias, &bv).unwrap();
    }
    let mut backends: Vec<Box<dyn Backend>> = devices.iter().map(|d| d.init_backend().unwrap()).collect();
    backends.push(Box::new(CpuBackend::new()));
    let mut sched: Scheduler = Scheduler::new(backends, SchedulerOptions { n_copies, op_offload: false }).unwrap();
    for (l, nodes) in layers.iter().enumerate() {
        for &id in nodes {
            sched.set_tensor_backend(id, on[l]).unwrap();
        }
    }
    sched.reserve(&g).unwrap();
    let mut outputs: Vec<Vec<f32>> = Vec::new();
    for run in 0..runs {
        sched.alloc_graph(&g).unwrap();
        let xv: Vec<f32> = (0..HIDDEN * TOKENS).map(|i| ((i + 97 * run) as f32 * 0.011).cos()).collect();
        sched.graph().unwrap().set_f32(x0, &xv).unwrap();
        sched.compute_async().unwrap();
        let mut out = vec![0f32; HIDDEN * TOKENS];
        let (dst, len) = (out.as_mut_ptr().cast::<u8>(), out.len() * 4);
        outputs.push(out);
        // SAFETY: `outputs` keeps the buffer (its heap memory does not move) untouched until
        // the synchronize below.
        unsafe { sched.get_tensor_async(x, dst, len).unwrap() };
    }
    sched.synchronize().unwrap();
    let plan = sched.plan().unwrap().to_string();
    drop(held);
    (outputs.iter().map(|o| o.iter().map(|v| v.to_bits()).collect()).collect(), plan)
}

#[test]
fn two_streams_of_one_gpu_run_a_pipelined_layer_split_with_the_bits_of_one() {
    let Some(gpu) = gpus(1) else { return };
    let one = chain(&gpu, &[0; LAYERS], 1, 6).0;
    let two = [gpu[0], gpu[0]];
    let (split, plan) = chain(&two, &[0, 0, 0, 1, 1, 1], 2, 6);
    print!("{plan}");
    assert!(plan.contains("CUDA0 -> CUDA0:1") && plan.contains("(same device)"), "{plan}");
    assert!(split == one, "two streams of one GPU differ from one stream");
    // Back and forth between the streams, three copies per input.
    assert!(chain(&two, &[0, 1, 0, 1, 0, 1], 3, 6).0 == one, "alternating layers differ");
}

#[test]
fn two_gpus_run_a_pipelined_layer_split_with_peer_copies() {
    let Some(gpus) = gpus(2) else { return };
    let one = chain(&gpus[..1], &[0; LAYERS], 1, 6).0;
    let (split, plan) = chain(&gpus, &[0, 0, 0, 1, 1, 1], 2, 6);
    print!("{plan}");
    assert!(plan.contains("CUDA0 -> CUDA1"), "{plan}");
    let peer = gpus[1].copies_peer_to_peer(gpus[0]);
    println!("CUDA1 reads CUDA0 peer to peer: {peer}");
    assert!(plan.contains(if peer { "(peer to peer)" } else { "(staged through host memory)" }), "{plan}");
    for (run, (s, o)) in split.iter().zip(&one).enumerate() {
        let worst = s.iter().zip(o).map(|(a, b)| (f32::from_bits(*a) - f32::from_bits(*b)).abs()).fold(0.0, f32::max);
        assert!(worst <= 1e-5, "run {run}: two GPUs differ from one by {worst}");
    }
}

/// MiniLM's weights (`TESSERA_MINILM_MODEL`, a safetensors or GGUF file, else the file
/// scripts/fetch_minilm.sh fetches), or `None` after printing why the test skips.
fn minilm() -> Option<PathBuf> {
    let path = std::env::var_os("TESSERA_MINILM_MODEL").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/weights/all-MiniLM-L6-v2/model.safetensors"))
    });
    if !path.exists() {
        eprintln!("skipped: no MiniLM weights at {} (scripts/fetch_minilm.sh)", path.display());
        return None;
    }
    Some(path)
}

fn embedder(backend: &str, split_layers: &str, pipeline: usize) -> Embedder {
    let registry = tessera::discover();
    let devices: Vec<&'static dyn Device> = registry.requestable_devices().collect();
    let placement = Placement::resolve_in(registry, backend, "", &MODULES).unwrap();
    let split_layers =
        if split_layers.is_empty() { Vec::new() } else { Placement::resolve_split(split_layers, &devices).unwrap() };
    let options = LoadOptions { split_layers, pipeline, ..LoadOptions::default() };
    Embedder::load_with(minilm().unwrap(), placement, options).unwrap()
}

/// Three batches of 32 sequences of 48 token ids.
fn batches() -> Vec<Vec<Vec<u32>>> {
    (0..3u32)
        .map(|b| {
            (0..32u32)
                .map(|s| {
                    (0..48u32)
                        .map(|t| if t == 0 { 101 } else { 1000 + (b * 7919 + s * 131 + t * 17) % 20000 })
                        .collect()
                })
                .collect()
        })
        .collect()
}

#[test]
fn minilm_on_two_streams_of_one_gpu_gives_the_bits_of_one_stream() {
    let (Some(_), Some(_)) = (gpus(1), minilm()) else { return };
    let data = batches();
    let refs: Vec<&[Vec<u32>]> = data.iter().map(Vec::as_slice).collect();
    let want = embedder("cuda0", "", 1).embed_batches(&refs).unwrap();
    let mut two = embedder("embed=cuda0,pool=cuda0:1", "cuda0,cuda0:1", 2);
    println!("{}", two.describe());
    assert!(two.describe().contains("encoder.3-5: CUDA0:1"), "{}", two.describe());
    assert!(two.embed_batches(&refs).unwrap() == want, "two streams differ from one");
    assert!(two.embed_batches(&refs).unwrap() == want, "again, with the programs prepared");
}

#[test]
fn minilm_split_over_two_gpus_agrees_with_one() {
    let (Some(_), Some(_)) = (gpus(2), minilm()) else { return };
    let data = batches();
    let refs: Vec<&[Vec<u32>]> = data.iter().map(Vec::as_slice).collect();
    let want = embedder("cuda0", "", 1).embed_batches(&refs).unwrap();
    let mut two = embedder("embed=cuda0,pool=cuda1", "cuda0,cuda1", 2);
    println!("{}", two.describe());
    let got = two.embed_batches(&refs).unwrap();
    print!("{}", two.scheduler().plan().unwrap());
    for (w, g) in want.iter().flatten().zip(got.iter().flatten()) {
        let dot: f64 = w.iter().zip(g).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum();
        assert!(dot >= 0.999999, "cosine {dot}");
    }
}
