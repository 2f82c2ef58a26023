//! A CUDA backend: one stream on one GPU.

use std::any::Any;
use std::ops::Range;
use std::sync::Arc;

use cudarc::driver::{result, sys, CudaGraph, CudaStream};
use tessera_core::tensor::MAX_SRC;
use tessera_core::{
    Backend, BufferBase, Device, Error, Event, Graph, NodeByNode, Op, Program, Result, SplitRef, TensorData, TensorId,
    TensorView,
};

use crate::device::CudaDevice;
use crate::driver;
use crate::event::CudaEvent;
use crate::fusion::{self, Fusion, Projection};
use crate::host_weights::HostWeights;
use crate::kernels::{self, Kernels, Operand, Scratch, TensorArg};
use crate::profile::{self, Profile};
use crate::split;

/// A stream on a GPU: transfers, kernels and events run on it in order.
pub struct CudaBackend {
    device: &'static CudaDevice,
    stream: Arc<CudaStream>,
    kernels: Arc<Kernels>,
    scratch: Scratch,
    /// Node times, when `TESSERA_CUDA_PROFILE` asks for them.
    profile: Option<Profile>,
    /// Host weights this stream copies from directly.
    host_weights: HostWeights,
}

impl CudaBackend {
    pub(crate) fn new(device: &'static CudaDevice) -> Result<CudaBackend> {
        let ctx = device.context();
        let stream = ctx.new_stream().map_err(|e| driver::error(device.name(), "creating a stream", e))?;
        let kernels = device.kernels()?;
        let scratch = Scratch::new(&stream)?;
        let profile = profile::enabled().then(Profile::default);
        let host_weights = HostWeights::new(ctx.clone());
        Ok(CudaBackend { device, stream, kernels, scratch, profile, host_weights })
    }

    fn err(&self, what: &str, e: cudarc::driver::DriverError) -> Error {
        driver::error(self.device.name(), what, e)
    }

    fn bind(&self) -> Result<()> {
        self.device.context().bind_to_thread().map_err(|e| self.err("binding the context", e))
    }

    /// The device address of `data` plus `offset`, if it is this GPU's memory.
    fn device_address(&self, data: &TensorData, offset: usize, len: usize) -> Result<u64> {
        tessera_core::buffer::check_range(&*data.buffer, data.offset + offset, len)?;
        match data.buffer.base() {
            BufferBase::Device(base) if self.device.supports_buffer_type(data.buffer.buffer_type()) => {
                Ok(base + (data.offset + offset) as u64)
            }
            _ => Err(Error::IncompatibleBuffer {
                tensor: String::new(),
                buffer: data.buffer.buffer_type().name().into(),
                backend: self.device.name().into(),
            }),
        }
    }

    /// A tensor as the kernels take it: its device address, shape and strides.
    fn arg(&self, view: &TensorView) -> Result<TensorArg> {
        let data = self.device_address(&view.data, 0, view.nbytes()).map_err(|e| match e {
            Error::IncompatibleBuffer { buffer, backend, .. } => {
                Error::IncompatibleBuffer { tensor: view.label(), buffer, backend }
            }
            e => e,
        })?;
        Ok(TensorArg::new(data, view))
    }

    /// Node `id` as the kernels take it (`None` for views and leaves, which need no kernel);
    /// an error for a node this device does not run.
    fn operands(&self, graph: &Graph, id: TensorId) -> Result<Option<Launch>> {
        let op = graph.tensor(id)?.op();
        if op == Op::None || op.is_view() {
            return Ok(None);
        }
        if !self.device.supports_op(graph, id) {
            return Err(Error::Unsupported { backend: self.name().into(), op: op.name(), tensor: graph.label(id) });
        }
        let node = graph.node_view(id)?;
        let dst = (self.arg(&node.dst)?, node.dst.dtype);
        let mut srcs = [None; MAX_SRC];
        for (slot, view) in node.src.iter().enumerate() {
            if let Some(view) = view {
                srcs[slot] = Some((self.arg(view)?, view.dtype));
            }
        }
        Ok(Some((op, dst, srcs)))
    }

