// Matrix-vector products: MUL_MAT with at most 8 columns of b, where the weights are read once
// for all columns and the product runs at memory bandwidth.
//
// dst[i, j, i2, i3] = sum_k a[k, i, i2 / r2, i3 / r3] * b[k, j, i2, i3], with a: [K, M, a2, a3]
// (packed rows), b: [K, N, b2, b3] F32, dst: [M, N, b2, b3] F32, N = NCOLS <= 8.
//
// - Float weights (f32, f16, bf16) multiply b's f32 values directly: 16-byte loads of both, f32
//   products and sums. The launcher takes this path only when every row of a and every column
//   of b starts on a 16-byte boundary and is packed.
// - Quantized weights (q8_0, q4_0, q4_1, q5_0, q5_1) multiply b quantized once per launch into Q8_1 blocks
//   (mul_mat_vec.cuh; quantized here, for the K-quants of mul_mat_vec_kquant.cu too) with
//   4-way int8 dot products (dp4a): the integer sums are exact, so the result differs from the
//   f32 product only by b's quantization.
//
// Grid: x over groups of ROWS weight rows, y strided over the b2 * b3 matrices. Block:
// MMV_WARPS warps computing the same ROWS rows for all NCOLS columns, the warps and their lanes
// splitting K; sums are reduced with shuffles, then across the warps in shared memory.
#include "legacy_quant.cuh"
#include "mul_mat_vec.cuh"

// b quantized into Q8_1 blocks: those of column j of matrix mat at
// out[(mat * ncols + j) * nblocks + block]. Grid as quantize_b_blocks (mul_mat_vec.cuh).
extern "C" __global__ void quantize_q8_1(const __grid_constant__ TensorArg b, Q8_1 *out) {
    const long long nblocks = b.ne[0] / QK;
    quantize_b_blocks(b, [&](long long mat, long long j, long long block, int lane, const Q8_1Lane &v) {
        Q8_1 *dst = out + (mat * b.ne[1] + j) * nblocks + block;
        ((signed char *)dst->qs)[lane] = (signed char)v.q;
        if (lane == 0) {
            dst->d = v.d;
            dst->s = v.s;
        }
    });
}

// ---------------------------------------------------------------------------------------------
// Float weights.

// 16 bytes of a weight row, loaded as they are and widened to f32 four values at a time where
// they are used: holding the 16 bytes of each row in flight takes 4 registers a row, where
// widened f16 values took 8 (the one-column kernels then kept 64 registers, 8 blocks an SM).
template <typename W> struct Vec16;

template <> struct Vec16<F32> {
    static constexpr int n = 4;
    // Values 4 q .. 4 q + 3 of the 16 bytes `v`.
    __device__ __forceinline__ static void part(const uint4 &v, int, float *w) {
        w[0] = __uint_as_float(v.x);
        w[1] = __uint_as_float(v.y);
        w[2] = __uint_as_float(v.z);
        w[3] = __uint_as_float(v.w);
    }
};

template <> struct Vec16<F16> {
    static constexpr int n = 8;
    __device__ __forceinline__ static void part(const uint4 &v, int q, float *w) {
        const unsigned int lo = q == 0 ? v.x : v.z, hi = q == 0 ? v.y : v.w;
        const float2 a = __half22float2(*(const __half2 *)&lo), b = __half22float2(*(const __half2 *)&hi);
        w[0] = a.x;
        w[1] = a.y;
        w[2] = b.x;
        w[3] = b.y;
    }
};

template <> struct Vec16<BF16> {
    static constexpr int n = 8;
    __device__ __forceinline__ static void part(const uint4 &v, int q, float *w) {
        const unsigned int lo = q == 0 ? v.x : v.z, hi = q == 0 ? v.y : v.w;
        w[0] = __uint_as_float(lo << 16);
        w[1] = __uint_as_float(lo & 0xffff0000u);
        w[2] = __uint_as_float(hi << 16);
        w[3] = __uint_as_float(hi & 0xffff0000u);
    }
};

