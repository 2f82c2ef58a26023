//! The fast CPU kernels against the reference kernels: the whole conformance suite at 1, 2
//! and 3 threads, extra MUL_MAT shapes and row-op cases large enough to be split over
//! threads on every kernel set this processor can run (so the AVX2 and scalar kernels are
//! tested on an AVX-512 machine too), and results that are bitwise identical whatever the
//! thread count.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "conformance/mod.rs"]
mod conformance;

use conformance::rng::Rng;
use conformance::runner::{generate, run_cases, Target, Values};
use conformance::{cases, Case, Init};
use tessera::allocator::alloc_graph_tensors;
use tessera::cpu::CpuBackend;
use tessera::host_buffer::HOST_BUFFER_TYPE;
use tessera::{Backend, BinaryOp, DType, Graph, RopeMode, RopeParams, TensorId, UnaryOp};

const TYPES: [DType; 5] = [DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0];
/// Types the fast kernels read by dequantizing rows (MUL_MAT through f32 copies of the weights).
const DEQUANTIZED: [DType; 8] =
    [DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K];

/// One MUL_MAT case: `a: [k, m, bs...]` of `ta` times `b: [k, n, bs * nr...]`, `b` optionally
/// transposed (`[n, k]` leaf) or with dims 1 and 2 swapped.
fn mul_mat_case(ta: DType, m: usize, n: usize, k: usize, bs: [usize; 2], nr: [usize; 2], layout: &'static str) -> Case {
    let name = format!(
        "MUL_MAT(type_a={ta},type_b=f32,m={m},n={n},k={k},bs={},nr={}{layout})",
        cases::fmt_ne(&bs),
        cases::fmt_ne(&nr)
    );
    Case::new("MUL_MAT", name, move |g| {
        let a = g.input(ta, [k, m, bs[0], bs[1]], None, Init::DEFAULT)?;
        let e = [bs[0] * nr[0], bs[1] * nr[1]];
        let perm = match layout {
            ",trans_b" => Some([1, 0, 2, 3]),
            ",perm_b" => Some([0, 2, 1, 3]),
            _ => None,
        };
        let b = g.input(DType::F32, [k, n, e[0], e[1]], perm, Init::DEFAULT)?;
        g.mul_mat(a, b)
    })
    .with_max_nmse(5e-4)
}

/// Shapes that exercise what the suite's small cases do not: every matrix-vector width
/// (n = 1..9), k past one cache block (float 384, int8 2048 values), m past one block of
/// rows (384 float, 256 int8), partial tiles everywhere, broadcast and strided activations at GEMM sizes.
fn extra_cases() -> Vec<Case> {
    let mut v = Vec::new();
    for ta in TYPES {
        let q = ta.is_quantized();
        let k_odd = if q { 96 } else { 77 };
        let k_long = if q { 2112 } else { 1031 };
        for n in 1..=9 {
            v.push(mul_mat_case(ta, 37, n, k_odd, [1, 1], [1, 1], ""));
        }
        v.push(mul_mat_case(ta, 19, 3, k_long, [1, 1], [1, 1], ""));
        v.push(mul_mat_case(ta, 141, 29, k_long, [1, 1], [1, 1], ""));
        v.push(mul_mat_case(ta, 400, 61, if q { 160 } else { 130 }, [1, 1], [1, 1], ""));
        v.push(mul_mat_case(ta, 45, 21, k_odd, [2, 3], [2, 1], ""));
        v.push(mul_mat_case(ta, 45, 21, k_odd, [1, 1], [3, 2], ",perm_b"));
        v.push(mul_mat_case(ta, 45, 4, k_odd, [2, 1], [1, 2], ",perm_b"));
        v.push(mul_mat_case(ta, 45, 21, k_odd, [1, 1], [1, 1], ",trans_b"));
        v.push(mul_mat_case(ta, 45, 5, k_odd, [1, 1], [1, 1], ",trans_b"));
    }
    v
}

