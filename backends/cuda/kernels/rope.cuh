// ROPE's rotation of one pair, shared by the ROPE kernels (rope.cu) and the matrix-vector
// kernels that rotate their results as they store them (mul_mat_vec.cuh), so that both give
// the same bits:
//
//   theta_k = freq_scale * pos * freq_base^(-2k / n_dims)
//   (a, b) -> (a cos theta_k - b sin theta_k, a sin theta_k + b cos theta_k)
//
// as the reference computes it (reference/src/kernels/rope.rs): the power, sine and cosine are
// evaluated in f64 and rounded to f32 (the reference's libm is accurate to well under an ulp);
// every f32 operation is rounded on its own, as in Rust. The powers depend only on the node, so
// the host computes them the same way and passes them (`RopePowers`, for up to 64 pairs).
#pragma once

#include "common.cuh"

// freq_base^(-2k / n_dims) for the first `count` pairs k (the rest are computed here).
struct RopePowers {
    float p[64];
    int count;
};

// cos theta_k and sin theta_k of pair k at `position`.
__device__ __forceinline__ void rope_cos_sin(float position, long long k, long long n_dims, float freq_base,
                                             float freq_scale, const RopePowers &powers, float &cos_t, float &sin_t) {
    float power;
    if (k < powers.count) {
        power = powers.p[k];
    } else {
        const float exponent = __fdiv_rn(-(float)(2 * k), (float)n_dims);
        power = (float)pow((double)freq_base, (double)exponent);
    }
    const float theta = __fmul_rn(__fmul_rn(freq_scale, position), power);
    double sin_d, cos_d;
    sincos((double)theta, &sin_d, &cos_d);
    sin_t = (float)sin_d;
    cos_t = (float)cos_d;
}

// The first value of the rotated pair (x0, x1).
__device__ __forceinline__ float rope_first(float x0, float x1, float cos_t, float sin_t) {
    return __fsub_rn(__fmul_rn(x0, cos_t), __fmul_rn(x1, sin_t));
}

// The second value of the rotated pair (x0, x1).
__device__ __forceinline__ float rope_second(float x0, float x1, float cos_t, float sin_t) {
    return __fadd_rn(__fmul_rn(x0, sin_t), __fmul_rn(x1, cos_t));
}