template <typename W, int NCOLS, int GROUPS, typename Out>
__device__ void mul_mat_vec_float(const TensorArg &a, const TensorArg &a2, const TensorArg &b, const Out &out,
                                  long long row0, long long r2, long long r3) {
    constexpr int ROWS = MmvRows<NCOLS>::value, R = GROUPS * ROWS, V = Vec16<W>::n;
    // 16-byte loads in flight per lane: R rows, twice over where R is small.
    constexpr int UNROLL = R >= 8 ? 1 : 2;
    __shared__ float shared[MMV_WARPS * R * NCOLS];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const long long m = a.ne[1];
    const long long k = a.ne[0], nvec = k / V;
    const long long nmat = out.nmat();
    await_prior_kernel();
    for (long long mat = blockIdx.y; mat < nmat; mat += gridDim.y) {
        long long i3, i2;
        divmod64(mat, out.ne2(), i3, i2);
        const char *arow[R];
        mmv_rows<ROWS, GROUPS>(arow, a, a2, row0, i2, i3, r2, r3);
        const char *bcol = row_ptr(b, 0, i2, i3);
        float acc[R][NCOLS];
#pragma unroll
        for (int r = 0; r < R; r++) {
#pragma unroll
            for (int c = 0; c < NCOLS; c++) {
                acc[r][c] = 0.0f;
            }
        }
#pragma unroll(UNROLL)
        for (long long v = warp * 32 + lane; v < nvec; v += 32 * MMV_WARPS) {
            uint4 raw[R];
#pragma unroll
            for (int r = 0; r < R; r++) {
                raw[r] = __ldg((const uint4 *)(arow[r] + v * 16));
            }
#pragma unroll
            for (int t4 = 0; t4 < V / 4; t4++) {
                float4 x[NCOLS];
#pragma unroll
                for (int c = 0; c < NCOLS; c++) {
                    x[c] = __ldg((const float4 *)(bcol + c * b.nb[1] + v * V * 4) + t4);
                }
#pragma unroll
                for (int r = 0; r < R; r++) {
                    float w[4];
                    Vec16<W>::part(raw[r], t4, w);
#pragma unroll
                    for (int c = 0; c < NCOLS; c++) {
                        acc[r][c] = fmaf(w[0], x[c].x, acc[r][c]);
                        acc[r][c] = fmaf(w[1], x[c].y, acc[r][c]);
                        acc[r][c] = fmaf(w[2], x[c].z, acc[r][c]);
                        acc[r][c] = fmaf(w[3], x[c].w, acc[r][c]);
                    }
                }
            }
        }
        // The last k % V values.
        for (long long i = nvec * V + warp * 32 + lane; i < k; i += 32 * MMV_WARPS) {
#pragma unroll
            for (int r = 0; r < R; r++) {
                const float w = W::load(arow[r], i, a.nb[0]);
#pragma unroll
                for (int c = 0; c < NCOLS; c++) {
                    acc[r][c] = fmaf(w, *(const float *)(bcol + c * b.nb[1] + i * 4), acc[r][c]);
                }
            }
        }
        out.template store<ROWS, NCOLS, GROUPS>(acc, shared, row0, m, i2, i3);
    }
}

// The one-column case of mul_mat_vec_float (plain, SwiGLU pairs and projections), written to
// fit 64 registers without spilling: a 32-bit index over the 16-byte vectors of a row (the
// launcher keeps their count under 2^30), the last values one per thread, no L2 prefetch. On
// an H200 a 4096 x 14336 f16 product took 29.3 us in this form, against 34.3 us through
// mul_mat_vec_float with the prefetch of the quantized kernels (which spilled 8 bytes; small
// changes made it spill 136 and take 40.6 us) and 32.3 us without it. Float weights gained
// nothing from the prefetch at any column count.
template <typename W, int GROUPS, typename Out>
__device__ void mul_mat_vec_float_one(const TensorArg &a, const TensorArg &a2, const TensorArg &b, const Out &out,
                                      long long row0, long long r2, long long r3) {
    constexpr int ROWS = MmvRows<1>::value, R = GROUPS * ROWS, V = Vec16<W>::n;
    __shared__ float shared[MMV_WARPS * R];
    const int nvec = (int)(a.ne[0] / V);
    const long long nmat = out.nmat();
    await_prior_kernel();
    for (long long mat = blockIdx.y; mat < nmat; mat += gridDim.y) {
        long long i3, i2;
        divmod64(mat, out.ne2(), i3, i2);
        const char *arow[R];
        mmv_rows<ROWS, GROUPS>(arow, a, a2, row0, i2, i3, r2, r3);
        const char *bcol = row_ptr(b, 0, i2, i3);
        float acc[R][1];
#pragma unroll
        for (int r = 0; r < R; r++) {
            acc[r][0] = 0.0f;
        }
        // 16-byte loads in flight per lane: R rows, twice over where R is small.
#pragma unroll(R >= 8 || V == 4 ? 1 : 2)
        for (int v = threadIdx.x; v < nvec; v += 32 * MMV_WARPS) {
            uint4 raw[R];
#pragma unroll
            for (int r = 0; r < R; r++) {
                raw[r] = __ldg((const uint4 *)arow[r] + v);
            }
#pragma unroll
            for (int t4 = 0; t4 < V / 4; t4++) {
                const float4 x = __ldg((const float4 *)bcol + (V / 4) * v + t4);
#pragma unroll
                for (int r = 0; r < R; r++) {
                    float w[4];
                    Vec16<W>::part(raw[r], t4, w);
                    acc[r][0] = fmaf(w[0], x.x, acc[r][0]);
                    acc[r][0] = fmaf(w[1], x.y, acc[r][0]);
                    acc[r][0] = fmaf(w[2], x.z, acc[r][0]);
                    acc[r][0] = fmaf(w[3], x.w, acc[r][0]);
                }
            }
        }
        // The last k % V values, fewer than the block's threads: one each. (A loop here, as
        // mul_mat_vec_float has, made the main loop spill.)
        if (threadIdx.x < a.ne[0] - (long long)nvec * V) {
            const long long i = (long long)nvec * V + threadIdx.x;
            const float x = ((const float *)bcol)[i];
#pragma unroll
            for (int r = 0; r < R; r++) {
                acc[r][0] = fmaf(W::load(arow[r], i, a.nb[0]), x, acc[r][0]);
            }
        }
        out.template store<ROWS, 1, GROUPS>(acc, shared, row0, a.ne[1], i2, i3);
    }
}