/// The element-wise, normalisation, softmax, rotary, GET_ROWS and CPY ops on shapes big
/// enough to run on several threads: odd row lengths, every kind of broadcast, strided rows.
fn row_op_cases() -> Vec<Case> {
    const NE: [usize; 4] = [1031, 67, 1, 1];
    const SWAP12: Option<[usize; 4]> = Some([0, 2, 1, 3]);
    let mut v = Vec::new();
    let binaries = [
        (BinaryOp::Add, [1031, 1, 1, 1]),
        (BinaryOp::Sub, NE),
        (BinaryOp::Mul, [1, 67, 1, 1]),
        (BinaryOp::Div, [1, 1, 1, 1]),
    ];
    for (op, ne_b) in binaries {
        let name = format!("{}(ne_a={NE:?},ne_b={ne_b:?})", op.name());
        v.push(Case::new(op.name(), name, move |g| {
            let init = if op == BinaryOp::Div { Init::AwayFromZero(0.5, 1.5) } else { Init::DEFAULT };
            let (a, b) = (g.leaf(DType::F32, NE)?, g.leaf_init(DType::F32, ne_b, init)?);
            g.binary(op, a, b)
        }));
    }
    v.push(Case::new("ADD", "ADD(ne_a=[1032,67,1,1],ne_b=[8,67,1,1])", |g| {
        let (a, b) = (g.leaf(DType::F32, [1032, 67, 1, 1])?, g.leaf(DType::F32, [8, 67, 1, 1])?);
        g.binary(BinaryOp::Add, a, b)
    }));
    v.push(Case::new("SCALE", "SCALE(ne=[1031,5,13,1],perm=[0,2,1,3])", |g| {
        let a = g.input(DType::F32, [1031, 5, 13, 1], SWAP12, Init::DEFAULT)?;
        g.scale(a, -1.5)
    }));
    for op in UnaryOp::ALL {
        let init = if op == UnaryOp::Sqrt { Init::Uniform(0.01, 4.0) } else { Init::Uniform(-8.0, 8.0) };
        v.push(Case::new(op.name(), format!("{}(ne={NE:?})", op.name()), move |g| {
            let a = g.leaf_init(DType::F32, NE, init)?;
            g.unary(op, a)
        }));
    }
    v.push(Case::new("NORM", "NORM(ne=[1031,5,13,1],perm=[0,2,1,3])", |g| {
        let a = g.input(DType::F32, [1031, 5, 13, 1], SWAP12, Init::DEFAULT)?;
        g.norm(a, 1e-5)
    }));
    v.push(Case::new("RMS_NORM", format!("RMS_NORM(ne={NE:?})"), |g| {
        let a = g.leaf(DType::F32, NE)?;
        g.rms_norm(a, 1e-6)
    }));
    v.push(Case::new("SOFT_MAX", format!("SOFT_MAX(ne={NE:?},scale=0.5)"), |g| {
        let a = g.leaf_init(DType::F32, NE, Init::Uniform(-20.0, 20.0))?;
        g.soft_max(a, None, 0.5)
    }));
    v.push(Case::new("SOFT_MAX", "SOFT_MAX(ne=[1031,67,2,1],mask=[1031,70,1,1],inf)", |g| {
        let a = g.leaf(DType::F32, [1031, 67, 2, 1])?;
        let m = g.leaf_init(DType::F32, [1031, 70, 1, 1], Init::MaskInf)?;
        g.soft_max(a, Some(m), 1.0)
    }));
    v.push(Case::new("FLASH_ATTN", "FLASH_ATTN(type_kv=f16,d=64,n=40,kv=300,hq=4,hk=2,mask=causal)", |g| {
        let q = g.input(DType::F32, [64, 40, 4, 1], SWAP12, Init::DEFAULT)?;
        let (k, v) = (g.leaf(DType::F16, [64, 300, 2, 1])?, g.leaf(DType::F16, [64, 300, 2, 1])?);
        let m = g.leaf_init(DType::F32, [300, 40, 1, 1], Init::Causal)?;
        g.flash_attn(q, k, v, Some(m), 0.125)
    }));
    for (mode, n_dims) in [(RopeMode::Normal, 128), (RopeMode::Neox, 64), (RopeMode::Neox, 126)] {
        let name = format!("ROPE(ne=[128,32,17,1],n_dims={n_dims},mode={mode:?})");
        v.push(Case::new("ROPE", name, move |g| {
            let a = g.leaf(DType::F32, [128, 32, 17, 1])?;
            let pos = g.leaf_init(DType::I32, [17, 1, 1, 1], Init::Ints(0, 4096))?;
            g.rope(a, pos, RopeParams { mode, n_dims, freq_base: 10000.0, freq_scale: 1.0 })
        }));
    }
    for t in TYPES.into_iter().chain(DEQUANTIZED) {
        v.push(Case::new("GET_ROWS", format!("GET_ROWS(type={t},n=1024,r=300,m=200)"), move |g| {
            let a = g.leaf(t, [1024, 300, 1, 1])?;
            let b = g.leaf_init(DType::I32, [200, 1, 1, 1], Init::Ints(0, 300))?;
            g.get_rows(a, b)
        }));
        for (ts, td) in [(DType::F32, t), (t, DType::F32)] {
            v.push(Case::new("CPY", format!("CPY(type_src={ts},type_dst={td},ne=[1024,67,1,1])"), move |g| {
                let (a, b) = (g.leaf(ts, [1024, 67, 1, 1])?, g.leaf(td, [1024, 67, 1, 1])?);
                g.cpy(a, b)
            }));
        }
    }
    v
}

