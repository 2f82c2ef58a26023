// FLASH_ATTN: for each query row, softmax(scale * q . k_p + mask_p) over the key positions p,
// applied to the values, without a score matrix in global memory (tessera-core's
// `Graph::flash_attn` gives the shapes). Two kernels, both with the soft-max kept online
// (running maximum and sum, earlier sums rescaled), f32 sums and IEEE `expf`, for heads of up
// to 32 * NE values (NE = 1, 2 or 4: 32, 64 or 128); a position every query of the block has
// masked (a causal mask's future) reads no key.
//
// Prompts (`_r16`): a block of 128 threads (4 warps) takes 16 query rows of one head and batch
// and walks the keys in chunks of 128 positions, one per thread: each thread reads its key once
// (4 values per load where rows are aligned) and dots it with the 16 queries held in shared
// memory; then each warp owns 4 rows and each lane NE consecutive value elements.
//
// One query row (`_r1`, a decoded token): a block of 256 threads (8 warps) per head; each warp
// walks its own positions 32 at a time with its own maximum and sum (warp shuffles, no block
// barrier in the loop: a decoded token's work is a chain of loads, and barriers would serialise
// the warps), and the warps' results are combined once at the end.
#include <type_traits>

#include "common.cuh"

#define FA_THREADS 128
#define FA_WARPS (FA_THREADS / 32)

// N (1, 2 or 4) consecutive values of a packed row from value `e`, as f32; `vector`: one load
// (the caller checked that the address is aligned to N values).
template <typename T, int N> __device__ __forceinline__ void fa_load(const char *row, int e, bool vector, float *out) {
    if constexpr (std::is_same_v<T, F32>) {
        const float *p = (const float *)row + e;
        if constexpr (N == 4) {
            if (vector) {
                const float4 v = *(const float4 *)p;
                out[0] = v.x, out[1] = v.y, out[2] = v.z, out[3] = v.w;
                return;
            }
        } else if constexpr (N == 2) {
            if (vector) {
                const float2 v = *(const float2 *)p;
                out[0] = v.x, out[1] = v.y;
                return;
            }
        }
        for (int i = 0; i < N; i++) {
            out[i] = p[i];
        }
    } else {
        // f16 or bf16: N values from one load of 2N bytes.
        const unsigned short *p = (const unsigned short *)row + e;
        unsigned short bits[N];
        bool loaded = false;
        if constexpr (N == 4) {
            if (vector) {
                const uint2 v = *(const uint2 *)p;
                bits[0] = v.x & 0xffff, bits[1] = v.x >> 16, bits[2] = v.y & 0xffff, bits[3] = v.y >> 16;
                loaded = true;
            }
        } else if constexpr (N == 2) {
            if (vector) {
                const unsigned int v = *(const unsigned int *)p;
                bits[0] = v & 0xffff, bits[1] = v >> 16;
                loaded = true;
            }
        }
        for (int i = 0; i < N && !loaded; i++) {
            bits[i] = p[i];
        }
        for (int i = 0; i < N; i++) {
            out[i] = T::load((const char *)bits, i, 2);
        }
    }
}

// Key values e..e+3 of a packed row of d values (zeros past d); `vector`: one aligned load.
template <typename T>
__device__ __forceinline__ void fa_key4(const char *krow, int e, int d, bool vector, float *x) {
    x[0] = x[1] = x[2] = x[3] = 0.0f;
    if (vector) {
        fa_load<T, 4>(krow, e, true, x);
    } else {
        for (int t = 0; t < 4 && e + t < d; t++) {
            fa_load<T, 1>(krow, e + t, false, x + t);
        }
    }
}

// Value elements e0..e0+NE of a packed row of dv values (zeros past dv); `vector`: one aligned
// load.
template <typename T, int NE>
__device__ __forceinline__ void fa_values(const char *vrow, int e0, int dv, bool vector, float *x) {
    if (vector) {
        fa_load<T, NE>(vrow, e0, true, x);
        return;
    }
    for (int j = 0; j < NE; j++) {
        x[j] = 0.0f;
        if (e0 + j < dv) {
            fa_load<T, 1>(vrow, e0 + j, false, x + j);
        }
    }
}

