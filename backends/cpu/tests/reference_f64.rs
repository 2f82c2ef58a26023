//! Every reference kernel of the CPU backend checked against a plain f64 computation written
//! independently here.
//!
//! Each case stores random inputs, reads them back (so the rounding of f16/bf16/quantized
//! storage is part of the input, not of the error), computes the expected result in f64 and
//! compares: f32 results within `1e-5 * max(1, |want|)` (sums and dot products: `1e-5` of the
//! sum of the magnitudes of their terms), f16/bf16 results within one rounding step of the
//! type on top of that, integer results and pure data movement exactly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use tessera_core::convert;
use tessera_core::host_buffer::HOST_BUFFER_TYPE;
use tessera_core::{
    Backend, BinaryOp, Buffer, BufferType, DType, Error, Graph, Im2ColParams, Pool2dParams, PoolKind, RopeMode,
    RopeParams, TensorData, TensorId, UnaryOp,
};
use tessera_cpu::CpuBackend;

// ---------------------------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------------------------

/// splitmix64: small, fast and good enough for test data.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `[0, n)`.
    fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    fn uniform(&mut self, n: usize, lo: f64, hi: f64) -> Vec<f32> {
        (0..n).map(|_| (lo + (hi - lo) * self.unit()) as f32).collect()
    }

    /// Magnitudes in `[0.5, 2)` with random signs (divisors).
    fn away_from_zero(&mut self, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| {
                let m = 0.5 + 1.5 * self.unit();
                (if self.next_u64() & 1 == 0 { m } else { -m }) as f32
            })
            .collect()
    }
}

type Ne = [usize; 4];

fn ne4(ne: &[usize]) -> Ne {
    let mut out = [1; 4];
    out[..ne.len()].copy_from_slice(ne);
    out
}

fn count(ne: Ne) -> usize {
    ne.iter().product()
}

/// Row-major position of index `i` in a tensor of shape `ne`.
fn flat(ne: Ne, i: Ne) -> usize {
    i[0] + ne[0] * (i[1] + ne[1] * (i[2] + ne[2] * i[3]))
}

/// Every index of shape `ne`, in row-major order.
fn each(ne: Ne) -> impl Iterator<Item = Ne> {
    (0..count(ne))
        .map(move |f| [f % ne[0], f / ne[0] % ne[1], f / (ne[0] * ne[1]) % ne[2], f / (ne[0] * ne[1] * ne[2])])
}

fn shape(g: &Graph, id: TensorId) -> Ne {
    g.tensor(id).unwrap().ne()
}

fn dtype(g: &Graph, id: TensorId) -> DType {
    g.tensor(id).unwrap().dtype()
}

/// A leaf of shape `ne`, seen through `axes` (`permute` semantics) when given: returns the
/// leaf (to fill) and the operand (the permuted view, of shape `ne`).
fn operand(g: &mut Graph, dt: DType, ne: Ne, axes: Option<[usize; 4]>) -> (TensorId, TensorId) {
    match axes {
        None => {
            let leaf = g.new_tensor(dt, &ne).unwrap();
            (leaf, leaf)
        }
        Some(axes) => {
            // permute moves leaf axis i to axis axes[i]: leaf.ne[i] = view.ne[axes[i]].
            let leaf_ne = [ne[axes[0]], ne[axes[1]], ne[axes[2]], ne[axes[3]]];
            let leaf = g.new_tensor(dt, &leaf_ne).unwrap();
            let view = g.permute(leaf, axes).unwrap();
            assert_eq!(shape(g, view), ne);
            (leaf, view)
        }
    }
}

const TRANSPOSED: Option<[usize; 4]> = Some([1, 0, 2, 3]);

/// Records everything `outs` need and binds every tensor that needs memory to one host
/// buffer (written here rather than with the core allocators so that only the graph API is
/// under test).
fn setup(g: &mut Graph, outs: &[TensorId]) {
    for &o in outs {
        g.build_forward(o).unwrap();
    }
    let align = HOST_BUFFER_TYPE.alignment();
    let round = |n: usize| n.div_ceil(align) * align;
    let ids: Vec<TensorId> = (0..g.tensors().len() as u32).map(TensorId).collect();
    let own = |g: &Graph, id: TensorId| g.tensor(id).unwrap().view_src().is_none();
    let total: usize =
        ids.iter().filter(|&&id| own(g, id)).map(|&id| round(g.tensor(id).unwrap().nbytes().max(1))).sum();
    let buffer: Arc<dyn Buffer> = HOST_BUFFER_TYPE.alloc_buffer(total.max(1)).unwrap();
    let mut offset = 0;
    for id in ids {
        if own(g, id) {
            let size = round(g.tensor(id).unwrap().nbytes().max(1));
            g.bind(id, TensorData { buffer: buffer.clone(), offset }).unwrap();
            offset += size;
        }
    }
}

fn compute(g: &Graph, what: &str) {
    match CpuBackend::reference().compute_graph(g) {
        Ok(()) => {}
        Err(Error::Cancelled) => panic!("{what}: the CPU kernel is not implemented yet (returned Error::Cancelled)"),
        Err(e) => panic!("{what}: compute failed: {e}"),
    }
}

/// Stores `values` into the leaf `id` (converting to its type).
fn set(g: &Graph, id: TensorId, values: &[f32]) {
    g.set_f32(id, values).unwrap();
}

/// Fills the leaf `id` with values uniform in `[lo, hi)`.
fn fill(g: &Graph, id: TensorId, rng: &mut Rng, lo: f64, hi: f64) {
    let n = count(shape(g, id));
    set(g, id, &rng.uniform(n, lo, hi));
}

/// The values of `id` (any layout) in row-major order, as stored (after type rounding).
fn read(g: &Graph, id: TensorId) -> Vec<f64> {
    g.get_f32(id).unwrap().into_iter().map(f64::from).collect()
}

/// The values of the contiguous leaf `id`, decoded from its raw bytes with `convert` (the
/// dequantized weights for quantized types).
fn read_raw(g: &Graph, id: TensorId) -> Vec<f64> {
    let t = g.tensor(id).unwrap();
    assert!(t.is_contiguous());
    let mut bytes = vec![0u8; t.nbytes()];
    g.get_bytes(id, 0, &mut bytes).unwrap();
    convert::to_f32_vec(t.dtype(), &bytes).into_iter().map(f64::from).collect()
}

/// One rounding step of a storage type, relative to the value.
fn type_rel(dt: DType) -> f64 {
    match dt {
        DType::F16 => 1e-3,
        DType::BF16 => 8e-3,
        _ => 0.0,
    }
}

/// Compares `got` with `want` value by value: `|got - want| <= 1e-5 * scale + rel(type) * |want|`.
/// Infinite and NaN expectations must be met exactly.
fn compare(ne: Ne, dt: DType, got: &[f32], want: &[f64], scale: &[f64]) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!("{} values, expected {}", got.len(), want.len()));
    }
    let mut bad = Vec::new();
    let mut worst = (0.0f64, 0usize);
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let g = f64::from(g);
        let tol = 1e-5 * scale[i] + type_rel(dt) * w.abs();
        let ok = if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() {
            g == w
        } else {
            g.is_finite() && (g - w).abs() <= tol
        };
        if !ok {
            let ratio = if (g - w).is_finite() { (g - w).abs() / tol.max(f64::MIN_POSITIVE) } else { f64::INFINITY };
            if ratio >= worst.0 {
                worst = (ratio, i);
            }
            bad.push((i, g, w, tol));
        }
    }
    if bad.is_empty() {
        return Ok(());
    }
    let idx = |f: usize| each(ne).nth(f).unwrap();
    let mut msg = format!("{} of {} values ({dt}, shape {ne:?}) differ:", bad.len(), got.len());
    for &(i, g, w, tol) in bad.iter().take(8) {
        msg += &format!("\n  at {:?}: got {g:e}, want {w:e} (|diff| {:e}, tol {tol:e})", idx(i), (g - w).abs());
    }
    msg += &format!("\n  worst at {:?}", idx(worst.1));
    Err(msg)
}

