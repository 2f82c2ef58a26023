//! The fast MUL_MAT drivers against the reference kernel, on shapes small enough for Miri:
//! odd sizes that leave partial tiles and blocks, every weight type, strided, transposed and
//! misaligned activations, padded and permuted weights, broadcast batches, and one and two
//! threads (with results bitwise identical for both).
//!
//! Every case runs on every kernel table this processor can run; under Miri that is the
//! scalar table alone (feature detection reports only the target's compile-time features).
//! The tolerance of each output value is derived from its inputs: the rounding of an f32 dot
//! product, plus, for quantized weights, the 8-bit quantization of the activations, and for
//! BF16 weights on native bf16 products, the rounding of the activations to bf16.

use alloc::format;
use alloc::vec;
use alloc::vec::Vec;

use tessera_core::allocator::alloc_graph_tensors;
use tessera_core::host_buffer::HOST_BUFFER_TYPE;
use tessera_core::DType::{BF16, F16, F32, Q4_0, Q4_K, Q5_K, Q6_K, Q8_0};
use tessera_core::{DType, Graph, TensorId};

use super::{mul_mat, GEMV_MAX_N, MIN_WORK_PER_THREAD};
use crate::fast::dispatch;
use crate::fast::parallel::Team;
use crate::fast::scratch::WorkMemory;
use crate::fast::simd::{Kernels, QK};
use tessera_reference::{NodeTensors, Scratch};

/// splitmix64: small, fast and good enough for test data.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// `n` values uniform in `[-1, 1)`.
    fn values(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| ((self.next_u64() >> 40) as f32 / (1u64 << 23) as f32) - 1.0).collect()
    }
}

/// How the weights `a: [k, m, a2, a3]` lie in memory.
#[derive(Clone, Copy, Debug, PartialEq)]
enum A {
    Dense,
    /// Rows further apart than their values (a view of a wider leaf).
    PaddedRows,
    /// Dims 1 and 2 swapped: matrices interleaved row by row.
    Permuted,
}

/// How the activations `b: [k, n, b2, b3]` lie in memory.
#[derive(Clone, Copy, Debug, PartialEq)]
enum B {
    Dense,
    /// A transposed `[n, k]` leaf: values of a column `4 n` bytes apart (gathered first).
    Transposed,
    /// Columns further apart than their values (read in place with a larger stride).
    PaddedCols,
    /// Dense values 2 bytes past an f32 boundary (gathered with unaligned reads).
    Misaligned,
    /// Dims 1 and 2 swapped: columns of the batches interleaved.
    Permuted,
}

#[derive(Clone, Copy, Debug)]
struct Case {
    ta: DType,
    m: usize,
    n: usize,
    k: usize,
    /// `a`'s dims 2 and 3.
    a_batch: [usize; 2],
    /// How many of `b`'s matrices share one of `a`'s (in dims 2 and 3).
    repeat: [usize; 2],
    a: A,
    b: B,
}

const fn case(ta: DType, m: usize, n: usize, k: usize) -> Case {
    Case { ta, m, n, k, a_batch: [1, 1], repeat: [1, 1], a: A::Dense, b: B::Dense }
}

impl Case {
    const fn batched(self, a_batch: [usize; 2], repeat: [usize; 2]) -> Case {
        Case { a_batch, repeat, ..self }
    }

    const fn layouts(self, a: A, b: B) -> Case {
        Case { a, b, ..self }
    }

    fn b_batch(&self) -> [usize; 2] {
        [self.a_batch[0] * self.repeat[0], self.a_batch[1] * self.repeat[1]]
    }

    fn work(&self) -> usize {
        let [b2, b3] = self.b_batch();
        self.m * self.n * self.k * b2 * b3
    }
}

/// A leaf (filled with random values in its own order) and the operand seen through it.
struct Operand {
    leaf: TensorId,
    operand: TensorId,
}

