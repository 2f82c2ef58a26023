//! AVX-512 matrix-vector kernels.
//!
//! Float weights: tiles of 4 rows by up to 4 columns (16 accumulators), so each activation
//! vector loaded serves 4 rows and each weight vector up to 4 columns.
//!
//! Int8 weights: a row is taken 16 blocks at a time and transposed in registers, once for
//! all the columns, so that each lane holds one block: 8 `vpdpbusd` per column then leave the
//! 16 block sums in one register, which is corrected, converted and scaled by 16 `d_a * d_b`
//! at once. The activation columns are arranged in the same order when they are quantized
//! ([`arrange`]), so no column needs a reduction across lanes until the row's end.

use core::arch::x86_64::*;

use tessera_core::DType;

use super::gemm::load16;
use crate::fast::simd::scalar::pack::{bytes, get_f32, get_i32};
use crate::fast::simd::{QvColumn, Rows, QK};

/// Running sums of `R` rows by `N` columns, 16 lanes each.
pub(super) type Sums<const R: usize, const N: usize> = [[__m512; N]; R];

/// Adds the `k` products of `R` rows by `N` columns of `X` (`ldx` values apart) to `acc`.
pub(super) type Steps<const R: usize, const N: usize, X> =
    unsafe fn(k: usize, rows: &Rows, x: *const X, ldx: usize, acc: &mut Sums<R, N>);

/// Values of `k` per pass over a group of rows: up to 8 f32 columns of this many values (16
/// KB) stay in L1 while every row of the group meets them, instead of being read again from
/// L2 by every tile of rows.
const K_CHUNK: usize = 512;
/// Rows whose running sums are kept across the passes of `k` (8 KB for 8 columns).
const ROW_GROUP: usize = 16;

/// Matrix-vector products over every row, by groups of [`ROW_GROUP`] rows, each group over
/// `k` in passes of [`K_CHUNK`] values, each pass by tiles of `R` rows (`many`; leftover rows
/// by `one`). Every lane of a running sum adds its products in the order of `k`, whatever the
/// passes, so the result is that of one pass over all of `k`.
///
/// # Safety
/// As [`crate::fast::simd::Gemv`] with `n = N` and F32, F16 or BF16 rows, and `many` and `one`
/// sound for those rows and columns; AVX-512F.
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn tiles<const R: usize, const N: usize, X>(
    k: usize,
    rows: &Rows,
    x: *const X,
    ldx: usize,
    y: *mut f32,
    ldy: usize,
    many: Steps<R, N, X>,
    one: Steps<1, N, X>,
) {
    // Float rows: one value per block.
    let value_bytes = rows.dtype.block_bytes();
    for g0 in (0..rows.count).step_by(ROW_GROUP) {
        let count = (rows.count - g0).min(ROW_GROUP);
        let mut sums = [[_mm512_setzero_ps(); N]; ROW_GROUP];
        for k0 in (0..k).step_by(K_CHUNK) {
            let kc = K_CHUNK.min(k - k0);
            // SAFETY: every column holds values `k0..k0 + kc`.
            let xk = unsafe { x.add(k0) };
            let mut r = 0;
            while r < count {
                let ptr = rows.ptr.wrapping_add((g0 + r) * rows.stride + k0 * value_bytes);
                let tile = Rows { ptr, count: count - r, ..*rows };
                // SAFETY: rows `g0 + r..` exist and hold values `k0..k0 + kc`.
                unsafe {
                    if tile.count >= R {
                        let mut acc: Sums<R, N> = core::array::from_fn(|i| sums[r + i]);
                        many(kc, &tile, xk, ldx, &mut acc);
                        sums[r..r + R].copy_from_slice(&acc);
                        r += R;
                    } else {
                        let mut acc: Sums<1, N> = [sums[r]];
                        one(kc, &tile, xk, ldx, &mut acc);
                        sums[r] = acc[0];
                        r += 1;
                    }
                }
            }
        }
        for (i, si) in sums.iter().enumerate().take(count) {
            for (j, &a) in si.iter().enumerate() {
                // SAFETY: output `g0 + i` of column `j`.
                unsafe { *y.add(j * ldy + g0 + i) = _mm512_reduce_add_ps(a) };
            }
        }
    }
}

/// How far ahead of its reads a row of weights is prefetched: the hardware prefetchers alone
/// leave the memory bus idle part of the time when a few rows stream at once.
const PREFETCH_BYTES: usize = 512;

