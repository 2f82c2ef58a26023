// FLASH_ATTN over many query rows on tensor cores (a prompt, or a batch of sequences as an
// encoder sees them): heads of 32, 64 or 128 values (keys and values alike), keys and values in
// f32, f16 or bf16, f32 or f16 queries, an optional f32 or f16 mask.
//
// A block of 4 warps takes 64 query rows of one head and batch, 16 a warp, and walks the keys
// in tiles of KEYS positions. Per tile, the keys and the values go to shared
// memory; each warp computes its 16 x KEYS scores with `mma.sync m16n8k8` (TF32), keeps the
// soft-max online (running maximum and sum in f32, in base 2: the scores are scaled by log2(e)
// with the scale, and weighed with `ex2.approx`) and adds the weighted values with a second
// product. That product takes its weights from the scores' accumulator registers as they are:
// inside each step of 8 keys, thread t's operand columns t and t + 4 are keys 2t and 2t + 1
// (where its accumulator holds them), and the values are read in the same order. The head's
// values are summed in the same permuted order for the scores, so each thread reads pairs of
// adjacent values.
//
// Near f32 accuracy: an f32 operand x is taken as its TF32 part hi (x truncated to a 10-bit
// mantissa) and its remainder lo = x - hi, and a product as lo*hi + hi*lo + hi*hi (lo*lo, at
// most 2^-20 of the product, is left out). f16 and bf16 keys and values are exact in TF32:
// their products are lo*hi + hi*hi, the queries' and weights' remainders times the exact keys
// and values.
//
// With reduced precision (tessera's Precision::Reduced, the `tf32` kernels), every product is one
// TF32 pass, hi*hi: queries, f32 keys and values, and weights keep 10-bit mantissas, as in
// half-precision attention, and the sums stay f32.
//
// Keys that no query row of the block may see (masked for every row, or past the last) are
// zeros in shared memory whatever the tensors hold there (a cache's unwritten rows cannot turn
// a sum into NaN), and a tile no row may see is skipped (a causal mask's future).
#include <type_traits>

#include "flash_attn_rows.cuh"

#define FAM_WARPS 4
#define FAM_THREADS (32 * FAM_WARPS)
#define FAM_ROWS (16 * FAM_WARPS)

// The TF32 part of x: its mantissa truncated to 10 bits (one instruction; rounding is 4 on
// sm_90, and the remainder, of x's sign, stays below 2^-10 of x, so a product keeps about 20
// bits). Infinities and NaN keep their class in the part.
__device__ __forceinline__ unsigned int fam_tf32(float x) { return __float_as_uint(x) & 0xffffe000u; }

// x as its TF32 part and remainder.
__device__ __forceinline__ void fam_split(float x, unsigned int &hi, unsigned int &lo) {
    hi = fam_tf32(x);
    lo = __float_as_uint(x - __uint_as_float(hi));
}

__device__ __forceinline__ void fam_mma(float (&c)[4], const unsigned int (&a)[4], float2 b) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(__float_as_uint(b.x)), "r"(__float_as_uint(b.y)));
}

// Values e..e+3 of a packed row of type T as stored (f32: a float4, 16-bit: a uint2);
// `vector`: one aligned load.
template <typename T> using FamRaw = std::conditional_t<std::is_same_v<T, F32>, float4, uint2>;

template <typename T> __device__ __forceinline__ FamRaw<T> fam_load4(const char *row, int e, bool vector) {
    if constexpr (std::is_same_v<T, F32>) {
        const float *p = (const float *)row + e;
        return vector ? *(const float4 *)p : make_float4(p[0], p[1], p[2], p[3]);
    } else {
        const unsigned short *p = (const unsigned short *)row + e;
        return vector ? *(const uint2 *)p
                      : make_uint2(p[0] | ((unsigned int)p[1] << 16), p[2] | ((unsigned int)p[3] << 16));
    }
}

// Four values as fam_load4 gave them, as f32.
template <typename T> __device__ __forceinline__ float4 fam_widen(FamRaw<T> raw) {
    if constexpr (std::is_same_v<T, F32>) {
        return raw;
    } else {
        const unsigned short h[4] = {(unsigned short)raw.x, (unsigned short)(raw.x >> 16), (unsigned short)raw.y,
                                     (unsigned short)(raw.y >> 16)};
        float f[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            f[i] = std::is_same_v<T, F16> ? f16_bits_to_f32(h[i]) : bf16_bits_to_f32(h[i]);
        }
        return make_float4(f[0], f[1], f[2], f[3]);
    }
}

