//! The graph allocator on random graphs over up to three capped buffer types, with random runs
//! of nodes kept alive together (as fused kernels need): every plan keeps the allocation
//! invariants, and the planned memory computes the same bytes as a fresh buffer per tensor.
#![no_main]

use std::sync::atomic::{AtomicUsize, Ordering};

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use tessera::allocator::check::check_allocation;
use tessera::allocator::GraphAllocator;
use tessera::{Backend, BufferType, Error};
use tessera_fuzz::{bytes_of, cpu_reference, fill_leafs, CappedHost, GraphCase};

static TYPES: [CappedHost; 3] = [
    CappedHost { name: "a", alignment: 64, max: AtomicUsize::new(usize::MAX) },
    CappedHost { name: "b", alignment: 16, max: AtomicUsize::new(usize::MAX) },
    CappedHost { name: "c", alignment: 32, max: AtomicUsize::new(usize::MAX) },
];

#[derive(Arbitrary, Debug)]
struct Case {
    graph: GraphCase,
    /// Buffer type of each tensor (cycled).
    slots: Vec<u8>,
    /// Largest allocation of each type, in units of 64 bytes (0 = unlimited).
    caps: [u16; 3],
    n_types: u8,
    /// Runs of nodes, as (first node, node count), wrapped to the graph.
    runs: Vec<(u8, u8)>,
}

fuzz_target!(|c: Case| {
    let Ok(Some(mut b)) = c.graph.build() else { return };
    let n_types = 1 + c.n_types as usize % 3;
    for (t, cap) in TYPES.iter().zip(c.caps) {
        t.max.store(if cap == 0 { usize::MAX } else { cap as usize * 64 }, Ordering::Relaxed);
    }
    let types: Vec<&'static dyn BufferType> = TYPES[..n_types].iter().map(|t| t as &'static dyn BufferType).collect();
    let slots: Vec<usize> = (0..b.graph.tensors().len())
        .map(|i| c.slots.get(i % c.slots.len().max(1)).map_or(0, |s| *s as usize % n_types))
        .collect();
    let n_nodes = b.graph.nodes().len().max(1);
    let runs: Vec<std::ops::Range<usize>> = c
        .runs
        .iter()
        .map(|&(first, len)| {
            let start = first as usize % n_nodes;
            start..start + len as usize % 6
        })
        .collect();
    let mut galloc: GraphAllocator = GraphAllocator::new(&types);
    galloc.set_runs(&runs).expect("runs");
    match galloc.alloc(&mut b.graph, Some(&slots)) {
        Ok(()) => {}
        // A tensor larger than a capped type cannot be placed, and tiny caps can need more
        // chunks than the planner holds: typed errors are the answer.
        Err(Error::OutOfMemory { .. } | Error::CapacityExceeded { .. }) => return,
        Err(e) => panic!("allocation failed: {e}"),
    }
    if let Err(v) = check_allocation(&b.graph).expect("checkable") {
        panic!("allocation invariant broken: {v}");
    }
    for r in &galloc.report().expect("planned").buffer_types {
        assert!(r.planned >= r.lower_bound, "planned {} below the lower bound {}", r.planned, r.lower_bound);
    }
    fill_leafs(&b.graph, &b.leafs).expect("leafs");
    tessera::cpu::CpuBackend::reference().compute_graph(&b.graph).expect("compute");
    let want = cpu_reference(&b).expect("reference");
    assert_eq!(bytes_of(&b.graph, b.output).expect("output"), want, "planned memory changed the result");
});