// ---------------------------------------------------------------------------------------------
// Quantized weights: each lane takes 2 of a weight block's 32-bit words of quants at a time.

// q8_0: 8 words of quants per block; value = q * d.
struct MmvQ8_0 {
    static constexpr int block_bytes = Q8_0_BYTES;
    static constexpr int words = 8;
    struct Part {
        float d;
        int v[2];
    };
    // Words w and w + 1 of `block`, with its scale.
    __device__ __forceinline__ static Part load(const char *block, int w) {
        return {f16_bits_to_f32(*(const unsigned short *)block), {load_i32_a2(block + 2 + 4 * w),
                                                                    load_i32_a2(block + 6 + 4 * w)}};
    }
    // The part of the block's dot product with `y` that the words cover.
    __device__ __forceinline__ static float dot(const Part &p, int w, const Q8_1 &y) {
        const int sum = __dp4a(p.v[1], y.qs[w + 1], __dp4a(p.v[0], y.qs[w], 0));
        return p.d * y.d * (float)sum;
    }
};

// q4_0: 4 words of nibbles per block; byte j holds value j (low) and value j + 16 (high);
// value = (nibble - 8) * d. Two lanes share a block, each subtracting half of the offset's
// 8 * sum(y) (the two halves add up to the whole).
struct MmvQ4_0 {
    static constexpr int block_bytes = Q4_0_BYTES;
    static constexpr int words = 4;
    using Part = MmvQ8_0::Part;
    __device__ __forceinline__ static Part load(const char *block, int w) {
        return {f16_bits_to_f32(*(const unsigned short *)block), {load_i32_a2(block + 2 + 4 * w),
                                                                    load_i32_a2(block + 6 + 4 * w)}};
    }
    __device__ __forceinline__ static float dot(const Part &p, int w, const Q8_1 &y) {
        int sum = 0;
#pragma unroll
        for (int t = 0; t < 2; t++) {
            sum = __dp4a(p.v[t] & 0x0f0f0f0f, y.qs[w + t], sum);
            sum = __dp4a((p.v[t] >> 4) & 0x0f0f0f0f, y.qs[w + t + 4], sum);
        }
        return p.d * (y.d * (float)sum - 4.0f * y.s);
    }
};

// Four fifth bits (bits 0..3 of `bits`) as bit 4 of each byte of a word: the multiplication
// moves bit i to bit 7i, the products' bit ranges never overlap, so nothing carries.
__device__ __forceinline__ int fifth_bits(unsigned int bits) {
    return (int)(((bits * 0x00204081u) & 0x01010101u) << 4);
}

// q4_1: as q4_0 with value = q * d + m; sum(value * y) = d * sum(q y) + m * sum(y), where b's
// block sum s is sum(y). Two lanes share a block, each adding half of m * s.
struct MmvQ4_1 {
    static constexpr int block_bytes = Q4_1_BYTES;
    static constexpr int words = 4;
    struct Part {
        float d, m;
        int v[2];
    };
    __device__ __forceinline__ static Part load(const char *block, int w) {
        return {lq_half_at(block, 0), lq_half_at(block, 2),
                {load_i32_a2(block + 4 + 4 * w), load_i32_a2(block + 8 + 4 * w)}};
    }
    __device__ __forceinline__ static float dot(const Part &p, int w, const Q8_1 &y) {
        int sum = 0;
#pragma unroll
        for (int t = 0; t < 2; t++) {
            sum = __dp4a(p.v[t] & 0x0f0f0f0f, y.qs[w + t], sum);
            sum = __dp4a((p.v[t] >> 4) & 0x0f0f0f0f, y.qs[w + t + 4], sum);
        }
        return p.d * y.d * (float)sum + 0.5f * p.m * y.s;
    }
};

// q5_0 and q5_1: the nibbles of words w, w + 1 (values 4w .. 4w + 7 and 16 more) with their
// fifth bits from the block's u32 (bit i for value i) as 5-bit quants; value = (q - 16) * d
// (q5_0, each of two lanes subtracting half of 16 d s) or q * d + m (q5_1).
template <bool MIN> struct MmvQ5 {
    static constexpr int block_bytes = MIN ? Q5_1_BYTES : Q5_0_BYTES;
    static constexpr int words = 4;
    static constexpr int qh_at = MIN ? 4 : 2;
    struct Part {
        float d, m;
        int lo[2], hi[2];
    };
    __device__ __forceinline__ static Part load(const char *block, int w) {
        const unsigned int qh = lq_u32_at(block, qh_at);
        Part p;
        p.d = lq_half_at(block, 0);
        p.m = MIN ? lq_half_at(block, 2) : 0.0f;
#pragma unroll
        for (int t = 0; t < 2; t++) {
            const int i = w + t;
            const int v = load_i32_a2(block + qh_at + 4 + 4 * i);
            p.lo[t] = (v & 0x0f0f0f0f) | fifth_bits((qh >> (4 * i)) & 0xf);
            p.hi[t] = ((v >> 4) & 0x0f0f0f0f) | fifth_bits((qh >> (16 + 4 * i)) & 0xf);
        }
        return p;
    }
    __device__ __forceinline__ static float dot(const Part &p, int w, const Q8_1 &y) {
        int sum = 0;
#pragma unroll
        for (int t = 0; t < 2; t++) {
            sum = __dp4a(p.lo[t], y.qs[w + t], sum);
            sum = __dp4a(p.hi[t], y.qs[w + t + 4], sum);
        }
        return MIN ? p.d * y.d * (float)sum + 0.5f * p.m * y.s : p.d * (y.d * (float)sum - 8.0f * y.s);
    }
};

