// Row kernels on packed f32 rows: SOFT_MAX, NORM and RMS_NORM at memory bandwidth. Each row
// is read once into registers with 16-byte loads, reduced there, and written once with 16-byte
// stores (the generic kernels of rows.cu read it two or three times, value by value).
//
// The launcher takes these for f32 source and destination whose rows are packed (nb[0] = 4),
// hold a multiple of 4 values, at most 8192, and all start on 16-byte boundaries (data and
// nb[1..3] multiples of 16); the mask of SOFT_MAX may have any strides (read value by value).
// A fused layer norm may also take its source and residual rows and write its result as f16
// rows (packed, on 16-byte boundaries too).
//
// Launch: a group of GROUP threads owns a row and the groups grid-stride over rows:
// - GROUP = 32, a warp per row (rows of up to 1024 values): blocks of 128 threads, 4 rows each;
// - GROUP = 256, a block per row (rows of 1025 to 8192 values): blocks of 256 threads.
// Thread t of a group holds float4 number t + GROUP * j (j < V4) of its row, so each of the
// V4 loads of a group is one contiguous run. Slots past the row's end hold neutral values and
// are neither counted nor stored. Every thread reads its values before writing them, so a
// destination may alias its source.
//
// Sums are f32 (per thread, then a shuffle tree and, across warps, shared memory): for rows of
// these lengths far more accurate than the 1e-7 normalised error that the conformance suite
// allows against the reference's f64 sums.
#include "common.cuh"

// Threads per block for a row group of GROUP threads, and the blocks each SM must be able to
// hold: at least 1024 threads (at most 64 registers each), so that enough rows are in flight
// to cover the memory's latency.
template <int GROUP> struct PackedBlock {
    static constexpr int value = GROUP == 32 ? 128 : GROUP;
    static constexpr int min_blocks = 1024 / value;
};

struct SumOp {
    __device__ __forceinline__ float operator()(float a, float b) const {
        return a + b;
    }
};

struct MaxOp {
    __device__ __forceinline__ float operator()(float a, float b) const {
        return fmaxf(a, b);
    }
};

// Combines one value per thread of a row group with `op`; every thread of the group gets the
// result. Groups larger than a warp combine the warps' results through `partial` (shared,
// 2 x GROUP / 32 values). Consecutive reductions alternate between its two halves (`parity`),
// so one barrier each suffices: a thread writes a half again only after passing the barrier of
// the reduction in between, which every thread reaches only after reading that half.
template <int GROUP, typename Op>
__device__ __forceinline__ float group_reduce(float v, Op op, float (*partial)[GROUP / 32], int &parity) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
    }
    if constexpr (GROUP > 32) {
        float *half = partial[parity];
        parity ^= 1;
        if (threadIdx.x % 32 == 0) {
            half[threadIdx.x / 32] = v;
        }
        __syncthreads();
        v = half[0];
#pragma unroll
        for (int w = 1; w < GROUP / 32; w++) {
            v = op(v, half[w]);
        }
    }
    return v;
}

// The rows a group visits: row numbers of the source, grid-strided.
#define FOR_EACH_GROUP_ROW(row, nrows, GROUP)                                                                    \
    for (long long row = (long long)blockIdx.x * (PackedBlock<GROUP>::value / GROUP) + threadIdx.x / GROUP;      \
         row < (nrows); row += (long long)gridDim.x * (PackedBlock<GROUP>::value / GROUP))

// Loads float4 number t + GROUP * j of a row into x[j] for each slot j inside the row (n4
// float4s); slots past the end get `pad`.
template <int GROUP, int V4>
__device__ __forceinline__ void load_row(const char *row, int t, int n4, float pad, float (&x)[V4][4]) {
#pragma unroll
    for (int j = 0; j < V4; j++) {
        const int c = t + GROUP * j;
        float4 v = make_float4(pad, pad, pad, pad);
        if (c < n4) {
            v = ((const float4 *)row)[c];
        }
        x[j][0] = v.x;
        x[j][1] = v.y;
        x[j][2] = v.z;
        x[j][3] = v.w;
    }
}

// Loads f16 values as load_row loads floats: the 4 halves of slot t + GROUP * j in one 8-byte
// load, widened exactly; slots past the end get 0.
template <int GROUP, int V4>
__device__ __forceinline__ void load_row16(const char *row, int t, int n4, float (&x)[V4][4]) {
#pragma unroll
    for (int j = 0; j < V4; j++) {
        const int c = t + GROUP * j;
        uint2 v = make_uint2(0u, 0u);
        if (c < n4) {
            v = ((const uint2 *)row)[c];
        }
        x[j][0] = f16_bits_to_f32((unsigned short)(v.x & 0xffffu));
        x[j][1] = f16_bits_to_f32((unsigned short)(v.x >> 16));
        x[j][2] = f16_bits_to_f32((unsigned short)(v.y & 0xffffu));
        x[j][3] = f16_bits_to_f32((unsigned short)(v.y >> 16));
    }
}