/// Prefetches the weights [`PREFETCH_BYTES`] after `at` into L1 (a hint: addresses past the
/// row are never dereferenced).
#[inline(always)]
pub(super) fn prefetch_ahead(at: *const u8) {
    // SAFETY: a prefetch reads nothing and cannot fault.
    unsafe { _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(PREFETCH_BYTES).cast()) };
}

/// [`Steps`] of float rows, 16 values a step.
///
/// # Safety
/// As [`Steps`]: the rows and the columns hold `k` values; AVX-512F/BW/VL.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn float_steps<const R: usize, const N: usize>(
    k: usize,
    rows: &Rows,
    x: *const f32,
    ldx: usize,
    acc: &mut Sums<R, N>,
) {
    let (dtype, row0, stride) = (rows.dtype, rows.ptr, rows.stride);
    let value_bytes = dtype.block_bytes();
    let mut kk = 0;
    while kk < k {
        let mask = if k - kk >= 16 { 0xffff } else { (1u16 << (k - kk)) - 1 };
        let mut w = [_mm512_setzero_ps(); R];
        for (r, wr) in w.iter_mut().enumerate() {
            let row = row0.wrapping_add(r * stride);
            prefetch_ahead(row.wrapping_add(kk * value_bytes));
            // SAFETY: the masked values `kk..` of row `r`.
            *wr = unsafe { load16(dtype, row, kk, mask) };
        }
        for j in 0..N {
            // SAFETY: the masked values `kk..` of column `j`.
            let xv = unsafe { _mm512_maskz_loadu_ps(mask, x.add(j * ldx + kk)) };
            for (accr, &wr) in acc.iter_mut().zip(&w) {
                accr[j] = _mm512_fmadd_ps(wr, xv, accr[j]);
            }
        }
        kk += 16;
    }
}

/// Every row by `N` columns, `R` rows at a time.
///
/// # Safety
/// As [`crate::fast::simd::Gemv`] with `n = N`; AVX-512F/BW/VL.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn float_cols<const R: usize, const N: usize>(
    k: usize,
    rows: &Rows,
    x: *const f32,
    ldx: usize,
    y: *mut f32,
    ldy: usize,
) {
    // SAFETY: forwarded.
    unsafe { tiles::<R, N, f32>(k, rows, x, ldx, y, ldy, float_steps::<R, N>, float_steps::<1, N>) }
}

/// Tiles of 4 rows by up to 4 columns, or of 3 rows by 5 to 8 columns: each weight vector is
/// converted once for all the columns (the conversion competes with the FMAs for ports).
///
/// # Safety
/// As [`crate::fast::simd::Gemv`]; AVX-512F/BW/VL.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn float(k: usize, rows: &Rows, x: *const f32, ldx: usize, n: usize, y: *mut f32, ldy: usize) {
    // SAFETY: forwarded; `n <= 8` columns exist.
    unsafe {
        match n {
            1 => float_cols::<4, 1>(k, rows, x, ldx, y, ldy),
            2 => float_cols::<4, 2>(k, rows, x, ldx, y, ldy),
            3 => float_cols::<4, 3>(k, rows, x, ldx, y, ldy),
            4 => float_cols::<4, 4>(k, rows, x, ldx, y, ldy),
            5 => float_cols::<3, 5>(k, rows, x, ldx, y, ldy),
            6 => float_cols::<3, 6>(k, rows, x, ldx, y, ldy),
            7 => float_cols::<3, 7>(k, rows, x, ldx, y, ldy),
            _ => {
                float_cols::<3, 8>(k, rows, x, ldx, y, ldy);
                if n > 8 {
                    // Not reached: the drivers send at most 8 columns.
                    float(k, rows, x.add(8 * ldx), ldx, n - 8, y.add(8 * ldy), ldy);
                }
            }
        }
    }
}

/// # Safety
/// As [`crate::fast::simd::Gemv`] for F32 rows; AVX-512F/BW/VL.
pub unsafe fn f32(k: usize, rows: &Rows, x: *const f32, ldx: usize, n: usize, y: *mut f32, ldy: usize) {
    debug_assert_eq!(rows.dtype, DType::F32);
    // SAFETY: forwarded; the table is chosen only where AVX-512 exists.
    unsafe { float(k, rows, x, ldx, n, y, ldy) }
}