/// Checks an element-wise result: errors relative to `max(1, |want|)`.
fn check_close(what: &str, g: &Graph, out: TensorId, want: &[f64]) {
    let scale: Vec<f64> = want.iter().map(|w| w.abs().max(1.0)).collect();
    check_scaled(what, g, out, want, &scale);
}

/// Checks a result whose f32 errors scale with `scale` (the sum of |terms| of a reduction).
fn check_scaled(what: &str, g: &Graph, out: TensorId, want: &[f64], scale: &[f64]) {
    let got = g.get_f32(out).unwrap();
    if let Err(e) = compare(shape(g, out), dtype(g, out), &got, want, scale) {
        panic!("{what}: {e}");
    }
}

/// Checks data movement: every value equal.
fn check_exact(what: &str, g: &Graph, out: TensorId, want: &[f32]) {
    let got = g.get_f32(out).unwrap();
    assert_eq!(got.len(), want.len(), "{what}: number of values");
    let ne = shape(g, out);
    let bad: Vec<String> = (0..got.len())
        .filter(|&i| !(got[i] == want[i] || got[i].is_nan() && want[i].is_nan()))
        .take(8)
        .map(|i| format!("\n  at {:?}: got {:e}, want {:e}", each(ne).nth(i).unwrap(), got[i], want[i]))
        .collect();
    assert!(bad.is_empty(), "{what}: values differ:{}", bad.concat());
}

fn check_exact_i32(what: &str, g: &Graph, out: TensorId, want: &[i32]) {
    let got = g.get_i32(out).unwrap();
    assert_eq!(got, want, "{what}");
}

fn to_f32(v: &[f64]) -> Vec<f32> {
    v.iter().map(|&x| x as f32).collect()
}

/// The error function in f64: `2/sqrt(pi) exp(-x^2) sum_n 2^n x^(2n+1) / (2n+1)!!`
/// (Abramowitz-Stegun 7.1.6; positive terms, so no cancellation), 1 beyond |x| = 6.
fn erf(x: f64) -> f64 {
    let a = x.abs();
    if a >= 6.0 {
        return 1f64.copysign(x);
    }
    let (mut term, mut sum) = (a, a);
    let mut n = 0.0;
    loop {
        n += 1.0;
        term *= 2.0 * a * a / (2.0 * n + 1.0);
        sum += term;
        if term <= sum * 1e-18 {
            break;
        }
    }
    (2.0 / std::f64::consts::PI.sqrt() * (-a * a).exp() * sum).copysign(x)
}

#[test]
fn erf_reference_is_accurate() {
    // Values from tables (DLMF / Wolfram), 16 digits.
    for (x, want) in [
        (0.0, 0.0),
        (0.1, 0.1124629160182849),
        (0.5, 0.5204998778130465),
        (1.0, 0.8427007929497149),
        (2.0, 0.9953222650189527),
        (3.0, 0.9999779095030014),
        (4.5, 0.9999999998033839),
        (-1.5, -0.9661051464753108),
    ] {
        assert!((erf(x) - want).abs() <= 1e-15, "erf({x}) = {}, want {want}", erf(x));
    }
}

// ---------------------------------------------------------------------------------------------
// Element-wise
// ---------------------------------------------------------------------------------------------

fn binary_ref(op: BinaryOp, x: f64, y: f64) -> f64 {
    match op {
        BinaryOp::Add => x + y,
        BinaryOp::Sub => x - y,
        BinaryOp::Mul => x * y,
        BinaryOp::Div => x / y,
    }
}

type Operand = (DType, Ne, Option<[usize; 4]>);

fn binary_case(op: BinaryOp, (adt, ane, aperm): Operand, (bdt, bne, bperm): Operand, seed: u64) {
    let what = format!("{} a {adt} {ane:?} perm {aperm:?}, b {bdt} {bne:?} perm {bperm:?}", op.name());
    let mut g = Graph::new();
    let (la, a) = operand(&mut g, adt, ane, aperm);
    let (lb, b) = operand(&mut g, bdt, bne, bperm);
    let out = g.binary(op, a, b).unwrap();
    setup(&mut g, &[out]);
    let mut rng = Rng::new(seed);
    fill(&g, la, &mut rng, -3.0, 3.0);
    if op == BinaryOp::Div {
        set(&g, lb, &rng.away_from_zero(count(bne)));
    } else {
        fill(&g, lb, &mut rng, -3.0, 3.0);
    }
    let (x, y) = (read(&g, a), read(&g, b));
    compute(&g, &what);
    assert_eq!(shape(&g, out), ane, "{what}: shape");
    assert_eq!(dtype(&g, out), adt, "{what}: type");
    let want: Vec<f64> = each(ane)
        .map(|i| {
            let j = [i[0] % bne[0], i[1] % bne[1], i[2] % bne[2], i[3] % bne[3]];
            binary_ref(op, x[flat(ane, i)], y[flat(bne, j)])
        })
        .collect();
    check_close(&what, &g, out, &want);
}

fn binary_cases(op: BinaryOp) {
    use DType::{BF16, F16, F32};
    let seed = op as u64 * 100;
    // Same shape, odd sizes.
    binary_case(op, (F32, [7, 5, 3, 1], None), (F32, [7, 5, 3, 1], None), seed);
    // Broadcast along every dimension at once (b repeats 2 x 2 x 3 x 1 times).
    binary_case(op, (F32, [6, 4, 3, 2], None), (F32, [3, 2, 1, 2], None), seed + 1);
    // A row vector and a column vector.
    binary_case(op, (F32, [9, 4, 1, 1], None), (F32, [9, 1, 1, 1], None), seed + 2);
    binary_case(op, (F32, [9, 4, 1, 1], None), (F32, [1, 4, 1, 1], None), seed + 3);
    // Non-contiguous operands.
    binary_case(op, (F32, [5, 6, 2, 1], TRANSPOSED), (F32, [5, 3, 1, 1], TRANSPOSED), seed + 4);
    binary_case(op, (F32, [4, 3, 5, 2], Some([2, 0, 1, 3])), (F32, [4, 3, 5, 1], Some([1, 2, 0, 3])), seed + 5);
    // Half-precision operands (the result has src0's type).
    binary_case(op, (F16, [9, 4, 2, 1], None), (F32, [9, 1, 2, 1], None), seed + 6);
    binary_case(op, (BF16, [7, 3, 1, 1], TRANSPOSED), (F16, [1, 3, 1, 1], None), seed + 7);
    binary_case(op, (F32, [6, 4, 1, 1], None), (BF16, [6, 4, 1, 1], TRANSPOSED), seed + 8);
}

#[test]
fn add_broadcast_matches_f64() {
    binary_cases(BinaryOp::Add);
}

#[test]
fn sub_broadcast_matches_f64() {
    binary_cases(BinaryOp::Sub);
}

#[test]
fn mul_broadcast_matches_f64() {
    binary_cases(BinaryOp::Mul);
}

#[test]
fn div_broadcast_matches_f64() {
    binary_cases(BinaryOp::Div);
}

#[test]
fn scale_matches_f64() {
    for (k, (dt, ne, perm, s)) in [
        (DType::F32, [7, 3, 2, 1], None, -1.75f32),
        (DType::F32, [5, 4, 1, 1], TRANSPOSED, 0.3),
        (DType::F16, [9, 2, 1, 1], None, 2.5),
        (DType::BF16, [6, 3, 2, 1], TRANSPOSED, -0.7),
    ]
    .into_iter()
    .enumerate()
    {
        let what = format!("SCALE {dt} {ne:?} perm {perm:?} by {s}");
        let mut g = Graph::new();
        let (leaf, a) = operand(&mut g, dt, ne, perm);
        let out = g.scale(a, s).unwrap();
        setup(&mut g, &[out]);
        fill(&g, leaf, &mut Rng::new(k as u64), -4.0, 4.0);
        let x = read(&g, a);
        compute(&g, &what);
        let want: Vec<f64> = x.iter().map(|v| v * f64::from(s)).collect();
        check_close(&what, &g, out, &want);
    }
}