// Stores the slots of x inside the row.
template <int GROUP, int V4>
__device__ __forceinline__ void store_row(char *row, int t, int n4, const float (&x)[V4][4]) {
#pragma unroll
    for (int j = 0; j < V4; j++) {
        const int c = t + GROUP * j;
        if (c < n4) {
            ((float4 *)row)[c] = make_float4(x[j][0], x[j][1], x[j][2], x[j][3]);
        }
    }
}

// y = exp(x - max) / sum exp(x - max) along rows of x = src * scale + mask, each step rounded
// as the reference does; the mask row of source row (i1, i2, i3) is (i1 % m1, i2 % m2, i3 % m3).
// A row of only -inf becomes zeros; a NaN makes its row NaN. Each exponential is computed once
// and kept in x.
template <int GROUP, int V4, typename M>
__device__ void soft_max_packed(const TensorArg &src, const TensorArg &mask, const TensorArg &dst, float scale,
                                int has_mask) {
    __shared__ float partial[2][GROUP / 32];
    int parity = 0;
    const int t = threadIdx.x % GROUP;
    const int n4 = (int)(src.ne[0] / 4);
    // Without a mask, rows evenly spaced are numbered along dimension 1 alone.
    const bool flat = !has_mask && rows_evenly_spaced(src) && rows_evenly_spaced(dst);
    FOR_EACH_GROUP_ROW(row, nrows_of(src), GROUP) {
        long long i1 = row, i2 = 0, i3 = 0;
        if (!flat) {
            unravel_row(row, src.ne[1], src.ne[2], i1, i2, i3);
        }
        const char *mrow =
            has_mask ? row_ptr(mask, mod64(i1, mask.ne[1]), mod64(i2, mask.ne[2]), mod64(i3, mask.ne[3]))
                     : (const char *)nullptr;
        char *drow = row_ptr(dst, i1, i2, i3);
        float x[V4][4];
        load_row<GROUP, V4>(row_ptr(src, i1, i2, i3), t, n4, -INFINITY, x);

        // A NaN counts as +inf here: its row then takes the general path below, where the NaN
        // in the sum makes every value NaN. The maximum is -inf only for rows of only -inf.
        float mx = -INFINITY;
#pragma unroll
        for (int j = 0; j < V4; j++) {
            const int c = t + GROUP * j;
            if (c < n4) {
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    float v = __fmul_rn(x[j][k], scale);
                    if (mrow != nullptr) {
                        v = __fadd_rn(v, M::load(mrow, 4 * c + k, mask.nb[0]));
                    }
                    x[j][k] = v;
                    mx = fmaxf(mx, v != v ? INFINITY : v);
                }
            }
        }
        mx = group_reduce<GROUP>(mx, MaxOp(), partial, parity);

        float sum = 0.0f;
#pragma unroll
        for (int j = 0; j < V4; j++) {
            if (t + GROUP * j < n4) {
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    x[j][k] = expf(x[j][k] - mx);
                    sum += x[j][k];
                }
            }
        }
        sum = group_reduce<GROUP>(sum, SumOp(), partial, parity);

        // x / sum, the IEEE quotient: the reciprocal once per row, then per value the product
        // and one correction (Markstein: correctly rounded for a correctly rounded reciprocal
        // unless the quotient is subnormal). This is the fast path of IEEE division, whose
        // slow-path call would otherwise spill the registers holding the row.
        const bool all_inf = mx == -INFINITY;
        const float inv = 1.0f / sum;
#pragma unroll
        for (int j = 0; j < V4; j++) {
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const float q = x[j][k] * inv;
                x[j][k] = all_inf ? 0.0f : fmaf(fmaf(-q, sum, x[j][k]), inv, q);
            }
        }
        store_row<GROUP, V4>(drow, t, n4, x);
    }
}

// The quants of the float4 `x` of a block of 32 values whose 8 float4s are held by 8
// consecutive lanes (which share the block's maximum through shuffles), a byte each, as
// quantize_q8_1 (mul_mat_vec.cu) gives them; and the block's scale `d`.
__device__ __forceinline__ int quantize_float4(const float (&x)[4], float &d) {
    float amax = 0.0f;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        amax = fmaxf(amax, fabsf(x[k]));
    }
