// Matrix-vector products of K-quant weights (q2_K, q3_K, q4_K, q5_K, q6_K; kquant.cuh,
// kquant_low.cuh): MUL_MAT with at
// most 8 columns of b, as the q8_0/q4_0 kernels of mul_mat_vec.cu run them: b quantized once
// per launch into Q8_1 blocks of 32 (quantize_q8_1), 4-way int8 dot products (dp4a) per
// sub-block, each sub-block's integer sum scaled by its weight and b scales, the mins (q4_K,
// q5_K) subtracted through b's block sums. The integer sums are exact, so the result differs
// from the f32 product only by b's quantization.
//
// Eight lanes take a super-block (4 per warp at a step), each lane 32 of its values: 16 bytes
// of nibbles of one 32-byte chunk for q4_K and q5_K (two sub-blocks: the low and the high
// nibbles), 8 values of each of the 4 groups of one half for q2_K, q3_K and q6_K. A lane
// decodes its scales once per row and uses them for every column.
//
// q4_K and q5_K read their nibbles 16 bytes at a time: the launcher takes this path for them
// only when every row of a starts on a 16-byte boundary (their blocks are 144 and 176 bytes).
// q2_K, q3_K and q6_K blocks (84, 110 and 210 bytes) are read 2 bytes at a time.
//
// Grid and block as in mul_mat_vec.cu: x over groups of ROWS weight rows, y strided over the
// b2 * b3 matrices; MMV_WARPS warps splitting K.
#include "kquant_low.cuh"
#include "mul_mat_vec.cuh"

#define KQ_LANES 8

// Blocks of a kernel resident on one multiprocessor (registers are capped at 65536 / (128 *
// this)), and steps of the K loop unrolled (more loads in flight, more registers), as measured
// on an H100 at 4096 x 14336: one column of 4096 rows is 1024 blocks, which its 132
// multiprocessors hold at once only at 8 a piece, as q4_K (2 steps, 64 registers) and q6_K
// (1 step) fit; q5_K's two 16-byte loads a row need more registers and ran fastest with 2 steps
// at 3 blocks (capped to 8 blocks it spilled and ran slower). Up to 4 columns 4 blocks; more
// columns (8 rows a block) 2. q2_K and q3_K decode more per value: at one column they keep 6
// blocks (80 registers, 2 steps; capped to 8 blocks they spilled), measured 5 and 9% faster
// than 8 blocks of 1 step; at 2 to 4 columns they unroll once (2 steps spilled).
// The SwiGLU kernels (GROUPS = 2) hold two rows' parts per row and the projection kernels keep
// their store's state: each takes its own bound, the most blocks at which ptxas spills nothing
// (q4_K's SwiGLU spilled 180 bytes a thread at the one-column bound).
template <typename Q, int NCOLS, int GROUPS = 1> struct KqLaunch {
    static constexpr int min_blocks =
        GROUPS == 2 ? Q::glu_min_blocks : NCOLS == 1 ? Q::one_col_min_blocks : NCOLS <= 4 ? 4 : 2;
    static constexpr int unroll = GROUPS == 2   ? Q::glu_unroll
                                  : NCOLS == 1 ? Q::one_col_unroll
                                  : MmvRows<NCOLS>::value < 8 ? Q::few_cols_unroll
                                                              : 1;
};

// Two 32-bit words of b's quants from a Q8_1 block, word w (even) and w + 1.
__device__ __forceinline__ int2 q8_1_words(const Q8_1 &y, int w) {
    return *(const int2 *)(y.qs + w);
}

// b's words for q2_K, q3_K and q6_K lane t: half h = t / 4, positions 8 (t % 4) .. + 7 of each
// of its 4 groups of 32 (Q8_1 blocks 4h + g), with each group's scale and `off` = the dot
// product of its words with `ones` (a constant per byte: 32 * sum(y) for q6_K's offset).
struct YGroups {
    int q[4][2];
    int off[4];
    float d[4];
};

