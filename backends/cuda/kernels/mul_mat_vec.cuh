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

// Adds up each warp's sums of the block (already reduced within the warp) and stores the
// block's ROWS x NCOLS results of matrix (i2, i3); rows at or past m are not stored.
template <int ROWS, int NCOLS>
__device__ __forceinline__ void mmv_store(float (&acc)[ROWS][NCOLS], float *shared, const TensorArg &dst,
                                          long long row0, long long m, long long i2, long long i3) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
    for (int r = 0; r < ROWS; r++) {
#pragma unroll
        for (int c = 0; c < NCOLS; c++) {
            const float sum = warp_sum(acc[r][c]);
            if (lane == 0) {
                shared[(warp * ROWS + r) * NCOLS + c] = sum;
            }
        }
    }
    __syncthreads();
    for (int t = threadIdx.x; t < ROWS * NCOLS; t += blockDim.x) {
        const int r = t / NCOLS, c = t % NCOLS;
        float sum = 0.0f;
#pragma unroll
        for (int w = 0; w < MMV_WARPS; w++) {
            sum += shared[(w * ROWS + r) * NCOLS + c];
        }
        if (row0 + r < m) {
            *(float *)(row_ptr(dst, c, i2, i3) + (row0 + r) * dst.nb[0]) = sum;
        }
    }
    __syncthreads(); // `shared` is free for the next matrix
}


// ---------------------------------------------------------------------------------------------
// b quantized: Q8_1 blocks of 32 values, d = max|x| / 127, q = round(x / d), and s = d * sum(q)
// (which the q4_0 product needs for the weights' offset of 8). 40 bytes, 8-byte aligned.

struct Q8_1 {
    float d;
    float s;
    int qs[8];
};

static_assert(sizeof(Q8_1) == 40, "Q8_1 must match Q8_1_BYTES in mul_mat.rs");

// A 32-bit word of quants at a 2-byte aligned address (the blocks of q8_0, q4_0 and q6_K are 34,
// 18 and 210 bytes long).
__device__ __forceinline__ int load_i32_a2(const char *p) {
    const unsigned short *h = (const unsigned short *)p;
    return (int)((unsigned int)h[0] | ((unsigned int)h[1] << 16));
}