#pragma unroll
    for (int o = 1; o < 8; o *= 2) {
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    }
    d = amax / 127.0f;
    int packed = 0;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const int q = amax == 0.0f ? 0 : __float2int_rn(x[k] / d);
        packed |= (q & 0xff) << (8 * k);
    }
    return packed;
}

// Stores a row held as `load_row` holds it quantized into Q8_1 blocks at `out`, with the bits
// that quantize_q8_1 gives.
template <int GROUP, int V4>
__device__ __forceinline__ void store_q8_1(Q8_1 *out, int t, int n4, const float (&x)[V4][4]) {
#pragma unroll
    for (int j = 0; j < V4; j++) {
        const int c = t + GROUP * j;
        float d;
        const int packed = quantize_float4(x[j], d);
        int sum = __dp4a(packed, 0x01010101, 0);
#pragma unroll
        for (int o = 1; o < 8; o *= 2) {
            sum += __shfl_xor_sync(0xffffffffu, sum, o);
        }
        if (c < n4) {
            Q8_1 &block = out[c / 8];
            block.qs[c % 8] = packed;
            if (c % 8 == 0) {
                block.d = d;
                block.s = d * (float)sum;
            }
        }
    }
}

// Stores a row held as `load_row` holds it as quantize_q8_0_rows (mul_mat_vec.cu) lays out a
// column, with its bits: each block's quants at `out` + 34 * block + 2, two zero bytes before
// them, its scale at `scales`[block].
template <int GROUP, int V4>
__device__ __forceinline__ void store_q8_0_rows(char *out, float *scales, int t, int n4, const float (&x)[V4][4]) {
#pragma unroll
    for (int j = 0; j < V4; j++) {
        const int c = t + GROUP * j;
        float d;
        const unsigned int packed = (unsigned int)quantize_float4(x[j], d);
        if (c < n4) {
            char *block = out + (long long)(c / 8) * Q8_0_BYTES;
            // The quants lie 2 bytes past a 4-byte boundary.
            unsigned short *q = (unsigned short *)(block + 2 + 4 * (c % 8));
            q[0] = (unsigned short)(packed & 0xffffu);
            q[1] = (unsigned short)(packed >> 16);
            if (c % 8 == 0) {
                *(unsigned short *)block = 0;
                scales[c / 8] = d;
            }
        }
    }
}

// Stores a row held as `load_row` holds it as 16-bit values (bf16 with BF, else f16) at `out`,
// rounded as the packing kernels of mul_mat.cu round them.
template <int GROUP, int V4, bool BF>
__device__ __forceinline__ void store_row16(unsigned short *out, int t, int n4, const float (&x)[V4][4]) {
#pragma unroll
    for (int j = 0; j < V4; j++) {
        const int c = t + GROUP * j;
        if (c < n4) {
            ((uint2 *)out)[c] =
                make_uint2(f32x2_to_16x2_bits<BF>(x[j][0], x[j][1]), f32x2_to_16x2_bits<BF>(x[j][2], x[j][3]));
        }
    }
}

// Prefetches into L1 the `bytes` bytes of a row at `row`, a 128-byte line for each thread t of
// its group from the first.
__device__ __forceinline__ void prefetch_row_l1(const char *row, long long bytes, int t) {
    if (128 * (long long)t < bytes) {
        asm volatile("prefetch.global.L1 [%0];" ::"l"(row + 128 * (long long)t));
    }
}

// What a norm also stores of its result, for the product that reads it next: nothing, Q8_1
// blocks (`store_q8_1`, rows of a multiple of 32 values), packed f16 or bf16 rows
// (`store_row16`), row r at `copy` + r times the row's size, or quants in q8_0 rows' byte
// layout (`store_q8_0_rows`: rows of a multiple of 32 values, each row's blocks at `copy` + r
// times the row's 34-byte blocks, then all rows' scales).
#define NORM_COPY_NONE 0
#define NORM_COPY_Q8_1 1
#define NORM_COPY_F16 2
#define NORM_COPY_BF16 3
#define NORM_COPY_Q8_0_ROWS 4

// x += y, slot by slot, each sum rounded as an ADD node rounds it.
template <int V4> __device__ __forceinline__ void add_rows(float (&x)[V4][4], const float (&y)[V4][4]) {
#pragma unroll
    for (int j = 0; j < V4; j++) {
#pragma unroll
        for (int k = 0; k < 4; k++) {
            x[j][k] = __fadd_rn(x[j][k], y[j][k]);
        }
    }
}