// Whether every row of `t` starts on a multiple of `bytes`.
__device__ __forceinline__ bool fam_rows_aligned(const TensorArg &t, long long bytes) {
    return t.data % bytes == 0 && t.nb[1] % bytes == 0 && t.nb[2] % bytes == 0 && t.nb[3] % bytes == 0;
}

// A block's tile of keys in shared memory: PARTS = 2 holds f32 keys and values as TF32 parts
// [0] and remainders [1] (split once per block, not once per warp), PARTS = 1 16-bit ones as
// they are (and f32 ones' TF32 parts in reduced precision). Key rows are padded by 8 values, value rows by 4: the pairs of adjacent key values,
// and the values of two keys 1 apart, that a warp reads at once fall in distinct banks.
template <int D, int KEYS, int PARTS> struct FamTile {
    __align__(16) float keys[PARTS][KEYS][D + 8];
    __align__(16) float values[PARTS][KEYS][D + 4];
    float bias[KEYS]; // the mask row of every query of the block, where they share one
    int live[KEYS];   // whether some query row of the block sees the key
};

// A value as the tile keeps it: x (16-bit values are exact in TF32), or with F32 its TF32 part
// and with PARTS = 2 also its remainder.
template <int PARTS, bool F32> __device__ __forceinline__ void fam_put(float (&part)[PARTS], float x) {
    const float hi = F32 ? __uint_as_float(fam_tf32(x)) : x;
    part[0] = hi;
    if constexpr (PARTS == 2) {
        part[1] = x - hi;
    }
}

// The B fragment at `b` of a tile: b[0] and b[NEXT] (NEXT = 1: one 8-byte load).
template <int NEXT> __device__ __forceinline__ float2 fam_pair(const float *b) {
    if constexpr (NEXT == 1) {
        return *(const float2 *)b;
    } else {
        return make_float2(b[0], b[NEXT]);
    }
}

// c += a * b for A given as parts and remainders and B as the tile keeps it at `b` (b[0] and
// b[NEXT], `part_stride` floats between its parts): remainders' terms first, the largest last;
// with REDUCED, the parts' term alone.
template <int PARTS, int NEXT, bool REDUCED>
__device__ __forceinline__ void fam_product(float (&c)[4], const unsigned int (&ah)[4], const unsigned int (&al)[4],
                                            const float *b, int part_stride) {
    const float2 bh = fam_pair<NEXT>(b);
    if constexpr (!REDUCED) {
        fam_mma(c, al, bh);
    }
    if constexpr (PARTS == 2) {
        fam_mma(c, ah, fam_pair<NEXT>(b + part_stride));
    }
    fam_mma(c, ah, bh);
}

// Stores four values (of f32 tensors with F32) at `at` in the tile's PARTS parts (`part_stride`
// floats apart).
template <int PARTS, bool F32> __device__ __forceinline__ void fam_store4(float *at, int part_stride, float4 x) {
    float parts[4][PARTS];
    fam_put<PARTS, F32>(parts[0], x.x), fam_put<PARTS, F32>(parts[1], x.y);
    fam_put<PARTS, F32>(parts[2], x.z), fam_put<PARTS, F32>(parts[3], x.w);
#pragma unroll
    for (int part = 0; part < PARTS; part++) {
        *(float4 *)(at + part * part_stride) = make_float4(parts[0][part], parts[1][part], parts[2][part], parts[3][part]);
    }
}

// Parts of each key and value a tile keeps: f32 ones at full precision take two.
template <typename T, bool REDUCED> __host__ __device__ constexpr int fam_parts() {
    return std::is_same_v<T, F32> && !REDUCED ? 2 : 1;
}

