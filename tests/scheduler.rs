//! The scheduler over a simulated accelerator and the CPU: the plans its five passes make
//! for hand-made graphs, results bitwise equal to a CPU-only run, pipeline parallelism, the
//! eval callback (whose "stop" stops the whole compute), typed errors for bad input, and a
//! plan that prints. The user's graph is never changed by planning or running it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use tessera::allocator::{alloc_graph_tensors, alloc_tensors};
use tessera::cpu::CpuBackend;
use tessera::host_buffer::HOST_BUFFER_TYPE;
use tessera::sched::{Cause, SplitInput};
use tessera::{
    Backend, Buffer, BufferType, BufferUsage, Completion, DType, Device, Error, Graph, Op, Scheduler, SchedulerOptions,
    SplitPlan, TensorFlags, TensorId,
};
use tessera_sim::{SimConfig, SimDevice};

// ---------------------------------------------------------------------------------------------
// Helpers

/// A simulated accelerator called "SIM0" that cannot run `unsupported` ops.
fn sim_device(unsupported: &[&'static str]) -> &'static SimDevice {
    let mut config = SimConfig::new("SIM0");
    config.unsupported_ops.extend_from_slice(unsupported);
    SimDevice::create(config)
}

/// The usual device under test: no SOFT_MAX.
fn sim_no_softmax() -> &'static SimDevice {
    sim_device(&["SOFT_MAX"])
}

/// The CPU beside the simulated accelerator: the reference kernels, which the accelerator
/// runs too, so that scheduled results equal a CPU run bit for bit.
fn cpu() -> Box<dyn Backend> {
    Box::new(CpuBackend::reference())
}

/// [SIM, CPU] with `n_copies` copies per input.
fn sched_over(sim: &'static SimDevice, n_copies: usize) -> Scheduler {
    let backends: Vec<Box<dyn Backend>> = vec![sim.init_backend().unwrap(), cpu()];
    Scheduler::new(backends, SchedulerOptions { n_copies, op_offload: false }).unwrap()
}

fn values(n: usize, seed: f32) -> Vec<f32> {
    (0..n).map(|i| ((i as f32 * 0.618 + seed).sin()) * 0.5).collect()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn named(g: &mut Graph, ne: &[usize], name: &str) -> TensorId {
    let id = g.new_tensor(DType::F32, ne).unwrap();
    g.set_name(id, name).unwrap();
    id
}

fn input(g: &mut Graph, ne: &[usize], name: &str) -> TensorId {
    let id = named(g, ne, name);
    g.set_input(id).unwrap();
    id
}

fn name(g: &mut Graph, id: TensorId, name: &str) -> TensorId {
    g.set_name(id, name).unwrap();
    id
}

/// Binds `weights` into fresh buffers of `buffer_type`, marks them as weights and fills them
/// with values depending on the weight's position.
fn bind_weights(g: &mut Graph, weights: &[TensorId], buffer_type: &'static dyn BufferType) -> Vec<Arc<dyn Buffer>> {
    let buffers = alloc_tensors(g, weights, buffer_type).unwrap();
    for b in &buffers {
        b.set_usage(BufferUsage::Weights);
    }
    fill_weights(g, weights);
    buffers
}

fn fill_weights(g: &Graph, weights: &[TensorId]) {
    for (i, &w) in weights.iter().enumerate() {
        g.set_f32(w, &values(g.tensor(w).unwrap().nelements(), 10.0 + i as f32)).unwrap();
    }
}

/// A CPU-only run of `unbound` (a graph whose tensors have no memory yet): every tensor gets
/// memory of its own, so every node's value can be read afterwards.
fn cpu_reference(unbound: &Graph, weights: &[TensorId], inputs: &[(TensorId, Vec<f32>)]) -> Graph {
    let mut g = unbound.clone();
    alloc_graph_tensors(&mut g, &HOST_BUFFER_TYPE).unwrap();
    fill_weights(&g, weights);
    for (id, v) in inputs {
        g.set_f32(*id, v).unwrap();
    }
    CpuBackend::reference().compute_graph(&g).unwrap();
    g
}

fn assignment(plan: &SplitPlan, id: TensorId) -> (usize, Cause) {
    let a = plan.assignments.iter().find(|a| a.tensor == id).unwrap_or_else(|| panic!("no assignment for #{}", id.0));
    (a.backend, a.cause)
}

/// One split as names: its backend, the user's nodes it runs (not the copies and markers the
/// scheduler adds), and its inputs as (name, from, to).
#[derive(Debug, PartialEq)]
struct SplitDesc {
    backend: String,
    nodes: Vec<String>,
    inputs: Vec<(String, String, String)>,
}

fn split(backend: &str, nodes: &[&str], inputs: &[(&str, &str, &str)]) -> SplitDesc {
    SplitDesc {
        backend: backend.into(),
        nodes: nodes.iter().map(|s| s.to_string()).collect(),
        inputs: inputs.iter().map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string())).collect(),
    }
}

fn describe<const B: usize, const C: usize, const I: usize>(sched: &Scheduler<B, C, I>) -> Vec<SplitDesc> {
    let plan = sched.plan().unwrap();
    let g = sched.graph().unwrap();
    plan.splits
        .iter()
        .map(|s| SplitDesc {
            backend: plan.backends[s.backend].clone(),
            nodes: g.nodes()[s.nodes.clone()]
                .iter()
                .filter(|&&id| g.tensor(id).unwrap().op() != Op::None)
                .map(|&id| g.label(id))
                .collect(),
            inputs: s
                .inputs
                .iter()
                .map(|i| (i.name.clone(), plan.backends[i.from].clone(), plan.backends[s.backend].clone()))
                .collect(),
        })
        .collect()
}

/// The buffer type name of the memory a tensor of the scheduled graph got.
fn memory_of<const B: usize, const C: usize, const I: usize>(sched: &Scheduler<B, C, I>, id: TensorId) -> String {
    let g = sched.graph().unwrap();
    g.data(id).unwrap_or_else(|| panic!("'{}' has no memory", g.label(id))).buffer.buffer_type().name().to_string()
}

// ---------------------------------------------------------------------------------------------
// Small graphs with known plans

/// x (input) -> y = w·x (w in SIM memory) -> p = soft_max(y) -> o = 2·p.
struct Chain {
    graph: Graph,
    x: TensorId,
    w: TensorId,
    y: TensorId,
    p: TensorId,
    o: TensorId,
}

fn chain() -> Chain {
    let mut g = Graph::new();
    let x = input(&mut g, &[8, 4], "x");
    let w = named(&mut g, &[8, 8], "w");
    let y = g.mul_mat(w, x).unwrap();
    let y = name(&mut g, y, "y");
    let p = g.soft_max(y, None, 1.0).unwrap();
    let p = name(&mut g, p, "p");
    let o = g.scale(p, 2.0).unwrap();
    let o = name(&mut g, o, "o");
    g.set_output(o).unwrap();
    g.build_forward(o).unwrap();
    Chain { graph: g, x, w, y, p, o }
}

#[test]
fn weights_in_sim_memory_pull_their_matmul_to_the_sim() {
    let sim = sim_no_softmax();
    let c = chain();
    let mut g = c.graph.clone();
    bind_weights(&mut g, &[c.w], sim.buffer_type());
    let mut sched = sched_over(sim, 1);
    let plan = sched.split_graph(&g).unwrap();
    assert_eq!(assignment(plan, c.y), (0, Cause::Weights), "{}", plan.detailed());
    assert_eq!(sched.get_tensor_backend(c.y), Some(0));

    // The same graph with its weights in host memory runs on the CPU, for the same reason.
    let mut g = c.graph.clone();
    bind_weights(&mut g, &[c.w], &HOST_BUFFER_TYPE);
    let plan = sched.split_graph(&g).unwrap();
    assert_eq!(assignment(plan, c.y), (1, Cause::Weights), "{}", plan.detailed());
}