// A row of n4 float4s in x normalised in place, as `norm_packed` computes it (NORM, or RMS_NORM
// with `rms`). `partial` and `parity` are the group's reduction state, kept from row to row.
template <int GROUP, int V4>
__device__ __forceinline__ void normalize_row(float (&x)[V4][4], int n4, float eps, int rms,
                                              float (&partial)[2][GROUP / 32], int &parity) {
    const int t = threadIdx.x % GROUP;
    const float n = (float)(4 * n4); // exact: at most 8192
    // RMS_NORM centres nothing; NORM subtracts the mean before squaring (the padding,
    // which would then count, is left out).
    float mean = 0.0f;
    if (!rms) {
        float sum = 0.0f;
#pragma unroll
        for (int j = 0; j < V4; j++) {
#pragma unroll
            for (int k = 0; k < 4; k++) {
                sum += x[j][k];
            }
        }
        mean = group_reduce<GROUP>(sum, SumOp(), partial, parity) / n;
    }
    float sq = 0.0f;
#pragma unroll
    for (int j = 0; j < V4; j++) {
        if (t + GROUP * j < n4) {
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const float d = x[j][k] - mean;
                sq += d * d;
            }
        }
    }
    const float var = group_reduce<GROUP>(sq, SumOp(), partial, parity) / n;
    const float inv = 1.0f / sqrtf(var + eps);
#pragma unroll
    for (int j = 0; j < V4; j++) {
#pragma unroll
        for (int k = 0; k < 4; k++) {
            x[j][k] = (x[j][k] - mean) * inv;
        }
    }
}

// A normalised row in x times the row `w` (affine 1 or 2) plus the row `b` (affine 2), each
// rounded as the MUL and ADD it replaces; the rows lie in global or shared memory.
template <int GROUP, int V4>
__device__ __forceinline__ void affine_row(float (&x)[V4][4], int n4, const float4 *w, const float4 *b, int affine) {
    const int t = threadIdx.x % GROUP;
    if (affine > 0) {
        // One float4 of the weight (and bias) at a time, so that no second row is held.
#pragma unroll
        for (int j = 0; j < V4; j++) {
            const int c = t + GROUP * j;
            if (c < n4) {
                const float4 wv = w[c];
                const float wk[4] = {wv.x, wv.y, wv.z, wv.w};
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    x[j][k] = __fmul_rn(x[j][k], wk[k]);
                }
                if (affine > 1) {
                    const float4 bv = b[c];
                    const float bk[4] = {bv.x, bv.y, bv.z, bv.w};
#pragma unroll
                    for (int k = 0; k < 4; k++) {
                        x[j][k] = __fadd_rn(x[j][k], bk[k]);
                    }
                }
            }
        }
    }
}

// The norm of row `row` (of `nrows`, n4 float4s each), loaded into x, as `norm_packed` computes
// it: stored at `drow` (f16 with `dst_half`) and in `copy` as `copy_type` says. `partial` and
// `parity` are the group's reduction state, kept from row to row.
template <int GROUP, int V4>
__device__ __forceinline__ void norm_row(float (&x)[V4][4], int n4, long long row, long long nrows, char *drow,
                                         int dst_half, float eps, int rms, const TensorArg &w, const TensorArg &b,
                                         int affine, void *copy, int copy_type, float (&partial)[2][GROUP / 32],
                                         int &parity) {
    const int t = threadIdx.x % GROUP;
    normalize_row<GROUP, V4>(x, n4, eps, rms, partial, parity);
    affine_row<GROUP, V4>(x, n4, (const float4 *)w.data, (const float4 *)b.data, affine);
    if (dst_half) {
        store_row16<GROUP, V4, false>((unsigned short *)drow, t, n4, x);
    } else {
        store_row<GROUP, V4>(drow, t, n4, x);
    }
    if (copy_type == NORM_COPY_Q8_1) {
        store_q8_1<GROUP, V4>((Q8_1 *)copy + row * (n4 / 8), t, n4, x);
    } else if (copy_type == NORM_COPY_F16) {
        store_row16<GROUP, V4, false>((unsigned short *)copy + row * (4ll * n4), t, n4, x);
    } else if (copy_type == NORM_COPY_BF16) {
        store_row16<GROUP, V4, true>((unsigned short *)copy + row * (4ll * n4), t, n4, x);
    } else if (copy_type == NORM_COPY_Q8_0_ROWS) {
        const long long nblocks = n4 / 8;
        float *scales = (float *)((char *)copy + nrows * nblocks * Q8_0_BYTES);
        store_q8_0_rows<GROUP, V4>((char *)copy + row * nblocks * Q8_0_BYTES, scales + row * nblocks, t, n4, x);
    }
}

