//! MUL_MAT of a weight in a split buffer: every GPU multiplies its rows, pipelined.
//!
//! `dst [M, N] = a [K, M] x b [K, N]` with `a`'s rows divided among the devices. The main
//! device (its backend's stream `S`) computes its own rows with the ordinary product, writing
//! rows `r0..r1` of `dst` in place. For the other devices (the peers), the columns of `b` are
//! cut into chunks, and each step `s` of the pipeline (over the copy engines where every GPU
//! has peer access to the main one, else in one NCCL group; see [`copy_engines`]):
//! - sends chunk `s` of `b` (converted on the main GPU to the type the peers' products take:
//!   f16 for f16 and quantized weights, bf16 for bf16, f32 for f32 weights and for at most 8
//!   columns) from the main GPU to every peer;
//! - sends each peer's result part of chunk `s - 2` back to the main GPU, which copies it into
//!   its rows of `dst` (a strided 2-D copy: each column of the part is a run of `dst`'s column);
//!
//! while each peer multiplies chunk `s - 1`, whose activation arrived a step earlier. So no
//! product waits for a transfer once the pipeline is full: the first chunk's trip out and the
//! last one's trip back are all the transfers that do not overlap a product.
//!
//! The chunks are narrow at both ends and wide in the middle ([`RAMP`]): the peers start
//! early, little travels back after the last product, and most products are wide.
//!
//! The main GPU multiplies its own rows from the chunks converted for the peers where its
//! weights are of the wire type. Over the copy engines nothing else needs its SMs, so that is
//! one product of every column, once the last chunk is converted. Through NCCL it goes chunk
//! by chunk, one chunk per step, so that its SMs come free between products for NCCL's
//! kernels, and every product of a split runs on all but a few SMs ([`nccl_sms`]); the
//! transfer streams have the highest priority.
//!
//! Streams: the main GPU's conversions (and NCCL's transfers) run on a stream `X` of its own,
//! its copies to the peers over the copy engines on a stream `C`, so that a conversion never
//! waits for the previous chunk's copy; each peer has a product stream `G` and a transfer
//! stream `Y`. `X` and `C` start after `S`'s work so far (an event), and `S` waits for the
//! last of their work before its next (an event): to the backend the whole product is one
//! node of its stream. Events also order each peer's product after the arrival of its chunk
//! and the return of a result after its product. A split over one device runs the
//! single-GPU product on all its rows, so it gives the bits of the unsplit product. A stream
//! so forked cannot be captured into a CUDA graph; splits holding such a product run node by
//! node.

use std::ops::Range;
use std::sync::Arc;

use cudarc::driver::{sys, CudaEvent, CudaStream};
use tessera_core::tensor::contiguous_strides;
use tessera_core::{DType, Device, Error, Graph, Op, Result, TensorId, TensorView};

use super::buffer::{Part, SplitBuffer};
use super::memory::WorkMemory;
use super::nccl::Comms;
use super::SplitBufferType;
use crate::device::CudaDevice;
use crate::driver;
use crate::kernels::{self, Kernels, Scratch, TensorArg};

/// Whether `buffer` (a tensor's memory) is a split buffer.
fn split_of(graph: &Graph, id: TensorId) -> Option<tessera_core::TensorData> {
    graph.data(id).filter(|d| d.buffer.as_any().is::<SplitBuffer>())
}

/// Whether node `id` reads a tensor that lives in a split buffer.
pub(crate) fn reads_split(graph: &Graph, id: TensorId) -> bool {
    graph.tensor(id).is_ok_and(|t| t.srcs().any(|(_, s)| split_of(graph, s).is_some()))
}

/// Whether node `id` is a MUL_MAT whose weight lives in a split buffer.
pub(crate) fn is_split_mul_mat(graph: &Graph, id: TensorId) -> bool {
    graph.tensor(id).is_ok_and(|t| t.op() == Op::MulMat && t.src(0).is_some_and(|a| split_of(graph, a).is_some()))
}

/// Whether `device` runs node `id`, which reads a split buffer: a MUL_MAT whose weight is
/// the whole matrix of a split whose main device is `device` (f32, f16, bf16, q8_0 or q4_0),
/// times a 2-D f32 activation, into a packed f32 result; no other operand split.
pub(crate) fn supports(device: &CudaDevice, graph: &Graph, id: TensorId) -> bool {
    let Ok(t) = graph.tensor(id) else { return false };
    let (Some(a), Some(b)) = (t.src(0), t.src(1)) else { return false };
    if t.op() != Op::MulMat || t.srcs().any(|(slot, s)| slot != 0 && split_of(graph, s).is_some()) {
        return false;
    }
    let (Ok(at), Ok(bt), Some(data)) = (graph.tensor(a), graph.tensor(b), split_of(graph, a)) else { return false };
    let Some(split) = data.buffer.as_any().downcast_ref::<SplitBuffer>() else { return false };
    let [k, m] = split.shape();
    let whole = at.view_src().is_none() && data.offset == 0 && at.ne() == [k, m, 1, 1] && at.is_contiguous();
    let types = matches!(at.dtype(), DType::F32 | DType::F16 | DType::BF16 | DType::Q8_0 | DType::Q4_0)
        && bt.dtype() == DType::F32
        && t.dtype() == DType::F32;
    let shapes = bt.ne()[2] == 1 && bt.ne()[3] == 1 && t.is_contiguous();
    whole && types && shapes && std::ptr::eq(split.split_type().main_device(), device) && kernels::supports(graph, id)
}

