// FLASH_ATTN: for each query row, softmax(scale * q . k_p + mask_p) over the key positions p,
// applied to the values, without a score matrix in global memory (tessera-core's
// `Graph::flash_attn` gives the shapes).
//
// A block of 128 threads (4 warps) takes R query rows of one head and batch, and walks the keys
// in chunks of 128 positions, one per thread:
// - scores: each thread reads its position's key once and dots it with the R queries (held in
//   shared memory), so a key is loaded once per block, not once per query;
// - soft-max online (running maximum and sum per query row, earlier sums rescaled);
// - values: each lane owns value elements `lane + 32 j`; with R = 16 each warp owns 4 rows and
//   every position, with R = 1 (a decoded token) the warps split the positions and their sums
//   are added at the end.
// Head sizes up to 32 * NE (NE = 1, 2 or 4: 32, 64 or 128). Sums are f32, `expf` is IEEE.
#include "common.cuh"

#define FA_THREADS 128
#define FA_WARPS (FA_THREADS / 32)

template <typename T, typename M, int R, int NE>
__device__ void flash_attn(const TensorArg &q, const TensorArg &k, const TensorArg &v, const TensorArg &mask,
                           const TensorArg &dst, float scale, int has_mask) {
    __shared__ float qs[R][32 * NE];
    __shared__ float scores[R][FA_THREADS];
    __shared__ float row_max[R], row_sum[R], rescale[R];
    __shared__ float partial[R == 1 ? FA_WARPS : 1][32 * NE];

    const int d = (int)q.ne[0], dv = (int)v.ne[0];
    const long long n = q.ne[1], kv = k.ne[1];
    const long long h = blockIdx.y, i3 = blockIdx.z, first = (long long)blockIdx.x * R;
    const long long kh = h / (q.ne[2] / k.ne[2]), kb = i3 % k.ne[3];
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;

    for (int i = tid; i < R * 32 * NE; i += FA_THREADS) {
        const int r = i / (32 * NE), e = i % (32 * NE);
        const long long row = first + r;
        qs[r][e] = (row < n && e < d) ? F32::load(row_ptr(q, row, h, i3), e, q.nb[0]) : 0.0f;
    }
    if (tid < R) {
        row_max[tid] = -INFINITY;
        row_sum[tid] = 0.0f;
    }
    // The rows and positions this thread's value sums cover.
    constexpr int ROWS = R == 1 ? 1 : R / FA_WARPS;
    const int row0 = R == 1 ? 0 : warp * ROWS;
    float acc[ROWS][NE];
    for (int r = 0; r < ROWS; r++) {
        for (int j = 0; j < NE; j++) {
            acc[r][j] = 0.0f;
        }
    }
    __syncthreads();

    for (long long p0 = 0; p0 < kv; p0 += FA_THREADS) {
        // Scores of this thread's position for every query row.
        const long long p = p0 + tid;
        float s[R];
        for (int r = 0; r < R; r++) {
            s[r] = 0.0f;
        }
        if (p < kv) {
            const char *krow = row_ptr(k, p, kh, kb);
            for (int e = 0; e < d; e++) {
                const float x = T::load(krow, e, k.nb[0]);
                for (int r = 0; r < R; r++) {
                    s[r] = fmaf(qs[r][e], x, s[r]);
                }
            }
        }
        for (int r = 0; r < R; r++) {
            const long long row = first + r;
            float x = -INFINITY;
            if (p < kv && row < n) {
                x = __fmul_rn(s[r], scale);
                if (has_mask) {
                    const char *mrow = row_ptr(mask, row % mask.ne[1], h % mask.ne[2], i3 % mask.ne[3]);
                    x = __fadd_rn(x, M::load(mrow, p, mask.nb[0]));
                }
            }
            scores[r][tid] = x;
        }
        __syncthreads();

        // Online soft-max: each warp updates the statistics of its rows.
        for (int r = warp; r < R; r += FA_WARPS) {
            float m = -INFINITY;
            for (int i = lane; i < FA_THREADS; i += 32) {
                m = fmaxf(m, scores[r][i]);
            }
            m = warp_max(m);
            const float old = row_max[r], next = fmaxf(old, m);
            float sum = 0.0f;
            for (int i = lane; i < FA_THREADS; i += 32) {
                const float w = next == -INFINITY ? 0.0f : expf(scores[r][i] - next);
                scores[r][i] = w;
                sum += w;
            }
            sum = warp_sum(sum);
            if (lane == 0) {
                const float f = old == -INFINITY ? 0.0f : expf(old - next);
                rescale[r] = f;
                row_sum[r] = row_sum[r] * f + sum;
                row_max[r] = next;
            }
        }
        __syncthreads();

        // Weighted values.
        for (int r = 0; r < ROWS; r++) {
            const float f = rescale[row0 + r];
            for (int j = 0; j < NE; j++) {
                acc[r][j] *= f;
            }
        }
        const long long end = kv - p0 < FA_THREADS ? kv - p0 : FA_THREADS;
        for (int i = R == 1 ? warp : 0; i < end; i += R == 1 ? FA_WARPS : 1) {
            const char *vrow = row_ptr(v, p0 + i, kh, kb);
            for (int j = 0; j < NE; j++) {
                const int e = lane + 32 * j;
                const float x = e < dv ? T::load(vrow, e, v.nb[0]) : 0.0f;
                for (int r = 0; r < ROWS; r++) {
                    acc[r][j] = fmaf(scores[row0 + r][i], x, acc[r][j]);
                }
            }
        }
        __syncthreads();
    }

    if constexpr (R == 1) {
        for (int j = 0; j < NE; j++) {
            partial[warp][lane + 32 * j] = acc[0][j];
        }
        __syncthreads();
        if (warp == 0 && first < n) {
            const float l = row_sum[0];
            char *drow = row_ptr(dst, h, first, i3);
            for (int j = 0; j < NE; j++) {
                const int e = lane + 32 * j;
                float total = 0.0f;
                for (int w = 0; w < FA_WARPS; w++) {
                    total += partial[w][e];
                }
                if (e < dv) {
                    F32::store(drow, e, dst.nb[0], l == 0.0f ? 0.0f : total / l);
                }
            }
        }
    } else {
        for (int r = 0; r < ROWS; r++) {
            const long long row = first + row0 + r;
            if (row >= n) {
                break;
            }
            const float l = row_sum[row0 + r];
            char *drow = row_ptr(dst, h, row, i3);
            for (int j = 0; j < NE; j++) {
                const int e = lane + 32 * j;
                if (e < dv) {
                    F32::store(drow, e, dst.nb[0], l == 0.0f ? 0.0f : acc[r][j] / l);
                }
            }
        }
    }
}