fn unary_ref(op: UnaryOp, x: f64) -> f64 {
    use std::f64::consts::{FRAC_1_SQRT_2, PI};
    match op {
        UnaryOp::Sqr => x * x,
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Neg => -x,
        UnaryOp::Abs => x.abs(),
        UnaryOp::Exp => x.exp(),
        UnaryOp::Relu => x.max(0.0),
        UnaryOp::Gelu => 0.5 * x * (1.0 + ((2.0 / PI).sqrt() * (x + 0.044715 * x * x * x)).tanh()),
        UnaryOp::GeluErf => 0.5 * x * (1.0 + erf(x * FRAC_1_SQRT_2)),
        UnaryOp::Silu => x / (1.0 + (-x).exp()),
        UnaryOp::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        UnaryOp::Tanh => x.tanh(),
    }
}

fn unary_cases(op: UnaryOp) {
    let (lo, hi) = match op {
        UnaryOp::Sqrt => (0.0, 5.0),
        UnaryOp::Exp => (-6.0, 6.0),
        _ => (-5.0, 5.0),
    };
    for (k, (dt, ne, perm)) in [
        (DType::F32, [13, 3, 2, 1], None),
        (DType::F32, [5, 4, 3, 1], TRANSPOSED),
        (DType::F16, [9, 4, 1, 1], TRANSPOSED),
        (DType::BF16, [7, 2, 3, 1], None),
    ]
    .into_iter()
    .enumerate()
    {
        let what = format!("{} {dt} {ne:?} perm {perm:?}", op.name());
        let mut g = Graph::new();
        let (leaf, a) = operand(&mut g, dt, ne, perm);
        let out = g.unary(op, a).unwrap();
        setup(&mut g, &[out]);
        let mut values = Rng::new(1000 + k as u64).uniform(count(ne), lo, hi);
        values[0] = 0.0; // an exact zero (a corner for sqrt, relu, abs, ...)
        set(&g, leaf, &values);
        let x = read(&g, a);
        compute(&g, &what);
        assert_eq!((shape(&g, out), dtype(&g, out)), (ne, dt), "{what}: shape and type");
        let want: Vec<f64> = x.iter().map(|&v| unary_ref(op, v)).collect();
        check_close(&what, &g, out, &want);
    }
}

#[test]
fn sqr_matches_f64() {
    unary_cases(UnaryOp::Sqr);
}

#[test]
fn sqrt_matches_f64() {
    unary_cases(UnaryOp::Sqrt);
}

#[test]
fn neg_matches_f64() {
    unary_cases(UnaryOp::Neg);
}

#[test]
fn abs_matches_f64() {
    unary_cases(UnaryOp::Abs);
}

#[test]
fn exp_matches_f64() {
    unary_cases(UnaryOp::Exp);
}

#[test]
fn relu_matches_f64() {
    unary_cases(UnaryOp::Relu);
}

#[test]
fn gelu_matches_f64() {
    unary_cases(UnaryOp::Gelu);
}

#[test]
fn gelu_erf_matches_f64() {
    unary_cases(UnaryOp::GeluErf);
}

#[test]
fn silu_matches_f64() {
    unary_cases(UnaryOp::Silu);
}

#[test]
fn sigmoid_matches_f64() {
    unary_cases(UnaryOp::Sigmoid);
}

#[test]
fn tanh_matches_f64() {
    unary_cases(UnaryOp::Tanh);
}

// ---------------------------------------------------------------------------------------------
// Row reductions and row-wise ops
// ---------------------------------------------------------------------------------------------

const ROW_CASES: [(DType, Ne, Option<[usize; 4]>); 5] = [
    (DType::F32, [7, 3, 2, 2], None),
    (DType::F32, [1, 5, 1, 1], None),
    (DType::F32, [6, 5, 3, 1], TRANSPOSED),
    (DType::F16, [33, 4, 1, 1], None),
    (DType::BF16, [5, 4, 3, 1], Some([1, 2, 0, 3])),
];

fn rows(x: &[f64], n0: usize) -> impl Iterator<Item = &[f64]> {
    x.chunks_exact(n0)
}

fn reduce_cases(mean: bool) {
    let name = if mean { "MEAN" } else { "SUM_ROWS" };
    for (k, (dt, ne, perm)) in ROW_CASES.into_iter().enumerate() {
        let what = format!("{name} {dt} {ne:?} perm {perm:?}");
        let mut g = Graph::new();
        let (leaf, a) = operand(&mut g, dt, ne, perm);
        let out = if mean { g.mean(a).unwrap() } else { g.sum_rows(a).unwrap() };
        setup(&mut g, &[out]);
        fill(&g, leaf, &mut Rng::new(2000 + k as u64), -2.0, 3.0);
        let x = read(&g, a);
        compute(&g, &what);
        assert_eq!(shape(&g, out), [1, ne[1], ne[2], ne[3]], "{what}: shape");
        assert_eq!(dtype(&g, out), if mean { DType::F32 } else { dt }, "{what}: type");
        let div = if mean { ne[0] as f64 } else { 1.0 };
        let want: Vec<f64> = rows(&x, ne[0]).map(|r| r.iter().sum::<f64>() / div).collect();
        let terms: Vec<f64> = rows(&x, ne[0]).map(|r| r.iter().map(|v| v.abs()).sum::<f64>() / div).collect();
        check_scaled(&what, &g, out, &want, &terms);
    }
}

#[test]
fn sum_rows_matches_f64() {
    reduce_cases(false);
}

#[test]
fn mean_matches_f64() {
    reduce_cases(true);
}

#[test]
fn argmax_matches_f64() {
    for (k, (dt, ne, perm, ties)) in [
        (DType::F32, [9, 6, 1, 1], None, true),
        (DType::F32, [37, 4, 1, 1], None, false),
        (DType::F32, [5, 7, 1, 1], TRANSPOSED, true),
        (DType::F16, [8, 5, 1, 1], None, true),
        (DType::BF16, [1, 3, 1, 1], None, false),
    ]
    .into_iter()
    .enumerate()
    {
        let what = format!("ARGMAX {dt} {ne:?} perm {perm:?}");
        let mut g = Graph::new();
        let (leaf, a) = operand(&mut g, dt, ne, perm);
        let out = g.argmax(a).unwrap();
        setup(&mut g, &[out]);
        let mut rng = Rng::new(3000 + k as u64);
        let values: Vec<f32> = if ties {
            // Small integers: most rows have a tied maximum, and the first one must win.
            (0..count(ne)).map(|_| rng.below(5) as f32 - 3.0).collect()
        } else {
            rng.uniform(count(ne), -10.0, 10.0)
        };
        set(&g, leaf, &values);
        let x = read(&g, a);
        compute(&g, &what);
        assert_eq!(shape(&g, out), [ne[1], 1, 1, 1], "{what}: shape");
        let want: Vec<i32> = rows(&x, ne[0])
            .map(|r| {
                let max = r.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                r.iter().position(|&v| v == max).unwrap() as i32
            })
            .collect();
        check_exact_i32(&what, &g, out, &want);
    }
}

