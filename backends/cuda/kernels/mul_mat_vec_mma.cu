// Matrix-vector products of q8_0, q4_0, f16 and bf16 weights with several columns (up to 8;
// mul_mat.rs says from how many) on tensor cores. For q8_0 and q4_0, the 32 values of a weight
// block times the same 32 values of b are one int8 `mma.sync m16n8k32` for 16 weight rows and 8
// columns, where the 4-way dot products (dp4a) of mul_mat_vec.cu take 32 instructions a warp for
// the same work. The integer sums are exact, as dp4a's; each is scaled and added in f32 as there.
// For f16 and bf16, 16 values of k are one `m16n8k16` of b rounded to the weights' type (as the
// GEMM path rounds it), accumulated in f32: mul_mat_vec.cu's float kernel reads each column's
// values once per row and thread, 8 times the weights' bytes at 8 columns.
//
// dst[i, j, i2, i3] = sum_k a[k, i, i2 / r2, i3 / r3] * b[k, j, i2, i3], with a: [K, M, a2, a3]
// (packed rows starting on 16-byte boundaries, K a multiple of 256), b: [K, N, b2, b3] F32,
// dst: [M, N, b2, b3] F32, N <= 8; plus `add` where its address is not 0 (as mmv_store).
//
// b is first quantized (`quantize_q8_1_mma`) into blocks laid out as the B fragments are read:
// a warp reads a block's quants for all 8 columns as 256 consecutive bytes and its scales as 64.
// The weights go through shared memory: fragment loads straight from memory touched 16 rows, 16
// cache lines, per instruction, which held a first version at 0.6x of the dp4a kernel. Here
// each warp copies 16 rows x 8 blocks with 16-byte loads, then reads its fragments from shared
// memory without bank conflicts (the rows' copies are 272 or 144 bytes apart: 4 banks apart).
//
// Grid: x over groups of 16 weight rows, y strided over the b2 * b3 matrices. Block: MMA_WARPS
// warps on the same 16 rows, warp w taking the runs of 8 blocks w, w + MMA_WARPS, ... of each
// row; the warps' sums are added in shared memory. A 4096-row product is 256 blocks, about 16
// warps an SM: each warp loads its next run while it multiplies the one in shared memory.
#include "mul_mat_vec.cuh"

#define MMA_WARPS 8
#define MMA_ROWS 16
// Weight blocks a warp copies from each row at a time.
#define MMA_RUN 8

// b's block `ib` of one matrix, all 8 columns (zeros past the last): lane (g, t) of a warp reads
// qs[g][t] as the B fragment's two words (values 4t .. 4t + 3 and 16 more of column g), and
// ds[t] as (d, d, s, s) of columns 2t and 2t + 1 (d: the scale, s: d times the sum of quants).
struct MmaB {
    int qs[8][4][2];
    float ds[4][4];
};

static_assert(sizeof(MmaB) == 320, "MmaB must match MMA_B_BYTES in mul_mat.rs");

// One warp per block of 32 values of one column (columns past b's last are zeros): as
// quantize_q8_1 (mul_mat_vec.cu), stored into the B-fragment layout. Grid: x over blocks
// (MMV_WARPS per thread block), y over the 8 columns, z strided over matrices.
extern "C" __global__ void quantize_q8_1_mma(const __grid_constant__ TensorArg b, MmaB *out) {
    const long long nblocks = b.ne[0] / QK;
    quantize_b_blocks(b, [&](long long mat, long long j, long long block, int lane, const Q8_1Lane &v) {
        MmaB *dst = out + mat * nblocks + block;
        const int word = lane / 4;
        ((signed char *)dst->qs[j][word % 4])[4 * (word / 4) + lane % 4] = (signed char)v.q;
        if (lane == 0) {
            dst->ds[j / 2][j % 2] = v.d;
            dst->ds[j / 2][2 + j % 2] = v.s;
        }
    });
}

