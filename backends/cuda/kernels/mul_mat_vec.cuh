// What the matrix-vector kernels (mul_mat_vec.cu, mul_mat_vec_kquant.cu) share: the block
// shape, the reduction and store of the sums, and b quantized into Q8_1 blocks.
//
// A block is MMV_WARPS warps computing the same ROWS rows for all NCOLS columns, the warps and
// their lanes splitting K. ROWS grows with NCOLS: each piece of b a lane loads serves ROWS rows,
// so that b's loads (from L1/L2) stay a small multiple of the weights' (from memory); each lane
// keeps ROWS * NCOLS sums and ROWS pieces of weights in flight. One column takes 4 rows: a
// 4096-row product is then 1024 blocks, all resident at once on an H100, where 2 rows made 2048
// blocks, one wave and a third (the last third ran alone, at half the memory bandwidth).
#pragma once

#include "common.cuh"
#include "rope.cuh"

#define MMV_WARPS 4

template <int NCOLS> struct MmvRows {
    static constexpr int value = NCOLS == 2 ? 2 : NCOLS <= 4 ? 4 : 8;
};

// The first row of this block's ROWS rows.
template <int NCOLS> __device__ __forceinline__ long long mmv_row0() {
    return (long long)blockIdx.x * MmvRows<NCOLS>::value;
}

// i / n for 0 <= i, 0 < n: at no cost where n is 1 (no broadcast), in 32 bits where both fit.
__device__ __forceinline__ long long mmv_div(long long i, long long n) {
    if (n == 1) {
        return i;
    }
    long long q, r;
    divmod64(i, n, q, r);
    return q;
}

// The weight rows of a block: ROWS rows from row0 of `a`, then with GROUPS = 2 the same rows
// of `a2`, of matrix (i2 / r2, i3 / r3). Rows past the end repeat the last one; their sums are
// never stored.
template <int ROWS, int GROUPS>
__device__ __forceinline__ void mmv_rows(const char *(&arow)[GROUPS * ROWS], const TensorArg &a, const TensorArg &a2,
                                         long long row0, long long i2, long long i3, long long r2, long long r3) {
    const long long m = a.ne[1];
    const long long a2i = mmv_div(i2, r2), a3i = mmv_div(i3, r3);
#pragma unroll
    for (int r = 0; r < GROUPS * ROWS; r++) {
        arow[r] = row_ptr(r < ROWS ? a : a2, min(row0 + r % ROWS, m - 1), a2i, a3i);
    }
}

// L2 bytes the weight prefetch of one launch may fill (an H100 has 50 MB). Where all the rows'
// bytes would not fit, each row's prefetch stops early: prefetched lines evicted before the
// block reads them would be read from memory twice (a 117 MB matrix read 151 MB).
#define MMV_PREFETCH_BUDGET (40ll << 20)

// For the matrix-vector kernels of quantized weights (float weights gained nothing from it, and
// the q8_0 piece kernels of mul_mat_vec.cu and the tensor-core ones of mul_mat_vec_mma.cu run
// faster without it, as they say):
// prefetches into L2 the weight rows of the block's first matrix (row_bytes each, or the first
// part of each row that keeps the launch's prefetch within MMV_PREFETCH_BUDGET), rows from row0,
// then waits for the previous kernel (`await_prior_kernel`). With programmatic launch the block
// starts while that kernel still runs, so the weights' memory latency overlaps it. Only the
// prefetch comes before the wait: it reads nothing into the block, and L2 is where later writes
// land. `nmat` matrices of results, `ne2` along dimension 2. What it is worth depends on the
// model (H200, random Llama-shaped models decoding, tokens/s): a 1.1B q8_0 one decoded 11%
// slower without it, a 7.2B q8_0 or q4_0 one 5% faster; budgets of 4 to 16 MB fell between.
template <int ROWS, int GROUPS>
__device__ __forceinline__ void mmv_prefetch_then_wait(const TensorArg &a, const TensorArg &a2, long long nmat,
                                                       long long ne2, long long row0, long long r2, long long r3,
                                                       long long row_bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if ((long long)blockIdx.y < nmat) {
        long long i3, i2;
        divmod64(blockIdx.y, ne2, i3, i2);
        const char *arow[GROUPS * ROWS];
        mmv_rows<ROWS, GROUPS>(arow, a, a2, row0, i2, i3, r2, r3);
        const long long rows = a.ne[1] * GROUPS * min(nmat, (long long)gridDim.y);
        // A bound, not an exact share: f32 division spares the prologue a 64-bit one.
        const long long bytes = min(row_bytes, (long long)((float)MMV_PREFETCH_BUDGET / (float)max(rows, 1ll)));
#pragma unroll
        for (int r = 0; r < GROUPS * ROWS; r++) {
            for (long long at = 128 * (long long)threadIdx.x; at < bytes; at += 128 * (long long)blockDim.x) {
                asm volatile("prefetch.global.L2 [%0];" ::"l"(arow[r] + at));
            }
        }
    }
#endif
    await_prior_kernel();
}