fn soft_max_ref(x: &[f64], ne: Ne, mask: Option<(&[f64], Ne)>, scale: f64) -> Vec<f64> {
    let mut out = vec![0.0; x.len()];
    for r in 0..count(ne) / ne[0] {
        let (i1, i2, i3) = (r % ne[1], r / ne[1] % ne[2], r / (ne[1] * ne[2]));
        let v: Vec<f64> = (0..ne[0])
            .map(|i0| {
                let m = mask.map_or(0.0, |(m, mne)| m[flat(mne, [i0, i1, i2 % mne[2], i3 % mne[3]])]);
                x[r * ne[0] + i0] * scale + m
            })
            .collect();
        let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if max == f64::NEG_INFINITY {
            continue; // a fully masked row is all zeros
        }
        let sum: f64 = v.iter().map(|u| (u - max).exp()).sum();
        for (i0, u) in v.iter().enumerate() {
            out[r * ne[0] + i0] = (u - max).exp() / sum;
        }
    }
    out
}

type MaskCase = Option<(DType, Ne)>;

fn soft_max_case(k: u64, (dt, ne, perm): Operand, mask: MaskCase, scale: f32) {
    let what = format!("SOFT_MAX {dt} {ne:?} perm {perm:?} mask {mask:?} scale {scale}");
    let mut g = Graph::new();
    let (leaf, a) = operand(&mut g, dt, ne, perm);
    let m = mask.map(|(mdt, mne)| g.new_tensor(mdt, &mne).unwrap());
    let out = g.soft_max(a, m, scale).unwrap();
    setup(&mut g, &[out]);
    let mut rng = Rng::new(4000 + k);
    fill(&g, leaf, &mut rng, -4.0, 4.0);
    let x = read(&g, a);
    let mvals = m.map(|m| {
        let mne = shape(&g, m);
        let mut values = rng.uniform(count(mne), -2.0, 1.0);
        for (f, v) in values.iter_mut().enumerate() {
            // Causal-style -inf entries, and row 1 of the first mask matrix fully masked.
            let [i0, i1, i2, i3] = each(mne).nth(f).unwrap();
            if i0 > i1 + 2 || (i1 == 1 && i2 == 0 && i3 == 0) {
                *v = f32::NEG_INFINITY;
            }
        }
        set(&g, m, &values);
        (read(&g, m), mne)
    });
    compute(&g, &what);
    let want = soft_max_ref(&x, ne, mvals.as_ref().map(|(v, mne)| (v.as_slice(), *mne)), f64::from(scale));
    check_close(&what, &g, out, &want);
}

#[test]
fn soft_max_matches_f64() {
    soft_max_case(0, (DType::F32, [7, 5, 2, 1], None), None, 1.0);
    soft_max_case(1, (DType::F32, [1, 3, 1, 1], None), None, 1.0);
    soft_max_case(2, (DType::F16, [9, 3, 1, 1], None), None, 0.37);
    soft_max_case(3, (DType::BF16, [6, 4, 1, 1], TRANSPOSED), None, 1.5);
    soft_max_case(4, (DType::F32, [5, 6, 2, 1], TRANSPOSED), None, -0.5);
}

#[test]
fn soft_max_with_mask_matches_f64() {
    // The mask has more rows than needed and repeats over dims 2 (2 of 4) and 3 (1 of 2).
    soft_max_case(10, (DType::F32, [7, 3, 4, 2], None), Some((DType::F32, [7, 5, 2, 1])), 0.8);
    soft_max_case(11, (DType::F32, [8, 4, 1, 3], None), Some((DType::F16, [8, 4, 1, 1])), 1.0);
    soft_max_case(12, (DType::BF16, [6, 4, 2, 1], None), Some((DType::F16, [6, 4, 2, 1])), 0.5);
    soft_max_case(13, (DType::F16, [5, 5, 3, 1], None), Some((DType::F32, [5, 6, 1, 1])), 2.0);
    soft_max_case(14, (DType::F32, [6, 4, 2, 2], Some([2, 0, 1, 3])), Some((DType::F32, [6, 4, 1, 2])), 0.6);
}

fn norm_cases(rms: bool) {
    let name = if rms { "RMS_NORM" } else { "NORM" };
    for (k, (dt, ne, perm)) in ROW_CASES.into_iter().enumerate() {
        for eps in [1e-5f32, 1e-2] {
            let what = format!("{name} {dt} {ne:?} perm {perm:?} eps {eps}");
            let mut g = Graph::new();
            let (leaf, a) = operand(&mut g, dt, ne, perm);
            let out = if rms { g.rms_norm(a, eps).unwrap() } else { g.norm(a, eps).unwrap() };
            setup(&mut g, &[out]);
            fill(&g, leaf, &mut Rng::new(5000 + k as u64), -2.0, 3.0);
            let x = read(&g, a);
            compute(&g, &what);
            assert_eq!((shape(&g, out), dtype(&g, out)), (ne, dt), "{what}: shape and type");
            let eps = f64::from(eps);
            let n = ne[0] as f64;
            let want: Vec<f64> = rows(&x, ne[0])
                .flat_map(|r| {
                    let out: Vec<f64> = if rms {
                        let ms = r.iter().map(|v| v * v).sum::<f64>() / n;
                        r.iter().map(|v| v / (ms + eps).sqrt()).collect()
                    } else {
                        let mean = r.iter().sum::<f64>() / n;
                        let var = r.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
                        r.iter().map(|v| (v - mean) / (var + eps).sqrt()).collect()
                    };
                    out
                })
                .collect();
            check_close(&what, &g, out, &want);
        }
    }
}

#[test]
fn norm_matches_f64() {
    norm_cases(false);
}

#[test]
fn rms_norm_matches_f64() {
    norm_cases(true);
}

#[test]
fn diag_mask_inf_matches_f64() {
    for (k, (dt, ne, perm, n_past)) in [
        (DType::F32, [6, 4, 2, 1], None, 0),
        (DType::F32, [6, 4, 2, 1], None, 2),
        (DType::F32, [5, 7, 1, 2], TRANSPOSED, 1),
        (DType::F16, [5, 5, 1, 1], None, 0),
        (DType::BF16, [4, 3, 1, 1], None, 9),
    ]
    .into_iter()
    .enumerate()
    {
        let what = format!("DIAG_MASK_INF {dt} {ne:?} perm {perm:?} n_past {n_past}");
        let mut g = Graph::new();
        let (leaf, a) = operand(&mut g, dt, ne, perm);
        let out = g.diag_mask_inf(a, n_past).unwrap();
        setup(&mut g, &[out]);
        fill(&g, leaf, &mut Rng::new(6000 + k as u64), -3.0, 3.0);
        let x = read(&g, a);
        compute(&g, &what);
        let want: Vec<f32> =
            each(ne).map(|i| if i[0] > n_past + i[1] { f32::NEG_INFINITY } else { x[flat(ne, i)] as f32 }).collect();
        check_exact(&what, &g, out, &want);
    }
}

// ---------------------------------------------------------------------------------------------
// MUL_MAT
// ---------------------------------------------------------------------------------------------

/// `dst[i, j, i2, i3] = sum_k a[k, i, i2 / (b2 / a2), i3 / (b3 / a3)] * b[k, j, i2, i3]` (ggml's
/// broadcast: consecutive matrices of b share one of a); `by_modulo` picks `i2 % a2` instead.
fn mul_mat_ref(a: &[f64], ane: Ne, b: &[f64], bne: Ne, by_modulo: bool) -> (Vec<f64>, Vec<f64>) {
    let (r2, r3) = (bne[2] / ane[2], bne[3] / ane[3]);
    let one = ne4(&[ane[1], bne[1], bne[2], bne[3]]);
    let mut want = Vec::new();
    let mut terms = Vec::new();
    for [i, j, i2, i3] in each(one) {
        let (a2, a3) = if by_modulo { (i2 % ane[2], i3 % ane[3]) } else { (i2 / r2, i3 / r3) };
        let (mut s, mut t) = (0.0, 0.0);
        for k in 0..ane[0] {
            let p = a[flat(ane, [k, i, a2, a3])] * b[flat(bne, [k, j, i2, i3])];
            s += p;
            t += p.abs();
        }
        want.push(s);
        terms.push(t);
    }
    (want, terms)
}