#[test]
fn an_op_the_sim_lacks_falls_back_to_the_cpu_in_its_own_split() {
    let sim = sim_no_softmax();
    let c = chain();
    let mut g = c.graph.clone();
    bind_weights(&mut g, &[c.w], sim.buffer_type());
    let mut sched = sched_over(sim, 1);
    let plan = sched.split_graph(&g).unwrap().clone();
    assert_eq!(assignment(&plan, c.y), (0, Cause::Weights));
    assert_eq!(assignment(&plan, c.p), (1, Cause::Best), "SOFT_MAX only runs on the CPU");
    assert_eq!(assignment(&plan, c.o), (0, Cause::ExpandGpu));
    assert_eq!(
        describe(&sched),
        [
            split("SIM0", &["y"], &[("x", "CPU", "SIM0")]),
            split("CPU", &["p"], &[("y", "SIM0", "CPU")]),
            split("SIM0", &["o"], &[("p", "CPU", "SIM0")]),
        ]
    );
    // Each split runs a marker and a copy per input, then its nodes; ranges tile the graph.
    let ranges: Vec<_> = plan.splits.iter().map(|s| s.nodes.clone()).collect();
    assert_eq!(ranges, [0..3, 3..6, 6..9]);
    assert_eq!(sched.graph().unwrap().nodes().len(), 9);
    // One copy per input, on the split's backend, with the layout of what it copies.
    let sg = sched.graph().unwrap();
    for s in &plan.splits {
        for i in &s.inputs {
            assert_eq!(i.copies.len(), 1);
            assert!(!i.user_input, "with one copy nothing is pipelined");
            assert_eq!(i.bytes, 8 * 4 * 4);
            let copy = sg.tensor(i.copies[0]).unwrap();
            assert!(copy.same_layout(g.tensor(i.tensor).unwrap()));
            assert_eq!(sg.label(i.copies[0]), format!("{}#{}#0", plan.backends[s.backend], i.name));
        }
    }
    // The CPU split's node reads the copy, not the SIM tensor.
    let p_src = sg.tensor(c.p).unwrap().src(0).unwrap();
    assert_eq!(p_src, plan.splits[1].inputs[0].copies[0]);
    assert_eq!(g.tensor(c.p).unwrap().src(0), Some(c.y), "the user's graph still reads y");

    // It runs, and gives the CPU's bits.
    sched.alloc_graph(&g).unwrap();
    assert_eq!(memory_of(&sched, c.y), "SIM0");
    assert_eq!(memory_of(&sched, c.p), "CPU");
    let xv = values(32, 1.0);
    sched.graph().unwrap().set_f32(c.x, &xv).unwrap();
    assert_eq!(sched.compute().unwrap(), Completion::Finished);
    let reference = cpu_reference(&c.graph, &[c.w], &[(c.x, xv)]);
    assert_eq!(bits(&sched.graph().unwrap().get_f32(c.o).unwrap()), bits(&reference.get_f32(c.o).unwrap()));
}

/// x (input) -> h = relu(x) -> y = w·h (w in SIM memory).
fn relu_then_matmul() -> (Graph, TensorId, TensorId, TensorId, TensorId) {
    let mut g = Graph::new();
    let x = input(&mut g, &[8, 4], "x");
    let w = named(&mut g, &[8, 8], "w");
    let h = g.relu(x).unwrap();
    let h = name(&mut g, h, "h");
    let y = g.mul_mat(w, h).unwrap();
    let y = name(&mut g, y, "y");
    g.set_output(y).unwrap();
    g.build_forward(y).unwrap();
    (g, x, w, h, y)
}

#[test]
fn pass2_expands_the_sim_up_to_an_element_wise_op_reading_a_cpu_input() {
    let sim = sim_no_softmax();
    let (base, x, w, h, y) = relu_then_matmul();
    let mut g = base.clone();
    bind_weights(&mut g, &[w], sim.buffer_type());
    let mut sched = sched_over(sim, 1);
    let plan = sched.split_graph(&g).unwrap();
    // Without pass 2, pass 3 would give h the CPU, the only backend that can read x.
    assert_eq!(assignment(plan, h), (0, Cause::ExpandGpu), "{}", plan.detailed());
    assert_eq!(assignment(plan, y), (0, Cause::Weights));
    assert_eq!(describe(&sched), [split("SIM0", &["h", "y"], &[("x", "CPU", "SIM0")])]);

    sched.alloc_graph(&g).unwrap();
    let xv = values(32, 2.0);
    sched.graph().unwrap().set_f32(x, &xv).unwrap();
    sched.compute().unwrap();
    let reference = cpu_reference(&base, &[w], &[(x, xv)]);
    assert_eq!(bits(&sched.graph().unwrap().get_f32(y).unwrap()), bits(&reference.get_f32(y).unwrap()));
}

#[test]
fn two_backends_of_one_device_keep_their_pins_and_pass_results_as_copies() {
    let mut g = Graph::new();
    let x = input(&mut g, &[8, 4], "x");
    let h = g.relu(x).unwrap();
    let h = name(&mut g, h, "h");
    let z = g.scale(h, 3.0).unwrap();
    let z = name(&mut g, z, "z");
    g.set_output(z).unwrap();
    g.build_forward(z).unwrap();

    // Two CPU backends: two streams of one device, both on the host buffer type.
    let mut sched: Scheduler = Scheduler::new(vec![cpu(), cpu()], SchedulerOptions::default()).unwrap();
    sched.set_tensor_backend(h, 1).unwrap();
    sched.set_tensor_backend(z, 0).unwrap();
    assert_eq!(sched.get_tensor_backend(h), Some(1), "the pin is reported");
    let plan = sched.split_graph(&g).unwrap();
    assert_eq!(plan.backends, ["CPU", "CPU:1"]);
    assert_eq!(assignment(plan, h), (1, Cause::User), "not moved to the other stream: {}", plan.detailed());
    assert_eq!(plan.splits.len(), 2, "{plan}");
    // What one stream computed reaches the other as a copy, never read in place.
    let copied: Vec<_> = plan.splits[1].inputs.iter().map(|i| (i.name.as_str(), i.route)).collect();
    assert_eq!(copied, [("h", tessera::sched::CopyRoute::Host)]);

    sched.alloc_graph(&g).unwrap();
    assert!(sched.buffer_size(0) > 0 && sched.buffer_size(1) > 0, "each stream computes in memory of its own");
    let xv = values(32, 3.0);
    sched.graph().unwrap().set_f32(x, &xv).unwrap();
    sched.compute().unwrap();
    let reference = cpu_reference(&g, &[], &[(x, xv)]);
    assert_eq!(bits(&sched.graph().unwrap().get_f32(z).unwrap()), bits(&reference.get_f32(z).unwrap()));
}

#[test]
fn pass4_views_follow_their_source_and_sources_their_consumer() {
    let sim = sim_no_softmax();
    let mut g = Graph::new();
    let x = input(&mut g, &[8, 4], "x");
    let w = named(&mut g, &[8, 8], "w");
    let c = named(&mut g, &[32], "c"); // unbound, no flags: it goes where it is read
    let y = g.mul_mat(w, x).unwrap();
    let y = name(&mut g, y, "y");
    let r = g.reshape(y, &[32]).unwrap();
    let r = name(&mut g, r, "r");
    let s = g.add(r, c).unwrap();
    let s = name(&mut g, s, "s");
    let xv_ = g.reshape(x, &[32]).unwrap();
    let xv_ = name(&mut g, xv_, "xv");
    let o = g.add(s, xv_).unwrap();
    let o = name(&mut g, o, "o");
    g.set_output(o).unwrap();
    g.build_forward(o).unwrap();
    let base = g.clone();
    bind_weights(&mut g, &[w], sim.buffer_type());

    let mut sched = sched_over(sim, 1);
    let plan = sched.split_graph(&g).unwrap();
    assert_eq!(assignment(plan, r), (0, Cause::ViewSource), "{}", plan.detailed());
    assert_eq!(assignment(plan, xv_), (1, Cause::ViewSource), "a view of the CPU input stays on the CPU");
    assert_eq!(assignment(plan, s), (0, Cause::ExpandGpu));
    assert_eq!(assignment(plan, o), (0, Cause::ExpandGpu));
    // c took its consumer's backend: it is no input of the SIM split, it lives there.
    assert_eq!(
        describe(&sched),
        [split("SIM0", &["y", "r", "s", "xv", "o"], &[("x", "CPU", "SIM0"), ("xv", "CPU", "SIM0")])]
    );
    sched.alloc_graph(&g).unwrap();
    assert_eq!(memory_of(&sched, c), "SIM0");
    assert_eq!(memory_of(&sched, x), "CPU");

    let (xs, cs) = (values(32, 4.0), values(32, 5.0));
    sched.graph().unwrap().set_f32(x, &xs).unwrap();
    sched.graph().unwrap().set_f32(c, &cs).unwrap();
    sched.compute().unwrap();
    let reference = cpu_reference(&base, &[w], &[(x, xs), (c, cs)]);
    assert_eq!(bits(&sched.graph().unwrap().get_f32(o).unwrap()), bits(&reference.get_f32(o).unwrap()));
}

#[test]
fn a_tensor_read_by_two_later_splits_on_one_backend_is_copied_once() {
    let sim = sim_no_softmax();
    let mut g = Graph::new();
    let x = input(&mut g, &[8, 4], "x");
    let w1 = named(&mut g, &[8, 8], "w1");
    let w2 = named(&mut g, &[8, 8], "w2");
    let a = g.mul_mat(w1, x).unwrap();
    let a = name(&mut g, a, "a");
    let p = g.soft_max(a, None, 0.5).unwrap();
    let p = name(&mut g, p, "p");
    let m = g.mul_mat(w2, p).unwrap();
    let m = name(&mut g, m, "m");
    let b = g.add(m, x).unwrap();
    let b = name(&mut g, b, "b");
    g.set_output(b).unwrap();
    g.build_forward(b).unwrap();
    let base = g.clone();
    bind_weights(&mut g, &[w1, w2], sim.buffer_type());

    let mut sched = sched_over(sim, 1);
    sched.split_graph(&g).unwrap();
    assert_eq!(
        describe(&sched),
        [
            split("SIM0", &["a"], &[("x", "CPU", "SIM0")]),
            split("CPU", &["p"], &[("a", "SIM0", "CPU")]),
            split("SIM0", &["m", "b"], &[("p", "CPU", "SIM0")]),
        ]
    );
    // Both SIM splits read the one copy of x.
    let plan = sched.plan().unwrap();
    let copy = plan.splits[0].inputs[0].copies[0];
    let sg = sched.graph().unwrap();
    assert_eq!(sg.tensor(a).unwrap().src(1), Some(copy));
    assert_eq!(sg.tensor(b).unwrap().src(1), Some(copy));
    let copies_of_x = plan.splits.iter().flat_map(|s| &s.inputs).filter(|i| i.tensor == x).count();
    assert_eq!(copies_of_x, 1);
    assert_eq!(plan.n_input_copies(), 3);

    // The copy made for the first split is still intact when the third one reads it.
    sched.alloc_graph(&g).unwrap();
    let xv = values(32, 6.0);
    sched.graph().unwrap().set_f32(x, &xv).unwrap();
    sched.compute().unwrap();
    let reference = cpu_reference(&base, &[w1, w2], &[(x, xv)]);
    assert_eq!(bits(&sched.graph().unwrap().get_f32(b).unwrap()), bits(&reference.get_f32(b).unwrap()));
}