fn weights(g: &mut Graph, c: &Case) -> Operand {
    let [a2, a3] = c.a_batch;
    let (k, m) = (c.k, c.m);
    match c.a {
        A::Dense => {
            let leaf = g.new_tensor(c.ta, &[k, m, a2, a3]).unwrap();
            Operand { leaf, operand: leaf }
        }
        A::PaddedRows => {
            let pad = if c.ta.is_quantized() { c.ta.block_len() } else { 3 };
            let leaf = g.new_tensor(c.ta, &[k + pad, m, a2, a3]).unwrap();
            let nb1 = c.ta.row_bytes(k + pad).unwrap();
            let operand = g.view(leaf, [k, m, a2, a3], [nb1, nb1 * m, nb1 * m * a2], 0).unwrap();
            Operand { leaf, operand }
        }
        A::Permuted => {
            let leaf = g.new_tensor(c.ta, &[k, a2, m, a3]).unwrap();
            let operand = g.permute(leaf, [0, 2, 1, 3]).unwrap();
            Operand { leaf, operand }
        }
    }
}

fn activations(g: &mut Graph, c: &Case) -> Operand {
    let [b2, b3] = c.b_batch();
    let (k, n) = (c.k, c.n);
    match c.b {
        B::Dense => {
            let leaf = g.new_tensor(DType::F32, &[k, n, b2, b3]).unwrap();
            Operand { leaf, operand: leaf }
        }
        B::Transposed => {
            let leaf = g.new_tensor(DType::F32, &[n, k, b2, b3]).unwrap();
            let operand = g.transpose(leaf).unwrap();
            Operand { leaf, operand }
        }
        B::PaddedCols => {
            let leaf = g.new_tensor(DType::F32, &[k + 3, n, b2, b3]).unwrap();
            let nb1 = 4 * (k + 3);
            let operand = g.view(leaf, [k, n, b2, b3], [nb1, nb1 * n, nb1 * n * b2], 0).unwrap();
            Operand { leaf, operand }
        }
        B::Misaligned => {
            let leaf = g.new_tensor(DType::F32, &[k * n * b2 * b3 + 1]).unwrap();
            let operand = g.view(leaf, [k, n, b2, b3], [4 * k, 4 * k * n, 4 * k * n * b2], 2).unwrap();
            Operand { leaf, operand }
        }
        B::Permuted => {
            let leaf = g.new_tensor(DType::F32, &[k, b2, n, b3]).unwrap();
            let operand = g.permute(leaf, [0, 2, 1, 3]).unwrap();
            Operand { leaf, operand }
        }
    }
}

/// A case's graph in host memory with random inputs: `(graph, a, b, out)`.
fn build(c: &Case, seed: u64) -> (Graph, TensorId, TensorId, TensorId) {
    let mut g = Graph::new();
    let a = weights(&mut g, c);
    let b = activations(&mut g, c);
    let out = g.mul_mat(a.operand, b.operand).unwrap();
    alloc_graph_tensors(&mut g, &HOST_BUFFER_TYPE).unwrap();
    let mut rng = Rng(seed);
    let a_values = rng.values(g.tensor(a.leaf).unwrap().nelements());
    g.set_f32(a.leaf, &a_values).unwrap();
    if c.b == B::Misaligned {
        let values = rng.values(g.tensor(b.operand).unwrap().nelements());
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        g.set_bytes(b.leaf, 2, &bytes).unwrap();
    } else {
        let b_values = rng.values(g.tensor(b.leaf).unwrap().nelements());
        g.set_f32(b.leaf, &b_values).unwrap();
    }
    (g, a.operand, b.operand, out)
}

/// What the checks need to know of a case's inputs, as stored (after the rounding of their
/// types): the values, and per weight row and activation column their 2-norm and, for
/// quantized weights, per block of 32 values the weights' 1-norm and the activations' largest
/// magnitude.
struct Inputs {
    case: Case,
    w: Vec<f32>,
    x: Vec<f32>,
    w_norm: Vec<f64>,
    x_norm: Vec<f64>,
    w_l1: Vec<f64>,
    x_amax: Vec<f64>,
    /// The relative rounding of the activations before they are multiplied (0 when they are
    /// used as they are).
    x_rounding: f64,
}

