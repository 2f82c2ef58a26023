//! Tensors as kernels see them: type, shape, strides and memory, resolved from a graph once.
//!
//! A kernel never looks up a graph's bindings: a backend resolves each node into a
//! [`NodeView`] (its op, destination and sources, views already turned into their source's
//! memory plus offset) and hands that to its kernels. A backend that records a program keeps
//! the views and replays them without the graph.

use crate::buffer::{BufferBase, TensorData};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::graph::Graph;
use crate::op::Op;
use crate::tensor::{span_bytes, TensorId, MAX_DIMS, MAX_SRC};

/// One tensor resolved to memory.
#[derive(Clone, Debug)]
pub struct TensorView {
    /// The tensor in its graph, for messages.
    pub id: TensorId,
    pub dtype: DType,
    pub ne: [usize; MAX_DIMS],
    pub nb: [usize; MAX_DIMS],
    /// The buffer and byte offset of the first value (a view's source memory plus its offset).
    pub data: TensorData,
}

impl TensorView {
    /// What the memory of the buffer is; the tensor starts `data.offset` bytes past it.
    pub fn base(&self) -> BufferBase {
        self.data.buffer.base()
    }
    pub fn nelements(&self) -> usize {
        self.ne.iter().product()
    }
    /// Bytes spanned from the first to one past the last value.
    pub fn nbytes(&self) -> usize {
        span_bytes(self.dtype, self.ne, self.nb).unwrap_or(usize::MAX)
    }
    /// `#id`, how kernels name the tensor in errors.
    pub fn label(&self) -> alloc::string::String {
        alloc::format!("#{}", self.id.0)
    }
}

/// A node resolved for its kernel: the op, the destination and every source that is set.
#[derive(Clone, Debug)]
pub struct NodeView {
    pub op: Op,
    pub dst: TensorView,
    pub src: [Option<TensorView>; MAX_SRC],
}

impl NodeView {
    /// Source `i`; the op constructors guarantee the sources each op needs are present.
    pub fn src(&self, i: usize) -> Result<&TensorView> {
        self.src.get(i).and_then(Option::as_ref).ok_or_else(|| Error::InvalidParam {
            op: self.op.name(),
            message: alloc::format!("source {i} of #{} is missing", self.dst.id.0),
        })
    }
}

impl Graph {
    /// Tensor `id` resolved to its memory; an error names it when it has none.
    pub fn tensor_view(&self, id: TensorId) -> Result<TensorView> {
        let t = self.tensor(id)?;
        let data = self.data(id).ok_or_else(|| Error::NotAllocated { tensor: self.label(id) })?;
        crate::buffer::check_range(&*data.buffer, data.offset, t.nbytes())?;
        Ok(TensorView { id, dtype: t.dtype(), ne: t.ne(), nb: t.nb(), data })
    }

    /// Node `id` with its destination and sources resolved to memory.
    pub fn node_view(&self, id: TensorId) -> Result<NodeView> {
        let t = self.tensor(id)?;
        let mut src: [Option<TensorView>; MAX_SRC] = Default::default();
        for (slot, s) in t.srcs() {
            src[slot] = Some(self.tensor_view(s)?);
        }
        Ok(NodeView { op: t.op(), dst: self.tensor_view(id)?, src })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::allocator::alloc_graph_tensors;
    use crate::host_buffer::HOST_BUFFER_TYPE;

    #[test]
    fn views_resolve_to_their_source_memory() {
        let mut g = Graph::new();
        let a = g.new_tensor(DType::F32, &[4, 3]).unwrap();
        let row = g.view_1d(a, 4, 16).unwrap();
        let b = g.relu(row).unwrap();
        g.build_forward(b).unwrap();
        let err = g.node_view(b).unwrap_err();
        assert!(matches!(err, Error::NotAllocated { .. }), "{err:?}");
        alloc_graph_tensors(&mut g, &HOST_BUFFER_TYPE).unwrap();
        let node = g.node_view(b).unwrap();
        assert_eq!(node.op, Op::Unary(crate::UnaryOp::Relu));
        let src = node.src(0).unwrap();
        let a_data = g.data(a).unwrap();
        assert!(alloc::sync::Arc::ptr_eq(&src.data.buffer, &a_data.buffer));
        assert_eq!(src.data.offset, a_data.offset + 16);
        assert_eq!((src.ne, src.nbytes()), ([4, 1, 1, 1], 16));
        assert!(node.src(1).is_err());
        assert!(matches!(src.base(), BufferBase::Host(_)));
    }
}

#[cfg(test)]
mod init_tensor_tests {
    use alloc::sync::Arc;
    use alloc::vec::Vec;
    use core::any::Any;
    use core::sync::atomic::{AtomicUsize, Ordering};

