//! The Vulkan backend on a real device (a GPU, or Mesa's lavapipe on the CPU): devices found at
//! run time, buffers, out-of-memory as a typed error, recorded programs, events, and graphs
//! split between Vulkan and the CPU. Each test prints why it skipped where this machine lists
//! no Vulkan device, unless `TESSERA_REQUIRE_VULKAN=1` (CI, which installs lavapipe) makes
//! that a failure. With `TESSERA_VULKAN_VALIDATION=1` every test also demands that the
//! validation layer reported nothing. The op conformance suite runs on `Vulkan0` through
//! `tests/conformance.rs`.
#![cfg(feature = "vulkan")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use tessera::allocator::alloc_tensors;
use tessera::cpu::CpuBackend;
use tessera::{
    Backend, BackendReg, Buffer, BufferBase, BufferUsage, Completion, DType, Device, DeviceType, Error, Graph,
    Scheduler, SchedulerOptions,
};

/// `Vulkan0`, or `None` after printing why the test skips.
fn vulkan() -> Option<&'static dyn Device> {
    match tessera::vulkan::VULKAN_REG.device(0) {
        Some(d) => Some(d),
        None => {
            let required = std::env::var("TESSERA_REQUIRE_VULKAN").is_ok_and(|v| v == "1");
            let why = match tessera::vulkan::VULKAN_REG.extension(tessera::registry::extension::FEATURES) {
                Some(tessera::registry::Extension::Features(f)) => format!("{:?}", f()),
                _ => String::new(),
            };
            assert!(!required, "TESSERA_REQUIRE_VULKAN=1 but no Vulkan device is listed: {why}");
            eprintln!("skipped: no Vulkan device on this machine ({why})");
            None
        }
    }
}

/// Nothing reported by the validation layer so far (when it is on).
fn validation_clean() {
    assert_eq!(
        tessera::vulkan::validation_messages(),
        0,
        "the Vulkan validation layer reported problems (see the log)"
    );
}

#[test]
fn devices_are_listed_with_memory_type_and_buffer_types() {
    let Some(dev) = vulkan() else { return };
    for i in 0..tessera::vulkan::VULKAN_REG.device_count() {
        let d = tessera::vulkan::VULKAN_REG.device(i).unwrap();
        println!("{}", tessera::runtime::describe_device(d));
        assert_eq!(d.name(), format!("Vulkan{i}"));
        assert!(d.memory().total > 0 && d.memory().free <= d.memory().total, "{:?}", d.memory());
    }
    assert!(!dev.buffer_type().is_host() && dev.host_buffer_type().is_some_and(|t| t.is_host()));
    // A CPU implementation (lavapipe) is listed, but the CPU backend stays the best device.
    let registry = tessera::discover();
    if dev.device_type() == DeviceType::Cpu {
        assert_eq!(registry.select(None).unwrap().name(), "CPU");
    }
    assert_eq!(registry.select(Some("vulkan")).unwrap().name(), dev.name());
    validation_clean();
}

#[test]
fn buffers_round_trip_fill_and_copy_at_any_offset() {
    let Some(dev) = vulkan() else { return };
    let a = dev.buffer_type().alloc_buffer(3 << 20).unwrap();
    assert!(matches!(a.base(), BufferBase::Device(_)));
    let data: Vec<u8> = (0..(1 << 20) + 7).map(|i| (i * 7 + 3) as u8).collect();
    a.set_bytes(13, &data).unwrap();
    let mut out = vec![0u8; data.len()];
    a.get_bytes(13, &mut out).unwrap();
    assert_eq!(out, data);
    // Fills whose ends are not whole words.
    a.fill(5, 11, 0xab).unwrap();
    let mut head = [0u8; 20];
    a.get_bytes(0, &mut head).unwrap();
    assert!(head[5..16].iter().all(|&b| b == 0xab) && head[16] == data[3], "{head:?}");
    // Device to device, and host to device.
    let b = dev.buffer_type().alloc_buffer(1 << 20).unwrap();
    assert!(b.copy_from(1, &*a, 100, 1000).unwrap());
    let mut copied = vec![0u8; 1000];
    b.get_bytes(1, &mut copied).unwrap();
    let mut expected = vec![0u8; 1000];
    a.get_bytes(100, &mut expected).unwrap();
    assert_eq!(copied, expected);
    let host = dev.host_buffer_type().unwrap().alloc_buffer(4096).unwrap();
    assert!(host.host_ptr_mut().is_some() && tessera::cpu::CPU_DEVICE.supports_buffer_type(host.buffer_type()));
    host.set_bytes(0, &[9; 64]).unwrap();
    assert!(b.copy_from(0, &*host, 0, 64).unwrap());
    let mut nine = [0u8; 64];
    b.get_bytes(0, &mut nine).unwrap();
    assert_eq!(nine, [9; 64]);
    // Out of range is an error, not a write past the end.
    assert!(b.set_bytes((1 << 20) - 2, &[1, 2, 3]).is_err());
    validation_clean();
}

