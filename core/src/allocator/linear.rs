//! Linear (bump) allocation of tensors into one buffer: weights, caches, simple graphs.

use alloc::sync::Arc;
use alloc::vec::Vec;

use crate::buffer::{Buffer, BufferType, TensorData};
use crate::error::{Error, Result};
use crate::graph::Graph;
use crate::tensor::TensorId;

const fn align_up(n: usize, align: usize) -> Option<usize> {
    match n.checked_add(align - 1) {
        Some(v) => Some(v & !(align - 1)),
        None => None,
    }
}

/// Places tensors one after another in a buffer; nothing is ever freed.
pub struct LinearAllocator {
    buffer: Arc<dyn Buffer>,
    alignment: usize,
    offset: usize,
}

impl LinearAllocator {
    pub fn new(buffer: Arc<dyn Buffer>) -> LinearAllocator {
        let alignment = buffer.buffer_type().alignment().max(1);
        LinearAllocator { buffer, alignment, offset: 0 }
    }

    /// Bytes used so far.
    pub fn used(&self) -> usize {
        self.offset
    }

    /// Binds `id` to the next free, aligned bytes of the buffer.
    pub fn alloc(&mut self, graph: &mut Graph, id: TensorId) -> Result<()> {
        let t = graph.tensor(id)?;
        if t.view_src().is_some() || t.data().is_some() {
            return Err(Error::AlreadyAllocated { tensor: graph.label(id) });
        }
        let size = self.buffer.buffer_type().alloc_size(t);
        let end = align_up(size, self.alignment).and_then(|s| s.checked_add(self.offset));
        let Some(end) = end.filter(|e| *e <= self.buffer.size()) else {
            return Err(Error::OutOfMemory {
                what: alloc::format!(
                    "tensor '{}' in a {}-byte {} buffer with {} bytes used",
                    graph.label(id),
                    self.buffer.size(),
                    self.buffer.buffer_type().name(),
                    self.offset
                ),
                requested: size,
            });
        };
        graph.bind(id, TensorData { buffer: self.buffer.clone(), offset: self.offset })?;
        self.offset = end;
        Ok(())
    }
}

/// Whether `id` needs memory of its own: it is no view and not yet bound.
fn needs_memory(graph: &Graph, id: TensorId) -> bool {
    graph.tensor(id).is_ok_and(|t| t.view_src().is_none() && t.data().is_none())
}

/// Allocates buffers of `buffer_type` holding every tensor of `ids` that needs memory, in
/// order, and binds them. A new buffer starts whenever the next tensor would take one past
/// the buffer type's largest allocation, so the result may be several buffers (none if no
/// tensor needs memory).
pub fn alloc_tensors(
    graph: &mut Graph,
    ids: &[TensorId],
    buffer_type: &'static dyn BufferType,
) -> Result<Vec<Arc<dyn Buffer>>> {
    let align = buffer_type.alignment().max(1);
    let max = buffer_type.max_size();
    // Group consecutive tensors into runs that each fit one buffer.
    let mut runs: Vec<(usize, usize)> = Vec::new(); // (first index in `ids`, bytes)
    let mut current: Option<(usize, usize)> = None;
    for (i, &id) in ids.iter().enumerate() {
        if !needs_memory(graph, id) {
            continue;
        }
        let size = align_up(buffer_type.alloc_size(graph.tensor(id)?), align)
            .ok_or(Error::Overflow { what: "buffer size" })?;
        if size > max {
            return Err(Error::OutOfMemory {
                what: alloc::format!(
                    "tensor '{}' in one {} buffer (its largest allocation is {max} bytes)",
                    graph.label(id),
                    buffer_type.name()
                ),
                requested: size,
            });
        }
        current = match current {
            Some((first, bytes)) if bytes.checked_add(size).is_some_and(|b| b <= max) => Some((first, bytes + size)),
            Some(run) => {
                runs.push(run);
                Some((i, size))
            }
            None => Some((i, size)),
        };
    }
    runs.extend(current);
    let mut buffers = Vec::with_capacity(runs.len());
    for (r, &(first, bytes)) in runs.iter().enumerate() {
        let end = runs.get(r + 1).map_or(ids.len(), |next| next.0);
        let buffer = buffer_type.alloc_buffer(bytes)?;
        let mut linear = LinearAllocator::new(buffer.clone());
        for &id in &ids[first..end] {
            if needs_memory(graph, id) {
                linear.alloc(graph, id)?;
            }
        }
        buffers.push(buffer);
    }
    Ok(buffers)
}

