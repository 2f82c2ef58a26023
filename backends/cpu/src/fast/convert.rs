//! GET_ROWS (rows picked by index, dequantized to f32) and CPY/CONT between tensors of the
//! same shape (converting or quantizing), rows split over the threads; SET_ROWS (f32 rows
//! written at indices, converted), on one thread.

use tessera_core::{DType, Result};
use tessera_reference::{HostTensor, NodeTensors};

use super::parallel::Team;
use super::row_tensor::{threads_for_values, RowTensor};
use super::scratch::WorkMemory;
use super::simd::Kernels;

/// Whether two tensors' bytes are apart (the fast paths read one and write the other through
/// separate slices).
fn apart(a: &RowTensor, b: &RowTensor) -> bool {
    let ((a0, a1), (b0, b1)) = (a.extent(), b.extent());
    a1 <= b0 || b1 <= a0
}

/// GET_ROWS into f32 rows. `Ok(false)`: a layout the fast path does not take, or an index out
/// of range (the reference kernel reports it).
pub fn get_rows(kernels: &Kernels, team: &mut Team, memory: &mut WorkMemory, node: &NodeTensors) -> Result<bool> {
    let (Some(a), Some(b)) = (node.opt_src(0), node.opt_src(1)) else { return Ok(false) };
    let (Some(a), Some(d)) = (RowTensor::of(&a), RowTensor::of(&node.dst)) else { return Ok(false) };
    let [n, r, d2, d3] = a.ne;
    let m = b.ne[0];
    let fits = a.dtype != DType::I32
        && d.dtype == DType::F32
        && b.dtype == DType::I32
        && b.ne == [m, d2, d3, 1]
        && d.ne == [n, m, d2, d3]
        && apart(&a, &d);
    if !fits {
        return Ok(false);
    }
    // Every index is checked (and kept in the work memory) before any row is written.
    let rows = d.rows();
    let threads = threads_for_values(team.threads(), rows * n);
    let regions = memory.reserve(rows * core::mem::size_of::<usize>(), 0, threads)?;
    let indices = regions.shared().cast::<usize>();
    for flat in 0..rows {
        let (j, i2, i3) = d.index(flat);
        let Some(i) = usize::try_from(b.get_i32([j, i2, i3, 0])).ok().filter(|&i| i < r) else { return Ok(false) };
        // SAFETY: slot `flat` of the shared region, sized for `rows` indices and aligned.
        unsafe { *indices.add(flat) = i };
    }
    let to_f32 = kernels.rows.to_f32;
    team.run(threads, &|w| {
        let indices = regions.shared().cast::<usize>().cast_const();
        for flat in w.share(rows) {
            let (j, i2, i3) = d.index(flat);
            // SAFETY: a row of `a` (index checked above) and a row of `dst`, apart; this
            // thread alone writes row `flat`.
            unsafe { to_f32(a.dtype, n, a.row_ptr(*indices.add(flat), i2, i3), d.row(j, i2, i3)) };
        }
    })?;
    Ok(true)
}

/// SET_ROWS of f32 rows into the rows of `dst` that I32 indices name, converted (or quantized)
/// as CPY does. One thread, in the reference kernel's order, so that a row named twice ends
/// as the reference leaves it. A transposed value cache takes one value a row, hundreds of
/// thousands of rows a prompt: runs of them going to consecutive rows are converted by one
/// call (one call a row cost about 11 ns a value, 3 ms a block of a 512-token prompt).
/// `Ok(false)`: a layout the fast path does not take, or an index out of range (the reference
/// kernel reports it).
pub fn set_rows(kernels: &Kernels, node: &NodeTensors) -> Result<bool> {
    let (Some(b), Some(c)) = (node.opt_src(0), node.opt_src(1)) else { return Ok(false) };
    let (Some(s), Some(ix), Some(d)) = (RowTensor::of(&b), RowTensor::of(&c), RowTensor::of(&node.dst)) else {
        return Ok(false);
    };
    let [n, m, d2, d3] = s.ne;
    let r = d.ne[1];
    let fits = s.dtype == DType::F32
        && ix.dtype == DType::I32
        && ix.ne == [m, d2, d3, 1]
        && d.dtype != DType::I32
        && d.ne == [n, r, d2, d3]
        && apart(&s, &d);
    if !fits {
        return Ok(false);
    }
    // The index row (i2, i3), each index checked before any row is written.
    let indices = |i2: usize, i3: usize| {
        // SAFETY: the index row (i2, i3) holds m dense I32 values (`RowTensor::of`).
        unsafe { core::slice::from_raw_parts(ix.row_ptr(i2, i3, 0).cast::<i32>().cast_const(), m) }
    };
    let in_range = |rows: &[i32]| {
        let (lo, hi) = rows.iter().fold((0, 0), |(lo, hi): (i32, i32), &i| (lo.min(i), hi.max(i)));
        lo >= 0 && usize::try_from(hi).is_ok_and(|hi| hi < r)
    };
    if !(0..d3).all(|i3| (0..d2).all(|i2| in_range(indices(i2, i3)))) {
        return Ok(false);
    }
    // Rows going to consecutive rows (a prompt's values of one channel) are converted as one
    // run where both tensors hold their rows back to back.
    let runs = s.nb1() == n * 4 && d.nb1() == d.row_bytes();
    let from_f32 = kernels.rows.from_f32;
    for i3 in 0..d3 {
        for i2 in 0..d2 {
            let rows = indices(i2, i3);
            let mut j = 0;
            while let Some(&first) = rows.get(j) {
                let len = if runs { run_length(&rows[j..]) } else { 1 };
                let (x, y) = (s.row(j, i2, i3).cast_const(), d.row_ptr(first as usize, i2, i3));
                // SAFETY: `len` rows of the source and `len` rows of `dst` (indices checked
                // above, rows back to back when `len > 1`), apart and aligned for their types
                // (`RowTensor::of`).
                unsafe {
                    match (n * len, d.dtype) {
                        (1, DType::F16) => *y.cast::<u16>() = half::f16::from_f32(*x).to_bits(),
                        (1, DType::F32) => *y.cast::<f32>() = *x,
                        (values, dtype) => from_f32(dtype, values, x, y),
                    }
                }
                j += len;
            }
        }
    }
    Ok(true)
}