#[test]
fn asking_for_more_memory_than_the_device_allows_is_a_typed_error() {
    let Some(dev) = vulkan() else { return };
    let too_much = dev.buffer_type().max_size().saturating_add(1);
    let err = dev.buffer_type().alloc_buffer(too_much).err().unwrap();
    assert!(matches!(err, Error::OutOfMemory { requested, .. } if requested == too_much), "{err}");
    assert!(err.to_string().contains(dev.name()), "{err}");
    // The process goes on.
    let b: Arc<dyn Buffer> = dev.buffer_type().alloc_buffer(4096).unwrap();
    b.set_bytes(0, &[1, 2, 3]).unwrap();
    validation_clean();
}

/// `o = relu((a + b) * a) * 0.5 - b` on `backends` through the scheduler, `runs` times with
/// new inputs; each run's output bits.
fn scheduled(dev: &'static dyn Device, n_copies: usize, runs: usize) -> Vec<Vec<u32>> {
    let mut g = Graph::new();
    let a = g.new_tensor(DType::F32, &[300, 7]).unwrap();
    let b = g.new_tensor(DType::F32, &[300, 1]).unwrap();
    g.set_input(a).unwrap();
    g.set_input(b).unwrap();
    let s = g.add(a, b).unwrap();
    let m = g.mul(s, a).unwrap();
    let r = g.relu(m).unwrap();
    let h = g.scale(r, 0.5).unwrap();
    let o = g.sub(h, b).unwrap();
    g.set_output(o).unwrap();
    g.build_forward(o).unwrap();
    let backends: Vec<Box<dyn Backend>> = vec![dev.init_backend().unwrap(), Box::new(CpuBackend::new())];
    let mut sched: Scheduler = Scheduler::new(backends, SchedulerOptions { n_copies, op_offload: false }).unwrap();
    let mut outputs = Vec::new();
    for run in 0..runs {
        sched.alloc_graph(&g).unwrap();
        let av: Vec<f32> = (0..2100).map(|i| ((i + 17 * run) as f32 * 0.13).sin()).collect();
        let bv: Vec<f32> = (0..300).map(|i| ((i + run) as f32 * 0.07).cos()).collect();
        sched.graph().unwrap().set_f32(a, &av).unwrap();
        sched.graph().unwrap().set_f32(b, &bv).unwrap();
        assert_eq!(sched.compute().unwrap(), Completion::Finished);
        outputs.push(sched.graph().unwrap().get_f32(o).unwrap().iter().map(|v| v.to_bits()).collect());
    }
    if n_copies == 1 {
        print!("{}", sched.plan().unwrap());
    }
    outputs
}

#[test]
fn scheduled_graphs_replay_their_programs_and_match_the_cpu_bit_for_bit() {
    let Some(dev) = vulkan() else { return };
    let on_vulkan = scheduled(dev, 1, 4);
    let on_cpu = scheduled(&tessera::cpu::CPU_DEVICE, 1, 4);
    // Adds, products, relu and a power-of-two scale round the same everywhere.
    assert_eq!(on_vulkan, on_cpu);
    for n_copies in [2, 3] {
        assert_eq!(scheduled(dev, n_copies, 4), on_vulkan, "{n_copies} copies");
    }
    validation_clean();
}

