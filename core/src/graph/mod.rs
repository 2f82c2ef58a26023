//! The graph arena: tensors in creation order plus the topologically ordered nodes and leafs
//! that a compute runs.

mod io;
mod ops;
mod parts;
mod view;

pub use io::{copy_tensor, copy_tensor_via, pack_rows, Staging};
pub use parts::TensorParts;

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use crate::buffer::TensorData;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::op::Op;
use crate::tensor::{Tensor, TensorFlags, TensorId, MAX_DIMS};

/// A computation graph and the arena of its tensors.
///
/// Tensors are created with `new_tensor` (leafs) and the op methods (`add`, `mul_mat`, ...),
/// which check shapes and types. `build_forward` then records, in dependency order, what must
/// be computed to produce an output. Ids are only meaningful in the graph that made them.
#[derive(Clone, Default)]
pub struct Graph {
    tensors: Vec<Tensor>,
    nodes: Vec<TensorId>,
    leafs: Vec<TensorId>,
    visited: Vec<bool>,
}

impl Graph {
    pub fn new() -> Graph {
        Graph::default()
    }

    /// Every tensor, indexed by `TensorId`.
    pub fn tensors(&self) -> &[Tensor] {
        &self.tensors
    }

    /// Nodes to compute, each after its sources (views included; they need no kernel).
    pub fn nodes(&self) -> &[TensorId] {
        &self.nodes
    }

    /// Tensors the nodes read that are not computed (weights, inputs).
    pub fn leafs(&self) -> &[TensorId] {
        &self.leafs
    }

    pub fn tensor(&self, id: TensorId) -> Result<&Tensor> {
        self.tensors.get(id.index()).ok_or(Error::UnknownTensor { id: id.index(), tensors: self.tensors.len() })
    }

    pub(crate) fn tensor_mut(&mut self, id: TensorId) -> Result<&mut Tensor> {
        let tensors = self.tensors.len();
        self.tensors.get_mut(id.index()).ok_or(Error::UnknownTensor { id: id.index(), tensors })
    }

    /// The tensor's name, or `#id OP` when it has none (for messages).
    pub fn label(&self, id: TensorId) -> String {
        match self.tensors.get(id.index()) {
            Some(t) if !t.name.is_empty() => t.name.clone(),
            Some(t) => format!("#{} {}", id.0, t.op.name()),
            None => format!("#{}", id.0),
        }
    }

    pub(crate) fn push(&mut self, tensor: Tensor) -> Result<TensorId> {
        let id =
            u32::try_from(self.tensors.len()).map_err(|_| Error::Overflow { what: "number of tensors in a graph" })?;
        self.tensors
            .try_reserve(1)
            .map_err(|_| crate::fallible::out_of_memory("graph arena", core::mem::size_of::<Tensor>()))?;
        self.tensors.push(tensor);
        Ok(TensorId(id))
    }

    /// Makes room for `additional` more tensors in one allocation (a graph whose size is
    /// known up front then never grows its arena by doubling, which briefly holds both the
    /// old and the new arena).
    pub fn reserve(&mut self, additional: usize) -> Result<()> {
        self.tensors.try_reserve_exact(additional).map_err(|_| {
            crate::fallible::out_of_memory("graph arena", additional.saturating_mul(core::mem::size_of::<Tensor>()))
        })
    }

    /// A new leaf of `dtype` with shape `ne` (1 to 4 dimensions, missing ones are 1).
    pub fn new_tensor(&mut self, dtype: DType, ne: &[usize]) -> Result<TensorId> {
        if ne.is_empty() || ne.len() > MAX_DIMS {
            return Err(Error::InvalidParam {
                op: "NEW_TENSOR",
                message: format!("a tensor has 1 to 4 dimensions, got {}", ne.len()),
            });
        }
        let mut shape = [1usize; MAX_DIMS];
        shape[..ne.len()].copy_from_slice(ne);
        self.push(Tensor::new(dtype, shape, Op::None)?)
    }