__device__ __forceinline__ YGroups load_y_groups(const Q8_1 *ys, int t, int ones) {
    const int h = t / 4, w = 2 * (t % 4);
    YGroups y;
#pragma unroll
    for (int g = 0; g < 4; g++) {
        const Q8_1 &b = ys[4 * h + g];
        const int2 v = q8_1_words(b, w);
        y.q[g][0] = v.x;
        y.q[g][1] = v.y;
        y.off[g] = __dp4a(ones, v.y, __dp4a(ones, v.x, 0));
        y.d[g] = b.d;
    }
    return y;
}

// The scales (sub-block 2c in the low byte, 2c + 1 in the high byte) and the mins of
// sub-blocks 2c and 2c + 1 of a q4_K or q5_K block: kq_scale_min for two sub-blocks at once.
__device__ __forceinline__ void kq_scale_min_pair(const char *block, int c, int &sc, int &m) {
    const unsigned short *q = (const unsigned short *)(block + 4);
    const int a = q[c + 2], e = q[c], b = q[c >= 2 ? c - 2 : c];
    sc = c < 2 ? (e & 0x3f3f) : ((a & 0x0f0f) | ((b & 0xc0c0) >> 2));
    m = c < 2 ? (a & 0x3f3f) : (((a >> 4) & 0x0f0f) | ((e & 0xc0c0) >> 2));
}

// q4_K and q5_K: lane t takes chunk c = t / 2 (sub-blocks 2c, 2c + 1) and its bytes
// 16 (t % 2) .. + 15, that is values 16 (t % 2) .. + 15 of each of the two sub-blocks. Two lanes
// share a sub-block, each subtracting half of its min's dmin * min * sum(y).
template <bool FIVE_BITS> struct MmvKq45 {
    static constexpr int block_bytes = FIVE_BITS ? Q5_K_BYTES : Q4_K_BYTES;
    static constexpr int one_col_min_blocks = FIVE_BITS ? 3 : 8;
    static constexpr int one_col_unroll = 2;
    static constexpr int few_cols_unroll = 2;
    static constexpr int glu_min_blocks = FIVE_BITS ? 3 : 5;
    static constexpr int glu_unroll = FIVE_BITS ? 2 : 1;
    static constexpr int proj_min_blocks = FIVE_BITS ? 3 : 6;
    static constexpr int qs_offset = FIVE_BITS ? 48 : 16;
    struct Part {
        int lo[4], hi[4];     // the quants of sub-blocks 2c and 2c + 1, one byte each
        float d[2], m[2];     // d * scale, and half of dmin * min
    };
    // Words 4 (t % 2) .. + 3 of b's blocks 2c and 2c + 1 of the super-block, their scales and sums.
    struct Y {
        int lo[4], hi[4];
        float d[2], s[2];
    };

    __device__ __forceinline__ static Part load(const char *block, int t) {
        const int c = t / 2, e = t % 2;
        const uint4 v = __ldg((const uint4 *)(block + qs_offset + 32 * c + 16 * e));
        const unsigned int w[4] = {v.x, v.y, v.z, v.w};
        Part p;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            p.lo[i] = (int)(w[i] & 0x0f0f0f0fu);
            p.hi[i] = (int)((w[i] >> 4) & 0x0f0f0f0fu);
        }
        if (FIVE_BITS) {
            // The fifth bits of these 16 values: bit 2c (low) and 2c + 1 (high) of qh's bytes.
            const uint4 h = __ldg((const uint4 *)(block + 16 + 16 * e));
            const unsigned int hw[4] = {h.x, h.y, h.z, h.w};
#pragma unroll
            for (int i = 0; i < 4; i++) {
                p.lo[i] |= (int)(((hw[i] >> (2 * c)) & 0x01010101u) << 4);
                p.hi[i] |= (int)(((hw[i] >> (2 * c + 1)) & 0x01010101u) << 4);
            }
        }
        const float2 dm = __half22float2(*(const __half2 *)block);
        int sc, m;
        kq_scale_min_pair(block, c, sc, m);
        p.d[0] = dm.x * (float)(sc & 0xff);
        p.d[1] = dm.x * (float)(sc >> 8);
        p.m[0] = 0.5f * dm.y * (float)(m & 0xff);
        p.m[1] = 0.5f * dm.y * (float)(m >> 8);
        return p;
    }

    __device__ __forceinline__ static Y load_y(const Q8_1 *ys, int t) {
        const int c = t / 2, w = 4 * (t % 2);
        const Q8_1 &a = ys[2 * c], &b = ys[2 * c + 1];
        const int2 a0 = q8_1_words(a, w), a1 = q8_1_words(a, w + 2);
        const int2 b0 = q8_1_words(b, w), b1 = q8_1_words(b, w + 2);
        return {{a0.x, a0.y, a1.x, a1.y}, {b0.x, b0.y, b1.x, b1.y}, {a.d, b.d}, {a.s, b.s}};
    }

    __device__ __forceinline__ static float dot(const Part &p, const Y &y) {
        int lo = 0, hi = 0;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            lo = __dp4a(p.lo[i], y.lo[i], lo);
            hi = __dp4a(p.hi[i], y.hi[i], hi);
        }
        return p.d[0] * y.d[0] * (float)lo + p.d[1] * y.d[1] * (float)hi - (p.m[0] * y.s[0] + p.m[1] * y.s[1]);
    }
};