template <typename Q, int NCOLS, int GROUPS, typename Out>
__device__ void mul_mat_vec_quant(const TensorArg &a, const TensorArg &a2, const Q8_1 *bq, const Out &out,
                                  long long row0, long long r2, long long r3) {
    constexpr int ROWS = MmvRows<NCOLS>::value, R = GROUPS * ROWS;
    constexpr int LANES_PER_BLOCK = Q::words / 2, BLOCKS_PER_WARP = 32 / LANES_PER_BLOCK;
    __shared__ float shared[MMV_WARPS * R * NCOLS];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const long long m = a.ne[1];
    const long long nblocks = a.ne[0] / QK;
    const long long nmat = out.nmat();
    const int w = 2 * (lane % LANES_PER_BLOCK);
    mmv_prefetch_then_wait<ROWS, GROUPS>(a, a2, nmat, out.ne2(), row0, r2, r3, nblocks * Q::block_bytes);
    for (long long mat = blockIdx.y; mat < nmat; mat += gridDim.y) {
        long long i3, i2;
        divmod64(mat, out.ne2(), i3, i2);
        const char *arow[R];
        mmv_rows<ROWS, GROUPS>(arow, a, a2, row0, i2, i3, r2, r3);
        const Q8_1 *y = bq + mat * NCOLS * nblocks;
        float acc[R][NCOLS];
#pragma unroll
        for (int r = 0; r < R; r++) {
#pragma unroll
            for (int c = 0; c < NCOLS; c++) {
                acc[r][c] = 0.0f;
            }
        }
#pragma unroll 2
        for (long long ib = warp * BLOCKS_PER_WARP + lane / LANES_PER_BLOCK; ib < nblocks;
             ib += BLOCKS_PER_WARP * MMV_WARPS) {
            typename Q::Part part[R];
#pragma unroll
            for (int r = 0; r < R; r++) {
                part[r] = Q::load(arow[r] + ib * Q::block_bytes, w);
            }
#pragma unroll
            for (int c = 0; c < NCOLS; c++) {
                const Q8_1 &yb = y[c * nblocks + ib];
#pragma unroll
                for (int r = 0; r < R; r++) {
                    acc[r][c] += Q::dot(part[r], w, yb);
                }
            }
        }
        out.template store<ROWS, NCOLS, GROUPS>(acc, shared, row0, m, i2, i3);
    }
}

// ---------------------------------------------------------------------------------------------
// q8_0 weights by one column, the rows read as runs of 16-byte pieces. Rows of a multiple of 8
// blocks (272 bytes, 17 pieces) starting on 16-byte boundaries are such runs (the launcher
// takes them from 512 pieces, Q8_0_MIN_PIECES in mul_mat.rs); b is quantized
// into the same byte layout (quantize_q8_0_rows: each block's 32 quants where the weights' lie,
// zeros where their scale lies, the blocks' scales apart), so that each 32-bit word of weights
// meets its word of b in one dp4a, the scale bytes adding nothing. A block is 34 bytes and
// starts on an even byte, so each word's quants belong to one block, that of its second byte,
// and a piece covers at most two blocks; the second one starts in the piece, so its scale is
// in the piece's registers, the first one's a 2-byte load that the warp's piece loads have
// brought into L1. mul_mat_vec_quant reads a q8_0 block by 2-byte loads (the block is only
// 2-byte aligned) and waits on memory latency: on an H200 a 4096 x 14336 product took 22.3 us
// that way, 20.4 us here with both scales loaded and 20.0 with the second from the registers.
// Not kept: two pieces in flight per row (unrolled twice: spills at 64 registers, 22.4 us),
// the pieces copied into shared memory by cp.async, three stages (25.1 us), and 8 rows a block
// sharing b's loads (80 registers, 22.8 us against 20.6 in the same run).

// b quantized for mul_mat_vec_q8_0_rows: column j of matrix mat as 34-byte blocks from
// out + (mat * ncols + j) * nblocks * 34, each 2 zero bytes and then the block's quants (Q8_1's
// quantization), and the blocks' scales d as f32 after all columns' blocks, in the same order.
// Grid as quantize_b_blocks (mul_mat_vec.cuh).
extern "C" __global__ void quantize_q8_0_rows(const __grid_constant__ TensorArg b, char *out) {
    const long long nblocks = b.ne[0] / QK;
    float *scales = (float *)(out + b.ne[1] * b.ne[2] * b.ne[3] * nblocks * Q8_0_BYTES);
    quantize_b_blocks(b, [&](long long mat, long long j, long long block, int lane, const Q8_1Lane &v) {
        const long long at = (mat * b.ne[1] + j) * nblocks + block;
        char *dst = out + at * Q8_0_BYTES;
        dst[2 + lane] = (char)(signed char)v.q;
        if (lane == 0) {
            *(unsigned short *)dst = 0;
            scales[at] = v.d;
        }
    });
}

