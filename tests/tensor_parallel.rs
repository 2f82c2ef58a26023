//! Tensor parallelism on CUDA GPUs: MUL_MAT with its weight split by rows across devices
//! (`tessera::cuda::split_buffer_type`). A split over one device is the unsplit product's
//! code on the main GPU and must give its bits; a split over two GPUs goes through NCCL and
//! must match one GPU within f32-accumulation rounding. Tests print why they skip where this
//! machine has fewer GPUs than they need (two-GPU tests also need libnccl.so on the library
//! path).
#![cfg(feature = "cuda")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tessera::allocator::alloc_graph_tensors;
use tessera::cpu::CpuBackend;
use tessera::cuda::{split_buffer_type, SplitBufferType, CUDA_REG};
use tessera::{
    Backend, BackendReg, Buffer, BufferType, BufferUsage, Completion, DType, Device, Error, Graph, Scheduler,
    SchedulerOptions,
};

/// Tests that compute take turns: several splits' NCCL communicators over the same GPUs are
/// safest used one at a time.
fn turn() -> std::sync::MutexGuard<'static, ()> {
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    TURN.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The number of CUDA devices, if at least `needed`; else `None` after printing why the test
/// skips.
fn gpus(needed: usize) -> Option<usize> {
    let count = CUDA_REG.device_count();
    if count < needed {
        eprintln!("skipped: needs {needed} CUDA device(s), this machine has {count}");
        return None;
    }
    Some(count)
}

/// Deterministic values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
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

/// `w [k, m] (of type wt) x x [k, n]` computed by CUDA0's backend node by node, the weight
/// in CUDA0's memory (`split` = None) or in a split buffer of `split`.
fn product(wt: DType, m: usize, k: usize, n: usize, split: Option<&'static SplitBufferType>) -> Vec<f32> {
    let gpu = CUDA_REG.device(0).unwrap();
    let mut g = Graph::new();
    let w = g.new_tensor(wt, &[k, m]).unwrap();
    let x = g.new_tensor(DType::F32, &[k, n]).unwrap();
    let y = g.mul_mat(w, x).unwrap();
    g.build_forward(y).unwrap();
    let _split_buffer = split.map(|t| t.bind_matrix(&mut g, w).unwrap());
    let _buffers = alloc_graph_tensors(&mut g, gpu.buffer_type()).unwrap();
    g.set_f32(w, &values(k * m, 1)).unwrap();
    g.set_f32(x, &values(k * n, 2)).unwrap();
    let mut backend = gpu.init_backend().unwrap();
    backend.compute_graph(&g).unwrap();
    g.get_f32(y).unwrap()
}

/// The largest difference between `a` and `b` relative to the largest magnitude of `b`.
fn relative_difference(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(0.0f32, |s, v| s.max(v.abs())).max(f32::MIN_POSITIVE);
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max) / scale
}

/// Both products convert the activations to the same type and accumulate in f32; only the
/// summation order of the GPU's product kernels may differ (other shapes, other tiles).
const BOUND: f32 = 1e-3;

#[test]
fn split_types_are_checked_and_shared() {
    let count = CUDA_REG.device_count();
    let e = split_buffer_type(&[count + 3], &[]).err().unwrap();
    assert!(matches!(e, Error::UnknownDevice { .. }), "{e}");
    assert!(e.to_string().contains(&format!("#{}", count + 3)), "{e}");
    assert!(split_buffer_type(&[], &[]).is_err());
    let Some(_) = gpus(1) else { return };
    let e = split_buffer_type(&[0, 0], &[]).err().unwrap();
    assert!(e.to_string().contains("CUDA0") && e.to_string().contains("twice"), "{e}");
    let e = split_buffer_type(&[0], &[1.0, 2.0]).err().unwrap();
    assert!(e.to_string().contains("proportions"), "{e}");
    assert!(split_buffer_type(&[0], &[-1.0]).is_err());
    assert!(split_buffer_type(&[0], &[0.0]).is_err());
    // Asked for twice, the same type (types are compared by identity).
    let (a, b) = (split_buffer_type(&[0], &[]).unwrap(), split_buffer_type(&[0], &[]).unwrap());
    assert!(std::ptr::eq(a, b));
    // A byte count cannot say where the rows are.
    let e = a.alloc_buffer(1 << 20).err().unwrap();
    assert!(e.to_string().contains("alloc_matrix"), "{e}");
    // Only the main device reads it.
    assert!(CUDA_REG.device(0).unwrap().supports_buffer_type(a));
    assert!(!tessera::cpu::CPU_DEVICE.supports_buffer_type(a));
}

