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

#define MMV_WARPS 4

template <int NCOLS> struct MmvRows {
    static constexpr int value = NCOLS == 2 ? 2 : NCOLS <= 4 ? 4 : 8;
};

// The weight rows of a block: ROWS rows from row0 of `a`, then with GROUPS = 2 the same rows
// of `a2`, of matrix (i2 / r2, i3 / r3). Rows past the end repeat the last one; their sums are
// never stored.
template <int ROWS, int GROUPS>
__device__ __forceinline__ void mmv_rows(const char *(&arow)[GROUPS * ROWS], const TensorArg &a, const TensorArg &a2,
                                         long long row0, long long i2, long long i3, long long r2, long long r3) {
    const long long m = a.ne[1];
#pragma unroll
    for (int r = 0; r < GROUPS * ROWS; r++) {
        arow[r] = row_ptr(r < ROWS ? a : a2, min(row0 + r % ROWS, m - 1), i2 / r2, i3 / r3);
    }
}

// Prefetches into L2 the weight rows of the block's first matrix (row_bytes each), then waits
// for the previous kernel (`await_prior_kernel`). With programmatic launch the block starts
// while that kernel still runs, so the weights' memory latency overlaps it. Only the prefetch
// comes before the wait: it reads nothing into the block, and L2 is where later writes land.
template <int ROWS, int GROUPS>
__device__ __forceinline__ void mmv_prefetch_then_wait(const TensorArg &a, const TensorArg &a2, const TensorArg &dst,
                                                       long long r2, long long r3, long long row_bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if ((long long)blockIdx.y < dst.ne[2] * dst.ne[3]) {
        long long i3, i2;
        divmod64(blockIdx.y, dst.ne[2], i3, i2);
        const char *arow[GROUPS * ROWS];
        mmv_rows<ROWS, GROUPS>(arow, a, a2, (long long)blockIdx.x * ROWS, i2, i3, r2, r3);
#pragma unroll
        for (int r = 0; r < GROUPS * ROWS; r++) {
            for (long long at = 128 * (long long)threadIdx.x; at < row_bytes; at += 128 * (long long)blockDim.x) {
                asm volatile("prefetch.global.L2 [%0];" ::"l"(arow[r] + at));
            }
        }
    }
#endif
    await_prior_kernel();
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



// A 32-bit word of quants at a 2-byte aligned address (the blocks of q8_0, q4_0 and q6_K are 34,
// 18 and 210 bytes long).
__device__ __forceinline__ int load_i32_a2(const char *p) {
    const unsigned short *h = (const unsigned short *)p;
    return (int)((unsigned int)h[0] | ((unsigned int)h[1] << 16));
}
