//! Graphs as plain data: the host encodes the part of a graph a call needs into
//! [`AbiTensor`] descriptors; the plugin decodes them into a [`Graph`] of its own, checking
//! everything (indices, types, shapes, strides, views, memory ranges, and each node against
//! its op's checked constructor) before a kernel sees it.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::marker::PhantomData;
use core::mem::{align_of, size_of};

use super::abi::{AbiBufferRef, AbiGraph, AbiStr, AbiTensor, NO_INDEX};
use crate::buffer::{Buffer, TensorData};
use crate::error::{Error, Result};
use crate::graph::Graph;
use crate::op::Op;
pub use crate::op_code::{decode_op, dtype_from_id, dtype_id, encode_op};
use crate::tensor::{span_bytes, Tensor, TensorFlags, TensorId, MAX_SRC};

fn invalid(message: String) -> Error {
    Error::InvalidParam { op: "PLUGIN_GRAPH", message }
}

fn encode_flags(flags: TensorFlags) -> u32 {
    [TensorFlags::INPUT, TensorFlags::OUTPUT, TensorFlags::PARAM, TensorFlags::PLANNED]
        .iter()
        .enumerate()
        .filter(|(_, f)| flags.contains(**f))
        .fold(0, |bits, (i, _)| bits | 1 << i)
}

fn decode_flags(bits: u32) -> TensorFlags {
    let mut flags = TensorFlags::empty();
    for (i, f) in [TensorFlags::INPUT, TensorFlags::OUTPUT, TensorFlags::PARAM].into_iter().enumerate() {
        if bits & (1 << i) != 0 {
            flags.insert(f);
        }
    }
    flags
}

/// The descriptor of one tensor without graph context (indices unset), for `alloc_size`.
pub fn encode_lone_tensor(t: &Tensor) -> AbiTensor {
    let (op, op_params) = encode_op(t.op);
    AbiTensor {
        size: size_of::<AbiTensor>(),
        dtype: dtype_id(t.dtype),
        op,
        op_params,
        ne: t.ne,
        nb: t.nb,
        src: [NO_INDEX; MAX_SRC],
        view_src: NO_INDEX,
        flags: encode_flags(t.flags),
        view_offset: t.view_offset,
        buffer: NO_INDEX,
        data_offset: 0,
        name: AbiStr::new(&t.name),
    }
}

/// Decides how a buffer crosses the boundary (the plugin's own handle, or host memory).
pub type BufferEncoder<'a> = dyn FnMut(&Arc<dyn Buffer>) -> Result<AbiBufferRef> + 'a;

/// The part of a graph a call needs, as descriptors that borrow the graph's names.
pub struct EncodedGraph<'g> {
    tensors: Vec<AbiTensor>,
    nodes: Vec<u32>,
    buffers: Vec<AbiBufferRef>,
    _graph: PhantomData<&'g Graph>,
}

impl EncodedGraph<'_> {
    /// The ABI view; valid while `self` lives.
    pub fn as_abi(&self) -> AbiGraph {
        AbiGraph {
            size: size_of::<AbiGraph>(),
            tensors: self.tensors.as_ptr(),
            n_tensors: self.tensors.len(),
            nodes: self.nodes.as_ptr(),
            n_nodes: self.nodes.len(),
            buffers: self.buffers.as_ptr(),
            n_buffers: self.buffers.len(),
        }
    }

    pub fn tensors(&self) -> &[AbiTensor] {
        &self.tensors
    }
}

