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
// Grid: x over blocks of MMVT_THREADS values of i, y and z over b2 and b3 (at most 65535 each,
// validated by the launcher).
#include "common.cuh"

#define MMVT_THREADS 128

extern "C" __global__ void __launch_bounds__(MMVT_THREADS) mul_mat_vec_t_f32(const __grid_constant__ TensorArg x,
                                                                           const __grid_constant__ TensorArg b,
                                                                           const __grid_constant__ TensorArg dst) {
    await_prior_kernel();
    const long long i = (long long)blockIdx.x * MMVT_THREADS + threadIdx.x;
    if (i >= x.ne[1]) {
        return;
    }
    const long long j2 = blockIdx.y, j3 = blockIdx.z;
    const long long r2 = b.ne[2] / x.ne[2], r3 = b.ne[3] / x.ne[3];
    const char *col = (const char *)x.data + 4 * i + (j2 / r2) * x.nb[2] + (j3 / r3) * x.nb[3];
    const char *bcol = (const char *)b.data + j2 * b.nb[2] + j3 * b.nb[3];
    float sum = 0.0f;
#pragma unroll 8
    for (long long k = 0; k < x.ne[0]; k++) {
        sum = fmaf(*(const float *)(col + k * x.nb[0]), *(const float *)(bcol + k * b.nb[0]), sum);
    }
    *(float *)((char *)dst.data + i * dst.nb[0] + j2 * dst.nb[2] + j3 * dst.nb[3]) = sum;
}
