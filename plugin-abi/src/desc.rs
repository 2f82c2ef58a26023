//! Graphs as plain data: the host encodes the part of a graph a call needs into
//! [`AbiTensor`] descriptors; the plugin decodes them into a [`Graph`] of its own, which
//! [`Graph::from_parts`] checks through and through (indices, types, shapes, strides, views,
//! and each node against its op's checked constructor) and whose memory ranges are checked
//! as they are bound, before a kernel sees it.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::marker::PhantomData;
use core::mem::{align_of, size_of};

pub use tessera_core::op_code::{decode_op, dtype_from_id, dtype_id, encode_op};
use tessera_core::tensor::{Tensor, TensorFlags, TensorId, MAX_SRC};
use tessera_core::{Buffer, Error, Graph, Result, TensorData, TensorParts};

use crate::abi::{AbiBufferRef, AbiGraph, AbiStr, AbiTensor, NO_INDEX};

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
    let (op, op_params) = encode_op(t.op());
    AbiTensor {
        size: size_of::<AbiTensor>(),
        dtype: dtype_id(t.dtype()),
        op,
        op_params,
        ne: t.ne(),
        nb: t.nb(),
        src: [NO_INDEX; MAX_SRC],
        view_src: NO_INDEX,
        flags: encode_flags(t.flags()),
        view_offset: t.view_offset(),
        buffer: NO_INDEX,
        data_offset: 0,
        name: AbiStr::new(t.name()),
    }
}

/// Decides how a buffer crosses the boundary (the plugin's own handle, or host memory).
pub type BufferEncoder<'a> = dyn FnMut(&Arc<dyn Buffer>) -> Result<AbiBufferRef> + 'a;

/// The part of a graph a call needs, as descriptors that borrow the graph's names.
pub struct EncodedGraph<'g> {
    tensors: Vec<AbiTensor>,
    /// The graph's tensor behind each descriptor.
    ids: Vec<TensorId>,
    nodes: Vec<u32>,
    buffers: Vec<AbiBufferRef>,
    consumers: Vec<u32>,
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
            consumers: if self.consumers.is_empty() { core::ptr::null() } else { self.consumers.as_ptr() },
        }
    }

    pub fn tensors(&self) -> &[AbiTensor] {
        &self.tensors
    }

    /// Sends the consumer counts of the whole graph (`counts`, indexed by `TensorId`) along,
    /// one per descriptor; a tensor past the end of `counts` is taken as read elsewhere.
    pub fn set_consumers(&mut self, counts: &[u32]) -> Result<()> {
        let mut consumers = Vec::new();
        consumers.try_reserve_exact(self.ids.len()).map_err(|_| Error::OutOfMemory {
            what: "consumer counts of a plugin call".into(),
            requested: self.ids.len() * size_of::<u32>(),
        })?;
        consumers.extend(self.ids.iter().map(|id| counts.get(id.index()).copied().unwrap_or(u32::MAX)));
        self.consumers = consumers;
        Ok(())
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
        for id in [Some(id), graph.tensor(id)?.view_src()].into_iter().flatten() {
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
        for (slot, s) in t.srcs() {
            d.src[slot] = idx(Some(s));
        }
        d.view_src = idx(t.view_src());
        if let (Some(data), Some(encode)) = (t.data(), buffers.as_mut()) {
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
    Ok(EncodedGraph { tensors, ids: order, nodes, buffers: out_buffers, consumers: Vec::new(), _graph: PhantomData })
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

/// The parts of a tensor from its descriptor alone (type, shape, strides, op, flags; the
/// indices are left unset).
fn lone_parts(d: &AbiTensor, name: String) -> Result<TensorParts> {
    Ok(TensorParts {
        dtype: dtype_from_id(d.dtype)?,
        ne: d.ne,
        nb: d.nb,
        op: decode_op(d.op, &d.op_params)?,
        src: [None; MAX_SRC],
        view_src: None,
        view_offset: d.view_offset,
        flags: decode_flags(d.flags),
        name,
    })
}

/// A tensor from its descriptor alone (type, shape, strides, op; no indices), checked.
pub fn decode_lone_tensor(d: &AbiTensor, name: String) -> Result<Tensor> {
    Tensor::from_parts(lone_parts(d, name)?)
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
    let index = |i: u32| (i != NO_INDEX).then_some(TensorId(i));
    let mut parts = Vec::new();
    parts.try_reserve_exact(n).map_err(|_| Error::OutOfMemory {
        what: "tensors of a plugin call".into(),
        requested: n * size_of::<TensorParts>(),
    })?;
    for (i, d) in descs.iter().enumerate() {
        // SAFETY: the caller promises the strings are valid for the call.
        let name = unsafe { abi_string(d.name) };
        let mut p = lone_parts(&d, name).map_err(|e| at_tensor(i, e))?;
        for (slot, s) in d.src.iter().enumerate() {
            p.src[slot] = index(*s);
        }
        p.view_src = index(d.view_src);
        parts.push(p);
    }
    let node_ids = nodes
        .iter()
        .map(|&i| index(i).ok_or_else(|| invalid("a node index is NO_INDEX".into())))
        .collect::<Result<Vec<_>>>()?;
    let mut graph = Graph::from_parts(parts, node_ids)?;
    for (i, d) in descs.iter().enumerate().filter(|(_, d)| d.buffer != NO_INDEX) {
        let buffer = buffers
            .get(d.buffer as usize)
            .ok_or_else(|| invalid(format!("tensor {i}: buffer index {} of {}", d.buffer, buffers.len())))?;
        graph.bind_existing(TensorId(i as u32), TensorData { buffer: buffer.clone(), offset: d.data_offset })?;
    }
    Ok(graph)
}

/// The consumer counts `g` carries, one per tensor of `graph` (decoded from `g`); every
/// tensor is taken as read elsewhere when `g` carries none.
///
/// # Safety
/// As [`decode_graph`].
pub unsafe fn decode_consumers(g: *const AbiGraph, graph: &Graph) -> Result<Vec<u32>> {
    // SAFETY: forwarded from the caller.
    let g = unsafe { read_sized(g, "graph descriptor") }?;
    let n = graph.tensors().len();
    if g.n_tensors != n {
        return Err(invalid(format!("{} tensors described, {n} decoded", g.n_tensors)));
    }
    let mut counts = Vec::new();
    counts
        .try_reserve_exact(n)
        .map_err(|_| Error::OutOfMemory { what: "consumer counts".into(), requested: n * size_of::<u32>() })?;
    if g.consumers.is_null() {
        counts.resize(n, u32::MAX);
    } else {
        // SAFETY: the caller promises `consumers` holds `n_tensors` counts when it is not null.
        counts.extend_from_slice(unsafe { abi_slice(g.consumers, n, "consumers") }?);
    }
    Ok(counts)
}

fn at_tensor(i: usize, e: Error) -> Error {
    match e {
        Error::InvalidParam { op, message } => Error::InvalidParam { op, message: format!("tensor {i}: {message}") },
        e => e,
    }
}