// The A fragment of m16n8k32 for lane (g = lane / 4, t = lane % 4), read from a block's copy in
// shared memory: 4 bytes of quants each, a[0] row g values 4t .. 4t + 3, a[1] row g + 8 the
// same, a[2] and a[3] values 16 more; and the two rows' block scales.
struct MmaFragment {
    int a[4];
    float d[2];
};

// A 32-bit word at a 2-byte aligned address.
__device__ __forceinline__ int word_a2(const unsigned char *p) {
    const unsigned short *h = (const unsigned short *)p;
    return (int)((unsigned int)h[0] | ((unsigned int)h[1] << 16));
}

__device__ __forceinline__ float half_at(const unsigned char *p) {
    return f16_bits_to_f32(*(const unsigned short *)p);
}

// q8_0: value = q * d.
struct MmaQ8_0 {
    static constexpr int block_bytes = Q8_0_BYTES;
    __device__ __forceinline__ static MmaFragment load(const unsigned char *lo, const unsigned char *hi, int t) {
        return {{word_a2(lo + 2 + 4 * t), word_a2(hi + 2 + 4 * t), word_a2(lo + 18 + 4 * t), word_a2(hi + 18 + 4 * t)},
                {half_at(lo), half_at(hi)}};
    }
    // One block's contribution from its integer sum with b's block (scale d, scaled sum s).
    __device__ __forceinline__ static float scale(float da, int sum, float d, float) {
        return da * d * (float)sum;
    }
};

// q4_0: byte j of the nibbles holds value j (low) and value j + 16 (high); value =
// (nibble - 8) * d, so the block's sum is d * (d_b * sum(nibble * q_b) - 8 * s_b).
struct MmaQ4_0 {
    static constexpr int block_bytes = Q4_0_BYTES;
    __device__ __forceinline__ static MmaFragment load(const unsigned char *lo, const unsigned char *hi, int t) {
        const int l = word_a2(lo + 2 + 4 * t), h = word_a2(hi + 2 + 4 * t);
        return {{l & 0x0f0f0f0f, h & 0x0f0f0f0f, (l >> 4) & 0x0f0f0f0f, (h >> 4) & 0x0f0f0f0f},
                {half_at(lo), half_at(hi)}};
    }
    __device__ __forceinline__ static float scale(float da, int sum, float d, float s) {
        return da * (d * (float)sum - 8.0f * s);
    }
};

// c (16 x 8, int32) = a (16 x 32, int8, rows) * b (32 x 8, int8, columns).
__device__ __forceinline__ void mma_s8(const int (&a)[4], int b0, int b1, int (&c)[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%10, %10, %10, %10};"
        : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(0));
#endif
}

// A lane's 16-byte pieces of a run of MMA_RUN blocks of the 16 rows from `rows` (row stride
// `stride`, rows past `last` repeating it; their sums are never stored), starting `at` bytes
// into each row; nothing where not `valid`.
template <int PIECES, int LANE_PIECES>
__device__ __forceinline__ void load_run(uint4 (&v)[LANE_PIECES], const char *rows, long long stride, long long last,
                                         long long at, bool valid) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int k = 0; k < LANE_PIECES; k++) {
        const int i = lane + 32 * k;
        if (valid && i < MMA_ROWS * PIECES) {
            const long long row = min((long long)(i / PIECES), last);
            v[k] = *(const uint4 *)(rows + row * stride + at + 16 * (i % PIECES));
        }
    }
}

