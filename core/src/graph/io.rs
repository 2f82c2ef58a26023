//! Reading and writing tensor data, and copying between tensors.

use alloc::vec;
use alloc::vec::Vec;

use crate::buffer::TensorData;
use crate::convert;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::graph::Graph;
use crate::tensor::TensorId;

impl Graph {
    /// The tensor's memory, after checking that `offset..offset + len` lies inside it.
    fn data_range(&self, id: TensorId, offset: usize, len: usize) -> Result<TensorData> {
        let nbytes = self.tensor(id)?.nbytes();
        if offset.checked_add(len).is_none_or(|end| end > nbytes) {
            return Err(Error::TensorRange { tensor: self.label(id), offset, len, nbytes });
        }
        self.data(id).ok_or_else(|| Error::NotAllocated { tensor: self.label(id) })
    }

    /// Writes raw bytes at `offset` into the tensor's memory.
    pub fn set_bytes(&self, id: TensorId, offset: usize, bytes: &[u8]) -> Result<()> {
        let d = self.data_range(id, offset, bytes.len())?;
        d.buffer.set_bytes(d.offset + offset, bytes).map_err(|e| self.name_read_only(id, e))
    }

    /// Reads raw bytes at `offset` from the tensor's memory.
    pub fn get_bytes(&self, id: TensorId, offset: usize, out: &mut [u8]) -> Result<()> {
        let d = self.data_range(id, offset, out.len())?;
        d.buffer.get_bytes(d.offset + offset, out)
    }

    fn name_read_only(&self, id: TensorId, e: Error) -> Error {
        match e {
            Error::ReadOnly { buffer, .. } => Error::ReadOnly { tensor: self.label(id), buffer },
            e => e,
        }
    }

    /// Sets every value of a contiguous tensor from f32 (converting, quantizing if needed).
    pub fn set_f32(&self, id: TensorId, values: &[f32]) -> Result<()> {
        let t = self.tensor(id)?;
        if values.len() != t.nelements() || !t.is_contiguous() {
            return Err(Error::ShapeMismatch {
                op: "SET",
                tensor: self.label(id),
                shape: t.shape(),
                expected: alloc::format!("a contiguous tensor of {} values", values.len()),
            });
        }
        if t.dtype() == DType::F32 && cfg!(target_endian = "little") {
            // f32 values are their own little-endian bytes: no copy (a batch's inputs are
            // hundreds of KiB).
            return self.set_bytes(id, 0, bytemuck::cast_slice(values));
        }
        let bytes = convert::to_bytes(t.dtype(), values)?;
        self.set_bytes(id, 0, &bytes)
    }

    /// Sets every value of a contiguous I32 tensor.
    pub fn set_i32(&self, id: TensorId, values: &[i32]) -> Result<()> {
        let t = self.tensor(id)?;
        if t.dtype() != DType::I32 {
            return Err(Error::TypeMismatch { op: "SET", tensor: self.label(id), dtype: t.dtype(), expected: "i32" });
        }
        if values.len() != t.nelements() || !t.is_contiguous() {
            return Err(Error::ShapeMismatch {
                op: "SET",
                tensor: self.label(id),
                shape: t.shape(),
                expected: alloc::format!("a contiguous tensor of {} values", values.len()),
            });
        }
        if cfg!(target_endian = "little") {
            return self.set_bytes(id, 0, bytemuck::cast_slice(values));
        }
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.set_bytes(id, 0, &bytes)
    }

    /// Every value of the tensor in row-major order, as f32 (any layout, any type).
    pub fn get_f32(&self, id: TensorId) -> Result<Vec<f32>> {
        let t = self.tensor(id)?;
        let mut bytes = vec![0u8; t.nbytes()];
        self.get_bytes(id, 0, &mut bytes)?;
        let [n0, n1, n2, n3] = t.ne();
        let mut out = vec![0.0f32; t.nelements()];
        if n0 == 0 {
            return Ok(out);
        }
        let span =
            if t.dtype().is_quantized() { t.row_bytes() } else { (n0 - 1) * t.nb()[0] + t.dtype().block_bytes() };
        for (r, row) in out.chunks_exact_mut(n0).enumerate() {
            let (i1, i2, i3) = (r % n1, r / n1 % n2, r / (n1 * n2) % n3);
            let at = t.row_offset(i1, i2, i3);
            convert::strided_to_f32(t.dtype(), &bytes[at..at + span], t.nb()[0], row);
        }
        Ok(out)
    }

    /// Every value of an I32 tensor in row-major order.
    pub fn get_i32(&self, id: TensorId) -> Result<Vec<i32>> {
        let t = self.tensor(id)?;
        if t.dtype() != DType::I32 {
            return Err(Error::TypeMismatch { op: "GET", tensor: self.label(id), dtype: t.dtype(), expected: "i32" });
        }
        // f32 holds every i32 below 2^24 exactly; read the bytes directly to keep all of them.
        let mut bytes = vec![0u8; t.nbytes()];
        self.get_bytes(id, 0, &mut bytes)?;
        let [n0, n1, n2, _] = t.ne();
        let nb = t.nb();
        Ok((0..t.nelements())
            .map(|i| {
                let at = (i % n0) * nb[0]
                    + (i / n0 % n1) * nb[1]
                    + (i / (n0 * n1) % n2) * nb[2]
                    + i / (n0 * n1 * n2) * nb[3];
                i32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
            })
            .collect())
    }
}