#[test]
fn user_pins_are_honoured_reported_and_replanning_follows_them() {
    let sim = sim_no_softmax();
    let (base, x, w, h, y) = relu_then_matmul();
    let mut g = base.clone();
    bind_weights(&mut g, &[w], sim.buffer_type());
    let mut sched = sched_over(sim, 1);
    let xv = values(32, 7.0);
    let reference = cpu_reference(&base, &[w], &[(x, xv.clone())]);
    let run = |sched: &mut Scheduler| {
        sched.alloc_graph(&g).unwrap();
        sched.graph().unwrap().set_f32(x, &xv).unwrap();
        assert_eq!(sched.compute().unwrap(), Completion::Finished);
        sched.graph().unwrap().get_f32(y).unwrap()
    };

    // Unpinned: h expands onto the SIM; get_tensor_backend reports the plan.
    assert_eq!(sched.get_tensor_backend(h), None, "nothing planned yet");
    sched.split_graph(&g).unwrap();
    assert_eq!(sched.get_tensor_backend(h), Some(0));
    assert_eq!(describe(&sched).len(), 1);

    // Pinned to the CPU: h runs there, in a split of its own, and y reads a copy of it.
    sched.set_tensor_backend(h, 1).unwrap();
    assert_eq!(sched.get_tensor_backend(h), Some(1));
    let plan = sched.split_graph(&g).unwrap();
    assert_eq!(assignment(plan, h), (1, Cause::User));
    assert_eq!(describe(&sched), [split("CPU", &["h"], &[]), split("SIM0", &["y"], &[("h", "CPU", "SIM0")])]);
    assert_eq!(bits(&run(&mut sched)), bits(&reference.get_f32(y).unwrap()));
    assert_eq!(memory_of(&sched, h), "CPU");

    // Re-pinned to the SIM: one split again, x copied.
    sched.set_tensor_backend(h, 0).unwrap();
    assert_eq!(sched.get_tensor_backend(h), Some(0));
    let plan = sched.split_graph(&g).unwrap();
    assert_eq!(assignment(plan, h), (0, Cause::User));
    assert_eq!(describe(&sched), [split("SIM0", &["h", "y"], &[("x", "CPU", "SIM0")])]);
    assert_eq!(bits(&run(&mut sched)), bits(&reference.get_f32(y).unwrap()));
    assert_eq!(memory_of(&sched, h), "SIM0");

    // A pin to a backend that does not exist is an error naming the count.
    let err = sched.set_tensor_backend(h, 2).unwrap_err();
    assert!(matches!(err, Error::InvalidParam { .. }), "{err:?}");
    assert!(err.to_string().contains("backend 2 does not exist (2 backends)"), "{err}");
    assert_eq!(sched.get_tensor_backend(h), Some(0), "a failed pin changes nothing");

    // Pinning y, whose weights live on the SIM, to the CPU copies the weights over.
    sched.clear_pins();
    sched.set_tensor_backend(y, 1).unwrap();
    let plan = sched.split_graph(&g).unwrap();
    assert_eq!(assignment(plan, y), (1, Cause::User));
    let d = describe(&sched);
    assert_eq!(d.last().unwrap().backend, "CPU");
    assert!(d.last().unwrap().inputs.contains(&("w".to_string(), "SIM0".to_string(), "CPU".to_string())), "{d:?}");
    assert_eq!(bits(&run(&mut sched)), bits(&reference.get_f32(y).unwrap()));
}

#[test]
fn op_offload_moves_large_batch_matmuls_with_host_weights_to_the_sim_in_a_split_of_their_own() {
    let mut config = SimConfig::new("SIM0");
    config.offload_min_batch = Some(4);
    let sim = SimDevice::create(config);
    let (base, x, w, _h, y) = relu_then_matmul();
    let mut g = base.clone();
    bind_weights(&mut g, &[w], &HOST_BUFFER_TYPE);

    let mut plain = sched_over(sim, 1);
    let plan = plain.split_graph(&g).unwrap();
    assert_eq!(assignment(plan, y), (1, Cause::Weights));

    let backends: Vec<Box<dyn Backend>> = vec![sim.init_backend().unwrap(), cpu()];
    let mut sched: Scheduler = Scheduler::new(backends, SchedulerOptions { n_copies: 1, op_offload: true }).unwrap();
    let plan = sched.split_graph(&g).unwrap();
    assert_eq!(assignment(plan, y), (0, Cause::Offload), "{}", plan.detailed());
    // The host weights become a split input; a split that already has inputs is cut before a
    // node bringing weights from elsewhere, so their copy's memory can be reused later.
    assert_eq!(
        describe(&sched),
        [split("SIM0", &["h"], &[("x", "CPU", "SIM0")]), split("SIM0", &["y"], &[("w", "CPU", "SIM0")])]
    );
    sched.alloc_graph(&g).unwrap();
    let xv = values(32, 8.0);
    sched.graph().unwrap().set_f32(x, &xv).unwrap();
    sched.compute().unwrap();
    let reference = cpu_reference(&base, &[w], &[(x, xv)]);
    assert_eq!(bits(&sched.graph().unwrap().get_f32(y).unwrap()), bits(&reference.get_f32(y).unwrap()));
}

#[test]
fn a_window_of_a_host_tensor_goes_to_the_sim_packed_row_by_row() {
    // y = w·window, w in SIM memory; the window is the first 4 of 16 values of each row of a
    // host tensor (a cache read up to its filled positions).
    let sim = sim_no_softmax();
    let mut base = Graph::new();
    let cache = named(&mut base, &[16, 8], "cache");
    let w = named(&mut base, &[4, 3], "w");
    let window = base.view(cache, [4, 8, 1, 1], [16 * 4, 16 * 4 * 8, 16 * 4 * 8], 0).unwrap();
    let window = name(&mut base, window, "window");
    let y = base.mul_mat(w, window).unwrap();
    let y = name(&mut base, y, "y");
    base.set_output(y).unwrap();
    base.build_forward(y).unwrap();
    let mut g = base.clone();
    let _host = alloc_tensors(&mut g, &[cache], &HOST_BUFFER_TYPE).unwrap();
    let _weights = bind_weights(&mut g, &[w], sim.buffer_type());
    let cache_values = values(16 * 8, 3.0);
    g.set_f32(cache, &cache_values).unwrap();

    let mut sched = sched_over(sim, 1);
    sched.alloc_graph(&g).unwrap();
    let plan = sched.plan().unwrap();
    let input: &SplitInput = plan.splits.iter().flat_map(|s| &s.inputs).find(|i| i.name == "window").unwrap();
    assert!(input.packed, "{plan}");
    assert_eq!(input.bytes, 4 * 8 * 4, "only the window's values travel: {plan}");
    assert!(plan.to_string().contains("'window': CPU -> SIM0, 128 B in packed rows"), "{plan}");
    sched.compute().unwrap();
    let reference = cpu_reference(&base, &[w], &[(cache, cache_values)]);
    assert_eq!(bits(&sched.graph().unwrap().get_f32(y).unwrap()), bits(&reference.get_f32(y).unwrap()));
}

// ---------------------------------------------------------------------------------------------
// A transformer block: the graph for results, pipelining and the eval callback

const D: usize = 16;
const F: usize = 32;
const T: usize = 4;

struct Block {
    /// No tensor bound.
    base: Graph,
    x: TensorId,
    weights: Vec<TensorId>,
    out: TensorId,
}