// With GROUPS = 2, the same rows of `a` and `a2` (mmv_rows).
template <int GROUPS, typename Out>
__device__ void mul_mat_vec_q8_0_rows(const TensorArg &a, const TensorArg &a2, const char *bq, const Out &out,
                                      long long row0, long long r2, long long r3) {
    constexpr int ROWS = MmvRows<1>::value, R = GROUPS * ROWS;
    __shared__ float shared[MMV_WARPS * R];
    const long long nblocks = a.ne[0] / QK;
    // The launcher keeps a row under 2^31 bytes.
    const int npieces = (int)(nblocks * Q8_0_BYTES / 16);
    const long long nmat = out.nmat();
    const float *scales = (const float *)(bq + nmat * npieces * 16ll);
    // No L2 prefetch of the rows before the wait (mmv_prefetch_then_wait): these rows are at
    // least 8 KB long (Q8_0_MIN_PIECES in mul_mat.rs), and on an H200 a 4096 x 14336 product
    // took 19.1 us without it against 20.6 us with it, in the same run.
    await_prior_kernel();
    for (long long mat = blockIdx.y; mat < nmat; mat += gridDim.y) {
        long long i3, i2;
        divmod64(mat, out.ne2(), i3, i2);
        const char *arow[R];
        mmv_rows<ROWS, GROUPS>(arow, a, a2, row0, i2, i3, r2, r3);
        const uint4 *y = (const uint4 *)(bq + mat * npieces * 16ll);
        const float *yd = scales + mat * nblocks;
        float acc[R][1];
#pragma unroll
        for (int r = 0; r < R; r++) {
            acc[r][0] = 0.0f;
        }
#pragma unroll 1
        for (int p = threadIdx.x; p < npieces; p += 32 * MMV_WARPS) {
            uint4 w[R];
#pragma unroll
            for (int r = 0; r < R; r++) {
                w[r] = __ldg((const uint4 *)arow[r] + p);
            }
            const uint4 yq = __ldg(y + p);
            const int first = 16 * p;
            const int blk0 = (first + 1) / Q8_0_BYTES, blk1 = (first + 13) / Q8_0_BYTES;
            // Where in the piece blk1 starts (16: the piece is all blk0's). Word j is blk1's
            // where its second byte, 4 j + 1, is at or past that: words from (start1 + 2) / 4.
            const int start1 = blk1 != blk0 ? Q8_0_BYTES * blk1 - first : 16;
            const float d0 = __ldg(yd + blk0), d1 = __ldg(yd + blk1);
#pragma unroll
            for (int r = 0; r < R; r++) {
                const int c1 = __dp4a((int)w[r].x, (int)yq.x, 0);
                const int c2 = __dp4a((int)w[r].y, (int)yq.y, c1);
                const int c3 = __dp4a((int)w[r].z, (int)yq.z, c2);
                const int c4 = __dp4a((int)w[r].w, (int)yq.w, c3);
                const int s0 = start1 < 6 ? c1 : start1 < 10 ? c2 : start1 < 14 ? c3 : c4;
                // blk1's scale lies in the piece, at byte start1.
                const unsigned int hw = start1 < 4 ? w[r].x : start1 < 8 ? w[r].y : start1 < 12 ? w[r].z : w[r].w;
                const float a1 = start1 < 16 ? f16_bits_to_f32((unsigned short)(start1 & 2 ? hw >> 16 : hw)) : 0.0f;
                const float a0 = f16_bits_to_f32(__ldg((const unsigned short *)(arow[r] + Q8_0_BYTES * blk0)));
                acc[r][0] = fmaf(a0 * d0, (float)s0, acc[r][0]);
                acc[r][0] = fmaf(a1 * d1, (float)(c4 - s0), acc[r][0]);
            }
        }
        out.template store<ROWS, 1, GROUPS>(acc, shared, row0, a.ne[1], i2, i3);
    }
}

// ---------------------------------------------------------------------------------------------
// Entry points: one per weight type and column count (the column count is a template argument
// so that the sums stay in registers).

// Blocks per SM that one column's kernels keep resident: 8 (64 registers a thread), so that the
// 1024 blocks of a 4096-row product are one wave on an H100's 132 SMs. At 78 registers (f16) or
// 66 (q4_0) 6 or 7 fitted: a 4096 x 14336 product took 53.6 and 16.9 us, then 45.4 and 14.5
// (H100).
template <int NCOLS> struct MmvMinBlocks {
    static constexpr int value = NCOLS == 1 ? 8 : 1;
};

#define MUL_MAT_VEC_FLOAT_KERNEL(name, W, NCOLS)                                                                 \
    extern "C" __global__ void __launch_bounds__(MMV_WARPS * 32, MmvMinBlocks<NCOLS>::value)                     \
        name(const __grid_constant__ TensorArg a, const __grid_constant__ TensorArg b, const __grid_constant__ TensorArg dst, \
             const __grid_constant__ TensorArg add, long long r2, long long r3) {                                \
        if (NCOLS == 1) {                                                                                        \
            mul_mat_vec_float_one<W, 1>(a, a, b, MmvDst{dst, add}, mmv_row0<NCOLS>(), r2, r3);                   \
        } else {                                                                                                 \
            mul_mat_vec_float<W, NCOLS, 1>(a, a, b, MmvDst{dst, add}, mmv_row0<NCOLS>(), r2, r3);                \
        }                                                                                                        \
    }