// Each warp's sums of the block reduced within the warp, into `shared` (R rows, NCOLS columns a
// warp), for the block's store.
template <int R, int NCOLS>
__device__ __forceinline__ void mmv_warp_sums(float (&acc)[R][NCOLS], float *shared) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
    for (int r = 0; r < R; r++) {
#pragma unroll
        for (int c = 0; c < NCOLS; c++) {
            const float sum = warp_sum(acc[r][c]);
            if (lane == 0) {
                shared[(warp * R + r) * NCOLS + c] = sum;
            }
        }
    }
    __syncthreads();
}

// Adds up each warp's sums of the block (already reduced within the warp) and stores the
// block's ROWS x NCOLS results of matrix (i2, i3); rows at or past m are not stored. With
// GROUPS = 2 the block computed ROWS rows of two matrices, a gate and an up projection, and
// stores silu(gate) * up (SwiGLU, rounded as the SILU and MUL nodes would be). Where
// `add.data` is not 0, each result is stored plus the f32 value of `add` at its place (`add`
// has dst's shape, with stride 0 along the dimensions it repeats): an ADD fused after the
// product, rounded as the ADD node would be.
template <int ROWS, int NCOLS, int GROUPS = 1>
__device__ __forceinline__ void mmv_store(float (&acc)[GROUPS * ROWS][NCOLS], float *shared, const TensorArg &dst,
                                          const TensorArg &add, long long row0, long long m, long long i2,
                                          long long i3) {
    constexpr int R = GROUPS * ROWS;
    mmv_warp_sums<R, NCOLS>(acc, shared);
    for (int t = threadIdx.x; t < ROWS * NCOLS; t += blockDim.x) {
        const int r = t / NCOLS, c = t % NCOLS;
        float sum = 0.0f, up = 0.0f;
#pragma unroll
        for (int w = 0; w < MMV_WARPS; w++) {
            sum += shared[(w * R + r) * NCOLS + c];
            if (GROUPS == 2) {
                up += shared[(w * R + ROWS + r) * NCOLS + c];
            }
        }
        if (GROUPS == 2) {
            sum = silu_f32(sum) * up;
        }
        if (row0 + r < m) {
            if (add.data != 0) {
                sum += *(const float *)(row_ptr(add, c, i2, i3) + (row0 + r) * add.nb[0]);
            }
            *(float *)(row_ptr(dst, c, i2, i3) + (row0 + r) * dst.nb[0]) = sum;
        }
    }
    __syncthreads(); // `shared` is free for the next matrix
}



// Where the kernels put a block's sums: `dst`, plus `add` where its address is not 0
// (mmv_store).
struct MmvDst {
    const TensorArg &dst;
    const TensorArg &add;
    __device__ __forceinline__ long long nmat() const { return dst.ne[2] * dst.ne[3]; }
    __device__ __forceinline__ long long ne2() const { return dst.ne[2]; }
    template <int ROWS, int NCOLS, int GROUPS>
    __device__ __forceinline__ void store(float (&acc)[GROUPS * ROWS][NCOLS], float *shared, long long row0,
                                          long long m, long long i2, long long i3) const {
        mmv_store<ROWS, NCOLS, GROUPS>(acc, shared, dst, add, row0, m, i2, i3);
    }
};

// One product of a projection kernel: weights `a` ([K, M]) by one column of b, computed by the
// blocks from `first` of the grid. Result i is stored as a value of `dst_type` (0 f32, 1 f16,
// 2 bf16) at dst.data + row * dst.nb[1] + i * dst.nb[0], where row is rows[0] (an I32) when
// rows.data is not 0 (a SET_ROWS fused after the product: nothing is stored when rows[0] is
// outside 0 .. dst.ne[1]), else 0. With `rope`, the pairs (2k, 2k + 1) of each run of rope_ne0
// results are rotated first (a normal-mode ROPE fused after the product; values at
// k >= n_dims / 2 pass through).
struct MmvProjection {
    TensorArg a;
    TensorArg dst;
    TensorArg rows;
    long long first;
    int dst_type;
    int rope;
};

// Up to three products of one column b by weights of one type and row length in one launch
// (an attention block's query, key and value projections), sharing the ROPE parameters: the
// position is pos[0] (an I32).
struct MmvProjections {
    MmvProjection out[3];
    int count;
    int unused;
    TensorArg pos;
    long long rope_ne0;
    long long n_dims;
    float freq_base;
    float freq_scale;
    RopePowers powers;
};

static_assert(sizeof(MmvProjections) == 1064, "MmvProjections must match the Rust struct");