    fn event<'e>(&self, event: &'e dyn Event) -> Result<&'e CudaEvent> {
        event.as_any().downcast_ref::<CudaEvent>().ok_or_else(|| Error::Backend {
            backend: self.device.name().into(),
            message: "the event belongs to another kind of device".into(),
        })
    }
}

/// A node as `kernels::launch` takes it: op, destination, sources by slot.
type Launch = (Op, Operand, [Option<Operand>; MAX_SRC]);

/// A split captured as a CUDA graph: replayed with one launch.
struct CapturedSplit {
    graph: CudaGraph,
}

// SAFETY: a CUDA graph must not be used from two threads at once; the program is reached only
// through `&mut` of the backend that owns it (the scheduler's `run`), which serialises its use.
unsafe impl Send for CapturedSplit {}

impl Program for CapturedSplit {
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// A split launched node by node with its fusions, uncaptured, so that a profile
/// (`TESSERA_CUDA_PROFILE`) sees every kernel the captured split would run.
struct ProfiledSplit {
    nodes: Range<usize>,
    consumers: Vec<u32>,
}

impl Program for ProfiledSplit {
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// Whether splits are captured as CUDA graphs (`TESSERA_CUDA_GRAPHS=0` turns it off, to run
/// node by node).
fn graphs_enabled() -> bool {
    std::env::var("TESSERA_CUDA_GRAPHS").map_or(true, |v| v.trim() != "0") && !profile::enabled()
}

impl CudaBackend {
    /// Queues the kernels of `graph.nodes()[nodes]`; with the graph's consumer counts, runs of
    /// nodes whose intermediate results nothing else reads are fused ([`fusion`]).
    fn launch_nodes(&mut self, graph: &Graph, nodes: Range<usize>, consumers: Option<&[u32]>) -> Result<()> {
        let ids = graph.nodes().get(nodes.clone()).ok_or_else(|| Error::InvalidParam {
            op: "COMPUTE",
            message: format!("node range {nodes:?} is outside the graph's {} nodes", graph.nodes().len()),
        })?;
        self.bind()?;
        self.scratch.start_run();
        let launched = self.launch_run(graph, ids, consumers);
        self.scratch.end_run();
        launched
    }

    /// Queues `ids` as [`CudaBackend::launch_nodes`] does, inside a scratch run: every node's
    /// result is reported as written, so that an operand converted for one product (quantized,
    /// packed or split) is reused by the next only while its memory is unchanged.
    fn launch_run(&mut self, graph: &Graph, ids: &[TensorId], consumers: Option<&[u32]>) -> Result<()> {
        let mut i = 0;
        while i < ids.len() {
            if split::mul_mat::is_split_mul_mat(graph, ids[i]) {
                // Its weight is no memory of this GPU's alone: only the result is reported.
                let dst = self.launch_split_mul_mat(graph, ids[i])?;
                self.scratch.written(dst);
                i += 1;
                continue;
            }
            // A fusion takes every operand from this GPU's memory: none may read a split weight.
            let fused = consumers.and_then(|c| fusion::find(graph, &ids[i..], c)).filter(|f| {
                !ids[i..(i + f.len()).min(ids.len())].iter().any(|&id| split::mul_mat::reads_split(graph, id))
            });
            if let Some(f) = fused {
                let ctx = self.device.context();
                let start = self.profile.is_some().then(|| Profile::start(ctx, &self.stream)).transpose()?;
                // Reported before the kernel is queued: a fused norm leaves its result converted
                // in the scratch, which a later report of that result would discard. (A fusion
                // never writes what it reads converted.)
                self.written(graph, &ids[i..i + f.len()])?;
                if self.launch_fusion(graph, f, ids.get(i + f.len()).copied())? {
                    if let (Some(profile), Some(start)) = (self.profile.as_mut(), start) {
                        let ne = graph.tensor(ids[i])?.ne();
                        profile.end(ctx, &self.stream, format!("{} {ne:?}", f.name()), start)?;
                    }
                    i += f.len();
                    continue;
                }
            }
            if let Some((op, dst, srcs)) = self.operands(graph, ids[i])? {
                let ctx = self.device.context();
                let start = self.profile.is_some().then(|| Profile::start(ctx, &self.stream)).transpose()?;
                kernels::launch(&self.kernels, &self.stream, &mut self.scratch, op, dst, &srcs)?;
                if let (Some(profile), Some(start)) = (self.profile.as_mut(), start) {
                    profile.end(ctx, &self.stream, profile::label(op, dst, &srcs), start)?;
                }
                self.scratch.written(dst);
            }
            i += 1;
        }
        Ok(())
    }

