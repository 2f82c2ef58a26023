//! Host tensors as the kernels see them: a base pointer plus shape and strides, read and
//! written one row (or one value) at a time in f32.
//!
//! Rows are accessed through short-lived slices that never coexist with a slice over the
//! same bytes, so a node may alias its source (in-place ops) or its own views.

use core::marker::PhantomData;

use tessera_core::convert;
use tessera_core::{DType, Error, Result, TensorView};

/// One tensor of a node, resolved to host memory that stays valid for `'v` (the life of the
/// [`TensorView`] it came from, which holds its buffer).
#[derive(Clone, Copy)]
pub struct HostTensor<'v> {
    base: *mut u8,
    pub dtype: DType,
    pub ne: [usize; 4],
    pub nb: [usize; 4],
    _view: PhantomData<&'v TensorView>,
}

impl<'v> HostTensor<'v> {
    /// Resolves `view` to host memory; `writable` also requires it to be writable. `backend`
    /// names the backend in the error when the memory is not host memory.
    pub fn new(view: &'v TensorView, writable: bool, backend: &str) -> Result<HostTensor<'v>> {
        let buffer = &view.data.buffer;
        let base = view.base();
        let ptr = if writable {
            base.host_ptr_mut().ok_or_else(|| match base.host_ptr() {
                Some(_) => Error::ReadOnly { tensor: view.label(), buffer: buffer.buffer_type().name().into() },
                None => incompatible(view, backend),
            })?
        } else {
            base.host_ptr().ok_or_else(|| incompatible(view, backend))?.cast_mut()
        };
        tessera_core::buffer::check_range(&**buffer, view.data.offset, view.nbytes())?;
        // SAFETY: `offset + nbytes <= buffer.size()` was checked just above, so the offset
        // stays inside the allocation, which the view keeps alive for `'v`.
        Ok(unsafe { HostTensor::from_raw(ptr.add(view.data.offset), view) })
    }

    /// The tensor of `view` at host address `first` (its first value), for a backend that
    /// maps its own memory to host addresses.
    ///
    /// # Safety
    /// `first` must be valid for reads (and writes, if the kernel writes the tensor) of
    /// `view.nbytes()` bytes for `'v`, with no other access racing the kernel.
    pub unsafe fn from_raw(first: *mut u8, view: &'v TensorView) -> HostTensor<'v> {
        HostTensor { base: first, dtype: view.dtype, ne: view.ne, nb: view.nb, _view: PhantomData }
    }

    /// The address of the tensor's first value (the fast kernels compute addresses from the
    /// strides themselves).
    pub fn ptr(&self) -> *mut u8 {
        self.base
    }

    pub fn nelements(&self) -> usize {
        self.ne.iter().product()
    }

    /// Bytes spanned by one row.
    fn row_span(&self) -> usize {
        if self.ne[0] == 0 {
            0
        } else if self.dtype.is_quantized() {
            self.ne[0] / self.dtype.block_len() * self.dtype.block_bytes()
        } else {
            (self.ne[0] - 1) * self.nb[0] + self.dtype.block_bytes()
        }
    }

    fn row_offset(&self, i1: usize, i2: usize, i3: usize) -> usize {
        debug_assert!(i1 < self.ne[1] && i2 < self.ne[2] && i3 < self.ne[3]);
        i1 * self.nb[1] + i2 * self.nb[2] + i3 * self.nb[3]
    }

    /// Reads row `(i1, i2, i3)` into `out[..ne[0]]`.
    pub fn read_row(&self, i1: usize, i2: usize, i3: usize, out: &mut [f32]) {
        let at = self.row_offset(i1, i2, i3);
        // SAFETY: the row lies inside the tensor's bytes (indices below `ne`), which lie inside
        // the buffer (checked in `new`, or promised to `from_raw`); no mutable slice over these bytes exists meanwhile.
        let bytes = unsafe { core::slice::from_raw_parts(self.base.add(at), self.row_span()) };
        convert::strided_to_f32(self.dtype, bytes, self.nb[0], &mut out[..self.ne[0]]);
    }

    /// Writes `values[..ne[0]]` into row `(i1, i2, i3)`, converting (and quantizing) to the
    /// tensor's type.
    pub fn write_row(&self, i1: usize, i2: usize, i3: usize, values: &[f32]) {
        let at = self.row_offset(i1, i2, i3);
        // SAFETY: as in `read_row`; the memory is writable (checked in `new` for destinations)
        // and no other slice over these bytes exists meanwhile.
        let bytes = unsafe { core::slice::from_raw_parts_mut(self.base.add(at), self.row_span()) };
        convert::f32_to_strided(self.dtype, &values[..self.ne[0]], self.nb[0], bytes);
    }

    fn value_offset(&self, i: [usize; 4]) -> usize {
        debug_assert!(!self.dtype.is_quantized());
        i[0] * self.nb[0] + self.row_offset(i[1], i[2], i[3])
    }

    /// The I32 value at `i`, exactly.
    pub fn get_i32(&self, i: [usize; 4]) -> i32 {
        let at = self.value_offset(i);
        let mut b = [0u8; 4];
        // SAFETY: as in `get`; an I32 value is 4 bytes.
        unsafe { core::ptr::copy_nonoverlapping(self.base.add(at), b.as_mut_ptr(), 4) };
        i32::from_le_bytes(b)
    }

    /// Stores the I32 value `v` at `i`.
    pub fn set_i32(&self, i: [usize; 4], v: i32) {
        let at = self.value_offset(i);
        // SAFETY: as in `set`; an I32 value is 4 bytes.
        unsafe { core::ptr::copy_nonoverlapping(v.to_le_bytes().as_ptr(), self.base.add(at), 4) };
    }

    /// Indices `[i0, i1, i2, i3]` of the `flat`-th value in row-major order.
    pub fn unflatten(&self, flat: usize) -> [usize; 4] {
        let [n0, n1, n2, _] = self.ne;
        [flat % n0, flat / n0 % n1, flat / (n0 * n1) % n2, flat / (n0 * n1 * n2)]
    }
}

fn incompatible(view: &TensorView, backend: &str) -> Error {
    Error::IncompatibleBuffer {
        tensor: view.label(),
        buffer: view.data.buffer.buffer_type().name().into(),
        backend: backend.into(),
    }
}
