//! The scheduler on random graphs over the CPU and one to three simulated accelerators with
//! random op and type support, buffer caps, weights placed on devices, pins and pipeline
//! copies: every plan keeps its invariants, and the result equals the CPU alone, bitwise
//! (the accelerators run the CPU's kernels).
#![no_main]

use std::sync::OnceLock;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use tessera::sched::check::check_plan;
use tessera::{Backend, BufferUsage, DType, Device, Error, Scheduler, SchedulerOptions};
use tessera_fuzz::{bytes_of, cpu_reference, fill_leafs, GraphCase};
use tessera_sim::{SimConfig, SimDevice};

const OPS: [&str; 20] = [
    "ADD", "SUB", "MUL", "SCALE", "SOFT_MAX", "NORM", "RMS_NORM", "MUL_MAT", "CONT", "CPY", "CONCAT", "NEG", "ABS",
    "RELU", "GELU", "GELU_ERF", "SILU", "SIGMOID", "TANH", "SQR",
];
const TYPES: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

#[derive(Arbitrary, Debug)]
struct SimChoice {
    unsupported_ops: u32,
    unsupported_types: u8,
    /// Largest buffer in KiB (None = unlimited).
    cap_kib: Option<u8>,
    events: bool,
}

#[derive(Arbitrary, Debug)]
struct Case {
    graph: GraphCase,
    sims: Vec<SimChoice>,
    /// For each leaf: 0 = unbound (scheduled), k = bound as weights in accelerator k's memory.
    weights_on: Vec<u8>,
    pins: Vec<(u8, u8)>,
    copies: u8,
}

fn sims() -> &'static [&'static SimDevice; 3] {
    static S: OnceLock<[&'static SimDevice; 3]> = OnceLock::new();
    S.get_or_init(|| {
        [
            SimDevice::create(SimConfig::new("SIM0")),
            SimDevice::create(SimConfig::new("SIM1")),
            SimDevice::create(SimConfig::new("SIM2")),
        ]
    })
}

/// Errors a valid but unlucky configuration may legitimately end in.
fn acceptable(e: &Error) -> bool {
    matches!(
        e,
        Error::NoBackend { .. }
            | Error::OutOfMemory { .. }
            | Error::Unsupported { .. }
            | Error::CapacityExceeded { .. }
    )
}

fuzz_target!(|c: Case| {
    let Ok(Some(mut b)) = c.graph.build() else { return };
    let want = cpu_reference(&b).expect("reference");
    let n_sims = 1 + c.sims.len().min(3).saturating_sub(1);
    let mut devices: Vec<&'static dyn Device> = Vec::new();
    for (i, s) in sims().iter().enumerate().take(n_sims) {
        let choice = c.sims.get(i);
        let mut config = SimConfig::new(s.name());
        if let Some(ch) = choice {
            config.unsupported_ops =
                OPS.iter().enumerate().filter(|(k, _)| ch.unsupported_ops >> k & 1 == 1).map(|(_, o)| *o).collect();
            config.unsupported_types =
                TYPES.iter().enumerate().filter(|(k, _)| ch.unsupported_types >> k & 1 == 1).map(|(_, t)| *t).collect();
            config.max_buffer = ch.cap_kib.map_or(usize::MAX, |k| (k as usize + 1) * 1024);
            config.events = ch.events;
        }
        s.reconfigure(config);
        devices.push(*s);
    }
    devices.push(&tessera::cpu::CPU_DEVICE);

    // Weights: some leafs bound in an accelerator's memory before scheduling.
    for (i, &leaf) in b.leafs.clone().iter().enumerate() {
        let on = c.weights_on.get(i).copied().unwrap_or(0) as usize % (n_sims + 1);
        if on == 0 || b.graph.data(leaf).is_some() || !b.graph.leafs().contains(&leaf) {
            continue;
        }
        match tessera::allocator::alloc_tensors(&mut b.graph, &[leaf], devices[on - 1].buffer_type()) {
            Ok(bufs) => bufs.iter().for_each(|x| x.set_usage(BufferUsage::Weights)),
            Err(e) if acceptable(&e) => return,
            Err(e) => panic!("placing a weight: {e}"),
        }
    }
    fill_leafs(&b.graph, &b.leafs).expect("weights");

    // The CPU runs the reference kernels, as the simulated accelerators do, so a scheduled run
    // equals the reference run bit for bit.
    let mut backends: Vec<Box<dyn Backend>> =
        devices[..n_sims].iter().map(|d| d.init_backend().expect("backend")).collect();
    backends.push(Box::new(tessera::cpu::CpuBackend::reference()));
    let n_copies = [1, 1, 2, 4][c.copies as usize % 4];
    let mut sched: Scheduler =
        Scheduler::new(backends, SchedulerOptions { n_copies, op_offload: false }).expect("scheduler");
    let nodes = b.graph.nodes();
    for &(node, backend) in c.pins.iter().take(8).filter(|_| !nodes.is_empty()) {
        let id = nodes[node as usize % nodes.len()];
        let k = backend as usize % devices.len();
        if devices[k].supports_op(&b.graph, id) {
            sched.set_tensor_backend(id, k).expect("pin");
        }
    }
    for round in 0..n_copies.min(2) {
        match sched.alloc_graph(&b.graph) {
            Ok(_) => {}
            Err(e) if acceptable(&e) => return,
            Err(e) => panic!("planning failed: {e}"),
        }
        let plan = sched.plan().expect("plan").clone();
        let sg = sched.graph().expect("graph");
        let violations = check_plan(&plan, sg, &b.graph, &devices).expect("checkable");
        assert!(violations.is_empty(), "round {round}: {violations:#?}\n{}", plan.detailed());
        let unbound: Vec<_> = b.leafs.iter().copied().filter(|&l| b.graph.data(l).is_none()).collect();
        fill_leafs(sg, &unbound).expect("inputs");
        sched.compute().expect("compute");
        let got = bytes_of(sched.graph().expect("graph"), b.output).expect("output");
        assert_eq!(got, want, "round {round}: scheduled result differs from the CPU\n{plan}");
    }
});