// q6_K: lane t takes half h = t / 4 and positions l0 = 8 (t % 4) .. + 7 of each of its 4 groups
// (values 128h + 32g + l), all of one scale per group.
struct MmvQ6_K {
    static constexpr int block_bytes = Q6_K_BYTES;
    static constexpr int one_col_min_blocks = 8;
    static constexpr int one_col_unroll = 1;
    static constexpr int few_cols_unroll = 2;
    static constexpr int glu_min_blocks = 8;
    static constexpr int glu_unroll = 1;
    static constexpr int proj_min_blocks = 8;
    struct Part {
        int q[4][2]; // group g's quants q (0..63, the value's q - 32 is applied in `dot`)
        float d[4];  // d * scale of group g
    };
    using Y = YGroups; // off: 32 * the sum of b's quants that group g multiplies

    __device__ __forceinline__ static Part load(const char *block, int t) {
        const int h = t / 4, l0 = 8 * (t % 4);
        const char *ql = block + 64 * h + l0;
        const char *qh = block + 128 + 32 * h + l0;
        const unsigned int low[2][2] = {{(unsigned int)load_i32_a2(ql), (unsigned int)load_i32_a2(ql + 4)},
                                        {(unsigned int)load_i32_a2(ql + 32), (unsigned int)load_i32_a2(ql + 36)}};
        const unsigned int high[2] = {(unsigned int)load_i32_a2(qh), (unsigned int)load_i32_a2(qh + 4)};
        const float d = __half2float(*(const __half *)(block + 208));
        const signed char *sc = (const signed char *)block + 192 + 8 * h + l0 / 16;
        Part p;
#pragma unroll
        for (int g = 0; g < 4; g++) {
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const unsigned int nib = g < 2 ? low[g & 1][i] & 0x0f0f0f0fu : (low[g & 1][i] >> 4) & 0x0f0f0f0fu;
                p.q[g][i] = (int)(nib | (((high[i] >> (2 * g)) & 0x03030303u) << 4));
            }
            p.d[g] = d * (float)sc[2 * g];
        }
        return p;
    }

    __device__ __forceinline__ static Y load_y(const Q8_1 *ys, int t) {
        return load_y_groups(ys, t, 0x20202020);
    }

    // sum (q - 32) y = sum q y - 32 sum y, with q in 0..63 (a non-negative int8).
    __device__ __forceinline__ static float dot(const Part &p, const Y &y) {
        float sum = 0.0f;
#pragma unroll
        for (int g = 0; g < 4; g++) {
            const int s = __dp4a(p.q[g][1], y.q[g][1], __dp4a(p.q[g][0], y.q[g][0], 0));
            sum += p.d[g] * y.d[g] * (float)(s - y.off[g]);
        }
        return sum;
    }
};