impl Inputs {
    fn new(g: &Graph, case: &Case, a: TensorId, b: TensorId, kernels: &Kernels) -> Inputs {
        let (w, x) = (g.get_f32(a).unwrap(), g.get_f32(b).unwrap());
        let k = case.k.max(1);
        let norm = |v: &[f32]| v.iter().map(|&t| f64::from(t) * f64::from(t)).sum::<f64>().sqrt();
        let (w_norm, x_norm) = (w.chunks(k).map(norm).collect(), x.chunks(k).map(norm).collect());
        let (mut w_l1, mut x_amax) = (Vec::new(), Vec::new());
        if case.ta.is_quantized() {
            w_l1 = w.chunks(QK).map(|b| b.iter().map(|&v| f64::from(v).abs()).sum()).collect();
            // K-quant products may quantize the activations with one scale per super-block.
            let group = if case.ta.block_len() > QK { case.ta.block_len() } else { QK };
            let amax = |b: &[f32]| b.iter().fold(0.0, |m: f64, &v| m.max(f64::from(v).abs()));
            x_amax = x.chunks(group).flat_map(|g| core::iter::repeat_n(amax(g), g.len() / QK)).collect();
        }
        // Tables with native bf16 products round the activations of BF16 weights to bf16 (8
        // significant bits), in the GEMM and the matrix-vector kernels alike.
        let native_bf16 = case.ta == BF16 && kernels.gemm_bf16.k_pack == 2;
        let x_rounding = if native_bf16 { 2f64.powi(-8) } else { 0.0 };
        Inputs { case: *case, w, x, w_norm, x_norm, w_l1, x_amax, x_rounding }
    }

    /// The weight row and activation column of output value `o` (in the output's order
    /// `[m, n, b2, b3]`).
    fn operands_of(&self, o: usize) -> (usize, usize) {
        let Case { m, n, a_batch: [a2, _], repeat: [r2, r3], .. } = self.case;
        let [b2, _] = self.case.b_batch();
        let (i, j, i2, i3) = (o % m, o / m % n, o / (m * n) % b2, o / (m * n * b2));
        (i + m * (i2 / r2 + a2 * (i3 / r3)), j + n * (i2 + b2 * i3))
    }

    /// Output value `o` computed here, in f64.
    fn dot(&self, o: usize) -> f64 {
        let (row, col) = self.operands_of(o);
        let k = self.case.k;
        let (w, x) = (&self.w[row * k..][..k], &self.x[col * k..][..k]);
        w.iter().zip(x).map(|(&p, &q)| f64::from(p) * f64::from(q)).sum()
    }

    /// The largest acceptable error of output value `o`. Float weights: an f32 dot product of
    /// `k` terms is within `k * eps / 2` of the sum of the magnitudes of its terms (at most
    /// the product of the 2-norms), and the reference rounds its f64 sum once more. Quantized
    /// weights: the activations are rounded to 8-bit blocks first, each value by at most
    /// `max|x| / 254` of its block (or of its super-block, for K-quants), so each block adds
    /// at most `sum |w| * max|x| / 254`.
    fn tolerance(&self, o: usize) -> f64 {
        let (row, col) = self.operands_of(o);
        let k = self.case.k;
        let rounding = (k as f64 + 2.0) * f64::from(f32::EPSILON) + self.x_rounding;
        let mut t = rounding * self.w_norm[row] * self.x_norm[col] * 1.01;
        let blocks = if self.case.ta.is_quantized() { k / QK } else { 0 };
        for blk in 0..blocks {
            t += 1.001 * self.w_l1[row * blocks + blk] * self.x_amax[col * blocks + blk] / 254.0;
        }
        t
    }

    /// Checks the values `outputs` of `got` against `want(o)`: each within its tolerance, and
    /// all of them together within a normalized mean squared error that the quantization
    /// of the activations (random, on average far below its bound) stays under.
    fn check(&self, what: &str, got: &[f32], outputs: impl Iterator<Item = usize>, want: impl Fn(usize) -> f64) {
        let (mut err2, mut want2) = (0.0f64, 0.0f64);
        for o in outputs {
            let (g, w, tol) = (f64::from(got[o]), want(o), self.tolerance(o));
            assert!((g - w).abs() <= tol, "{what}: value {o} is {g:e}, expected {w:e} (tolerance {tol:e})");
            err2 += (g - w) * (g - w);
            want2 += w * w;
        }
        let nmse = if want2 > 0.0 { err2 / want2 } else { err2 };
        assert!(nmse <= 5e-4, "{what}: normalized mean squared error {nmse:e}");
    }
}

