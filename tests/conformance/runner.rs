//! Running cases on a tested backend against the CPU reference, node by node, in the manner
//! of ggml's `ggml_backend_compare_graph_backend`.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use tessera::allocator::alloc_graph_tensors;
use tessera::cpu::CpuBackend;
use tessera::host_buffer::HOST_BUFFER_TYPE;
use tessera::{Backend, Buffer, BufferType, DType, Device, Graph, Op, TensorData, TensorId};

use super::cases::{self, Case, Init};
use super::rng::Rng;

/// Bytes of each guard region before and after a tensor (rounded up to the alignment).
pub const GUARD_BYTES: usize = 64;

/// The byte expected at `offset` of the tested buffer wherever no tensor lives.
pub fn guard_byte(offset: usize) -> u8 {
    ((offset as u32).wrapping_mul(0x9e37_79b1) >> 24) as u8 ^ 0x5a
}

/// Computed outputs start as this byte (NaN in every float type), so that values a kernel
/// forgets to write are caught.
pub const POISON_BYTE: u8 = 0xff;

/// One failing case on one device.
#[derive(Clone, Debug)]
pub struct Failure {
    pub case: String,
    pub device: String,
    /// The node that failed (`#index OP`), or "-" when the case failed as a whole.
    pub node: String,
    pub error: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FAIL {} on {}: node {}: {}", self.case, self.device, self.node, self.error)
    }
}

/// What a run found.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// Cases in the list that was run.
    pub cases: usize,
    /// Distinct ops the cases test.
    pub ops: usize,
    /// Devices (or backends) tested.
    pub devices: usize,
    /// Case and device pairs that passed, failed or were skipped.
    pub passed: usize,
    pub failed: usize,
    pub skipped: usize,
    pub failures: Vec<Failure>,
}

impl Summary {
    fn for_cases(cases: &[Case]) -> Summary {
        let ops: BTreeSet<&str> = cases.iter().map(|c| c.op).collect();
        Summary { cases: cases.len(), ops: ops.len(), ..Summary::default() }
    }

    /// Adds the counts of a run over other devices on the same case list.
    pub fn merge(&mut self, other: Summary) {
        self.cases = self.cases.max(other.cases);
        self.ops = self.ops.max(other.ops);
        self.devices += other.devices;
        self.passed += other.passed;
        self.failed += other.failed;
        self.skipped += other.skipped;
        self.failures.extend(other.failures);
    }

    /// `conformance: <cases> cases, <ops> ops, <devices> devices: <p> passed, <f> failed, <s> skipped`.
    pub fn line(&self) -> String {
        format!(
            "conformance: {} cases, {} ops, {} devices: {} passed, {} failed, {} skipped",
            self.cases, self.ops, self.devices, self.passed, self.failed, self.skipped
        )
    }

    /// Prints every failure, then the summary line.
    pub fn print(&self) {
        for f in &self.failures {
            println!("{f}");
        }
        println!("{}", self.line());
    }
}

/// Whether a backend can compute a node of a graph.
pub type SupportsOp = dyn Fn(&Graph, TensorId) -> bool;

/// A backend under test, with the memory it computes on.
pub struct Target<'a> {
    /// The name failures are reported under.
    pub name: String,
    pub backend: &'a mut dyn Backend,
    /// Where the tested graph's tensors are placed.
    pub buffer_type: &'static dyn BufferType,
    /// Whether the backend can compute a node; `None` asks the backend's device.
    pub supports_op: Option<&'a SupportsOp>,
}