fn mul_mat_case(k: u64, (adt, ane, aperm): Operand, (bne, bperm): (Ne, Option<[usize; 4]>)) {
    let what = format!("MUL_MAT a {adt} {ane:?} perm {aperm:?}, b f32 {bne:?} perm {bperm:?}");
    let mut g = Graph::new();
    let (la, a) = operand(&mut g, adt, ane, aperm);
    let (lb, b) = operand(&mut g, DType::F32, bne, bperm);
    let out = g.mul_mat(a, b).unwrap();
    setup(&mut g, &[out]);
    let mut rng = Rng::new(7000 + k);
    fill(&g, la, &mut rng, -1.0, 1.0);
    fill(&g, lb, &mut rng, -1.0, 1.0);
    // The weights as stored: dequantized from their raw bytes for quantized types.
    let x = if aperm.is_none() { read_raw(&g, a) } else { read(&g, a) };
    let y = read(&g, b);
    compute(&g, &what);
    assert_eq!(shape(&g, out), [ane[1], bne[1], bne[2], bne[3]], "{what}: shape");
    assert_eq!(dtype(&g, out), DType::F32, "{what}: type");
    let (want, terms) = mul_mat_ref(&x, ane, &y, bne, false);
    let got = g.get_f32(out).unwrap();
    if let Err(e) = compare(shape(&g, out), DType::F32, &got, &want, &terms) {
        let (alt, alt_terms) = mul_mat_ref(&x, ane, &y, bne, true);
        let note = if (ane[2], ane[3]) != (bne[2], bne[3])
            && compare(shape(&g, out), DType::F32, &got, &alt, &alt_terms).is_ok()
        {
            " (the result matches a broadcast by i2 % a2, i3 % a3 instead of ggml's i2 / (b2/a2))"
        } else {
            ""
        };
        panic!("{what}: {e}{note}");
    }
}

#[test]
fn mul_mat_matches_f64() {
    mul_mat_case(0, (DType::F32, [7, 5, 1, 1], None), ([7, 3, 1, 1], None));
    mul_mat_case(1, (DType::F32, [1, 4, 1, 1], None), ([1, 2, 1, 1], None));
    mul_mat_case(2, (DType::F32, [13, 1, 1, 1], None), ([13, 1, 1, 1], None));
    mul_mat_case(3, (DType::F32, [6, 3, 2, 1], None), ([6, 4, 2, 1], None));
    mul_mat_case(4, (DType::F16, [9, 4, 2, 1], None), ([9, 3, 2, 1], None));
    mul_mat_case(5, (DType::BF16, [8, 3, 1, 1], None), ([8, 5, 1, 1], None));
    // Non-contiguous operands: a with its matrices interleaved, b transposed.
    mul_mat_case(6, (DType::F32, [6, 3, 2, 1], Some([0, 2, 1, 3])), ([6, 4, 2, 1], TRANSPOSED));
    mul_mat_case(7, (DType::F16, [5, 4, 3, 1], Some([0, 2, 1, 3])), ([5, 2, 3, 1], Some([2, 0, 1, 3])));
}

#[test]
fn mul_mat_broadcast_matches_f64() {
    mul_mat_case(10, (DType::F32, [5, 4, 2, 3], None), ([5, 3, 4, 6], None));
    mul_mat_case(11, (DType::F32, [4, 2, 1, 1], None), ([4, 3, 3, 2], None));
    mul_mat_case(12, (DType::F16, [6, 3, 2, 1], None), ([6, 2, 6, 1], TRANSPOSED));
    mul_mat_case(13, (DType::BF16, [3, 2, 1, 2], None), ([3, 4, 1, 4], None));
}

#[test]
fn mul_mat_quantized_matches_f64() {
    mul_mat_case(20, (DType::Q8_0, [64, 5, 1, 1], None), ([64, 3, 1, 1], None));
    mul_mat_case(21, (DType::Q4_0, [96, 3, 1, 1], None), ([96, 2, 1, 1], None));
    mul_mat_case(22, (DType::Q8_0, [32, 3, 2, 1], None), ([32, 2, 4, 1], None));
    mul_mat_case(23, (DType::Q4_0, [64, 2, 1, 2], None), ([64, 3, 2, 2], TRANSPOSED));
    // Quantized rows stay contiguous when the matrices are permuted.
    mul_mat_case(24, (DType::Q8_0, [32, 4, 3, 1], Some([0, 2, 1, 3])), ([32, 2, 3, 1], None));
}

// ---------------------------------------------------------------------------------------------
// GET_ROWS
// ---------------------------------------------------------------------------------------------

/// Rows of `a` picked by `idx: [m, d2, d3]`: `dst[:, i, j, k] = a[:, idx[i, j, k], j, k]`.
fn get_rows_ref<T: Copy>(a: &[T], ane: Ne, idx: &[i32], ine: Ne) -> Vec<T> {
    let one = [ane[0], ine[0], ine[1], ine[2]];
    each(one).map(|[c, i, j, k]| a[flat(ane, [c, idx[flat(ine, [i, j, k, 0])] as usize, j, k])]).collect()
}

fn get_rows_case(k: u64, (dt, ane, perm): Operand, ine: Ne) {
    let what = format!("GET_ROWS a {dt} {ane:?} perm {perm:?}, indices {ine:?}");
    let mut g = Graph::new();
    let (la, a) = operand(&mut g, dt, ane, perm);
    let ids = g.new_tensor(DType::I32, &ine).unwrap();
    let out = g.get_rows(a, ids).unwrap();
    setup(&mut g, &[out]);
    let mut rng = Rng::new(8000 + k);
    let idx: Vec<i32> = (0..count(ine)).map(|_| rng.below(ane[1]) as i32).collect();
    g.set_i32(ids, &idx).unwrap();
    assert_eq!(shape(&g, out), [ane[0], ine[0], ine[1], ine[2]], "{what}: shape");
    if dt == DType::I32 {
        // Values far beyond f32's exact integers, to catch a round trip through f32.
        let values: Vec<i32> = (0..count(ane)).map(|_| rng.next_u64() as i32 | 0x0100_0001).collect();
        g.set_i32(la, &values).unwrap();
        let x = g.get_i32(a).unwrap();
        compute(&g, &what);
        assert_eq!(dtype(&g, out), DType::I32, "{what}: type");
        check_exact_i32(&what, &g, out, &get_rows_ref(&x, ane, &idx, ine));
    } else {
        fill(&g, la, &mut rng, -3.0, 3.0);
        let x = if perm.is_none() { read_raw(&g, a) } else { read(&g, a) };
        compute(&g, &what);
        assert_eq!(dtype(&g, out), DType::F32, "{what}: type");
        check_exact(&what, &g, out, &to_f32(&get_rows_ref(&x, ane, &idx, ine)));
    }
}

#[test]
fn get_rows_matches_f64() {
    get_rows_case(0, (DType::F32, [5, 6, 1, 1], None), [4, 1, 1, 1]);
    get_rows_case(1, (DType::F32, [3, 4, 2, 3], None), [5, 2, 3, 1]);
    get_rows_case(2, (DType::F16, [7, 4, 3, 1], None), [2, 3, 1, 1]);
    get_rows_case(3, (DType::BF16, [4, 3, 2, 2], None), [3, 2, 2, 1]);
    // Rows contiguous, matrices interleaved.
    get_rows_case(4, (DType::F32, [5, 6, 2, 1], Some([0, 2, 1, 3])), [3, 2, 1, 1]);
}

#[test]
fn get_rows_i32_exact() {
    get_rows_case(10, (DType::I32, [3, 5, 1, 1], None), [4, 1, 1, 1]);
    get_rows_case(11, (DType::I32, [2, 3, 2, 1], None), [5, 2, 1, 1]);
}