// Where a norm's rows lie: row `at` of a tensor of the source's shape (source, result or
// residual). Rows evenly spaced in every tensor are numbered along dimension 1 alone (one
// multiply); else the row number is unravelled over the source's shape.
struct NormRows {
    const TensorArg &src;
    bool flat;
    __device__ __forceinline__ NormRows(const TensorArg &src, const TensorArg &dst, const TensorArg &r, int residual)
        : src(src),
          flat(rows_evenly_spaced(src) && rows_evenly_spaced(dst) && (!residual || rows_evenly_spaced(r))) {}
    __device__ __forceinline__ char *of(const TensorArg &t, long long at) const {
        if (flat) {
            return (char *)t.data + at * t.nb[1];
        }
        long long i1, i2, i3;
        unravel_row(at, src.ne[1], src.ne[2], i1, i2, i3);
        return row_ptr(t, i1, i2, i3);
    }
};

// NORM: (x - mean) / sqrt(var + eps) with var = mean((x - mean)^2) taken from the registers;
// RMS_NORM (`rms`): x / sqrt(mean(x^2) + eps). Both multiply by the inverse square root, as
// the reference does. With `affine` 1 or 2 the result is then multiplied by the packed row `w`
// and (2) `b` is added, each rounded as the MUL and ADD it replaces (a layer norm's weight and
// bias fused into the norm: the same bits as the three ops one after another). With `residual`
// the row of `r` (the source's shape, packed rows: f32 with 1, f16 with 2) is added to the
// source's first, as the ADD of a residual connection before it. A group that takes several
// rows (fewer groups than rows) prefetches its next rows into L1 first. With `src_half` the source
// rows are f16, widened exactly (as a CPY to f32 before the ops). With `dst_half` the result
// is stored as f16 rows only, rounded as a CPY to f16 after the ops. Each result row is also
// stored in `copy` as `copy_type` says (NORM_COPY_*).
template <int GROUP, int V4>
__device__ void norm_packed(const TensorArg &src, int src_half, const TensorArg &dst, int dst_half, float eps,
                            int rms, const TensorArg &w, const TensorArg &b, int affine, const TensorArg &r,
                            int residual, void *copy, int copy_type) {
    __shared__ float partial[2][GROUP / 32];
    int parity = 0;
    const int t = threadIdx.x % GROUP;
    const int n4 = (int)(src.ne[0] / 4);
    const NormRows rows(src, dst, r, residual);
    auto row_of = [&](const TensorArg &t, long long at) { return rows.of(t, at); };
    FOR_EACH_GROUP_ROW(row, nrows_of(src), GROUP) {
        char *drow = row_of(dst, row);
        // The group's next row (and its residual row) into L1 while this one is reduced.
        const long long next = row + (long long)gridDim.x * (PackedBlock<GROUP>::value / GROUP);
        if (next < nrows_of(src)) {
            prefetch_row_l1(row_of(src, next), (src_half ? 8 : 16) * (long long)n4, t);
            if (residual) {
                prefetch_row_l1(row_of(r, next), (residual == 2 ? 8 : 16) * (long long)n4, t);
            }
        }
        float x[V4][4];
        if (src_half) {
            load_row16<GROUP, V4>(row_of(src, row), t, n4, x);
        } else {
            load_row<GROUP, V4>(row_of(src, row), t, n4, 0.0f, x);
        }
        if (residual) {
            float y[V4][4];
            if (residual == 2) {
                load_row16<GROUP, V4>(row_of(r, row), t, n4, y);
            } else {
                load_row<GROUP, V4>(row_of(r, row), t, n4, 0.0f, y);
            }
            add_rows<V4>(x, y);
        }
        norm_row<GROUP, V4>(x, n4, row, nrows_of(src), drow, dst_half, eps, rms, w, b, affine, copy, copy_type,
                            partial, parity);
    }
}

