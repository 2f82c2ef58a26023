//! Graphs rebuilt from plain parts: a graph that crossed a library boundary (a backend
//! plugin's descriptors) or was read from outside is rebuilt here and checked through and
//! through (indices, types, shapes, strides, views, memory ranges, and each node against its
//! op's checked constructor), so kernels can rely on the invariants the graph builder
//! guarantees.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use crate::buffer::TensorData;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::graph::Graph;
use crate::op::Op;
use crate::tensor::{span_bytes, Tensor, TensorFlags, TensorId, MAX_DIMS, MAX_SRC};

/// Everything a tensor is except its memory, as plain values.
#[derive(Clone, Debug)]
pub struct TensorParts {
    pub dtype: DType,
    pub ne: [usize; MAX_DIMS],
    pub nb: [usize; MAX_DIMS],
    pub op: Op,
    /// Sources, as positions in the list of tensors the graph is rebuilt from.
    pub src: [Option<TensorId>; MAX_SRC],
    pub view_src: Option<TensorId>,
    pub view_offset: usize,
    pub flags: TensorFlags,
    pub name: String,
}

fn invalid(message: String) -> Error {
    Error::InvalidParam { op: "GRAPH_FROM_PARTS", message }
}

impl Tensor {
    /// A tensor from its parts alone, checked: a shape its type can hold (whole blocks for
    /// quantized types, packed along dimension 0) and a size in bytes that does not
    /// overflow. Its sources and view are taken as they are; [`Graph::from_parts`] checks
    /// them against the other tensors.
    pub fn from_parts(parts: TensorParts) -> Result<Tensor> {
        let TensorParts { dtype, ne, nb, op, src, view_src, view_offset, flags, name } = parts;
        let mut t = Tensor::new(dtype, ne, op)?;
        if dtype.is_quantized() && nb[0] != dtype.block_bytes() {
            return Err(invalid(format!(
                "'{name}': a {dtype} tensor must have nb[0] = {} (its block size), got {}",
                dtype.block_bytes(),
                nb[0]
            )));
        }
        if span_bytes(dtype, ne, nb).is_none() {
            return Err(Error::Overflow { what: "tensor size in bytes" });
        }
        t.nb = nb;
        t.src = src;
        t.view_src = view_src;
        t.view_offset = view_offset;
        t.flags = flags;
        t.name = name;
        Ok(t)
    }
}

impl Graph {
    /// The graph of `tensors` (each one's id is its position) that computes `nodes` in this
    /// order, checked: every source and view names another of the tensors, a view lies
    /// inside a source that is no view itself, and every node is what its op's constructor
    /// makes of its sources. The tensors have no memory yet ([`Graph::bind_existing`]).
    pub fn from_parts(tensors: Vec<TensorParts>, nodes: Vec<TensorId>) -> Result<Graph> {
        let n = tensors.len();
        let mut graph = Graph::new();
        graph.reserve(n)?;
        for (i, parts) in tensors.into_iter().enumerate() {
            let t = Tensor::from_parts(parts).map_err(|e| at_tensor(i, e))?;
            let other = |id: TensorId, what: &str| match id.index() {
                j if j < n && j != i => Ok(()),
                j => Err(invalid(format!("tensor {i}: {what} index {j} is not another of the {n} tensors"))),
            };
            for (_, s) in t.srcs() {
                other(s, "source")?;
            }
            if let Some(v) = t.view_src {
                other(v, "view source")?;
            }
            graph.push(t)?;
        }
        for (i, t) in graph.tensors.iter().enumerate() {
            let Some(root) = t.view_src else { continue };
            let r = graph.tensor(root)?;
            let end = t.nbytes().checked_add(t.view_offset);
            if r.view_src.is_some() || end.is_none_or(|end| end > r.nbytes()) {
                return Err(Error::ViewOutOfBounds {
                    tensor: graph.label(TensorId(i as u32)),
                    source: graph.label(root),
                    end: end.unwrap_or(usize::MAX),
                    source_bytes: r.nbytes(),
                });
            }
        }
        if let Some(bad) = nodes.iter().find(|id| id.index() >= n) {
            return Err(invalid(format!("node index {} is not one of the {n} tensors", bad.index())));
        }
        for &id in &nodes {
            graph.check_node(id)?;
        }
        graph.set_order(nodes, Vec::new());
        Ok(graph)
    }

    /// Binds memory that was prepared for the tensor where it was first bound (a graph
    /// rebuilt from parts refers to memory another graph allocated): checked like
    /// [`Graph::bind`], without calling the buffer's `init_tensor` again.
    pub fn bind_existing(&mut self, id: TensorId, data: TensorData) -> Result<()> {
        self.check_binding(id, &data)?;
        self.tensor_mut(id)?.data = Some(data);
        Ok(())
    }