// Whether every row of `t` starts on a multiple of `bytes`.
__device__ __forceinline__ bool fa_rows_aligned(const TensorArg &t, long long bytes) {
    return t.data % bytes == 0 && t.nb[1] % bytes == 0 && t.nb[2] % bytes == 0 && t.nb[3] % bytes == 0;
}

template <typename T, typename M, int NE>
__device__ void flash_attn_rows(const TensorArg &q, const TensorArg &k, const TensorArg &v, const TensorArg &mask,
                                const TensorArg &dst, float scale, int has_mask) {
    constexpr int R = 16;
    __shared__ float4 qs[R][8 * NE];
    __shared__ float scores[R][FA_THREADS];
    __shared__ float row_max[R], row_sum[R], rescale[R];

    const int d = (int)q.ne[0], dv = (int)v.ne[0];
    const long long n = q.ne[1], kv = k.ne[1];
    const long long h = blockIdx.y, i3 = blockIdx.z, first = (long long)blockIdx.x * R;
    const long long kh = h / (q.ne[2] / k.ne[2]), kb = i3 % k.ne[3];
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const long long es = k.nb[0];
    const bool k_vector = d % 4 == 0 && fa_rows_aligned(k, 4 * es);
    // Each lane's value elements: NE from lane * NE (all of them when dv = 32 * NE).
    const int e0 = lane * NE;
    const bool v_vector = dv == 32 * NE && fa_rows_aligned(v, NE * es);

    float *qf = (float *)qs;
    for (int i = tid; i < R * 32 * NE; i += FA_THREADS) {
        const int r = i / (32 * NE), e = i % (32 * NE);
        const long long row = first + r;
        qf[i] = (row < n && e < d) ? F32::load(row_ptr(q, row, h, i3), e, q.nb[0]) : 0.0f;
    }
    if (tid < R) {
        row_max[tid] = -INFINITY;
        row_sum[tid] = 0.0f;
    }
    // The rows this thread's value sums cover.
    constexpr int ROWS = R / FA_WARPS;
    const int row0 = warp * ROWS;
    float acc[ROWS][NE];
    for (int r = 0; r < ROWS; r++) {
        for (int j = 0; j < NE; j++) {
            acc[r][j] = 0.0f;
        }
    }
    __syncthreads();

    for (long long p0 = 0; p0 < kv; p0 += FA_THREADS) {
        // Scores of this thread's position for every query row: the mask first, so that a
        // position no query may see (a causal mask's future) reads no key.
        const long long p = p0 + tid;
        float s[R];
        bool any = false;
        for (int r = 0; r < R; r++) {
            const long long row = first + r;
            s[r] = -INFINITY;
            if (p < kv && row < n) {
                s[r] = 0.0f;
                if (has_mask) {
                    const char *mrow = row_ptr(mask, row % mask.ne[1], h % mask.ne[2], i3 % mask.ne[3]);
                    s[r] = M::load(mrow, p, mask.nb[0]);
                }
                any |= s[r] != -INFINITY;
            }
        }
        if (__syncthreads_or(any) == 0) {
            continue; // every position of this chunk is masked for every row
        }
        if (any) {
            const char *krow = row_ptr(k, p, kh, kb);
            float dot[R];
            for (int r = 0; r < R; r++) {
                dot[r] = 0.0f;
            }
#pragma unroll
            for (int e = 0; e < 32 * NE; e += 4) {
                if (e < d) {
                    float x[4];
                    fa_key4<T>(krow, e, d, k_vector, x);
                    for (int r = 0; r < R; r++) {
                        const float4 y = qs[r][e / 4];
                        dot[r] = fmaf(y.x, x[0], fmaf(y.y, x[1], fmaf(y.z, x[2], fmaf(y.w, x[3], dot[r]))));
                    }
                }
            }
            for (int r = 0; r < R; r++) {
                s[r] = __fadd_rn(__fmul_rn(dot[r], scale), s[r]);
            }
        }
        for (int r = 0; r < R; r++) {
            scores[r][tid] = s[r];
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
        const int end = kv - p0 < FA_THREADS ? (int)(kv - p0) : FA_THREADS;
#pragma unroll 32
        for (int i = 0; i < FA_THREADS; i++) {
            if (i < end) {
                const char *vrow = row_ptr(v, p0 + i, kh, kb);
                float x[NE];
                fa_values<T, NE>(vrow, e0, dv, v_vector, x);
                for (int r = 0; r < ROWS; r++) {
                    const float w = scores[row0 + r][i];
                    for (int j = 0; j < NE; j++) {
                        acc[r][j] = fmaf(w, x[j], acc[r][j]);
                    }
                }
            }
        }
        __syncthreads();
    }

    for (int r = 0; r < ROWS; r++) {
        const long long row = first + row0 + r;
        if (row >= n) {
            break;
        }
        const float l = row_sum[row0 + r];
        char *drow = row_ptr(dst, h, row, i3);
        for (int j = 0; j < NE; j++) {
            if (e0 + j < dv) {
                F32::store(drow, e0 + j, dst.nb[0], l == 0.0f ? 0.0f : acc[r][j] / l);
            }
        }
    }
}

#define FA_DECODE_THREADS 256
#define FA_DECODE_WARPS (FA_DECODE_THREADS / 32)

template <typename T, typename M, int NE>
__device__ void flash_attn_decode(const TensorArg &q, const TensorArg &k, const TensorArg &v, const TensorArg &mask,
                                  const TensorArg &dst, float scale, int has_mask) {
    __shared__ float4 qs[8 * NE];
    __shared__ float warp_max_of[FA_DECODE_WARPS], warp_sum_of[FA_DECODE_WARPS];
    __shared__ float warp_acc[FA_DECODE_WARPS][32 * NE];

    const int d = (int)q.ne[0], dv = (int)v.ne[0];
    const long long kv = k.ne[1];
    const long long i = blockIdx.x, h = blockIdx.y, i3 = blockIdx.z;
    const long long kh = h / (q.ne[2] / k.ne[2]), kb = i3 % k.ne[3];
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const long long es = k.nb[0];
    const bool k_vector = d % 4 == 0 && fa_rows_aligned(k, 4 * es);
    const int e0 = lane * NE;
    const bool v_vector = dv == 32 * NE && fa_rows_aligned(v, NE * es);
    const char *mrow = has_mask ? row_ptr(mask, i % mask.ne[1], h % mask.ne[2], i3 % mask.ne[3]) : nullptr;

    float *qf = (float *)qs;
    for (int e = tid; e < 32 * NE; e += FA_DECODE_THREADS) {
        qf[e] = e < d ? F32::load(row_ptr(q, i, h, i3), e, q.nb[0]) : 0.0f;
    }
    __syncthreads();

    float m = -INFINITY, l = 0.0f, acc[NE];
    for (int j = 0; j < NE; j++) {
        acc[j] = 0.0f;
    }
    for (long long p0 = 32 * warp; p0 < kv; p0 += FA_DECODE_THREADS) {
        // This lane's position: its score.
        const long long p = p0 + lane;
        float s = -INFINITY;
        if (p < kv) {
            const float bias = has_mask ? M::load(mrow, p, mask.nb[0]) : 0.0f;
            if (bias != -INFINITY) {
                const char *krow = row_ptr(k, p, kh, kb);
                float dot = 0.0f;
#pragma unroll
                for (int e = 0; e < 32 * NE; e += 4) {
                    if (e < d) {
                        float x[4];
                        fa_key4<T>(krow, e, d, k_vector, x);
                        const float4 y = qs[e / 4];
                        dot = fmaf(y.x, x[0], fmaf(y.y, x[1], fmaf(y.z, x[2], fmaf(y.w, x[3], dot))));
                    }
                }
                s = __fadd_rn(__fmul_rn(dot, scale), bias);
            }
        }
        const float next = fmaxf(m, warp_max(s));
        if (next == -INFINITY) {
            continue; // nothing seen yet
        }
        const float w = expf(s - next), f = expf(m - next);
        l = l * f + warp_sum(w);
        m = next;
        for (int j = 0; j < NE; j++) {
            acc[j] *= f;
        }
        // The 32 positions' values, each lane its NE elements.
        const int count = kv - p0 < 32 ? (int)(kv - p0) : 32;
#pragma unroll
        for (int t = 0; t < 32; t++) {
            const float wt = __shfl_sync(0xffffffffu, w, t);
            if (t < count && wt != 0.0f) {
                const char *vrow = row_ptr(v, p0 + t, kh, kb);
                float x[NE];
                fa_values<T, NE>(vrow, e0, dv, v_vector, x);
                for (int j = 0; j < NE; j++) {
                    acc[j] = fmaf(wt, x[j], acc[j]);
                }
            }
        }
    }

    // The warps' results, rescaled to the largest maximum.
    if (lane == 0) {
        warp_max_of[warp] = m;
        warp_sum_of[warp] = l;
    }
    for (int j = 0; j < NE; j++) {
        warp_acc[warp][e0 + j] = acc[j];
    }
    __syncthreads();
    float mx = -INFINITY;
    for (int w = 0; w < FA_DECODE_WARPS; w++) {
        mx = fmaxf(mx, warp_max_of[w]);
    }
    float total_sum = 0.0f;
    for (int w = 0; w < FA_DECODE_WARPS; w++) {
        total_sum += warp_max_of[w] == -INFINITY ? 0.0f : warp_sum_of[w] * expf(warp_max_of[w] - mx);
    }
    char *drow = row_ptr(dst, h, i, i3);
    for (int e = tid; e < dv; e += FA_DECODE_THREADS) {
        float total = 0.0f;
        for (int w = 0; w < FA_DECODE_WARPS; w++) {
            total += warp_max_of[w] == -INFINITY ? 0.0f : warp_acc[w][e] * expf(warp_max_of[w] - mx);
        }
        F32::store(drow, e, dst.nb[0], total_sum == 0.0f ? 0.0f : total / total_sum);
    }
}

// flash_attn_<kv type>_r<16 or 1>_d<32 NE>(q, k, v, mask, dst, scale, has_mask, mask_f16): grids
// of (query rows / 16, heads, batches) blocks of 128 threads, or (query rows, heads, batches)
// blocks of 256.
#define FLASH_ATTN_KERNEL(name, T, R, NE)                                                                        \
    extern "C" __global__ void name(const __grid_constant__ TensorArg q, const __grid_constant__ TensorArg k,    \
                                    const __grid_constant__ TensorArg v, const __grid_constant__ TensorArg mask, \
                                    const __grid_constant__ TensorArg dst, float scale, int has_mask,            \
                                    int mask_f16) {                                                              \
        await_prior_kernel();                                                                                    \
        if constexpr (R == 1) {                                                                                  \
            if (mask_f16) {                                                                                      \
                flash_attn_decode<T, F16, NE>(q, k, v, mask, dst, scale, has_mask);                              \
            } else {                                                                                             \
                flash_attn_decode<T, F32, NE>(q, k, v, mask, dst, scale, has_mask);                              \
            }                                                                                                    \
        } else if (mask_f16) {                                                                                   \
            flash_attn_rows<T, F16, NE>(q, k, v, mask, dst, scale, has_mask);                                    \
        } else {                                                                                                 \
            flash_attn_rows<T, F32, NE>(q, k, v, mask, dst, scale, has_mask);                                    \
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