// flash_attn_<kv type>_r<R>_d<32 NE>(q, k, v, mask, dst, scale, has_mask, mask_f16)
#define FLASH_ATTN_KERNEL(name, T, R, NE)                                                                        \
    extern "C" __global__ void name(const __grid_constant__ TensorArg q, const __grid_constant__ TensorArg k,    \
                                    const __grid_constant__ TensorArg v, const __grid_constant__ TensorArg mask, \
                                    const __grid_constant__ TensorArg dst, float scale, int has_mask,            \
                                    int mask_f16) {                                                              \
        if (mask_f16) {                                                                                          \
            flash_attn<T, F16, R, NE>(q, k, v, mask, dst, scale, has_mask);                                      \
        } else {                                                                                                 \
            flash_attn<T, F32, R, NE>(q, k, v, mask, dst, scale, has_mask);                                      \
        }                                                                                                        \
    }

FLASH_ATTN_KERNEL(flash_attn_f32_r1_d32, F32, 1, 1)
FLASH_ATTN_KERNEL(flash_attn_f32_r1_d64, F32, 1, 2)
FLASH_ATTN_KERNEL(flash_attn_f32_r1_d128, F32, 1, 4)
FLASH_ATTN_KERNEL(flash_attn_f32_r16_d32, F32, 16, 1)
FLASH_ATTN_KERNEL(flash_attn_f32_r16_d64, F32, 16, 2)
FLASH_ATTN_KERNEL(flash_attn_f32_r16_d128, F32, 16, 4)
FLASH_ATTN_KERNEL(flash_attn_f16_r1_d32, F16, 1, 1)
FLASH_ATTN_KERNEL(flash_attn_f16_r1_d64, F16, 1, 2)
FLASH_ATTN_KERNEL(flash_attn_f16_r1_d128, F16, 1, 4)
FLASH_ATTN_KERNEL(flash_attn_f16_r16_d32, F16, 16, 1)
FLASH_ATTN_KERNEL(flash_attn_f16_r16_d64, F16, 16, 2)
FLASH_ATTN_KERNEL(flash_attn_f16_r16_d128, F16, 16, 4)
FLASH_ATTN_KERNEL(flash_attn_bf16_r1_d32, BF16, 1, 1)
FLASH_ATTN_KERNEL(flash_attn_bf16_r1_d64, BF16, 1, 2)
FLASH_ATTN_KERNEL(flash_attn_bf16_r1_d128, BF16, 1, 4)
FLASH_ATTN_KERNEL(flash_attn_bf16_r16_d32, BF16, 16, 1)
FLASH_ATTN_KERNEL(flash_attn_bf16_r16_d64, BF16, 16, 2)
FLASH_ATTN_KERNEL(flash_attn_bf16_r16_d128, BF16, 16, 4)