/// # Safety
/// As [`crate::fast::simd::Gemv`] for F16 rows; AVX-512F/BW/VL.
pub unsafe fn f16(k: usize, rows: &Rows, x: *const f32, ldx: usize, n: usize, y: *mut f32, ldy: usize) {
    debug_assert_eq!(rows.dtype, DType::F16);
    // SAFETY: forwarded; the table is chosen only where AVX-512 exists.
    unsafe { float(k, rows, x, ldx, n, y, ldy) }
}

/// # Safety
/// As [`crate::fast::simd::Gemv`] for BF16 rows; AVX-512F/BW/VL.
pub unsafe fn bf16(k: usize, rows: &Rows, x: *const f32, ldx: usize, n: usize, y: *mut f32, ldy: usize) {
    debug_assert_eq!(rows.dtype, DType::BF16);
    // SAFETY: forwarded; the table is chosen only where AVX-512 exists.
    unsafe { float(k, rows, x, ldx, n, y, ldy) }
}

/// Blocks of a row per group: one lane each.
const GROUP: usize = 16;
/// Rows taken together, and groups per chunk of `k` (64 blocks: up to 8 columns' 20 KB stay
/// in L1 while every row of the batch meets them, where all the columns would not).
const ROW_BATCH: usize = 16;
const GROUP_CHUNK: usize = 4;
/// How many chunks ahead a row's bytes are also fetched into L2: the L1 fill buffers that the
/// near prefetch uses are few, and L2's requests keep more of memory's latency in flight
/// (decoding a 1B model on 2 threads of a Xeon went from about 31 to 37 tokens/s in q4_0, 20
/// to 25 in q8_0).
const FAR_CHUNKS: usize = 3;

/// The block of a group whose values, scale and correction lane `lane` holds, in the
/// registers [`weights16`] returns and in an arranged activation column ([`arrange`]): the
/// transpose below leaves blocks in this order, and the activations follow it.
const fn block_of_lane(lane: usize) -> usize {
    ((lane & 7) << 1) | (lane >> 3)
}

/// Swaps bit `BIT` of the lane index of `a` and `b` with the bit that tells `a` (0) from `b`
/// (1): the first result holds the lanes whose bit was 0, the second those whose bit was 1,
/// and in each the bit now says which register a lane came from.
#[target_feature(enable = "avx512f")]
#[inline]
fn swap_lane_bit<const BIT: u32>(a: __m512i, b: __m512i) -> (__m512i, __m512i) {
    let lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    let (bit, second) = (_mm512_set1_epi32(1 << BIT), _mm512_set1_epi32(16));
    let has = _mm512_test_epi32_mask(lanes, bit);
    // Lane j of the first: a[j] where bit is 0, else b[j - bit]; of the second: a[j + bit]
    // where bit is 0, else b[j].
    let first = _mm512_mask_mov_epi32(lanes, has, _mm512_or_si512(second, _mm512_xor_si512(lanes, bit)));
    let second_idx = _mm512_mask_mov_epi32(_mm512_or_si512(lanes, bit), has, _mm512_or_si512(second, lanes));
    (_mm512_permutex2var_epi32(a, first, b), _mm512_permutex2var_epi32(a, second_idx, b))
}

/// 8 registers whose register index is 3 bits of block number and whose lane index is
/// (1 bit of block number, 3 bits of dword) transposed to register = dword, lane = block (in
/// the order of [`block_of_lane`]).
#[target_feature(enable = "avx512f")]
#[inline]
fn transpose8(mut z: [__m512i; 8]) -> [__m512i; 8] {
    for p in [0, 2, 4, 6] {
        (z[p], z[p + 1]) = swap_lane_bit::<0>(z[p], z[p + 1]);
    }
    for p in [0, 1, 4, 5] {
        (z[p], z[p + 2]) = swap_lane_bit::<1>(z[p], z[p + 2]);
    }
    for p in [0, 1, 2, 3] {
        (z[p], z[p + 4]) = swap_lane_bit::<2>(z[p], z[p + 4]);
    }
    z
}

