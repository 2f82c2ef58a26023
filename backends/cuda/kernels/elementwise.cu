// Element-wise kernels: ADD, SUB, MUL, DIV with the second operand repeated over the first, and
// the functions of one operand (SQR ... TANH, and SCALE). Values are computed in f32 and
// written in the destination's type, which is the first operand's.
//
// Launch: 2-D blocks (x over dimension 0, y over rows), grid-strided over the destination's
// rows; binary_f32_packed runs on 1-D blocks, grid-strided over float4s.
#include "common.cuh"

// Binary op codes (the Rust side's `BinaryOp` in this order).
#define OP_ADD 0
#define OP_SUB 1
#define OP_MUL 2
#define OP_DIV 3

__device__ __forceinline__ float binary_fn(int op, float x, float y) {
    switch (op) {
    case OP_ADD:
        return x + y;
    case OP_SUB:
        return x - y;
    case OP_MUL:
        return x * y;
    default:
        return x / y;
    }
}

// `dst = a op b`, row (i1, i2, i3) of `a` with row (i1 % b1, i2 % b2, i3 % b3) of `b`, value
// i0 of `a` with value i0 % b0 of `b`.
template <typename A, typename B>
__device__ void binary(const TensorArg &a, const TensorArg &b, const TensorArg &dst, int op) {
    const long long ne0 = dst.ne[0], bne0 = b.ne[0];
    FOR_EACH_ROW(row, nrows_of(dst)) {
        long long i1, i2, i3;
        unravel_row(row, dst.ne[1], dst.ne[2], i1, i2, i3);
        const char *arow = row_ptr(a, i1, i2, i3);
        const char *brow = row_ptr(b, mod64(i1, b.ne[1]), mod64(i2, b.ne[2]), mod64(i3, b.ne[3]));
        char *drow = row_ptr(dst, i1, i2, i3);
        FOR_EACH_I0(i0, ne0) {
            const float x = A::load(arow, i0, a.nb[0]);
            const float y = B::load(brow, bne0 == ne0 ? i0 : mod64(i0, bne0), b.nb[0]);
            A::store(drow, i0, dst.nb[0], binary_fn(op, x, y));
        }
    }
}

// Float4s each thread of binary_f32_packed takes per iteration (one grid apart): as many
// 16-byte loads of each operand in flight.
#define BINARY_PACKED_UNROLL 4

// `dst = a op b` for f32 operands the launcher found packed (each one run of values) and
// 16-byte aligned, with rows of a multiple of 4 values, and `b` either of `a`'s shape or one
// row repeated over all rows of `a`: float4 number i of `a` with float4 number i % (b's count)
// of `b`. The same f32 operations as `binary`, so the same results.
extern "C" __global__ void binary_f32_packed(const __grid_constant__ TensorArg a, const __grid_constant__ TensorArg b,
                                             const __grid_constant__ TensorArg dst, int op) {
    await_prior_kernel();
    const float4 *a4 = (const float4 *)a.data;
    const float4 *b4 = (const float4 *)b.data;
    float4 *d4 = (float4 *)dst.data;
    const long long n4 = nrows_of(dst) * dst.ne[0] / 4, bn4 = nrows_of(b) * b.ne[0] / 4;
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += step * BINARY_PACKED_UNROLL) {
        float4 x[BINARY_PACKED_UNROLL], y[BINARY_PACKED_UNROLL];
#pragma unroll
        for (int u = 0; u < BINARY_PACKED_UNROLL; u++) {
            const long long j = i + u * step;
            if (j < n4) {
                x[u] = a4[j];
                y[u] = b4[bn4 == n4 ? j : mod64(j, bn4)];
            }
        }
#pragma unroll
        for (int u = 0; u < BINARY_PACKED_UNROLL; u++) {
            const long long j = i + u * step;
            if (j < n4) {
                d4[j] = make_float4(binary_fn(op, x[u].x, y[u].x), binary_fn(op, x[u].y, y[u].y),
                                    binary_fn(op, x[u].z, y[u].z), binary_fn(op, x[u].w, y[u].w));
            }
        }
    }
}

// Unary op codes (the Rust side's `UnaryOp::ALL` in this order, then SCALE).
#define UOP_SQR 0
#define UOP_SQRT 1
#define UOP_NEG 2
#define UOP_ABS 3
#define UOP_EXP 4
#define UOP_RELU 5
#define UOP_GELU 6
#define UOP_GELU_ERF 7
#define UOP_SILU 8
#define UOP_SIGMOID 9
#define UOP_TANH 10
#define UOP_SCALE 11

// The reference's formulas (reference/src/kernels/elementwise.rs), in f32.
__device__ __forceinline__ float unary_fn(int op, float x, float s) {
    // sqrt(2/pi) as the reference computes it: (2/sqrt(pi)) * (1/sqrt(2)), rounded in f32.
    const float sqrt_2_over_pi = 1.12837916709551257390f * 0.70710678118654752440f;
    switch (op) {
    case UOP_SQR:
        return x * x;
    case UOP_SQRT:
        return sqrtf(x);
    case UOP_NEG:
        return -x;
    case UOP_ABS:
        return fabsf(x);
    case UOP_EXP:
        return expf(x);
    case UOP_RELU:
        return x > 0.0f ? x : 0.0f;
    case UOP_GELU:
        return 0.5f * x * (1.0f + tanhf(sqrt_2_over_pi * (x + 0.044715f * x * x * x)));
    case UOP_GELU_ERF:
        return gelu_erf_f32(x);
    case UOP_SILU:
        return silu_f32(x);
    case UOP_SIGMOID:
        return 1.0f / (1.0f + expf(-x));
    case UOP_TANH:
        return tanhf(x);
    default:
        return x * s;
    }
}

