// Shared definitions of tessera's CUDA kernels: the tensor argument every kernel takes, the
// element types with their loads and stores (bit-exact with tessera-core's conversions and
// quantizers), index helpers and block reductions.
//
// Conventions of every kernel file:
// - Entry points are `extern "C"` and take tensors as `TensorArg` by value; each is written as
//   one line `<FAMILY>_KERNEL(name, ...)` or `extern "C" __global__ void name(`, so that the
//   Rust module table (backends/cuda/src/kernels/modules.rs) can be checked against the sources.
// - All index math is 64-bit (`long long`); 32-bit division is used only where every operand
//   is known to fit.
// - Element-wise kernels run on 2-D blocks: `threadIdx.x` walks dimension 0 of a row,
//   `threadIdx.y` picks one of `blockDim.y` rows, grid x strides over all rows and grid y over
//   pieces of dimension 0, so that a few long rows still fill the GPU
//   (`FOR_EACH_ROW` / `FOR_EACH_I0`). Row kernels (reductions) run one block per row.
// - Nothing here relies on fast-math: the build keeps IEEE division and square root, and the
//   quantizers use explicitly rounded operations so that no multiply-add is contracted.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

// A tensor as the kernels see it: the device address of its first value, the number of values
// along each dimension and the byte stride of each dimension (for quantized types `nb[0]` is
// the block size). The same layout as `TensorArg` in backends/cuda/src/kernels/arg.rs.
struct TensorArg {
    unsigned long long data;
    long long ne[4];
    long long nb[4];
};

static_assert(sizeof(TensorArg) == 72, "TensorArg must match the Rust struct");

// Values per quantized block and bytes of one block (ggml's layouts, tessera-core's quant.rs).
#define QK 32
#define Q8_0_BYTES 34
#define Q4_0_BYTES 18

// Programmatic dependent launch. On compute capability 9.0 and later the launcher lets each
// kernel start while the kernel before it on the stream is still running, so that launching and
// scheduling blocks overlap the previous kernel's tail. Every entry point therefore begins with
// this wait: it returns once the previous kernel has finished and its writes are visible, before
// any memory is read or written. It then lets the next kernel be launched at once. On older
// devices the launcher does not overlap kernels and both instructions are absent.
__device__ __forceinline__ void await_prior_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// GELU in its erf form (the reference's formula, in f32): GELU_ERF's values, and those its
// fusions into the product after it compute.
__device__ __forceinline__ float gelu_erf_f32(float x) {
    const float frac_1_sqrt_2 = 0.70710678118654752440f;
    return 0.5f * x * (1.0f + erff(x * frac_1_sqrt_2));
}

// SILU, x / (1 + exp(-x)) as the reference computes it in f32 but with a fast division (the
// unary kernel and the fused SwiGLU products): the IEEE division held SILU at 2.3 TB/s on an
// H200, where GELU ran at 3.6. It is within 2 ulp, and 0 (not a denormal) below about -87.
__device__ __forceinline__ float silu_f32(float x) {
    return __fdividef(x, 1.0f + expf(-x));
}

// Activations quantized for the matrix-vector products (mul_mat_vec.cu), and by the norms that
// feed them (rows_packed.cu): Q8_1 blocks of 32 values, d = max|x| / 127, q = round(x / d), and
// s = d * sum(q) (which the q4_0 product needs for the weights' offset of 8). 40 bytes, 8-byte
// aligned.
struct Q8_1 {
    float d;
    float s;
    int qs[8];
};

static_assert(sizeof(Q8_1) == 40, "Q8_1 must match Q8_1_BYTES in mul_mat.rs");

// ---------------------------------------------------------------------------------------------
// Conversions, bit-exact with the `half` crate and Rust's `as` casts.

// f32 -> f16, round to nearest even; NaN keeps its sign and top payload bits and is made quiet.
__device__ __forceinline__ unsigned short f32_to_f16_bits(float v) {
    const unsigned int x = __float_as_uint(v);
    if ((x & 0x7fffffffu) > 0x7f800000u) {
        return (unsigned short)(((x >> 16) & 0x8000u) | 0x7c00u | 0x0200u | ((x & 0x007fffffu) >> 13));
    }
    return __half_as_ushort(__float2half_rn(v));
}

