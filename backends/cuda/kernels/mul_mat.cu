// MUL_MAT through cuBLAS: the pointer arrays of a batched GEMM (products of more than 8
// columns, and those the matrix-vector kernels of mul_mat_vec.cu do not take), and operands
// packed for the GEMM: quantized weights dequantized to f16, f32 rows converted to f16 or bf16.
// The launcher converts other operands with the CPY kernels.
//
// dst[i, j, i2, i3] = sum_k a[k, i, i2 / r2, i3 / r3] * b[k, j, i2, i3], with a: [K, M, a2, a3],
// b: [K, N, b2, b3], dst: [M, N, b2, b3], and r2 = b2 / a2, r3 = b3 / a3 (the broadcast of a
// over b's matrices).
#include <type_traits>

#include "kquant_low.cuh"
#include "legacy_quant.cuh"

// The pointer arrays of cublasGemmBatchedEx for the b2 * b3 matrices of dst: `out` holds the
// matrices of a (broadcast by r2, r3), then those of b, then those of dst (only addresses are
// used from the tensors' data, nb[2] and nb[3]; dst's ne[2], ne[3] give the matrix count).
extern "C" __global__ void mul_mat_ptrs(const __grid_constant__ TensorArg a, const __grid_constant__ TensorArg b,
                                        const __grid_constant__ TensorArg dst, long long r2, long long r3,
                                        unsigned long long *out) {
    await_prior_kernel();
    const long long nmat = dst.ne[2] * dst.ne[3];
    for (long long mat = (long long)blockIdx.x * blockDim.x + threadIdx.x; mat < nmat;
         mat += (long long)gridDim.x * blockDim.x) {
        long long i3, i2;
        divmod64(mat, dst.ne[2], i3, i2);
        out[mat] = a.data + (unsigned long long)((i2 / r2) * a.nb[2] + (i3 / r3) * a.nb[3]);
        out[nmat + mat] = b.data + (unsigned long long)(i2 * b.nb[2] + i3 * b.nb[3]);
        out[2 * nmat + mat] = dst.data + (unsigned long long)(i2 * dst.nb[2] + i3 * dst.nb[3]);
    }
}

// The GEMM's operands packed as 16-bit values: rows of `a` (any row strides; a's values
// decoded by `S`, then, with GELU, taken through gelu_erf_f32: a GELU_ERF node fused into the
// product that reads it) written packed into `dst` as f16 (or bf16 where BF), each thread 8
// consecutive values as one 16-byte store. Grid: x over runs of blockDim.x * 8 values of a row,
// y strided over groups of ROWS rows, so that no thread divides its index (a flat index
// unravelled a thread at a time held a q8_0 dequantization at half the memory bandwidth); the
// CPY kernels, which this replaces here, store 2 bytes a thread. A thread loads its values of
// the ROWS rows before it stores any: f32 rows (ROWS = 4) keep that many loads in flight.
template <typename S, bool BF, bool GELU, int ROWS>
__device__ void pack16(const TensorArg &a, const TensorArg &dst) {
    await_prior_kernel();
    const long long eighths = a.ne[0] / 8, e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= eighths) {
        return;
    }
    const long long nrows = nrows_of(a);
    for (long long row0 = (long long)blockIdx.y * ROWS; row0 < nrows; row0 += (long long)gridDim.y * ROWS) {
        float y[ROWS][8];
#pragma unroll
        for (int r = 0; r < ROWS; r++) {
            if (row0 + r < nrows) {
                long long i1, i2, i3;
                unravel_row(row0 + r, a.ne[1], a.ne[2], i1, i2, i3);
                S::load8(row_ptr(a, i1, i2, i3), e, y[r]);
            }
        }
#pragma unroll
        for (int r = 0; r < ROWS; r++) {
            if (row0 + r >= nrows) {
                break;
            }
            if constexpr (GELU) {
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    y[r][i] = gelu_erf_f32(y[r][i]);
                }
            }
            unsigned int h[4];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const unsigned short lo = BF ? f32_to_bf16_bits(y[r][2 * i]) : f32_to_f16_bits(y[r][2 * i]);
                const unsigned short hi = BF ? f32_to_bf16_bits(y[r][2 * i + 1]) : f32_to_f16_bits(y[r][2 * i + 1]);
                h[i] = (unsigned int)lo | ((unsigned int)hi << 16);
            }
            *(uint4 *)((char *)dst.data + ((row0 + r) * eighths + e) * 16) = make_uint4(h[0], h[1], h[2], h[3]);
        }
    }
}