    /// Reports the results of nodes `ids`, just queued, to the scratch run.
    fn written(&mut self, graph: &Graph, ids: &[TensorId]) -> Result<()> {
        for &id in ids {
            if let Some((_, dst, _)) = self.operands(graph, id)? {
                self.scratch.written(dst);
            }
        }
        Ok(())
    }

    /// Queues a MUL_MAT whose weight is split across GPUs ([`split::mul_mat`]); its result.
    fn launch_split_mul_mat(&mut self, graph: &Graph, id: TensorId) -> Result<Operand> {
        if !self.device.supports_op(graph, id) {
            return Err(Error::Unsupported {
                backend: self.name().into(),
                op: Op::MulMat.name(),
                tensor: graph.label(id),
            });
        }
        let node = graph.node_view(id)?;
        let (b, dst) = (self.arg(node.src(1)?)?, self.arg(&node.dst)?);
        split::mul_mat::run(self.device, &self.stream, &self.kernels, &mut self.scratch, node.src(0)?, b, dst)?;
        Ok((dst, node.dst.dtype))
    }

    /// Queues fusion `f` as one kernel; `false` (nothing queued) when its kernel does not take
    /// the operands. `next` is the node queued after it, if any.
    fn launch_fusion(&mut self, graph: &Graph, f: Fusion, next: Option<TensorId>) -> Result<bool> {
        let (first, last) = match f {
            Fusion::NormAffine { widened, residual, norm, last, .. } => (widened.or(residual).unwrap_or(norm), last),
            Fusion::MulMatBias { gelu, widened, mul_mat, last, .. } => (gelu.or(widened).unwrap_or(mul_mat), last),
            Fusion::FlashAttnHalf { attn, cast } => (attn, cast),
            Fusion::SwiGlu { gate, last, .. } => (gate, last),
            Fusion::TransposedProduct { cont, mul_mat } => (cont, mul_mat),
            Fusion::Embeddings { rows, last, .. } => (rows, last),
            Fusion::Projections { products, .. } => return self.launch_projections(graph, &products),
        };
        // Every node must run here, as it would one by one.
        if !self.device.supports_op(graph, first) || !self.device.supports_op(graph, last) {
            return Ok(false);
        }
        let operand = |id: TensorId| -> Result<Operand> {
            let view = graph.node_view(id)?.dst;
            Ok((self.arg(&view)?, view.dtype))
        };
        let t = graph.tensor(first)?;
        let (Some(src0), dst) = (t.src(0), operand(last)?) else { return Ok(false) };
        match f {
            Fusion::NormAffine { residual, weight, bias, eps, rms, last, .. } => {
                let (w, b) = (operand(weight)?, bias.map(operand).transpose()?);
                // The first node's source: the norm's, or the residual ADD's first (through
                // the widening CPY before it, if any: the kernel reads that CPY's f16 source).
                // With a residual ADD, its second source too.
                let src = operand(src0)?;
                let r = match residual.map(|add| graph.tensor(add).map(|t| t.src(1))).transpose()? {
                    Some(Some(src1)) => Some(operand(src1)?),
                    Some(None) => return Ok(false),
                    None => None,
                };
                // The result left converted too, for the products that read it next: the next
                // node's, where it is a product of this GPU taking the result as its b.
                let next = next.filter(|&id| !split::mul_mat::is_split_mul_mat(graph, id)).and_then(|id| {
                    let t = graph.tensor(id).ok()?;
                    let reads_result = t.op() == Op::MulMat && t.src(1) == Some(last);
                    reads_result.then(|| Some((operand(t.src(0)?).ok()?, operand(id).ok()?))).flatten()
                });
                let scratch = &mut self.scratch;
                kernels::launch_norm_affine(&self.kernels, &self.stream, src, r, dst, eps, rms, w, b, scratch, next)
            }
            Fusion::MulMatBias { gelu, widened, mul_mat, bias_half, bias, gelu_after, .. } => {
                // With a GELU or a widening CPY first, its source is the product's b, taken
                // through it.
                let product = graph.tensor(mul_mat)?;
                let (Some(weights), Some(src1)) = (product.src(0), product.src(1)) else { return Ok(false) };
                let through = gelu.is_some() || widened.is_some();
                let b = if through { src0 } else { src1 };
                if through && !self.device.supports_op(graph, mul_mat) {
                    return Ok(false);
                }
                // A bias rounded to f16 is rounded by the product, from its f32 source.
                let bias = match bias_half {
                    Some(cast) => {
                        graph.tensor(cast)?.src(0).ok_or_else(|| kernels::backend_error("a CPY without a source"))?
                    }
                    None => bias,
                };
                let (a, product_b, b, bias) = (operand(weights)?, operand(src1)?, operand(b)?, operand(bias)?);
                let scratch = &mut self.scratch;
                kernels::launch_mul_mat_bias(
                    &self.kernels,
                    &self.stream,
                    scratch,
                    a,
                    product_b,
                    (b, gelu.is_some()),
                    (dst, gelu_after.is_some()),
                    bias,
                )
            }
            Fusion::FlashAttnHalf { attn, .. } => {
                let Some((op, result, srcs)) = self.operands(graph, attn)? else { return Ok(false) };
                kernels::launch_flash_attn_to_f16(&self.kernels, &self.stream, (op, result, &srcs), dst)
            }
            Fusion::SwiGlu { up, .. } => {
                let (Some(src1), Some(up_weight)) = (t.src(1), graph.tensor(up)?.src(0)) else { return Ok(false) };
                if !self.device.supports_op(graph, up) {
                    return Ok(false);
                }
                let (gate, up, b) = (operand(src0)?, operand(up_weight)?, operand(src1)?);
                kernels::launch_swiglu(&self.kernels, &self.stream, &mut self.scratch, gate, up, b, dst)
            }
            Fusion::TransposedProduct { mul_mat, .. } => {
                // The product reads the CONT's source (src0) where it lies.
                let Some(b) = graph.tensor(mul_mat)?.src(1) else { return Ok(false) };
                kernels::launch_transposed_product(&self.kernels, &self.stream, operand(src0)?, operand(b)?, dst)
            }
            Fusion::Embeddings { row_add, more_rows, weight, bias, eps, rms, .. } => {
                // The first table and indices are the first GET_ROWS's sources (src0 and its
                // src1), the row the ADD's second, the second table and indices the second
                // GET_ROWS's.
                let more = graph.tensor(more_rows)?;
                let (Some(ia), Some(e), Some(c), Some(ic)) =
                    (t.src(1), graph.tensor(row_add)?.src(1), more.src(0), more.src(1))
                else {
                    return Ok(false);
                };
                let (w, b) = (operand(weight)?, bias.map(operand).transpose()?);
                let (first, second) = ((operand(src0)?, operand(ia)?), (operand(c)?, operand(ic)?));
                kernels::launch_embeddings_norm(
                    &self.kernels,
                    &self.stream,
                    first,
                    operand(e)?,
                    second,
                    dst,
                    eps,
                    rms,
                    w,
                    b,
                )
            }
            Fusion::Projections { .. } => Ok(false), // queued before these operands are read
        }
    }

