//! Tensors as the row kernels see them: values densely packed along each row, rows anywhere
//! (any strides for dimensions 1 to 3), as raw addresses the threads share.

use tessera_core::DType;
use tessera_reference::{HostTensor, NodeTensors};

/// Values below which a row op runs on one thread (waking the others costs more).
const MIN_VALUES_PER_THREAD: usize = 1 << 14;

/// How many of the team's `threads` a row op over `values` values is worth.
pub fn threads_for_values(threads: usize, values: usize) -> usize {
    (values / MIN_VALUES_PER_THREAD).clamp(1, threads)
}

/// A tensor with dense rows.
#[derive(Clone, Copy)]
pub struct RowTensor {
    ptr: *mut u8,
    pub dtype: DType,
    pub ne: [usize; 4],
    nb: [usize; 4],
}

// SAFETY: the address points into a tensor that stays bound for the whole compute of the
// node; row kernels give each row to one thread, which alone writes it.
unsafe impl Send for RowTensor {}
// SAFETY: as for `Send`.
unsafe impl Sync for RowTensor {}

impl RowTensor {
    /// `t` if its rows are dense (values, or blocks, one after another) and every row starts
    /// at a multiple of its values' alignment; `None` for other layouts.
    pub fn of(t: &HostTensor) -> Option<RowTensor> {
        let dense = t.ne[0] <= 1 || t.nb[0] == t.dtype.block_bytes();
        let align = if t.dtype.is_quantized() { 1 } else { t.dtype.block_bytes() };
        let aligned = (t.ptr() as usize | t.nb[1] | t.nb[2] | t.nb[3]).is_multiple_of(align);
        (dense && aligned).then_some(RowTensor { ptr: t.ptr(), dtype: t.dtype, ne: t.ne, nb: t.nb })
    }

    /// `t` as f32 rows whose values may be any whole number of f32 apart (transposed and
    /// permuted views), or `None`.
    pub fn strided_f32(t: &HostTensor) -> Option<RowTensor> {
        let aligned = (t.ptr() as usize | t.nb[0] | t.nb[1] | t.nb[2] | t.nb[3]).is_multiple_of(4);
        (t.dtype == DType::F32 && aligned).then_some(RowTensor { ptr: t.ptr(), dtype: t.dtype, ne: t.ne, nb: t.nb })
    }

    /// f32 values between consecutive values of a row.
    pub fn value_stride(&self) -> usize {
        self.nb[0] / 4
    }

    /// Bytes from one row to the next.
    pub fn nb1(&self) -> usize {
        self.nb[1]
    }

    /// Bytes of one row.
    pub fn row_bytes(&self) -> usize {
        self.ne[0] / self.dtype.block_len() * self.dtype.block_bytes()
    }

    /// The first and one-past-the-last address of the tensor's bytes.
    pub fn extent(&self) -> (usize, usize) {
        let last_row: usize = (1..4).map(|d| self.ne[d].saturating_sub(1) * self.nb[d]).sum();
        let row_span = if self.dtype.is_quantized() {
            self.row_bytes()
        } else {
            self.ne[0].saturating_sub(1) * self.nb[0] + self.dtype.block_bytes()
        };
        let start = self.ptr as usize;
        (start, start + last_row + row_span)
    }

    /// Values per row.
    pub fn len(&self) -> usize {
        self.ne[0]
    }

    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.ne[1] * self.ne[2] * self.ne[3]
    }

    /// The indices `(i1, i2, i3)` of the `r`-th row in row-major order.
    pub fn index(&self, r: usize) -> (usize, usize, usize) {
        (r % self.ne[1], r / self.ne[1] % self.ne[2], r / (self.ne[1] * self.ne[2]))
    }

    /// The first byte of row `(i1, i2, i3)` (callers pass indices below `ne`).
    pub fn row_ptr(&self, i1: usize, i2: usize, i3: usize) -> *mut u8 {
        // `wrapping_add` keeps this safe to compute; the kernels only use in-range rows.
        self.ptr.wrapping_add(i1 * self.nb[1] + i2 * self.nb[2] + i3 * self.nb[3])
    }

    /// The first value of row `(i1, i2, i3)` of an f32 tensor.
    pub fn row(&self, i1: usize, i2: usize, i3: usize) -> *mut f32 {
        self.row_ptr(i1, i2, i3).cast()
    }
}

/// The dense f32 rows of source `slot` of node `n`, if it has that source in that layout.
pub fn f32_source(n: &NodeTensors, slot: usize) -> Option<RowTensor> {
    RowTensor::of(&n.opt_src(slot)?).filter(|r| r.dtype == DType::F32)
}

/// The dense f32 rows of node `n` itself.
pub fn f32_destination(n: &NodeTensors) -> Option<RowTensor> {
    RowTensor::of(&n.dst).filter(|r| r.dtype == DType::F32)
}