/// Encodes `nodes` of `graph` with everything their kernels touch: their sources and the
/// tensors whose memory they view. With `buffers`, tensors carry their memory; without,
/// they are described unbound (enough for `supports_op`).
pub fn encode_graph<'g>(
    graph: &'g Graph,
    nodes: &[TensorId],
    mut buffers: Option<&mut BufferEncoder<'_>>,
) -> Result<EncodedGraph<'g>> {
    let mut index: BTreeMap<TensorId, u32> = BTreeMap::new();
    let mut order: Vec<TensorId> = Vec::new();
    let mut add = |id: TensorId, index: &mut BTreeMap<TensorId, u32>| -> Result<()> {
        for id in [Some(id), graph.tensor(id)?.view_src].into_iter().flatten() {
            if let alloc::collections::btree_map::Entry::Vacant(slot) = index.entry(id) {
                let i = u32::try_from(order.len()).map_err(|_| Error::Overflow { what: "tensors in a plugin call" })?;
                graph.tensor(id)?;
                slot.insert(i);
                order.push(id);
            }
        }
        Ok(())
    };
    for &n in nodes {
        add(n, &mut index)?;
        for (_, s) in graph.tensor(n)?.srcs() {
            add(s, &mut index)?;
        }
    }
    let idx = |id: Option<TensorId>| id.and_then(|id| index.get(&id).copied()).unwrap_or(NO_INDEX);
    let mut out_buffers: Vec<AbiBufferRef> = Vec::new();
    let mut buffer_keys: Vec<*const ()> = Vec::new();
    let mut tensors = Vec::with_capacity(order.len());
    for &id in &order {
        let t = graph.tensor(id)?;
        let mut d = encode_lone_tensor(t);
        for (slot, s) in t.src.iter().enumerate() {
            d.src[slot] = idx(*s);
        }
        d.view_src = idx(t.view_src);
        if let (Some(data), Some(encode)) = (&t.data, buffers.as_mut()) {
            let key = Arc::as_ptr(&data.buffer) as *const ();
            let b = match buffer_keys.iter().position(|k| *k == key) {
                Some(b) => b,
                None => {
                    out_buffers.push(encode(&data.buffer).map_err(|e| match e {
                        Error::IncompatibleBuffer { buffer, backend, .. } => {
                            Error::IncompatibleBuffer { tensor: graph.label(id), buffer, backend }
                        }
                        e => e,
                    })?);
                    buffer_keys.push(key);
                    out_buffers.len() - 1
                }
            };
            d.buffer = b as u32;
            d.data_offset = data.offset;
        }
        tensors.push(d);
    }
    let nodes = nodes.iter().map(|n| idx(Some(*n))).collect();
    Ok(EncodedGraph { tensors, nodes, buffers: out_buffers, _graph: PhantomData })
}

/// A slice from a pointer and a length handed over the boundary (null is fine when empty).
///
/// # Safety
/// When `len > 0`, `ptr` must point to `len` initialised values that stay valid and
/// unchanged for `'a`.
pub(crate) unsafe fn abi_slice<'a, T>(ptr: *const T, len: usize, what: &str) -> Result<&'a [T]> {
    if len == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() || !ptr.is_aligned() {
        return Err(invalid(format!("{what}: {len} entries at a null or misaligned address")));
    }
    // SAFETY: non-null and aligned (checked above); the caller promises `len` valid values.
    Ok(unsafe { core::slice::from_raw_parts(ptr, len) })
}

/// An array handed over the boundary whose entries start with their size: a newer writer's
/// longer entries are read up to the fields this build knows.
pub(crate) struct AbiItems<'a, T> {
    base: *const u8,
    len: usize,
    stride: usize,
    _items: PhantomData<&'a T>,
}

impl<'a, T: Copy> AbiItems<'a, T> {
    /// # Safety
    /// When `len > 0`, `ptr` must point to `len` entries, each as many bytes as the first
    /// one's leading `usize` says, valid and unchanged for `'a`.
    pub(crate) unsafe fn new(ptr: *const T, len: usize, what: &str) -> Result<AbiItems<'a, T>> {
        let empty = AbiItems { base: core::ptr::null(), len: 0, stride: size_of::<T>(), _items: PhantomData };
        if len == 0 {
            return Ok(empty);
        }
        if ptr.is_null() || !ptr.is_aligned() {
            return Err(invalid(format!("{what}: {len} entries at a null or misaligned address")));
        }
        // SAFETY: non-null and aligned; every entry starts with its size (the caller's promise).
        let stride = unsafe { ptr.cast::<usize>().read() };
        if stride < size_of::<T>() || stride % align_of::<T>() != 0 {
            return Err(invalid(format!(
                "{what}: entries of {stride} bytes, this build reads {} (written for an older ABI?)",
                size_of::<T>()
            )));
        }
        Ok(AbiItems { base: ptr.cast(), len, stride, _items: PhantomData })
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Entry `i`, or `None` past the end.
    pub(crate) fn get(&self, i: usize) -> Option<T> {
        // SAFETY: `i < len`, so the entry lies inside the array the constructor's caller
        // vouched for; it is at least `size_of::<T>()` bytes and aligned for `T`.
        (i < self.len).then(|| unsafe { self.base.add(i * self.stride).cast::<T>().read() })
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = T> + '_ {
        (0..self.len).filter_map(|i| self.get(i))
    }
}

/// A struct handed over the boundary that starts with its size, read up to the fields this
/// build knows; a shorter (older) one is refused.
///
/// # Safety
/// `ptr` must be null or point to such a struct, valid for as many bytes as it says.
pub unsafe fn read_sized<T: Copy>(ptr: *const T, what: &str) -> Result<T> {
    // SAFETY: forwarded; a single entry is an array of one.
    let items = unsafe { AbiItems::new(ptr, usize::from(!ptr.is_null()), what) }?;
    items.get(0).ok_or_else(|| invalid(format!("{what}: null pointer")))
}