#[test]
fn events_order_work_between_two_backends_of_one_device() {
    let Some(dev) = vulkan() else { return };
    let mut g = Graph::new();
    let x = g.new_tensor(DType::F32, &[1024, 64]).unwrap();
    let y = g.scale(x, 3.0).unwrap();
    g.build_forward(y).unwrap();
    let buffers = alloc_tensors(&mut g, &[x, y], dev.buffer_type()).unwrap();
    buffers[0].set_usage(BufferUsage::Compute);
    let xv: Vec<f32> = (0..1024 * 64).map(|i| i as f32).collect();
    g.set_f32(x, &xv).unwrap();
    let mut first = dev.init_backend().unwrap();
    let mut second = dev.init_backend().unwrap();
    let event = dev.new_event().unwrap().unwrap();
    first.compute_graph(&g).unwrap();
    first.record_event(&*event).unwrap();
    second.wait_event(&*event).unwrap();
    event.synchronize().unwrap();
    let yv = g.get_f32(y).unwrap();
    assert!(yv.iter().zip(&xv).all(|(y, x)| *y == 3.0 * x));
    second.synchronize().unwrap();
    // Timing events measure the device time between them.
    if let Some(start) = dev.new_timing_event().unwrap() {
        let end = dev.new_timing_event().unwrap().unwrap();
        first.record_event(&*start).unwrap();
        for _ in 0..20 {
            first.compute_graph(&g).unwrap();
        }
        first.record_event(&*end).unwrap();
        let took = end.elapsed_since(&*start).unwrap().unwrap();
        assert!(took.as_nanos() > 0 && took.as_secs() < 60, "{took:?}");
        println!("20 runs of a 64K-value SCALE: {took:?} of device time");
        // Recorded again, they measure again.
        first.record_event(&*start).unwrap();
        first.record_event(&*end).unwrap();
        assert!(end.elapsed_since(&*start).unwrap().unwrap() < took);
    }
    validation_clean();
}

/// Rows of `len` values (a multiple of 256): random, tie-heavy and degenerate.
fn quantization_rows(len: usize) -> Vec<f32> {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut uniform = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    };
    let mut v: Vec<f32> = (0..len).map(|_| uniform()).collect();
    // Values of other quantized types: their quotients by the new scale often tie.
    for t in [DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::Q6_K] {
        let x: Vec<f32> = (0..len).map(|_| uniform() * 3.0).collect();
        v.extend(tessera::convert::to_f32_vec(t, &tessera::convert::to_bytes(t, &x).unwrap()));
    }
    v.extend(std::iter::repeat_n(0.0, len));
    v.extend(std::iter::repeat_n(0.75, len));
    v.extend((0..len).map(|i| if i % 3 == 0 { -1.0 } else { (i % 7) as f32 / 8.0 }));
    v
}

/// Quantization on the device gives the CPU's bytes: CPY into each quantized type of rows
/// chosen to sit on rounding boundaries (values of another quantized type, whose quotients
/// tie), zeros, constants and random values.
#[test]
fn quantized_copies_are_bit_identical_to_the_cpu() {
    let Some(gpu) = vulkan() else { return };
    let mut backend = gpu.init_backend().unwrap();
    let len = 512;
    let x = quantization_rows(len);
    // (Copies into the K-quants are not the shader's: the CPU searches for their scales.)
    for t in [DType::Q8_0, DType::Q4_0] {
        let mut g = Graph::new();
        let a = g.new_tensor(DType::F32, &[len, x.len() / len]).unwrap();
        let q = g.cast(a, t).unwrap();
        g.build_forward(q).unwrap();
        let _buffers = tessera::allocator::alloc_graph_tensors(&mut g, gpu.buffer_type()).unwrap();
        g.set_f32(a, &x).unwrap();
        backend.compute(&g, 0..g.nodes().len()).unwrap();
        backend.synchronize().unwrap();
        let want = tessera::convert::to_bytes(t, &x).unwrap();
        let mut got = vec![0u8; want.len()];
        g.get_bytes(q, 0, &mut got).unwrap();
        let block = t.block_bytes();
        let bad: Vec<usize> =
            (0..want.len() / block).filter(|&b| got[b * block..][..block] != want[b * block..][..block]).collect();
        if let Some(&b) = bad.first() {
            let n = t.block_len();
            eprintln!("x = {:?}", &x[b * n..(b + 1) * n]);
            eprintln!("want {:?}\ngot  {:?}", &want[b * block..][..block], &got[b * block..][..block]);
        }
        assert!(
            bad.is_empty(),
            "{t}: {} of {} blocks differ, first {:?}",
            bad.len(),
            want.len() / block,
            &bad[..bad.len().min(8)]
        );
    }
    validation_clean();
}

/// The reference sentences' tokens (tests/data/minilm/reference.json).
fn minilm_tokens() -> Vec<Vec<u32>> {
    let text = std::fs::read_to_string("tests/data/minilm/reference.json").unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let tokens = v["tokens"].as_array().unwrap();
    tokens.iter().map(|t| t.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()).collect()
}