    pub fn set_name(&mut self, id: TensorId, name: &str) -> Result<()> {
        let t = self.tensor_mut(id)?;
        t.name.clear();
        t.name.try_reserve_exact(name.len()).map_err(|_| crate::fallible::out_of_memory("tensor name", name.len()))?;
        t.name.push_str(name);
        Ok(())
    }

    /// Marks a tensor as set from outside before each compute.
    pub fn set_input(&mut self, id: TensorId) -> Result<()> {
        self.tensor_mut(id)?.flags.insert(TensorFlags::INPUT);
        Ok(())
    }

    /// Marks a tensor as read after the compute (its memory is never reused).
    pub fn set_output(&mut self, id: TensorId) -> Result<()> {
        self.tensor_mut(id)?.flags.insert(TensorFlags::OUTPUT);
        Ok(())
    }

    pub fn set_param(&mut self, id: TensorId) -> Result<()> {
        self.tensor_mut(id)?.flags.insert(TensorFlags::PARAM);
        Ok(())
    }

    /// Binds a tensor to memory. Views cannot be bound: they use their source's memory.
    pub fn bind(&mut self, id: TensorId, data: TensorData) -> Result<()> {
        self.bind_as(id, data, false)
    }

    /// Binds a tensor to memory placed by a graph allocator's plan.
    pub(crate) fn bind_planned(&mut self, id: TensorId, data: TensorData) -> Result<()> {
        self.bind_as(id, data, true)
    }

    /// Whether a graph allocator may place this tensor: it is no view, and it has no memory
    /// or memory from an earlier plan.
    pub fn is_plannable(&self, id: TensorId) -> bool {
        self.tensors
            .get(id.index())
            .is_some_and(|t| t.view_src.is_none() && (t.data.is_none() || t.flags.contains(TensorFlags::PLANNED)))
    }

    fn bind_as(&mut self, id: TensorId, data: TensorData, planned: bool) -> Result<()> {
        self.check_binding(id, &data)?;
        let t = self.tensor_mut(id)?;
        data.buffer.init_tensor(t, data.offset)?;
        t.data = Some(data);
        if planned {
            t.flags.insert(TensorFlags::PLANNED);
        } else {
            t.flags.remove(TensorFlags::PLANNED);
        }
        Ok(())
    }

    /// Fails unless `data` can hold the tensor: it is no view, and it fits in the buffer.
    fn check_binding(&self, id: TensorId, data: &TensorData) -> Result<()> {
        let t = self.tensor(id)?;
        if t.view_src.is_some() {
            return Err(Error::InvalidParam {
                op: "BIND",
                message: format!("'{}' is a view and uses the memory of its source", self.label(id)),
            });
        }
        let size = data.buffer.size();
        let nbytes = data.buffer.buffer_type().alloc_size(t).max(t.nbytes());
        match data.offset.checked_add(nbytes) {
            Some(end) if end <= size => Ok(()),
            _ => Err(Error::BufferRange {
                buffer: data.buffer.buffer_type().name().into(),
                offset: data.offset,
                len: nbytes,
                size,
            }),
        }
    }

    /// Removes a tensor's memory binding.
    pub fn unbind(&mut self, id: TensorId) -> Result<()> {
        let t = self.tensor_mut(id)?;
        t.data = None;
        t.flags.remove(TensorFlags::PLANNED);
        Ok(())
    }

    /// Where a tensor's data lives: its own binding, or its view source's plus the view offset.
    pub fn data(&self, id: TensorId) -> Option<TensorData> {
        let t = self.tensors.get(id.index())?;
        match t.view_src {
            Some(src) => {
                let d = self.tensors.get(src.index())?.data.as_ref()?;
                Some(TensorData { buffer: d.buffer.clone(), offset: d.offset + t.view_offset })
            }
            None => t.data.clone(),
        }
    }