/// Blocks `b0..b0 + 16` of a row as 8 registers of unsigned weights `w + bias`: register `r`
/// lane `l` holds values `4r..4r + 4` of block `b0 + block_of_lane(l)`, so that one
/// `vpdpbusd` per register sums each block in its own lane.
///
/// # Safety
/// The row must hold those blocks of `Q4` (Q4_0) or Q8_0; AVX-512F/BW.
#[target_feature(enable = "avx2,avx512f,avx512bw")]
#[inline]
unsafe fn weights16<const Q4: bool>(row: *const u8, b0: usize) -> [__m512i; 8] {
    if Q4 {
        // Register p: blocks 2p, 2p + 8, 2p + 1, 2p + 9 (a quarter each): after swapping lane
        // bits 0 and 1 with the register bits, lanes follow `block_of_lane`.
        let mut z = [_mm512_setzero_si512(); 4];
        for (p, zp) in z.iter_mut().enumerate() {
            let at = |b: usize| row.wrapping_add(18 * (b0 + b) + 2);
            // SAFETY: the 16 nibble bytes of the four blocks.
            *zp = unsafe {
                let lo = _mm256_set_m128i(_mm_loadu_si128(at(2 * p + 8).cast()), _mm_loadu_si128(at(2 * p).cast()));
                let hi = _mm256_set_m128i(_mm_loadu_si128(at(2 * p + 9).cast()), _mm_loadu_si128(at(2 * p + 1).cast()));
                _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi)
            };
        }
        (z[0], z[1]) = swap_lane_bit::<0>(z[0], z[1]);
        (z[2], z[3]) = swap_lane_bit::<0>(z[2], z[3]);
        (z[0], z[2]) = swap_lane_bit::<1>(z[0], z[2]);
        (z[1], z[3]) = swap_lane_bit::<1>(z[1], z[3]);
        // Dword r of a block: low nibbles are values 4r.., high nibbles values 16 + 4r...
        let low = _mm512_set1_epi8(0x0f);
        let mut w = [_mm512_setzero_si512(); 8];
        for r in 0..4 {
            w[r] = _mm512_and_si512(z[r], low);
            w[4 + r] = _mm512_and_si512(_mm512_srli_epi16::<4>(z[r]), low);
        }
        w
    } else {
        // Register p: blocks 2p and 2p + 1 (a half each).
        let mut z = [_mm512_setzero_si512(); 8];
        for (p, zp) in z.iter_mut().enumerate() {
            let at = |b: usize| row.wrapping_add(34 * (b0 + b) + 2);
            // SAFETY: the 32 value bytes of the two blocks.
            *zp = unsafe {
                _mm512_inserti64x4::<1>(
                    _mm512_castsi256_si512(_mm256_loadu_si256(at(2 * p).cast())),
                    _mm256_loadu_si256(at(2 * p + 1).cast()),
                )
            };
        }
        transpose8(z).map(|v| _mm512_xor_si512(v, _mm512_set1_epi8(-128)))
    }
}

/// The f32 scales of blocks `b0..b0 + 16` of a row of `bs`-byte blocks, in the order of
/// [`block_of_lane`]: one gather of the dwords that start the blocks (scale and first value
/// bytes), narrowed to the scales.
///
/// # Safety
/// The row must hold those blocks (each block has at least 4 bytes); AVX-512F.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn scales16(row: *const u8, b0: usize, bs: usize) -> __m512 {
    let offsets = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15),
        _mm512_set1_epi32(bs as i32),
    );
    // SAFETY: each gathered dword lies inside block `b0 + block_of_lane(i)` of the row.
    let words = unsafe { _mm512_i32gather_epi32::<1>(offsets, row.add(b0 * bs).cast()) };
    _mm512_cvtph_ps(_mm512_cvtepi32_epi16(words))
}

/// [`crate::fast::simd::ArrangeColumn`] for these kernels: every whole group of 16 blocks of a
/// quantized activation column is reordered so that 64 bytes `r` of the group's values hold
/// values `4r..4r + 4` of its blocks in the order of [`block_of_lane`], and its scales and
/// corrections follow that order too. Blocks after the last whole group stay as they are.
///
/// # Safety
/// `x` must be a quantized column of `nblocks` blocks ([`QvColumn`]), writable.
pub unsafe fn arrange(x: *mut u8, nblocks: usize) {
    let col = QvColumn::at(x, nblocks);
    for g in 0..nblocks / GROUP {
        let (q, d, c) = (col.q.cast_mut(), col.d.cast_mut(), col.c.cast_mut());
        // SAFETY: the group's 512 value bytes and its 16 scales and corrections.
        unsafe {
            let values: [u8; QK * GROUP] = bytes(q.add(QK * GROUP * g));
            let scales: [u8; 4 * GROUP] = bytes(d.add(4 * GROUP * g));
            let corrections: [u8; 4 * GROUP] = bytes(c.add(4 * GROUP * g));
            for lane in 0..GROUP {
                let b = block_of_lane(lane);
                for r in 0..QK / 4 {
                    let to = q.add(QK * GROUP * g + 64 * r + 4 * lane);
                    core::ptr::copy_nonoverlapping(values[QK * b + 4 * r..].as_ptr(), to, 4);
                }
                core::ptr::copy_nonoverlapping(scales[4 * b..].as_ptr(), d.add(4 * (GROUP * g + lane)), 4);
                core::ptr::copy_nonoverlapping(corrections[4 * b..].as_ptr(), c.add(4 * (GROUP * g + lane)), 4);
            }
        }
    }
}