/// A string handed over the boundary, copied (invalid UTF-8 is replaced).
///
/// # Safety
/// When `s.len > 0`, `s.ptr` must point to `s.len` readable bytes.
pub unsafe fn abi_string(s: AbiStr) -> String {
    // SAFETY: forwarded from the caller.
    match unsafe { abi_slice(s.ptr, s.len, "string") } {
        Ok(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Err(_) => String::new(),
    }
}

/// A tensor from its descriptor alone (type, shape, strides, op; no indices), checked.
pub fn decode_lone_tensor(d: &AbiTensor, name: String) -> Result<Tensor> {
    let dtype = dtype_from_id(d.dtype)?;
    let op = decode_op(d.op, &d.op_params)?;
    let mut t = Tensor::new(dtype, d.ne, op)?;
    if dtype.is_quantized() && d.nb[0] != dtype.block_bytes() {
        return Err(invalid(format!(
            "'{name}': a {dtype} tensor must have nb[0] = {} (its block size), got {}",
            dtype.block_bytes(),
            d.nb[0]
        )));
    }
    if span_bytes(dtype, d.ne, d.nb).is_none() {
        return Err(Error::Overflow { what: "tensor size in bytes" });
    }
    t.nb = d.nb;
    t.flags = decode_flags(d.flags);
    t.name = name;
    Ok(t)
}

/// Resolves a buffer reference to memory the plugin can bind.
pub type BufferResolver<'a> = dyn FnMut(&AbiBufferRef) -> Result<Arc<dyn Buffer>> + 'a;

/// Rebuilds a graph from `g`, checking it through and through.
///
/// # Safety
/// `g` must point to an [`AbiGraph`] whose arrays and strings are valid for the call.
pub unsafe fn decode_graph(g: *const AbiGraph, resolve: Option<&mut BufferResolver<'_>>) -> Result<Graph> {
    // SAFETY: the caller promises a valid AbiGraph; its size is checked before the rest is read.
    let g = unsafe { read_sized(g, "graph descriptor") }?;
    // SAFETY: the caller promises the arrays are valid for the call.
    let (descs, nodes, buffer_refs) = unsafe {
        (
            AbiItems::new(g.tensors, g.n_tensors, "tensors")?,
            abi_slice(g.nodes, g.n_nodes, "nodes")?,
            AbiItems::new(g.buffers, g.n_buffers, "buffers")?,
        )
    };
    let n = descs.len();
    if n >= NO_INDEX as usize {
        return Err(invalid(format!("{n} tensors is too many")));
    }
    let buffers: Vec<Arc<dyn Buffer>> = match resolve {
        Some(resolve) => buffer_refs.iter().map(|b| resolve(&b)).collect::<Result<_>>()?,
        None if buffer_refs.is_empty() => Vec::new(),
        None => return Err(invalid("this call takes no buffers".into())),
    };
    let index = |i: u32, what: &str, of: usize| -> Result<Option<TensorId>> {
        match i {
            NO_INDEX => Ok(None),
            i if (i as usize) < n && i as usize != of => Ok(Some(TensorId(i))),
            i => Err(invalid(format!("tensor {of}: {what} index {i} is not another of the {n} tensors"))),
        }
    };
    let mut graph = Graph::new();
    for (i, d) in descs.iter().enumerate() {
        // SAFETY: the caller promises the strings are valid for the call.
        let name = unsafe { abi_string(d.name) };
        let mut t = decode_lone_tensor(&d, name).map_err(|e| at_tensor(i, e))?;
        for (slot, s) in d.src.iter().enumerate() {
            t.src[slot] = index(*s, "source", i)?;
        }
        t.view_src = index(d.view_src, "view source", i)?;
        t.view_offset = d.view_offset;
        graph.push(t)?;
    }
    for (i, d) in descs.iter().enumerate() {
        let id = TensorId(i as u32);
        let t = graph.tensor(id)?;
        if let Some(root) = t.view_src {
            let r = graph.tensor(root)?;
            let end = t.nbytes().checked_add(t.view_offset);
            if r.view_src.is_some() || end.is_none_or(|end| end > r.nbytes()) {
                return Err(Error::ViewOutOfBounds {
                    tensor: graph.label(id),
                    source: graph.label(root),
                    end: end.unwrap_or(usize::MAX),
                    source_bytes: r.nbytes(),
                });
            }
        }
        if d.buffer != NO_INDEX {
            let buffer = buffers
                .get(d.buffer as usize)
                .ok_or_else(|| invalid(format!("tensor {i}: buffer index {} of {}", d.buffer, buffers.len())))?;
            // What `Graph::bind` checks (a view has no memory of its own; the tensor fits),
            // without the message it prepares in advance.
            if t.view_src.is_some() {
                return Err(invalid(format!("tensor {i} is a view and cannot have memory of its own")));
            }
            let need = buffer.buffer_type().alloc_size(t).max(t.nbytes());
            if d.data_offset.checked_add(need).is_none_or(|end| end > buffer.size()) {
                return Err(Error::BufferRange {
                    buffer: buffer.buffer_type().name().into(),
                    offset: d.data_offset,
                    len: need,
                    size: buffer.size(),
                });
            }
            graph.tensor_mut(id)?.data = Some(TensorData { buffer: buffer.clone(), offset: d.data_offset });
        }
    }
    let node_ids = nodes
        .iter()
        .map(|&i| index(i, "node", usize::MAX)?.ok_or_else(|| invalid("a node index is NO_INDEX".into())))
        .collect::<Result<Vec<_>>>()?;
    for &id in &node_ids {
        check_node(&graph, id)?;
    }
    graph.set_order(node_ids, Vec::new());
    Ok(graph)
}

fn at_tensor(i: usize, e: Error) -> Error {
    match e {
        Error::InvalidParam { op, message } => Error::InvalidParam { op, message: format!("tensor {i}: {message}") },
        e => e,
    }
}

/// Checks that a computed node is what its op's checked constructor makes of its sources
/// (type and shape), so kernels can rely on the invariants the graph builder guarantees.
pub fn check_node(graph: &Graph, id: TensorId) -> Result<()> {
    let t = graph.tensor(id)?;
    if t.op == Op::None || t.op.is_view() {
        return Ok(());
    }
    let mut scratch = Graph::new();
    let mut src = [None; MAX_SRC];
    for (slot, s) in t.srcs() {
        let st = graph.tensor(s)?;
        let mut leaf = Tensor::new(st.dtype, st.ne, Op::None)?;
        leaf.nb = st.nb;
        src[slot] = Some(scratch.push(leaf)?);
    }
    let need = |i: usize| {
        src[i].ok_or_else(|| invalid(format!("node '{}' ({}) lacks source {i}", graph.label(id), t.op.name())))
    };
    let g = &mut scratch;
    let derived = match t.op {
        Op::None | Op::View | Op::Reshape | Op::Permute(_) | Op::Transpose => return Ok(()),
        Op::Binary(b) => g.binary(b, need(0)?, need(1)?),
        Op::Scale(s) => g.scale(need(0)?, s),
        Op::Unary(u) => g.unary(u, need(0)?),
        Op::SumRows => g.sum_rows(need(0)?),
        Op::Mean => g.mean(need(0)?),
        Op::Argmax => g.argmax(need(0)?),
        Op::SoftMax { scale } => g.soft_max(need(0)?, src[1], scale),
        Op::Norm { eps } => g.norm(need(0)?, eps),
        Op::RmsNorm { eps } => g.rms_norm(need(0)?, eps),
        Op::MulMat => g.mul_mat(need(0)?, need(1)?),
        Op::GetRows => g.get_rows(need(0)?, need(1)?),
        Op::Cpy => match src[1] {
            Some(b) => g.cpy(need(0)?, b),
            None => g.cast(need(0)?, t.dtype),
        },
        Op::Cont => g.cont(need(0)?),
        Op::Concat { dim } => g.concat(need(0)?, need(1)?, dim),
        Op::Rope(p) => g.rope(need(0)?, need(1)?, p),
        Op::DiagMaskInf { n_past } => g.diag_mask_inf(need(0)?, n_past),
        Op::Im2Col(p) => g.im2col(need(0)?, need(1)?, p, t.dtype),
        Op::Pool2d(p) => g.pool_2d(need(0)?, p),
    }
    .map_err(|e| invalid(format!("node '{}' ({}): {e}", graph.label(id), t.op.name())))?;
    let d = scratch.tensor(derived)?;
    if d.dtype != t.dtype || d.ne != t.ne {
        return Err(invalid(format!(
            "node '{}' ({}) is {} {} but its sources make it {} {}",
            graph.label(id),
            t.op.name(),
            t.dtype,
            t.shape(),
            d.dtype,
            d.shape()
        )));
    }
    Ok(())
}