/// A team and its work memory, kept across cases the way a backend keeps them.
struct Runner {
    kernels: &'static Kernels,
    team: Team,
    memory: WorkMemory,
}

impl Runner {
    fn new(kernels: &'static Kernels, threads: usize) -> Runner {
        Runner { kernels, team: Team::new(threads), memory: WorkMemory::default() }
    }

    /// The fast result of `out`, which starts as NaN so that a value never written shows.
    fn run(&mut self, g: &Graph, out: TensorId) -> Vec<f32> {
        let bytes = g.tensor(out).unwrap().nbytes();
        let nan: Vec<u8> = f32::NAN.to_le_bytes().into_iter().cycle().take(bytes).collect();
        g.set_bytes(out, 0, &nan).unwrap();
        let view = g.node_view(out).unwrap();
        let node = NodeTensors::new(&view, "CPU").unwrap();
        let taken = mul_mat(self.kernels, &mut self.team, &mut self.memory, &node).unwrap();
        assert!(taken, "the fast path declined a layout it takes");
        g.get_f32(out).unwrap()
    }
}

/// Runs every case on every kernel table against the reference kernel, on one thread (most
/// cases are too small for a second one anyway: see [`check_two_threads`]).
fn check(cases: &[Case]) {
    for kernels in dispatch::available() {
        let mut runner = Runner::new(kernels, 1);
        for (seed, c) in cases.iter().enumerate() {
            let (g, a, b, out) = build(c, seed as u64);
            let view = g.node_view(out).unwrap();
            tessera_reference::compute(&NodeTensors::new(&view, "CPU").unwrap(), &mut Scratch::default()).unwrap();
            let want = g.get_f32(out).unwrap();
            let got = runner.run(&g, out);
            assert_eq!(got.len(), want.len());
            let what = format!("{c:?} on {}", kernels.name);
            Inputs::new(&g, c, a, b, kernels).check(&what, &got, 0..got.len(), |o| f64::from(want[o]));
        }
    }
}

/// Runs `c` (large enough for two threads) at 1 and 2 threads on every kernel table: the
/// results must be bitwise identical and match a product computed here in f64. Under Miri,
/// which runs a product of this size for about a minute, only at 2 threads and on a sample
/// of the outputs: a diagonal, and those where a first or last row of a scalar tile meets a
/// first or last column of one.
fn check_two_threads(c: &Case) {
    assert!(c.work() >= 2 * MIN_WORK_PER_THREAD, "{c:?} is too small for two threads");
    let (g, a, b, out) = build(c, c.work() as u64);
    let [b2, b3] = c.b_batch();
    let sample = |o: usize| {
        let (i, j) = (o % c.m, o / c.m % c.n);
        let edge = |v: usize, tile: usize, len: usize| v.is_multiple_of(tile) || v % tile == tile - 1 || v + 1 == len;
        (edge(i, 8, c.m) && edge(j, 4, c.n)) || i == j
    };
    for kernels in dispatch::available() {
        let inputs = Inputs::new(&g, c, a, b, kernels);
        let mut first: Option<Vec<f32>> = None;
        let threads: &[usize] = if cfg!(miri) { &[2] } else { &[1, 2] };
        for &t in threads {
            let got = Runner::new(kernels, t).run(&g, out);
            let what = format!("{c:?} on {} at {t} threads", kernels.name);
            let outputs = (0..c.m * c.n * b2 * b3).filter(|&o| !cfg!(miri) || sample(o));
            inputs.check(&what, &got, outputs, |o| inputs.dot(o));
            match &first {
                None => first = Some(got),
                Some(one) => assert!(
                    one.iter().zip(&got).all(|(p, q)| p.to_bits() == q.to_bits()),
                    "{what}: results differ from those of one thread"
                ),
            }
        }
    }
}