__device__ __forceinline__ float f16_bits_to_f32(unsigned short h) {
    return __half2float(__ushort_as_half(h));
}

// f32 -> bf16, round to nearest even; NaN keeps its top bits and is made quiet.
__device__ __forceinline__ unsigned short f32_to_bf16_bits(float v) {
    const unsigned int x = __float_as_uint(v);
    if ((x & 0x7fffffffu) > 0x7f800000u) {
        return (unsigned short)((x >> 16) | 0x0040u);
    }
    const unsigned int round_bit = 0x00008000u;
    if ((x & round_bit) != 0 && (x & (3u * round_bit - 1u)) != 0) {
        return (unsigned short)((x >> 16) + 1u);
    }
    return (unsigned short)(x >> 16);
}

// Two values rounded as f32_to_bf16_bits (BF) or f32_to_f16_bits round them, `lo` in the low
// half: one conversion instruction (round to nearest even, as they do), unless one is NaN,
// whose payload the instruction would not keep.
template <bool BF> __device__ __forceinline__ unsigned int f32x2_to_16x2_bits(float lo, float hi) {
    if (lo != lo || hi != hi) {
        const unsigned int l = BF ? f32_to_bf16_bits(lo) : f32_to_f16_bits(lo);
        const unsigned int h = BF ? f32_to_bf16_bits(hi) : f32_to_f16_bits(hi);
        return l | (h << 16);
    }
    unsigned int r;
    if constexpr (BF) {
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    } else {
        asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    }
    return r;
}

__device__ __forceinline__ float bf16_bits_to_f32(unsigned short h) {
    return __uint_as_float(((unsigned int)h) << 16);
}

// Rust's `v as i32`: truncation toward zero, saturating, NaN -> 0.
__device__ __forceinline__ int f32_to_i32_sat(float v) {
    if (v != v) {
        return 0;
    }
    if (v >= 2147483648.0f) {
        return 2147483647;
    }
    if (v <= -2147483648.0f) {
        return (int)(-2147483647 - 1);
    }
    return (int)v;
}

// ---------------------------------------------------------------------------------------------
// Element types. `load(row, i0, nb0)` reads value `i0` of a row as f32; for plain types `store`
// writes one value. Quantized rows are read value by value (dequantized) and written a whole
// block at a time (`quantize`).

struct F32 {
    __device__ __forceinline__ static float load(const char *row, long long i0, long long nb0) {
        return *(const float *)(row + i0 * nb0);
    }
    __device__ __forceinline__ static void store(char *row, long long i0, long long nb0, float v) {
        *(float *)(row + i0 * nb0) = v;
    }
};

struct F16 {
    __device__ __forceinline__ static float load(const char *row, long long i0, long long nb0) {
        return f16_bits_to_f32(*(const unsigned short *)(row + i0 * nb0));
    }
    __device__ __forceinline__ static void store(char *row, long long i0, long long nb0, float v) {
        *(unsigned short *)(row + i0 * nb0) = f32_to_f16_bits(v);
    }
};

struct BF16 {
    __device__ __forceinline__ static float load(const char *row, long long i0, long long nb0) {
        return bf16_bits_to_f32(*(const unsigned short *)(row + i0 * nb0));
    }
    __device__ __forceinline__ static void store(char *row, long long i0, long long nb0, float v) {
        *(unsigned short *)(row + i0 * nb0) = f32_to_bf16_bits(v);
    }
};

// I32 read as a number (`as f32`, round to nearest even) and written truncated and saturated.
struct I32 {
    __device__ __forceinline__ static float load(const char *row, long long i0, long long nb0) {
        return (float)*(const int *)(row + i0 * nb0);
    }
    __device__ __forceinline__ static void store(char *row, long long i0, long long nb0, float v) {
        *(int *)(row + i0 * nb0) = f32_to_i32_sat(v);
    }
};