    /// Adds `output` and everything it depends on to the nodes and leafs, sources first.
    /// Calling it again with other outputs extends the graph; tensors already added stay.
    /// Running out of memory is [`Error::OutOfMemory`], with the lists holding what was added
    /// so far (still sources first).
    pub fn build_forward(&mut self, output: TensorId) -> Result<()> {
        self.tensor(output)?;
        let n = self.tensors.len();
        let grow = n.saturating_sub(self.visited.len());
        reserve_order(&mut self.visited, grow)?;
        self.visited.resize(n, false);
        // Iterative depth-first walk (deep graphs must not exhaust a small stack): each stack
        // entry is a tensor and the next source slot to look at.
        let mut stack: Vec<(TensorId, usize)> = Vec::new();
        if !self.visited[output.index()] {
            reserve_order(&mut stack, 1)?;
            stack.push((output, 0));
        }
        while let Some((id, slot)) = stack.pop() {
            if slot == 0 && self.visited[id.index()] {
                continue;
            }
            let t = &self.tensors[id.index()];
            if let Some(next) = t.src[slot..].iter().position(Option::is_some) {
                let slot = slot + next;
                // Room for this entry again (just popped) and its source.
                reserve_order(&mut stack, 2)?;
                stack.push((id, slot + 1));
                if let Some(src) = t.src[slot] {
                    if !self.visited[src.index()] {
                        stack.push((src, 0));
                    }
                }
                continue;
            }
            if self.visited[id.index()] {
                continue;
            }
            // Room first, so that on running out of memory every visited tensor is listed.
            let list = if t.op == Op::None { &mut self.leafs } else { &mut self.nodes };
            reserve_order(list, 1)?;
            self.visited[id.index()] = true;
            list.push(id);
        }
        Ok(())
    }

    /// Replaces the node and leaf lists (for graphs derived by the scheduler).
    pub(crate) fn set_order(&mut self, nodes: Vec<TensorId>, leafs: Vec<TensorId>) {
        self.nodes = nodes;
        self.leafs = leafs;
        self.visited.clear();
    }

    /// Forgets the node and leaf lists (the tensors stay).
    pub fn clear_order(&mut self) {
        self.nodes.clear();
        self.leafs.clear();
        self.visited.clear();
    }
}

/// `v.try_reserve(n)` for the order tables, failing with `Error::OutOfMemory`.
fn reserve_order<T>(v: &mut Vec<T>, n: usize) -> Result<()> {
    v.try_reserve(n)
        .map_err(|_| crate::fallible::out_of_memory("graph order", n.saturating_mul(core::mem::size_of::<T>())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_forward_orders_sources_first_and_skips_unused() {
        let mut g = Graph::new();
        let a = g.new_tensor(DType::F32, &[4]).unwrap();
        let b = g.new_tensor(DType::F32, &[4]).unwrap();
        let unused = g.relu(a).unwrap();
        let c = g.add(a, b).unwrap();
        let d = g.mul(c, a).unwrap();
        let e = g.exp(d).unwrap();
        g.build_forward(e).unwrap();
        assert_eq!(g.nodes(), &[c, d, e]);
        assert_eq!(g.leafs(), &[a, b]);
        assert!(!g.nodes().contains(&unused));
        // Expanding with another output appends only what is new.
        g.build_forward(unused).unwrap();
        assert_eq!(g.nodes(), &[c, d, e, unused]);
    }

    #[test]
    fn deep_chains_do_not_recurse() {
        let mut g = Graph::new();
        let mut x = g.new_tensor(DType::F32, &[1]).unwrap();
        // Miri interprets slowly: a shorter chain still shows the walk is iterative.
        let n = if cfg!(miri) { 2_000 } else { 100_000 };
        for _ in 0..n {
            x = g.neg(x).unwrap();
        }
        g.build_forward(x).unwrap();
        assert_eq!(g.nodes().len(), n);
    }

    #[test]
    fn unknown_ids_are_errors() {
        let mut g = Graph::new();
        let err = g.build_forward(TensorId(3)).unwrap_err();
        assert_eq!(err, Error::UnknownTensor { id: 3, tensors: 0 });
    }
}