    /// Queues the products of a [`Fusion::Projections`] as one kernel; `false` (nothing queued)
    /// when the kernel does not take them.
    fn launch_projections(&mut self, graph: &Graph, products: &[Option<Projection>]) -> Result<bool> {
        let operand = |id: TensorId| -> Result<Operand> {
            let view = graph.node_view(id)?.dst;
            Ok((self.arg(&view)?, view.dtype))
        };
        let (mut outs, mut b, mut rope) = (Vec::with_capacity(products.len()), None, None);
        for p in products.iter().flatten() {
            // Every node must run here, as it would one by one.
            if ![Some(p.mul_mat), p.rope, p.store].into_iter().flatten().all(|id| self.device.supports_op(graph, id)) {
                return Ok(false);
            }
            let t = graph.tensor(p.mul_mat)?;
            let (Some(a), Some(src1)) = (t.src(0), t.src(1)) else { return Ok(false) };
            b = Some(operand(src1)?);
            if let Some(r) = p.rope {
                let rt = graph.tensor(r)?;
                let (Op::Rope(params), Some(src), Some(pos)) = (rt.op(), rt.src(0), rt.src(1)) else {
                    return Ok(false);
                };
                let ne0 = i64::try_from(graph.tensor(src)?.ne()[0]).unwrap_or(i64::MAX);
                rope = Some(kernels::ProjectionRope { params, pos: operand(pos)?.0, ne0 });
            }
            let (dst, rows) = match p.store {
                Some(s) => {
                    let Some(index) = graph.tensor(s)?.src(1) else { return Ok(false) };
                    (operand(s)?, Some(operand(index)?.0))
                }
                None => (operand(p.rope.unwrap_or(p.mul_mat))?, None),
            };
            outs.push(kernels::ProjectionOut { a: operand(a)?, dst, rows, rope: p.rope.is_some() });
        }
        let Some(b) = b else { return Ok(false) };
        kernels::launch_projections(&self.kernels, &self.stream, &mut self.scratch, &outs, b, rope)
    }

