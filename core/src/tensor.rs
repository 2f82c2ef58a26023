//! Tensor metadata: type, shape, strides, op and sources. Data never lives here; a tensor
//! that has memory carries a [`TensorData`] binding.

use alloc::string::String;

use crate::buffer::TensorData;
use crate::dtype::DType;
use crate::error::{Error, Result, Shape};
use crate::op::Op;

/// Most sources a node can have (ggml's `GGML_MAX_SRC`).
pub const MAX_SRC: usize = 10;
/// Dimensions of every tensor; unused trailing dimensions are 1.
pub const MAX_DIMS: usize = 4;

/// Index of a tensor in its graph's arena.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TensorId(pub u32);

impl TensorId {
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

/// Flags that steer allocation and scheduling.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TensorFlags(u8);

impl TensorFlags {
    /// Set from outside before each compute: allocated first, never shares memory.
    pub const INPUT: TensorFlags = TensorFlags(1);
    /// Read after the compute: never freed or overwritten.
    pub const OUTPUT: TensorFlags = TensorFlags(2);
    /// A trainable parameter.
    pub const PARAM: TensorFlags = TensorFlags(4);
    /// Bound by a graph allocator's plan (so a later plan may move it).
    pub const PLANNED: TensorFlags = TensorFlags(8);