fn block() -> Block {
    let mut g = Graph::new();
    let x = input(&mut g, &[D, T], "x");
    let weights: Vec<TensorId> =
        [("wq", [D, D]), ("wk", [D, D]), ("wv", [D, D]), ("wo", [D, D]), ("w1", [D, F]), ("w2", [F, D])]
            .iter()
            .map(|(n, ne)| named(&mut g, ne, n))
            .collect();
    let [wq, wk, wv, wo, w1, w2] = weights[..] else { unreachable!() };
    let op = |g: &mut Graph, id: tessera::Result<TensorId>, n: &str| name(g, id.unwrap(), n);
    let h = g.norm(x, 1e-5);
    let h = op(&mut g, h, "h");
    let q = g.mul_mat(wq, h);
    let q = op(&mut g, q, "q");
    let k = g.mul_mat(wk, h);
    let k = op(&mut g, k, "k");
    let v = g.mul_mat(wv, h);
    let v = op(&mut g, v, "v");
    let scores = g.mul_mat(k, q);
    let scores = op(&mut g, scores, "scores");
    let probs = g.soft_max(scores, None, 0.25);
    let probs = op(&mut g, probs, "probs");
    let vt = g.transpose(v);
    let vt = op(&mut g, vt, "vt");
    let vtc = g.cont(vt);
    let vtc = op(&mut g, vtc, "vtc");
    let ctx = g.mul_mat(vtc, probs);
    let ctx = op(&mut g, ctx, "ctx");
    let attn = g.mul_mat(wo, ctx);
    let attn = op(&mut g, attn, "attn");
    let x1 = g.add(x, attn);
    let x1 = op(&mut g, x1, "x1");
    let h1 = g.norm(x1, 1e-5);
    let h1 = op(&mut g, h1, "h1");
    let up = g.mul_mat(w1, h1);
    let up = op(&mut g, up, "up");
    let act = g.gelu(up);
    let act = op(&mut g, act, "act");
    let down = g.mul_mat(w2, act);
    let down = op(&mut g, down, "down");
    let out = g.add(x1, down);
    let out = op(&mut g, out, "out");
    g.set_output(out).unwrap();
    g.build_forward(out).unwrap();
    Block { base: g, x, weights, out }
}

/// The block with its weights in the SIM's memory.
fn block_on(sim: &'static SimDevice) -> (Block, Graph, Vec<Arc<dyn Buffer>>) {
    let b = block();
    let mut g = b.base.clone();
    let buffers = bind_weights(&mut g, &b.weights, sim.buffer_type());
    (b, g, buffers)
}

fn run_block(sched: &mut Scheduler, g: &Graph, b: &Block, x: &[f32]) -> Vec<f32> {
    sched.alloc_graph(g).unwrap();
    sched.graph().unwrap().set_f32(b.x, x).unwrap();
    assert_eq!(sched.compute().unwrap(), Completion::Finished);
    sched.graph().unwrap().get_f32(b.out).unwrap()
}

#[test]
fn scheduled_results_equal_a_cpu_run_bitwise() {
    let sim = sim_no_softmax();
    let (b, g, _buffers) = block_on(sim);
    let mut sched = sched_over(sim, 1);
    let xv = values(D * T, 9.0);
    let got = run_block(&mut sched, &g, &b, &xv);
    let plan = sched.plan().unwrap();
    assert!(plan.splits.len() >= 3, "the block crosses devices: {plan}");
    assert!(plan.splits.iter().any(|s| s.backend == 0) && plan.splits.iter().any(|s| s.backend == 1), "{plan}");
    let reference = cpu_reference(&b.base, &b.weights, &[(b.x, xv)]);
    assert_eq!(bits(&got), bits(&reference.get_f32(b.out).unwrap()));
    // The scheduled graph's allocation breaks no invariant.
    let sg = sched.graph().unwrap();
    assert_eq!(tessera::allocator::check::check_allocation(sg).unwrap(), Ok(()));
}

/// Every tensor of the user's graph as text (fields, sources, flags, binding) plus the node
/// and leaf order, and the identity of the memory each binding points at.
fn snapshot(g: &Graph) -> String {
    let mut s = format!("nodes {:?}\nleafs {:?}\n", g.nodes(), g.leafs());
    for (i, t) in g.tensors().iter().enumerate() {
        let memory = t.data().map(|d| (Arc::as_ptr(&d.buffer) as *const () as usize, d.offset));
        s += &format!("{i}: {t:?} srcs {:?} flags {:?} memory {memory:?}\n", t.srcs().collect::<Vec<_>>(), t.flags());
    }
    s
}

#[test]
fn the_users_graph_is_never_mutated_and_runs_again_and_again() {
    let sim = sim_no_softmax();
    let (b, g, _buffers) = block_on(sim);
    let before = snapshot(&g);
    let weight_values: Vec<Vec<f32>> = b.weights.iter().map(|&w| g.get_f32(w).unwrap()).collect();
    let mut sched = sched_over(sim, 1);
    let xv = values(D * T, 11.0);
    let reference = bits(&cpu_reference(&b.base, &b.weights, &[(b.x, xv.clone())]).get_f32(b.out).unwrap());

    let mut plans = Vec::new();
    for round in 0..4 {
        sched.split_graph(&g).unwrap();
        assert_eq!(snapshot(&g), before, "split_graph changed the graph (round {round})");
        if round == 2 {
            sched.reserve(&g).unwrap();
            assert_eq!(snapshot(&g), before, "reserve changed the graph");
        }
        if round == 3 {
            // A pin, then back to the original plan: the graph is re-planned each time.
            sched.set_tensor_backend(b.out, 1).unwrap();
            sched.split_graph(&g).unwrap();
            sched.clear_pins();
        }
        let out = run_block(&mut sched, &g, &b, &xv);
        assert_eq!(snapshot(&g), before, "alloc_graph/compute changed the graph (round {round})");
        assert_eq!(bits(&out), reference, "round {round}");
        plans.push(format!("{}", sched.plan().unwrap().detailed()));
        // The input the user set went to the scheduled graph, not to theirs.
        assert!(g.data(b.x).is_none());
    }
    assert!(plans.windows(2).all(|p| p[0] == p[1]), "the same graph, the same plan: {plans:#?}");
    for (w, v) in b.weights.iter().zip(&weight_values) {
        assert_eq!(bits(&g.get_f32(*w).unwrap()), bits(v), "weight '{}' changed", g.label(*w));
    }
    // The graph also still runs on the CPU alone, unchanged.
    let mut plain = g.clone();
    for &w in &b.weights {
        plain.unbind(w).unwrap();
    }
    let again = cpu_reference(&plain, &b.weights, &[(b.x, xv)]);
    assert_eq!(bits(&again.get_f32(b.out).unwrap()), reference);
}

// ---------------------------------------------------------------------------------------------
// Pipeline parallelism

#[test]
fn four_pipelined_copies_give_the_results_of_one() {
    let sim = sim_no_softmax();
    let (b, g, _buffers) = block_on(sim);
    let mut piped = sched_over(sim, 4);
    let mut single = sched_over(sim, 1);
    let reference = cpu_reference(&b.base, &b.weights, &[(b.x, values(D * T, 0.0))]);
    let mut cpu = CpuBackend::reference();

    for run in 0..6 {
        let xv = values(D * T, 20.0 + 3.7 * run as f32);
        let plan = piped.alloc_graph(&g).unwrap().clone();
        assert_eq!(plan.n_copies, 4);
        let sg = piped.graph().unwrap();
        sg.set_f32(b.x, &xv).unwrap();

        // The user input is marked as such, every copy has memory of its own on the split's
        // backend, and this run reads copy `run % 4`.
        let x_inputs: Vec<(usize, &SplitInput)> = plan
            .splits
            .iter()
            .flat_map(|s| s.inputs.iter().map(move |i| (s.backend, i)))
            .filter(|(_, i)| i.tensor == b.x)
            .collect();
        assert!(!x_inputs.is_empty(), "{plan}");
        for (backend, i) in plan.splits.iter().flat_map(|s| s.inputs.iter().map(move |i| (s.backend, i))) {
            assert_eq!(i.user_input, i.tensor == b.x, "'{}'", i.name);
            assert_eq!(i.copies.len(), 4);
            let mut places = Vec::new();
            for &c in &i.copies {
                let t = sg.tensor(c).unwrap();
                assert!(t.flags().contains(TensorFlags::INPUT) && t.flags().contains(TensorFlags::OUTPUT));
                assert!(sg.leafs().contains(&c), "pipelined copies are allocated up front");
                let d = sg.data(c).unwrap_or_else(|| panic!("copy '{}' has no memory", sg.label(c)));
                assert_eq!(d.buffer.buffer_type().name(), plan.backends[backend]);
                places.push((Arc::as_ptr(&d.buffer) as *const () as usize, d.offset));
            }
            places.sort_unstable();
            places.dedup();
            assert_eq!(places.len(), 4, "the copies of '{}' share memory", i.name);
            let readers: Vec<usize> = (0..4)
                .filter(|&c| sg.nodes().iter().any(|&n| sg.tensor(n).unwrap().srcs().any(|(_, s)| s == i.copies[c])))
                .collect();
            assert_eq!(readers, [run % 4], "run {run} reads the wrong copy of '{}'", i.name);
        }

        assert_eq!(piped.compute_async().unwrap(), Completion::Finished);
        piped.synchronize().unwrap();
        let got = piped.graph().unwrap().get_f32(b.out).unwrap();
        let want = run_block(&mut single, &g, &b, &xv);
        assert_eq!(bits(&got), bits(&want), "run {run}");
        reference.set_f32(b.x, &xv).unwrap();
        cpu.compute_graph(&reference).unwrap();
        assert_eq!(bits(&got), bits(&reference.get_f32(b.out).unwrap()), "run {run}");
    }
    // Four copies of every input take more memory than one.
    assert!(piped.buffer_size(0) > single.buffer_size(0));
    assert!(piped.buffer_size(1) > single.buffer_size(1));
    assert!(format!("{}", piped.plan().unwrap()).contains("user input 'x'"));
}