// The block's sums (each warp's 16 x 8 accumulator, as the C fragment lays it out) added over
// the warps, plus `add` where its address is not 0, stored into the first dst.ne[1] columns.
__device__ __forceinline__ void mma_store(float (&sums)[MMA_WARPS][MMA_ROWS][8], const float (&acc)[4],
                                          const TensorArg &dst, const TensorArg &add, long long row0, long long m,
                                          long long i2, long long i3) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        sums[warp][g + 8 * (i / 2)][2 * t + i % 2] = acc[i];
    }
    __syncthreads();
    if (threadIdx.x < MMA_ROWS * 8) {
        const int r = threadIdx.x / 8, c = threadIdx.x % 8;
        if (c < dst.ne[1] && row0 + r < m) {
            float sum = 0.0f;
#pragma unroll
            for (int w = 0; w < MMA_WARPS; w++) {
                sum += sums[w][r][c];
            }
            if (add.data != 0) {
                sum += *(const float *)(row_ptr(add, c, i2, i3) + (row0 + r) * add.nb[0]);
            }
            *(float *)(row_ptr(dst, c, i2, i3) + (row0 + r) * dst.nb[0]) = sum;
        }
    }
}

template <typename Q>
__device__ void mul_mat_vec_mma(const TensorArg &a, const MmaB *bq, const TensorArg &dst, const TensorArg &add,
                                long long r2, long long r3) {
    constexpr int RUN_BYTES = MMA_RUN * Q::block_bytes, PIECES = RUN_BYTES / 16;
    constexpr int LANE_PIECES = (MMA_ROWS * PIECES + 31) / 32;
    static_assert(RUN_BYTES % 16 == 0, "a run of blocks is whole 16-byte pieces");
    __shared__ uint4 runs[MMA_WARPS][MMA_ROWS * PIECES];
    __shared__ float sums[MMA_WARPS][MMA_ROWS][8];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    const long long m = a.ne[1], nblocks = a.ne[0] / QK;
    const long long nmat = dst.ne[2] * dst.ne[3];
    const long long row0 = (long long)blockIdx.x * MMA_ROWS;
    const unsigned char *run = (const unsigned char *)runs[warp];
    // No L2 prefetch of the rows before the wait (mmv_prefetch_then_wait): on an H200, 4096 x
    // 14336 products of 8 columns took 22.7 us (q8_0) and 20.4 (q4_0) without it against 24.8
    // and 22.0 with it, and random Llama models' 8-token batches ran 0-9% faster.
    await_prior_kernel();
    for (long long mat = blockIdx.y; mat < nmat; mat += gridDim.y) {
        long long i3, i2;
        divmod64(mat, dst.ne[2], i3, i2);
        const char *rows = row_ptr(a, row0, mmv_div(i2, r2), mmv_div(i3, r3));
        const MmaB *y = bq + mat * nblocks;
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        // The run after the one in shared memory is loaded into registers meanwhile, all of a
        // lane's pieces at once: copying piece by piece waited on memory once per piece.
        uint4 next[LANE_PIECES];
        long long ib0 = (long long)warp * MMA_RUN;
        load_run<PIECES, LANE_PIECES>(next, rows, a.nb[1], m - 1 - row0, ib0 * Q::block_bytes, nblocks > ib0);
        for (; ib0 < nblocks; ib0 += MMA_WARPS * MMA_RUN) {
#pragma unroll
            for (int k = 0; k < LANE_PIECES; k++) {
                if (lane + 32 * k < MMA_ROWS * PIECES) {
                    runs[warp][lane + 32 * k] = next[k];
                }
            }
            __syncwarp();
            const long long ib1 = ib0 + MMA_WARPS * MMA_RUN;
            load_run<PIECES, LANE_PIECES>(next, rows, a.nb[1], m - 1 - row0, ib1 * Q::block_bytes, ib1 < nblocks);
#pragma unroll
            for (int j = 0; j < MMA_RUN; j++) {
                const MmaFragment f =
                    Q::load(run + g * RUN_BYTES + j * Q::block_bytes, run + (g + 8) * RUN_BYTES + j * Q::block_bytes, t);
                const MmaB &yb = y[ib0 + j];
                const int2 q = *(const int2 *)yb.qs[g][t];
                const float4 ds = *(const float4 *)yb.ds[t];
                int c[4];
                mma_s8(f.a, q.x, q.y, c);
                acc[0] += Q::scale(f.d[0], c[0], ds.x, ds.z);
                acc[1] += Q::scale(f.d[0], c[1], ds.y, ds.w);
                acc[2] += Q::scale(f.d[1], c[2], ds.x, ds.z);
                acc[3] += Q::scale(f.d[1], c[3], ds.y, ds.w);
            }
            __syncwarp(); // the run's copy is read before the next overwrites it
        }
        mma_store(sums, acc, dst, add, row0, m, i2, i3);
        __syncthreads(); // `sums` is free for the next matrix
    }
}