#[test]
fn get_rows_quantized_matches_dequantized() {
    get_rows_case(20, (DType::Q8_0, [64, 5, 1, 1], None), [3, 1, 1, 1]);
    get_rows_case(21, (DType::Q4_0, [32, 4, 2, 1], None), [3, 2, 1, 1]);
    get_rows_case(22, (DType::Q8_0, [32, 3, 2, 2], None), [4, 2, 2, 1]);
}

// ---------------------------------------------------------------------------------------------
// CPY, CONT, CONCAT
// ---------------------------------------------------------------------------------------------

/// `values` stored as `dt` and read back: the conversion every copy must reproduce.
fn round_trip(dt: DType, values: &[f32]) -> Vec<f32> {
    convert::to_f32_vec(dt, &convert::to_bytes(dt, values).unwrap())
}

#[test]
fn cpy_cast_matches_convert_round_trips() {
    use DType::{BF16, F16, F32, Q4_0, Q8_0};
    let mut k = 0;
    for src in [F32, F16, BF16, Q8_0, Q4_0] {
        for dst in [F32, F16, BF16, Q8_0, Q4_0] {
            k += 1;
            let ne = [64, 3, 2, 1];
            let what = format!("CPY (cast) {src} -> {dst} {ne:?}");
            let mut g = Graph::new();
            let a = g.new_tensor(src, &ne).unwrap();
            let out = g.cast(a, dst).unwrap();
            setup(&mut g, &[out]);
            fill(&g, a, &mut Rng::new(9000 + k), -4.0, 4.0);
            let x = g.get_f32(a).unwrap();
            compute(&g, &what);
            assert_eq!((shape(&g, out), dtype(&g, out)), (ne, dst), "{what}: shape and type");
            check_exact(&what, &g, out, &round_trip(dst, &x));
        }
    }
    // I32 to I32, including values f32 cannot hold.
    let mut g = Graph::new();
    let a = g.new_tensor(DType::I32, &[5, 3]).unwrap();
    let out = g.cast(a, DType::I32).unwrap();
    setup(&mut g, &[out]);
    let values: Vec<i32> = (0..15).map(|i: i32| i.wrapping_mul(0x1234_5679) ^ 0x0100_0001).collect();
    g.set_i32(a, &values).unwrap();
    compute(&g, "CPY i32 -> i32");
    check_exact_i32("CPY i32 -> i32", &g, out, &values);
}

#[test]
fn cpy_strided_and_reshaped_matches_convert_round_trips() {
    // A transposed source into a contiguous destination of another shape (row-major order).
    for (k, dst) in [DType::F32, DType::F16, DType::BF16].into_iter().enumerate() {
        let what = format!("CPY transposed f32 [6, 4] -> {dst} [8, 3]");
        let mut g = Graph::new();
        let (leaf, a) = operand(&mut g, DType::F32, [6, 4, 1, 1], TRANSPOSED);
        let b = g.new_tensor(dst, &[8, 3]).unwrap();
        let out = g.cpy(a, b).unwrap();
        setup(&mut g, &[out]);
        fill(&g, leaf, &mut Rng::new(9100 + k as u64), -4.0, 4.0);
        let x = g.get_f32(a).unwrap();
        compute(&g, &what);
        check_exact(&what, &g, out, &round_trip(dst, &x));
        check_exact(&format!("{what} (destination)"), &g, b, &round_trip(dst, &x));
    }
    // Quantizing into a destination whose rows hold other blocks of the flat order.
    for (k, dst) in [DType::Q8_0, DType::Q4_0].into_iter().enumerate() {
        let what = format!("CPY f16 [64, 3] -> {dst} [96, 2]");
        let mut g = Graph::new();
        let a = g.new_tensor(DType::F16, &[64, 3]).unwrap();
        let b = g.new_tensor(dst, &[96, 2]).unwrap();
        let out = g.cpy(a, b).unwrap();
        setup(&mut g, &[out]);
        fill(&g, a, &mut Rng::new(9200 + k as u64), -4.0, 4.0);
        let x = g.get_f32(a).unwrap();
        compute(&g, &what);
        check_exact(&what, &g, out, &round_trip(dst, &x));
    }
}

#[test]
fn cpy_into_views_matches() {
    // Into a transposed view: the destination's memory receives the transpose.
    let what = "CPY f16 [3, 5] -> transposed view of f32 [5, 3]";
    let mut g = Graph::new();
    let a = g.new_tensor(DType::F16, &[3, 5]).unwrap();
    let b = g.new_tensor(DType::F32, &[5, 3]).unwrap();
    let bt = g.transpose(b).unwrap();
    let out = g.cpy(a, bt).unwrap();
    setup(&mut g, &[out]);
    let mut rng = Rng::new(9300);
    fill(&g, a, &mut rng, -4.0, 4.0);
    fill(&g, b, &mut rng, -4.0, 4.0);
    let x = g.get_f32(a).unwrap();
    compute(&g, what);
    check_exact(what, &g, out, &x);
    let want_b: Vec<f32> = each([5, 3, 1, 1]).map(|[j0, j1, _, _]| x[j1 + 3 * j0]).collect();
    check_exact(&format!("{what} (destination memory)"), &g, b, &want_b);

    // Into a window of a larger tensor: only the window changes.
    let what = "CPY bf16 [4] -> f32 [10] at values 2..6";
    let mut g = Graph::new();
    let a = g.new_tensor(DType::BF16, &[4]).unwrap();
    let b = g.new_tensor(DType::F32, &[10]).unwrap();
    let window = g.view_1d(b, 4, 8).unwrap();
    let out = g.cpy(a, window).unwrap();
    setup(&mut g, &[out]);
    fill(&g, a, &mut rng, -4.0, 4.0);
    fill(&g, b, &mut rng, -4.0, 4.0);
    let (x, before) = (g.get_f32(a).unwrap(), g.get_f32(b).unwrap());
    compute(&g, what);
    let mut want_b = before;
    want_b[2..6].copy_from_slice(&x);
    check_exact(what, &g, b, &want_b);
    check_exact(what, &g, out, &x);
}

#[test]
fn cont_of_transposed_view_matches() {
    for (k, (dt, ne, axes)) in [
        (DType::F32, [5, 3, 2, 1], [1, 0, 2, 3]),
        (DType::F32, [4, 3, 2, 3], [3, 1, 0, 2]),
        (DType::F16, [3, 4, 2, 1], [2, 0, 1, 3]),
        (DType::BF16, [6, 5, 1, 1], [1, 0, 2, 3]),
        (DType::I32, [3, 4, 5, 1], [1, 2, 0, 3]),
        (DType::Q8_0, [32, 3, 2, 1], [0, 2, 1, 3]),
        (DType::Q4_0, [64, 2, 3, 1], [0, 2, 1, 3]),
    ]
    .into_iter()
    .enumerate()
    {
        let what = format!("CONT {dt} {ne:?} permuted by {axes:?}");
        let mut g = Graph::new();
        let (leaf, a) = operand(&mut g, dt, ne, Some(axes));
        let out = g.cont(a).unwrap();
        setup(&mut g, &[out]);
        assert!(g.tensor(out).unwrap().is_contiguous(), "{what}: result not contiguous");
        assert_eq!((shape(&g, out), dtype(&g, out)), (ne, dt), "{what}: shape and type");
        let mut rng = Rng::new(9400 + k as u64);
        if dt == DType::I32 {
            let values: Vec<i32> = (0..count(ne)).map(|_| rng.next_u64() as i32).collect();
            g.set_i32(leaf, &values).unwrap();
            let x = g.get_i32(a).unwrap();
            compute(&g, &what);
            check_exact_i32(&what, &g, out, &x);
        } else {
            fill(&g, leaf, &mut rng, -4.0, 4.0);
            let x = g.get_f32(a).unwrap();
            compute(&g, &what);
            check_exact(&what, &g, out, &x);
        }
    }
}

