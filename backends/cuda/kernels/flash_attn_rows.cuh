// What the tensor-core FLASH_ATTN kernels (flash_attn_mma.cu, flash_attn_half.cu) do alike with
// the scores of a warp's 16 query rows: the online soft-max over a tile of keys, and the rows'
// results at the end. Each thread holds, for tile c of 8 keys, the accumulator layout of an
// `mma.sync` product: sc[c] = {(g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1)} (rows g and
// g + 8 of the warp's, keys 8c + 2t and the next), and its sums of values out[s] in the same
// layout over values 8s .. 8s + 7.
#pragma once

#include "common.cuh"

#define FA_LOG2E 1.4426950408889634f

// 2^x for x <= 0 (soft-max weights): one instruction; results below 2^-126 flush to zero,
// far below what a weight adds to a sum of at least 1.
__device__ __forceinline__ float fa_exp2(float x) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}

// Row r of a mask of `rows` rows (rows repeat): 32-bit arithmetic, since r fits 31 bits.
__device__ __forceinline__ int fa_mask_row(int r, long long rows) { return r < rows ? r : r % (int)rows; }

// The scores of the tile at key p0 scaled (`scale2` includes log2(e)) and masked, in base-2
// units (a key no row may see, or past the last `kv`, is -inf), then the online soft-max of each
// row over the 4 threads that share it: the scores become the tile's weights, and `out` and
// `sums` are rescaled to the new row maximum. With SUMS = 2, sums[i] is this thread's share of
// row i's weights' sum and the tile's weights are added to it here; with SUMS = 4 it is the
// accumulator of an `mma.sync` product of the weights by ones (the row sums of the weights as
// they are rounded for the product by the values), which the caller adds to. With `one_row`,
// every query row of the block shares the mask row whose values (times log2(e), -inf for
// positions past the last) are at `bias` in shared memory; a key it hides is zeros in shared
// memory (the kernels copy no key no row may see), so its score is 0 and its sum -inf with no
// test. With `zero_bias` as well (the tile's biases are all 0: no padding in it, the usual
// case; and a positive scale, which the caller checks) the biases are not read and the scale
// is applied inside the exponent, one fused multiply-add a score: the row maximum is that of
// the scores times the scale (the same value, as the scale is positive), the weights are
// rounded once less. Else row i's mask row is at `mrow[i]` (null for
// rows past the last) in mask values of M.
template <typename M, int KEYS, int D, int SUMS>
__device__ __forceinline__ void fa_online_softmax(float (&sc)[KEYS / 8][4], float (&out)[D / 8][4], float (&row_max)[2],
                                                  float (&sums)[SUMS], bool one_row, bool zero_bias, const float *bias,
                                                  const char *const (&mrow)[2], long long mask_nb0, int p0, int kv,
                                                  float scale2) {
    static_assert(SUMS == 2 || SUMS == 4, "a thread's share of its rows' sums, or a product's accumulator");
    const int t = threadIdx.x % 4;
    // What the scores are multiplied by inside the exponent: exactly nothing once scaled.
    const float scale_in = zero_bias ? scale2 : 1.0f;
    if (zero_bias) {
        // The scores stay as the product left them.
    } else if (one_row) {
#pragma unroll
        for (int c = 0; c < KEYS / 8; c++) {
            const float2 b = *(const float2 *)&bias[8 * c + 2 * t];
#pragma unroll
            for (int x = 0; x < 4; x++) {
                sc[c][x] = fmaf(sc[c][x], scale2, x & 1 ? b.y : b.x);
            }
        }
    } else {
        const int left = min(KEYS, kv - p0);
#pragma unroll
        for (int c = 0; c < KEYS / 8; c++) {
#pragma unroll
            for (int x = 0; x < 4; x++) {
                const int j = 8 * c + 2 * t + (x & 1);
                const char *m = mrow[x / 2];
                const float b = j < left && m != nullptr ? M::load(m, p0 + j, mask_nb0) : -INFINITY;
                sc[c][x] = b == -INFINITY ? -INFINITY : fmaf(sc[c][x], scale2, b * FA_LOG2E);
            }
        }
    }
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int c = 0; c < KEYS / 8; c++) {
#pragma unroll
        for (int x = 0; x < 4; x++) {
            tile_max[x / 2] = fmaxf(tile_max[x / 2], sc[c][x]);
        }
    }
    float rescale[2], tile_sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < 2; i++) {
        tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(0xffffffffu, tile_max[i], 1));
        tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(0xffffffffu, tile_max[i], 2));
        const float next = fmaxf(row_max[i], tile_max[i] * scale_in);
        rescale[i] = row_max[i] == -INFINITY ? 0.0f : fa_exp2(row_max[i] - next);
        // Scores of a row no key reaches yet stay -inf: their weights are zeros.
        row_max[i] = next;
        tile_max[i] = next == -INFINITY ? 0.0f : next;
    }
#pragma unroll
    for (int c = 0; c < KEYS / 8; c++) {
#pragma unroll
        for (int x = 0; x < 4; x++) {
            sc[c][x] = fa_exp2(fmaf(sc[c][x], scale_in, -tile_max[x / 2]));
            if constexpr (SUMS == 2) {
                tile_sum[x / 2] += sc[c][x];
            }
        }
    }
#pragma unroll
    for (int x = 0; x < SUMS; x++) {
        if constexpr (SUMS == 2) {
            sums[x] = sums[x] * rescale[x] + tile_sum[x];
        } else {
            sums[x] *= rescale[x / 2];
        }
    }
#pragma unroll
    for (int s = 0; s < D / 8; s++) {
        out[s][0] *= rescale[0], out[s][1] *= rescale[0];
        out[s][2] *= rescale[1], out[s][3] *= rescale[1];
    }
}

// The factor that turns row i's sums into its result: one over its weights' sum over the 4
// threads that share it (zero for a row no key reached, whose result is zeros).
__device__ __forceinline__ float fa_row_scale(const float (&row_sum)[2], int i) {
    float sum = row_sum[i];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    return sum == 0.0f ? 0.0f : 1.0f / sum;
}

// Each of this thread's query rows `rows` (below `n`) of head h and batch i3 written to `dst`
// (f32): its sums times `scale[i]` (`fa_row_scale`).
template <int D>
__device__ __forceinline__ void fa_store_rows(const float (&out)[D / 8][4], const float (&scale)[2],
                                              const int (&rows)[2], int n, const TensorArg &dst, int h, int i3) {
    const int t = threadIdx.x % 4;
#pragma unroll
    for (int i = 0; i < 2; i++) {
        if (rows[i] < n) {
            char *drow = row_ptr(dst, h, rows[i], i3);
#pragma unroll
            for (int s = 0; s < D / 8; s++) {
                ((float *)drow)[8 * s + 2 * t] = out[s][2 * i] * scale[i];
                ((float *)drow)[8 * s + 2 * t + 1] = out[s][2 * i + 1] * scale[i];
            }
        }
    }
}