template <typename T, typename M, int D, int KEYS, bool REDUCED>
__device__ void flash_attn_mma(const TensorArg &q, const TensorArg &k, const TensorArg &v, const TensorArg &mask,
                               const TensorArg &dst, float scale, int has_mask,
                               FamTile<D, KEYS, fam_parts<T, REDUCED>()> &tile) {
    constexpr int PARTS = fam_parts<T, REDUCED>();
    constexpr int KEY_PART = KEYS * (D + 8), VALUE_PART = KEYS * (D + 4); // floats between parts
    // Groups of 4 values of the tile's keys (and values) each thread loads.
    constexpr int GROUPS = KEYS * (D / 4) / FAM_THREADS;
    static_assert(GROUPS * FAM_THREADS == KEYS * (D / 4), "a tile is whole groups of the block's threads");
    const float scale2 = scale * FA_LOG2E;
    auto &keys = tile.keys;
    auto &values = tile.values;
    auto &live = tile.live;
    auto &bias = tile.bias;

    // Query rows and key positions fit 31 bits (validated).
    const int n = (int)q.ne[1], kv = (int)k.ne[1], first = blockIdx.x * FAM_ROWS;
    // Heads and batches fit 16 bits (validated).
    const int h = blockIdx.y, i3 = blockIdx.z;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, t = lane % 4;
    const int kh = h / (int)(q.ne[2] / k.ne[2]), kb = i3 % (int)k.ne[3];
    const char *kbase = (const char *)k.data + kh * k.nb[2] + kb * k.nb[3];
    const char *vbase = (const char *)v.data + kh * v.nb[2] + kb * v.nb[3];
    const bool k_vector = fam_rows_aligned(k, 4 * k.nb[0]), v_vector = fam_rows_aligned(v, 4 * v.nb[0]);
    // Rows of the mask that differ for this block's query rows (rows repeat past mask.ne[1]);
    // with one (or no mask) the tile's biases are read once into shared memory.
    const int mask_rows = (int)min((long long)min(FAM_ROWS, n - first), mask.ne[1]);
    const bool one_row = !has_mask || mask_rows == 1;
    const char *mbase = has_mask ? row_ptr(mask, 0, h % (int)mask.ne[2], i3 % (int)mask.ne[3]) : nullptr;

    // This thread's query rows (g and g + 8 of the warp's 16), their mask rows and their
    // queries in A-fragment order: qa[s] = {(g, 2t), (g + 8, 2t), (g, 2t + 1), (g + 8, 2t + 1)}
    // of values 8s .. 8s + 7.
    const int rows[2] = {first + warp * 16 + g, first + warp * 16 + g + 8};
    const bool warp_live = first + warp * 16 < n;
    const char *mrow[2] = {nullptr, nullptr};
    float qa[D / 8][4];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const bool in = rows[i] < n;
        if (in && has_mask) {
            mrow[i] = mbase + fa_mask_row(rows[i], mask.ne[1]) * mask.nb[1];
        }
        // f32 queries, or f16 ones where their values are 2 bytes apart (one test for the loop).
        const char *qrow = in ? row_ptr(q, rows[i], h, i3) : nullptr;
        if (q.nb[0] == 2) {
            const unsigned short *qh = (const unsigned short *)qrow;
#pragma unroll
            for (int s = 0; s < D / 8; s++) {
                qa[s][i] = in ? f16_bits_to_f32(qh[8 * s + 2 * t]) : 0.0f;
                qa[s][i + 2] = in ? f16_bits_to_f32(qh[8 * s + 2 * t + 1]) : 0.0f;
            }
        } else {
            const float *qf = (const float *)qrow;
#pragma unroll
            for (int s = 0; s < D / 8; s++) {
                qa[s][i] = in ? qf[8 * s + 2 * t] : 0.0f;
                qa[s][i + 2] = in ? qf[8 * s + 2 * t + 1] : 0.0f;
            }
        }
    }

    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
    float out[D / 8][4];