/// Streams, handles, events and work memory of one split type, made on its first product.
pub(crate) struct Runtime {
    main: Main,
    /// One per device after the main one (index `d - 1` for device `d`).
    peers: Vec<Peer>,
    comms: Option<Comms>,
}

/// The main GPU's side: its transfer stream and what it owns.
struct Main {
    device: &'static CudaDevice,
    kernels: Arc<Kernels>,
    stream: Arc<CudaStream>,
    /// Over the copy engines, the copies of `b`'s chunks to the peers (`C`): apart from `X`,
    /// so that a chunk's conversion never waits for the previous chunk's copy.
    copies: Arc<CudaStream>,
    /// Serves `stream` for the conversions (which need no scratch memory).
    scratch: Scratch,
    /// `b`'s chunks converted for sending, then the peers' result parts received.
    memory: WorkMemory,
    /// `S` reached the product (X starts there).
    forked: CudaEvent,
    /// `X` has copied the last result part into `dst` (S goes on from there).
    gathered: CudaEvent,
    /// `S` finished the last product (the next product, maybe on another backend's stream of
    /// this GPU, starts there: the work memory is shared).
    done: CudaEvent,
}

/// A peer GPU's side.
struct Peer {
    device: &'static CudaDevice,
    kernels: Arc<Kernels>,
    /// Products (`G`).
    compute: Arc<CudaStream>,
    /// Transfers (`Y`).
    transfer: Arc<CudaStream>,
    /// Serves `compute`: its cuBLAS handle and kernels' scratch.
    scratch: Scratch,
    /// `b` received, then the result part, then (quantized weights) the weights as f16.
    memory: WorkMemory,
    /// A chunk of `b` arrived (recorded on `Y`).
    received: CudaEvent,
    /// Chunk `i`'s product is done (recorded on `G`), one event per chunk.
    computed: Vec<CudaEvent>,
}

impl Peer {
    /// At least `count` `computed` events.
    fn ensure_events(&mut self, count: usize) -> Result<()> {
        while self.computed.len() < count {
            let event = self.device.context().new_event(None).map_err(fail(self.device, "creating an event"))?;
            self.computed.push(event);
        }
        Ok(())
    }
}

fn fail(device: &'static CudaDevice, what: &'static str) -> impl Fn(cudarc::driver::DriverError) -> Error {
    move |e| driver::error(device.name(), what, e)
}

/// A stream of the highest priority on `device`, for transfers: NCCL's kernels and the
/// conversions run on SMs, and a product launched earlier on another stream would otherwise
/// keep every SM until it ends, holding the pipeline's transfers back.
fn transfer_stream(device: &'static CudaDevice) -> Result<Arc<CudaStream>> {
    let ctx = device.context();
    ctx.bind_to_thread().map_err(fail(device, "binding the context"))?;
    let (_, highest) =
        cudarc::driver::result::stream::get_priority_range().map_err(fail(device, "asking for stream priorities"))?;
    ctx.new_stream_with_priority(highest).map_err(fail(device, "creating a split's transfer stream"))
}

impl Runtime {
    fn new(split: &SplitBufferType) -> Result<Runtime> {
        let device = split.main_device();
        let ctx = device.context();
        let stream = transfer_stream(device)?;
        let event = || ctx.new_event(None).map_err(fail(device, "creating an event"));
        let main = Main {
            device,
            kernels: device.kernels()?,
            scratch: Scratch::new(&stream)?,
            stream,
            copies: transfer_stream(device)?,
            memory: WorkMemory::new(ctx.clone(), device.name().into()),
            forked: event()?,
            gathered: event()?,
            done: event()?,
        };
        let mut peers = Vec::new();
        for &device in &split.devices()[1..] {
            let ctx = device.context();
            let stream = || ctx.new_stream().map_err(fail(device, "creating a split's stream"));
            let event = || ctx.new_event(None).map_err(fail(device, "creating an event"));
            let compute = stream()?;
            let scratch = Scratch::new(&compute)?;
            peers.push(Peer {
                device,
                kernels: device.kernels()?,
                scratch,
                compute,
                transfer: transfer_stream(device)?,
                memory: WorkMemory::new(ctx.clone(), device.name().into()),
                received: event()?,
                computed: Vec::new(),
            });
        }
        Ok(Runtime { main, peers, comms: None })
    }
}

