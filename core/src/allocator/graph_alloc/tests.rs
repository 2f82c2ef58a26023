//! Property tests: random graphs planned over several buffer types with tiny caps must
//! satisfy every allocation invariant.

use alloc::sync::Arc;
use alloc::vec::Vec;

use super::GraphAllocator;
use crate::allocator::check::check_allocation;
use crate::buffer::{Buffer, BufferType};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::graph::Graph;
use crate::host_buffer::HostBuffer;
use crate::tensor::TensorId;

/// Host memory with a chosen alignment and largest allocation.
struct CappedType {
    name: &'static str,
    alignment: usize,
    max_size: usize,
}

impl BufferType for CappedType {
    fn name(&self) -> &str {
        self.name
    }
    fn alignment(&self) -> usize {
        self.alignment
    }
    fn max_size(&self) -> usize {
        self.max_size
    }
    fn is_host(&self) -> bool {
        true
    }
    fn alloc_buffer(&'static self, size: usize) -> Result<Arc<dyn Buffer>> {
        Ok(Arc::new(HostBuffer::alloc(self, size)?))
    }
}

static ROOMY: CappedType = CappedType { name: "roomy", alignment: 64, max_size: usize::MAX };
static TINY: CappedType = CappedType { name: "tiny", alignment: 16, max_size: 4096 };
static ODD: CappedType = CappedType { name: "odd", alignment: 32, max_size: 1500 };

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// A random graph of element-wise chains, row ops, matmuls, views, copies and joins.
fn random_graph(rng: &mut Rng, n_ops: usize) -> Result<(Graph, TensorId)> {
    let mut g = Graph::new();
    let (n0, n1) = (1 + rng.below(40), 1 + rng.below(12));
    let mut pool: Vec<TensorId> = Vec::new();
    for _ in 0..2 + rng.below(3) {
        let leaf = g.new_tensor(DType::F32, &[n0, n1])?;
        if rng.below(2) == 0 {
            g.set_input(leaf)?;
        }
        pool.push(leaf);
    }
    for _ in 0..n_ops {
        let a = pool[rng.below(pool.len())];
        let b = pool[rng.below(pool.len())];
        let next = match rng.below(12) {
            0 => g.relu(a),
            1 => g.scale(a, 0.5),
            2 => g.add(a, b),
            3 => g.mul(a, b),
            4 => g.soft_max(a, None, 1.0),
            5 => g.rms_norm(a, 1e-6),
            6 => {
                // [n0, n1] x [n0, n1] -> [n1, n1], then aᵀ [n1, n0] x that -> [n0, n1].
                let square = g.mul_mat(a, b)?;
                let at = g.transpose(a)?;
                let at = g.cont(at)?;
                g.mul_mat(at, square)
            }
            7 => g.transpose(a).and_then(|t| g.cont(t)).and_then(|t| g.transpose(t)).and_then(|t| g.cont(t)),
            8 => {
                let row = g.view_2d(a, n0, 1, n0 * 4, 0)?;
                g.add(a, row)
            }
            9 => {
                let fresh = g.new_tensor(DType::F32, &[n0, n1])?;
                g.cpy(a, fresh)
            }
            10 => g.concat(a, b, 1).and_then(|c| g.view_2d(c, n0, n1, n0 * 4, 0)).and_then(|v| g.cont(v)),
            _ => g.reshape(a, &[n0 * n1]).and_then(|r| g.neg(r)).and_then(|r| g.reshape(r, &[n0, n1])),
        }?;
        if rng.below(8) == 0 {
            g.set_output(next)?;
        }
        pool.push(next);
    }
    let mut out = pool[pool.len() - 1];
    for &t in pool.iter().rev().skip(1).take(3) {
        out = g.add(out, t)?;
    }
    g.set_output(out)?;
    g.build_forward(out)?;
    Ok((g, out))
}

