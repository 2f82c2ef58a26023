//! The reference kernels, one file per op family, and the dispatch over them.

mod concat;
mod copy;
mod elementwise;
mod flash_attn;
mod get_rows;
mod im2col;
mod mul_mat;
mod pool;
mod rope;
mod rows;
mod set_rows;

use alloc::vec::Vec;

use tessera_core::tensor::MAX_SRC;
use tessera_core::{Error, NodeView, Op, Result};

use crate::host_tensor::HostTensor;

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

/// The op, destination and sources of one node, resolved to host memory.
pub struct NodeTensors<'v> {
    pub op: Op,
    pub dst: HostTensor<'v>,
    src: [Option<HostTensor<'v>>; MAX_SRC],
}

impl<'v> NodeTensors<'v> {
    /// `node` in host memory; an error names the tensor whose memory `backend` cannot use.
    pub fn new(node: &'v NodeView, backend: &str) -> Result<NodeTensors<'v>> {
        let mut src = [None; MAX_SRC];
        for (slot, view) in node.src.iter().enumerate() {
            if let Some(view) = view {
                src[slot] = Some(HostTensor::new(view, false, backend)?);
            }
        }
        Ok(NodeTensors { op: node.op, dst: HostTensor::new(&node.dst, true, backend)?, src })
    }

    /// A node whose tensors the caller resolved itself.
    pub fn from_parts(op: Op, dst: HostTensor<'v>, src: [Option<HostTensor<'v>>; MAX_SRC]) -> NodeTensors<'v> {
        NodeTensors { op, dst, src }
    }

    /// Source `i`; the op constructors guarantee the sources each op needs are present.
    pub fn src(&self, i: usize) -> Result<HostTensor<'v>> {
        self.src[i]
            .ok_or_else(|| Error::InvalidParam { op: "COMPUTE", message: alloc::format!("source {i} is missing") })
    }

    pub fn opt_src(&self, i: usize) -> Option<HostTensor<'v>> {
        self.src[i]
    }
}

/// Computes one node with the reference kernels.
pub fn compute(n: &NodeTensors, scratch: &mut Scratch) -> Result<()> {
    match n.op {
        Op::Binary(b) => elementwise::binary(b, n, scratch),
        Op::Scale(s) => elementwise::map(n, scratch, |x| x * s),
        Op::Unary(u) => elementwise::unary(u, n, scratch),
        Op::SumRows => rows::sum_rows(n, scratch, false),
        Op::Mean => rows::sum_rows(n, scratch, true),
        Op::Argmax => rows::argmax(n, scratch),
        Op::SoftMax { scale } => rows::soft_max(n, scratch, scale),
        Op::Norm { eps } => rows::norm(n, scratch, eps),
        Op::RmsNorm { eps } => rows::rms_norm(n, scratch, eps),
        Op::DiagMaskInf { n_past } => rows::diag_mask_inf(n, scratch, n_past),
        Op::Rope(p) => rope::rope(n, scratch, p),
        Op::MulMat => mul_mat::mul_mat(n, scratch),
        Op::GetRows => get_rows::get_rows(n, scratch),
        Op::Cpy | Op::Cont => copy::copy(n, scratch),
        Op::SetRows => set_rows::set_rows(n, scratch),
        Op::FlashAttn { scale, .. } => flash_attn::flash_attn(n, scratch, scale),
        Op::Concat { dim } => concat::concat(n, scratch, dim),
        Op::Im2Col(p) => im2col::im2col(n, scratch, p),
        Op::Pool2d(p) => pool::pool_2d(n, scratch, p),
        Op::None | Op::View | Op::Reshape | Op::Permute(_) | Op::Transpose => Ok(()),
    }
}

/// Iterates over every row index `(i1, i2, i3)` of a shape.
pub fn rows_of(ne: [usize; 4]) -> impl Iterator<Item = (usize, usize, usize)> {
    let [_, n1, n2, n3] = ne;
    (0..n3).flat_map(move |i3| (0..n2).flat_map(move |i2| (0..n1).map(move |i1| (i1, i2, i3))))
}