#[test]
fn only_a_packed_2d_matrix_goes_into_a_split_buffer() {
    let Some(_) = gpus(1) else { return };
    let t = split_buffer_type(&[0], &[]).unwrap();
    let mut g = Graph::new();
    let cube = g.new_tensor(DType::F16, &[64, 8, 2]).unwrap();
    let e = t.bind_matrix(&mut g, cube).err().unwrap();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    let m = g.new_tensor(DType::F16, &[64, 8]).unwrap();
    let view = g.view_2d(m, 32, 8, 128, 0).unwrap();
    assert!(t.bind_matrix(&mut g, view).is_err());
    // A buffer made for one shape refuses another tensor.
    let buffer = t.alloc_matrix(DType::F16, [64, 8]).unwrap();
    let other = g.new_tensor(DType::F16, &[32, 16]).unwrap();
    let e = g.bind(other, tessera::TensorData { buffer: buffer.clone(), offset: 0 }).err().unwrap();
    assert!(e.to_string().contains("split buffer"), "{e}");
    assert!(g.bind(m, tessera::TensorData { buffer, offset: 0 }).is_ok());
}

#[test]
fn bytes_written_across_parts_read_back() {
    let Some(count) = gpus(1) else { return };
    let _turn = turn();
    let devices: Vec<usize> = (0..count).collect();
    let t = split_buffer_type(&devices, &[]).unwrap();
    let buffer = match t.alloc_matrix(DType::F32, [3, 300]) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("skipped: {e}");
            return;
        }
    };
    println!("{buffer:?}");
    assert_eq!(buffer.size(), 3 * 300 * 4);
    let data: Vec<u8> = (0..buffer.size()).map(|i| (i * 7 % 251) as u8).collect();
    buffer.set_bytes(0, &data).unwrap();
    let mut out = vec![0u8; data.len() - 10];
    buffer.get_bytes(5, &mut out).unwrap();
    assert_eq!(out, data[5..data.len() - 5]);
    buffer.fill(100, 3000, 9).unwrap();
    let mut all = vec![0u8; data.len()];
    buffer.get_bytes(0, &mut all).unwrap();
    assert!(all[100..3100].iter().all(|&b| b == 9) && all[..100] == data[..100] && all[3100..] == data[3100..]);
    assert!(buffer.get_bytes(buffer.size() - 1, &mut [0u8; 2]).is_err());
}

#[test]
fn a_split_over_one_device_gives_the_bits_of_the_unsplit_product() {
    let Some(_) = gpus(1) else { return };
    let _turn = turn();
    let split = split_buffer_type(&[0], &[]).unwrap();
    for wt in [DType::F32, DType::F16, DType::BF16, DType::Q8_0] {
        for (m, n) in [(300, 1), (300, 7), (300, 300), (1000, 1300)] {
            let k = 256;
            let (plain, split) = (product(wt, m, k, n, None), product(wt, m, k, n, Some(split)));
            let same = plain.iter().zip(&split).all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{wt} m={m} n={n}: differs by {}", relative_difference(&split, &plain));
        }
    }
}

/// The split over CUDA0 and CUDA1 in `proportions` against CUDA0 alone.
fn two_gpus_match_one(proportions: &[f32], cases: &[(DType, usize, usize, usize)]) {
    let split = split_buffer_type(&[0, 1], proportions).unwrap();
    for &(wt, m, k, n) in cases {
        let plain = product(wt, m, k, n, None);
        let two = product(wt, m, k, n, Some(split));
        let diff = relative_difference(&two, &plain);
        println!("{proportions:?} {wt} m={m} k={k} n={n}: largest relative difference {diff:e}");
        assert!(diff <= BOUND, "{wt} m={m} k={k} n={n}: the split differs by {diff} (bound {BOUND})");
    }
}

