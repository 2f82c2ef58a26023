// MUL_MAT through cuBLAS: the pointer arrays of a batched GEMM (products of more than 8
// columns, and those the matrix-vector kernels of mul_mat_vec.cu do not take), and K-quant
// weights dequantized to f16 for the f16 GEMM. The launcher converts other operands with the
// CPY kernels where needed.
//
// dst[i, j, i2, i3] = sum_k a[k, i, i2 / r2, i3 / r3] * b[k, j, i2, i3], with a: [K, M, a2, a3],
// b: [K, N, b2, b3], dst: [M, N, b2, b3], and r2 = b2 / a2, r3 = b3 / a3 (the broadcast of a
// over b's matrices).
#include "kquant_low.cuh"

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

// K-quant weights `a` (packed rows, any row strides) dequantized into `dst`, packed f16 of a's
// shape starting on a 16-byte boundary: one warp per super-block, each lane 8 consecutive
// values written as one 16-byte store (the CPY kernels write 2 bytes a thread and decode a
// block's scales for every value). Grid-strided over the super-blocks of all rows.
template <typename Q> __device__ void dequantize_f16(const TensorArg &a, const TensorArg &dst) {
    const int lane = threadIdx.x % 32, warps = blockDim.x / 32;
    const long long nsb = a.ne[0] / QK_K;
    const long long total = nrows_of(a) * nsb;
    for (long long s = (long long)blockIdx.x * warps + threadIdx.x / 32; s < total; s += (long long)gridDim.x * warps) {
        long long row, ib, i1, i2, i3;
        divmod64(s, nsb, row, ib);
        unravel_row(row, a.ne[1], a.ne[2], i1, i2, i3);
        const unsigned char *block = (const unsigned char *)row_ptr(a, i1, i2, i3) + ib * Q::block_bytes;
        float y[8];
        Q::load8(block, lane, y);
        unsigned int h[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            h[i] = (unsigned int)f32_to_f16_bits(y[2 * i]) | ((unsigned int)f32_to_f16_bits(y[2 * i + 1]) << 16);
        }
        *(uint4 *)((char *)dst.data + (s * QK_K + 8 * lane) * 2) = make_uint4(h[0], h[1], h[2], h[3]);
    }
}

#define DEQUANTIZE_F16_KERNEL(name, Q)                                                                           \
    extern "C" __global__ void name(const __grid_constant__ TensorArg a, const __grid_constant__ TensorArg dst) { \
        await_prior_kernel();                                                                                    \
        dequantize_f16<Q>(a, dst);                                                                               \
    }

DEQUANTIZE_F16_KERNEL(dequantize_f16_q2_K, Q2_K)
DEQUANTIZE_F16_KERNEL(dequantize_f16_q3_K, Q3_K)
DEQUANTIZE_F16_KERNEL(dequantize_f16_q4_K, Q4_K)
DEQUANTIZE_F16_KERNEL(dequantize_f16_q5_K, Q5_K)
DEQUANTIZE_F16_KERNEL(dequantize_f16_q6_K, Q6_K)
