//! Matrix-vector products (up to [`super::GEMV_MAX_N`] columns): memory-bound, so the
//! weights are streamed once in their own layout, and each row meets all the columns while
//! it is in cache. Items are runs of rows; each output value is one kernel call's dot
//! product, whatever the thread count. Each thread takes one contiguous range of items: one
//! stream of weights per thread, which the prefetchers follow (items handed out one at a time
//! interleaved the threads' streams every few rows, and decoding ran about 10% slower).

use tessera_core::{DType, Result};

use super::operands::MatMul;
use super::{gather_column, threads_for};
use crate::fast::parallel::Team;
use crate::fast::scratch::WorkMemory;
use crate::fast::simd::{
    Bf16Columns, GemvBf16, KQuantGemv, Kernels, QGemv, QvColumn, Rows, K8_SUPERBLOCK_BYTES, QK, QV_BLOCK_BYTES,
};
use tessera_core::kquant::QK_K;

/// Weight rows per work item (enough to amortise a kernel call, few enough to balance).
const ROWS: usize = 16;

/// F32, F16 and BF16 weights: activations are read in place when they are dense f32 columns,
/// else gathered first. Weights of other types (the K-quants) are dequantized an item's rows at
/// a time into the thread's own memory and multiplied as f32.
pub fn run_float(kernels: &Kernels, team: &mut Team, memory: &mut WorkMemory, mm: &MatMul) -> Result<()> {
    if let (DType::BF16, Some(native)) = (mm.a_type, kernels.gemv.bf16_rounded) {
        return run_bf16(kernels, native, team, memory, mm);
    }
    let dequantize = !mm.a_type.is_float();
    let gemv = match mm.a_type {
        DType::F16 => kernels.gemv.f16,
        DType::BF16 => kernels.gemv.bf16,
        _ => kernels.gemv.f32,
    };
    let (k, m, n, batches) = (mm.k, mm.m, mm.n, mm.batches());
    let dense = mm.activations_dense();
    let threads = threads_for(team.threads(), mm.work());
    let shared = if dense { 0 } else { batches * n * k * 4 };
    let regions = memory.reserve(shared, if dequantize { ROWS * k * 4 } else { 0 }, threads)?;
    let items = batches * m.div_ceil(ROWS);
    let to_f32 = kernels.rows.to_f32;

    team.run(threads, &|w| {
        let gathered = regions.shared().cast::<f32>();
        if !dense {
            for u in w.share(batches * n) {
                let col = mm.activations(u / n, u % n, 1);
                // SAFETY: column `u` of the shared region (`k` floats), written by this thread only.
                unsafe { gather_column(&col, k, false, gathered.add(u * k)) };
            }
            w.barrier();
        }
        for item in w.share(items) {
            let (batch, r0) = (item / m.div_ceil(ROWS), item % m.div_ceil(ROWS) * ROWS);
            let mut rows = mm.weights(batch, r0, ROWS.min(m - r0));
            if dequantize {
                let own = regions.private(w.ith).cast::<f32>();
                for r in 0..rows.count {
                    // SAFETY: row `r` of the item holds `k` values of its type; the private
                    // region holds `ROWS * k` f32 for this thread alone.
                    unsafe { to_f32(rows.dtype, k, rows.ptr.add(r * rows.stride), own.add(r * k)) };
                }
                rows = Rows { ptr: own.cast_const().cast(), stride: 4 * k, count: rows.count, dtype: DType::F32 };
            }
            let (x, ldx) = if dense {
                let cols = mm.activations(batch, 0, n);
                (cols.ptr.cast::<f32>(), cols.col_stride / 4)
            } else {
                // SAFETY: this batch's `n` gathered columns.
                (unsafe { gathered.add(batch * n * k) }.cast_const(), k)
            };
            // SAFETY: the rows hold `k` values; `n` columns of `k` f32 at `x + j * ldx`; the
            // outputs (rows `r0..` of every column) belong to this item alone.
            unsafe { gemv(k, &rows, x, ldx, n, mm.out(batch).add(r0), m) };
        }
    })
}