#[test]
fn a_split_over_two_gpus_matches_one_gpu() {
    let Some(_) = gpus(2) else { return };
    let _turn = turn();
    let mut cases = Vec::new();
    for wt in [DType::F16, DType::F32, DType::BF16, DType::Q8_0] {
        // M not a multiple of the row granularity; 1 and 7 columns (matrix-vector kernels),
        // 300 (one chunk), 1300 (three chunks).
        for (m, n) in [(300, 1), (300, 7), (1000, 300), (1000, 1300)] {
            cases.push((wt, m, 512, n));
        }
    }
    two_gpus_match_one(&[], &cases);
}

#[test]
fn uneven_splits_and_empty_parts_match_one_gpu() {
    let Some(_) = gpus(2) else { return };
    let _turn = turn();
    let cases = [(DType::F16, 1000, 256, 700), (DType::F16, 100, 256, 9), (DType::F32, 1000, 256, 3)];
    // Three quarters on CUDA0; everything on CUDA1 (the main GPU only sends and gathers);
    // everything on CUDA0 (no transfer at all).
    for proportions in [[3.0, 1.0], [0.0, 1.0], [1.0, 0.0]] {
        two_gpus_match_one(&proportions, &cases);
    }
}

#[test]
fn the_scheduler_runs_a_split_product_on_the_main_gpu() {
    let Some(count) = gpus(1) else { return };
    let _turn = turn();
    let gpu = CUDA_REG.device(0).unwrap();
    let devices: Vec<usize> = (0..count.min(2)).collect();
    let split = split_buffer_type(&devices, &[]).unwrap();
    let (m, k, n) = (384, 128, 40);
    let mut g = Graph::new();
    let w = g.new_tensor(DType::F16, &[k, m]).unwrap();
    let x = g.new_tensor(DType::F32, &[k, n]).unwrap();
    g.set_input(x).unwrap();
    let y = g.mul_mat(w, x).unwrap();
    let o = g.gelu(y).unwrap();
    g.set_output(o).unwrap();
    g.build_forward(o).unwrap();
    let buffer = split.bind_matrix(&mut g, w).unwrap();
    buffer.set_usage(BufferUsage::Weights);
    g.set_f32(w, &values(k * m, 3)).unwrap();
    let backends: Vec<Box<dyn Backend>> = vec![gpu.init_backend().unwrap(), Box::new(CpuBackend::new())];
    let mut sched: Scheduler = Scheduler::new(backends, SchedulerOptions::default()).unwrap();
    let mut outputs = Vec::new();
    for run in 0..3 {
        sched.alloc_graph(&g).unwrap();
        sched.graph().unwrap().set_f32(x, &values(k * n, 10 + run)).unwrap();
        assert_eq!(sched.compute().unwrap(), Completion::Finished);
        outputs.push(sched.graph().unwrap().get_f32(o).unwrap());
    }
    let plan = sched.plan().unwrap().to_string();
    println!("{plan}");
    assert!(plan.contains(gpu.name()), "{plan}");

    // The same graph on the CPU, the weight in host memory.
    let mut c = Graph::new();
    let (cw, cx) = (c.new_tensor(DType::F16, &[k, m]).unwrap(), c.new_tensor(DType::F32, &[k, n]).unwrap());
    let co = c.mul_mat(cw, cx).unwrap();
    let co = c.gelu(co).unwrap();
    c.build_forward(co).unwrap();
    let _host = alloc_graph_tensors(&mut c, tessera::cpu::CPU_DEVICE.buffer_type()).unwrap();
    c.set_f32(cw, &values(k * m, 3)).unwrap();
    let mut cpu = CpuBackend::new();
    for (run, out) in outputs.iter().enumerate() {
        c.set_f32(cx, &values(k * n, 10 + run as u64)).unwrap();
        cpu.compute_graph(&c).unwrap();
        let diff = relative_difference(out, &c.get_f32(co).unwrap());
        assert!(diff <= BOUND, "run {run}: the split product differs from the CPU by {diff}");
    }
}