/// How many steps a chunk's result travels back after the chunk went out: the activation
/// of chunk `s + 1` arrives while chunk `s` is multiplied, and the result of chunk `s - 1`
/// leaves meanwhile, so no product waits for a transfer in steady state.
const LAG: usize = 2;

/// The relative widths of the column chunks: `TESSERA_CUDA_SPLIT_CHUNKS` if set, either a
/// count of even chunks (`8`) or a list of relative widths (`1,3,8,3,1`), at most 64 of 1 to
/// 64 each; else one chunk for at most 8 columns, and otherwise [`RAMP`] (fewer chunks where
/// there are too few columns for it).
fn chunk_widths(n: usize) -> Vec<usize> {
    let set = std::env::var("TESSERA_CUDA_SPLIT_CHUNKS").ok().and_then(|v| parse_widths(&v));
    match set {
        Some(w) => w,
        None if n <= kernels::MMV_MAX_COLS as usize => vec![1],
        None => {
            let even = n.div_ceil(512).clamp(1, RAMP.len());
            if even < RAMP.len() {
                vec![1; even]
            } else {
                RAMP.to_vec()
            }
        }
    }
}

/// Default chunk widths (relative): a narrow first chunk, so that the peers start early, and
/// a narrow last one, so that little is left to travel back once the products end; wide
/// chunks between, where the products run at their best. On two H200s (16384 x 16384 f16
/// times 4096 columns, over the copy engines) this gave 1.82x one GPU, against 1.75x for
/// eight even chunks, 1.79x for `1,2,2,1` and 1.77x for four even chunks.
const RAMP: [usize; 5] = [1, 3, 8, 3, 1];

/// `"8"` is eight chunks of one width, `"1,3,8"` three chunks of those relative widths.
fn parse_widths(text: &str) -> Option<Vec<usize>> {
    let numbers: Vec<usize> = text.split(',').map(|x| x.trim().parse::<usize>().ok()).collect::<Option<_>>()?;
    match numbers[..] {
        [count] if (1..=64).contains(&count) => Some(vec![1; count]),
        _ if numbers.len() <= 64 && numbers.iter().all(|w| (1..=64).contains(w)) => Some(numbers),
        _ => None,
    }
}

/// SMs of each GPU left to NCCL while the products run: `TESSERA_CUDA_SPLIT_NCCL_SMS` if set
/// (0 to 64), else 24. cuBLAS's products on Hopper keep every SM they are given until they
/// end, so without SMs of their own the transfers would wait for each product. On two H200s
/// (16384x16384 f16 times 4096 columns) 4, 8 and 16 gave 1.29x one GPU, 24 gave 1.41x.
fn nccl_sms() -> usize {
    let set = std::env::var("TESSERA_CUDA_SPLIT_NCCL_SMS").ok().and_then(|v| v.trim().parse::<usize>().ok());
    set.filter(|&s| s <= 64).unwrap_or(24)
}

/// The SMs a split's products may use on `device`: all but [`nccl_sms`].
fn product_sms(device: &'static CudaDevice) -> Result<usize> {
    let sms = device
        .context()
        .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        .map_err(fail(device, "asking for the SM count"))?;
    Ok(usize::try_from(sms).unwrap_or(0).saturating_sub(nccl_sms()).max(1))
}

/// `n` columns cut into consecutive ranges of the relative `widths`; where `n` is too small
/// for some of them, their empty ranges are left out.
fn chunks(n: usize, widths: &[usize]) -> Vec<Range<usize>> {
    let total: usize = widths.iter().sum::<usize>().max(1);
    let mut start = 0;
    let mut sum = 0;
    widths
        .iter()
        .map(|w| {
            sum += w;
            let end = n * sum / total;
            let range = start..end;
            start = end;
            range
        })
        .filter(|r| !r.is_empty())
        .collect()
}

/// The type `b` travels in and the peers multiply in: what the single-GPU product would
/// convert `b` to, f32 where it reads `b` as it is (at most 8 columns, f32 weights).
fn wire_type(weights: DType, n: usize) -> DType {
    match weights {
        _ if n <= kernels::MMV_MAX_COLS as usize => DType::F32,
        DType::F32 => DType::F32,
        DType::BF16 => DType::BF16,
        _ => DType::F16,
    }
}

fn bytes(dims: &[usize]) -> Result<usize> {
    dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d)).ok_or(Error::Overflow { what: "split product size" })
}