// ---------------------------------------------------------------------------------------------
// The eval callback

type Seen = Arc<Mutex<Vec<(TensorId, bool, Option<Vec<f32>>)>>>;

#[test]
fn the_eval_callback_sees_every_node_in_order_with_its_final_values() {
    let sim = sim_no_softmax();
    let (b, g, _buffers) = block_on(sim);
    let mut sched = sched_over(sim, 1);
    let seen: Seen = Arc::default();
    let log = seen.clone();
    sched.set_eval_callback(Some(Box::new(move |graph: &Graph, id: TensorId, ask: bool| {
        let t = graph.tensor(id).unwrap();
        let value = (!ask && t.is_contiguous()).then(|| graph.get_f32(id).unwrap());
        log.lock().unwrap().push((id, ask, value));
        true
    })));
    let xv = values(D * T, 13.0);
    let out = run_block(&mut sched, &g, &b, &xv);
    let reference = cpu_reference(&b.base, &b.weights, &[(b.x, xv)]);
    assert_eq!(bits(&out), bits(&reference.get_f32(b.out).unwrap()));

    let seen = seen.lock().unwrap();
    // Asked first, then shown the result.
    assert_eq!(seen.len() % 2, 0);
    for pair in seen.chunks(2) {
        assert!(pair[0].1 && !pair[1].1 && pair[0].0 == pair[1].0, "ask=true then ask=false for one node");
    }
    // Every non-view node of every split, in split order (which is the user's node order).
    let sg = sched.graph().unwrap();
    let plan = sched.plan().unwrap();
    let is_kernel = |id: TensorId| {
        let op = g.tensor(id).unwrap().op();
        op != Op::None && !op.is_view()
    };
    let expected: Vec<TensorId> = plan
        .splits
        .iter()
        .flat_map(|s| sg.nodes()[s.nodes.clone()].iter().copied())
        .filter(|&id| sg.tensor(id).unwrap().op() != Op::None && !sg.tensor(id).unwrap().op().is_view())
        .collect();
    let observed: Vec<TensorId> = seen.iter().filter(|s| !s.1 && is_kernel(s.0)).map(|s| s.0).collect();
    assert_eq!(observed, expected);
    let users: Vec<TensorId> = g.nodes().iter().copied().filter(|&id| is_kernel(id)).collect();
    assert_eq!(observed, users, "the user's node order");
    // What the callback saw is what each node computes.
    for (id, _, value) in seen.iter().filter(|s| !s.1 && is_kernel(s.0)) {
        let value = value.as_ref().unwrap();
        assert_eq!(bits(value), bits(&reference.get_f32(*id).unwrap()), "'{}'", g.label(*id));
    }
    let last = seen.iter().rev().find(|s| !s.1).unwrap();
    assert_eq!(last.0, b.out);
    assert_eq!(bits(last.2.as_ref().unwrap()), bits(&out));
}

#[test]
fn an_eval_callback_that_says_stop_stops_the_whole_compute() {
    let sim = sim_no_softmax();
    // x -> y = w·x (SIM) -> z = relu(y) (SIM) -> out = soft_max(z) (CPU).
    let mut g = Graph::new();
    let x = input(&mut g, &[8, 4], "x");
    let w = named(&mut g, &[8, 8], "w");
    let y = g.mul_mat(w, x).unwrap();
    let y = name(&mut g, y, "y");
    let z = g.relu(y).unwrap();
    let z = name(&mut g, z, "z");
    let out = g.soft_max(z, None, 1.0).unwrap();
    let out = name(&mut g, out, "out");
    g.set_output(out).unwrap();
    g.build_forward(out).unwrap();
    let base = g.clone();
    bind_weights(&mut g, &[w], sim.buffer_type());

    let mut sched = sched_over(sim, 1);
    let seen: Seen = Arc::default();
    let log = seen.clone();
    sched.set_eval_callback(Some(Box::new(move |_: &Graph, id: TensorId, ask: bool| {
        log.lock().unwrap().push((id, ask, None));
        // Stop once y, in the first split, is computed.
        ask || id != y
    })));
    sched.alloc_graph(&g).unwrap();
    assert_eq!(
        describe(&sched),
        [split("SIM0", &["y", "z"], &[("x", "CPU", "SIM0")]), split("CPU", &["out"], &[("z", "SIM0", "CPU")])]
    );
    let xv = values(32, 14.0);
    let sentinel = vec![1234.5f32; 32];
    sched.graph().unwrap().set_f32(x, &xv).unwrap();
    sched.graph().unwrap().set_f32(out, &sentinel).unwrap();
    assert_eq!(sched.compute().unwrap(), Completion::Stopped);
    let calls: Vec<(TensorId, bool)> = seen.lock().unwrap().iter().map(|s| (s.0, s.1)).collect();
    assert_eq!(calls, [(y, true), (y, false)], "no node after the stop is asked about");
    assert_eq!(
        bits(&sched.graph().unwrap().get_f32(out).unwrap()),
        bits(&sentinel),
        "the CPU split ran after the stop"
    );

    // Without the callback the same allocation runs to the end.
    sched.set_eval_callback(None);
    sched.graph().unwrap().set_f32(x, &xv).unwrap();
    assert_eq!(sched.compute().unwrap(), Completion::Finished);
    let reference = cpu_reference(&base, &[w], &[(x, xv)]);
    assert_eq!(bits(&sched.graph().unwrap().get_f32(out).unwrap()), bits(&reference.get_f32(out).unwrap()));
}

// ---------------------------------------------------------------------------------------------
// Bad input: typed errors