// One column of b by q8_0 weights in runs of 16-byte pieces (mul_mat_vec_q8_0_rows).
extern "C" __global__ void __launch_bounds__(MMV_WARPS * 32, MmvMinBlocks<1>::value) mul_mat_vec_q8_0_rows_1(
    const __grid_constant__ TensorArg a, const char *bq, const __grid_constant__ TensorArg dst,
    const __grid_constant__ TensorArg add, long long r2, long long r3) {
    mul_mat_vec_q8_0_rows<1>(a, a, bq, MmvDst{dst, add}, mmv_row0<1>(), r2, r3);
}

// silu(a b) * (a2 b) for one column b (a SwiGLU's gate and up projections) by q8_0 weights
// in runs of 16-byte pieces.
extern "C" __global__ void __launch_bounds__(MMV_WARPS * 32) mul_mat_vec_glu_q8_0_rows(
    const __grid_constant__ TensorArg a, const __grid_constant__ TensorArg a2, const char *bq,
    const __grid_constant__ TensorArg dst, long long r2, long long r3) {
    const TensorArg none = {};
    mul_mat_vec_q8_0_rows<2>(a, a2, bq, MmvDst{dst, none}, mmv_row0<1>(), r2, r3);
}

// Up to three products of one column b by q8_0 weights in runs of 16-byte pieces, each stored
// through its own epilogue (MmvProjections).
extern "C" __global__ void __launch_bounds__(MMV_WARPS * 32) mul_mat_vec_proj_q8_0_rows(
    const __grid_constant__ MmvProjections p, const char *bq) {
    const MmvProjection &o = mmv_projection_of(p);
    const long long row0 = ((long long)blockIdx.x - o.first) * MmvRows<1>::value;
    mul_mat_vec_q8_0_rows<1>(o.a, o.a, bq, MmvProjectionStore{p, o}, row0, 1, 1);
}

// silu(a b) * (a2 b) for one column b: a SwiGLU feed-forward's gate and up projections.
// 8 blocks an SM as for one product (64 registers, one 16-byte load of each of the 8 rows in
// flight per lane), 5 for f32 weights (96 registers), which spilled at 8 and 6.
#define MUL_MAT_VEC_FLOAT_GLU_KERNEL(name, W)                                                                    \
    extern "C" __global__ void __launch_bounds__(MMV_WARPS * 32, Vec16<W>::n == 4 ? 5 : 8)                       \
        name(const __grid_constant__ TensorArg a, const __grid_constant__ TensorArg a2, const __grid_constant__ TensorArg b, \
             const __grid_constant__ TensorArg dst, long long r2, long long r3) {                                \
        const TensorArg none = {};                                                                               \
        mul_mat_vec_float_one<W, 2>(a, a2, b, MmvDst{dst, none}, mmv_row0<1>(), r2, r3);                         \
    }

#define MUL_MAT_VEC_QUANT_KERNEL(name, Q, NCOLS)                                                                 \
    extern "C" __global__ void __launch_bounds__(MMV_WARPS * 32, MmvMinBlocks<NCOLS>::value)                     \
        name(const __grid_constant__ TensorArg a, const Q8_1 *bq, const __grid_constant__ TensorArg dst,         \
             const __grid_constant__ TensorArg add, long long r2, long long r3) {                                \
        mul_mat_vec_quant<Q, NCOLS, 1>(a, a, bq, MmvDst{dst, add}, mmv_row0<NCOLS>(), r2, r3);                   \
    }

// silu(a b) * (a2 b) for one column b: a SwiGLU feed-forward's gate and up projections.
#define MUL_MAT_VEC_QUANT_GLU_KERNEL(name, Q)                                                                    \
    extern "C" __global__ void __launch_bounds__(MMV_WARPS * 32)                                                 \
        name(const __grid_constant__ TensorArg a, const __grid_constant__ TensorArg a2, const Q8_1 *bq,          \
             const __grid_constant__ TensorArg dst, long long r2, long long r3) {                                \
        const TensorArg none = {};                                                                               \
        mul_mat_vec_quant<Q, 1, 2>(a, a2, bq, MmvDst{dst, none}, mmv_row0<1>(), r2, r3);                         \
    }

// Up to three products of one column b, each stored through its own epilogue (MmvProjections):
// an attention block's query, key and value projections with their ROPE and SET_ROWS.
#define MUL_MAT_VEC_FLOAT_PROJ_KERNEL(name, W)                                                                   \
    extern "C" __global__ void __launch_bounds__(MMV_WARPS * 32)                                                 \
        name(const __grid_constant__ MmvProjections p, const __grid_constant__ TensorArg b) {                    \
        const MmvProjection &o = mmv_projection_of(p);                                                           \
        const long long row0 = ((long long)blockIdx.x - o.first) * MmvRows<1>::value;                            \
        mul_mat_vec_float_one<W, 1>(o.a, o.a, b, MmvProjectionStore{p, o}, row0, 1, 1);                          \
    }

