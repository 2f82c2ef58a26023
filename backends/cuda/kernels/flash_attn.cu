// FLASH_ATTN: for each query row, softmax(scale * q . k_p + mask_p) over the key positions p,
// applied to the values, without a score matrix in global memory (tessera-core's
// `Graph::flash_attn` gives the shapes; queries of f32 or f16 values). The soft-max is kept
// online (running maximum and sum, earlier sums rescaled), with f32 sums and IEEE `expf`, for
// heads of up to 32 * NE values (NE = 1, 2 or 4: 32, 64 or 128).
//
// Prompts (`_r16`): a block of 128 threads (4 warps) takes 16 query rows of one head and batch
// and walks the keys in chunks of 128 positions, one per thread: each thread reads its key once
// (4 values per load where rows are aligned) and dots it with the 16 queries held in shared
// memory; then each warp owns 4 rows and each lane NE consecutive value elements. A position
// every query of the block has masked (a causal mask's future) reads no key.
//
// One query row (`_r1`, a decoded token): the keys are split into chunks of 32 positions, one
// block per chunk and head, each writing a partial result (maximum, sum, unnormalized value
// sums); `flash_attn_combine_*` then merges each head's chunks (see `flash_attn_split`).
#include <type_traits>

#include "common.cuh"

#define FA_THREADS 128
#define FA_WARPS (FA_THREADS / 32)

// Value `e` of a packed row, as f32.
template <typename T> __device__ __forceinline__ float fa_load1(const char *row, int e) {
    if constexpr (std::is_same_v<T, F32>) {
        return ((const float *)row)[e];
    } else if constexpr (std::is_same_v<T, F16>) {
        return f16_bits_to_f32(((const unsigned short *)row)[e]);
    } else {
        return bf16_bits_to_f32(((const unsigned short *)row)[e]);
    }
}

// The 16-bit value in the low bits of `b`, as f32.
template <typename T> __device__ __forceinline__ float fa_half(unsigned int b) {
    if constexpr (std::is_same_v<T, F16>) {
        return f16_bits_to_f32((unsigned short)(b & 0xffffu));
    } else {
        return bf16_bits_to_f32((unsigned short)(b & 0xffffu));
    }
}

// N (1, 2 or 4) consecutive values of a packed row from value `e`, as f32; `vector`: one load
// (the caller checked that the address is aligned to N values). Every index is a constant, so
// `out` stays in registers.
template <typename T, int N> __device__ __forceinline__ void fa_load(const char *row, int e, bool vector, float *out) {
    if (vector && N > 1) {
        if constexpr (std::is_same_v<T, F32>) {
            const float *p = (const float *)row + e;
            if constexpr (N == 4) {
                const float4 v = *(const float4 *)p;
                out[0] = v.x, out[1] = v.y, out[2] = v.z, out[3] = v.w;
                return;
            } else if constexpr (N == 2) {
                const float2 v = *(const float2 *)p;
                out[0] = v.x, out[1] = v.y;
                return;
            }
        } else {
            const unsigned short *p = (const unsigned short *)row + e;
            if constexpr (N == 4) {
                const uint2 v = *(const uint2 *)p;
                out[0] = fa_half<T>(v.x), out[1] = fa_half<T>(v.x >> 16);
                out[2] = fa_half<T>(v.y), out[3] = fa_half<T>(v.y >> 16);
                return;
            } else if constexpr (N == 2) {
                const unsigned int v = *(const unsigned int *)p;
                out[0] = fa_half<T>(v), out[1] = fa_half<T>(v >> 16);
                return;
            }
        }
    }
#pragma unroll
    for (int i = 0; i < N; i++) {
        out[i] = fa_load1<T>(row, e + i);
    }
}

