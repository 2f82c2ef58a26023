//! Linear (bump) allocation of tensors into one buffer: weights, caches, simple graphs.

use alloc::sync::Arc;

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

/// The tensors among `ids` that need memory of their own: not views, not yet bound.
fn needs_memory(graph: &Graph, id: TensorId) -> bool {
    graph.tensor(id).is_ok_and(|t| t.view_src().is_none() && t.data().is_none())
}

/// Allocates one buffer of `buffer_type` holding every tensor of `ids` that needs memory
/// and binds them; `Ok(None)` if none does.
pub fn alloc_tensors(
    graph: &mut Graph,
    ids: &[TensorId],
    buffer_type: &'static dyn BufferType,
) -> Result<Option<Arc<dyn Buffer>>> {
    let align = buffer_type.alignment().max(1);
    let mut total = 0usize;
    for &id in ids {
        let t = graph.tensor(id)?;
        if needs_memory(graph, id) {
            total = align_up(buffer_type.alloc_size(t), align)
                .and_then(|s| total.checked_add(s))
                .ok_or(Error::Overflow { what: "buffer size" })?;
        }
    }
    if total == 0 {
        return Ok(None);
    }
    if total > buffer_type.max_size() {
        return Err(Error::OutOfMemory {
            what: alloc::format!(
                "one {} buffer (its largest allocation is {} bytes)",
                buffer_type.name(),
                buffer_type.max_size()
            ),
            requested: total,
        });
    }
    let buffer = buffer_type.alloc_buffer(total)?;
    let mut linear = LinearAllocator::new(buffer.clone());
    for &id in ids {
        if needs_memory(graph, id) {
            linear.alloc(graph, id)?;
        }
    }
    Ok(Some(buffer))
}

/// Allocates every tensor of the graph that needs memory into one new buffer.
pub fn alloc_graph_tensors(graph: &mut Graph, buffer_type: &'static dyn BufferType) -> Result<Option<Arc<dyn Buffer>>> {
    let ids: alloc::vec::Vec<TensorId> = (0..graph.tensors().len() as u32).map(TensorId).collect();
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
        let buf = alloc_graph_tensors(&mut g, &HOST_BUFFER_TYPE).unwrap().unwrap();
        assert_eq!(buf.size(), 2 * HOST_ALIGNMENT);
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
}