#[test]
fn miri_sees_only_the_scalar_kernels() {
    let names: Vec<&str> = dispatch::available().map(|k| k.name).collect();
    assert_eq!(names.last(), Some(&"scalar"));
    if cfg!(miri) {
        assert_eq!(names, ["scalar"], "feature detection under Miri reports only compile-time features");
    }
}

// Shapes: the scalar float tile is 8 x 4 and the int8 tile 4 x 4, the matrix-vector path
// takes 16 rows per work item; the cases leave partial tiles and items in every direction
// (and a few whole ones), on every layout of both operands.

#[test]
fn float_matrix_vector_products_match_the_reference() {
    check(&[
        case(F32, 17, 1, 33),
        case(F32, 5, 3, 1),
        case(F32, 1, GEMV_MAX_N, 17).layouts(A::Dense, B::Transposed),
        case(F32, 17, 2, 9).layouts(A::PaddedRows, B::PaddedCols),
        case(F16, 3, 3, 33).batched([2, 1], [1, 2]),
        case(F16, 3, 5, 17).layouts(A::Dense, B::Misaligned),
        case(BF16, 9, 2, 17).batched([2, 1], [2, 1]).layouts(A::Permuted, B::Permuted),
        case(BF16, 5, 4, 3).layouts(A::PaddedRows, B::Transposed),
        // Whole and partial 16-row AMX tiles, pairs of 32-value steps and a padded tail.
        case(BF16, 37, GEMV_MAX_N, 250),
        case(BF16, 20, 3, 128).layouts(A::PaddedRows, B::Transposed),
    ]);
}

#[test]
fn quantized_matrix_vector_products_match_the_reference() {
    check(&[
        case(Q8_0, 17, 1, 64),
        case(Q8_0, 3, GEMV_MAX_N, 32).layouts(A::Dense, B::Transposed),
        case(Q8_0, 5, 3, 32).layouts(A::PaddedRows, B::Misaligned),
        case(Q4_0, 17, 1, 32),
        case(Q4_0, 5, 2, 32).batched([1, 2], [2, 1]),
        case(Q4_0, 3, 2, 64).layouts(A::PaddedRows, B::PaddedCols),
        case(Q4_0, 5, 3, 32).batched([2, 1], [1, 1]).layouts(A::Permuted, B::Permuted),
        // Rows in eights (kernels that take 8 rows at a time) and a remainder.
        case(Q4_0, 24, GEMV_MAX_N, 96).layouts(A::PaddedRows, B::Dense),
        case(Q4_0, 19, 3, 160).batched([1, 2], [2, 1]),
    ]);
}

// Under Miri (scalar kernels only, so the dequantizing driver that the float tests cover) these
// take minutes.
#[cfg_attr(miri, ignore)]
#[test]
fn k_quant_matrix_vector_products_match_the_reference() {
    check(&[
        case(Q4_K, 17, 1, 256),
        case(Q4_K, 3, GEMV_MAX_N, 512).layouts(A::Dense, B::Transposed),
        case(Q5_K, 5, 3, 256).layouts(A::PaddedRows, B::Misaligned),
        case(Q5_K, 17, 2, 512),
        case(Q6_K, 17, 1, 256),
        case(Q6_K, 5, 5, 256).batched([2, 1], [1, 1]).layouts(A::Permuted, B::Permuted),
    ]);
}

#[test]
fn float_gemm_matches_the_reference() {
    check(&[
        case(F32, 17, 9, 17),
        case(F32, 1, 9, 3),
        case(F32, 9, 13, 5).layouts(A::Dense, B::Transposed),
        case(F32, 8, 12, 5).layouts(A::PaddedRows, B::PaddedCols),
        case(F16, 5, 9, 9).batched([2, 1], [1, 2]),
        case(F16, 5, 9, 7).layouts(A::Dense, B::Misaligned),
        case(BF16, 3, 33, 5),
        case(BF16, 9, 10, 3).batched([2, 1], [2, 1]).layouts(A::Permuted, B::Permuted),
    ]);
}