fn aligned(n: usize) -> Result<usize> {
    n.checked_next_multiple_of(256).ok_or(Error::Overflow { what: "split product size" })
}

fn packed(data: u64, dtype: DType, ne: [usize; 2]) -> Result<TensorArg> {
    let nb = contiguous_strides(dtype, [ne[0], ne[1], 1, 1])?;
    Ok(TensorArg::from_parts(data, [ne[0], ne[1], 1, 1], nb))
}

/// Rows `rows` of `dst` (f32, `[M, N]`, packed values, column stride `dst.nb[1]`).
fn dst_rows(dst: &TensorArg, rows: &Range<usize>) -> TensorArg {
    TensorArg {
        data: dst.data + 4 * rows.start as u64,
        ne: [rows.len() as i64, dst.ne[1], 1, 1],
        nb: [4, dst.nb[1], dst.nb[1] * dst.ne[1], dst.nb[1] * dst.ne[1]],
    }
}

/// Columns `cols` of `t` (a matrix).
fn columns(t: &TensorArg, cols: &Range<usize>) -> TensorArg {
    TensorArg {
        data: t.data + t.nb[1] as u64 * cols.start as u64,
        ne: [t.ne[0], cols.len() as i64, 1, 1],
        nb: [t.nb[0], t.nb[1], t.nb[1] * cols.len() as i64, t.nb[1] * cols.len() as i64],
    }
}

/// The part's rows as a matrix of the weight type.
fn part_matrix(part: &Part, dtype: DType, k: usize) -> Result<TensorArg> {
    packed(part.address, dtype, [k, part.rows.len()])
}

/// Where one peer's data lie in its work memory and the main GPU's.
struct PeerLayout {
    rank: usize,
    rows: Range<usize>,
    /// `b` received (`K x N` of the wire type).
    b: u64,
    /// The result part (`rows x N` f32).
    result: u64,
    /// Quantized weights converted to f16 (0 when not needed).
    weights16: u64,
    /// The main GPU's copy of the result part (through NCCL only; unused over the copy engines).
    gathered: u64,
}