#define MUL_MAT_VEC_MMA_KERNEL(name, Q)                                                                          \
    extern "C" __global__ void __launch_bounds__(MMA_WARPS * 32)                                                 \
        name(const __grid_constant__ TensorArg a, const MmaB *bq, const __grid_constant__ TensorArg dst,         \
             const __grid_constant__ TensorArg add, long long r2, long long r3) {                                 \
        mul_mat_vec_mma<Q>(a, bq, dst, add, r2, r3);                                                             \
    }

MUL_MAT_VEC_MMA_KERNEL(mul_mat_vec_mma_q8_0, MmaQ8_0)
MUL_MAT_VEC_MMA_KERNEL(mul_mat_vec_mma_q4_0, MmaQ4_0)

// ---------------------------------------------------------------------------------------------
// f16 and bf16 weights.

// Values of k a warp copies from each of its 16 rows at a time (256 bytes a row).
#define MMA_16BIT_RUN 128

// c (16 x 8, f32) += a (16 x 16, rows) * b (16 x 8, columns), of f16 or bf16 values.
template <bool BF16>
__device__ __forceinline__ void mma_16bit(const unsigned int (&a)[4], unsigned int b0, unsigned int b1,
                                          float (&c)[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    if (BF16) {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%0, %1, %2, %3};"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    } else {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%0, %1, %2, %3};"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
#endif
}

// b converted to the B fragments of each step of 16 values of k, all 8 columns: lane (g, t) of
// step s holds values 16s + 2t, 2t + 1 (first word) and 16s + 2t + 8, 2t + 9 (second) of column
// g, the lower k in the low half, zeros past b's last column. K is a multiple of 16. Grid: x
// over steps (a warp each), y strided over matrices.
template <bool BF16>
__device__ void convert_b_mma(const TensorArg &b, uint2 *out) {
    await_prior_kernel();
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const long long nsteps = b.ne[0] / 16;
    const long long step = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (step >= nsteps) {
        return;
    }
    const long long nmat = b.ne[2] * b.ne[3];
    for (long long mat = blockIdx.y; mat < nmat; mat += gridDim.y) {
        long long i3, i2;
        divmod64(mat, b.ne[2], i3, i2);
        unsigned int w[2] = {0u, 0u};
        if (g < b.ne[1]) {
            const char *col = row_ptr(b, g, i2, i3);
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const long long k = step * 16 + 2 * t + 8 * h;
                const float x0 = *(const float *)(col + k * b.nb[0]);
                const float x1 = *(const float *)(col + (k + 1) * b.nb[0]);
                const unsigned int lo = BF16 ? f32_to_bf16_bits(x0) : f32_to_f16_bits(x0);
                const unsigned int hi = BF16 ? f32_to_bf16_bits(x1) : f32_to_f16_bits(x1);
                w[h] = lo | (hi << 16);
            }
        }
        out[(mat * nsteps + step) * 32 + lane] = make_uint2(w[0], w[1]);
    }
}