// Key values e..e+3 of a packed row of d values (zeros past d); `vector`: one aligned load.
template <typename T>
__device__ __forceinline__ void fa_key4(const char *krow, int e, int d, bool vector, float *x) {
    if (vector) {
        fa_load<T, 4>(krow, e, true, x);
        return;
    }
#pragma unroll
    for (int t = 0; t < 4; t++) {
        x[t] = e + t < d ? fa_load1<T>(krow, e + t) : 0.0f;
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
#pragma unroll
    for (int j = 0; j < NE; j++) {
        x[j] = e0 + j < dv ? fa_load1<T>(vrow, e0 + j) : 0.0f;
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
    const bool q_half = q.nb[0] == 2;
    for (int i = tid; i < R * 32 * NE; i += FA_THREADS) {
        const int r = i / (32 * NE), e = i % (32 * NE);
        const long long row = first + r;
        const char *qrow = row_ptr(q, row, h, i3);
        qf[i] = row >= n || e >= d ? 0.0f : q_half ? F16::load(qrow, e, 2) : F32::load(qrow, e, 4);
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
            // Every lane has read the row's statistics before lane 0 rewrites them.
            __syncwarp();
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

// One query row, split over the keys: block (chunk c, head h, batch i3) of 4 warps takes
// positions 32c..32c + 32, 8 per warp. Four lanes share a position: each dots a quarter of the
// head with the query (loads in flight together, four independent sums) and two shuffles add
// the quarters. Per warp the maximum, the weights and their sum follow, then the 8 rows of
// values (each lane NE elements, the 8 loads issued together). The 4 warps are merged and
// written as a partial result: maximum, sum and 32 NE unnormalized sums. A second kernel merges
// the chunks of each head. A decoded token's attention is thus short chains of work on many
// blocks: one block per head with a long serial walk over the keys leaves the GPU waiting on
// latency.
#define FA_SPLIT_THREADS 128
#define FA_SPLIT_WARPS (FA_SPLIT_THREADS / 32)
#define FA_SPLIT_POSITIONS 32
#define FA_WARP_POSITIONS (FA_SPLIT_POSITIONS / FA_SPLIT_WARPS)

// The mask row of head h and batch i3 for one query row.
__device__ __forceinline__ const char *mrow_of(const TensorArg &mask, long long h, long long i3) {
    return row_ptr(mask, 0, h % mask.ne[2], i3 % mask.ne[3]);
}

// Floats per partial result: maximum, sum, then 32 * NE sums.
template <int NE> __device__ __forceinline__ long long fa_partial_floats() { return 2 + 32 * NE; }

template <typename T, typename M, int NE>
__device__ void flash_attn_split(const TensorArg &q, const TensorArg &k, const TensorArg &v, const TensorArg &mask,
                                 float *partials, float scale, int has_mask) {
    constexpr int QUARTER = 8 * NE; // query and key values per lane
    __shared__ float warp_max_of[FA_SPLIT_WARPS], warp_sum_of[FA_SPLIT_WARPS];
    __shared__ float warp_acc[FA_SPLIT_WARPS][32 * NE];

    const int d = (int)q.ne[0], dv = (int)v.ne[0];
    const long long kv = k.ne[1], chunks = gridDim.x;
    const long long c = blockIdx.x, h = blockIdx.y, i3 = blockIdx.z;
    const long long kh = h / (q.ne[2] / k.ne[2]), kb = i3 % k.ne[3];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const long long es = k.nb[0];
    // Queries of f32 or f16 (`q_half`) values, keys and queries in aligned groups of 4 where
    // every row holds 32 NE values.
    const bool q_half = q.nb[0] == 2;
    const bool k_whole = d == 32 * NE && fa_rows_aligned(k, 4 * es);
    const bool q_whole = d == 32 * NE && fa_rows_aligned(q, 4 * q.nb[0]);
    const int e0 = lane * NE;
    const bool v_vector = dv == 32 * NE && fa_rows_aligned(v, NE * es);

    float *out = partials + ((i3 * gridDim.y + h) * chunks + c) * fa_partial_floats<NE>();
    if (kv == 0) {
        // No keys: an empty partial result (the merged row is zeros).
        for (int e = threadIdx.x; e < 2 + 32 * NE; e += FA_SPLIT_THREADS) {
            out[e] = e == 0 ? -INFINITY : 0.0f;
        }
        return;
    }

    // Every load first, none waiting on another: this lane's quarter of the query and of its
    // position's key (4 lanes share a position), the position's mask value, and the values of
    // the warp's positions (positions past the keys read the last row and weigh 0; a weight
    // of 0 ignores what the row holds, so stale cache rows cannot turn the sum into NaN).
    const long long p0 = c * FA_SPLIT_POSITIONS + FA_WARP_POSITIONS * warp, p = p0 + lane / 4;
    const long long prow = p < kv ? p : kv - 1;
    const int first = (lane % 4) * QUARTER;
    const char *qrow = row_ptr(q, 0, h, i3), *krow = row_ptr(k, prow, kh, kb);
    float qx[QUARTER], kx[QUARTER];
#pragma unroll
    for (int e = 0; e < QUARTER; e += 4) {
        if (q_half) {
            fa_key4<F16>(qrow, first + e, d, q_whole, qx + e);
        } else {
            fa_key4<F32>(qrow, first + e, d, q_whole, qx + e);
        }
        fa_key4<T>(krow, first + e, d, k_whole, kx + e);
    }
    const float bias = has_mask ? M::load(mrow_of(mask, h, i3), prow, mask.nb[0]) : 0.0f;
    float x[FA_WARP_POSITIONS][NE];
#pragma unroll
    for (int t = 0; t < FA_WARP_POSITIONS; t++) {
        const long long row = p0 + t < kv ? p0 + t : kv - 1;
        fa_values<T, NE>(row_ptr(v, row, kh, kb), e0, dv, v_vector, x[t]);
    }

    // The score: four independent sums per lane, then the 4 lanes' quarters added.
    float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int e = 0; e < QUARTER; e++) {
        part[(e / 4) % 4] = fmaf(qx[e], kx[e], part[(e / 4) % 4]);
    }
    float dot = (part[0] + part[1]) + (part[2] + part[3]);
    dot += __shfl_xor_sync(0xffffffffu, dot, 1);
    dot += __shfl_xor_sync(0xffffffffu, dot, 2);
    const bool live = p < kv && bias != -INFINITY;
    const float s = live ? __fadd_rn(__fmul_rn(dot, scale), bias) : -INFINITY;

    const float m = warp_max(s);
    float l = 0.0f, acc[NE];
    for (int j = 0; j < NE; j++) {
        acc[j] = 0.0f;
    }
    if (m != -INFINITY) {
        const float w = expf(s - m);
        l = warp_sum(lane % 4 == 0 ? w : 0.0f);
#pragma unroll
        for (int t = 0; t < FA_WARP_POSITIONS; t++) {
            const float wt = __shfl_sync(0xffffffffu, w, 4 * t);
            for (int j = 0; j < NE; j++) {
                acc[j] = fmaf(wt, wt != 0.0f ? x[t][j] : 0.0f, acc[j]);
            }
        }
    }

    // The warps merged, rescaled to the block's maximum.
    if (lane == 0) {
        warp_max_of[warp] = m;
        warp_sum_of[warp] = l;
    }
    for (int j = 0; j < NE; j++) {
        warp_acc[warp][e0 + j] = acc[j];
    }
    __syncthreads();
    float mx = -INFINITY;
    for (int w = 0; w < FA_SPLIT_WARPS; w++) {
        mx = fmaxf(mx, warp_max_of[w]);
    }
    if (threadIdx.x == 0) {
        float total = 0.0f;
        for (int w = 0; w < FA_SPLIT_WARPS; w++) {
            total += warp_max_of[w] == -INFINITY ? 0.0f : warp_sum_of[w] * expf(warp_max_of[w] - mx);
        }
        out[0] = mx;
        out[1] = total;
    }
    for (int e = threadIdx.x; e < 32 * NE; e += FA_SPLIT_THREADS) {
        float total = 0.0f;
        for (int w = 0; w < FA_SPLIT_WARPS; w++) {
            total += warp_max_of[w] == -INFINITY ? 0.0f : warp_acc[w][e] * expf(warp_max_of[w] - mx);
        }
        out[2 + e] = total;
    }
}

// Prefetches into L2 the key and value rows of a one-row block's chunk of positions (head h,
// batch i3), then waits for the previous kernel. The cache rows of earlier positions are
// already written; the row the previous kernel writes lands in L2 after the prefetch, so the
// reads after the wait still see it.
__device__ __forceinline__ void fa_split_prefetch_then_wait(const TensorArg &q, const TensorArg &k,
                                                            const TensorArg &v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const long long kv = k.ne[1];
    const int t = threadIdx.x % FA_SPLIT_POSITIONS;
    const long long p = (long long)blockIdx.x * FA_SPLIT_POSITIONS + t;
    if (kv > 0 && p < kv && threadIdx.x < 2 * FA_SPLIT_POSITIONS) {
        const long long h = blockIdx.y, i3 = blockIdx.z;
        const TensorArg &x = threadIdx.x < FA_SPLIT_POSITIONS ? k : v;
        const char *row = row_ptr(x, p, h / (q.ne[2] / k.ne[2]), i3 % k.ne[3]);
        for (long long at = 0; at < x.ne[0] * x.nb[0]; at += 128) {
            asm volatile("prefetch.global.L2 [%0];" ::"l"(row + at));
        }
    }
#endif
    await_prior_kernel();
}

// flash_attn_combine_d<32 NE>(partials, dst, chunks): block (head h, batch i3) of 32 NE threads
// merges the head's `chunks` partial results into its row of `dst` (a row no position reached
// is zeros).
template <int NE> __device__ void flash_attn_combine(const float *partials, const TensorArg &dst, int chunks) {
    const long long h = blockIdx.x, i3 = blockIdx.y;
    const float *part = partials + (i3 * gridDim.x + h) * chunks * fa_partial_floats<NE>();
    float mx = -INFINITY;
    for (int c = 0; c < chunks; c++) {
        mx = fmaxf(mx, part[c * fa_partial_floats<NE>()]);
    }
    float sum = 0.0f, total = 0.0f;
    const int e = threadIdx.x;
    for (int c = 0; c < chunks; c++) {
        const float *pc = part + c * fa_partial_floats<NE>();
        if (pc[0] != -INFINITY) {
            const float f = expf(pc[0] - mx);
            sum += pc[1] * f;
            total += pc[2 + e] * f;
        }
    }
    if (e < dst.ne[0]) {
        F32::store(row_ptr(dst, h, 0, i3), e, dst.nb[0], sum == 0.0f ? 0.0f : total / sum);
    }
}

#define FLASH_ATTN_COMBINE_KERNEL(name, NE)                                                                    \
    extern "C" __global__ void name(const float *partials, const __grid_constant__ TensorArg dst, int chunks) { \
        await_prior_kernel();                                                                                  \
        flash_attn_combine<NE>(partials, dst, chunks);                                                         \
    }

FLASH_ATTN_COMBINE_KERNEL(flash_attn_combine_d32, 1)
FLASH_ATTN_COMBINE_KERNEL(flash_attn_combine_d64, 2)
FLASH_ATTN_COMBINE_KERNEL(flash_attn_combine_d128, 4)

// flash_attn_<kv type>_r<16 or 1>_d<32 NE>(q, k, v, mask, dst, scale, has_mask, mask_f16,
// partials): grids of (query rows / 16, heads, batches) blocks of 128 threads writing `dst`, or
// for one query row (key chunks of 32, heads, batches) blocks of 128 threads writing
// `partials` (`dst` unused) for flash_attn_combine_*.
#define FLASH_ATTN_KERNEL(name, T, R, NE)                                                                        \
    extern "C" __global__ void name(const __grid_constant__ TensorArg q, const __grid_constant__ TensorArg k,    \
                                    const __grid_constant__ TensorArg v, const __grid_constant__ TensorArg mask, \
                                    const __grid_constant__ TensorArg dst, float scale, int has_mask,            \
                                    int mask_f16, float *partials) {                                             \
        if constexpr (R == 1) {                                                                                  \
            fa_split_prefetch_then_wait(q, k, v);                                                                \
            if (mask_f16) {                                                                                      \
                flash_attn_split<T, F16, NE>(q, k, v, mask, partials, scale, has_mask);                          \
            } else {                                                                                             \
                flash_attn_split<T, F32, NE>(q, k, v, mask, partials, scale, has_mask);                          \
            }                                                                                                    \
        } else {                                                                                                 \
            await_prior_kernel();                                                                                \
            if (mask_f16) {                                                                                      \
                flash_attn_rows<T, F16, NE>(q, k, v, mask, dst, scale, has_mask);                                \
            } else {                                                                                             \
                flash_attn_rows<T, F32, NE>(q, k, v, mask, dst, scale, has_mask);                                \
            }                                                                                                    \
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