// The weight and bias rows of an affine norm (n4 float4s each; `affine` 1: weight only) copied
// into shared memory by the block's threads; waits for the block.
__device__ __forceinline__ void stage_affine_rows(const TensorArg &w, const TensorArg &b, int affine, int n4,
                                                  float4 *wrow, float4 *brow) {
    for (int c = threadIdx.x; c < n4; c += blockDim.x) {
        wrow[c] = affine > 0 ? ((const float4 *)w.data)[c] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        brow[c] = affine > 1 ? ((const float4 *)b.data)[c] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    __syncthreads();
}

// norm_packed of f16 rows into f16 rows (a residual stream kept in f16, as BERT's layers in
// reduced precision keep it), a warp a row, with an f16 `residual` or none and no copy: the
// same bits. The weight and bias rows are read into shared memory once a block, where
// norm_packed reads them from global memory for every row, and rows of up to 384 values fit 40
// registers, so that 12 blocks an SM are in flight (norm_packed's 80 allow 6) without
// prefetching. On an H200, MiniLM's 131072 rows of 384 values with a residual took 75 us
// against 99 (4.0 TB/s read and written against 3.0).
template <int V4>
__device__ void norm_packed_f16(const TensorArg &src, const TensorArg &dst, float eps, int rms, const TensorArg &w,
                                const TensorArg &b, int affine, const TensorArg &r, int residual) {
    __shared__ float4 wrow[32 * V4], brow[32 * V4];
    __shared__ float partial[2][1];
    int parity = 0;
    const int t = threadIdx.x % 32;
    const int n4 = (int)(src.ne[0] / 4);
    stage_affine_rows(w, b, affine, n4, wrow, brow);
    const NormRows rows(src, dst, r, residual);
    auto row_of = [&](const TensorArg &t, long long at) { return rows.of(t, at); };
    FOR_EACH_GROUP_ROW(row, nrows_of(src), 32) {
        float x[V4][4];
        load_row16<32, V4>(row_of(src, row), t, n4, x);
        if (residual) {
            float y[V4][4];
            load_row16<32, V4>(row_of(r, row), t, n4, y);
            add_rows<V4>(x, y);
        }
        normalize_row<32, V4>(x, n4, eps, rms, partial, parity);
        affine_row<32, V4>(x, n4, wrow, brow, affine);
        store_row16<32, V4, false>((unsigned short *)row_of(dst, row), t, n4, x);
    }
}

// Row i of table `a` (rows along dimension 1) picked by I32 value i of the packed `idx`, or
// null for an index outside the table (whose row GET_ROWS makes NaN).
__device__ __forceinline__ const char *picked_table_row(const TensorArg &a, const TensorArg &idx, long long i) {
    const int r = ((const int *)idx.data)[i];
    return r < 0 || r >= a.ne[1] ? nullptr : (const char *)a.data + r * a.nb[1];
}

// A row of packed f32 or f16 (`half`) values into x as load_row and load_row16 load them; NaN
// (slots past the end 0) where `row` is null.
template <int GROUP, int V4>
__device__ __forceinline__ void load_row_or_nan(const char *row, bool half, int t, int n4, float (&x)[V4][4]) {
    if (row == nullptr) {
#pragma unroll
        for (int j = 0; j < V4; j++) {
#pragma unroll
            for (int k = 0; k < 4; k++) {
                x[j][k] = t + GROUP * j < n4 ? __int_as_float(0x7fc00000) : 0.0f;
            }
        }
    } else if (half) {
        load_row16<GROUP, V4>(row, t, n4, x);
    } else {
        load_row<GROUP, V4>(row, t, n4, 0.0f, x);
    }
}

// An embeddings layer as one norm: result row i is the norm (as norm_packed computes it, with
// its `affine`) of (a[ia[i]] + e) + c[ic[i]], rows of the tables `a` and `c` picked by the I32
// indices `ia` and `ic` (two GET_ROWS), the row `e` added to the first (a broadcast ADD), the
// second added as a residual connection, each sum rounded as its ADD node. The tables and `e`
// hold packed f32 or f16 values (their nb[0] says which); `dst` holds packed rows, one after
// another, of f16 values with `dst_half`. A warp a row; the row `e`, the
// weight and the bias are read into shared memory once a block, so that rows of up to 384
// values fit 40 registers (12 blocks of 128 threads an SM): on an H200, MiniLM's embeddings
// (131072 tokens, f16 tables, f16 result) took 72 us against 94 with those rows read from
// global memory for every row at 72 registers (and each group's next rows prefetched).
template <int V4>
__device__ void norm_gathered(const TensorArg &a, const TensorArg &ia, const TensorArg &e, const TensorArg &c,
                              const TensorArg &ic, const TensorArg &dst, int dst_half, float eps, int rms,
                              const TensorArg &w, const TensorArg &b, int affine) {
    __shared__ float4 erow[32 * V4], wrow[32 * V4], brow[32 * V4];
    __shared__ float partial[2][1];
    int parity = 0;
    const int t = threadIdx.x % 32;
    const int n4 = (int)(dst.ne[0] / 4);
    const long long nrows = nrows_of(dst);
    const bool a_half = a.nb[0] == 2, c_half = c.nb[0] == 2;
    for (int c4 = threadIdx.x; c4 < n4; c4 += blockDim.x) {
        const char *ev = (const char *)e.data;
        erow[c4] = e.nb[0] == 2 ? make_float4(f16_bits_to_f32(((const unsigned short *)ev)[4 * c4]),
                                              f16_bits_to_f32(((const unsigned short *)ev)[4 * c4 + 1]),
                                              f16_bits_to_f32(((const unsigned short *)ev)[4 * c4 + 2]),
                                              f16_bits_to_f32(((const unsigned short *)ev)[4 * c4 + 3]))
                                : ((const float4 *)ev)[c4];
    }
    stage_affine_rows(w, b, affine, n4, wrow, brow);
    FOR_EACH_GROUP_ROW(row, nrows, 32) {
        float x[V4][4], y[V4][4];
        const char *arow = picked_table_row(a, ia, row), *crow = picked_table_row(c, ic, row);
        load_row_or_nan<32, V4>(arow, a_half, t, n4, x);
#pragma unroll
        for (int j = 0; j < V4; j++) {
            const int c4 = t + 32 * j;
            const float4 ev = c4 < n4 ? erow[c4] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            y[j][0] = ev.x, y[j][1] = ev.y, y[j][2] = ev.z, y[j][3] = ev.w;
        }
        add_rows<V4>(x, y);
        load_row_or_nan<32, V4>(crow, c_half, t, n4, y);
        add_rows<V4>(x, y);
        normalize_row<32, V4>(x, n4, eps, rms, partial, parity);
        affine_row<32, V4>(x, n4, wrow, brow, affine);
        char *drow = (char *)dst.data + row * (4ll * n4) * (dst_half ? 2 : 4);
        if (dst_half) {
            store_row16<32, V4, false>((unsigned short *)drow, t, n4, x);
        } else {
            store_row<32, V4>(drow, t, n4, x);
        }
    }
}

// Prefetches into L2 the weight (and bias) row of an affine norm, ne0 floats each, then waits
// for the previous kernel. These rows are constants of the graph, so reading them cannot race
// with that kernel's writes: their memory latency overlaps it instead of following the
// reduction (as mmv_prefetch_then_wait does for the products' weights).
__device__ __forceinline__ void norm_prefetch_then_wait(const TensorArg &w, const TensorArg &b, int affine,
                                                        long long ne0) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    for (long long at = 128 * (long long)threadIdx.x; affine > 0 && at < 4 * ne0; at += 128 * (long long)blockDim.x) {
        asm volatile("prefetch.global.L2 [%0];" ::"l"((const char *)w.data + at));
        if (affine > 1) {
            asm volatile("prefetch.global.L2 [%0];" ::"l"((const char *)b.data + at));
        }
    }
#endif
    await_prior_kernel();
}