impl<'a> Target<'a> {
    /// `backend` on the buffer type of its device.
    pub fn new(backend: &'a mut dyn Backend) -> Target<'a> {
        let device = backend.device();
        Target { name: device.name().to_string(), buffer_type: device.buffer_type(), backend, supports_op: None }
    }

    fn supports(&self, graph: &Graph, node: TensorId) -> bool {
        match self.supports_op {
            Some(f) => f(graph, node),
            None => self.backend.device().supports_op(graph, node),
        }
    }
}

/// The cases whose name contains `TESSERA_CONFORMANCE_FILTER` (all when it is unset).
pub fn selected_cases() -> Vec<Case> {
    let all = cases::all();
    match std::env::var("TESSERA_CONFORMANCE_FILTER") {
        Ok(f) if !f.is_empty() => all.into_iter().filter(|c| c.name.contains(&f)).collect(),
        _ => all,
    }
}

/// Runs the whole case list on each device, against the CPU reference.
pub fn run_suite(devices: &[&'static dyn Device]) -> Summary {
    run_cases_on_devices(&selected_cases(), devices)
}

/// Runs `cases` on each device: the tested backend is `device.init_backend()` on
/// `device.buffer_type()`.
pub fn run_cases_on_devices(cases: &[Case], devices: &[&'static dyn Device]) -> Summary {
    let mut total = Summary::for_cases(cases);
    for &device in devices {
        let mut backend = match device.init_backend() {
            Ok(b) => b,
            Err(e) => {
                let mut s = Summary::for_cases(cases);
                s.devices = 1;
                s.failed = cases.len();
                s.failures.push(Failure {
                    case: "*".into(),
                    device: device.name().into(),
                    node: "-".into(),
                    error: format!("init_backend failed: {e}"),
                });
                total.merge(s);
                continue;
            }
        };
        let supports = |g: &Graph, id: TensorId| device.supports_op(g, id);
        let mut target = Target {
            name: device.name().to_string(),
            backend: &mut *backend,
            buffer_type: device.buffer_type(),
            supports_op: Some(&supports),
        };
        total.merge(run_cases(cases, &mut target));
    }
    total
}

/// Runs `cases` on one explicitly given backend (a plugin, a simulated device).
pub fn run_cases(cases: &[Case], target: &mut Target) -> Summary {
    let mut summary = Summary::for_cases(cases);
    summary.devices = 1;
    let mut reference = CpuBackend::reference();
    let start = Instant::now();
    for case in cases {
        match run_case(case, target, &mut reference) {
            Outcome::Passed => summary.passed += 1,
            Outcome::Skipped => summary.skipped += 1,
            Outcome::Failed { node, error } => {
                summary.failed += 1;
                summary.failures.push(Failure { case: case.name.clone(), device: target.name.clone(), node, error });
            }
        }
    }
    eprintln!("conformance: {} cases on {} in {:.2} s", cases.len(), target.name, start.elapsed().as_secs_f64());
    summary
}

/// What one case did on one device.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    Passed,
    Skipped,
    Failed { node: String, error: String },
}

fn failed(node: impl Into<String>, error: impl Into<String>) -> Outcome {
    Outcome::Failed { node: node.into(), error: error.into() }
}

/// Runs one case on `target` and `reference` and compares every node.
pub fn run_case(case: &Case, target: &mut Target, reference: &mut dyn Backend) -> Outcome {
    let (cg, _out) = match case.build() {
        Ok(b) => b,
        Err(e) => return failed("-", format!("building the graph failed: {e}")),
    };
    if cg.nodes().iter().any(|&n| !target.supports(&cg, n)) {
        return Outcome::Skipped;
    }
    let leaf_inits: Vec<(TensorId, Init)> = cg.leafs().iter().map(|&id| (id, cg.init_of(id))).collect();
    let (mut graph, _) = cg.into_parts();
    // The reference graph is a clone made before any memory is bound.
    let mut ref_graph = graph.clone();

    let guarded = match bind_guarded(&mut graph, target.buffer_type) {
        Ok(g) => g,
        Err(e) => {
            return failed("-", format!("placing the tensors in a {} buffer failed: {e}", target.buffer_type.name()))
        }
    };
    if let Err(e) = alloc_graph_tensors(&mut ref_graph, &HOST_BUFFER_TYPE) {
        return failed("-", format!("allocating the reference tensors failed: {e}"));
    }
    for (stream, &(id, init)) in leaf_inits.iter().enumerate() {
        let mut rng = Rng::seeded(&case.name, stream as u64);
        let res = init_leaf(&graph, id, init, &mut rng).and_then(|values| {
            write_values(&ref_graph, id, &values)?;
            Ok(())
        });
        if let Err(e) = res {
            return failed(graph.label(id), format!("initialising the leaf failed: {e}"));
        }
    }

    let outcome = compare_nodes(case, &graph, &ref_graph, target, reference);
    // Out-of-bounds writes are reported even when the values matched.
    match (outcome, guarded.check()) {
        (Outcome::Passed, Err(e)) => failed("-", e),
        (o, _) => o,
    }
}

fn compare_nodes(
    case: &Case,
    graph: &Graph,
    ref_graph: &Graph,
    target: &mut Target,
    reference: &mut dyn Backend,
) -> Outcome {
    for (i, &id) in graph.nodes().iter().enumerate() {
        let t = match graph.tensor(id) {
            Ok(t) => t,
            Err(e) => return failed(format!("#{i}"), e.to_string()),
        };
        let node = format!("#{i} {}", t.op().name());
        if let Err(e) = target.backend.compute(graph, i..i + 1).and_then(|()| target.backend.synchronize()) {
            return failed(node, format!("compute on {} failed: {e}", target.name));
        }
        if let Err(e) = reference.compute(ref_graph, i..i + 1).and_then(|()| reference.synchronize()) {
            return failed(node, format!("compute on the reference failed: {e}"));
        }
        if t.op().is_view() {
            continue;
        }
        let result = if t.dtype() == DType::I32 {
            match (graph.get_i32(id), ref_graph.get_i32(id)) {
                (Ok(got), Ok(want)) => compare_i32(&want, &got),
                (Err(e), _) => Err(format!("reading the result failed: {e}")),
                (_, Err(e)) => Err(format!("reading the reference result failed: {e}")),
            }
        } else {
            match (graph.get_f32(id), ref_graph.get_f32(id)) {
                (Ok(got), Ok(want)) => {
                    let max = if matches!(t.op(), Op::MulMat) { case.max_nmse.max(5e-4) } else { case.max_nmse };
                    compare_f32(&want, &got, max)
                }
                (Err(e), _) => Err(format!("reading the result failed: {e}")),
                (_, Err(e)) => Err(format!("reading the reference result failed: {e}")),
            }
        };
        if let Err(e) = result {
            return failed(node, e);
        }
    }
    Outcome::Passed
}

/// Values for one leaf, as written into both graphs.
#[derive(Clone, Debug, PartialEq)]
pub enum Values {
    F32(Vec<f32>),
    I32(Vec<i32>),
}

/// Generates the values of leaf `id` and writes them into `graph`.
fn init_leaf(graph: &Graph, id: TensorId, init: Init, rng: &mut Rng) -> tessera::Result<Values> {
    let t = graph.tensor(id)?;
    let values = generate(t.dtype(), t.nelements(), t.ne()[0], init, rng);
    write_values(graph, id, &values)?;
    Ok(values)
}

fn write_values(graph: &Graph, id: TensorId, values: &Values) -> tessera::Result<()> {
    match values {
        Values::F32(v) => graph.set_f32(id, v),
        Values::I32(v) => graph.set_i32(id, v),
    }
}

/// `n` values of a leaf of `dtype` with rows of `row` values.
pub fn generate(dtype: DType, n: usize, row: usize, init: Init, rng: &mut Rng) -> Values {
    if dtype == DType::I32 {
        let (lo, hi) = match init {
            Init::Ints(lo, hi) => (lo, hi),
            Init::DistinctInts(hi) | Init::IntRuns(hi) => {
                let mut v = Vec::with_capacity(n);
                for chunk in 0..n.div_ceil(row.max(1)) {
                    let mut all: Vec<i32> = (0..hi).collect();
                    if init == Init::IntRuns(hi) {
                        // Cut 0..hi into runs of 1 to 8, shuffle the runs, keep their order.
                        let mut runs: Vec<&[i32]> = Vec::new();
                        let mut rest = &all[..];
                        while !rest.is_empty() {
                            let len = (rng.range_i32(1, 9) as usize).min(rest.len());
                            let (run, tail) = rest.split_at(len);
                            runs.push(run);
                            rest = tail;
                        }
                        rng.shuffle(&mut runs);
                        all = runs.concat();
                    } else {
                        rng.shuffle(&mut all);
                    }
                    let take = row.min(n - chunk * row);
                    assert!(take <= all.len(), "{take} distinct values asked of 0..{hi}");
                    v.extend_from_slice(&all[..take]);
                }
                return Values::I32(v);
            }
            _ => (-1000, 1000),
        };
        return Values::I32((0..n).map(|_| rng.range_i32(lo, hi)).collect());
    }
    let v = match init {
        Init::Uniform(lo, hi) => (0..n).map(|_| rng.uniform(lo, hi)).collect(),
        Init::AwayFromZero(lo, hi) => (0..n)
            .map(|_| {
                let m = rng.uniform(lo, hi);
                if rng.next_u64() & 1 == 0 {
                    m
                } else {
                    -m
                }
            })
            .collect(),
        Init::Ints(lo, hi) => (0..n).map(|_| rng.range_i32(lo, hi) as f32).collect(),
        Init::DistinctInts(hi) | Init::IntRuns(hi) => (0..n).map(|_| rng.range_i32(0, hi) as f32).collect(),
        Init::Distinct => {
            // Integers -n/2..n - n/2 scaled by a power of two into [-1, 1]: exact in every
            // float type while their magnitude stays below 256.
            let half = n / 2;
            let scale = (half.max(1) as f32).log2().ceil().exp2();
            let mut v: Vec<f32> = (0..n).map(|k| (k as f32 - half as f32) / scale).collect();
            rng.shuffle(&mut v);
            v
        }
        Init::MaskInf => (0..n)
            .map(|i| {
                let x = rng.uniform(-1.0, 1.0);
                if i % row.max(1) != 0 && rng.below(4) == 0 {
                    f32::NEG_INFINITY
                } else {
                    x
                }
            })
            .collect(),
        Init::Causal => (0..n)
            .map(|i| {
                let x = rng.uniform(-1.0, 1.0);
                let (r, key) = (i / row.max(1), i % row.max(1));
                if key > row / 2 + r {
                    f32::NEG_INFINITY
                } else {
                    x
                }
            })
            .collect(),
        Init::MaskInfRows => (0..n)
            .map(|i| {
                let x = rng.uniform(-1.0, 1.0);
                if (i / row.max(1)) % 3 == 1 || (i % row.max(1) != 0 && rng.below(4) == 0) {
                    f32::NEG_INFINITY
                } else {
                    x
                }
            })
            .collect(),
    };
    Values::F32(v)
}

/// Compares a result with the reference: no NaN anywhere, infinities on both sides with the
/// same sign, and a normalised mean squared error `sum((a - b)^2) / sum(a^2)` of the finite
/// values at most `max_nmse`.
pub fn compare_f32(want: &[f32], got: &[f32], max_nmse: f64) -> Result<(), String> {
    if want.len() != got.len() {
        return Err(format!("{} values, the reference has {}", got.len(), want.len()));
    }
    let (mut err, mut norm) = (0.0f64, 0.0f64);
    for (i, (&a, &b)) in want.iter().zip(got).enumerate() {
        if b.is_nan() {
            return Err(format!("NaN at value {i} (reference {a})"));
        }
        if a.is_nan() {
            return Err(format!("NaN in the reference at value {i} (result {b})"));
        }
        if a.is_infinite() || b.is_infinite() {
            if a != b {
                return Err(format!("value {i} is {b}, the reference {a}: infinities differ"));
            }
            continue;
        }
        let d = f64::from(a) - f64::from(b);
        err += d * d;
        norm += f64::from(a) * f64::from(a);
    }
    let nmse = if err == 0.0 { 0.0 } else { err / norm.max(f64::MIN_POSITIVE) };
    if nmse > max_nmse {
        let (worst, _) = want
            .iter()
            .zip(got)
            .enumerate()
            .filter(|(_, (a, b))| a.is_finite() && b.is_finite())
            .map(|(i, (a, b))| (i, (a - b).abs()))
            .fold((0, -1.0f32), |m, x| if x.1 > m.1 { x } else { m });
        return Err(format!(
            "NMSE = {nmse:.3e} > {max_nmse:.0e} (worst value {worst}: {} vs reference {})",
            got[worst], want[worst]
        ));
    }
    Ok(())
}

/// Integer results must match exactly.
pub fn compare_i32(want: &[i32], got: &[i32]) -> Result<(), String> {
    if want.len() != got.len() {
        return Err(format!("{} values, the reference has {}", got.len(), want.len()));
    }
    match want.iter().zip(got).position(|(a, b)| a != b) {
        None => Ok(()),
        Some(i) => Err(format!(
            "value {i} is {}, the reference {} ({} of {} values differ)",
            got[i],
            want[i],
            want.iter().zip(got).filter(|(a, b)| a != b).count(),
            want.len()
        )),
    }
}

/// The tested graph's buffer and the guard regions around its tensors.
pub struct Guarded {
    pub buffer: Arc<dyn Buffer>,
    /// `(offset, len)` of each guard region.
    pub guards: Vec<(usize, usize)>,
    /// `(tensor label, offset, len)` of each tensor placed, to name an overrun's victim.
    pub tensors: Vec<(String, usize, usize)>,
}

const fn align_up(n: usize, align: usize) -> usize {
    n.div_ceil(align) * align
}

/// Binds every tensor of `graph` that needs memory (not a view, not bound) in one buffer of
/// `buffer_type`, each between two guard regions filled with [`guard_byte`]. Computed
/// tensors are filled with [`POISON_BYTE`].
pub fn bind_guarded(graph: &mut Graph, buffer_type: &'static dyn BufferType) -> tessera::Result<Guarded> {
    let align = buffer_type.alignment().max(1);
    let guard = align_up(GUARD_BYTES, align);
    let mut places = Vec::new();
    let mut guards = Vec::new();
    let mut cursor = 0usize;
    for (i, t) in graph.tensors().iter().enumerate() {
        if t.view_src().is_some() || t.data().is_some() {
            continue;
        }
        let size = buffer_type.alloc_size(t).max(t.nbytes());
        let offset = cursor + guard;
        let end = align_up(offset + size, align) + guard;
        guards.push((cursor, guard));
        guards.push((offset + size, end - offset - size));
        places.push((TensorId(i as u32), offset, size));
        cursor = end;
    }
    let buffer = buffer_type.alloc_buffer(cursor.max(1))?;
    let pattern: Vec<u8> = (0..buffer.size()).map(guard_byte).collect();
    buffer.set_bytes(0, &pattern)?;
    let mut tensors = Vec::new();
    for &(id, offset, size) in &places {
        graph.bind(id, TensorData { buffer: buffer.clone(), offset })?;
        if graph.tensor(id)?.op() != Op::None {
            buffer.fill(offset, size, POISON_BYTE)?;
        }
        tensors.push((graph.label(id), offset, size));
    }
    Ok(Guarded { buffer, guards, tensors })
}

impl Guarded {
    /// Fails if any guard byte changed, naming the tensor next to it.
    pub fn check(&self) -> Result<(), String> {
        let mut bytes = vec![0u8; self.buffer.size()];
        self.buffer.get_bytes(0, &mut bytes).map_err(|e| format!("reading the buffer back failed: {e}"))?;
        for &(start, len) in &self.guards {
            if let Some(k) = (start..start + len).find(|&o| bytes[o] != guard_byte(o)) {
                let near = self
                    .tensors
                    .iter()
                    .min_by_key(|(_, off, size)| if k < *off { off - k } else { k.saturating_sub(off + size) })
                    .map_or("?", |(name, _, _)| name.as_str());
                let changed = (start..start + len).filter(|&o| bytes[o] != guard_byte(o)).count();
                return Err(format!(
                    "out-of-bounds write: {changed} guard byte(s) changed at buffer offset {k}, next to tensor '{near}'"
                ));
            }
        }
        Ok(())
    }
}