// The f32 operands of a split product (split_gemm.rs), one TF32 GEMM over 3K values: each
// value x of rows row0 .. row0 + rows of `a` (any strides; rows counted over dimensions 1 to 3
// in order) as its TF32 part hi (x rounded to a 10-bit mantissa, which a TF32 product takes
// exactly; truncated where rounding would overflow) and its remainder lo = x - hi (exact in
// f32). Row row0 + r goes to row r of the packed `out`: three runs of K values, hi except in
// the run `lo_run`, which holds lo. Infinities and NaN go whole into hi (lo = 0). With GELU,
// x is gelu_erf_f32 of a's value (a GELU_ERF node fused into the product that reads it). Grid:
// x over a row's values (256 a block), y strided over groups of SPLIT_ROWS rows (as
// split_gemm.rs launches them), whose values a thread loads before it stores any (more loads in
// flight).
#define SPLIT_ROWS 4
template <bool GELU>
__device__ void split_tf32(const TensorArg &a, float *out, int lo_run, long long row0, long long rows) {
    const long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x, k = a.ne[0];
    if (e >= k) {
        return;
    }
    for (long long r0 = (long long)blockIdx.y * SPLIT_ROWS; r0 < rows; r0 += (long long)gridDim.y * SPLIT_ROWS) {
        float xs[SPLIT_ROWS];
#pragma unroll
        for (int i = 0; i < SPLIT_ROWS; i++) {
            if (r0 + i < rows) {
                long long i1, i2, i3;
                unravel_row(row0 + r0 + i, a.ne[1], a.ne[2], i1, i2, i3);
                xs[i] = *(const float *)(row_ptr(a, i1, i2, i3) + e * a.nb[0]);
            }
        }
#pragma unroll
        for (int i = 0; i < SPLIT_ROWS; i++) {
            if (r0 + i >= rows) {
                break;
            }
            float x = xs[i];
            if constexpr (GELU) {
                x = gelu_erf_f32(x);
            }
            float h = x, l = 0.0f;
            if (isfinite(x)) {
                const unsigned int u = __float_as_uint(x);
                h = __uint_as_float((u + 0x1000u) & 0xffffe000u);
                if (isinf(h)) {
                    h = __uint_as_float(u & 0xffffe000u);
                }
                l = x - h;
            }
            float *runs = out + (r0 + i) * 3 * k + e;
#pragma unroll
            for (int run = 0; run < 3; run++) {
                runs[run * k] = run == lo_run ? l : h;
            }
        }
    }
}

#define SPLIT_TF32_KERNEL(name, GELU)                                                                        \
    extern "C" __global__ void name(const __grid_constant__ TensorArg a, float *out, int lo_run, long long row0, \
                                    long long rows) {                                                         \
        await_prior_kernel();                                                                                \
        split_tf32<GELU>(a, out, lo_run, row0, rows);                                                        \
    }

SPLIT_TF32_KERNEL(split_tf32, false)
SPLIT_TF32_KERNEL(split_tf32_gelu_erf, true)

// Values 8e .. 8e + 7 of a row, by kind of row.

// f32 rows starting on 16-byte boundaries.
struct F32Row {
    __device__ __forceinline__ static void load8(const char *row, long long e, float (&y)[8]) {
        const float4 lo = ((const float4 *)row)[2 * e], hi = ((const float4 *)row)[2 * e + 1];
        y[0] = lo.x, y[1] = lo.y, y[2] = lo.z, y[3] = lo.w, y[4] = hi.x, y[5] = hi.y, y[6] = hi.z, y[7] = hi.w;
    }
};

// 32-value blocks (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1), read through the type's `load`: the CPY
// kernels' values.
template <typename Q> struct Block32Row {
    __device__ __forceinline__ static void load8(const char *row, long long e, float (&y)[8]) {
        const char *block = row + (e / 4) * Q::block_bytes;
        const int first = 8 * (int)(e % 4);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            y[i] = Q::load(block, first + i, 0);
        }
    }
};