/// Allocates every tensor of the graph that needs memory, in creation order.
pub fn alloc_graph_tensors(graph: &mut Graph, buffer_type: &'static dyn BufferType) -> Result<Vec<Arc<dyn Buffer>>> {
    let ids: Vec<TensorId> = (0..graph.tensors().len() as u32).map(TensorId).collect();
    alloc_tensors(graph, &ids, buffer_type)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::host_buffer::{HOST_ALIGNMENT, HOST_BUFFER_TYPE};

    #[test]
    fn tensors_are_packed_aligned_and_views_share_memory() {
        let mut g = Graph::new();
        let a = g.new_tensor(DType::F32, &[3]).unwrap();
        let b = g.new_tensor(DType::F16, &[5]).unwrap();
        let v = g.view_1d(a, 2, 4).unwrap();
        let bufs = alloc_graph_tensors(&mut g, &HOST_BUFFER_TYPE).unwrap();
        assert_eq!(bufs.len(), 1);
        assert_eq!(bufs[0].size(), 2 * HOST_ALIGNMENT);
        assert_eq!(g.data(a).unwrap().offset, 0);
        assert_eq!(g.data(b).unwrap().offset, HOST_ALIGNMENT);
        assert_eq!(g.data(v).unwrap().offset, 4);
        g.set_f32(a, &[1.0, 2.0, 3.0]).unwrap();
        assert_eq!(g.get_f32(v).unwrap(), [2.0, 3.0]);
    }

    #[test]
    fn a_full_buffer_is_an_error() {
        let mut g = Graph::new();
        let a = g.new_tensor(DType::F32, &[100]).unwrap();
        let buf = HOST_BUFFER_TYPE.alloc_buffer(64).unwrap();
        let mut linear = LinearAllocator::new(buf);
        let err = linear.alloc(&mut g, a).unwrap_err();
        assert!(matches!(err, Error::OutOfMemory { requested: 400, .. }), "{err}");
    }

    #[test]
    fn weights_larger_than_one_buffer_are_split() {
        static CAPPED: Capped = Capped;
        let mut g = Graph::new();
        let ids: Vec<TensorId> = (0..5).map(|_| g.new_tensor(DType::F32, &[100]).unwrap()).collect();
        // 400 bytes each (416 aligned to 32); at most 1000 bytes per buffer: 2 + 2 + 1.
        let bufs = alloc_tensors(&mut g, &ids, &CAPPED).unwrap();
        assert_eq!(bufs.iter().map(|b| b.size()).collect::<Vec<_>>(), [832, 832, 416]);
        assert!(Arc::ptr_eq(&g.data(ids[3]).unwrap().buffer, &bufs[1]));
        assert_eq!(g.data(ids[3]).unwrap().offset, 416);
        let mut big = Graph::new();
        let t = big.new_tensor(DType::F32, &[300]).unwrap();
        assert!(matches!(alloc_tensors(&mut big, &[t], &CAPPED), Err(Error::OutOfMemory { .. })));
    }

    struct Capped;
    impl BufferType for Capped {
        fn name(&self) -> &str {
            "capped"
        }
        fn alignment(&self) -> usize {
            32
        }
        fn max_size(&self) -> usize {
            1000
        }
        fn is_host(&self) -> bool {
            true
        }
        fn alloc_buffer(&'static self, size: usize) -> Result<Arc<dyn Buffer>> {
            Ok(Arc::new(crate::host_buffer::HostBuffer::alloc(self, size)?))
        }
    }
}