#pragma unroll
    for (int s = 0; s < D / 8; s++) {
        out[s][0] = out[s][1] = out[s][2] = out[s][3] = 0.0f;
    }
    if (tid < KEYS) {
        live[tid] = 0;
    }
    __syncthreads();

    for (int p0 = 0; p0 < kv; p0 += KEYS) {
        // Which keys of the tile some query row of the block may see (and, with one mask row,
        // their biases).
        bool any = false;
        if (one_row) {
            if (tid < KEYS) {
                const int p = p0 + tid;
                const float b = p >= kv ? -INFINITY : has_mask ? M::load(mbase, p, mask.nb[0]) : 0.0f;
                bias[tid] = b * FA_LOG2E;
                live[tid] = b != -INFINITY;
                any = b != -INFINITY;
            }
        } else {
            for (int i = tid; i < mask_rows * KEYS; i += FAM_THREADS) {
                const int j = i % KEYS;
                const int p = p0 + j;
                const char *m = mbase + fa_mask_row(first + i / KEYS, mask.ne[1]) * mask.nb[1];
                if (p < kv && M::load(m, p, mask.nb[0]) != -INFINITY) {
                    live[j] = 1;
                    any = true;
                }
            }
        }
        if (__syncthreads_or(any) == 0) {
            continue; // no row sees a key of this tile
        }

        // The tile's keys and values, every load issued first (positions past the last read the
        // last; keys no row sees are zeros). (Loading the next tile's before the products of
        // this one was slower: the registers it holds make the products spill.)
        FamRaw<T> kraw[GROUPS], vraw[GROUPS];
#pragma unroll
        for (int u = 0; u < GROUPS; u++) {
            const int i = tid + u * FAM_THREADS, j = i / (D / 4), e = 4 * (i % (D / 4));
            const long long p = min(p0 + j, kv - 1);
            kraw[u] = fam_load4<T>(kbase + p * k.nb[1], e, k_vector);
            vraw[u] = fam_load4<T>(vbase + p * v.nb[1], e, v_vector);
        }
#pragma unroll
        for (int u = 0; u < GROUPS; u++) {
            const int i = tid + u * FAM_THREADS, j = i / (D / 4), e = 4 * (i % (D / 4));
            const bool seen = live[j];
            const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            constexpr bool F32_KV = std::is_same_v<T, F32>;
            fam_store4<PARTS, F32_KV>(&keys[0][j][e], KEY_PART, seen ? fam_widen<T>(kraw[u]) : zero);
            fam_store4<PARTS, F32_KV>(&values[0][j][e], VALUE_PART, seen ? fam_widen<T>(vraw[u]) : zero);
        }
        __syncthreads();
        if (tid < KEYS) {
            live[tid] = 0; // read again only after the next tile's first barrier
        }

        if (warp_live) {
            // Scores: sc[c] = {(g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1)} of keys 8c ..
            // 8c + 7.
            float sc[KEYS / 8][4];
#pragma unroll
            for (int c = 0; c < KEYS / 8; c++) {
                sc[c][0] = sc[c][1] = sc[c][2] = sc[c][3] = 0.0f;
            }
#pragma unroll
            for (int s = 0; s < D / 8; s++) {
                unsigned int ah[4], al[4];
#pragma unroll
                for (int x = 0; x < 4; x++) {
                    fam_split(qa[s][x], ah[x], al[x]);
                }
#pragma unroll
                for (int c = 0; c < KEYS / 8; c++) {
                    fam_product<PARTS, 1, REDUCED>(sc[c], ah, al, &keys[0][8 * c + g][8 * s + 2 * t], KEY_PART);
                }
            }

            fa_online_softmax<M, KEYS, D, 2>(sc, out, row_max, row_sum, one_row, false, &bias[0], mrow, mask.nb[0], p0, kv,
                                          scale2);

            // Weighted values: the weights of keys 8c .. 8c + 7 are the A fragment of step c
            // (columns t and t + 4 are keys 2t and 2t + 1); out[s] as the scores' layout over
            // values 8s .. 8s + 7.
#pragma unroll
            for (int c = 0; c < KEYS / 8; c++) {
                const float w[4] = {sc[c][0], sc[c][2], sc[c][1], sc[c][3]};
                unsigned int ah[4], al[4];
#pragma unroll
                for (int x = 0; x < 4; x++) {
                    fam_split(w[x], ah[x], al[x]);
                }
#pragma unroll
                for (int s = 0; s < D / 8; s++) {
                    fam_product<PARTS, D + 4, REDUCED>(out[s], ah, al, &values[0][8 * c + 2 * t][8 * s + g],
                                                       VALUE_PART);
                }
            }
        }
        __syncthreads();
    }

    const float scales[2] = {fa_row_scale(row_sum, 0), fa_row_scale(row_sum, 1)};
    fa_store_rows<D>(out, scales, rows, n, dst, h, i3);
}