#define PACKED_BOUNDS(GROUP) __launch_bounds__(PackedBlock<GROUP>::value, PackedBlock<GROUP>::min_blocks)
#define SOFT_MAX_PACKED_KERNEL(name, GROUP, V4, M)                                                               \
    extern "C" __global__ void PACKED_BOUNDS(GROUP)                                                              \
        name(const __grid_constant__ TensorArg src, const __grid_constant__ TensorArg mask,                      \
             const __grid_constant__ TensorArg dst, float scale, int has_mask) {                                 \
        await_prior_kernel();                                                                                    \
        soft_max_packed<GROUP, V4, M>(src, mask, dst, scale, has_mask);                                          \
    }
// The norms hold a weight and bias pointer more: 768 threads per SM (at most 80 registers)
// keep their longest rows out of local memory.
#define NORM_BOUNDS(GROUP) __launch_bounds__(PackedBlock<GROUP>::value, 768 / PackedBlock<GROUP>::value)
#define NORM_PACKED_KERNEL(name, GROUP, V4)                                                                      \
    extern "C" __global__ void NORM_BOUNDS(GROUP)                                                                \
        name(const __grid_constant__ TensorArg src, int src_half, const __grid_constant__ TensorArg dst,         \
             int dst_half, float eps, int rms, const __grid_constant__ TensorArg w,                              \
             const __grid_constant__ TensorArg b, int affine, const __grid_constant__ TensorArg r, int residual, \
             void *copy, int copy_type) {                                                                        \
        norm_prefetch_then_wait(w, b, affine, src.ne[0]);                                                        \
        norm_packed<GROUP, V4>(src, src_half, dst, dst_half, eps, rms, w, b, affine, r, residual, copy,          \
                               copy_type);                                                                       \
    }

// norm_f16_row*(TensorArg src, TensorArg dst, float eps, int rms, TensorArg w, TensorArg b,
//               int affine, TensorArg r, int residual): blocks of 128 threads, a warp a row, at
// least BLOCKS blocks an SM (as many as hold the row's registers without spilling).
#define NORM_F16_KERNEL(name, V4, BLOCKS)                                                                        \
    extern "C" __global__ void __launch_bounds__(128, BLOCKS)                                                    \
        name(const __grid_constant__ TensorArg src, const __grid_constant__ TensorArg dst, float eps, int rms,   \
             const __grid_constant__ TensorArg w, const __grid_constant__ TensorArg b, int affine,               \
             const __grid_constant__ TensorArg r, int residual) {                                                \
        await_prior_kernel();                                                                                    \
        norm_packed_f16<V4>(src, dst, eps, rms, w, b, affine, r, residual);                                      \
    }