/// Queues `dst = a x b` on the main device's stream `stream` (`kernels`, `scratch`: the
/// backend's), where `a` lives in a split buffer whose main device is `device`, and `b` and
/// `dst` in `device`'s memory (addresses resolved by the backend).
pub(crate) fn run(
    device: &'static CudaDevice,
    stream: &Arc<CudaStream>,
    kernels: &Kernels,
    scratch: &mut Scratch,
    a: &TensorView,
    b: TensorArg,
    dst: TensorArg,
) -> Result<()> {
    let split = a
        .data
        .buffer
        .as_any()
        .downcast_ref::<SplitBuffer>()
        .ok_or_else(|| kernels::backend_error("a split product's weight is not in a split buffer"))?;
    let ty = split.split_type();
    if !std::ptr::eq(ty.main_device(), device) {
        return Err(Error::IncompatibleBuffer {
            tensor: a.label(),
            buffer: tessera_core::BufferType::name(ty).into(),
            backend: device.name().into(),
        });
    }
    let (at, [k, m]) = (split.dtype(), split.shape());
    let n = usize::try_from(b.ne[1]).unwrap_or(0);
    let shapes_ok = b.ne == [k as i64, n as i64, 1, 1] && dst.ne == [m as i64, n as i64, 1, 1] && dst.nb[0] == 4;
    if !shapes_ok {
        return Err(Error::InvalidParam {
            op: "MUL_MAT",
            message: format!("a split product of {at} [{k}, {m}] x {:?} -> {:?}: shapes do not match", b.ne, dst.ne),
        });
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    let parts = split.parts();
    let product = |kernels: &Kernels, stream: &Arc<CudaStream>, scratch: &mut Scratch, w, b, d| {
        kernels::launch(kernels, stream, scratch, Op::MulMat, (d, DType::F32), &[Some((w, at)), Some((b, DType::F32))])
    };
    let peers: Vec<usize> = (1..parts.len()).filter(|&d| !parts[d].rows.is_empty()).collect();
    if k == 0 {
        // No weights to read: the product is zeros, written by the main GPU alone.
        let none = TensorArg::contiguous(0, at, [0, m as i64, 1, 1])?;
        return product(kernels, stream, scratch, none, b, dst);
    }
    if peers.is_empty() {
        // Everything on the main GPU (a split over one device): the unsplit product.
        let main = &parts[0];
        return product(kernels, stream, scratch, part_matrix(main, at, k)?, b, dst_rows(&dst, &main.rows));
    }

    let mut guard = ty.runtime.lock().map_err(|_| kernels::backend_error("a split's runtime is poisoned"))?;
    if guard.is_none() {
        *guard = Some(Runtime::new(ty)?);
    }
    let Some(rt) = guard.as_mut() else { return Err(kernels::backend_error("a split's runtime is missing")) };
    let copy_engines = copy_engines(ty.devices());
    if rt.comms.is_none() && !copy_engines {
        rt.comms = Some(Comms::new(ty.devices())?);
    }

    let wire = wire_type(at, n);
    let es = wire.block_bytes();
    let direct = wire == DType::F32 && b.nb[0] == 4 && b.nb[1] == 4 * k as i64;
    let col_bytes = bytes(&[k, es])?;
    let b_bytes = aligned(bytes(&[k, n, es])?)?;

    // Work memory: on the main GPU, `b` converted (unless sent as it is) then, through NCCL,
    // every peer's result part (over the copy engines results land in `dst` itself); on each
    // peer, `b`, its result part, and f16 weights if it converts them.
    let mut main_need = if direct { 0 } else { b_bytes };
    let mut layouts = Vec::with_capacity(peers.len());
    for &rank in &peers {
        let rows = parts[rank].rows.clone();
        let result_bytes = aligned(bytes(&[rows.len(), n, 4])?)?;
        let weights16 = if at.is_quantized() && wire == DType::F16 { aligned(bytes(&[k, rows.len(), 2])?)? } else { 0 };
        let peer = &mut rt.peers[rank - 1];
        let total = b_bytes + result_bytes + weights16;
        let base = peer.memory.reserve(total, &[&peer.compute, &peer.transfer])?;
        layouts.push(PeerLayout {
            rank,
            rows,
            b: base,
            result: base + b_bytes as u64,
            weights16: if weights16 > 0 { base + (b_bytes + result_bytes) as u64 } else { 0 },
            gathered: main_need as u64,
        });
        if !copy_engines {
            main_need += result_bytes;
        }
    }
    let main_base = rt.main.memory.reserve(main_need, &[stream, &rt.main.stream, &rt.main.copies])?;
    for l in &mut layouts {
        l.gathered += main_base;
    }
    let send_base = if direct { b.data } else { main_base };

    let Runtime { main, peers: peer_state, comms } = rt;
    let comms = match (copy_engines, comms.as_ref()) {
        (true, _) => None,
        (false, Some(c)) => Some(c),
        (false, None) => return Err(kernels::backend_error("NCCL is not set up")),
    };
    let md = main.device;

    // Fork: X starts where S is, after the previous split product (any stream of this GPU).
    stream.wait(&main.done).map_err(fail(md, "waiting for an event"))?;
    main.forked.record(stream).map_err(fail(md, "recording an event"))?;
    main.stream.wait(&main.forked).map_err(fail(md, "waiting for an event"))?;
    main.copies.wait(&main.forked).map_err(fail(md, "waiting for an event"))?;

    // The main GPU's own rows: the single-GPU product on S. Over the copy engines nothing
    // else needs its SMs, so it is one product of every column (once the last chunk is
    // converted, where it takes the converted chunks): one wide product runs faster than
    // several narrow ones. Through NCCL it goes chunk by chunk with the transfers (below),
    // so that the SMs free up between chunks for NCCL's kernels.
    let own = &parts[0];
    let own_rows = (!own.rows.is_empty()).then(|| (part_matrix(own, at, k), dst_rows(&dst, &own.rows)));
    // Float weights of the wire type multiply the chunks converted for the peers.
    let own_takes_wire = at == wire && !direct && dst.nb[0] == 4 && dst.nb[1] % 4 == 0;
    if !copy_engines {
        scratch.set_sm_target(product_sms(md)?)?;
    }
    // The peers' products leave SMs to NCCL's kernels too; over the copy engines they take all.
    for l in &layouts {
        let p = &mut peer_state[l.rank - 1];
        p.scratch.set_sm_target(if copy_engines { 0 } else { product_sms(p.device)? })?;
    }
    let mut queue = || -> Result<()> {
        // Quantized weights: each peer converts its part to f16 once, before its first product.
        for l in layouts.iter().filter(|l| l.weights16 != 0) {
            let p = &mut peer_state[l.rank - 1];
            let (src, to) = (part_matrix(&parts[l.rank], at, k)?, packed(l.weights16, DType::F16, [k, l.rows.len()])?);
            kernels::launch(
                &p.kernels,
                &p.compute,
                &mut p.scratch,
                Op::Cpy,
                (to, DType::F16),
                &[Some((src, at)), Some((to, DType::F16))],
            )?;
        }

        let cols = chunks(n, &chunk_widths(n));
        for l in &layouts {
            peer_state[l.rank - 1].ensure_events(cols.len())?;
        }
        let b_matrix = TensorArg { data: b.data, ne: b.ne, nb: b.nb };
        for step in 0..cols.len() + LAG {
            let out = cols.get(step);
            let back_index = step.checked_sub(LAG).filter(|&s| s < cols.len());
            let back = back_index.and_then(|s| cols.get(s));
            if out.is_none() && back.is_none() {
                continue; // a single chunk: nothing travels while it is multiplied
            }
            // The columns the main GPU's own rows are multiplied by at this step.
            let own_cols = match out {
                Some(c) if !copy_engines => Some(c.clone()),
                Some(_) if own_takes_wire => (step + 1 == cols.len()).then_some(0..n),
                Some(_) => (step == 0).then_some(0..n),
                None => None,
            };
            // Chunk `step` of b in the wire type, on X (and, where the main GPU's rows take it
            // as they are, S waits for it rather than converting the chunk again).
            if let (Some(c), false) = (out, direct) {
                let to = packed(main_base + (col_bytes * c.start) as u64, wire, [k, c.len()])?;
                let from = columns(&b_matrix, c);
                kernels::launch(
                    &main.kernels,
                    &main.stream,
                    &mut main.scratch,
                    Op::Cpy,
                    (to, wire),
                    &[Some((from, DType::F32)), Some((to, wire))],
                )?;
                let own_waits = own_takes_wire && own_cols.is_some();
                if own_waits || comms.is_none() {
                    let converted = main.stream.record_event(None).map_err(fail(md, "recording an event"))?;
                    if own_waits {
                        stream.wait(&converted).map_err(fail(md, "waiting for an event"))?;
                    }
                    if comms.is_none() {
                        main.copies.wait(&converted).map_err(fail(md, "waiting for an event"))?;
                    }
                }
            }
            // A result goes back only once its product is done.
            if let Some(i) = back_index {
                for l in &layouts {
                    let p = &peer_state[l.rank - 1];
                    let done = p.computed.get(i).ok_or_else(|| kernels::backend_error("a chunk's event is missing"))?;
                    p.transfer.wait(done).map_err(fail(p.device, "waiting for an event"))?;
                    if comms.is_some() {
                        // X waits too (an event of another GPU), so that its side of the
                        // transfer does not hold SMs of the main GPU while the peer multiplies.
                        main.stream.wait(done).map_err(fail(md, "waiting for a peer's event"))?;
                    }
                }
            }
            if comms.is_none() {
                copy_step(main, peer_state, &layouts, out, back, col_bytes, send_base, &dst)?;
            }
            comms
                .map(|comms| {
                    comms.group(|g| {
                        for l in &layouts {
                            let p = &peer_state[l.rank - 1];
                            if let Some(c) = out {
                                let (at_byte, len) = ((col_bytes * c.start) as u64, col_bytes * c.len());
                                // SAFETY: the chunk lies inside `b` (sent as it is) or the converted copy
                                // in the main GPU's work memory, written earlier on X; the peer's work
                                // memory holds all of `b` in the wire type, and its product of this chunk
                                // waits for the arrival (an event recorded after the group).
                                unsafe {
                                    g.send(0, l.rank, send_base + at_byte, len, &main.stream)?;
                                    g.recv(l.rank, 0, l.b + at_byte, len, &p.transfer)?;
                                }
                            }
                            if let Some(c) = back {
                                let rows = l.rows.len();
                                let (at_byte, len) = ((4 * rows * c.start) as u64, 4 * rows * c.len());
                                // SAFETY: the result chunk lies in the peer's work memory, computed on G
                                // before Y waited for its `computed` event; the main GPU's copy lies in its work
                                // memory, read by X only after this transfer.
                                unsafe {
                                    g.send(l.rank, 0, l.result + at_byte, len, &p.transfer)?;
                                    g.recv(0, l.rank, l.gathered + at_byte, len, &main.stream)?;
                                }
                            }
                        }
                        Ok(())
                    })
                })
                .transpose()?;
            if let Some(c) = back {
                main.device.context().bind_to_thread().map_err(fail(md, "binding the context"))?;
                for l in layouts.iter().filter(|_| comms.is_some()) {
                    gather(&main.stream, l.gathered, l, c, &dst).map_err(fail(md, "copying a result part"))?;
                }
            }
            if let (Some(c), Some((w, d))) = (&own_cols, &own_rows) {
                if own_takes_wire {
                    let dims = |v: usize| i64::try_from(v).map_err(|_| Error::Overflow { what: "split product size" });
                    let (rows, at_col) = (own.rows.len(), dst.nb[1] as u64 * c.start as u64);
                    kernels::gemm_packed(
                        scratch,
                        wire,
                        (dims(rows)?, dims(c.len())?, dims(k)?),
                        (own.address, dims(k)?),
                        (main_base + (col_bytes * c.start) as u64, dims(k)?),
                        (dst.data + 4 * own.rows.start as u64 + at_col, dims(dst.nb[1] as usize / 4)?),
                    )?;
                } else {
                    let w = w.as_ref().map_err(|e| e.clone())?;
                    product(kernels, stream, scratch, *w, columns(&b, c), columns(d, c))?;
                }
            }
            if let Some(c) = out {
                for l in &layouts {
                    let p = &mut peer_state[l.rank - 1];
                    if comms.is_some() {
                        p.received.record(&p.transfer).map_err(fail(p.device, "recording an event"))?;
                        p.compute.wait(&p.received).map_err(fail(p.device, "waiting for an event"))?;
                    }
                    peer_product(p, l, &parts[l.rank], at, wire, k, c)?;
                    let done =
                        p.computed.get(step).ok_or_else(|| kernels::backend_error("a chunk's event is missing"))?;
                    done.record(&p.compute).map_err(fail(p.device, "recording an event"))?;
                }
            }
        }
        if comms.is_none() {
            // Every result part is in `dst` once each peer's transfer stream is done, and the
            // work memory is free again once the copies to the peers are.
            let sent = main.copies.record_event(None).map_err(fail(md, "recording an event"))?;
            main.stream.wait(&sent).map_err(fail(md, "waiting for an event"))?;
            for l in &layouts {
                let p = &peer_state[l.rank - 1];
                let landed = p.transfer.record_event(None).map_err(fail(p.device, "recording an event"))?;
                main.stream.wait(&landed).map_err(fail(md, "waiting for an event"))?;
            }
        }
        Ok(())
    };
    let queued = queue();
    // The backend's other products use every SM again, whatever happened.
    let restored = scratch.set_sm_target(0);
    queued?;
    restored?;

    // Join: S goes on once every result part is in `dst`.
    main.gathered.record(&main.stream).map_err(fail(md, "recording an event"))?;
    stream.wait(&main.gathered).map_err(fail(md, "waiting for an event"))?;
    main.done.record(stream).map_err(fail(md, "recording an event"))?;
    Ok(())
}

/// Whether a split's transfers go over the GPUs' copy engines (`cuMemcpyPeerAsync`, every
/// pair with peer access) rather than through NCCL: copies on the copy engines take no SMs
/// from the products they overlap, where NCCL's kernels do. `TESSERA_CUDA_SPLIT_TRANSPORT`
/// `nccl` or `copy` forces one (`copy` still needs peer access).
fn copy_engines(devices: &[&'static CudaDevice]) -> bool {
    let asked = std::env::var("TESSERA_CUDA_SPLIT_TRANSPORT").unwrap_or_default();
    let Some((main, peers)) = devices.split_first() else { return false };
    asked.trim() != "nccl" && peers.iter().all(|p| main.peer_access(p) && p.peer_access(main))
}

/// One pipeline step over the copy engines: chunk `out` of `b` from the main GPU to every peer
/// (on C, after its conversion; the peer's product then waiting for it), and each peer's result part of chunk `back`
/// straight into its rows of `dst` (on the peer's Y, which waited for the product; X waits
/// for the last of them only, when the product ends, so that its conversions for the next
/// chunks never wait for a peer).
#[allow(clippy::too_many_arguments)]
fn copy_step(
    main: &Main,
    peers: &[Peer],
    layouts: &[PeerLayout],
    out: Option<&Range<usize>>,
    back: Option<&Range<usize>>,
    col_bytes: usize,
    send_base: u64,
    dst: &TensorArg,
) -> Result<()> {
    let md = main.device;
    let main_ctx = md.context().cu_ctx();
    for l in layouts {
        let p = &peers[l.rank - 1];
        let peer_ctx = p.device.context().cu_ctx();
        if let Some(c) = out {
            let (at_byte, len) = ((col_bytes * c.start) as u64, col_bytes * c.len());
            md.context().bind_to_thread().map_err(fail(md, "binding the context"))?;
            // SAFETY: the chunk lies inside `b` or its converted copy in the main GPU's work
            // memory (written earlier on X); the peer's work memory holds all of `b` in the
            // wire type; both contexts are the GPUs' primary contexts, alive for the process.
            unsafe {
                cudarc::driver::result::memcpy_peer_async(
                    peer_ctx,
                    l.b + at_byte,
                    main_ctx,
                    send_base + at_byte,
                    len,
                    main.copies.cu_stream(),
                )
            }
            .map_err(fail(md, "copying a chunk to a peer"))?;
            let arrived = main.copies.record_event(None).map_err(fail(md, "recording an event"))?;
            p.compute.wait(&arrived).map_err(fail(p.device, "waiting for an event"))?;
        }
        if let Some(c) = back {
            p.device.context().bind_to_thread().map_err(fail(p.device, "binding the context"))?;
            gather(&p.transfer, l.result, l, c, dst).map_err(fail(p.device, "copying a result part back"))?;
        }
    }
    Ok(())
}

/// Queues on the peer's product stream its rows times chunk `c` of `b`.
fn peer_product(
    p: &mut Peer,
    l: &PeerLayout,
    part: &Part,
    at: DType,
    wire: DType,
    k: usize,
    c: &Range<usize>,
) -> Result<()> {
    let rows = l.rows.len();
    let es = wire.block_bytes();
    let b_chunk = l.b + (k * es * c.start) as u64;
    let result = l.result + (4 * rows * c.start) as u64;
    if wire == DType::F32 {
        // f32 activations: the single-GPU product of the part (matrix-vector kernels or a
        // GEMM, whichever it picks).
        let (w, x, d) = (
            part_matrix(part, at, k)?,
            packed(b_chunk, DType::F32, [k, c.len()])?,
            packed(result, DType::F32, [rows, c.len()])?,
        );
        return kernels::launch(
            &p.kernels,
            &p.compute,
            &mut p.scratch,
            Op::MulMat,
            (d, DType::F32),
            &[Some((w, at)), Some((x, DType::F32))],
        );
    }
    let weights = if l.weights16 != 0 { l.weights16 } else { part.address };
    let dims = |v: usize| i64::try_from(v).map_err(|_| Error::Overflow { what: "split product size" });
    kernels::gemm_packed(
        &mut p.scratch,
        wire,
        (dims(rows)?, dims(c.len())?, dims(k)?),
        (weights, dims(k)?),
        (b_chunk, dims(k)?),
        (result, dims(rows)?),
    )
}

/// Queues on `stream` (the main GPU's, its context current) the copy of one peer's result
/// part of columns `c` from the main GPU's work memory into its rows of `dst`.
fn gather(
    stream: &CudaStream,
    part: u64,
    l: &PeerLayout,
    c: &Range<usize>,
    dst: &TensorArg,
) -> std::result::Result<(), cudarc::driver::DriverError> {
    let width = 4 * l.rows.len();
    let pitch = dst.nb[1] as usize;
    let copy = sys::CUDA_MEMCPY2D {
        srcXInBytes: 0,
        srcY: 0,
        srcMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
        srcHost: std::ptr::null(),
        srcDevice: part + (width * c.start) as u64,
        srcArray: std::ptr::null_mut(),
        srcPitch: width,
        dstXInBytes: 0,
        dstY: 0,
        dstMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
        dstHost: std::ptr::null_mut(),
        dstDevice: dst.data + (4 * l.rows.start + pitch * c.start) as u64,
        dstArray: std::ptr::null_mut(),
        dstPitch: pitch,
        WidthInBytes: width,
        Height: c.len(),
    };
    // SAFETY: the source is a result part (`rows x |c|` packed f32 at `part`: received in the
    // main GPU's work memory, or where the peer computed it), the destination rows `l.rows`
    // of columns `c` of `dst`, inside it (the shapes were checked); the current context is
    // `stream`'s and reaches both (its own memory, or its peer's with peer access enabled).
    unsafe { sys::cuMemcpy2DAsync_v2(&copy, stream.cu_stream()) }.result()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_cut_into_chunks_of_the_given_widths() {
        assert_eq!(chunks(4096, &[1; 8])[1], 512..1024);
        assert_eq!(chunks(7, &[1]), vec![0..7]);
        assert_eq!(chunks(1300, &[1, 1, 1]), vec![0..433, 433..866, 866..1300]);
        assert_eq!(chunks(3, &[1, 1, 1]), vec![0..1, 1..2, 2..3]);
        assert_eq!(chunks(4096, &RAMP), vec![0..256, 256..1024, 1024..3072, 3072..3840, 3840..4096]);
        // Fewer columns than chunks: no empty chunk.
        assert_eq!(chunks(2, &[1, 1, 1]), vec![0..1, 1..2]);
    }

    #[test]
    fn chunk_widths_are_a_count_or_a_list() {
        assert_eq!(parse_widths("3"), Some(vec![1, 1, 1]));
        assert_eq!(parse_widths(" 1, 3 ,8"), Some(vec![1, 3, 8]));
        assert_eq!(parse_widths("0"), None);
        assert_eq!(parse_widths("1,0"), None);
        assert_eq!(parse_widths("x"), None);
        assert_eq!(parse_widths(""), None);
    }

    #[test]
    fn activations_travel_in_the_type_the_product_takes() {
        assert_eq!(wire_type(DType::F16, 4096), DType::F16);
        assert_eq!(wire_type(DType::Q4_0, 4096), DType::F16);
        assert_eq!(wire_type(DType::BF16, 9), DType::BF16);
        assert_eq!(wire_type(DType::F32, 4096), DType::F32);
        assert_eq!(wire_type(DType::F16, 8), DType::F32);
    }
}