/// How many of `rows` (not empty, every value at least 0) count up by one from the first.
fn run_length(rows: &[i32]) -> usize {
    const LANES: usize = 16;
    let first = rows[0];
    let follows = |k: usize| rows[k] == first.wrapping_add(k as i32);
    let mut len = 1;
    // Whole groups first, compared without an early exit so that they vectorize.
    while len + LANES <= rows.len() && (len..len + LANES).fold(true, |all, k| all & follows(k)) {
        len += LANES;
    }
    while len < rows.len() && follows(len) {
        len += 1;
    }
    len
}

/// CPY or CONT between tensors of the same shape, from or to f32, or between tensors of the
/// same type (I32 excepted). `Ok(false)`: another case, for the reference kernel.
pub fn copy(kernels: &Kernels, team: &mut Team, node: &NodeTensors) -> Result<bool> {
    let Some(source) = node.opt_src(0) else { return Ok(false) };
    if RowTensor::of(&source).is_none() {
        return copy_strided(team, &source, &node.dst);
    }
    let (Some(s), Some(d)) = (RowTensor::of(&source), RowTensor::of(&node.dst)) else { return Ok(false) };
    let kind = match (s.dtype, d.dtype) {
        (DType::I32, _) | (_, DType::I32) => return Ok(false),
        (a, b) if a == b => Copy::Bytes,
        (DType::F32, _) => Copy::Quantize,
        (_, DType::F32) => Copy::Dequantize,
        _ => return Ok(false),
    };
    if s.ne != d.ne || !apart(&s, &d) {
        return Ok(false);
    }
    let (n, rows, bytes) = (d.len(), d.rows(), d.row_bytes());
    let rk = kernels.rows;
    team.run(threads_for_values(team.threads(), rows * n), &|w| {
        for flat in w.share(rows) {
            let (i1, i2, i3) = d.index(flat);
            let (x, y) = (s.row_ptr(i1, i2, i3), d.row_ptr(i1, i2, i3));
            // SAFETY: one row of each tensor, apart; this thread alone writes row `flat`.
            unsafe {
                match kind {
                    Copy::Bytes => core::ptr::copy_nonoverlapping(x, y, bytes),
                    Copy::Quantize => (rk.from_f32)(d.dtype, n, x.cast(), y),
                    Copy::Dequantize => (rk.to_f32)(s.dtype, n, x, y.cast()),
                }
            }
        }
    })?;
    Ok(true)
}

/// CPY or CONT of f32 values with strided rows (a transposed or permuted source) into dense
/// f32 rows of the same shape: each row gathered value by value.
fn copy_strided(team: &mut Team, source: &HostTensor, dst: &HostTensor) -> Result<bool> {
    let (Some(s), Some(d)) = (RowTensor::strided_f32(source), RowTensor::of(dst)) else { return Ok(false) };
    if d.dtype != DType::F32 || s.ne != d.ne || !apart(&s, &d) {
        return Ok(false);
    }
    let (n, rows, stride) = (d.len(), d.rows(), s.value_stride());
    team.run(threads_for_values(team.threads(), rows * n), &|w| {
        for flat in w.share(rows) {
            let (i1, i2, i3) = d.index(flat);
            let (x, y) = (s.row(i1, i2, i3), d.row(i1, i2, i3));
            for i in 0..n {
                // SAFETY: value `i` of a source row (`stride` f32 apart) and of a destination
                // row, apart; this thread alone writes row `flat`.
                unsafe { *y.add(i) = *x.add(i * stride) };
            }
        }
    })?;
    Ok(true)
}

#[derive(Clone, Copy)]
enum Copy {
    Bytes,
    Quantize,
    Dequantize,
}
