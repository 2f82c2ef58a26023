// MUL_MAT through cuBLAS: the pointer arrays of a batched GEMM (products of more than 8
// columns, and those the matrix-vector kernels of mul_mat_vec.cu do not take). The launcher
// converts operands with the CPY kernels where needed.
//
// dst[i, j, i2, i3] = sum_k a[k, i, i2 / r2, i3 / r3] * b[k, j, i2, i3], with a: [K, M, a2, a3],
// b: [K, N, b2, b3], dst: [M, N, b2, b3], and r2 = b2 / a2, r3 = b3 / a3 (the broadcast of a
// over b's matrices).
#include "common.cuh"

// The pointer arrays of cublasGemmBatchedEx for the b2 * b3 matrices of dst: `out` holds the
// matrices of a (broadcast by r2, r3), then those of b, then those of dst (only addresses are
// used from the tensors' data, nb[2] and nb[3]; dst's ne[2], ne[3] give the matrix count).
extern "C" __global__ void mul_mat_ptrs(const __grid_constant__ TensorArg a, const __grid_constant__ TensorArg b,
                                        const __grid_constant__ TensorArg dst, long long r2, long long r3,
                                        unsigned long long *out) {
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