// Q8_0: an f16 scale d and 32 int8 q; value = q * d. Quantizing: d = max|x| / 127,
// q = round(x / d) (half away from zero, via x * (1/d)), saturated to int8 (NaN -> 0).
struct Q8_0 {
    static constexpr int block_bytes = Q8_0_BYTES;
    __device__ __forceinline__ static float load(const char *row, long long i0, long long) {
        const char *block = row + (i0 / QK) * Q8_0_BYTES;
        const float d = f16_bits_to_f32(*(const unsigned short *)block);
        const signed char q = (signed char)block[2 + (int)(i0 % QK)];
        return (float)q * d;
    }
    __device__ __forceinline__ static void quantize(const float *x, char *block) {
        float amax = 0.0f;
#pragma unroll
        for (int j = 0; j < QK; j++) {
            amax = fmaxf(amax, fabsf(x[j]));
        }
        const float d = __fdiv_rn(amax, 127.0f);
        const float id = d != 0.0f ? __frcp_rn(d) : 0.0f;
        *(unsigned short *)block = f32_to_f16_bits(d);
#pragma unroll
        for (int j = 0; j < QK; j++) {
            const float r = roundf(__fmul_rn(x[j], id));
            int q = 0;
            if (r == r) {
                q = (int)fminf(fmaxf(r, -128.0f), 127.0f);
            }
            block[2 + j] = (char)(signed char)q;
        }
    }
};

// Q4_0: an f16 scale d and 16 bytes; byte j holds value j (low nibble) and value j + 16 (high
// nibble); value = (nibble - 8) * d. Quantizing: m = the value of largest magnitude (the first
// one, sign kept), d = m / -8, nibble = min(15, trunc(x * (1/d) + 8.5)) (saturating, NaN -> 0).
struct Q4_0 {
    static constexpr int block_bytes = Q4_0_BYTES;
    __device__ __forceinline__ static float load(const char *row, long long i0, long long) {
        const char *block = row + (i0 / QK) * Q4_0_BYTES;
        const float d = f16_bits_to_f32(*(const unsigned short *)block);
        const int j = (int)(i0 % QK);
        const unsigned char b = (unsigned char)block[2 + (j & 15)];
        const int nibble = j < 16 ? (b & 0x0f) : (b >> 4);
        return (float)(nibble - 8) * d;
    }
    __device__ __forceinline__ static int nibble(float v, float id) {
        const int q = f32_to_i32_sat(__fadd_rn(__fmul_rn(v, id), 8.5f));
        return min(max(q, 0), 15);
    }
    __device__ __forceinline__ static void quantize(const float *x, char *block) {
        float amax = 0.0f;
        float m = 0.0f;
#pragma unroll
        for (int j = 0; j < QK; j++) {
            const float a = fabsf(x[j]);
            if (amax < a) {
                amax = a;
                m = x[j];
            }
        }
        const float d = __fdiv_rn(m, -8.0f);
        const float id = d != 0.0f ? __frcp_rn(d) : 0.0f;
        *(unsigned short *)block = f32_to_f16_bits(d);
#pragma unroll
        for (int j = 0; j < QK / 2; j++) {
            block[2 + j] = (char)(nibble(x[j], id) | (nibble(x[j + QK / 2], id) << 4));
        }
    }
};

// ---------------------------------------------------------------------------------------------
// Indexing.

__device__ __forceinline__ char *row_ptr(const TensorArg &t, long long i1, long long i2, long long i3) {
    return (char *)t.data + i1 * t.nb[1] + i2 * t.nb[2] + i3 * t.nb[3];
}

__device__ __forceinline__ long long nrows_of(const TensorArg &t) {
    return t.ne[1] * t.ne[2] * t.ne[3];
}

// Whether row r of `t` (rows numbered in (i1, i2, i3) order) lies at data + r * nb[1], its rows
// evenly spaced across dimensions 2 and 3: then a row's address takes one multiply instead of
// the divisions of `unravel_row`.
__device__ __forceinline__ bool rows_evenly_spaced(const TensorArg &t) {
    const long long s2 = t.ne[1] * t.nb[1];
    return (t.ne[2] == 1 || t.nb[2] == s2) && (t.ne[3] == 1 || t.nb[3] == t.ne[2] * s2);
}