// q2_K: lane t takes the 2 words of qs at 32h + l0 (l0 = 8 (t % 4)), whose bit pairs 2g are
// group g's quants (sub-block 8h + 2g + l0 / 16); value = d * scale * q - dmin * min, the mins
// applied through the sum of the 8 values of y each covers.
struct MmvQ2_K {
    static constexpr int block_bytes = Q2_K_BYTES;
    static constexpr int one_col_min_blocks = 6;
    static constexpr int one_col_unroll = 2;
    static constexpr int few_cols_unroll = 1;
    static constexpr int glu_min_blocks = 5;
    static constexpr int glu_unroll = 1;
    static constexpr int proj_min_blocks = 6;
    struct Part {
        int q[4][2];
        float d[4], m[4]; // d * scale and dmin * min of group g's sub-block
    };
    using Y = YGroups;

    __device__ __forceinline__ static Part load(const char *block, int t) {
        const int h = t / 4, l0 = 8 * (t % 4);
        const char *qs = block + 16 + 32 * h + l0;
        const unsigned int w[2] = {(unsigned int)load_i32_a2(qs), (unsigned int)load_i32_a2(qs + 4)};
        const float2 dm = {__half2float(*(const __half *)(block + 80)), __half2float(*(const __half *)(block + 82))};
        const unsigned char *sc = (const unsigned char *)block + 8 * h + l0 / 16;
        Part p;
#pragma unroll
        for (int g = 0; g < 4; g++) {
#pragma unroll
            for (int i = 0; i < 2; i++) {
                p.q[g][i] = (int)((w[i] >> (2 * g)) & 0x03030303u);
            }
            p.d[g] = dm.x * (float)(sc[2 * g] & 0xf);
            p.m[g] = dm.y * (float)(sc[2 * g] >> 4);
        }
        return p;
    }

    __device__ __forceinline__ static Y load_y(const Q8_1 *ys, int t) {
        return load_y_groups(ys, t, 0x01010101);
    }

    __device__ __forceinline__ static float dot(const Part &p, const Y &y) {
        float sum = 0.0f;
#pragma unroll
        for (int g = 0; g < 4; g++) {
            const int s = __dp4a(p.q[g][1], y.q[g][1], __dp4a(p.q[g][0], y.q[g][0], 0));
            sum += y.d[g] * (p.d[g] * (float)s - p.m[g] * (float)y.off[g]);
        }
        return sum;
    }
};

// q3_K: as q2_K, with each quant's high bit from hmask's 2 words at l0 (bit 4h + g) making
// q in 0..7; value = d * (scale - 32) * (q - 4). The quants stay packed in the part (2 words of
// low bits, 2 of high bits shifted by 4h) and are unpacked per column: a part of 4 unpacked
// groups per row spilled at one column.
struct MmvQ3_K {
    static constexpr int block_bytes = Q3_K_BYTES;
    static constexpr int one_col_min_blocks = 6;
    static constexpr int one_col_unroll = 2;
    static constexpr int few_cols_unroll = 1;
    static constexpr int glu_min_blocks = 5;
    static constexpr int glu_unroll = 1;
    static constexpr int proj_min_blocks = 6;
    struct Part {
        unsigned int low[2], high[2];
        float d[4];
    };
    using Y = YGroups;

    __device__ __forceinline__ static Part load(const char *block, int t) {
        const int h = t / 4, l0 = 8 * (t % 4);
        const char *qs = block + 32 + 32 * h + l0;
        const float d = __half2float(*(const __half *)(block + 108));
        // The 12 scale bytes as words (Q3_K::scale's layout): sub-block 8h + b (b = 2g + l0 / 16)
        // has its low 4 bits at bit 4h of byte b, its top 2 at bit 2 (2h + g / 2) of byte 8 + b % 4.
        const unsigned int low4[2] = {(unsigned int)load_i32_a2(block + 96), (unsigned int)load_i32_a2(block + 100)};
        const unsigned int top2 = (unsigned int)load_i32_a2(block + 104);
        Part p;
#pragma unroll
        for (int i = 0; i < 2; i++) {
            p.low[i] = (unsigned int)load_i32_a2(qs + 4 * i);
            p.high[i] = (unsigned int)load_i32_a2(block + l0 + 4 * i) >> (4 * h);
        }
#pragma unroll
        for (int g = 0; g < 4; g++) {
            const int byte = 2 * (g % 2) + l0 / 16;
            const int low = (low4[g / 2] >> (8 * byte + 4 * h)) & 0xf;
            const int top = (top2 >> (8 * byte + 2 * (2 * h + g / 2))) & 3;
            p.d[g] = d * (float)((low | (top << 4)) - 32);
        }
        return p;
    }