#[test]
fn random_graphs_satisfy_the_invariants() {
    let mut rng = Rng(7);
    let types: [&'static dyn BufferType; 3] = [&ROOMY, &TINY, &ODD];
    let (mut in_place, mut checked, mut multi_chunk) = (0, 0, 0);
    // Under Miri (slow) a few cases check memory safety; the counts below need the full run.
    let cases = if cfg!(miri) { 6 } else { 300 };
    for case in 0..cases {
        let n_ops = 1 + rng.below(40);
        let (mut g, _) = random_graph(&mut rng, n_ops).unwrap();
        let n_slots = 1 + case % 3;
        let slots: Vec<usize> = (0..g.tensors().len()).map(|_| rng.below(n_slots)).collect();
        let mut ga: GraphAllocator = GraphAllocator::new(&types[..n_slots]);
        match ga.alloc(&mut g, Some(&slots)) {
            Ok(()) => {}
            // A single tensor larger than a capped type cannot be placed; that is the only
            // acceptable failure.
            Err(Error::OutOfMemory { .. }) => continue,
            Err(e) => panic!("case {case}: {e}"),
        }
        if let Err(v) = check_allocation(&g).unwrap() {
            panic!("case {case}: {v}");
        }
        let report = ga.report().unwrap();
        for r in &report.buffer_types {
            assert!(r.planned >= r.lower_bound, "case {case}: {report}");
            in_place += r.in_place;
            multi_chunk += usize::from(r.chunks > 1);
        }
        checked += 1;
    }
    if cfg!(miri) {
        return;
    }
    assert!(checked > 200, "only {checked} graphs could be planned");
    assert!(in_place > 100, "in-place reuse should happen often, saw {in_place}");
    assert!(multi_chunk > 20, "capped buffer types should need several chunks, saw {multi_chunk}");
}

#[test]
fn the_checker_catches_overlaps() {
    let mut g = Graph::new();
    let a = g.new_tensor(DType::F32, &[16]).unwrap();
    let b = g.relu(a).unwrap();
    let c = g.mul(b, a).unwrap();
    g.build_forward(c).unwrap();
    let mut ga: GraphAllocator = GraphAllocator::new(&[&ROOMY]);
    ga.alloc(&mut g, None).unwrap();
    assert_eq!(check_allocation(&g).unwrap(), Ok(()));
    // Force `b` onto `a` although `a` is read again by `c`.
    let data = g.data(a).unwrap();
    g.bind_planned(b, data).unwrap();
    assert!(matches!(check_allocation(&g).unwrap(), Err(super::super::check::Violation::Overlap { .. })));
}

#[test]
fn chains_run_in_place_and_outputs_survive() {
    let mut g = Graph::new();
    let x = g.new_tensor(DType::F32, &[256]).unwrap();
    let mut y = x;
    for _ in 0..10 {
        y = g.silu(y).unwrap();
    }
    let keep = y;
    g.set_output(keep).unwrap();
    for _ in 0..5 {
        y = g.neg(y).unwrap();
    }
    g.build_forward(y).unwrap();
    let mut ga: GraphAllocator = GraphAllocator::new(&[&ROOMY]);
    let report = ga.reserve(&g, None).unwrap().clone();
    let r = &report.buffer_types[0];
    // The leaf and the first ten results share one block; the output keeps its own.
    assert_eq!(r.in_place, 10 + 4);
    assert_eq!(r.planned, 2 * 1024);
    assert_eq!(r.lower_bound, 2 * 1024);
    ga.alloc(&mut g, None).unwrap();
    assert_eq!(check_allocation(&g).unwrap(), Ok(()));
    assert_eq!(g.data(x).unwrap().offset, g.data(keep).unwrap().offset);
    assert_ne!(g.data(keep).unwrap().offset, g.data(y).unwrap().offset);
}

#[test]
fn alloc_replans_only_when_the_graph_changes() {
    let build = |n: usize| {
        let mut g = Graph::new();
        let a = g.new_tensor(DType::F32, &[n]).unwrap();
        let b = g.exp(a).unwrap();
        let c = g.add(b, a).unwrap();
        g.build_forward(c).unwrap();
        g
    };
    let mut ga: GraphAllocator = GraphAllocator::new(&[&ROOMY]);
    let mut g = build(100);
    ga.alloc(&mut g, None).unwrap();
    let first = ga.buffer_size(0);
    // Same shape: same buffer, no new plan.
    let mut g2 = build(100);
    ga.alloc(&mut g2, None).unwrap();
    assert_eq!(ga.buffer_size(0), first);
    assert!(Arc::ptr_eq(&g.data(TensorId(0)).unwrap().buffer, &g2.data(TensorId(0)).unwrap().buffer));
    // Larger tensors: a new plan and a larger buffer; a smaller graph then fits without shrinking.
    let mut big = build(1000);
    ga.alloc(&mut big, None).unwrap();
    assert!(ga.buffer_size(0) > first);
    let grown = ga.buffer_size(0);
    let mut small = build(10);
    ga.alloc(&mut small, None).unwrap();
    assert_eq!(ga.buffer_size(0), grown);
    assert_eq!(check_allocation(&small).unwrap(), Ok(()));
}

/// `relu(x) + x` over `n` values.
fn small_graph(n: usize) -> Graph {
    let mut g = Graph::new();
    let x = g.new_tensor(DType::F32, &[n]).unwrap();
    g.set_input(x).unwrap();
    let r = g.relu(x).unwrap();
    let y = g.add(r, x).unwrap();
    g.build_forward(y).unwrap();
    g
}

#[test]
fn the_layout_generation_moves_exactly_when_addresses_move() {
    let mut galloc: GraphAllocator = GraphAllocator::new(&[&ROOMY]);
    let mut g = small_graph(64);
    galloc.alloc(&mut g, None).unwrap();
    let first = galloc.generation();
    // The same graph again: same places, same generation.
    for _ in 0..3 {
        let mut again = small_graph(64);
        galloc.alloc(&mut again, None).unwrap();
        assert_eq!(galloc.generation(), first);
        assert_eq!(again.data(TensorId(2)).map(|d| d.offset), g.data(TensorId(2)).map(|d| d.offset));
    }
    // A larger graph needs a new plan and a larger buffer: a new generation.
    let mut big = small_graph(4096);
    galloc.alloc(&mut big, None).unwrap();
    assert_ne!(galloc.generation(), first);
    let second = galloc.generation();
    galloc.alloc(&mut big, None).unwrap();
    assert_eq!(galloc.generation(), second);
}

/// `relu(x)` read by a product whose result is cast to f16: the product and the cast are the
/// run, and `relu(x)` is its input; the graph, the run's input and the cast's result.
fn product_then_cast() -> (Graph, TensorId, TensorId) {
    let mut g = Graph::new();
    let x = g.new_tensor(DType::F32, &[64, 64]).unwrap();
    g.set_input(x).unwrap();
    let input = g.relu(x).unwrap();
    let w = g.new_tensor(DType::F32, &[64, 64]).unwrap();
    g.set_input(w).unwrap();
    // An output lives to the end: the product's other operand is the only memory it frees.
    g.set_output(w).unwrap();
    let product = g.mul_mat(w, input).unwrap();
    let half = g.cast(product, DType::F16).unwrap();
    g.set_output(half).unwrap();
    g.build_forward(half).unwrap();
    (g, input, half)
}

fn bytes(g: &Graph, id: TensorId) -> core::ops::Range<usize> {
    let d = g.data(id).unwrap();
    d.offset..d.offset + g.tensor(id).unwrap().nbytes()
}

#[test]
fn a_fused_runs_result_never_lands_on_what_the_run_reads() {
    let overlaps = |runs: &[core::ops::Range<usize>]| {
        let (mut g, input, half) = product_then_cast();
        let mut ga: GraphAllocator = GraphAllocator::new(&[&ROOMY]);
        ga.set_runs(runs).unwrap();
        ga.alloc(&mut g, None).unwrap();
        assert_eq!(check_allocation(&g).unwrap(), Ok(()));
        let (a, b) = (bytes(&g, input), bytes(&g, half));
        a.start < b.end && b.start < a.end
    };
    // Node by node, the cast may reuse the memory of the product's freed operand ...
    assert!(overlaps(&[]));
    // ... but not when the product and the cast are one kernel (nodes 1 and 2).
    let product_and_cast = 1..3;
    assert!(!overlaps(&[product_and_cast]));
}

#[test]
fn other_runs_drop_the_plan() {
    let (mut g, _, _) = product_then_cast();
    let mut ga: GraphAllocator = GraphAllocator::new(&[&ROOMY]);
    ga.alloc(&mut g, None).unwrap();
    let before = ga.generation();
    ga.set_runs(&[]).unwrap();
    ga.alloc(&mut g, None).unwrap();
    assert_eq!(ga.generation(), before);
    let product_and_cast = 1..3;
    ga.set_runs(&[product_and_cast]).unwrap();
    ga.alloc(&mut g, None).unwrap();
    assert_ne!(ga.generation(), before);
}