    /// Queues a copy from host weights registered with the driver (`HostWeights`) on this
    /// stream, one piece per registered chunk; `false` for other host memory, which the
    /// scheduler copies itself.
    fn copy_from_host_weights(&mut self, src: &TensorData, dst: &TensorData, len: usize) -> Result<bool> {
        tessera_core::buffer::check_range(&*src.buffer, src.offset, len)?;
        let to = self.device_address(dst, 0, len)?;
        self.bind()?;
        let Some(ranges) = self.host_weights.ranges(src, len) else { return Ok(false) };
        let mut at = to;
        for range in ranges {
            // SAFETY: `range` lies inside the registered buffer's `len` bytes from the source
            // offset (checked above), which `host_weights` keeps alive and nothing writes.
            let bytes = unsafe { std::slice::from_raw_parts(range.start as *const u8, range.len()) };
            // SAFETY: as above; the destination range lies inside this GPU's buffer (checked),
            // piece after piece.
            unsafe { result::memcpy_htod_async(at, bytes, self.stream.cu_stream()) }
                .map_err(|e| self.err("copying host weights", e))?;
            at += range.len() as u64;
        }
        Ok(true)
    }

    /// Records the split's kernels into a CUDA graph. Scratch memory and the cuBLAS handle are
    /// made ready first, since nothing may be allocated while capturing. Nothing runs here: a
    /// split may overwrite its own inputs (memory reused after their last reader), so running
    /// it twice would not give the same results.
    fn capture(&mut self, split: &SplitRef<'_>) -> Result<CudaGraph> {
        let ids = split.graph.nodes().get(split.nodes.clone()).unwrap_or_default();
        let (mut scratch, mut gemm) = (0, false);
        for &id in ids {
            if let Some((op, dst, srcs)) = self.operands(split.graph, id)? {
                scratch = scratch.max(kernels::scratch_bytes(op, dst, &srcs));
                gemm |= op == Op::MulMat;
            }
        }
        if scratch > 0 {
            self.scratch.reserve(scratch)?;
        }
        if gemm {
            self.scratch.blas_lt()?; // cuBLAS's handle and work memory, and cuBLASLt's
        }
        self.stream
            .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(|e| self.err("starting a capture", e))?;
        let launched = self.launch_nodes(split.graph, split.nodes.clone(), Some(split.consumers));
        // The capture ends whatever happened, so that the stream is usable again.
        let captured = self.stream.end_capture(sys::CUgraphInstantiate_flags(0));
        launched?;
        match captured.map_err(|e| self.err("capturing a split", e))? {
            Some(graph) => Ok(graph),
            None => Err(Error::Backend { backend: self.name().into(), message: "the capture recorded nothing".into() }),
        }
    }
}

impl Backend for CudaBackend {
    fn name(&self) -> &str {
        self.device.name()
    }
    fn device(&self) -> &'static dyn Device {
        self.device
    }
    unsafe fn set_tensor_async(&mut self, dst: &TensorData, offset: usize, src: *const u8, len: usize) -> Result<()> {
        let at = self.device_address(dst, offset, len)?;
        self.bind()?;
        // SAFETY: the caller keeps `src` valid and unchanged for `len` bytes until the next
        // synchronize; the destination range lies inside this GPU's buffer (checked above).
        let bytes = unsafe { std::slice::from_raw_parts(src, len) };
        // SAFETY: as above; the copy is ordered on this backend's stream.
        unsafe { result::memcpy_htod_async(at, bytes, self.stream.cu_stream()) }.map_err(|e| self.err("writing", e))
    }
    unsafe fn get_tensor_async(&mut self, src: &TensorData, offset: usize, dst: *mut u8, len: usize) -> Result<()> {
        let at = self.device_address(src, offset, len)?;
        self.bind()?;
        // SAFETY: the caller keeps `dst` valid and untouched for `len` bytes until the next
        // synchronize; the source range lies inside this GPU's buffer (checked above).
        let out = unsafe { std::slice::from_raw_parts_mut(dst, len) };
        // SAFETY: as above; the copy is ordered on this backend's stream.
        unsafe { result::memcpy_dtoh_async(out, at, self.stream.cu_stream()) }.map_err(|e| self.err("reading", e))
    }
    /// Device to device on the same GPU, or from another GPU this one has peer access to
    /// (`cuMemcpyPeerAsync` over NVLink or PCIe). The copy runs on the source backend's
    /// stream, after what it has queued and after what this stream has queued (which may
    /// still read the destination), so that the source cannot reuse its memory before the
    /// bytes have left; this stream then waits for the copy. Between GPUs without peer
    /// access, `false`: the scheduler stages the copy through pinned host memory. From another
    /// backend's host memory: weights only, read in place (`HostWeights`).
    fn copy_tensor_async(
        &mut self,
        src_backend: &mut dyn Backend,
        src: &TensorData,
        dst: &TensorData,
        len: usize,
    ) -> Result<bool> {
        let Some(from) = src_backend.as_any_mut().downcast_mut::<CudaBackend>() else {
            return self.copy_from_host_weights(src, dst, len);
        };
        let same_gpu = std::ptr::eq(from.device, self.device);
        if !same_gpu && !self.device.peer_access(from.device) {
            return Ok(false);
        }
        let (s, d) = (from.device_address(src, 0, len)?, self.device_address(dst, 0, len)?);
        let dst_free = self.stream.record_event(None).map_err(|e| self.err("recording an event", e))?;
        from.stream.wait(&dst_free).map_err(|e| self.err("waiting for an event", e))?;
        from.bind()?;
        if same_gpu {
            // SAFETY: both ranges lie inside this GPU's buffers (checked above).
            unsafe { result::memcpy_dtod_async(d, s, len, from.stream.cu_stream()) }
                .map_err(|e| self.err("copying on the device", e))?;
        } else {
            let (dst_ctx, src_ctx) = (self.device.context().cu_ctx(), from.device.context().cu_ctx());
            // SAFETY: each range lies inside a buffer of its own GPU (checked above), and the
            // contexts are those GPUs' primary contexts, alive for the process.
            unsafe { result::memcpy_peer_async(dst_ctx, d, src_ctx, s, len, from.stream.cu_stream()) }
                .map_err(|e| self.err(&format!("copying from {} to {}", from.device.name(), self.device.name()), e))?;
        }
        let copied = from.stream.record_event(None).map_err(|e| self.err("recording an event", e))?;
        self.stream.wait(&copied).map_err(|e| self.err("waiting for an event", e))?;
        Ok(true)
    }
    fn synchronize(&mut self) -> Result<()> {
        self.stream.synchronize().map_err(|e| self.err("synchronizing", e))?;
        self.profile.as_mut().map_or(Ok(()), Profile::collect)
    }
    fn compute(&mut self, graph: &Graph, nodes: Range<usize>) -> Result<()> {
        self.launch_nodes(graph, nodes, None)
    }
    /// Every run [`fusion::find`] finds, starting at any node: a superset of those
    /// `launch_nodes` fuses (it skips a run's nodes once it fused them).
    fn fused_runs(&self, split: &SplitRef<'_>, run: &mut dyn FnMut(Range<usize>)) {
        let Some(ids) = split.graph.nodes().get(split.nodes.clone()) else { return };
        for i in 0..ids.len() {
            if let Some(f) = fusion::find(split.graph, &ids[i..], split.consumers) {
                let start = split.nodes.start + i;
                run(start..start + f.len().min(ids.len() - i));
            }
        }
    }
    /// Captures the split as a CUDA graph (empty splits and `TESSERA_CUDA_GRAPHS=0` run node by
    /// node).
    fn prepare(&mut self, split: &SplitRef<'_>) -> Result<Box<dyn Program>> {
        let has_kernels = split.graph.nodes().get(split.nodes.clone()).is_some_and(|ids| {
            ids.iter().any(|&id| split.graph.tensor(id).is_ok_and(|t| t.op() != Op::None && !t.op().is_view()))
        });
        if has_kernels && self.profile.is_some() {
            return Ok(Box::new(ProfiledSplit { nodes: split.nodes.clone(), consumers: split.consumers.to_vec() }));
        }
        // A product split across GPUs forks to other streams and GPUs: not capturable.
        let splits_gpus = split
            .graph
            .nodes()
            .get(split.nodes.clone())
            .is_some_and(|ids| ids.iter().any(|&id| crate::split::mul_mat::is_split_mul_mat(split.graph, id)));
        if !has_kernels || !graphs_enabled() || splits_gpus {
            return Ok(Box::new(NodeByNode { nodes: split.nodes.clone() }));
        }
        let graph = self.capture(split)?;
        // SAFETY: the products queued while capturing read the split's operands and scratch,
        // all still allocated; the scratch results they are timed into are their own.
        if unsafe { self.scratch.tune_captured() }? {
            // Their algorithms are chosen now: captured again, the graph replays those.
            drop(graph);
            return Ok(Box::new(CapturedSplit { graph: self.capture(split)? }));
        }
        Ok(Box::new(CapturedSplit { graph }))
    }
    fn run(&mut self, program: &mut dyn Program, graph: &Graph) -> Result<()> {
        if let Some(p) = program.as_any_mut().downcast_mut::<NodeByNode>() {
            let nodes = p.nodes.clone();
            return self.compute(graph, nodes);
        }
        if let Some(p) = program.as_any_mut().downcast_mut::<ProfiledSplit>() {
            // Profiling only: a copy of the counts costs nothing next to the events.
            let (nodes, consumers) = (p.nodes.clone(), p.consumers.clone());
            return self.launch_nodes(graph, nodes, Some(&consumers));
        }
        let Some(p) = program.as_any_mut().downcast_mut::<CapturedSplit>() else {
            return Err(Error::Backend {
                backend: self.name().into(),
                message: "this program was prepared by another kind of backend".into(),
            });
        };
        p.graph.launch().map_err(|e| self.err("launching a captured split", e))
    }
    fn record_event(&mut self, event: &dyn Event) -> Result<()> {
        let e = self.event(event)?;
        e.event.record(&self.stream).map_err(|e| self.err("recording an event", e))
    }
    fn wait_event(&mut self, event: &dyn Event) -> Result<()> {
        let e = self.event(event)?;
        self.stream.wait(&e.event).map_err(|e| self.err("waiting for an event", e))
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

impl Drop for CudaBackend {
    fn drop(&mut self) {
        // Copies from host weights may still be queued: they end before the weights are
        // unregistered (`host_weights` is dropped after this).
        let idle = self.stream.synchronize().is_ok();
        if let Some(profile) = self.profile.as_mut() {
            if idle && profile.collect().is_ok() {
                eprint!("{}", profile.report(self.device.name()));
            }
        }
    }
}