    __device__ __forceinline__ static Y load_y(const Q8_1 *ys, int t) {
        return load_y_groups(ys, t, 0x04040404);
    }

    // sum (q - 4) y = sum q y - 4 sum y.
    __device__ __forceinline__ static float dot(const Part &p, const Y &y) {
        float sum = 0.0f;
#pragma unroll
        for (int g = 0; g < 4; g++) {
            int s = 0;
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const unsigned int q = ((p.low[i] >> (2 * g)) & 0x03030303u) | (((p.high[i] >> g) & 0x01010101u) << 2);
                s = __dp4a((int)q, y.q[g][i], s);
            }
            sum += p.d[g] * y.d[g] * (float)(s - y.off[g]);
        }
        return sum;
    }
};

template <typename Q, int NCOLS, int GROUPS, typename Out>
__device__ void mul_mat_vec_kquant(const TensorArg &a, const TensorArg &a2, const Q8_1 *bq, const Out &out,
                                   long long row0, long long r2, long long r3) {
    constexpr int ROWS = MmvRows<NCOLS>::value, R = GROUPS * ROWS, PER_WARP = 32 / KQ_LANES;
    constexpr int UNROLL = KqLaunch<Q, NCOLS, GROUPS>::unroll;
    __shared__ float shared[MMV_WARPS * R * NCOLS];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, t = lane % KQ_LANES;
    const long long m = a.ne[1];
    const long long nsb = a.ne[0] / QK_K, nq = a.ne[0] / QK;
    const long long nmat = out.nmat();
    mmv_prefetch_then_wait<ROWS, GROUPS>(a, a2, nmat, out.ne2(), row0, r2, r3, nsb * Q::block_bytes);
    for (long long mat = blockIdx.y; mat < nmat; mat += gridDim.y) {
        long long i3, i2;
        divmod64(mat, out.ne2(), i3, i2);
        const char *arow[R];
        mmv_rows<ROWS, GROUPS>(arow, a, a2, row0, i2, i3, r2, r3);
        const Q8_1 *y = bq + mat * NCOLS * nq;
        float acc[R][NCOLS];
#pragma unroll
        for (int r = 0; r < R; r++) {
#pragma unroll
            for (int c = 0; c < NCOLS; c++) {
                acc[r][c] = 0.0f;
            }
        }
#pragma unroll(UNROLL)
        for (long long ib = warp * PER_WARP + lane / KQ_LANES; ib < nsb; ib += PER_WARP * MMV_WARPS) {
            typename Q::Part part[R];
#pragma unroll
            for (int r = 0; r < R; r++) {
                part[r] = Q::load(arow[r] + ib * Q::block_bytes, t);
            }
#pragma unroll
            for (int c = 0; c < NCOLS; c++) {
                const typename Q::Y yv = Q::load_y(y + c * nq + ib * (QK_K / QK), t);
#pragma unroll
                for (int r = 0; r < R; r++) {
                    acc[r][c] += Q::dot(part[r], yv);
                }
            }
        }
        out.template store<ROWS, NCOLS, GROUPS>(acc, shared, row0, m, i2, i3);
    }
}

#define MUL_MAT_VEC_KQUANT_KERNEL(name, Q, NCOLS)                                                                \
    extern "C" __global__ void __launch_bounds__(MMV_WARPS * 32, KqLaunch<Q, NCOLS>::min_blocks)                 \
        name(const __grid_constant__ TensorArg a, const Q8_1 *bq, const __grid_constant__ TensorArg dst,         \
             const __grid_constant__ TensorArg add, long long r2, long long r3) {                                \
        mul_mat_vec_kquant<Q, NCOLS, 1>(a, a, bq, MmvDst{dst, add}, mmv_row0<NCOLS>(), r2, r3);                  \
    }