// q8_0 and q4_0, the types most weights come in, read their 8 bytes of quants as 16-bit words
// (their blocks are 2-byte aligned) rather than byte by byte; the values are computed as their
// `load` computes them.
template <> struct Block32Row<Q8_0> {
    __device__ __forceinline__ static void load8(const char *row, long long e, float (&y)[8]) {
        const char *block = row + (e / 4) * Q8_0_BYTES;
        const float d = f16_bits_to_f32(*(const unsigned short *)block);
        const unsigned short *q = (const unsigned short *)(block + 2 + 8 * (e % 4));
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const unsigned int w = q[i];
            y[2 * i] = (float)(signed char)(w & 0xff) * d;
            y[2 * i + 1] = (float)(signed char)(w >> 8) * d;
        }
    }
};

// Values 0..15 are the low nibbles of bytes 0..15, values 16..31 their high nibbles.
template <> struct Block32Row<Q4_0> {
    __device__ __forceinline__ static void load8(const char *row, long long e, float (&y)[8]) {
        const char *block = row + (e / 4) * Q4_0_BYTES;
        const float d = f16_bits_to_f32(*(const unsigned short *)block);
        const int first = 8 * (int)(e % 4), shift = first < 16 ? 0 : 4;
        const unsigned short *q = (const unsigned short *)(block + 2 + first % 16);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const unsigned int w = q[i];
            y[2 * i] = (float)((int)((w >> shift) & 0xf) - 8) * d;
            y[2 * i + 1] = (float)((int)((w >> (8 + shift)) & 0xf) - 8) * d;
        }
    }
};

// K-quant super-blocks of 256 values, through the type's `load8`.
template <typename Q> struct KQuantRow {
    __device__ __forceinline__ static void load8(const char *row, long long e, float (&y)[8]) {
        Q::load8((const unsigned char *)row + (e / 32) * Q::block_bytes, (int)(e % 32), y);
    }
};

// f32 rows are packed PACK16_F32_ROWS rows a thread (as mul_mat.rs launches them); quantized
// ones 1.
#define PACK16_F32_ROWS 4
#define PACK16_KERNEL(name, S, BF)                                                                               \
    extern "C" __global__ void name(const __grid_constant__ TensorArg a, const __grid_constant__ TensorArg dst) { \
        pack16<S, BF, false, std::is_same_v<S, F32Row> ? PACK16_F32_ROWS : 1>(a, dst);                           \
    }
#define PACK16_GELU_KERNEL(name, BF)                                                                             \
    extern "C" __global__ void name(const __grid_constant__ TensorArg a, const __grid_constant__ TensorArg dst) { \
        pack16<F32Row, BF, true, PACK16_F32_ROWS>(a, dst);                                                       \
    }

