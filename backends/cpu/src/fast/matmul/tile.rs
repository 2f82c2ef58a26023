//! Output tiles of the GEMM drivers, whole or partial.

/// `rows x cols` output values (at most `mr x nr`) at `c`, columns `ldc` apart.
pub struct Tile {
    pub c: *mut f32,
    pub ldc: usize,
    pub rows: usize,
    pub cols: usize,
}

impl Tile {
    /// Runs `kernel(c, ldc)`, a micro-kernel that writes (or, with `accumulate`, adds to) a
    /// whole `mr x nr` tile. A partial tile goes through `edge` (`mr * nr` floats), so edges
    /// get the same arithmetic as whole tiles.
    ///
    /// # Safety
    /// The tile's values and `edge` must be writable, and `kernel` sound for any whole tile.
    #[inline(always)]
    pub unsafe fn compute(
        &self,
        mr: usize,
        nr: usize,
        accumulate: bool,
        edge: *mut f32,
        kernel: impl FnOnce(*mut f32, usize),
    ) {
        if self.rows == mr && self.cols == nr {
            kernel(self.c, self.ldc);
            return;
        }
        // SAFETY: `edge` holds `mr * nr` floats; the tile's `rows x cols` values are valid.
        unsafe {
            if accumulate {
                for j in 0..self.cols {
                    core::ptr::copy_nonoverlapping(self.c.add(j * self.ldc), edge.add(j * mr), self.rows);
                }
            }
            kernel(edge, mr);
            for j in 0..self.cols {
                core::ptr::copy_nonoverlapping(edge.add(j * mr), self.c.add(j * self.ldc), self.rows);
            }
        }
    }
}