// silu(a b) * (a2 b) for one column b: a SwiGLU feed-forward's gate and up projections.
#define MUL_MAT_VEC_KQUANT_GLU_KERNEL(name, Q)                                                                   \
    extern "C" __global__ void __launch_bounds__(MMV_WARPS * 32, KqLaunch<Q, 1, 2>::min_blocks)                  \
        name(const __grid_constant__ TensorArg a, const __grid_constant__ TensorArg a2, const Q8_1 *bq,          \
             const __grid_constant__ TensorArg dst, long long r2, long long r3) {                                \
        const TensorArg none = {};                                                                               \
        mul_mat_vec_kquant<Q, 1, 2>(a, a2, bq, MmvDst{dst, none}, mmv_row0<1>(), r2, r3);                        \
    }

// Up to three products of one column b, each stored through its own epilogue (MmvProjections):
// an attention block's query, key and value projections with their ROPE and SET_ROWS.
#define MUL_MAT_VEC_KQUANT_PROJ_KERNEL(name, Q)                                                                  \
    extern "C" __global__ void __launch_bounds__(MMV_WARPS * 32, Q::proj_min_blocks)           \
        name(const __grid_constant__ MmvProjections p, const Q8_1 *bq) {                                         \
        const MmvProjection &o = mmv_projection_of(p);                                                           \
        const long long row0 = ((long long)blockIdx.x - o.first) * MmvRows<1>::value;                            \
        mul_mat_vec_kquant<Q, 1, 1>(o.a, o.a, bq, MmvProjectionStore{p, o}, row0, 1, 1);                         \
    }