fn concat_ref<T: Copy>(a: &[T], ane: Ne, b: &[T], bne: Ne, dim: usize) -> Vec<T> {
    let mut one = ane;
    one[dim] += bne[dim];
    each(one)
        .map(|i| {
            if i[dim] < ane[dim] {
                a[flat(ane, i)]
            } else {
                let mut j = i;
                j[dim] -= ane[dim];
                b[flat(bne, j)]
            }
        })
        .collect()
}

fn concat_case(k: u64, dt: DType, (ane, aperm): (Ne, Option<[usize; 4]>), bne: Ne, dim: usize) {
    let what = format!("CONCAT {dt} {ane:?} perm {aperm:?} with {bne:?} along {dim}");
    let mut g = Graph::new();
    let (la, a) = operand(&mut g, dt, ane, aperm);
    let b = g.new_tensor(dt, &bne).unwrap();
    let out = g.concat(a, b, dim).unwrap();
    setup(&mut g, &[out]);
    let mut one = ane;
    one[dim] += bne[dim];
    assert_eq!((shape(&g, out), dtype(&g, out)), (one, dt), "{what}: shape and type");
    let mut rng = Rng::new(9500 + k);
    if dt == DType::I32 {
        let va: Vec<i32> = (0..count(ane)).map(|_| rng.next_u64() as i32).collect();
        let vb: Vec<i32> = (0..count(bne)).map(|_| rng.next_u64() as i32).collect();
        g.set_i32(la, &va).unwrap();
        g.set_i32(b, &vb).unwrap();
        let (x, y) = (g.get_i32(a).unwrap(), g.get_i32(b).unwrap());
        compute(&g, &what);
        check_exact_i32(&what, &g, out, &concat_ref(&x, ane, &y, bne, dim));
    } else {
        fill(&g, la, &mut rng, -4.0, 4.0);
        fill(&g, b, &mut rng, -4.0, 4.0);
        let (x, y) = (g.get_f32(a).unwrap(), g.get_f32(b).unwrap());
        compute(&g, &what);
        check_exact(&what, &g, out, &concat_ref(&x, ane, &y, bne, dim));
    }
}

#[test]
fn concat_matches_f64() {
    let ane = [3, 2, 4, 2];
    for dim in 0..4 {
        let mut bne = ane;
        bne[dim] = [2, 3, 1, 1][dim];
        concat_case(dim as u64, DType::F32, (ane, None), bne, dim);
        concat_case(10 + dim as u64, DType::F16, (ane, None), bne, dim);
        concat_case(20 + dim as u64, DType::I32, (ane, None), bne, dim);
        concat_case(30 + dim as u64, DType::F32, (ane, Some([2, 0, 3, 1])), bne, dim);
    }
    concat_case(40, DType::BF16, ([5, 3, 1, 1], TRANSPOSED), [5, 2, 1, 1], 1);
    concat_case(41, DType::I32, ([4, 3, 2, 1], TRANSPOSED), [4, 3, 3, 1], 2);
}

// ---------------------------------------------------------------------------------------------
// ROPE
// ---------------------------------------------------------------------------------------------

fn rope_ref(x: &[f64], ne: Ne, pos: &[i32], p: RopeParams) -> Vec<f64> {
    let mut out = x.to_vec();
    let half = p.n_dims / 2;
    let (base, fs) = (f64::from(p.freq_base), f64::from(p.freq_scale));
    for r in 0..count(ne) / ne[0] {
        let i2 = r / ne[1] % ne[2];
        let row = &x[r * ne[0]..][..ne[0]];
        for k in 0..half {
            let theta = fs * f64::from(pos[i2]) * base.powf(-2.0 * k as f64 / p.n_dims as f64);
            let (j0, j1) = match p.mode {
                RopeMode::Normal => (2 * k, 2 * k + 1),
                RopeMode::Neox => (k, k + half),
            };
            let (x0, x1) = (row[j0], row[j1]);
            out[r * ne[0] + j0] = x0 * theta.cos() - x1 * theta.sin();
            out[r * ne[0] + j1] = x0 * theta.sin() + x1 * theta.cos();
        }
    }
    out
}

fn rope_case(k: u64, (dt, ne, perm): Operand, p: RopeParams) {
    let what = format!("ROPE {dt} {ne:?} perm {perm:?} {p:?}");
    let mut g = Graph::new();
    let (leaf, a) = operand(&mut g, dt, ne, perm);
    let pos_id = g.new_tensor(DType::I32, &[ne[2]]).unwrap();
    let out = g.rope(a, pos_id, p).unwrap();
    setup(&mut g, &[out]);
    let mut rng = Rng::new(9600 + k);
    fill(&g, leaf, &mut rng, -1.0, 1.0);
    // Small, unordered positions: large angles would only measure f32's rounding of theta.
    let pos: Vec<i32> = (0..ne[2]).map(|_| rng.below(9) as i32).collect();
    g.set_i32(pos_id, &pos).unwrap();
    let x = read(&g, a);
    compute(&g, &what);
    assert_eq!((shape(&g, out), dtype(&g, out)), (ne, dt), "{what}: shape and type");
    check_close(&what, &g, out, &rope_ref(&x, ne, &pos, p));
}

fn rope_params(mode: RopeMode, n_dims: usize, freq_base: f32, freq_scale: f32) -> RopeParams {
    RopeParams { mode, n_dims, freq_base, freq_scale }
}

#[test]
fn rope_normal_matches_f64() {
    let m = RopeMode::Normal;
    rope_case(0, (DType::F32, [8, 3, 5, 1], None), rope_params(m, 8, 10000.0, 1.0));
    rope_case(1, (DType::F32, [10, 2, 4, 2], None), rope_params(m, 6, 10000.0, 0.5));
    rope_case(2, (DType::F32, [6, 4, 3, 1], Some([0, 2, 1, 3])), rope_params(m, 4, 500.0, 1.0));
    rope_case(3, (DType::F16, [8, 2, 3, 1], None), rope_params(m, 8, 10000.0, 1.0));
    rope_case(4, (DType::BF16, [4, 3, 2, 1], None), rope_params(m, 2, 100.0, 2.0));
}

#[test]
fn rope_neox_matches_f64() {
    let m = RopeMode::Neox;
    rope_case(10, (DType::F32, [8, 3, 5, 1], None), rope_params(m, 8, 10000.0, 1.0));
    rope_case(11, (DType::F32, [10, 2, 4, 2], None), rope_params(m, 6, 10000.0, 0.5));
    rope_case(12, (DType::F32, [6, 4, 3, 1], Some([0, 2, 1, 3])), rope_params(m, 4, 500.0, 1.0));
    rope_case(13, (DType::F16, [8, 2, 3, 1], None), rope_params(m, 8, 10000.0, 1.0));
    rope_case(14, (DType::BF16, [12, 2, 2, 1], None), rope_params(m, 8, 1000.0, 0.25));
}

// ---------------------------------------------------------------------------------------------
// IM2COL, POOL_2D
// ---------------------------------------------------------------------------------------------

/// The input value at `(x, y)` of channel `c`, batch `n`, or 0 outside (padding).
fn padded(input: &[f64], ne: Ne, x: isize, y: isize, c: usize, n: usize) -> f64 {
    if x < 0 || y < 0 || x as usize >= ne[0] || y as usize >= ne[1] {
        0.0
    } else {
        input[flat(ne, [x as usize, y as usize, c, n])]
    }
}