    pub const fn empty() -> TensorFlags {
        TensorFlags(0)
    }
    pub const fn contains(self, other: TensorFlags) -> bool {
        self.0 & other.0 == other.0
    }
    pub fn insert(&mut self, other: TensorFlags) {
        self.0 |= other.0;
    }
    pub fn remove(&mut self, other: TensorFlags) {
        self.0 &= !other.0;
    }
}

/// One tensor of a graph.
#[derive(Clone, Debug)]
pub struct Tensor {
    pub(crate) dtype: DType,
    pub(crate) ne: [usize; MAX_DIMS],
    pub(crate) nb: [usize; MAX_DIMS],
    pub(crate) op: Op,
    pub(crate) src: [Option<TensorId>; MAX_SRC],
    pub(crate) view_src: Option<TensorId>,
    pub(crate) view_offset: usize,
    pub(crate) flags: TensorFlags,
    pub(crate) name: String,
    pub(crate) data: Option<TensorData>,
}

/// Contiguous byte strides of a tensor of `dtype` and shape `ne`.
pub fn contiguous_strides(dtype: DType, ne: [usize; MAX_DIMS]) -> Result<[usize; MAX_DIMS]> {
    let mut nb = [0usize; MAX_DIMS];
    nb[0] = dtype.block_bytes();
    nb[1] = dtype.row_bytes(ne[0])?;
    for i in 2..MAX_DIMS {
        nb[i] = nb[i - 1].checked_mul(ne[i - 1]).ok_or(Error::Overflow { what: "tensor strides" })?;
    }
    Ok(nb)
}

/// Bytes spanned by a tensor of `dtype`, shape `ne` and strides `nb` (ggml's `ggml_nbytes`).
pub(crate) fn span_bytes(dtype: DType, ne: [usize; MAX_DIMS], nb: [usize; MAX_DIMS]) -> Option<usize> {
    if ne.contains(&0) {
        return Some(0);
    }
    let mut bytes = (ne[0] / dtype.block_len()).checked_mul(nb[0])?;
    for i in 1..MAX_DIMS {
        bytes = bytes.checked_add((ne[i] - 1).checked_mul(nb[i])?)?;
    }
    if dtype.block_len() == 1 {
        // ne[0] values span (ne[0] - 1) * nb[0] + one value; the loop above counted ne[0] * nb[0].
        bytes = bytes - nb[0] + dtype.block_bytes();
    }
    Some(bytes)
}

impl Tensor {
    pub(crate) fn new(dtype: DType, ne: [usize; MAX_DIMS], op: Op) -> Result<Tensor> {
        let nb = contiguous_strides(dtype, ne)?;
        span_bytes(dtype, ne, nb).ok_or(Error::Overflow { what: "tensor size in bytes" })?;
        Ok(Tensor {
            dtype,
            ne,
            nb,
            op,
            src: [None; MAX_SRC],
            view_src: None,
            view_offset: 0,
            flags: TensorFlags::empty(),
            name: String::new(),
            data: None,
        })
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }
    /// Number of values along each dimension.
    pub fn ne(&self) -> [usize; MAX_DIMS] {
        self.ne
    }
    /// Byte stride of each dimension (for quantized types, `nb[0]` is the block size).
    pub fn nb(&self) -> [usize; MAX_DIMS] {
        self.nb
    }
    pub fn shape(&self) -> Shape {
        Shape(self.ne)
    }
    pub fn op(&self) -> Op {
        self.op
    }
    pub fn src(&self, i: usize) -> Option<TensorId> {
        self.src.get(i).copied().flatten()
    }
    /// The sources that are set, with their slot index.
    pub fn srcs(&self) -> impl Iterator<Item = (usize, TensorId)> + '_ {
        self.src.iter().enumerate().filter_map(|(i, s)| s.map(|s| (i, s)))
    }
    /// The tensor whose memory this one views, if it is a view.
    pub fn view_src(&self) -> Option<TensorId> {
        self.view_src
    }
    pub fn view_offset(&self) -> usize {
        self.view_offset
    }
    pub fn flags(&self) -> TensorFlags {
        self.flags
    }
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The memory bound to this tensor itself (views carry none: see `Graph::data`).
    pub fn data(&self) -> Option<&TensorData> {
        self.data.as_ref()
    }
    pub fn nelements(&self) -> usize {
        self.ne.iter().product()
    }
    pub fn nrows(&self) -> usize {
        self.ne[1] * self.ne[2] * self.ne[3]
    }
    /// Bytes spanned from the first to one past the last value.
    pub fn nbytes(&self) -> usize {
        // Overflow was ruled out when the shape and strides were set.
        span_bytes(self.dtype, self.ne, self.nb).unwrap_or(usize::MAX)
    }
    /// Bytes of one row of `ne[0]` values.
    pub fn row_bytes(&self) -> usize {
        self.ne[0] / self.dtype.block_len() * self.dtype.block_bytes()
    }
    /// Bytes of the rows back to back, whatever the strides.
    pub fn packed_nbytes(&self) -> usize {
        self.row_bytes() * self.ne[1] * self.ne[2] * self.ne[3]
    }
    /// Values are densely packed in dimension order.
    pub fn is_contiguous(&self) -> bool {
        contiguous_strides(self.dtype, self.ne)
            .is_ok_and(|nb| (0..MAX_DIMS).all(|i| self.ne[i] == 1 || self.nb[i] == nb[i]))
    }
    /// Each row's values are densely packed (rows themselves may be strided).
    pub fn rows_contiguous(&self) -> bool {
        self.ne[0] == 1 || self.nb[0] == self.dtype.block_bytes()
    }
    pub fn same_shape(&self, other: &Tensor) -> bool {
        self.ne == other.ne
    }
    pub fn same_layout(&self, other: &Tensor) -> bool {
        self.dtype == other.dtype && self.ne == other.ne && self.nb == other.nb
    }
    /// Byte offset of the row `(i1, i2, i3)`.
    pub fn row_offset(&self, i1: usize, i2: usize, i3: usize) -> usize {
        i1 * self.nb[1] + i2 * self.nb[2] + i3 * self.nb[3]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_of_plain_and_quantized_tensors() {
        let t = Tensor::new(DType::F32, [3, 2, 1, 1], Op::None).unwrap();
        assert_eq!(t.nb, [4, 12, 24, 24]);
        assert_eq!(t.nbytes(), 24);
        let q = Tensor::new(DType::Q8_0, [64, 3, 1, 1], Op::None).unwrap();
        assert_eq!(q.nb, [34, 68, 204, 204]);
        assert_eq!(q.nbytes(), 204);
        assert!(q.is_contiguous());
    }

    #[test]
    fn oversized_shapes_are_errors() {
        assert!(matches!(Tensor::new(DType::F32, [usize::MAX / 2, 4, 1, 1], Op::None), Err(Error::Overflow { .. })));
    }
}