#[test]
fn a_tensor_in_memory_no_backend_able_to_run_its_op_can_use_is_no_backend() {
    // A SOFT_MAX result placed in SIM memory: the SIM cannot run it, the CPU cannot reach it.
    let sim = sim_no_softmax();
    let mut g = Graph::new();
    let x = input(&mut g, &[8, 4], "x");
    let p = g.soft_max(x, None, 1.0).unwrap();
    let p = name(&mut g, p, "probs");
    g.build_forward(p).unwrap();
    bind_weights(&mut g, &[p], sim.buffer_type());
    let mut sched = sched_over(sim, 1);
    let err = sched.split_graph(&g).unwrap_err();
    assert!(matches!(&err, Error::NoBackend { op: "SOFT_MAX", .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("'probs'") && msg.contains("'SIM0'") && msg.contains("backends: SIM0, CPU"), "{msg}");
    assert!(matches!(sched.alloc_graph(&g), Err(Error::NoBackend { .. })));

    // A cache write (a view of a tensor in SIM memory) by an op the SIM lacks.
    let sim = sim_device(&["CPY"]);
    let mut g = Graph::new();
    let x = input(&mut g, &[8, 4], "x");
    let cache = named(&mut g, &[8, 4], "cache");
    let write = g.cpy(x, cache).unwrap();
    let write = name(&mut g, write, "cache_write");
    g.build_forward(write).unwrap();
    bind_weights(&mut g, &[cache], sim.buffer_type());
    let err = sched_over(sim, 1).split_graph(&g).unwrap_err();
    assert!(matches!(&err, Error::NoBackend { op: "CPY", .. }), "{err:?}");
    assert!(err.to_string().contains("'cache_write'"), "{err}");

    // A weight in the memory of a device the scheduler does not have.
    let other = SimDevice::create(SimConfig::new("SIM9"));
    let sim = sim_no_softmax();
    let c = chain();
    let mut g = c.graph.clone();
    bind_weights(&mut g, &[c.w], other.buffer_type());
    let err = sched_over(sim, 1).split_graph(&g).unwrap_err();
    assert!(matches!(&err, Error::NoBackend { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("'w'") && msg.contains("'SIM9'") && msg.contains("SIM0, CPU"), "{msg}");

    // Not an error: an op the SIM lacks reading SIM weights runs on the CPU with a copy.
    let sim = sim_no_softmax();
    let mut g = Graph::new();
    let wt = named(&mut g, &[8, 4], "wt");
    let p = g.soft_max(wt, None, 1.0).unwrap();
    let p = name(&mut g, p, "p");
    g.build_forward(p).unwrap();
    bind_weights(&mut g, &[wt], sim.buffer_type());
    let mut sched = sched_over(sim, 1);
    sched.split_graph(&g).unwrap();
    assert_eq!(describe(&sched), [split("CPU", &["p"], &[("wt", "SIM0", "CPU")])]);
}

#[test]
fn scheduler_construction_errors_name_the_limit_or_the_backend() {
    let sim = sim_no_softmax();
    let three: Vec<Box<dyn Backend>> = vec![sim.init_backend().unwrap(), cpu(), cpu()];
    let err = Scheduler::<2, 4, 64>::new(three, SchedulerOptions::default()).err().unwrap();
    assert_eq!(err, Error::CapacityExceeded { what: "backends per scheduler", limit: 2 });
    assert!(err.to_string().contains("at most 2 backends per scheduler"), "{err}");

    let err = Scheduler::<16, 4, 64>::new(vec![cpu(), sim.init_backend().unwrap()], SchedulerOptions::default())
        .err()
        .unwrap();
    assert!(matches!(err, Error::InvalidParam { .. }), "{err:?}");
    assert!(err.to_string().contains("the last backend must be a CPU, got SIM0"), "{err}");

    let err = Scheduler::<16, 4, 64>::new(Vec::new(), SchedulerOptions::default()).err().unwrap();
    assert!(matches!(err, Error::InvalidParam { .. }) && err.to_string().contains("a CPU"), "{err}");

    for n_copies in [0, 5] {
        let backends: Vec<Box<dyn Backend>> = vec![sim.init_backend().unwrap(), cpu()];
        let err =
            Scheduler::<16, 4, 64>::new(backends, SchedulerOptions { n_copies, op_offload: false }).err().unwrap();
        assert_eq!(err, Error::CapacityExceeded { what: "copies per input", limit: 4 }, "n_copies {n_copies}");
    }
    let backends: Vec<Box<dyn Backend>> = vec![sim.init_backend().unwrap(), cpu()];
    let err = Scheduler::<16, 8, 64>::new(backends, SchedulerOptions { n_copies: 9, op_offload: false }).err().unwrap();
    assert_eq!(err, Error::CapacityExceeded { what: "copies per input", limit: 8 });

    // Fewer split inputs than one node's sources cannot work.
    let err = Scheduler::<16, 4, 4>::new(vec![cpu()], SchedulerOptions::default()).err().unwrap();
    assert!(matches!(err, Error::CapacityExceeded { limit: 4, .. }), "{err:?}");
}

#[test]
fn a_graph_larger_than_reserved_is_out_of_memory_not_a_panic() {
    let sim = sim_no_softmax();
    let shaped = |t: usize| {
        let mut g = Graph::new();
        let x = input(&mut g, &[8, t], "x");
        let w = named(&mut g, &[8, 8], "w");
        let y = g.mul_mat(w, x).unwrap();
        let y = name(&mut g, y, "y");
        let p = g.soft_max(y, None, 1.0).unwrap();
        let p = name(&mut g, p, "p");
        g.set_output(p).unwrap();
        g.build_forward(p).unwrap();
        let base = g.clone();
        bind_weights(&mut g, &[w], sim.buffer_type());
        (base, g, x, w, p)
    };
    let (small_base, small, x, w, p) = shaped(4);
    let (_, large, ..) = shaped(64);
    let mut sched = sched_over(sim, 1);
    sched.reserve(&small).unwrap();
    let reserved = (sched.buffer_size(0), sched.buffer_size(1));
    assert!(reserved.0 > 0 && reserved.1 > 0);

    let err = sched.alloc_graph(&large).unwrap_err();
    assert!(matches!(err, Error::OutOfMemory { .. }), "{err:?}");
    assert!(err.to_string().contains("compute buffer"), "{err}");
    assert_eq!((sched.buffer_size(0), sched.buffer_size(1)), reserved, "reserved buffers never grow");
    // What failed to allocate cannot be run: an error too.
    assert!(sched.compute().is_err());

    // The reserved size still serves the graph it was reserved for.
    sched.alloc_graph(&small).unwrap();
    let xv = values(32, 15.0);
    sched.graph().unwrap().set_f32(x, &xv).unwrap();
    assert_eq!(sched.compute().unwrap(), Completion::Finished);
    let reference = cpu_reference(&small_base, &[w], &[(x, xv)]);
    assert_eq!(bits(&sched.graph().unwrap().get_f32(p).unwrap()), bits(&reference.get_f32(p).unwrap()));
}

#[test]
fn compute_before_alloc_graph_is_an_error() {
    let sim = sim_no_softmax();
    let c = chain();
    let mut g = c.graph.clone();
    bind_weights(&mut g, &[c.w], sim.buffer_type());
    let mut sched = sched_over(sim, 1);
    let err = sched.compute().unwrap_err();
    assert!(matches!(err, Error::InvalidParam { .. }), "{err:?}");
    assert!(err.to_string().contains("no graph has been planned and allocated yet"), "{err}");
    assert!(sched.compute_async().is_err());
    assert!(sched.plan().is_none() && sched.graph().is_none());

    // Planned but not allocated: the missing memory is named.
    sched.split_graph(&g).unwrap();
    let err = sched.compute().unwrap_err();
    assert_eq!(err, Error::NotAllocated { tensor: "x".into() });
}

/// A split needing more inputs than `MAX_SPLIT_INPUTS` should be cut in two (the scheduler's
/// documentation), also when one node brings several new inputs at once.
#[test]
fn a_node_bringing_several_inputs_to_an_almost_full_split_starts_a_new_split() {
    let sim = sim_no_softmax();
    let mut g = Graph::new();
    let xs: Vec<TensorId> = (0..11).map(|i| input(&mut g, &[8, 4], &format!("x{i}"))).collect();
    let w = named(&mut g, &[8, 8], "w");
    let mut y = g.mul_mat(w, xs[0]).unwrap();
    for &x in &xs[1..9] {
        y = g.add(y, x).unwrap();
    }
    // The SIM split now has 9 inputs (x0..x8); z brings two more.
    let z = g.add(xs[9], xs[10]).unwrap();
    let out = g.add(y, z).unwrap();
    g.set_output(out).unwrap();
    g.build_forward(out).unwrap();
    let base = g.clone();
    bind_weights(&mut g, &[w], sim.buffer_type());

    let backends: Vec<Box<dyn Backend>> = vec![sim.init_backend().unwrap(), cpu()];
    let mut sched = Scheduler::<16, 4, 10>::new(backends, SchedulerOptions::default()).unwrap();
    let plan = sched.alloc_graph(&g).unwrap();
    assert!(plan.splits.iter().all(|s| s.inputs.len() <= 10), "{plan}");
    let inputs: Vec<(String, String, String)> = describe(&sched).into_iter().flat_map(|s| s.inputs).collect();
    assert_eq!(inputs.len(), 11);
    let vals: Vec<(TensorId, Vec<f32>)> = xs.iter().enumerate().map(|(i, &x)| (x, values(32, i as f32))).collect();
    for (x, v) in &vals {
        sched.graph().unwrap().set_f32(*x, v).unwrap();
    }
    sched.compute().unwrap();
    let reference = cpu_reference(&base, &[w], &vals);
    assert_eq!(bits(&sched.graph().unwrap().get_f32(out).unwrap()), bits(&reference.get_f32(out).unwrap()));
}

// ---------------------------------------------------------------------------------------------
// The plan prints

#[test]
fn the_plan_prints_splits_inputs_buffers_and_node_causes() {
    let sim = sim_no_softmax();
    let c = chain();
    let mut g = c.graph.clone();
    bind_weights(&mut g, &[c.w], sim.buffer_type());
    let mut sched = sched_over(sim, 1);
    let plan = sched.alloc_graph(&g).unwrap().clone();
    let (sim_bytes, cpu_bytes) = (sched.buffer_size(0), sched.buffer_size(1));
    assert!(sim_bytes > 0 && cpu_bytes > 0);
    assert_eq!(plan.buffer_sizes, [sim_bytes, cpu_bytes]);

    let text = plan.to_string();
    for line in [
        "split plan: 3 split(s) over SIM0, CPU (1 copy per input)",
        "split 0: SIM0, nodes 0..3, 1 input(s)",
        "'x': CPU -> SIM0, 128 B",
        "split 1: CPU, nodes 3..6, 1 input(s)",
        "'y': SIM0 -> CPU, 128 B",
        "split 2: SIM0, nodes 6..9, 1 input(s)",
        "'p': CPU -> SIM0, 128 B",
        &format!("compute buffers: SIM0 {sim_bytes} B; CPU {cpu_bytes} B;"),
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
    assert!(!text.contains("node #"), "nodes are only listed in the detailed plan:\n{text}");

    let detailed = plan.detailed().to_string();
    assert!(detailed.starts_with(&text), "the detailed plan extends the plan:\n{detailed}");
    for (id, name, op, backend, tag) in [
        (c.y, "y", "MUL_MAT", "SIM0", "1.wgt"),
        (c.p, "p", "SOFT_MAX", "CPU", "3.best"),
        (c.o, "o", "SCALE", "SIM0", "2.gpu"),
    ] {
        let line = format!("node #{} {name} ({op}): {backend} [{tag}]", id.0);
        assert!(detailed.contains(&line), "missing {line:?} in:\n{detailed}");
    }
    // Unnamed nodes are listed by their label.
    let mut g = Graph::new();
    let x = input(&mut g, &[4], "x");
    let r = g.relu(x).unwrap();
    g.build_forward(r).unwrap();
    let mut sched: Scheduler = Scheduler::new(vec![cpu()], SchedulerOptions::default()).unwrap();
    let detailed = sched.split_graph(&g).unwrap().detailed().to_string();
    assert!(detailed.contains(&format!("node #{} RELU: CPU [3.best]", r.0)), "{detailed}");
    assert_eq!(Cause::Upgrade.tag(), "3.upg");
    assert_eq!(Cause::ViewSource.tag(), "4.vsrc");
    assert_eq!(Cause::Consumer.tag(), "4.cur");
}

/// Pinning an op to a backend that cannot run it is an error when the plan is made, naming
/// the op, the tensor and the backend.
#[test]
fn pinning_an_op_to_a_backend_without_it_fails_at_planning() {
    let sim = sim_no_softmax();
    let mut g = Graph::new();
    let x = input(&mut g, &[8, 4], "x");
    let p = g.soft_max(x, None, 1.0).unwrap();
    let p = name(&mut g, p, "p");
    g.build_forward(p).unwrap();
    let mut sched: Scheduler =
        Scheduler::new(vec![sim.init_backend().unwrap(), cpu()], SchedulerOptions::default()).unwrap();
    sched.set_tensor_backend(p, 0).unwrap();
    let err = sched.alloc_graph(&g).unwrap_err();
    assert_eq!(err.to_string(), "backend SIM0 does not support SOFT_MAX as used by tensor 'p'");
}

/// Found by the `sched` fuzz target: a view op pinned to a backend other than its source's
/// was copied as if it lived there. A view lives where its source does, pinned or not.
#[test]
fn a_pinned_view_still_lives_with_its_source() {
    let sim = sim_no_softmax();
    let mut g = Graph::new();
    let x = input(&mut g, &[8, 4], "x");
    let w = named(&mut g, &[8, 8], "w");
    let y = g.mul_mat(w, x).unwrap(); // [8, 4], on the SIM with its weights
    let yt = g.transpose(y).unwrap();
    let yt = name(&mut g, yt, "yt");
    let z = g.cont(yt).unwrap();
    let z = name(&mut g, z, "z");
    g.set_output(z).unwrap();
    g.build_forward(z).unwrap();
    for buffer in tessera::allocator::alloc_tensors(&mut g, &[w], sim.buffer_type()).unwrap() {
        buffer.set_usage(tessera::BufferUsage::Weights);
    }
    g.set_f32(w, &(0..64).map(|i| i as f32 * 0.01).collect::<Vec<_>>()).unwrap();
    let mut sched: Scheduler =
        Scheduler::new(vec![sim.init_backend().unwrap(), cpu()], SchedulerOptions::default()).unwrap();
    sched.set_tensor_backend(yt, 1).unwrap();
    let plan = sched.alloc_graph(&g).unwrap().clone();
    assert_eq!(assignment(&plan, yt), (0, Cause::ViewSource), "{}", plan.detailed());
    let devices: Vec<&'static dyn tessera::Device> = vec![sim, &tessera::cpu::CPU_DEVICE];
    let violations = tessera::sched::check::check_plan(&plan, sched.graph().unwrap(), &g, &devices).unwrap();
    assert!(violations.is_empty(), "{violations:?}");
}

// ---------------------------------------------------------------------------------------------
// Programs: each split is prepared once and replayed

/// `o = gelu(soft_max(w x))` for `t` columns, with `x` an input: on [SIM (no SOFT_MAX), CPU]
/// the product and the GELU run on the SIM, in two splits, the softmax on the CPU.
fn product_softmax_gelu(t: usize) -> (Graph, TensorId, TensorId, TensorId) {
    let mut g = Graph::new();
    let x = input(&mut g, &[64, t], "x");
    let w = named(&mut g, &[64, 32], "w");
    let y = g.mul_mat(w, x).unwrap();
    let s = g.soft_max(y, None, 0.5).unwrap();
    let o = g.gelu(s).unwrap();
    g.set_output(o).unwrap();
    g.build_forward(o).unwrap();
    (g, x, w, o)
}

/// The graph computed by the CPU's reference kernels from these weights and inputs.
fn reference_output(unbound: &Graph, w: TensorId, wv: &[f32], x: TensorId, xv: &[f32], o: TensorId) -> Vec<u32> {
    let mut g = unbound.clone();
    alloc_graph_tensors(&mut g, &HOST_BUFFER_TYPE).unwrap();
    g.set_f32(w, wv).unwrap();
    g.set_f32(x, xv).unwrap();
    CpuBackend::reference().compute_graph(&g).unwrap();
    bits(&g.get_f32(o).unwrap())
}

fn run_once(sched: &mut Scheduler, g: &Graph, x: TensorId, xv: &[f32], o: TensorId) -> Vec<u32> {
    sched.alloc_graph(g).unwrap();
    sched.graph().unwrap().set_f32(x, xv).unwrap();
    assert_eq!(sched.compute().unwrap(), Completion::Finished);
    bits(&sched.graph().unwrap().get_f32(o).unwrap())
}

#[test]
fn each_split_is_prepared_once_and_updated_only_when_its_tensors_move() {
    let sim = sim_no_softmax();
    let mut sched = sched_over(sim, 1);
    let counts = |p: u64, u: u64| tessera_sim::ProgramCounts { prepared: p, updated: u };

    // The same graph 100 times: each split is prepared by its backend once.
    let (base, x, w, o) = product_softmax_gelu(4);
    let mut g = base.clone();
    let wv = values(64 * 32, 1.0);
    let _weights = bind_weights(&mut g, &[w], sim.buffer_type());
    g.set_f32(w, &wv).unwrap();
    for run in 0..100 {
        let xv = values(64 * 4, run as f32);
        assert_eq!(run_once(&mut sched, &g, x, &xv, o), reference_output(&base, w, &wv, x, &xv, o), "run {run}");
    }
    let plan = sched.plan().unwrap().clone();
    assert_eq!(plan.splits.iter().map(|s| s.backend).collect::<Vec<_>>(), [0, 1, 0], "{plan}");
    assert_eq!(sim.program_counts(), counts(2, 0));
    assert_eq!((sched.program_stats().prepared, sched.program_stats().updated), (3, 0));

    // Another input shape is another plan: prepared anew, once.
    let (base8, x8, w8, o8) = product_softmax_gelu(8);
    let mut g8 = base8.clone();
    let _weights8 = bind_weights(&mut g8, &[w8], sim.buffer_type());
    g8.set_f32(w8, &wv).unwrap();
    for run in 0..3 {
        let xv = values(64 * 8, run as f32);
        assert_eq!(run_once(&mut sched, &g8, x8, &xv, o8), reference_output(&base8, w8, &wv, x8, &xv, o8));
    }
    assert_eq!(sim.program_counts(), counts(4, 0));

    // The weights move to a new buffer with new values: the same plan in another layout, so
    // the recorded programs are updated (a stale recording would read the old weights).
    let mut moved = base8.clone();
    let _moved_weights = bind_weights(&mut moved, &[w8], sim.buffer_type());
    let wv2 = values(64 * 32, 7.0);
    moved.set_f32(w8, &wv2).unwrap();
    let xv = values(64 * 8, 3.0);
    assert_eq!(run_once(&mut sched, &moved, x8, &xv, o8), reference_output(&base8, w8, &wv2, x8, &xv, o8));
    assert_eq!(sim.program_counts(), counts(4, 2));

    // A reservation for a larger graph replaces the compute buffers: updated again, not
    // prepared, and still right.
    let (mut big, ..) = product_softmax_gelu(64);
    let _big_weights = bind_weights(&mut big, &[w], sim.buffer_type());
    sched.reserve(&big).unwrap();
    for _ in 0..3 {
        assert_eq!(run_once(&mut sched, &moved, x8, &xv, o8), reference_output(&base8, w8, &wv2, x8, &xv, o8));
    }
    assert_eq!(sim.program_counts(), counts(4, 4));
}

// ---------------------------------------------------------------------------------------------
// Staging through pinned host memory

/// A simulated device with pinned host memory that cannot run `unsupported` ops.
fn pinned_sim(name: &str, unsupported: &[&'static str]) -> &'static SimDevice {
    let mut config = SimConfig::new(name);
    config.pinned_host = true;
    config.unsupported_ops.extend_from_slice(unsupported);
    SimDevice::create(config)
}

#[test]
fn copies_between_devices_stage_through_one_reused_pinned_buffer() {
    let (a, b) = (pinned_sim("SIMA", &[]), pinned_sim("SIMB", &[]));
    let mut base = Graph::new();
    let x = input(&mut base, &[64, 4], "x");
    let wa = named(&mut base, &[64, 64], "wa");
    let wb = named(&mut base, &[64, 16], "wb");
    let y = base.mul_mat(wa, x).unwrap();
    let z = base.mul_mat(wb, y).unwrap();
    base.set_output(z).unwrap();
    base.build_forward(z).unwrap();
    let mut g = base.clone();
    let _wa = bind_weights(&mut g, &[wa], a.buffer_type());
    let _wb = bind_weights(&mut g, &[wb], b.buffer_type());
    fill_weights(&g, &[wa, wb]);
    let backends: Vec<Box<dyn Backend>> = vec![a.init_backend().unwrap(), b.init_backend().unwrap(), cpu()];
    let mut sched: Scheduler = Scheduler::new(backends, SchedulerOptions::default()).unwrap();
    for run in 0..10 {
        let xv = values(64 * 4, run as f32);
        let reference = cpu_reference(&base, &[wa, wb], &[(x, xv.clone())]);
        let got = run_once(&mut sched, &g, x, &xv, z);
        assert_eq!(got, bits(&reference.get_f32(z).unwrap()), "run {run}");
    }
    let plan = sched.plan().unwrap();
    assert!(plan.splits.iter().any(|s| s.backend == 1 && s.inputs.iter().any(|i| i.from == 0)), "{plan}");
    // SIMA's results reach SIMB through SIMB's pinned memory: one buffer, reused every run.
    assert_eq!(b.pinned_host_type().allocations(), 1);
    assert_eq!(a.pinned_host_type().allocations(), 0);
}

#[test]
fn the_cpu_side_can_compute_in_a_gpus_pinned_memory() {
    let sim = pinned_sim("SIMP", &["SOFT_MAX"]);
    let (b, g, _buffers) = block_on(sim);
    let backends: Vec<Box<dyn Backend>> = vec![sim.init_backend().unwrap(), cpu()];
    let pinned: &'static dyn BufferType = sim.pinned_host_type();
    let mut sched: Scheduler =
        Scheduler::with_buffer_types(backends, &[None, Some(pinned)], SchedulerOptions::default()).unwrap();
    let xv = values(D * T, 4.0);
    let got = run_block(&mut sched, &g, &b, &xv);
    let reference = cpu_reference(&b.base, &b.weights, &[(b.x, xv)]);
    assert_eq!(bits(&got), bits(&reference.get_f32(b.out).unwrap()));
    assert!(sched.buffer_size(1) > 0 && sim.pinned_host_type().allocations() >= 1);
    let cpu_tensor = sched.plan().unwrap().assignments.iter().find(|n| n.backend == 1).unwrap().tensor;
    let data = sched.graph().unwrap().data(cpu_tensor).unwrap();
    assert_eq!(data.buffer.buffer_type().name(), "SIMP_Host");

    // Memory the CPU cannot compute in is refused up front.
    let backends: Vec<Box<dyn Backend>> = vec![sim.init_backend().unwrap(), cpu()];
    let err = Scheduler::<16, 4, 64>::with_buffer_types(
        backends,
        &[None, Some(sim.buffer_type())],
        SchedulerOptions::default(),
    )
    .err()
    .unwrap();
    assert!(err.to_string().contains("CPU cannot compute in buffers of type SIMP"), "{err}");
}

#[test]
fn plans_say_how_each_copy_between_devices_travels() {
    use tessera::sched::CopyRoute;
    // x -> relu on A -> scale on B -> neg on the CPU, then on A:1 (a second stream of A).
    let mut g = Graph::new();
    let x = input(&mut g, &[8, 4], "x");
    let h = g.relu(x).unwrap();
    let h = name(&mut g, h, "h");
    let z = g.scale(h, 2.0).unwrap();
    let z = name(&mut g, z, "z");
    let y = g.neg(z).unwrap();
    let y = name(&mut g, y, "y");
    let w = g.scale(y, 0.5).unwrap();
    let w = name(&mut g, w, "w");
    g.set_output(w).unwrap();
    g.build_forward(w).unwrap();
    let a = SimDevice::create(SimConfig::new("SIM_A"));
    let b = SimDevice::create(SimConfig::new("SIM_B"));
    let backends: Vec<Box<dyn Backend>> =
        vec![a.init_backend().unwrap(), b.init_backend().unwrap(), a.init_backend().unwrap(), cpu()];
    let mut sched: Scheduler = Scheduler::new(backends, SchedulerOptions::default()).unwrap();
    for (t, backend) in [(h, 0), (z, 1), (y, 3), (w, 2)] {
        sched.set_tensor_backend(t, backend).unwrap();
    }
    let plan = sched.split_graph(&g).unwrap();
    assert_eq!(plan.backends, ["SIM_A", "SIM_B", "SIM_A:1", "CPU"]);
    let routes: Vec<(String, CopyRoute)> =
        plan.splits.iter().flat_map(|s| s.inputs.iter().map(|i| (i.name.clone(), i.route))).collect();
    // The simulated devices cannot reach each other: through host memory.
    assert!(routes.contains(&("h".into(), CopyRoute::Staged)), "{plan}");
    assert!(
        routes.contains(&("x".into(), CopyRoute::Host)) && routes.contains(&("y".into(), CopyRoute::Host)),
        "{plan}"
    );
    assert!(plan.to_string().contains("'h': SIM_A -> SIM_B, 128 B (staged through host memory)"), "{plan}");

    // Between two streams of one device: a device copy.
    let backends: Vec<Box<dyn Backend>> = vec![a.init_backend().unwrap(), a.init_backend().unwrap(), cpu()];
    let mut sched: Scheduler = Scheduler::new(backends, SchedulerOptions::default()).unwrap();
    for (t, backend) in [(h, 0), (z, 1), (y, 1), (w, 1)] {
        sched.set_tensor_backend(t, backend).unwrap();
    }
    let plan = sched.split_graph(&g).unwrap();
    assert!(plan.to_string().contains("'h': SIM_A -> SIM_A:1, 128 B (same device)"), "{plan}");
    sched.alloc_graph(&g).unwrap();
    let xv = values(32, 1.5);
    sched.graph().unwrap().set_f32(x, &xv).unwrap();
    sched.compute().unwrap();
    let reference = cpu_reference(&g, &[], &[(x, xv)]);
    assert_eq!(bits(&sched.graph().unwrap().get_f32(w).unwrap()), bits(&reference.get_f32(w).unwrap()));
}

#[test]
fn get_tensor_async_reads_a_result_where_it_lives_and_refuses_too_many_bytes() {
    let sim = sim_no_softmax();
    let mut g = Graph::new();
    let x = input(&mut g, &[8, 4], "x");
    let h = g.relu(x).unwrap();
    let h = name(&mut g, h, "h");
    g.set_output(h).unwrap();
    g.build_forward(h).unwrap();
    let mut sched = sched_over(sim, 1);
    let mut out = vec![0f32; 32];
    // SAFETY: `out` holds 128 bytes and outlives the synchronize below (nothing is queued here).
    let err = unsafe { sched.get_tensor_async(h, out.as_mut_ptr().cast(), 128) }.unwrap_err();
    assert!(err.to_string().contains("no graph has been planned"), "{err}");
    sched.alloc_graph(&g).unwrap();
    let xv = values(32, 0.25);
    sched.graph().unwrap().set_f32(x, &xv).unwrap();
    sched.compute_async().unwrap();
    // SAFETY: as above; the call fails before queueing anything.
    let err = unsafe { sched.get_tensor_async(h, out.as_mut_ptr().cast(), 129) }.unwrap_err();
    assert!(err.to_string().contains("129 bytes asked of h, which has 128"), "{err}");
    // SAFETY: `out` holds 128 bytes, untouched until the synchronize below returns.
    unsafe { sched.get_tensor_async(h, out.as_mut_ptr().cast(), 128) }.unwrap();
    sched.synchronize().unwrap();
    let reference = cpu_reference(&g, &[], &[(x, xv)]);
    assert_eq!(bits(&out), bits(&reference.get_f32(h).unwrap()));
}

// ---------------------------------------------------------------------------------------------
// Fused runs

/// The CPU, reporting every product followed by a cast of its result as one fused run (as a
/// GPU that writes the cast values from the product would).
struct FusingCpu(CpuBackend);

impl Backend for FusingCpu {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn device(&self) -> &'static dyn Device {
        self.0.device()
    }
    fn compute(&mut self, graph: &Graph, nodes: std::ops::Range<usize>) -> tessera::Result<()> {
        self.0.compute(graph, nodes)
    }
    fn fused_runs(&self, split: &tessera::SplitRef<'_>, run: &mut dyn FnMut(std::ops::Range<usize>)) {
        let ids = &split.graph.nodes()[split.nodes.clone()];
        for (i, pair) in ids.windows(2).enumerate() {
            let op = |id: TensorId| split.graph.tensor(id).unwrap().op();
            if op(pair[0]) == Op::MulMat && op(pair[1]) == Op::Cpy {
                run(split.nodes.start + i..split.nodes.start + i + 2);
            }
        }
    }
    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

/// What a backend reports as fused reaches the graph allocator: the input of a product fused
/// with the cast after it stays allocated until the cast, so the cast's result lands elsewhere
/// (one node at a time, it reuses that input's memory). The results are the same.
#[test]
fn a_backends_fused_runs_keep_what_they_read_allocated() {
    let build = || {
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
        (g, [x, w], input, half)
    };
    let run = |backend: Box<dyn Backend>| {
        let (g, leafs, input, half) = build();
        let mut sched: Scheduler = Scheduler::new(vec![backend], SchedulerOptions::default()).unwrap();
        sched.alloc_graph(&g).unwrap();
        let sg = sched.graph().unwrap();
        let values: Vec<f32> = (0..64 * 64).map(|i| (i % 13) as f32 - 6.0).collect();
        for leaf in leafs {
            sg.set_f32(leaf, &values).unwrap();
        }
        let bytes = |id: TensorId| {
            let d = sg.data(id).unwrap();
            d.offset..d.offset + sg.tensor(id).unwrap().nbytes()
        };
        let (a, b) = (bytes(input), bytes(half));
        let overlap = a.start < b.end && b.start < a.end;
        sched.compute().unwrap();
        (overlap, sched.graph().unwrap().get_f32(half).unwrap())
    };
    let (apart, apart_values) = run(Box::new(FusingCpu(CpuBackend::reference())));
    let (overlap, values) = run(cpu());
    assert!(overlap, "one node at a time the cast reuses the product's input");
    assert!(!apart, "a fused run's input was freed before its last node");
    assert_eq!(apart_values, values);
}
