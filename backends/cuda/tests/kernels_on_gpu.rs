//! The op conformance cases (tests/conformance/cases.rs) run through `kernels::launch` on the
//! first CUDA device and compared with the reference kernels, node by node: floats by
//! normalised mean squared error (the case's bound), integers and quantized results bit for bit.
//! Every computed tensor starts as 0xff bytes (NaN) on the device, so values a kernel forgets to
//! write are caught. Passes with a message when there is no CUDA driver or device.
//!
//! `TESSERA_CONFORMANCE_FILTER=SOFT_MAX` runs the cases whose name contains the filter.

extern crate tessera_core as tessera;

#[allow(dead_code)]
#[path = "../../../tests/conformance/cases.rs"]
mod cases;
#[allow(dead_code)]
#[path = "../../../tests/conformance/rng.rs"]
mod rng;

use std::collections::HashMap;
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr};
use tessera_core::allocator::alloc_graph_tensors;
use tessera_core::host_buffer::HOST_BUFFER_TYPE;
use tessera_core::tensor::MAX_SRC;
use tessera_core::{convert, Buffer, DType, Graph, Op, TensorId, TensorView};
use tessera_cuda::kernels::{self, Kernels, Scratch, TensorArg};
use tessera_reference::{NodeTensors, Scratch as RefScratch};

use cases::{Case, Init};
use rng::Rng;

/// The first CUDA device, or why there is none.
fn device() -> Result<Arc<CudaContext>, String> {
    // SAFETY: only tries to open the driver library.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err("no CUDA driver library".into());
    }
    match CudaContext::device_count() {
        Ok(n) if n > 0 => CudaContext::new(0).map_err(|e| format!("creating a context failed: {e}")),
        Ok(_) => Err("no CUDA device".into()),
        Err(e) => Err(format!("the driver failed: {e}")),
    }
}