fn im2col_case(k: u64, (idt, ine, iperm): Operand, kne: Ne, p: Im2ColParams, out_dt: DType) {
    let what = format!("IM2COL input {idt} {ine:?} perm {iperm:?}, kernel {kne:?}, {p:?} -> {out_dt}");
    let mut g = Graph::new();
    let (leaf, input) = operand(&mut g, idt, ine, iperm);
    let kernel = g.new_tensor(DType::F16, &kne).unwrap();
    let out = g.im2col(kernel, input, p, out_dt).unwrap();
    setup(&mut g, &[out]);
    fill(&g, leaf, &mut Rng::new(9700 + k), -3.0, 3.0);
    set(&g, kernel, &vec![0.0; count(kne)]);
    let x = read(&g, input);
    compute(&g, &what);
    let one = shape(&g, out);
    assert_eq!(dtype(&g, out), out_dt, "{what}: type");
    let span = |size: usize, k: usize, s: usize, pad: usize, d: usize| (size + 2 * pad - (d * (k - 1) + 1)) / s + 1;
    let want: Vec<f64> = if p.is_2d {
        let (kw, kh) = (kne[0], kne[1]);
        let ow = span(ine[0], kw, p.s0, p.p0, p.d0);
        let oh = span(ine[1], kh, p.s1, p.p1, p.d1);
        assert_eq!(one, [ine[2] * kh * kw, ow, oh, ine[3]], "{what}: shape");
        each(one)
            .map(|[r, ox, oy, n]| {
                let (ic, ky, kx) = (r / (kh * kw), r / kw % kh, r % kw);
                let xx = (ox * p.s0 + kx * p.d0) as isize - p.p0 as isize;
                let yy = (oy * p.s1 + ky * p.d1) as isize - p.p1 as isize;
                padded(&x, ine, xx, yy, ic, n)
            })
            .collect()
    } else {
        // 1-D: input [W, C, N], kernel [KW, C, OC] -> [C * KW, OW, N].
        let kw = kne[0];
        let ow = span(ine[0], kw, p.s0, p.p0, p.d0);
        assert_eq!(one, [ine[1] * kw, ow, ine[2], 1], "{what}: shape");
        let as_2d = [ine[0], 1, ine[1], ine[2]];
        each(one)
            .map(|[r, ox, n, _]| {
                let (ic, kx) = (r / kw, r % kw);
                let xx = (ox * p.s0 + kx * p.d0) as isize - p.p0 as isize;
                padded(&x, as_2d, xx, 0, ic, n)
            })
            .collect()
    };
    check_close(&what, &g, out, &want);
}

fn im2col_params(s: [usize; 2], pad: [usize; 2], d: [usize; 2], is_2d: bool) -> Im2ColParams {
    Im2ColParams { s0: s[0], s1: s[1], p0: pad[0], p1: pad[1], d0: d[0], d1: d[1], is_2d }
}

#[test]
fn im2col_2d_matches_f64() {
    use DType::{BF16, F16, F32};
    let p = im2col_params([2, 1], [1, 1], [1, 2], true);
    im2col_case(0, (F32, [7, 6, 2, 2], None), [3, 2, 2, 4], p, F32);
    im2col_case(1, (F32, [7, 6, 2, 2], None), [3, 2, 2, 4], p, F16);
    im2col_case(2, (F16, [5, 5, 3, 1], None), [3, 3, 3, 2], im2col_params([1, 1], [0, 0], [1, 1], true), F32);
    im2col_case(3, (BF16, [6, 4, 1, 1], None), [2, 2, 1, 1], im2col_params([3, 2], [2, 1], [2, 1], true), F32);
    im2col_case(4, (F32, [6, 5, 2, 1], TRANSPOSED), [3, 3, 2, 1], im2col_params([1, 2], [1, 0], [1, 1], true), F32);
}

#[test]
fn im2col_1d_matches_f64() {
    use DType::{F16, F32};
    im2col_case(10, (F32, [9, 3, 2, 1], None), [4, 3, 2, 1], im2col_params([2, 1], [2, 0], [1, 1], false), F32);
    im2col_case(11, (F32, [9, 3, 2, 1], None), [3, 3, 2, 1], im2col_params([1, 1], [1, 0], [2, 1], false), F16);
    im2col_case(12, (F16, [8, 2, 1, 1], None), [3, 2, 5, 1], im2col_params([3, 1], [0, 0], [1, 1], false), F32);
    im2col_case(
        13,
        (F32, [7, 4, 3, 1], Some([1, 2, 0, 3])),
        [2, 4, 1, 1],
        im2col_params([1, 1], [1, 0], [3, 1], false),
        F32,
    );
}

fn pool_case(k: u64, (dt, ne, perm): Operand, p: Pool2dParams) {
    let what = format!("POOL_2D {dt} {ne:?} perm {perm:?} {p:?}");
    let mut g = Graph::new();
    let (leaf, a) = operand(&mut g, dt, ne, perm);
    let out = g.pool_2d(a, p).unwrap();
    setup(&mut g, &[out]);
    fill(&g, leaf, &mut Rng::new(9800 + k), -3.0, 3.0);
    let x = read(&g, a);
    compute(&g, &what);
    let ow = (ne[0] + 2 * p.p0 - p.k0) / p.s0 + 1;
    let oh = (ne[1] + 2 * p.p1 - p.k1) / p.s1 + 1;
    let one = [ow, oh, ne[2], ne[3]];
    assert_eq!((shape(&g, out), dtype(&g, out)), (one, DType::F32), "{what}: shape and type");
    let mut terms = Vec::new();
    let want: Vec<f64> = each(one)
        .map(|[ox, oy, c, n]| {
            let (mut max, mut sum, mut abs) = (f64::NEG_INFINITY, 0.0, 0.0);
            for ky in 0..p.k1 {
                for kx in 0..p.k0 {
                    let xx = (ox * p.s0 + kx) as isize - p.p0 as isize;
                    let yy = (oy * p.s1 + ky) as isize - p.p1 as isize;
                    if xx < 0 || yy < 0 || xx as usize >= ne[0] || yy as usize >= ne[1] {
                        continue; // padding: skipped by max, a zero for avg
                    }
                    let v = x[flat(ne, [xx as usize, yy as usize, c, n])];
                    max = max.max(v);
                    sum += v;
                    abs += v.abs();
                }
            }
            let area = (p.k0 * p.k1) as f64;
            match p.kind {
                PoolKind::Max => {
                    terms.push(max.abs().max(1.0));
                    max
                }
                PoolKind::Avg => {
                    terms.push((abs / area).max(f64::MIN_POSITIVE));
                    sum / area
                }
            }
        })
        .collect();
    check_scaled(&what, &g, out, &want, &terms);
}

fn pool_params(kind: PoolKind, k: [usize; 2], s: [usize; 2], pad: [usize; 2]) -> Pool2dParams {
    Pool2dParams { kind, k0: k[0], k1: k[1], s0: s[0], s1: s[1], p0: pad[0], p1: pad[1] }
}

fn pool_cases(kind: PoolKind) {
    use DType::{BF16, F16, F32};
    let base = if kind == PoolKind::Max { 0 } else { 10 };
    pool_case(base, (F32, [7, 5, 2, 2], None), pool_params(kind, [3, 2], [2, 2], [1, 1]));
    pool_case(base + 1, (F32, [6, 4, 3, 1], None), pool_params(kind, [2, 2], [2, 2], [0, 0]));
    pool_case(base + 2, (F32, [5, 6, 2, 1], None), pool_params(kind, [3, 3], [1, 1], [2, 2]));
    pool_case(base + 3, (F16, [8, 7, 1, 2], None), pool_params(kind, [3, 4], [3, 2], [1, 2]));
    pool_case(base + 4, (BF16, [5, 5, 2, 1], None), pool_params(kind, [2, 3], [1, 2], [1, 0]));
    pool_case(base + 5, (F32, [6, 5, 2, 1], TRANSPOSED), pool_params(kind, [2, 2], [1, 1], [1, 1]));
}

#[test]
fn pool_2d_max_matches_f64() {
    pool_cases(PoolKind::Max);
}

#[test]
fn pool_2d_avg_matches_f64() {
    pool_cases(PoolKind::Avg);
}
