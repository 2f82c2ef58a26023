//! View ops: new shapes and strides over an existing tensor's memory, no kernel.

use alloc::format;

use crate::error::{Error, Result};
use crate::graph::Graph;
use crate::op::Op;
use crate::tensor::{contiguous_strides, span_bytes, Tensor, TensorId, MAX_DIMS};

impl Graph {
    /// A view of `src` (the root of any view chain is recorded as the view source).
    fn push_view(
        &mut self,
        op: Op,
        src: TensorId,
        ne: [usize; MAX_DIMS],
        nb: [usize; MAX_DIMS],
        offset: usize,
    ) -> Result<TensorId> {
        let s = self.tensor(src)?;
        let (root, base) = match s.view_src {
            Some(root) => (root, s.view_offset),
            None => (src, 0),
        };
        let dtype = s.dtype;
        let root_bytes = self.tensor(root)?.nbytes();
        let end = span_bytes(dtype, ne, nb).and_then(|n| n.checked_add(base)).and_then(|n| n.checked_add(offset));
        let fits = end.is_some_and(|end| end <= root_bytes);
        if !fits {
            return Err(Error::ViewOutOfBounds {
                tensor: format!("{} of {}", op.name(), self.label(src)),
                source: self.label(root),
                end: end.unwrap_or(usize::MAX),
                source_bytes: root_bytes,
            });
        }
        let mut t = Tensor::new(dtype, ne, op)?;
        t.nb = nb;
        t.src[0] = Some(src);
        t.view_src = Some(root);
        t.view_offset = base + offset;
        self.push(t)
    }

    /// A window of shape `ne` with row strides `nb1..nb3` starting `offset` bytes into `src`.
    pub fn view(&mut self, src: TensorId, ne: [usize; MAX_DIMS], nb: [usize; 3], offset: usize) -> Result<TensorId> {
        let dtype = self.tensor(src)?.dtype;
        dtype.row_bytes(ne[0])?;
        let strides = [dtype.block_bytes(), nb[0], nb[1], nb[2]];
        self.push_view(Op::View, src, ne, strides, offset)
    }

    /// The first `n` values of `src` from `offset` bytes on, as a vector.
    pub fn view_1d(&mut self, src: TensorId, n: usize, offset: usize) -> Result<TensorId> {
        let nb = contiguous_strides(self.tensor(src)?.dtype, [n, 1, 1, 1])?;
        self.view(src, [n, 1, 1, 1], [nb[1], nb[2], nb[3]], offset)
    }

    /// An `n0 x n1` matrix view with row stride `nb1`.
    pub fn view_2d(&mut self, src: TensorId, n0: usize, n1: usize, nb1: usize, offset: usize) -> Result<TensorId> {
        let nb2 = nb1.checked_mul(n1).ok_or(Error::Overflow { what: "VIEW strides" })?;
        self.view(src, [n0, n1, 1, 1], [nb1, nb2, nb2], offset)
    }

    /// `src` with shape `ne` (same number of values; `src` must be contiguous).
    pub fn reshape(&mut self, src: TensorId, ne: &[usize]) -> Result<TensorId> {
        let s = self.tensor(src)?;
        let mut shape = [1usize; MAX_DIMS];
        if ne.is_empty() || ne.len() > MAX_DIMS {
            return Err(Error::InvalidParam {
                op: "RESHAPE",
                message: format!("a tensor has 1 to 4 dimensions, got {}", ne.len()),
            });
        }
        shape[..ne.len()].copy_from_slice(ne);
        let count = shape.iter().try_fold(1usize, |a, b| a.checked_mul(*b));
        if count != Some(s.nelements()) {
            return Err(Error::ShapeMismatch {
                op: "RESHAPE",
                tensor: self.label(src),
                shape: s.shape(),
                expected: format!(
                    "{} values to match the new shape {}",
                    count.unwrap_or(usize::MAX),
                    crate::error::Shape(shape)
                ),
            });
        }
        if !s.is_contiguous() {
            return Err(Error::ShapeMismatch {
                op: "RESHAPE",
                tensor: self.label(src),
                shape: s.shape(),
                expected: "a contiguous tensor (apply CONT first)".into(),
            });
        }
        let nb = contiguous_strides(s.dtype, shape)?;
        self.push_view(Op::Reshape, src, shape, nb, 0)
    }

    /// `src` with axis `i` moved to position `axes[i]`.
    pub fn permute(&mut self, src: TensorId, axes: [usize; 4]) -> Result<TensorId> {
        self.permute_as(Op::Permute(axes.map(|a| a as u8)), src, axes)
    }

    /// `src` with dimensions 0 and 1 swapped.
    pub fn transpose(&mut self, src: TensorId) -> Result<TensorId> {
        self.permute_as(Op::Transpose, src, [1, 0, 2, 3])
    }

    fn permute_as(&mut self, op: Op, src: TensorId, axes: [usize; 4]) -> Result<TensorId> {
        let s = self.tensor(src)?;
        let mut seen = [false; MAX_DIMS];
        for &a in &axes {
            if a >= MAX_DIMS || core::mem::replace(&mut seen[a], true) {
                return Err(Error::InvalidParam {
                    op: op.name(),
                    message: format!("axes {axes:?} are not a permutation of 0, 1, 2, 3"),
                });
            }
        }
        if s.dtype.is_quantized() && axes[0] != 0 {
            return Err(Error::TypeMismatch {
                op: op.name(),
                tensor: self.label(src),
                dtype: s.dtype,
                expected: "a non-quantized type (quantized rows cannot be split)",
            });
        }
        let (mut ne, mut nb) = ([0usize; MAX_DIMS], [0usize; MAX_DIMS]);
        for i in 0..MAX_DIMS {
            ne[axes[i]] = s.ne[i];
            nb[axes[i]] = s.nb[i];
        }
        self.push_view(op, src, ne, nb, 0)
    }
}

#[cfg(test)]
mod tests {
    use alloc::string::ToString;

    use crate::dtype::DType;
    use crate::error::Error;
    use crate::graph::Graph;

    #[test]
    fn views_chain_to_the_root_and_check_bounds() {
        let mut g = Graph::new();
        let a = g.new_tensor(DType::F32, &[4, 3]).unwrap();
        let row = g.view_1d(a, 4, 16).unwrap();
        let tail = g.view_1d(row, 2, 8).unwrap();
        let t = g.tensor(tail).unwrap();
        assert_eq!(t.view_src(), Some(a));
        assert_eq!(t.view_offset(), 24);
        let err = g.view_1d(a, 4, 36).unwrap_err();
        assert!(matches!(err, Error::ViewOutOfBounds { end: 52, source_bytes: 48, .. }));
        assert!(err.to_string().contains("reaches byte 52"));
    }

    #[test]
    fn permute_moves_shape_and_strides() {
        let mut g = Graph::new();
        let a = g.new_tensor(DType::F32, &[2, 3, 4]).unwrap();
        let p = g.permute(a, [2, 0, 1, 3]).unwrap();
        let t = g.tensor(p).unwrap();
        assert_eq!(t.ne(), [3, 4, 2, 1]);
        assert_eq!(t.nb(), [8, 24, 4, 96]);
        assert!(!t.is_contiguous());
        assert!(g.permute(a, [0, 0, 1, 2]).is_err());
        // A permuted tensor cannot be reshaped without CONT.
        assert!(matches!(g.reshape(p, &[24]), Err(Error::ShapeMismatch { .. })));
        let r = g.reshape(a, &[6, 4]).unwrap();
        assert_eq!(g.tensor(r).unwrap().ne(), [6, 4, 1, 1]);
    }
}