#[test]
fn row_ops_pass_on_every_kernel_set() {
    let cases = row_op_cases();
    for set in CpuBackend::kernel_sets() {
        for threads in [1, 3] {
            let mut backend = CpuBackend::with_kernels(set, threads).unwrap();
            check(&cases, &mut backend, format!("CPU[{set},{threads}t]"));
        }
    }
}

fn mul_mat_cases() -> Vec<Case> {
    let mut v: Vec<Case> = cases::all().into_iter().filter(|c| c.op == "MUL_MAT").collect();
    v.extend(extra_cases());
    v
}

fn check(cases: &[Case], backend: &mut CpuBackend, name: String) {
    let mut target = Target::new(backend);
    target.name = name;
    let summary = run_cases(cases, &mut target);
    summary.print();
    assert_eq!(summary.failed, 0, "{}", summary.line());
    assert_eq!(summary.skipped, 0, "{}", summary.line());
}

#[test]
fn the_whole_suite_passes_at_1_2_and_3_threads() {
    let cases = conformance::selected_cases();
    for threads in [1, 2, 3] {
        let mut backend = CpuBackend::with_threads(threads);
        let name = format!("CPU[{},{threads}t]", backend.kernel_set());
        check(&cases, &mut backend, name);
    }
}

#[test]
fn mul_mat_passes_on_every_kernel_set() {
    let cases = mul_mat_cases();
    let sets = CpuBackend::kernel_sets();
    println!("kernel sets on this processor: {sets:?}");
    assert_eq!(sets.last(), Some(&"scalar"), "{sets:?}");
    for set in sets {
        for threads in [1, 3] {
            let mut backend = CpuBackend::with_kernels(set, threads).unwrap();
            check(&cases, &mut backend, format!("CPU[{set},{threads}t]"));
        }
    }
}

#[test]
fn unknown_kernel_sets_are_errors_that_list_the_sets() {
    let e = CpuBackend::with_kernels("avx9000", 1).err().unwrap().to_string();
    assert!(e.contains("avx9000") && e.contains("scalar"), "{e}");
}

/// Builds a case's graph in host memory with its leafs initialised as the suite does.
fn build(case: &Case) -> (Graph, TensorId) {
    let (cg, out) = case.build().unwrap();
    let inits: Vec<(TensorId, Init)> = cg.leafs().iter().map(|&id| (id, cg.init_of(id))).collect();
    let (mut graph, _) = cg.into_parts();
    alloc_graph_tensors(&mut graph, &HOST_BUFFER_TYPE).unwrap();
    for (stream, (id, init)) in inits.into_iter().enumerate() {
        let t = graph.tensor(id).unwrap();
        let mut rng = Rng::seeded(&case.name, stream as u64);
        match generate(t.dtype(), t.nelements(), t.ne()[0], init, &mut rng) {
            Values::F32(v) => graph.set_f32(id, &v).unwrap(),
            Values::I32(v) => graph.set_i32(id, &v).unwrap(),
        }
    }
    (graph, out)
}

#[test]
fn results_are_bitwise_identical_for_any_thread_count() {
    let mut cases = mul_mat_cases();
    cases.extend(row_op_cases());
    for set in CpuBackend::kernel_sets() {
        let mut backends: Vec<CpuBackend> =
            [1, 2, 3, 4].into_iter().map(|t| CpuBackend::with_kernels(set, t).unwrap()).collect();
        for case in &cases {
            let (graph, out) = build(case);
            let mut first: Option<Vec<u32>> = None;
            for backend in &mut backends {
                backend.compute_graph(&graph).unwrap();
                let bits: Vec<u32> = graph.get_f32(out).unwrap().iter().map(|v| v.to_bits()).collect();
                match &first {
                    None => first = Some(bits),
                    Some(want) => assert!(
                        *want == bits,
                        "{} on {set}: {} threads differ from 1 thread",
                        case.name,
                        backend.threads()
                    ),
                }
            }
        }
    }
}

#[test]
fn threads_are_set_through_the_registry_extension() {
    use tessera::registry::{extension, Extension};
    let reg = tessera::registry().reg_by_name("CPU").unwrap();
    let Some(Extension::SetThreads(set)) = reg.extension(extension::SET_THREADS) else {
        panic!("the CPU reg has no {} extension", extension::SET_THREADS);
    };
    let mut backend = CpuBackend::with_threads(1);
    set(&mut backend, 3).unwrap();
    assert_eq!(backend.threads(), 3);
    assert!(set(&mut backend, 0).is_err());
    let mut reference = CpuBackend::reference();
    assert!(set(&mut reference, 1).is_ok());
    assert!(set(&mut reference, 2).is_err());
}