#[test]
fn quantized_gemm_matches_the_reference() {
    check(&[
        case(Q8_0, 9, 9, 64),
        case(Q8_0, 5, 10, 32).layouts(A::Dense, B::Transposed),
        case(Q8_0, 4, 12, 32).layouts(A::PaddedRows, B::Misaligned),
        case(Q4_0, 3, 9, 32).batched([1, 2], [2, 1]),
        case(Q4_0, 3, 10, 64).layouts(A::PaddedRows, B::PaddedCols),
        case(Q4_0, 5, 9, 32).batched([2, 1], [1, 1]).layouts(A::Permuted, B::Permuted),
    ]);
}

// 35 rows: one whole 32-row panel of the AVX-512 K-quant packer and a partial one. Under Miri
// these take minutes, as above.
#[cfg_attr(miri, ignore)]
#[test]
fn k_quant_gemm_matches_the_reference() {
    check(&[
        case(Q4_K, 35, 9, 256),
        case(Q4_K, 5, 10, 512).layouts(A::Dense, B::Transposed),
        case(Q5_K, 35, 13, 256).layouts(A::PaddedRows, B::Misaligned),
        case(Q5_K, 3, 9, 256).batched([1, 2], [2, 1]),
        case(Q6_K, 35, 9, 512),
        case(Q6_K, 5, 9, 256).batched([2, 1], [1, 1]).layouts(A::Permuted, B::Permuted),
    ]);
}

/// Products large enough for two threads (`MIN_WORK_PER_THREAD` multiply-adds each): the
/// team packs or quantizes shared panels and columns in parallel, meets at a barrier, then
/// shares the tiles and rows, so Miri checks the hand-over between the threads.
#[test]
fn two_threads_share_the_work_of_the_float_gemm() {
    check_two_threads(&case(F32, 61, 35, 62));
}

// Under Miri each of these takes minutes (the float GEMM above stands for them there).
#[cfg_attr(miri, ignore)]
#[test]
fn two_threads_share_the_work_of_every_other_driver() {
    check_two_threads(&case(Q8_0, 65, 33, 64).layouts(A::Dense, B::Transposed));
    check_two_threads(&case(F16, 65, GEMV_MAX_N, 257).layouts(A::Dense, B::Transposed));
    check_two_threads(&case(Q4_0, 65, GEMV_MAX_N, 256));
    check_two_threads(&case(BF16, 65, 9, 65).batched([2, 1], [2, 1]).layouts(A::Permuted, B::Permuted));
    check_two_threads(&case(Q4_K, 65, 33, 256));
    check_two_threads(&case(Q6_K, 65, GEMV_MAX_N, 256).layouts(A::Dense, B::Transposed));
}

/// Past one cache block in each direction (float `k` 384, int8 `k` 2048, 384 float and 256
/// int8 weight rows): tiles that accumulate across blocks of `k`, several blocks of rows.
// Under Miri these take several minutes.
#[cfg_attr(miri, ignore)]
#[test]
fn products_past_one_cache_block_match_the_reference() {
    check(&[
        case(F32, 9, 9, 401),
        case(BF16, 390, 13, 17).layouts(A::PaddedRows, B::Transposed),
        // Two blocks of `k` ending inside a 32-value step of the AMX tile, whole and partial
        // 32 x 32 tiles, dense and strided activation columns.
        case(BF16, 70, 45, 401),
        case(BF16, 33, 40, 785).layouts(A::PaddedRows, B::Transposed),
        case(Q8_0, 5, 9, 2112),
        case(Q4_0, 260, 10, 64).layouts(A::Dense, B::Misaligned),
        case(Q5_K, 35, 9, 2304),
        case(Q6_K, 260, 10, 256).layouts(A::Dense, B::Misaligned),
    ]);
}

#[test]
fn an_empty_sum_is_zero() {
    for ta in [F32, Q8_0] {
        let mut g = Graph::new();
        let a = g.new_tensor(ta, &[0, 3]).unwrap();
        let b = g.new_tensor(F32, &[0, 2]).unwrap();
        let out = g.mul_mat(a, b).unwrap();
        alloc_graph_tensors(&mut g, &HOST_BUFFER_TYPE).unwrap();
        let mut runner = Runner::new(dispatch::best(), 1);
        assert_eq!(runner.run(&g, out), vec![0.0; 6]);
    }
}