// Packed f32 tensors (a multiple of 8 values on a 16-byte boundary) as one run of groups of 8
// values, each thread converting groups a grid apart: the launcher sizes the grid to one wave
// of resident blocks. Streaming loads leave the cache to the GEMM that reads the result. On an
// H200, 14336 x 512 values packed in 8.4 us where pack16's grid of a block per 4 rows took 11.8.
template <bool BF, bool GELU>
__device__ void pack16_flat(const TensorArg &a, const TensorArg &dst) {
    await_prior_kernel();
    const long long groups = a.ne[0] * a.ne[1] * a.ne[2] * a.ne[3] / 8;
    const float4 *in = (const float4 *)a.data;
    uint4 *out = (uint4 *)dst.data;
    for (long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x; g < groups;
         g += (long long)gridDim.x * blockDim.x) {
        const float4 lo = __ldcs(in + 2 * g), hi = __ldcs(in + 2 * g + 1);
        float y[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
        unsigned int h[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float x0 = y[2 * i], x1 = y[2 * i + 1];
            if constexpr (GELU) {
                x0 = gelu_erf_f32(x0);
                x1 = gelu_erf_f32(x1);
            }
            const unsigned short l = BF ? f32_to_bf16_bits(x0) : f32_to_f16_bits(x0);
            const unsigned short u = BF ? f32_to_bf16_bits(x1) : f32_to_f16_bits(x1);
            h[i] = (unsigned int)l | ((unsigned int)u << 16);
        }
        out[g] = make_uint4(h[0], h[1], h[2], h[3]);
    }
}

#define PACK16_FLAT_KERNEL(name, BF, GELU)                                                                       \
    extern "C" __global__ void name(const __grid_constant__ TensorArg a, const __grid_constant__ TensorArg dst) { \
        pack16_flat<BF, GELU>(a, dst);                                                                           \
    }

// As pack16_flat<BF, true> for a packed f16 tensor (a multiple of 8 values on a 16-byte
// boundary) whose GELU_ERF is taken in f16, as a GELU_ERF node of f16 values gives it, then
// widened to f32 for the product: each value's GELU rounded to f16, then (for bf16) to bf16.
template <bool BF> __device__ void pack16_flat_gelu_f16(const TensorArg &a, const TensorArg &dst) {
    await_prior_kernel();
    const long long groups = a.ne[0] * a.ne[1] * a.ne[2] * a.ne[3] / 8;
    const uint4 *in = (const uint4 *)a.data;
    uint4 *out = (uint4 *)dst.data;
    for (long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x; g < groups;
         g += (long long)gridDim.x * blockDim.x) {
        const uint4 x = __ldcs(in + g);
        const unsigned int w[4] = {x.x, x.y, x.z, x.w};
        unsigned int h[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            unsigned short y[2];
#pragma unroll
            for (int j = 0; j < 2; j++) {
                y[j] = f32_to_f16_bits(gelu_erf_f32(f16_bits_to_f32((unsigned short)(w[i] >> (16 * j)))));
                if constexpr (BF) {
                    y[j] = f32_to_bf16_bits(f16_bits_to_f32(y[j]));
                }
            }
            h[i] = (unsigned int)y[0] | ((unsigned int)y[1] << 16);
        }
        out[g] = make_uint4(h[0], h[1], h[2], h[3]);
    }
}

#define PACK16_FLAT_GELU_F16_KERNEL(name, BF)                                                                    \
    extern "C" __global__ void name(const __grid_constant__ TensorArg a, const __grid_constant__ TensorArg dst) { \
        pack16_flat_gelu_f16<BF>(a, dst);                                                                        \
    }

PACK16_FLAT_KERNEL(pack_flat_f32_f16, false, false)
PACK16_FLAT_KERNEL(pack_flat_f32_bf16, true, false)
PACK16_FLAT_KERNEL(pack_flat_gelu_erf_f32_f16, false, true)
PACK16_FLAT_KERNEL(pack_flat_gelu_erf_f32_bf16, true, true)
PACK16_FLAT_GELU_F16_KERNEL(pack_flat_gelu_erf_f16_f16, false)
PACK16_FLAT_GELU_F16_KERNEL(pack_flat_gelu_erf_f16_bf16, true)

PACK16_KERNEL(pack_f32_f16, F32Row, false)
PACK16_KERNEL(pack_f32_bf16, F32Row, true)
PACK16_GELU_KERNEL(pack_gelu_erf_f32_f16, false)
PACK16_GELU_KERNEL(pack_gelu_erf_f32_bf16, true)
PACK16_KERNEL(dequantize_f16_q8_0, Block32Row<Q8_0>, false)
PACK16_KERNEL(dequantize_f16_q4_0, Block32Row<Q4_0>, false)
PACK16_KERNEL(dequantize_f16_q4_1, Block32Row<Q4_1>, false)
PACK16_KERNEL(dequantize_f16_q5_0, Block32Row<Q5_0>, false)
PACK16_KERNEL(dequantize_f16_q5_1, Block32Row<Q5_1>, false)
PACK16_KERNEL(dequantize_f16_q2_K, KQuantRow<Q2_K>, false)
PACK16_KERNEL(dequantize_f16_q3_K, KQuantRow<Q3_K>, false)
PACK16_KERNEL(dequantize_f16_q4_K, KQuantRow<Q4_K>, false)
PACK16_KERNEL(dequantize_f16_q5_K, KQuantRow<Q5_K>, false)
PACK16_KERNEL(dequantize_f16_q6_K, KQuantRow<Q6_K>, false)