// `dst = f(src)` value by value; `s` is SCALE's factor.
template <typename T>
__device__ void unary(const TensorArg &src, const TensorArg &dst, int op, float s) {
    const long long ne0 = dst.ne[0];
    FOR_EACH_ROW(row, nrows_of(dst)) {
        long long i1, i2, i3;
        unravel_row(row, dst.ne[1], dst.ne[2], i1, i2, i3);
        const char *srow = row_ptr(src, i1, i2, i3);
        char *drow = row_ptr(dst, i1, i2, i3);
        FOR_EACH_I0(i0, ne0) {
            T::store(drow, i0, dst.nb[0], unary_fn(op, T::load(srow, i0, src.nb[0]), s));
        }
    }
}

// 16 bytes of packed values taken through a unary op: 4 f32 values, or 8 f16 values (each
// through the same f32 operations, rounded back to f16).
struct UnaryF32x4 {
    using V = uint4;
    static constexpr int N = 4;
    __device__ __forceinline__ static V apply(V x, int op, float s) {
        return make_uint4(__float_as_uint(unary_fn(op, __uint_as_float(x.x), s)),
                          __float_as_uint(unary_fn(op, __uint_as_float(x.y), s)),
                          __float_as_uint(unary_fn(op, __uint_as_float(x.z), s)),
                          __float_as_uint(unary_fn(op, __uint_as_float(x.w), s)));
    }
};

struct UnaryF16x8 {
    using V = uint4;
    static constexpr int N = 8;
    __device__ __forceinline__ static V apply(V x, int op, float s) {
        unsigned int w[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const float lo = unary_fn(op, f16_bits_to_f32((unsigned short)(w[k] & 0xffffu)), s);
            const float hi = unary_fn(op, f16_bits_to_f32((unsigned short)(w[k] >> 16)), s);
            w[k] = (unsigned int)f32_to_f16_bits(lo) | ((unsigned int)f32_to_f16_bits(hi) << 16);
        }
        return make_uint4(w[0], w[1], w[2], w[3]);
    }
};

// `dst = f(src)` for tensors the launcher found packed and 16-byte aligned, with a multiple of
// P::N values: 16-byte piece i of `src` into piece i of `dst`, BINARY_PACKED_UNROLL loads in
// flight per thread. The same f32 operations as `unary`, so the same results.
template <typename P>
__device__ void unary_packed(const TensorArg &src, const TensorArg &dst, int op, float s) {
    const typename P::V *a = (const typename P::V *)src.data;
    typename P::V *d = (typename P::V *)dst.data;
    const long long n = nrows_of(dst) * dst.ne[0] / P::N;
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step * BINARY_PACKED_UNROLL) {
        typename P::V x[BINARY_PACKED_UNROLL];
#pragma unroll
        for (int u = 0; u < BINARY_PACKED_UNROLL; u++) {
            const long long j = i + u * step;
            if (j < n) {
                x[u] = a[j];
            }
        }
#pragma unroll
        for (int u = 0; u < BINARY_PACKED_UNROLL; u++) {
            const long long j = i + u * step;
            if (j < n) {
                d[j] = P::apply(x[u], op, s);
            }
        }
    }
}

extern "C" __global__ void unary_f32_packed(const __grid_constant__ TensorArg src, const __grid_constant__ TensorArg dst,
                                            int op, float s) {
    await_prior_kernel();
    unary_packed<UnaryF32x4>(src, dst, op, s);
}

extern "C" __global__ void unary_f16_packed(const __grid_constant__ TensorArg src, const __grid_constant__ TensorArg dst,
                                            int op, float s) {
    await_prior_kernel();
    unary_packed<UnaryF16x8>(src, dst, op, s);
}

#define BINARY_KERNEL(name, A, B)                                                                                \
    extern "C" __global__ void name(const __grid_constant__ TensorArg a, const __grid_constant__ TensorArg b,    \
                                    const __grid_constant__ TensorArg dst, int op) {                             \
        await_prior_kernel();                                                                                    \
        binary<A, B>(a, b, dst, op);                                                                             \
    }
#define UNARY_KERNEL(name, T)                                                                                    \
    extern "C" __global__ void name(const __grid_constant__ TensorArg src, const __grid_constant__ TensorArg dst, \
                                    int op, float s) {                                                           \
        await_prior_kernel();                                                                                    \
        unary<T>(src, dst, op, s);                                                                               \
    }

BINARY_KERNEL(binary_f32_f32, F32, F32)
BINARY_KERNEL(binary_f32_f16, F32, F16)
BINARY_KERNEL(binary_f32_bf16, F32, BF16)
BINARY_KERNEL(binary_f16_f32, F16, F32)
BINARY_KERNEL(binary_f16_f16, F16, F16)
BINARY_KERNEL(binary_f16_bf16, F16, BF16)
BINARY_KERNEL(binary_bf16_f32, BF16, F32)
BINARY_KERNEL(binary_bf16_f16, BF16, F16)
BINARY_KERNEL(binary_bf16_bf16, BF16, BF16)

UNARY_KERNEL(unary_f32, F32)
UNARY_KERNEL(unary_f16, F16)
UNARY_KERNEL(unary_bf16, BF16)
