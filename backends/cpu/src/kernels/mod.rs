//! The reference kernels: one obviously-correct implementation per op, for every type the op
//! accepts. Each reads its operands a row at a time into f32, computes, and writes the row
//! back in the destination type.

mod concat;
mod copy;
mod elementwise;
mod get_rows;
mod im2col;
mod mul_mat;
mod pool;
mod rope;
mod rows;

use alloc::vec::Vec;

use tessera_core::tensor::MAX_SRC;
use tessera_core::{Error, Graph, Op, Result, TensorId};

use crate::access::HostTensor;

/// Reusable f32 work memory, grown on demand (never shrunk).
#[derive(Default)]
pub struct Scratch {
    buf: Vec<f32>,
}

impl Scratch {
    /// `n` values of work memory (contents unspecified).
    pub fn take(&mut self, n: usize) -> Result<&mut [f32]> {
        if self.buf.len() < n {
            self.buf.try_reserve(n - self.buf.len()).map_err(|_| Error::OutOfMemory {
                what: "CPU kernel scratch".into(),
                requested: n.saturating_mul(4),
            })?;
            self.buf.resize(n, 0.0);
        }
        Ok(&mut self.buf[..n])
    }
}

/// The destination and sources of one node, resolved to host memory.
pub struct NodeTensors<'g> {
    pub dst: HostTensor<'g>,
    src: [Option<HostTensor<'g>>; MAX_SRC],
}

impl<'g> NodeTensors<'g> {
    /// Source `i`; the op constructors guarantee the sources each op needs are present.
    pub fn src(&self, i: usize) -> Result<HostTensor<'g>> {
        self.src[i]
            .ok_or_else(|| Error::InvalidParam { op: "COMPUTE", message: alloc::format!("source {i} is missing") })
    }

    pub fn opt_src(&self, i: usize) -> Option<HostTensor<'g>> {
        self.src[i]
    }
}

/// Computes one node of `graph` with the reference kernels.
pub fn compute_node(graph: &Graph, id: TensorId, backend: &str, scratch: &mut Scratch) -> Result<()> {
    let t = graph.tensor(id)?;
    let op = t.op();
    if op == Op::None || op.is_view() {
        return Ok(());
    }
    let mut src = [None; MAX_SRC];
    for (slot, s) in t.srcs() {
        src[slot] = Some(HostTensor::new(graph, s, false, backend)?);
    }
    let n = NodeTensors { dst: HostTensor::new(graph, id, true, backend)?, src };
    match op {
        Op::Binary(b) => elementwise::binary(b, &n, scratch),
        Op::Scale(s) => elementwise::map(&n, scratch, |x| x * s),
        Op::Unary(u) => elementwise::unary(u, &n, scratch),
        Op::SumRows => rows::sum_rows(&n, scratch, false),
        Op::Mean => rows::sum_rows(&n, scratch, true),
        Op::Argmax => rows::argmax(&n, scratch),
        Op::SoftMax { scale } => rows::soft_max(&n, scratch, scale),
        Op::Norm { eps } => rows::norm(&n, scratch, eps),
        Op::RmsNorm { eps } => rows::rms_norm(&n, scratch, eps),
        Op::DiagMaskInf { n_past } => rows::diag_mask_inf(&n, scratch, n_past),
        Op::Rope(p) => rope::rope(&n, scratch, p),
        Op::MulMat => mul_mat::mul_mat(&n, scratch),
        Op::GetRows => get_rows::get_rows(&n, scratch),
        Op::Cpy | Op::Cont => copy::copy(&n, scratch),
        Op::Concat { dim } => concat::concat(&n, scratch, dim),
        Op::Im2Col(p) => im2col::im2col(&n, scratch, p),
        Op::Pool2d(p) => pool::pool_2d(&n, scratch, p),
        Op::None | Op::View | Op::Reshape | Op::Permute(_) | Op::Transpose => Ok(()),
    }
}

/// Iterates over every row index `(i1, i2, i3)` of a shape.
pub fn rows_of(ne: [usize; 4]) -> impl Iterator<Item = (usize, usize, usize)> {
    let [_, n1, n2, n3] = ne;
    (0..n3).flat_map(move |i3| (0..n2).flat_map(move |i2| (0..n1).map(move |i1| (i1, i2, i3))))
}
