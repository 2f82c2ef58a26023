//! The tensor argument every kernel takes.

use cudarc::driver::DeviceRepr;
use tessera_core::tensor::contiguous_strides;
use tessera_core::{DType, Result, TensorView};

/// A tensor as the kernels take it: where its first value is, its shape and its byte strides.
///
/// The same layout as `struct TensorArg` in `kernels/common.cuh` (72 bytes, passed by value).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TensorArg {
    /// Device address of the first value (the buffer's base plus the tensor's offset).
    pub data: u64,
    /// Number of values along each dimension.
    pub ne: [i64; 4],
    /// Byte stride of each dimension; for quantized types `nb[0]` is the block size.
    pub nb: [i64; 4],
}

const _: () = assert!(core::mem::size_of::<TensorArg>() == 72 && core::mem::align_of::<TensorArg>() == 8);

// SAFETY: `TensorArg` is `#[repr(C)]` plain data (a u64 and two arrays of i64, no padding, no
// references), laid out exactly as the `TensorArg` struct the kernels declare in common.cuh, so
// its bytes are a valid kernel parameter of that type. The address it holds is only
// dereferenced by kernels, which the launcher gives tensors the caller vouched for.
unsafe impl DeviceRepr for TensorArg {}

/// `v` as an i64; sizes and strides of tensors in memory always fit.
fn to_i64(v: usize) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl TensorArg {
    /// No tensor: address 0, which kernels taking an optional operand read as absent.
    pub const NONE: TensorArg = TensorArg { data: 0, ne: [0; 4], nb: [0; 4] };

    /// The tensor of `view` whose first value is at device address `data`.
    pub fn new(data: u64, view: &TensorView) -> TensorArg {
        TensorArg::from_parts(data, view.ne, view.nb)
    }

    /// A tensor of shape `ne` and byte strides `nb` at device address `data`.
    pub fn from_parts(data: u64, ne: [usize; 4], nb: [usize; 4]) -> TensorArg {
        TensorArg { data, ne: ne.map(to_i64), nb: nb.map(to_i64) }
    }

    /// A densely packed tensor of `dtype` and shape `ne` at device address `data`.
    pub fn contiguous(data: u64, dtype: DType, ne: [i64; 4]) -> Result<TensorArg> {
        let ne_usize = ne.map(|n| usize::try_from(n).unwrap_or(0));
        let nb = contiguous_strides(dtype, ne_usize)?;
        Ok(TensorArg::from_parts(data, ne_usize, nb))
    }

    /// Number of values.
    pub fn nelements(&self) -> i64 {
        self.ne.iter().fold(1i64, |n, &d| n.saturating_mul(d))
    }

    /// The bytes `[start, end)` its values of type `dtype` lie in (an empty range when it has
    /// no values).
    pub fn span(&self, dtype: DType) -> (u64, u64) {
        if self.nelements() <= 0 {
            return (self.data, self.data);
        }
        let counts = [self.ne[0] / dtype.block_len() as i64, self.ne[1], self.ne[2], self.ne[3]];
        let last = counts
            .iter()
            .zip(self.nb)
            .fold(0i64, |sum, (&n, nb)| sum.saturating_add((n - 1).max(0).saturating_mul(nb)));
        let end = self.data.saturating_add(last as u64).saturating_add(dtype.block_bytes() as u64);
        (self.data, end)
    }

    /// Whether any byte of `a`'s values is also one of `b`'s.
    pub fn overlap((a, at): (TensorArg, DType), (b, bt): (TensorArg, DType)) -> bool {
        let ((a0, a1), (b0, b1)) = (a.span(at), b.span(bt));
        a0 < b1 && b0 < a1
    }

    /// Number of rows (values along dimensions 1, 2 and 3).
    pub fn nrows(&self) -> i64 {
        self.ne[1].saturating_mul(self.ne[2]).saturating_mul(self.ne[3])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_matches_the_kernels_struct() {
        assert_eq!(core::mem::offset_of!(TensorArg, data), 0);
        assert_eq!(core::mem::offset_of!(TensorArg, ne), 8);
        assert_eq!(core::mem::offset_of!(TensorArg, nb), 40);
        let common = include_str!("../../kernels/common.cuh");
        assert!(common.contains("unsigned long long data;\n    long long ne[4];\n    long long nb[4];"));
        assert!(common.contains("sizeof(TensorArg) == 72"));
    }

    #[test]
    fn spans_cover_the_values_and_overlaps_are_found() {
        let t = TensorArg::contiguous(256, DType::Q8_0, [64, 3, 1, 1]).unwrap();
        assert_eq!(t.span(DType::Q8_0), (256, 256 + 6 * 34));
        let f = TensorArg::contiguous(1000, DType::F32, [4, 2, 1, 1]).unwrap();
        assert_eq!(f.span(DType::F32), (1000, 1032));
        let next = TensorArg::contiguous(1032, DType::F32, [4, 1, 1, 1]).unwrap();
        assert!(!TensorArg::overlap((f, DType::F32), (next, DType::F32)));
        let inside = TensorArg::contiguous(1028, DType::F32, [1, 1, 1, 1]).unwrap();
        assert!(TensorArg::overlap((f, DType::F32), (inside, DType::F32)));
    }

    #[test]
    fn contiguous_tensors_have_packed_strides() {
        let t = TensorArg::contiguous(256, DType::Q8_0, [64, 3, 2, 1]).unwrap();
        assert_eq!(t.nb, [34, 68, 204, 408]);
        assert_eq!((t.nelements(), t.nrows()), (384, 6));
        let f = TensorArg::contiguous(0, DType::F16, [7, 5, 1, 1]).unwrap();
        assert_eq!(f.nb, [2, 14, 70, 70]);
    }
}
