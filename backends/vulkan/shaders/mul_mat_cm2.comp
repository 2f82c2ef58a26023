// MUL_MAT on tensor cores through workgroup-scope cooperative matrices
// (VK_NV_cooperative_matrix2): dst[m, n] = sum_k a[k, m] * b[k, n] for f16 (or, with BF16,
// bf16) weights `a` and f32 activations `b` (rounded to the weights' type as they are
// loaded), accumulated in f32.
//
// A workgroup computes the transpose of a TN x TM block of dst: TN columns of b (the left
// operand, rows of k) times TM rows of a (the right operand, read through a transposed
// view), so the accumulator's rows are dst's rows over n and it stores without a transpose.
// Loads and stores go through tensor layouts and the driver stages them through shared
// memory. Blocks inside the matrices take layouts without bounds checks, whose strides and
// sizes are masked to the multiples of 16 bytes the backend guarantees: the driver uses that
// alignment (on an H200, 199 against 86 TFLOPS at 4096^3). Blocks at the edges take clamped
// layouts (zeros past the ends, stores past them dropped).
//
// dst is [M, N, b2, b3]; a is [K, M, a2, a3] and repeats over b's dims 2 and 3. Every
// tensor's base and rows are 16-byte aligned and K is a multiple of 8 (the backend checks).
//
// variant: 128x256 TN=128 TM=256
// variant: 128x128 TN=128 TM=128
// variant: bf16_128x256 TN=128 TM=256 BF16=1
// variant: bf16_128x128 TN=128 TM=128 BF16=1
// target: vulkan1.3
#include "version.glsl"
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int32 : require
#extension GL_EXT_control_flow_attributes : require
#ifdef BF16
#extension GL_EXT_bfloat16 : require
#define ELEM bfloat16_t
#else
#define ELEM float16_t
#endif
#include "common.glsl"

#ifndef TN
#define TN 128
#define TM 128
#endif
// Steps of 32 values of k (16 and 64 measured slower), unrolled 8 at a time so the driver
// can load ahead of the products.
#define BK 32
#define UNROLL 8

layout(local_size_x = 256) in;

layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer F16Array { float16_t v[]; };
layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer F32Array { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 16) buffer F32Out { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer F32One { float v; };

// b's f32 values rounded to the weights' type as the left operand is loaded.
ELEM f32_to_elem(const in F32One p, const in uint32_t block[2], const in uint32_t inner[2]) {
    return ELEM(p.v);
}

#define LEFT coopmat<ELEM, gl_ScopeWorkgroup, TN, BK, gl_MatrixUseA>
#define RIGHT coopmat<ELEM, gl_ScopeWorkgroup, BK, TM, gl_MatrixUseB>
#define ACC coopmat<float, gl_ScopeWorkgroup, TN, TM, gl_MatrixUseAccumulator>

// One step of k over the layouts `la` (a) and `lb` (b).
#define STEP(la, lb)                                                                                     \
    {                                                                                                    \
        LEFT left;                                                                                       \
        RIGHT right;                                                                                     \
        coopMatLoadTensorNV(left, F32Array(b_base).v, 0, sliceTensorLayoutNV(lb, n0, TN, k0, BK), f32_to_elem); \
        coopMatLoadTensorNV(right, F16Array(a_base).v, 0, sliceTensorLayoutNV(la, m0, TM, k0, BK), transposed); \
        acc = coopMatMulAdd(left, right, acc);                                                           \
        k0 += BK;                                                                                        \
    }
#define PRODUCT(la, lb)                                                                                  \
    uint k0 = 0;                                                                                         \
    while (k0 + UNROLL * BK <= K) {                                                                      \
        [[unroll]] for (uint u = 0; u < UNROLL; u++) STEP(la, lb)                                        \
    }                                                                                                    \
    while (k0 < K) STEP(la, lb)

// `x` with its low bits cleared: the same value where it is a multiple of `n`, and the
// driver then knows it is.
#define MULTIPLE(x, n) ((x) & ~((n) - 1u))

void main() {
    Tensor dst = pc.args.dst;
    Tensor a = pc.args.src[0];
    Tensor b = pc.args.src[1];
    uint K = a.ne[0];
    uint M = a.ne[1];
    uint N = b.ne[1];
    uint m0 = gl_WorkGroupID.x * TM;
    uint n0 = gl_WorkGroupID.y * TN;
    uint i2 = gl_WorkGroupID.z % dst.ne[2];
    uint i3 = gl_WorkGroupID.z / dst.ne[2];
    uint64_t a_base = a.data + uint64_t(i2 / (dst.ne[2] / a.ne[2])) * a.nb[2] + uint64_t(i3 / (dst.ne[3] / a.ne[3])) * a.nb[3];
    uint64_t b_base = b.data + uint64_t(i2) * b.nb[2] + uint64_t(i3) * b.nb[3];
    uint64_t d_base = dst.data + uint64_t(i2) * dst.nb[2] + uint64_t(i3) * dst.nb[3];

    tensorViewNV<2, false, 1, 0> transposed = createTensorViewNV(2, false, 1, 0);
    ACC acc = ACC(0.0);
    if (m0 + TM <= M && n0 + TN <= N && K % BK == 0) {
        tensorLayoutNV<2> la = createTensorLayoutNV(2);
        la = setTensorLayoutDimensionNV(la, M, MULTIPLE(K, 8u));
        la = setTensorLayoutStrideNV(la, MULTIPLE(uint(a.nb[1] / 2), 8u), 1);
        tensorLayoutNV<2> lb = createTensorLayoutNV(2);
        lb = setTensorLayoutDimensionNV(lb, N, MULTIPLE(K, 4u));
        lb = setTensorLayoutStrideNV(lb, MULTIPLE(uint(b.nb[1] / 4), 4u), 1);
        PRODUCT(la, lb)
    } else {
        tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> la =
            createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
        la = setTensorLayoutDimensionNV(la, M, K);
        la = setTensorLayoutStrideNV(la, uint(a.nb[1] / 2), 1);
        tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lb =
            createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
        lb = setTensorLayoutDimensionNV(lb, N, K);
        lb = setTensorLayoutStrideNV(lb, uint(b.nb[1] / 4), 1);
        PRODUCT(la, lb)
    }

    tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> ld =
        createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    ld = setTensorLayoutDimensionNV(ld, N, M);
    ld = setTensorLayoutStrideNV(ld, uint(dst.nb[1] / 4), 1);
    coopMatStoreTensorNV(acc, F32Out(d_base).v, 0, sliceTensorLayoutNV(ld, n0, TN, m0, TM));
}
