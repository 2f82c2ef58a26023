//! The operands of one MUL_MAT as raw addresses and strides, shared by the threads.

use tessera_core::{DType, Error, Result};

use crate::fast::simd::{Cols, Rows};
use tessera_reference::HostTensor;

/// `dst[M, N, b2, b3] = a[K, M, a2, a3] x b[K, N, b2, b3]`, with `a`'s matrices broadcast
/// over `b`'s (`r2 = b2 / a2`, `r3 = b3 / a3` consecutive matrices of `b` share one of `a`).
#[derive(Clone, Copy)]
pub struct MatMul {
    a: *const u8,
    pub a_type: DType,
    a_nb: [usize; 4],
    b: *const u8,
    b_nb: [usize; 4],
    c: *mut f32,
    pub k: usize,
    pub m: usize,
    pub n: usize,
    b2: usize,
    b3: usize,
    r2: usize,
    r3: usize,
}

// SAFETY: the addresses point into tensors that stay bound for the whole compute of the node;
// threads only read `a` and `b` and write disjoint parts of `c`.
unsafe impl Send for MatMul {}
// SAFETY: as for `Send`.
unsafe impl Sync for MatMul {}

impl MatMul {
    /// The operands of a MUL_MAT node; `None` for layouts the fast path does not take (the
    /// reference kernel computes those).
    ///
    /// Every layout the graph builder produces is taken except two, which it never creates
    /// for a MUL_MAT: a destination that is not contiguous, and weight rows whose values are
    /// not densely packed. (Activations may have any strides: they are packed first.)
    pub fn new(a: &HostTensor, b: &HostTensor, dst: &HostTensor) -> Result<Option<MatMul>> {
        let [k, m, a2, a3] = a.ne;
        let [_, n, b2, b3] = b.ne;
        if b.ne[0] != k || dst.ne != [m, n, b2, b3] || a2 == 0 || a3 == 0 || b2 % a2 != 0 || b3 % a3 != 0 {
            return Err(Error::InvalidParam {
                op: "MUL_MAT",
                message: alloc::format!(
                    "shapes a {:?}, b {:?}, dst {:?} do not form a product [K, M, a2, a3] x [K, N, b2, b3] -> [M, N, b2, b3]",
                    a.ne, b.ne, dst.ne
                ),
            });
        }
        let dst_contiguous = dst.nb == [4, 4 * m, 4 * m * n, 4 * m * n * b2];
        let a_rows_packed = k <= 1 || a.nb[0] == a.dtype.block_bytes();
        let types = b.dtype == DType::F32 && dst.dtype == DType::F32 && a.dtype != DType::I32;
        if !dst_contiguous || !a_rows_packed || !types || k % a.dtype.block_len() != 0 {
            return Ok(None);
        }
        Ok(Some(MatMul {
            a: a.ptr(),
            a_type: a.dtype,
            a_nb: a.nb,
            b: b.ptr(),
            b_nb: b.nb,
            c: dst.ptr().cast(),
            k,
            m,
            n,
            b2,
            b3,
            r2: b2 / a2,
            r3: b3 / a3,
        }))
    }

    /// Distinct weight matrices (`a2 * a3`).
    pub fn weight_matrices(&self) -> usize {
        (self.b2 / self.r2) * (self.b3 / self.r3)
    }

    /// The address of row `i` of weight matrix `matrix` (matrices numbered along dim 2 first).
    pub fn weight_row(&self, matrix: usize, i: usize) -> *const u8 {
        let a2 = self.b2 / self.r2;
        let at = (matrix % a2) * self.a_nb[2] + (matrix / a2) * self.a_nb[3] + i * self.a_nb[1];
        // `wrapping_add` keeps this safe to compute; callers only form in-range addresses.
        self.a.wrapping_add(at)
    }

    /// The same product with f32 weights at `a`: the weight matrices one after another, each
    /// `m` packed rows of `k` values, numbered as [`weight_row`](Self::weight_row) numbers them.
    pub fn with_f32_weights(&self, a: *const u8) -> MatMul {
        let row = 4 * self.k;
        let matrix = row * self.m;
        let a_nb = [4, row, matrix, matrix * (self.b2 / self.r2)];
        MatMul { a, a_type: DType::F32, a_nb, ..*self }
    }

    /// Matrices in `b` (and `dst`).
    pub fn batches(&self) -> usize {
        self.b2 * self.b3
    }

    /// `count` weight rows from row `i0` of the `a` matrix that batch `batch` uses.
    pub fn weights(&self, batch: usize, i0: usize, count: usize) -> Rows {
        let (i2, i3) = (batch % self.b2, batch / self.b2);
        let at = (i2 / self.r2) * self.a_nb[2] + (i3 / self.r3) * self.a_nb[3] + i0 * self.a_nb[1];
        // `wrapping_add` keeps this safe to compute; callers only form in-range addresses.
        Rows { ptr: self.a.wrapping_add(at), stride: self.a_nb[1], count, dtype: self.a_type }
    }

    /// `count` activation columns from column `j0` of batch `batch`.
    pub fn activations(&self, batch: usize, j0: usize, count: usize) -> Cols {
        let (i2, i3) = (batch % self.b2, batch / self.b2);
        let at = i2 * self.b_nb[2] + i3 * self.b_nb[3] + j0 * self.b_nb[1];
        Cols { ptr: self.b.wrapping_add(at), k_stride: self.b_nb[0], col_stride: self.b_nb[1], count }
    }

    /// Whether activation columns are f32 slices (values 4 bytes apart, columns a whole
    /// number of f32 apart), so kernels can read them in place.
    pub fn activations_dense(&self) -> bool {
        let aligned = (self.b as usize | self.b_nb[1] | self.b_nb[2] | self.b_nb[3]).is_multiple_of(4);
        (self.k <= 1 || self.b_nb[0] == 4) && aligned
    }

    /// The output matrix of batch `batch`: `[N][M]` f32, column `j` at `j * m`.
    pub fn out(&self, batch: usize) -> *mut f32 {
        self.c.wrapping_add(batch * self.m * self.n)
    }

    /// Multiply-adds of the whole product (for choosing the thread count).
    pub fn work(&self) -> usize {
        self.m.saturating_mul(self.n).saturating_mul(self.k).saturating_mul(self.batches())
    }
}