/// Copies the data of `src` (in `src_graph`) into `dst` (in `dst_graph`); both must have the
/// same type, shape and strides. Host buffers are read or written in place; other pairs use
/// the destination buffer's own copy, else a staging copy through fresh host memory.
pub fn copy_tensor(src_graph: &Graph, src: TensorId, dst_graph: &Graph, dst: TensorId) -> Result<()> {
    copy_tensor_via(src_graph, src, dst_graph, dst, None)
}

/// Reads the rows of `src` (dense rows, at any strides) back to back into `out`, which holds
/// exactly that many bytes.
pub fn pack_rows(graph: &Graph, src: TensorId, out: &mut [u8]) -> Result<()> {
    let t = graph.tensor(src)?;
    let (ne, row) = (t.ne(), t.row_bytes());
    if !t.rows_contiguous() || out.len() != t.packed_nbytes() {
        return Err(Error::InvalidParam {
            op: "COPY",
            message: alloc::format!("'{}' cannot be packed into {} bytes", graph.label(src), out.len()),
        });
    }
    let mut rows = out.chunks_exact_mut(row.max(1));
    for i3 in 0..ne[3] {
        for i2 in 0..ne[2] {
            for i1 in 0..ne[1] {
                let Some(into) = rows.next() else { return Ok(()) };
                graph.get_bytes(src, t.row_offset(i1, i2, i3), into)?;
            }
        }
    }
    Ok(())
}

/// A source of host memory to stage a copy through: called with the bytes needed.
pub type Staging<'a> = &'a mut dyn FnMut(usize) -> Result<alloc::sync::Arc<dyn crate::buffer::Buffer>>;

/// [`copy_tensor`], staging through the buffer `staging` gives (writable host memory, such as
/// a device's pinned buffer) when neither side can do the copy itself.
pub fn copy_tensor_via(
    src_graph: &Graph,
    src: TensorId,
    dst_graph: &Graph,
    dst: TensorId,
    staging: Option<Staging<'_>>,
) -> Result<()> {
    let (ts, td) = (src_graph.tensor(src)?, dst_graph.tensor(dst)?);
    if !ts.same_layout(td) {
        return Err(Error::ShapeMismatch {
            op: "COPY",
            tensor: dst_graph.label(dst),
            shape: td.shape(),
            expected: alloc::format!("the layout of '{}' ({} {})", src_graph.label(src), ts.dtype(), ts.shape()),
        });
    }
    let len = ts.nbytes();
    let s = src_graph.data_range(src, 0, len)?;
    let d = dst_graph.data_range(dst, 0, len)?;
    let same_buffer = core::ptr::addr_eq(alloc::sync::Arc::as_ptr(&s.buffer), alloc::sync::Arc::as_ptr(&d.buffer));
    if same_buffer && s.offset == d.offset {
        return Ok(());
    }
    match s.buffer.host_ptr() {
        // A slice over the source must not coexist with writes into the same buffer: stage it.
        Some(_) if same_buffer => {}
        Some(base) => {
            crate::buffer::check_range(&*s.buffer, s.offset, len)?;
            // SAFETY: the range was checked against the host buffer, which stays alive (we hold an
            // Arc) and is not written through this borrow.
            let bytes = unsafe { core::slice::from_raw_parts(base.add(s.offset), len) };
            return d.buffer.set_bytes(d.offset, bytes).map_err(|e| dst_graph.name_read_only(dst, e));
        }
        None => {}
    }
    if !same_buffer && d.buffer.copy_from(d.offset, &*s.buffer, s.offset, len)? {
        return Ok(());
    }
    let staging = match staging {
        Some(get) => Some(get(len)?),
        None => None,
    };
    if let Some(base) = staging.as_ref().filter(|b| b.size() >= len).and_then(|b| b.host_ptr_mut()) {
        // SAFETY: the staging buffer is writable host memory of at least `len` bytes, used by
        // this copy alone (its owner runs copies one at a time), and no other slice over it
        // exists while this one lives.
        let bytes = unsafe { core::slice::from_raw_parts_mut(base, len) };
        s.buffer.get_bytes(s.offset, bytes)?;
        return d.buffer.set_bytes(d.offset, bytes).map_err(|e| dst_graph.name_read_only(dst, e));
    }
    let mut staging = Vec::new();
    staging.try_reserve_exact(len).map_err(|_| Error::OutOfMemory { what: "staging copy".into(), requested: len })?;
    staging.resize(len, 0);
    s.buffer.get_bytes(s.offset, &mut staging)?;
    d.buffer.set_bytes(d.offset, &staging).map_err(|e| dst_graph.name_read_only(dst, e))
}