MUL_MAT_VEC_KQUANT_KERNEL(mul_mat_vec_q4_K_1, MmvKq45<false>, 1)
MUL_MAT_VEC_KQUANT_KERNEL(mul_mat_vec_q4_K_2, MmvKq45<false>, 2)
MUL_MAT_VEC_KQUANT_KERNEL(mul_mat_vec_q4_K_3, MmvKq45<false>, 3)
MUL_MAT_VEC_KQUANT_KERNEL(mul_mat_vec_q4_K_4, MmvKq45<false>, 4)
MUL_MAT_VEC_KQUANT_KERNEL(mul_mat_vec_q4_K_5, MmvKq45<false>, 5)
MUL_MAT_VEC_KQUANT_KERNEL(mul_mat_vec_q4_K_6, MmvKq45<false>, 6)
MUL_MAT_VEC_KQUANT_KERNEL(mul_mat_vec_q4_K_7, MmvKq45<false>, 7)
MUL_MAT_VEC_KQUANT_KERNEL(mul_mat_vec_q4_K_8, MmvKq45<false>, 8)
MUL_MAT_VEC_KQUANT_KERNEL(mul_mat_vec_q5_K_1, MmvKq45<true>, 1)
MUL_MAT_VEC_KQUANT_KERNEL(mul_mat_vec_q5_K_2, MmvKq45<true>, 2)
MUL_MAT_VEC_KQUANT_KERNEL(mul_mat_vec_q5_K_3, MmvKq45<true>, 3)
MUL_MAT_VEC_KQUANT_KERNEL(mul_mat_vec_q5_K_4, MmvKq45<true>, 4)
MUL_MAT_VEC_KQUANT_KERNEL(mul_mat_vec_q5_K_5, MmvKq45<true>, 5)
MUL_MAT_VEC_KQUANT_KERNEL(mul_mat_vec_q5_K_6, MmvKq45<true>, 6)
MUL_MAT_VEC_KQUANT_KERNEL(mul_mat_vec_q5_K_7, MmvKq45<true>, 7)
MUL_MAT_VEC_KQUANT_KERNEL(mul_mat_vec_q5_K_8, MmvKq45<true>, 8)
MUL_MAT_VEC_KQUANT_KERNEL(mul_mat_vec_q6_K_1, MmvQ6_K, 1)
MUL_MAT_VEC_KQUANT_KERNEL(mul_mat_vec_q6_K_2, MmvQ6_K, 2)
MUL_MAT_VEC_KQUANT_KERNEL(mul_mat_vec_q6_K_3, MmvQ6_K, 3)
MUL_MAT_VEC_KQUANT_KERNEL(mul_mat_vec_q6_K_4, MmvQ6_K, 4)
MUL_MAT_VEC_KQUANT_KERNEL(mul_mat_vec_q6_K_5, MmvQ6_K, 5)
MUL_MAT_VEC_KQUANT_KERNEL(mul_mat_vec_q6_K_6, MmvQ6_K, 6)
MUL_MAT_VEC_KQUANT_KERNEL(mul_mat_vec_q6_K_7, MmvQ6_K, 7)
MUL_MAT_VEC_KQUANT_KERNEL(mul_mat_vec_q6_K_8, MmvQ6_K, 8)
MUL_MAT_VEC_KQUANT_KERNEL(mul_mat_vec_q2_K_1, MmvQ2_K, 1)
MUL_MAT_VEC_KQUANT_KERNEL(mul_mat_vec_q2_K_2, MmvQ2_K, 2)
MUL_MAT_VEC_KQUANT_KERNEL(mul_mat_vec_q2_K_3, MmvQ2_K, 3)
MUL_MAT_VEC_KQUANT_KERNEL(mul_mat_vec_q2_K_4, MmvQ2_K, 4)
MUL_MAT_VEC_KQUANT_KERNEL(mul_mat_vec_q2_K_5, MmvQ2_K, 5)
MUL_MAT_VEC_KQUANT_KERNEL(mul_mat_vec_q2_K_6, MmvQ2_K, 6)
MUL_MAT_VEC_KQUANT_KERNEL(mul_mat_vec_q2_K_7, MmvQ2_K, 7)
MUL_MAT_VEC_KQUANT_KERNEL(mul_mat_vec_q2_K_8, MmvQ2_K, 8)
MUL_MAT_VEC_KQUANT_KERNEL(mul_mat_vec_q3_K_1, MmvQ3_K, 1)
MUL_MAT_VEC_KQUANT_KERNEL(mul_mat_vec_q3_K_2, MmvQ3_K, 2)
MUL_MAT_VEC_KQUANT_KERNEL(mul_mat_vec_q3_K_3, MmvQ3_K, 3)
MUL_MAT_VEC_KQUANT_KERNEL(mul_mat_vec_q3_K_4, MmvQ3_K, 4)
MUL_MAT_VEC_KQUANT_KERNEL(mul_mat_vec_q3_K_5, MmvQ3_K, 5)
MUL_MAT_VEC_KQUANT_KERNEL(mul_mat_vec_q3_K_6, MmvQ3_K, 6)
MUL_MAT_VEC_KQUANT_KERNEL(mul_mat_vec_q3_K_7, MmvQ3_K, 7)
MUL_MAT_VEC_KQUANT_KERNEL(mul_mat_vec_q3_K_8, MmvQ3_K, 8)
MUL_MAT_VEC_KQUANT_GLU_KERNEL(mul_mat_vec_glu_q4_K, MmvKq45<false>)
MUL_MAT_VEC_KQUANT_GLU_KERNEL(mul_mat_vec_glu_q5_K, MmvKq45<true>)
MUL_MAT_VEC_KQUANT_GLU_KERNEL(mul_mat_vec_glu_q6_K, MmvQ6_K)
MUL_MAT_VEC_KQUANT_GLU_KERNEL(mul_mat_vec_glu_q2_K, MmvQ2_K)
MUL_MAT_VEC_KQUANT_GLU_KERNEL(mul_mat_vec_glu_q3_K, MmvQ3_K)
MUL_MAT_VEC_KQUANT_PROJ_KERNEL(mul_mat_vec_proj_q4_K, MmvKq45<false>)
MUL_MAT_VEC_KQUANT_PROJ_KERNEL(mul_mat_vec_proj_q5_K, MmvKq45<true>)
MUL_MAT_VEC_KQUANT_PROJ_KERNEL(mul_mat_vec_proj_q6_K, MmvQ6_K)
MUL_MAT_VEC_KQUANT_PROJ_KERNEL(mul_mat_vec_proj_q2_K, MmvQ2_K)
MUL_MAT_VEC_KQUANT_PROJ_KERNEL(mul_mat_vec_proj_q3_K, MmvQ3_K)