/// BF16 weights on native bf16 dot products: the activations are rounded to bf16 once (as
/// the int8 path quantizes them), into columns of `k` values or, for tables that read them
/// so, into pairs interleaved across the columns ([`Bf16Columns`]).
fn run_bf16(kernels: &Kernels, gemv: GemvBf16, team: &mut Team, memory: &mut WorkMemory, mm: &MatMul) -> Result<()> {
    let (k, m, n, batches) = (mm.k, mm.m, mm.n, mm.batches());
    let dense = mm.activations_dense();
    let threads = threads_for(team.threads(), mm.work());
    let (len, paired) = match kernels.gemv.bf16_columns {
        Bf16Columns::Paired { pad } => (k.next_multiple_of(pad), true),
        Bf16Columns::Separate => (k, false),
    };
    // Private: the gathered f32 column, then (paired) the column rounded before interleaving.
    let gathered_bytes = if dense { 0 } else { k * 4 };
    let private = gathered_bytes + if paired { len * 2 } else { 0 };
    let regions = memory.reserve(batches * n * len * 2, private, threads)?;
    let items = batches * m.div_ceil(ROWS);
    let from_f32 = kernels.rows.from_f32;

    team.run(threads, &|w| {
        let rounded = regions.shared();
        for u in w.share(batches * n) {
            let (batch, j) = (u / n, u % n);
            let col = mm.activations(batch, j, 1);
            // SAFETY: the column exists; the private region has room for `k` floats and a
            // rounded column of `len` values; column `u` of the shared region (`len` bf16,
            // separate or interleaved with its batch's other columns) is written by this
            // thread only.
            unsafe {
                let x = gather_column(&col, k, dense, regions.private(w.ith).cast());
                if paired {
                    let own = regions.private(w.ith).add(gathered_bytes);
                    from_f32(DType::BF16, k, x, own);
                    core::ptr::write_bytes(own.add(2 * k), 0, 2 * (len - k));
                    let pairs = rounded.add(batch * n * len * 2).cast::<u32>();
                    for p in 0..len / 2 {
                        *pairs.add(p * n + j) = core::ptr::read_unaligned(own.add(4 * p).cast::<u32>());
                    }
                } else {
                    from_f32(DType::BF16, k, x, rounded.add(u * k * 2));
                }
            }
        }
        w.barrier();
        for item in w.share(items) {
            let (batch, r0) = (item / m.div_ceil(ROWS), item % m.div_ceil(ROWS) * ROWS);
            let rows = mm.weights(batch, r0, ROWS.min(m - r0));
            // SAFETY: this batch's `n` rounded columns of `len` values; the rows hold `k`
            // values; the outputs (rows `r0..` of every column) belong to this item alone.
            unsafe {
                let x = rounded.add(batch * n * len * 2).cast::<u16>();
                gemv(k, &rows, x, len, n, mm.out(batch).add(r0), m);
            }
        }
    })
}

/// Q8_0 and Q4_0 weights: the activations are quantized to 8-bit blocks first.
pub fn run_quant(kernels: &Kernels, team: &mut Team, memory: &mut WorkMemory, mm: &MatMul) -> Result<()> {
    let gemv = if mm.a_type == DType::Q4_0 { kernels.gemv.q4_0 } else { kernels.gemv.q8_0 };
    let bias = kernels.gemv.bias(mm.a_type);
    let nblocks = mm.k / QK;
    let quantize = |x: *const f32, at: *mut u8| {
        // SAFETY: as `run_int8` guarantees: `x` holds the column, `at` its quantized bytes.
        unsafe {
            (kernels.quantize)(x, nblocks, bias, &QvColumn::out(at, nblocks));
            (kernels.gemv.arrange)(at, nblocks);
        }
    };
    run_int8(team, memory, mm, nblocks * QV_BLOCK_BYTES, &quantize, gemv)
}

/// K-quant weights on the set's int8 kernels: the activations are quantized to 8-bit
/// super-blocks with the sums of each 16 values first.
pub fn run_kquant(k: KQuantGemv, team: &mut Team, memory: &mut WorkMemory, mm: &MatMul) -> Result<()> {
    let superblocks = mm.k / QK_K;
    let quantize = |x: *const f32, at: *mut u8| {
        // SAFETY: as `run_int8` guarantees: `x` holds the column, `at` its quantized bytes.
        unsafe { (k.quantize)(x, superblocks, mm.a_type, at) };
    };
    // Whole cache lines per column, so that every column's values start aligned.
    let column_bytes = (superblocks * K8_SUPERBLOCK_BYTES).next_multiple_of(64);
    run_int8(team, memory, mm, column_bytes, &quantize, k.gemv)
}

/// Int8 products: each activation column is quantized once by `quantize(x, at)` (`x` its `k`
/// values, `at` its `column_bytes` bytes), then `gemv` takes every row.
fn run_int8(
    team: &mut Team,
    memory: &mut WorkMemory,
    mm: &MatMul,
    column_bytes: usize,
    quantize: &(dyn Fn(*const f32, *mut u8) + Sync),
    gemv: QGemv,
) -> Result<()> {
    let (k, m, n, batches) = (mm.k, mm.m, mm.n, mm.batches());
    let nblocks = k / QK;
    let dense = mm.activations_dense();
    let threads = threads_for(team.threads(), mm.work());
    let regions = memory.reserve(batches * n * column_bytes, if dense { 0 } else { k * 4 }, threads)?;
    let items = batches * m.div_ceil(ROWS);

    team.run(threads, &|w| {
        let quantized = regions.shared();
        for u in w.share(batches * n) {
            let col = mm.activations(u / n, u % n, 1);
            // SAFETY: the column exists; the private region has room for `k` floats.
            let x = unsafe { gather_column(&col, k, dense, regions.private(w.ith).cast()) };
            // Column `u` of the shared region, written by this thread only.
            quantize(x, quantized.wrapping_add(u * column_bytes));
        }
        w.barrier();
        for item in w.share(items) {
            let (batch, r0) = (item / m.div_ceil(ROWS), item % m.div_ceil(ROWS) * ROWS);
            let rows = mm.weights(batch, r0, ROWS.min(m - r0));
            // SAFETY: this batch's `n` quantized columns; the rows hold `nblocks` blocks; the
            // outputs (rows `r0..` of every column) belong to this item alone.
            unsafe {
                let x = quantized.add(batch * n * column_bytes);
                gemv(nblocks, &rows, x, column_bytes, n, mm.out(batch).add(r0), m);
            }
        }
    })
}