#define NORM_GATHERED_KERNEL(name, V4, BLOCKS)                                                                   \
    extern "C" __global__ void __launch_bounds__(128, BLOCKS)                                                    \
        name(const __grid_constant__ TensorArg a, const __grid_constant__ TensorArg ia,                          \
             const __grid_constant__ TensorArg e, const __grid_constant__ TensorArg c,                           \
             const __grid_constant__ TensorArg ic, const __grid_constant__ TensorArg dst, int dst_half, float eps, \
             int rms, const __grid_constant__ TensorArg w, const __grid_constant__ TensorArg b, int affine) {    \
        norm_prefetch_then_wait(w, b, affine, dst.ne[0]);                                                        \
        norm_gathered<V4>(a, ia, e, c, ic, dst, dst_half, eps, rms, w, b, affine);                               \
    }

// Named by the longest row each takes: rows of up to 128 * V4 values on a warp, of up to
// 1024 * V4 values on a block.
SOFT_MAX_PACKED_KERNEL(soft_max_f32_f32_row128, 32, 1, F32)
SOFT_MAX_PACKED_KERNEL(soft_max_f32_f32_row256, 32, 2, F32)
SOFT_MAX_PACKED_KERNEL(soft_max_f32_f32_row512, 32, 4, F32)
SOFT_MAX_PACKED_KERNEL(soft_max_f32_f32_row1024, 32, 8, F32)
SOFT_MAX_PACKED_KERNEL(soft_max_f32_f32_row2048, 256, 2, F32)
SOFT_MAX_PACKED_KERNEL(soft_max_f32_f32_row4096, 256, 4, F32)
SOFT_MAX_PACKED_KERNEL(soft_max_f32_f32_row8192, 256, 8, F32)
SOFT_MAX_PACKED_KERNEL(soft_max_f32_f16_row128, 32, 1, F16)
SOFT_MAX_PACKED_KERNEL(soft_max_f32_f16_row256, 32, 2, F16)
SOFT_MAX_PACKED_KERNEL(soft_max_f32_f16_row512, 32, 4, F16)
SOFT_MAX_PACKED_KERNEL(soft_max_f32_f16_row1024, 32, 8, F16)
SOFT_MAX_PACKED_KERNEL(soft_max_f32_f16_row2048, 256, 2, F16)
SOFT_MAX_PACKED_KERNEL(soft_max_f32_f16_row4096, 256, 4, F16)
SOFT_MAX_PACKED_KERNEL(soft_max_f32_f16_row8192, 256, 8, F16)

NORM_PACKED_KERNEL(norm_f32_row128, 32, 1)
NORM_PACKED_KERNEL(norm_f32_row256, 32, 2)
// Rows of 257 to 384 values (BERT-small widths such as MiniLM's): three float4s a thread, where
// the 512-value kernel would issue a fourth slot's instructions for nothing.
NORM_PACKED_KERNEL(norm_f32_row384, 32, 3)
NORM_PACKED_KERNEL(norm_f32_row512, 32, 4)
NORM_PACKED_KERNEL(norm_f32_row1024, 32, 8)
NORM_PACKED_KERNEL(norm_f32_row2048, 256, 2)
NORM_PACKED_KERNEL(norm_f32_row4096, 256, 4)
NORM_PACKED_KERNEL(norm_f32_row8192, 256, 8)
// Norms of f16 rows into f16 rows of up to 128 * V4 values (norm_packed_f16).
NORM_F16_KERNEL(norm_f16_row128, 1, 12)
NORM_F16_KERNEL(norm_f16_row256, 2, 12)
NORM_F16_KERNEL(norm_f16_row384, 3, 12)
NORM_F16_KERNEL(norm_f16_row512, 4, 10)
NORM_F16_KERNEL(norm_f16_row1024, 8, 6)
// Embeddings layers (norm_gathered) of rows of up to 128 * V4 values, on a warp (longer rows
// would spill), at least BLOCKS blocks an SM (as many as hold the row's registers).
NORM_GATHERED_KERNEL(norm_gathered_f32_row128, 1, 12)
NORM_GATHERED_KERNEL(norm_gathered_f32_row256, 2, 12)
NORM_GATHERED_KERNEL(norm_gathered_f32_row384, 3, 12)
NORM_GATHERED_KERNEL(norm_gathered_f32_row512, 4, 10)
