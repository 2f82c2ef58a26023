// A product by one column whose weights are the copy (CONT) of a transposed view, computed from
// the view's source as it lies: a BERT graph's mean pooling, where the hidden states [h, n]
// are transposed to [n, h] and copied only so that MUL_MAT sums over the tokens.
//
// dst[i, 0, j2, j3] = sum_k x[k, i, j2 / r2, j3 / r3] * b[k, 0, j2, j3], with x: [K, M, x2, x3]
// F32 whose values along i are packed (nb[1] = 4: the transposed view of packed rows), b:
// [K, 1, b2, b3] F32, dst: [M, 1, b2, b3] F32. A thread per i sums over k in order with f32
// fused multiply-adds; the threads of a warp read 32 neighbouring values of x each step (one
// row of the source), so x is read once, coalesced, instead of copied and read again.
//
// mul_mat_vec_t_f16 takes F16 x (BERT's hidden states in reduced precision): a thread per two
// neighbouring values of i, read as one half2 (M even, x's address and strides multiples of 4,
// validated by the launcher), so that a warp again reads 128 bytes of a row each step; each
// value's sum is the f32 kernel's over x widened.
//
// Grid: x over blocks of MMVT_THREADS threads, y and z over b2 and b3 (at most 65535 each,
// validated by the launcher).
#include "common.cuh"

#define MMVT_THREADS 128

// Where thread `i`'s values of x (ELEMENT bytes each, packed along i), b's column and dst's values
// of matrix (j2, j3) lie.
template <int ELEMENT> struct TransposedColumn {
    const char *x, *b;
    char *dst;
    __device__ TransposedColumn(const TensorArg &xa, const TensorArg &ba, const TensorArg &da, long long i) {
        const long long j2 = blockIdx.y, j3 = blockIdx.z;
        const long long r2 = ba.ne[2] / xa.ne[2], r3 = ba.ne[3] / xa.ne[3];
        x = (const char *)xa.data + ELEMENT * i + (j2 / r2) * xa.nb[2] + (j3 / r3) * xa.nb[3];
        b = (const char *)ba.data + j2 * ba.nb[2] + j3 * ba.nb[3];
        dst = (char *)da.data + i * da.nb[0] + j2 * da.nb[2] + j3 * da.nb[3];
    }
};

extern "C" __global__ void __launch_bounds__(MMVT_THREADS) mul_mat_vec_t_f32(const __grid_constant__ TensorArg x,
                                                                           const __grid_constant__ TensorArg b,
                                                                           const __grid_constant__ TensorArg dst) {
    await_prior_kernel();
    const long long i = (long long)blockIdx.x * MMVT_THREADS + threadIdx.x;
    if (i >= x.ne[1]) {
        return;
    }
    const TransposedColumn<4> at(x, b, dst, i);
    float sum = 0.0f;
#pragma unroll 8
    for (long long k = 0; k < x.ne[0]; k++) {
        sum = fmaf(*(const float *)(at.x + k * x.nb[0]), *(const float *)(at.b + k * b.nb[0]), sum);
    }
    *(float *)at.dst = sum;
}

extern "C" __global__ void __launch_bounds__(MMVT_THREADS) mul_mat_vec_t_f16(const __grid_constant__ TensorArg x,
                                                                           const __grid_constant__ TensorArg b,
                                                                           const __grid_constant__ TensorArg dst) {
    await_prior_kernel();
    const long long i = 2 * ((long long)blockIdx.x * MMVT_THREADS + threadIdx.x);
    if (i >= x.ne[1]) {
        return;
    }
    const TransposedColumn<2> at(x, b, dst, i);
    float2 sum = make_float2(0.0f, 0.0f);
#pragma unroll 8
    for (long long k = 0; k < x.ne[0]; k++) {
        const float2 v = __half22float2(*(const __half2 *)(at.x + k * x.nb[0]));
        const float w = *(const float *)(at.b + k * b.nb[0]);
        sum.x = fmaf(v.x, w, sum.x);
        sum.y = fmaf(v.y, w, sum.y);
    }
    *(float *)at.dst = sum.x;
    *(float *)(at.dst + dst.nb[0]) = sum.y;
}