// As mul_mat_vec_mma for 16-bit weights, K a multiple of MMA_16BIT_RUN: each warp copies runs
// of 16 rows x 128 values into shared memory, rows 272 bytes apart (4 banks, so that the
// fragment reads below are free of bank conflicts), and takes each 16 values of the run as one
// m16n8k16 with b's fragments read straight from memory.
template <bool BF16>
__device__ void mul_mat_vec_mma_16bit(const TensorArg &a, const uint2 *bf, const TensorArg &dst, const TensorArg &add,
                                      long long r2, long long r3) {
    constexpr int PIECES = MMA_16BIT_RUN * 2 / 16, STRIDE = PIECES + 1, STEPS = MMA_16BIT_RUN / 16;
    constexpr int LANE_PIECES = MMA_ROWS * PIECES / 32;
    __shared__ uint4 runs[MMA_WARPS][MMA_ROWS * STRIDE];
    __shared__ float sums[MMA_WARPS][MMA_ROWS][8];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    const long long m = a.ne[1], nsteps = a.ne[0] / 16, nruns = a.ne[0] / MMA_16BIT_RUN;
    const long long nmat = dst.ne[2] * dst.ne[3];
    const long long row0 = (long long)blockIdx.x * MMA_ROWS;
    const unsigned char *run_lo = (const unsigned char *)runs[warp] + g * STRIDE * 16 + 4 * t;
    const unsigned char *run_hi = run_lo + 8 * STRIDE * 16;
    await_prior_kernel();
    for (long long mat = blockIdx.y; mat < nmat; mat += gridDim.y) {
        long long i3, i2;
        divmod64(mat, dst.ne[2], i3, i2);
        const char *rows = row_ptr(a, row0, mmv_div(i2, r2), mmv_div(i3, r3));
        const uint2 *y = bf + mat * nsteps * 32 + lane;
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        uint4 next[LANE_PIECES];
        long long run = warp;
        load_run<PIECES, LANE_PIECES>(next, rows, a.nb[1], m - 1 - row0, run * MMA_16BIT_RUN * 2, run < nruns);
        for (; run < nruns; run += MMA_WARPS) {
#pragma unroll
            for (int k = 0; k < LANE_PIECES; k++) {
                const int i = lane + 32 * k;
                runs[warp][(i / PIECES) * STRIDE + i % PIECES] = next[k];
            }
            __syncwarp();
            const long long after = run + MMA_WARPS;
            load_run<PIECES, LANE_PIECES>(next, rows, a.nb[1], m - 1 - row0, after * MMA_16BIT_RUN * 2, after < nruns);
#pragma unroll
            for (int j = 0; j < STEPS; j++) {
                const unsigned int f[4] = {*(const unsigned int *)(run_lo + 32 * j), *(const unsigned int *)(run_hi + 32 * j),
                                           *(const unsigned int *)(run_lo + 32 * j + 16),
                                           *(const unsigned int *)(run_hi + 32 * j + 16)};
                const uint2 b = y[(run * STEPS + j) * 32];
                mma_16bit<BF16>(f, b.x, b.y, acc);
            }
            __syncwarp(); // the run's copy is read before the next overwrites it
        }
        mma_store(sums, acc, dst, add, row0, m, i2, i3);
        __syncthreads(); // `sums` is free for the next matrix
    }
}

extern "C" __global__ void __launch_bounds__(256) convert_b_mma_f16(const __grid_constant__ TensorArg b, uint2 *out) {
    convert_b_mma<false>(b, out);
}

extern "C" __global__ void __launch_bounds__(256) convert_b_mma_bf16(const __grid_constant__ TensorArg b, uint2 *out) {
    convert_b_mma<true>(b, out);
}

#define MUL_MAT_VEC_MMA_16BIT_KERNEL(name, BF16)                                                                 \
    extern "C" __global__ void __launch_bounds__(MMA_WARPS * 32)                                                 \
        name(const __grid_constant__ TensorArg a, const uint2 *bf, const __grid_constant__ TensorArg dst,        \
             const __grid_constant__ TensorArg add, long long r2, long long r3) {                                 \
        mul_mat_vec_mma_16bit<BF16>(a, bf, dst, add, r2, r3);                                                    \
    }

MUL_MAT_VEC_MMA_16BIT_KERNEL(mul_mat_vec_mma_f16, false)
MUL_MAT_VEC_MMA_16BIT_KERNEL(mul_mat_vec_mma_bf16, true)