/// The 32 weights of one block as unsigned bytes `w + bias`, and its scale (for the blocks
/// after the last group of 16).
///
/// # Safety
/// `block` must point to a whole block of `Q4` (Q4_0) or Q8_0; AVX-512VL/F16C.
#[target_feature(enable = "avx2,avx512f,avx512vl,f16c")]
#[inline]
unsafe fn weights1<const Q4: bool>(block: *const u8) -> (__m256i, f32) {
    // SAFETY: the scale's two bytes start the block.
    let bits = u16::from_le_bytes(unsafe { bytes(block) });
    let d = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(bits))));
    let w = if Q4 {
        // SAFETY: 16 bytes of nibbles follow the scale.
        let q = unsafe { _mm_loadu_si128(block.add(2).cast()) };
        let low = _mm_set1_epi8(0x0f);
        _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16::<4>(q), low), _mm_and_si128(q, low))
    } else {
        // SAFETY: 32 value bytes follow the scale.
        _mm256_xor_si256(unsafe { _mm256_loadu_si256(block.add(2).cast()) }, _mm256_set1_epi8(-128))
    };
    (w, d)
}

/// Every row by `N` columns of int8 dot products.
///
/// # Safety
/// As [`crate::fast::simd::QGemv`] with `n = N`; AVX-512F/BW/VL, VNNI, F16C.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn quant_n<const N: usize, const Q4: bool>(
    nblocks: usize,
    rows: &Rows,
    x: *const u8,
    ldx: usize,
    y: *mut f32,
    ldy: usize,
) {
    let bs = rows.dtype.block_bytes();
    let cols: [QvColumn; N] = core::array::from_fn(|j| QvColumn::at(x.wrapping_add(j * ldx), nblocks));
    let groups = nblocks / GROUP;
    let mut r0 = 0;
    while r0 < rows.count {
        // One column's chunk fits L1 whatever the order: rows one by one then, in order.
        let batch = (rows.count - r0).min(if N == 1 { 1 } else { ROW_BATCH });
        // The running sums of the batch's rows, kept while a chunk of groups is taken for
        // all of them: so the columns' chunk is read from L1 by every row, not from L2.
        let mut sums = [[_mm512_setzero_ps(); N]; ROW_BATCH];
        for g0 in (0..groups).step_by(GROUP_CHUNK) {
            for (r, kept) in sums.iter_mut().enumerate().take(batch) {
                // SAFETY: row `r0 + r` exists.
                let row = unsafe { rows.ptr.add((r0 + r) * rows.stride) };
                let mut acc = *kept;
                for g in g0..(g0 + GROUP_CHUNK).min(groups) {
                    let b0 = g * GROUP;
                    // The rows of a batch are read a chunk at a time, too many streams for the
                    // hardware to follow: fetch this group's bytes of the next chunk now.
                    let next = row.wrapping_add((b0 + GROUP * GROUP_CHUNK) * bs);
                    let far = row.wrapping_add((b0 + FAR_CHUNKS * GROUP * GROUP_CHUNK) * bs);
                    for line in (0..GROUP * bs).step_by(64) {
                        _mm_prefetch::<_MM_HINT_T0>(next.wrapping_add(line).cast());
                        _mm_prefetch::<_MM_HINT_T1>(far.wrapping_add(line).cast());
                    }
                    // SAFETY: blocks `b0..b0 + 16` of the row and of each (arranged) column.
                    unsafe {
                        let w = weights16::<Q4>(row, b0);
                        let da = scales16(row, b0, bs);
                        for (a, col) in acc.iter_mut().zip(&cols) {
                            let x = col.q.add(QK * b0);
                            // Two chains of sums, each started from the blocks' corrections or zero.
                            let mut s0 = _mm512_loadu_si512(col.c.add(4 * b0).cast());
                            let mut s1 = _mm512_setzero_si512();
                            for i in (0..8).step_by(2) {
                                s0 = _mm512_dpbusd_epi32(s0, w[i], _mm512_loadu_si512(x.add(64 * i).cast()));
                                s1 = _mm512_dpbusd_epi32(s1, w[i + 1], _mm512_loadu_si512(x.add(64 * i + 64).cast()));
                            }
                            let scale = _mm512_mul_ps(da, _mm512_loadu_ps(col.d.add(4 * b0).cast()));
                            *a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)), scale, *a);
                        }
                    }
                }
                *kept = acc;
            }
        }
        for (r, acc) in sums.iter().enumerate().take(batch) {
            // SAFETY: row `r0 + r` exists.
            let row = unsafe { rows.ptr.add((r0 + r) * rows.stride) };
            let b0 = groups * GROUP;
            let mut tail = [0.0f32; N];
            for b in b0..nblocks {
                // SAFETY: block `b` of the row and of each column.
                unsafe {
                    let (w, da) = weights1::<Q4>(row.add(b * bs));
                    for (t, col) in tail.iter_mut().zip(&cols) {
                        let s = _mm256_dpbusd_epi32(
                            _mm256_setzero_si256(),
                            w,
                            _mm256_loadu_si256(col.q.add(QK * b).cast()),
                        );
                        let s = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256::<1>(s));
                        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0x4e>(s));
                        let s = _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32::<0xb1>(s)))
                            + get_i32(col.c.add(4 * b));
                        *t += s as f32 * (da * get_f32(col.d.add(4 * b)));
                    }
                }
            }
            for (j, (a, t)) in acc.iter().zip(tail).enumerate() {
                // SAFETY: output `r0 + r` of column `j`.
                unsafe { *y.add(j * ldy + r0 + r) = _mm512_reduce_add_ps(*a) + t };
            }
        }
        r0 += batch;
    }
}

