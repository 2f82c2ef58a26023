//! Every conformance graph computes the same bytes whether its tensors get one fresh buffer
//! each or share memory as the graph allocator plans it (in place where allowed), and every
//! in-place op really runs in place in some case: the kernels tolerate aliasing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "conformance/mod.rs"]
mod conformance;

use std::collections::BTreeMap;

use conformance::rng::Rng;
use conformance::runner::{generate, Values};
use conformance::{cases, CaseGraph};
use tessera::allocator::check::check_allocation;
use tessera::allocator::{alloc_graph_tensors, GraphAllocator};
use tessera::cpu::CpuBackend;
use tessera::host_buffer::HOST_BUFFER_TYPE;
use tessera::{Backend, Graph, TensorId};

fn fill_leafs(g: &Graph, cg_inits: &[(TensorId, conformance::Init)], name: &str) {
    for (stream, &(id, init)) in cg_inits.iter().enumerate() {
        let t = g.tensor(id).unwrap();
        let mut rng = Rng::seeded(name, stream as u64);
        match generate(t.dtype(), t.nelements(), t.ne()[0], init, &mut rng) {
            Values::F32(v) => g.set_f32(id, &v).unwrap(),
            Values::I32(v) => g.set_i32(id, &v).unwrap(),
        }
    }
}

fn output_bytes(g: &Graph, id: TensorId) -> Vec<u8> {
    let mut out = vec![0u8; g.tensor(id).unwrap().nbytes()];
    g.get_bytes(id, 0, &mut out).unwrap();
    out
}

#[test]
fn planned_and_fresh_allocations_give_identical_results() {
    let mut cpu = CpuBackend::new();
    let mut in_place_cases: BTreeMap<&str, usize> = BTreeMap::new();
    let all = cases::all();
    for case in &all {
        let (cg, out): (CaseGraph, TensorId) = case.build().unwrap();
        let inits: Vec<_> = cg.leafs().iter().map(|&id| (id, cg.init_of(id))).collect();
        let (graph, _) = cg.into_parts();

        let mut fresh = graph.clone();
        alloc_graph_tensors(&mut fresh, &HOST_BUFFER_TYPE).unwrap();
        fill_leafs(&fresh, &inits, &case.name);
        cpu.compute_graph(&fresh).unwrap();

        let mut planned = graph;
        let mut galloc: GraphAllocator = GraphAllocator::new(&[&HOST_BUFFER_TYPE]);
        galloc.alloc(&mut planned, None).unwrap();
        if let Err(v) = check_allocation(&planned).unwrap() {
            panic!("{}: {v}", case.name);
        }
        fill_leafs(&planned, &inits, &case.name);
        cpu.compute_graph(&planned).unwrap();

        let same = output_bytes(&fresh, out) == output_bytes(&planned, out);
        assert!(same, "{}: results differ between fresh and planned memory", case.name);
        let report = galloc.report().unwrap();
        if report.buffer_types[0].in_place > 0 {
            *in_place_cases.entry(case.op).or_default() += 1;
        }
    }
    println!("in-place cases per op: {in_place_cases:?}");
    for op in [
        "ADD",
        "SUB",
        "MUL",
        "DIV",
        "SCALE",
        "SQR",
        "SQRT",
        "NEG",
        "ABS",
        "EXP",
        "RELU",
        "GELU",
        "GELU_ERF",
        "SILU",
        "SIGMOID",
        "TANH",
        "ROPE",
        "RMS_NORM",
        "NORM",
        "SOFT_MAX",
        "DIAG_MASK_INF",
    ] {
        assert!(in_place_cases.get(op).copied().unwrap_or(0) > 0, "no case runs {op} in place: {in_place_cases:?}");
    }
}