#define MUL_MAT_VEC_QUANT_PROJ_KERNEL(name, Q)                                                                   \
    extern "C" __global__ void __launch_bounds__(MMV_WARPS * 32)                                                 \
        name(const __grid_constant__ MmvProjections p, const Q8_1 *bq) {                                         \
        const MmvProjection &o = mmv_projection_of(p);                                                           \
        const long long row0 = ((long long)blockIdx.x - o.first) * MmvRows<1>::value;                            \
        mul_mat_vec_quant<Q, 1, 1>(o.a, o.a, bq, MmvProjectionStore{p, o}, row0, 1, 1);                          \
    }

MUL_MAT_VEC_FLOAT_KERNEL(mul_mat_vec_f32_1, F32, 1)
MUL_MAT_VEC_FLOAT_KERNEL(mul_mat_vec_f32_2, F32, 2)
MUL_MAT_VEC_FLOAT_KERNEL(mul_mat_vec_f32_3, F32, 3)
MUL_MAT_VEC_FLOAT_KERNEL(mul_mat_vec_f32_4, F32, 4)
MUL_MAT_VEC_FLOAT_KERNEL(mul_mat_vec_f32_5, F32, 5)
MUL_MAT_VEC_FLOAT_KERNEL(mul_mat_vec_f32_6, F32, 6)
MUL_MAT_VEC_FLOAT_KERNEL(mul_mat_vec_f32_7, F32, 7)
MUL_MAT_VEC_FLOAT_KERNEL(mul_mat_vec_f32_8, F32, 8)
MUL_MAT_VEC_FLOAT_KERNEL(mul_mat_vec_f16_1, F16, 1)
MUL_MAT_VEC_FLOAT_KERNEL(mul_mat_vec_f16_2, F16, 2)
MUL_MAT_VEC_FLOAT_KERNEL(mul_mat_vec_f16_3, F16, 3)
MUL_MAT_VEC_FLOAT_KERNEL(mul_mat_vec_f16_4, F16, 4)
MUL_MAT_VEC_FLOAT_KERNEL(mul_mat_vec_f16_5, F16, 5)
MUL_MAT_VEC_FLOAT_KERNEL(mul_mat_vec_f16_6, F16, 6)
MUL_MAT_VEC_FLOAT_KERNEL(mul_mat_vec_f16_7, F16, 7)
MUL_MAT_VEC_FLOAT_KERNEL(mul_mat_vec_f16_8, F16, 8)
MUL_MAT_VEC_FLOAT_KERNEL(mul_mat_vec_bf16_1, BF16, 1)
MUL_MAT_VEC_FLOAT_KERNEL(mul_mat_vec_bf16_2, BF16, 2)
MUL_MAT_VEC_FLOAT_KERNEL(mul_mat_vec_bf16_3, BF16, 3)
MUL_MAT_VEC_FLOAT_KERNEL(mul_mat_vec_bf16_4, BF16, 4)
MUL_MAT_VEC_FLOAT_KERNEL(mul_mat_vec_bf16_5, BF16, 5)
MUL_MAT_VEC_FLOAT_KERNEL(mul_mat_vec_bf16_6, BF16, 6)
MUL_MAT_VEC_FLOAT_KERNEL(mul_mat_vec_bf16_7, BF16, 7)
MUL_MAT_VEC_FLOAT_KERNEL(mul_mat_vec_bf16_8, BF16, 8)
MUL_MAT_VEC_QUANT_KERNEL(mul_mat_vec_q8_0_1, MmvQ8_0, 1)
MUL_MAT_VEC_QUANT_KERNEL(mul_mat_vec_q8_0_2, MmvQ8_0, 2)
MUL_MAT_VEC_QUANT_KERNEL(mul_mat_vec_q8_0_3, MmvQ8_0, 3)
MUL_MAT_VEC_QUANT_KERNEL(mul_mat_vec_q8_0_4, MmvQ8_0, 4)
MUL_MAT_VEC_QUANT_KERNEL(mul_mat_vec_q8_0_5, MmvQ8_0, 5)
MUL_MAT_VEC_QUANT_KERNEL(mul_mat_vec_q8_0_6, MmvQ8_0, 6)
MUL_MAT_VEC_QUANT_KERNEL(mul_mat_vec_q8_0_7, MmvQ8_0, 7)
MUL_MAT_VEC_QUANT_KERNEL(mul_mat_vec_q8_0_8, MmvQ8_0, 8)
MUL_MAT_VEC_QUANT_KERNEL(mul_mat_vec_q4_0_1, MmvQ4_0, 1)
MUL_MAT_VEC_QUANT_KERNEL(mul_mat_vec_q4_0_2, MmvQ4_0, 2)
MUL_MAT_VEC_QUANT_KERNEL(mul_mat_vec_q4_0_3, MmvQ4_0, 3)
MUL_MAT_VEC_QUANT_KERNEL(mul_mat_vec_q4_0_4, MmvQ4_0, 4)
MUL_MAT_VEC_QUANT_KERNEL(mul_mat_vec_q4_0_5, MmvQ4_0, 5)
MUL_MAT_VEC_QUANT_KERNEL(mul_mat_vec_q4_0_6, MmvQ4_0, 6)
MUL_MAT_VEC_QUANT_KERNEL(mul_mat_vec_q4_0_7, MmvQ4_0, 7)
MUL_MAT_VEC_QUANT_KERNEL(mul_mat_vec_q4_0_8, MmvQ4_0, 8)
MUL_MAT_VEC_QUANT_KERNEL(mul_mat_vec_q4_1_1, MmvQ4_1, 1)
MUL_MAT_VEC_QUANT_KERNEL(mul_mat_vec_q4_1_2, MmvQ4_1, 2)
MUL_MAT_VEC_QUANT_KERNEL(mul_mat_vec_q4_1_3, MmvQ4_1, 3)
MUL_MAT_VEC_QUANT_KERNEL(mul_mat_vec_q4_1_4, MmvQ4_1, 4)
MUL_MAT_VEC_QUANT_KERNEL(mul_mat_vec_q4_1_5, MmvQ4_1, 5)
MUL_MAT_VEC_QUANT_KERNEL(mul_mat_vec_q4_1_6, MmvQ4_1, 6)
MUL_MAT_VEC_QUANT_KERNEL(mul_mat_vec_q4_1_7, MmvQ4_1, 7)
MUL_MAT_VEC_QUANT_KERNEL(mul_mat_vec_q4_1_8, MmvQ4_1, 8)
MUL_MAT_VEC_QUANT_KERNEL(mul_mat_vec_q5_0_1, MmvQ5<false>, 1)
MUL_MAT_VEC_QUANT_KERNEL(mul_mat_vec_q5_0_2, MmvQ5<false>, 2)
MUL_MAT_VEC_QUANT_KERNEL(mul_mat_vec_q5_0_3, MmvQ5<false>, 3)
MUL_MAT_VEC_QUANT_KERNEL(mul_mat_vec_q5_0_4, MmvQ5<false>, 4)
MUL_MAT_VEC_QUANT_KERNEL(mul_mat_vec_q5_0_5, MmvQ5<false>, 5)
MUL_MAT_VEC_QUANT_KERNEL(mul_mat_vec_q5_0_6, MmvQ5<false>, 6)
MUL_MAT_VEC_QUANT_KERNEL(mul_mat_vec_q5_0_7, MmvQ5<false>, 7)
MUL_MAT_VEC_QUANT_KERNEL(mul_mat_vec_q5_0_8, MmvQ5<false>, 8)
MUL_MAT_VEC_QUANT_KERNEL(mul_mat_vec_q5_1_1, MmvQ5<true>, 1)
MUL_MAT_VEC_QUANT_KERNEL(mul_mat_vec_q5_1_2, MmvQ5<true>, 2)
MUL_MAT_VEC_QUANT_KERNEL(mul_mat_vec_q5_1_3, MmvQ5<true>, 3)
MUL_MAT_VEC_QUANT_KERNEL(mul_mat_vec_q5_1_4, MmvQ5<true>, 4)
MUL_MAT_VEC_QUANT_KERNEL(mul_mat_vec_q5_1_5, MmvQ5<true>, 5)
MUL_MAT_VEC_QUANT_KERNEL(mul_mat_vec_q5_1_6, MmvQ5<true>, 6)
MUL_MAT_VEC_QUANT_KERNEL(mul_mat_vec_q5_1_7, MmvQ5<true>, 7)
MUL_MAT_VEC_QUANT_KERNEL(mul_mat_vec_q5_1_8, MmvQ5<true>, 8)
MUL_MAT_VEC_FLOAT_GLU_KERNEL(mul_mat_vec_glu_f32, F32)
MUL_MAT_VEC_FLOAT_GLU_KERNEL(mul_mat_vec_glu_f16, F16)
MUL_MAT_VEC_FLOAT_GLU_KERNEL(mul_mat_vec_glu_bf16, BF16)
MUL_MAT_VEC_QUANT_GLU_KERNEL(mul_mat_vec_glu_q8_0, MmvQ8_0)
MUL_MAT_VEC_QUANT_GLU_KERNEL(mul_mat_vec_glu_q4_0, MmvQ4_0)
MUL_MAT_VEC_QUANT_GLU_KERNEL(mul_mat_vec_glu_q4_1, MmvQ4_1)
MUL_MAT_VEC_QUANT_GLU_KERNEL(mul_mat_vec_glu_q5_0, MmvQ5<false>)
MUL_MAT_VEC_QUANT_GLU_KERNEL(mul_mat_vec_glu_q5_1, MmvQ5<true>)
MUL_MAT_VEC_FLOAT_PROJ_KERNEL(mul_mat_vec_proj_f32, F32)
MUL_MAT_VEC_FLOAT_PROJ_KERNEL(mul_mat_vec_proj_f16, F16)
MUL_MAT_VEC_FLOAT_PROJ_KERNEL(mul_mat_vec_proj_bf16, BF16)
MUL_MAT_VEC_QUANT_PROJ_KERNEL(mul_mat_vec_proj_q8_0, MmvQ8_0)
MUL_MAT_VEC_QUANT_PROJ_KERNEL(mul_mat_vec_proj_q4_0, MmvQ4_0)
MUL_MAT_VEC_QUANT_PROJ_KERNEL(mul_mat_vec_proj_q4_1, MmvQ4_1)
MUL_MAT_VEC_QUANT_PROJ_KERNEL(mul_mat_vec_proj_q5_0, MmvQ5<false>)
MUL_MAT_VEC_QUANT_PROJ_KERNEL(mul_mat_vec_proj_q5_1, MmvQ5<true>)