// The product of `p` that this block computes.
__device__ __forceinline__ const MmvProjection &mmv_projection_of(const MmvProjections &p) {
    int s = 0;
    for (int t = 1; t < p.count; t++) {
        s = (long long)blockIdx.x >= p.out[t].first ? t : s;
    }
    return p.out[s];
}

// The store of a projection kernel's block (one column, ROWS even, so that a rotated pair lies
// in one block). Each result is summed over the warps in the order mmv_store sums, so its bits
// are those of the product run alone; rotated and stored as the ROPE and SET_ROWS kernels
// would.
struct MmvProjectionStore {
    const MmvProjections &p;
    const MmvProjection &o;
    __device__ __forceinline__ long long nmat() const { return 1; }
    __device__ __forceinline__ long long ne2() const { return 1; }
    template <int ROWS, int NCOLS, int GROUPS>
    __device__ __forceinline__ void store(float (&acc)[GROUPS * ROWS][NCOLS], float *shared, long long row0,
                                          long long m, long long, long long) const {
        static_assert(NCOLS == 1 && GROUPS == 1 && ROWS % 2 == 0, "one column, pairs of rows");
        mmv_warp_sums<ROWS, 1>(acc, shared);
        const int r = threadIdx.x;
        const long long i = row0 + r;
        if (r < ROWS && i < m) {
            float pair[2] = {0.0f, 0.0f};
#pragma unroll
            for (int w = 0; w < MMV_WARPS; w++) {
                pair[0] += shared[w * ROWS + (r & ~1)];
                pair[1] += shared[w * ROWS + (r | 1)];
            }
            float v = pair[r & 1];
            const long long i0 = o.rope ? i % p.rope_ne0 : p.n_dims;
            if (i0 < p.n_dims) {
                float cos_t, sin_t;
                const float position = (float)*(const int *)p.pos.data;
                rope_cos_sin(position, i0 / 2, p.n_dims, p.freq_base, p.freq_scale, p.powers, cos_t, sin_t);
                v = (r & 1) ? rope_second(pair[0], pair[1], cos_t, sin_t) : rope_first(pair[0], pair[1], cos_t, sin_t);
            }
            const long long row = o.rows.data != 0 ? (long long)*(const int *)o.rows.data : 0;
            if (row >= 0 && row < o.dst.ne[1]) {
                char *d = (char *)o.dst.data + row * o.dst.nb[1];
                if (o.dst_type == 1) {
                    F16::store(d, i, o.dst.nb[0], v);
                } else if (o.dst_type == 2) {
                    BF16::store(d, i, o.dst.nb[0], v);
                } else {
                    F32::store(d, i, o.dst.nb[0], v);
                }
            }
        }
        __syncthreads(); // `shared` is free again
    }
};

// One value of a block of 32, a lane of the warp each, quantized as Q8_1: the lane's quant q
// (x / d rounded, d = max|x| / 127), and the block's d and s = d * sum(q).
struct Q8_1Lane {
    int q;
    float d, s;
};

__device__ __forceinline__ Q8_1Lane quantize_q8_1_lane(float x) {
    const float amax = warp_max(fabsf(x));
    const float d = amax / 127.0f;
    const int q = amax == 0.0f ? 0 : __float2int_rn(x / d);
    const int sum = (int)warp_sum((float)q); // |sum| <= 32 * 127: exact in f32
    return {q, d, d * (float)sum};
}

// The body of the kernels quantizing b for the matrix-vector kernels: one warp per block of 32
// values of one column, each value quantized as Q8_1 (quantize_q8_1_lane) and handed to
// `store(mat, j, block, lane, v)` for column j of matrix mat (columns past b's last are zeros).
// Grid: x over blocks (MMV_WARPS per thread block), y over columns, z strided over matrices.
template <typename Store> __device__ __forceinline__ void quantize_b_blocks(const TensorArg &b, Store store) {
    await_prior_kernel();
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const long long nblocks = b.ne[0] / QK;
    const long long block = (long long)blockIdx.x * MMV_WARPS + warp;
    if (block >= nblocks) {
        return;
    }
    const long long j = blockIdx.y;
    const long long nmat = b.ne[2] * b.ne[3];
    for (long long mat = blockIdx.z; mat < nmat; mat += gridDim.z) {
        long long i3, i2;
        divmod64(mat, b.ne[2], i3, i2);
        const float x = j < b.ne[1] ? *(const float *)(row_ptr(b, j, i2, i3) + (block * QK + lane) * b.nb[0]) : 0.0f;
        store(mat, j, block, lane, quantize_q8_1_lane(x));
    }
}

// A 32-bit word of quants at a 2-byte aligned address (the blocks of q8_0, q4_0 and q6_K are 34,
// 18 and 210 bytes long).
__device__ __forceinline__ int load_i32_a2(const char *p) {
    const unsigned short *h = (const unsigned short *)p;
    return (int)((unsigned int)h[0] | ((unsigned int)h[1] << 16));
}