// flash_attn_mma_<kv type>_d<head> and, in reduced precision, flash_attn_mma_tf32_<kv type>_d<head>
// (q, k, v, mask, dst, scale, has_mask, mask_f16): grid of (query rows / 64, heads, batches)
// blocks of 128 threads.
#define FLASH_ATTN_MMA_KERNEL(name, T, D, KEYS, BLOCKS, REDUCED)                                                 \
    extern "C" __global__ void __launch_bounds__(FAM_THREADS, BLOCKS)                                           \
        name(const __grid_constant__ TensorArg q, const __grid_constant__ TensorArg k,                          \
             const __grid_constant__ TensorArg v, const __grid_constant__ TensorArg mask,                       \
             const __grid_constant__ TensorArg dst, float scale, int has_mask, int mask_f16) {                  \
        __shared__ FamTile<D, KEYS, fam_parts<T, REDUCED>()> tile;                                               \
        await_prior_kernel();                                                                                    \
        if (mask_f16) {                                                                                          \
            flash_attn_mma<T, F16, D, KEYS, REDUCED>(q, k, v, mask, dst, scale, has_mask, tile);                 \
        } else {                                                                                                 \
            flash_attn_mma<T, F32, D, KEYS, REDUCED>(q, k, v, mask, dst, scale, has_mask, tile);                 \
        }                                                                                                        \
    }

// Key tiles as long as 48 KiB of shared memory allows (f32 tiles hold two parts). Heads of 32
// are capped at 128 registers for 4 blocks an SM: a few bytes spill, and on an H200 MiniLM's
// f32 attention took 0.72 instead of 0.82 ms a layer at 168 registers and 3 blocks.
FLASH_ATTN_MMA_KERNEL(flash_attn_mma_f32_d32, F32, 32, 64, 4, false)
FLASH_ATTN_MMA_KERNEL(flash_attn_mma_f32_d64, F32, 64, 32, 2, false)
FLASH_ATTN_MMA_KERNEL(flash_attn_mma_f32_d128, F32, 128, 16, 2, false)
FLASH_ATTN_MMA_KERNEL(flash_attn_mma_f16_d32, F16, 32, 64, 4, false)
FLASH_ATTN_MMA_KERNEL(flash_attn_mma_f16_d64, F16, 64, 64, 2, false)
FLASH_ATTN_MMA_KERNEL(flash_attn_mma_f16_d128, F16, 128, 32, 2, false)
FLASH_ATTN_MMA_KERNEL(flash_attn_mma_bf16_d32, BF16, 32, 64, 4, false)
FLASH_ATTN_MMA_KERNEL(flash_attn_mma_bf16_d64, BF16, 64, 64, 2, false)
FLASH_ATTN_MMA_KERNEL(flash_attn_mma_bf16_d128, BF16, 128, 32, 2, false)

// Reduced precision: one part of every key and value, so f32 tiles are as long as 16-bit ones.
FLASH_ATTN_MMA_KERNEL(flash_attn_mma_tf32_f32_d32, F32, 32, 64, 4, true)
FLASH_ATTN_MMA_KERNEL(flash_attn_mma_tf32_f32_d64, F32, 64, 64, 2, true)
FLASH_ATTN_MMA_KERNEL(flash_attn_mma_tf32_f32_d128, F32, 128, 32, 2, true)
FLASH_ATTN_MMA_KERNEL(flash_attn_mma_tf32_f16_d32, F16, 32, 64, 4, true)
FLASH_ATTN_MMA_KERNEL(flash_attn_mma_tf32_f16_d64, F16, 64, 64, 2, true)
FLASH_ATTN_MMA_KERNEL(flash_attn_mma_tf32_f16_d128, F16, 128, 32, 2, true)
FLASH_ATTN_MMA_KERNEL(flash_attn_mma_tf32_bf16_d32, BF16, 32, 64, 4, true)
FLASH_ATTN_MMA_KERNEL(flash_attn_mma_tf32_bf16_d64, BF16, 64, 64, 2, true)
FLASH_ATTN_MMA_KERNEL(flash_attn_mma_tf32_bf16_d128, BF16, 128, 32, 2, true)