/// Values of a leaf, as the conformance runner generates them.
fn generate(dtype: DType, n: usize, row: usize, init: Init, rng: &mut Rng) -> Result<Vec<f32>, Vec<i32>> {
    if dtype == DType::I32 {
        let (lo, hi) = match init {
            Init::Ints(lo, hi) => (lo, hi),
            _ => (-1000, 1000),
        };
        return Err((0..n).map(|_| rng.range_i32(lo, hi)).collect());
    }
    Ok(match init {
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
        Init::Distinct => {
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
    })
}

/// A tensor's values read from a copy of its buffer's bytes: f32 (row-major), i32, and for
/// quantized types the raw bytes of its rows too.
struct Read {
    f32: Vec<f32>,
    i32: Vec<i32>,
    raw: Vec<u8>,
}

fn read(bytes: &[u8], v: &TensorView) -> Read {
    let [n0, n1, n2, n3] = v.ne;
    let mut out = Read { f32: Vec::new(), i32: Vec::new(), raw: Vec::new() };
    let row_span = if v.dtype.is_quantized() {
        n0 / v.dtype.block_len() * v.dtype.block_bytes()
    } else if n0 == 0 {
        0
    } else {
        (n0 - 1) * v.nb[0] + v.dtype.block_bytes()
    };
    let mut row = vec![0f32; n0];
    for i3 in 0..n3 {
        for i2 in 0..n2 {
            for i1 in 0..n1 {
                let at = v.data.offset + i1 * v.nb[1] + i2 * v.nb[2] + i3 * v.nb[3];
                let r = &bytes[at..at + row_span];
                if v.dtype == DType::I32 {
                    for i0 in 0..n0 {
                        let b = &r[i0 * v.nb[0]..i0 * v.nb[0] + 4];
                        out.i32.push(i32::from_le_bytes([b[0], b[1], b[2], b[3]]));
                    }
                } else {
                    convert::strided_to_f32(v.dtype, r, v.nb[0], &mut row);
                    out.f32.extend_from_slice(&row);
                    if v.dtype.is_quantized() {
                        out.raw.extend_from_slice(r);
                    }
                }
            }
        }
    }
    out
}

/// The conformance runner's float comparison.
fn compare_f32(want: &[f32], got: &[f32], max_nmse: f64) -> Result<(), String> {
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

/// Host buffers of a graph and their device copies.
struct Mirror {
    host: Vec<Arc<dyn Buffer>>,
    device: Vec<CudaSlice<u8>>,
    address: HashMap<usize, u64>,
}

fn buffer_key(b: &Arc<dyn Buffer>) -> usize {
    b.host_ptr().map_or(0, |p| p as usize)
}

impl Mirror {
    /// Device copies of `host` with every computed tensor of `graph` set to 0xff bytes.
    fn upload(stream: &Arc<CudaStream>, graph: &Graph, host: Vec<Arc<dyn Buffer>>) -> Result<Mirror, String> {
        let mut bytes: Vec<Vec<u8>> = Vec::new();
        for b in &host {
            let mut v = vec![0u8; b.size()];
            b.get_bytes(0, &mut v).map_err(|e| e.to_string())?;
            bytes.push(v);
        }
        for &id in graph.nodes() {
            let t = graph.tensor(id).map_err(|e| e.to_string())?;
            if t.op().is_view() {
                continue;
            }
            let v = graph.tensor_view(id).map_err(|e| e.to_string())?;
            let i = host.iter().position(|b| buffer_key(b) == buffer_key(&v.data.buffer)).ok_or("unknown buffer")?;
            bytes[i][v.data.offset..v.data.offset + v.nbytes()].fill(0xff);
        }
        let mut device = Vec::new();
        let mut address = HashMap::new();
        for (b, v) in host.iter().zip(&bytes) {
            let d = stream.clone_htod(v).map_err(|e| format!("upload failed: {e}"))?;
            let ptr = {
                let (ptr, _sync) = d.device_ptr(stream);
                ptr
            };
            address.insert(buffer_key(b), ptr);
            device.push(d);
        }
        Ok(Mirror { host, device, address })
    }

    fn arg(&self, v: &TensorView) -> Result<(TensorArg, DType), String> {
        let base = self.address.get(&buffer_key(&v.data.buffer)).ok_or("a tensor outside the graph's buffers")?;
        Ok((TensorArg::new(base + v.data.offset as u64, v), v.dtype))
    }
}

enum Outcome {
    Passed,
    Skipped(String),
    Failed(String),
}

fn run_case(case: &Case, kernels: &Kernels, stream: &Arc<CudaStream>, scratch: &mut Scratch) -> Outcome {
    let (cg, _) = match case.build() {
        Ok(b) => b,
        Err(e) => return Outcome::Failed(format!("building the graph failed: {e}")),
    };
    if let Some(&n) = cg.nodes().iter().find(|&&n| !kernels::supports(&cg, n)) {
        return Outcome::Skipped(format!(
            "node {} ({}) is not supported",
            n.0,
            cg.tensor(n).map_or("?", |t| t.op().name())
        ));
    }
    let leaf_inits: Vec<(TensorId, Init)> = cg.leafs().iter().map(|&id| (id, cg.init_of(id))).collect();
    let (mut graph, _) = cg.into_parts();
    let host = match alloc_graph_tensors(&mut graph, &HOST_BUFFER_TYPE) {
        Ok(b) => b,
        Err(e) => return Outcome::Failed(format!("allocating failed: {e}")),
    };
    for (stream_no, &(id, init)) in leaf_inits.iter().enumerate() {
        let mut rng = Rng::seeded(&case.name, stream_no as u64);
        let Ok(t) = graph.tensor(id) else { return Outcome::Failed("leaf".into()) };
        let res = match generate(t.dtype(), t.nelements(), t.ne()[0], init, &mut rng) {
            Ok(v) => graph.set_f32(id, &v),
            Err(v) => graph.set_i32(id, &v),
        };
        if let Err(e) = res {
            return Outcome::Failed(format!("initialising leaf {} failed: {e}", id.0));
        }
    }
    let mirror = match Mirror::upload(stream, &graph, host) {
        Ok(m) => m,
        Err(e) => return Outcome::Failed(e),
    };

    // The device, then the reference on the host copy.
    for &id in graph.nodes() {
        let Ok(nv) = graph.node_view(id) else { return Outcome::Failed("node view".into()) };
        let dst = match mirror.arg(&nv.dst) {
            Ok(d) => d,
            Err(e) => return Outcome::Failed(e),
        };
        let mut srcs = [None; MAX_SRC];
        for (slot, v) in nv.src.iter().enumerate() {
            if let Some(v) = v {
                match mirror.arg(v) {
                    Ok(a) => srcs[slot] = Some(a),
                    Err(e) => return Outcome::Failed(e),
                }
            }
        }
        if let Err(e) = kernels::launch(kernels, stream, scratch, nv.op, dst, &srcs) {
            return Outcome::Failed(format!("node {} ({}): launch failed: {e}", id.0, nv.op.name()));
        }
    }
    if let Err(e) = stream.synchronize() {
        return Outcome::Failed(format!("the device failed: {e}"));
    }
    let mut ref_scratch = RefScratch::default();
    for &id in graph.nodes() {
        let res = graph.node_view(id).and_then(|nv| {
            NodeTensors::new(&nv, "reference").and_then(|n| tessera_reference::compute(&n, &mut ref_scratch))
        });
        if let Err(e) = res {
            return Outcome::Failed(format!("node {}: the reference failed: {e}", id.0));
        }
    }

    let mut device_bytes = HashMap::new();
    for (b, d) in mirror.host.iter().zip(&mirror.device) {
        match stream.clone_dtoh(d) {
            Ok(v) => device_bytes.insert(buffer_key(b), v),
            Err(e) => return Outcome::Failed(format!("download failed: {e}")),
        };
    }
    for &id in graph.nodes() {
        let Ok(t) = graph.tensor(id) else { continue };
        if t.op().is_view() {
            continue;
        }
        let Ok(v) = graph.tensor_view(id) else { return Outcome::Failed("view".into()) };
        let mut host_bytes = vec![0u8; v.data.buffer.size()];
        if v.data.buffer.get_bytes(0, &mut host_bytes).is_err() {
            return Outcome::Failed("reading the reference failed".into());
        }
        let want = read(&host_bytes, &v);
        let got = read(&device_bytes[&buffer_key(&v.data.buffer)], &v);
        let max = if t.op() == Op::MulMat { case.max_nmse.max(5e-4) } else { case.max_nmse };
        let result = if t.dtype() == DType::I32 {
            if want.i32 == got.i32 {
                Ok(())
            } else {
                let i = want.i32.iter().zip(&got.i32).position(|(a, b)| a != b).unwrap_or(0);
                Err(format!("i32 value {i} is {}, the reference {}", got.i32[i], want.i32[i]))
            }
        } else if t.dtype().is_quantized() && want.raw != got.raw {
            let i = want.raw.iter().zip(&got.raw).position(|(a, b)| a != b).unwrap_or(0);
            Err(format!(
                "{} byte {i} is {:#04x}, the reference {:#04x} (NMSE check: {:?})",
                t.dtype(),
                got.raw[i],
                want.raw[i],
                compare_f32(&want.f32, &got.f32, max)
            ))
        } else {
            compare_f32(&want.f32, &got.f32, max)
        };
        if let Err(e) = result {
            return Outcome::Failed(format!("node {} ({}): {e}", id.0, t.op().name()));
        }
    }
    Outcome::Passed
}

#[test]
fn conformance_cases_on_the_first_cuda_device() {
    let ctx = match device() {
        Ok(c) => c,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let kernels = Kernels::load(&ctx).expect("loading the kernels");
    let stream = ctx.new_stream().expect("a stream");
    let mut scratch = Scratch::new(&stream).expect("scratch");
    let filter = std::env::var("TESSERA_CONFORMANCE_FILTER").unwrap_or_default();
    let cases: Vec<Case> = cases::all().into_iter().filter(|c| c.name.contains(&filter)).collect();
    let (mut passed, mut skipped, mut failed) = (0, Vec::new(), Vec::new());
    let start = std::time::Instant::now();
    for case in &cases {
        match run_case(case, &kernels, &stream, &mut scratch) {
            Outcome::Passed => passed += 1,
            Outcome::Skipped(why) => skipped.push(format!("{}: {why}", case.name)),
            Outcome::Failed(why) => failed.push(format!("FAIL {}: {why}", case.name)),
        }
    }
    for s in &skipped {
        println!("skipped {s}");
    }
    for f in &failed {
        println!("{f}");
    }
    println!(
        "cuda kernels: {} cases: {passed} passed, {} failed, {} skipped ({:.2} s)",
        cases.len(),
        failed.len(),
        skipped.len(),
        start.elapsed().as_secs_f64()
    );
    assert!(failed.is_empty() && skipped.is_empty(), "{} failed, {} skipped", failed.len(), skipped.len());
}