    /// Checks that a computed node is what its op's checked constructor makes of its sources
    /// (type and shape), so kernels can rely on the invariants the graph builder guarantees.
    pub fn check_node(&self, id: TensorId) -> Result<()> {
        let t = self.tensor(id)?;
        if t.op == Op::None || t.op.is_view() {
            return Ok(());
        }
        let mut scratch = Graph::new();
        let mut src = [None; MAX_SRC];
        for (slot, s) in t.srcs() {
            let st = self.tensor(s)?;
            let mut leaf = Tensor::new(st.dtype, st.ne, Op::None)?;
            leaf.nb = st.nb;
            src[slot] = Some(scratch.push(leaf)?);
        }
        let need = |i: usize| {
            src[i].ok_or_else(|| invalid(format!("node '{}' ({}) lacks source {i}", self.label(id), t.op.name())))
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
            Op::SetRows => g.set_rows(need(2)?, need(0)?, need(1)?),
            Op::FlashAttn { scale, precision } => {
                let out = g.flash_attn(need(0)?, need(1)?, need(2)?, src[3], scale)?;
                g.set_flash_attn_precision(out, precision)?;
                Ok(out)
            }
            Op::Cont => g.cont(need(0)?),
            Op::Concat { dim } => g.concat(need(0)?, need(1)?, dim),
            Op::Rope(p) => g.rope(need(0)?, need(1)?, p),
            Op::DiagMaskInf { n_past } => g.diag_mask_inf(need(0)?, n_past),
            Op::Im2Col(p) => g.im2col(need(0)?, need(1)?, p, t.dtype),
            Op::Pool2d(p) => g.pool_2d(need(0)?, p),
        }
        .map_err(|e| invalid(format!("node '{}' ({}): {e}", self.label(id), t.op.name())))?;
        let d = scratch.tensor(derived)?;
        if d.dtype != t.dtype || d.ne != t.ne {
            return Err(invalid(format!(
                "node '{}' ({}) is {} {} but its sources make it {} {}",
                self.label(id),
                t.op.name(),
                t.dtype,
                t.shape(),
                d.dtype,
                d.shape()
            )));
        }
        Ok(())
    }
}

fn at_tensor(i: usize, e: Error) -> Error {
    match e {
        Error::InvalidParam { op, message } => Error::InvalidParam { op, message: format!("tensor {i}: {message}") },
        e => e,
    }
}

#[cfg(test)]
mod tests {
    use alloc::string::ToString;
    use alloc::vec;

    use super::*;
    use crate::op::Precision;

    fn parts_of(g: &Graph) -> Vec<TensorParts> {
        g.tensors()
            .iter()
            .map(|t| TensorParts {
                dtype: t.dtype,
                ne: t.ne,
                nb: t.nb,
                op: t.op,
                src: t.src,
                view_src: t.view_src,
                view_offset: t.view_offset,
                flags: t.flags,
                name: t.name.clone(),
            })
            .collect()
    }

    fn sample() -> Graph {
        let mut g = Graph::new();
        let a = g.new_tensor(DType::F32, &[8, 4]).unwrap();
        let t = g.transpose(a).unwrap();
        let c = g.cont(t).unwrap();
        let v = g.view_1d(c, 4, 8).unwrap();
        let s = g.sqr(v).unwrap();
        g.build_forward(s).unwrap();
        g
    }

    #[test]
    fn a_graph_round_trips_through_its_parts() {
        let g = sample();
        let back = Graph::from_parts(parts_of(&g), g.nodes().to_vec()).unwrap();
        assert_eq!(back.nodes(), g.nodes());
        for (a, b) in g.tensors().iter().zip(back.tensors()) {
            assert_eq!((a.dtype, a.ne, a.nb, a.op, a.src, a.view_src), (b.dtype, b.ne, b.nb, b.op, b.src, b.view_src));
        }
    }

    /// FLASH_ATTN's precision travels with its parts; only FLASH_ATTN nodes take one.
    #[test]
    fn a_flash_attn_precision_round_trips_and_only_flash_attn_takes_one() {
        let mut g = Graph::new();
        let q = g.new_tensor(DType::F32, &[32, 5, 2]).unwrap();
        let k = g.new_tensor(DType::F16, &[32, 7, 2]).unwrap();
        let out = g.flash_attn(q, k, k, None, 0.5).unwrap();
        g.set_flash_attn_precision(out, Precision::Reduced).unwrap();
        g.build_forward(out).unwrap();
        let back = Graph::from_parts(parts_of(&g), g.nodes().to_vec()).unwrap();
        assert_eq!(back.tensor(out).unwrap().op(), Op::FlashAttn { scale: 0.5, precision: Precision::Reduced });
        let e = g.set_flash_attn_precision(q, Precision::Reduced).unwrap_err().to_string();
        assert!(e.contains("not FLASH_ATTN"), "{e}");
    }

    #[test]
    fn bad_parts_are_refused_with_reasons() {
        let g = sample();
        let nodes = g.nodes().to_vec();
        let refuse = |edit: &dyn Fn(&mut Vec<TensorParts>)| {
            let mut parts = parts_of(&g);
            edit(&mut parts);
            Graph::from_parts(parts, nodes.clone()).err().unwrap().to_string()
        };
        assert!(refuse(&|p| p[1].src[0] = Some(TensorId(1))).contains("tensor 1: source index 1 is not another"));
        assert!(refuse(&|p| p[1].src[0] = Some(TensorId(9))).contains("of the 5 tensors"));
        assert!(refuse(&|p| p[3].view_offset = 1000).contains("view"));
        assert!(refuse(&|p| p[2].ne = [4, 4, 1, 1]).contains("but its sources make it f32 [4, 8, 1, 1]"));
        assert!(refuse(&|p| p[0].nb = [4, usize::MAX / 2, 1, 1]).contains("overflow"));
        let e = Graph::from_parts(parts_of(&g), vec![TensorId(7)]).err().unwrap().to_string();
        assert!(e.contains("node index 7 is not one of the 5 tensors"), "{e}");
    }
}