    use crate::allocator::GraphAllocator;
    use crate::buffer::{Buffer, BufferBase, BufferType, BufferUsage};
    use crate::dtype::DType;
    use crate::error::Result;
    use crate::graph::Graph;
    use crate::host_buffer::{HostBuffer, HOST_ALIGNMENT};
    use crate::tensor::Tensor;

    /// Host memory whose buffers record every `init_tensor` call (offset, bytes).
    struct Recording;
    static RECORDING: Recording = Recording;
    /// The offsets of the calls, in order (this test's buffers only).
    static COUNT: AtomicUsize = AtomicUsize::new(0);
    static OFFSETS: [AtomicUsize; 8] = [const { AtomicUsize::new(usize::MAX) }; 8];

    struct RecordingBuffer(HostBuffer);

    impl BufferType for Recording {
        fn name(&self) -> &str {
            "recording"
        }
        fn alignment(&self) -> usize {
            HOST_ALIGNMENT
        }
        fn is_host(&self) -> bool {
            true
        }
        fn alloc_buffer(&'static self, size: usize) -> Result<Arc<dyn Buffer>> {
            Ok(Arc::new(RecordingBuffer(HostBuffer::alloc(self, size)?)))
        }
    }

    impl Buffer for RecordingBuffer {
        fn buffer_type(&self) -> &'static dyn BufferType {
            &RECORDING
        }
        fn size(&self) -> usize {
            self.0.size()
        }
        fn usage(&self) -> BufferUsage {
            self.0.usage()
        }
        fn set_usage(&self, usage: BufferUsage) {
            self.0.set_usage(usage)
        }
        fn base(&self) -> BufferBase {
            self.0.base()
        }
        fn init_tensor(&self, tensor: &Tensor, offset: usize) -> Result<()> {
            assert_eq!(tensor.nbytes(), 64);
            let i = COUNT.fetch_add(1, Ordering::SeqCst);
            OFFSETS[i.min(7)].store(offset, Ordering::SeqCst);
            Ok(())
        }
        fn set_bytes(&self, offset: usize, data: &[u8]) -> Result<()> {
            self.0.set_bytes(offset, data)
        }
        fn get_bytes(&self, offset: usize, out: &mut [u8]) -> Result<()> {
            self.0.get_bytes(offset, out)
        }
        fn fill(&self, offset: usize, len: usize, value: u8) -> Result<()> {
            self.0.fill(offset, len, value)
        }
        fn as_any(&self) -> &dyn Any {
            self
        }
    }

    #[test]
    fn every_tensor_an_allocator_binds_is_initialised_where_it_lands() {
        let mut g = Graph::new();
        let a = g.new_tensor(DType::F32, &[16]).unwrap();
        let b = g.exp(a).unwrap();
        let c = g.relu(b).unwrap();
        g.build_forward(c).unwrap();
        let mut galloc: GraphAllocator = GraphAllocator::new(&[&RECORDING]);
        galloc.alloc(&mut g, None).unwrap();
        // Every tensor is initialised once, at the place it was bound.
        assert_eq!(COUNT.load(Ordering::SeqCst), 3);
        let calls: Vec<usize> = OFFSETS[..3].iter().map(|o| o.load(Ordering::SeqCst)).collect();
        for id in [a, b, c] {
            let offset = g.data(id).unwrap().offset;
            assert!(calls.contains(&offset), "{id:?} at {offset}: {calls:?}");
        }
    }
}