/// All the columns in one pass over the weights (each group of 16 blocks is unpacked once).
///
/// # Safety
/// As [`crate::fast::simd::QGemv`]; AVX-512 with VNNI.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn quant<const Q4: bool>(
    nblocks: usize,
    rows: &Rows,
    x: *const u8,
    ldx: usize,
    n: usize,
    y: *mut f32,
    ldy: usize,
) {
    // SAFETY: forwarded; `n <= 8` columns exist.
    unsafe {
        match n {
            1 => quant_n::<1, Q4>(nblocks, rows, x, ldx, y, ldy),
            2 => quant_n::<2, Q4>(nblocks, rows, x, ldx, y, ldy),
            3 => quant_n::<3, Q4>(nblocks, rows, x, ldx, y, ldy),
            4 => quant_n::<4, Q4>(nblocks, rows, x, ldx, y, ldy),
            5 => quant_n::<5, Q4>(nblocks, rows, x, ldx, y, ldy),
            6 => quant_n::<6, Q4>(nblocks, rows, x, ldx, y, ldy),
            7 => quant_n::<7, Q4>(nblocks, rows, x, ldx, y, ldy),
            _ => {
                quant_n::<8, Q4>(nblocks, rows, x, ldx, y, ldy);
                if n > 8 {
                    // Not reached: the drivers send at most 8 columns.
                    quant::<Q4>(nblocks, rows, x.add(8 * ldx), ldx, n - 8, y.add(8 * ldy), ldy);
                }
            }
        }
    }
}

/// # Safety
/// As [`crate::fast::simd::QGemv`] for Q8_0 rows; AVX-512 with VNNI.
pub unsafe fn q8_0(nblocks: usize, rows: &Rows, x: *const u8, ldx: usize, n: usize, y: *mut f32, ldy: usize) {
    debug_assert_eq!(rows.dtype, DType::Q8_0);
    // SAFETY: forwarded; the table is chosen only where AVX-512 VNNI exists.
    unsafe { quant::<false>(nblocks, rows, x, ldx, n, y, ldy) }
}

/// # Safety
/// As [`crate::fast::simd::QGemv`] for Q4_0 rows; AVX-512 with VNNI.
pub unsafe fn q4_0(nblocks: usize, rows: &Rows, x: *const u8, ldx: usize, n: usize, y: *mut f32, ldy: usize) {
    debug_assert_eq!(rows.dtype, DType::Q4_0);
    // SAFETY: forwarded; the table is chosen only where AVX-512 VNNI exists.
    unsafe { quant::<true>(nblocks, rows, x, ldx, n, y, ldy) }
}