// Splits row number `r` of a tensor with `n1` x `n2` x ... rows into (i1, i2, i3).
__device__ __forceinline__ void unravel_row(long long r, long long n1, long long n2, long long &i1, long long &i2,
                                            long long &i3) {
    if ((((unsigned long long)r) | ((unsigned long long)n1) | ((unsigned long long)n2)) < (1ull << 32)) {
        const unsigned int ur = (unsigned int)r, u1 = (unsigned int)n1, u2 = (unsigned int)n2;
        const unsigned int q = ur / u1;
        i1 = ur - q * u1;
        i2 = q % u2;
        i3 = q / u2;
    } else {
        const long long q = r / n1;
        i1 = r - q * n1;
        i2 = q % n2;
        i3 = q / n2;
    }
}

// Splits the `flat`-th value (row-major order) of a tensor of shape `ne` into its indices.
__device__ __forceinline__ void unravel_flat(long long flat, const long long *ne, long long &i0, long long &i1,
                                             long long &i2, long long &i3) {
    if ((((unsigned long long)flat) | ((unsigned long long)ne[0])) < (1ull << 32)) {
        const unsigned int uf = (unsigned int)flat, u0 = (unsigned int)ne[0];
        const unsigned int r = uf / u0;
        i0 = uf - r * u0;
        unravel_row(r, ne[1], ne[2], i1, i2, i3);
    } else {
        const long long r = flat / ne[0];
        i0 = flat - r * ne[0];
        unravel_row(r, ne[1], ne[2], i1, i2, i3);
    }
}

// `i % n` for 0 <= i, 0 < n, in 32 bits when both fit.
__device__ __forceinline__ long long mod64(long long i, long long n) {
    if ((((unsigned long long)i) | ((unsigned long long)n)) < (1ull << 32)) {
        return (long long)((unsigned int)i % (unsigned int)n);
    }
    return i % n;
}

// q = i / n, r = i % n for 0 <= i, 0 < n, in 32 bits when both fit.
__device__ __forceinline__ void divmod64(long long i, long long n, long long &q, long long &r) {
    if ((((unsigned long long)i) | ((unsigned long long)n)) < (1ull << 32)) {
        const unsigned int uq = (unsigned int)i / (unsigned int)n;
        q = uq;
        r = (long long)((unsigned int)i - uq * (unsigned int)n);
    } else {
        q = i / n;
        r = i - q * n;
    }
}

// Element-wise kernels on 2-D blocks: rows of `nrows`, values of `ne0`.
#define FOR_EACH_ROW(row, nrows)                                                                                 \
    for (long long row = (long long)blockIdx.x * blockDim.y + threadIdx.y; row < (nrows);                        \
         row += (long long)gridDim.x * blockDim.y)
#define FOR_EACH_I0(i0, ne0)                                                                                     \
    for (long long i0 = (long long)blockIdx.y * blockDim.x + threadIdx.x; i0 < (ne0);                            \
         i0 += (long long)gridDim.y * blockDim.x)

// Row kernels: one block (of a multiple of 32 threads, at most 1024) per row, grid-strided.
#define FOR_EACH_BLOCK_ROW(row, nrows) for (long long row = blockIdx.x; row < (nrows); row += gridDim.x)
#define FOR_EACH_THREAD_I0(i0, ne0) for (long long i0 = threadIdx.x; i0 < (ne0); i0 += blockDim.x)

// ---------------------------------------------------------------------------------------------
// Reductions.

__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        v += __shfl_xor_sync(0xffffffffu, v, offset);
    }
    return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        v += __shfl_xor_sync(0xffffffffu, v, offset);
    }
    return v;
}

// The largest value, NaN ignored (as `f32::max`): -inf when all are NaN or -inf.
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    }
    return v;
}

// Sum over the whole block (blockDim.x a multiple of 32, at most 1024, blockDim.y == 1); every
// thread gets the result. `shared` holds 32 values; the block may call this again right away.
__device__ __forceinline__ double block_sum(double v, double *shared) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    v = warp_sum(v);
    __syncthreads(); // the previous use of `shared` is finished
    if (lane == 0) {
        shared[warp] = v;
    }
    __syncthreads();
    v = lane < nwarps ? shared[lane] : 0.0;
    return warp_sum(v);
}

__device__ __forceinline__ float block_max(float v, float *shared) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) {
        shared[warp] = v;
    }
    __syncthreads();
    v = lane < nwarps ? shared[lane] : -INFINITY;
    return warp_max(v);
}