fn minilm_embeddings(backend: &str, devices: &[&'static dyn Device], tokens: &[Vec<u32>]) -> Vec<Vec<f32>> {
    use tessera::runtime::placement::Placement;
    let model = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("weights/all-MiniLM-L6-v2/model.safetensors");
    assert!(model.exists(), "{} not found: fetch it with scripts/fetch_minilm.sh", model.display());
    let placement = Placement::resolve(backend, "", &tessera_models::MODULES, devices).unwrap();
    let mut embedder = tessera_models::Embedder::load(&model, placement).unwrap();
    embedder.embed_tokens(tokens).unwrap()
}

fn worst_cosine(a: &[Vec<f32>], b: &[Vec<f32>]) -> f64 {
    let cos = |x: &[f32], y: &[f32]| {
        let dot: f64 = x.iter().zip(y).map(|(p, q)| *p as f64 * *q as f64).sum();
        let n = |v: &[f32]| v.iter().map(|p| (*p as f64).powi(2)).sum::<f64>().sqrt();
        dot / (n(x) * n(y))
    };
    a.iter().zip(b).map(|(x, y)| cos(x, y)).fold(1.0, f64::min)
}

#[test]
#[ignore = "needs the MiniLM weights: scripts/fetch_minilm.sh"]
fn minilm_on_vulkan_and_split_with_the_cpu_matches_the_cpu() {
    let Some(dev) = vulkan() else { return };
    let tokens: Vec<Vec<u32>> = minilm_tokens().into_iter().take(16).collect();
    let devices = [dev, &tessera::cpu::CPU_DEVICE as &'static dyn Device];
    let cpu = minilm_embeddings("cpu", &devices, &tokens);
    let all = minilm_embeddings(dev.name(), &devices, &tokens);
    let mixed = minilm_embeddings(&format!("embed=cpu,encoder={}", dev.name()), &devices, &tokens);
    let (w_all, w_mixed) = (worst_cosine(&all, &cpu), worst_cosine(&mixed, &cpu));
    println!("MiniLM on {}: worst cosine {w_all:.9}; embed=cpu,encoder={}: {w_mixed:.9}", dev.name(), dev.name());
    assert!(w_all >= 0.999999 && w_mixed >= 0.999999, "{w_all} {w_mixed}");
    validation_clean();
}

#[test]
fn a_product_and_its_bias_fuse_into_one_dispatch_with_the_same_bits() {
    let Some(dev) = vulkan() else { return };
    let mut g = Graph::new();
    let w = g.new_tensor(DType::F32, &[64, 96]).unwrap();
    let x = g.new_tensor(DType::F32, &[64, 40]).unwrap();
    let bias = g.new_tensor(DType::F32, &[96]).unwrap();
    let y = g.mul_mat(w, x).unwrap();
    let z = g.add(y, bias).unwrap();
    let out = g.scale(z, 0.5).unwrap();
    g.build_forward(out).unwrap();
    let _buffers = alloc_tensors(&mut g, &[w, x, bias, y, z, out], dev.buffer_type()).unwrap();
    let values = |n: usize, f: f32| (0..n).map(|i| ((i as f32) * f).sin()).collect::<Vec<f32>>();
    g.set_f32(w, &values(64 * 96, 0.37)).unwrap();
    g.set_f32(x, &values(64 * 40, 0.11)).unwrap();
    g.set_f32(bias, &values(96, 1.3)).unwrap();
    let mut backend = dev.init_backend().unwrap();
    backend.compute_graph(&g).unwrap();
    backend.synchronize().unwrap();
    let one_by_one = g.get_f32(out).unwrap();
    g.set_f32(out, &vec![0.0; one_by_one.len()]).unwrap();
    // Readers of each tensor: intermediate results read once may be fused away.
    let consumers = tessera::consumer_counts(&g).unwrap();
    let split = tessera::SplitRef { graph: &g, nodes: 0..g.nodes().len(), consumers: &consumers, layout: 1 };
    let mut program = backend.prepare(&split).unwrap();
    backend.run(&mut *program, &g).unwrap();
    backend.synchronize().unwrap();
    let fused = g.get_f32(out).unwrap();
    assert!(one_by_one.iter().zip(&fused).all(|(a, b)| a.to_bits() == b.to_bits()));
    assert!(fused.iter().any(|v| *v != 0.0));
    validation_clean();
}
