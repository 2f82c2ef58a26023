// MUL_MAT helpers: the quantized matrix-vector product, and the pointer arrays of a batched
// cuBLAS GEMM. Float weights (and quantized weights times more than 8 columns) go to cuBLAS; the
// launcher converts operands with the CPY kernels where needed.
//
// dst[i, j, i2, i3] = sum_k a[k, i, i2 / r2, i3 / r3] * b[k, j, i2, i3], with a: [K, M, a2, a3]
// quantized (packed rows), b: [K, N, b2, b3] F32 (any strides), dst: [M, N, b2, b3] F32, and
// r2 = b2 / a2, r3 = b3 / a3 (the broadcast of a over b's matrices).
#include "common.cuh"

// Columns of b one matrix-vector launch handles.
#define MMV_MAX_COLS 8

// The 8 values of a block that lane `sub` (0..3) of a group of 4 lanes handles, as integers
// (`q`) with their positions in the block (`pos`); the block's value j is q * d.
struct Q8_0_Part {
    static constexpr int block_bytes = Q8_0_BYTES;
    __device__ __forceinline__ static void get(const char *block, int sub, float *q, int *pos) {
        const signed char *qs = (const signed char *)(block + 2) + 8 * sub;
#pragma unroll
        for (int t = 0; t < 8; t++) {
            q[t] = (float)qs[t];
            pos[t] = 8 * sub + t;
        }
    }
};

struct Q4_0_Part {
    static constexpr int block_bytes = Q4_0_BYTES;
    __device__ __forceinline__ static void get(const char *block, int sub, float *q, int *pos) {
        const unsigned char *qs = (const unsigned char *)(block + 2) + 4 * sub;
#pragma unroll
        for (int t = 0; t < 4; t++) {
            q[t] = (float)((int)(qs[t] & 0x0f) - 8);
            pos[t] = 4 * sub + t;
            q[4 + t] = (float)((int)(qs[t] >> 4) - 8);
            pos[4 + t] = 4 * sub + t + 16;
        }
    }
};

// One warp per row of a (blockDim.x / 32 rows per block, grid.x over rows, grid.y strided over
// the b2 * b3 matrices). Lanes take blocks 8 at a time, 4 lanes per block, 8 values each, and
// keep one sum per column of b (ncols <= 8), reduced across the warp at the end.
template <typename Q>
__device__ void mul_mat_vec_q(const TensorArg &a, const TensorArg &b, const TensorArg &dst, long long r2,
                              long long r3, int ncols) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const long long i = (long long)blockIdx.x * (blockDim.x / 32) + warp;
    if (i >= a.ne[1]) {
        return; // the whole warp: no block-level synchronisation follows
    }
    const long long nblocks = a.ne[0] / QK;
    const long long nmat = dst.ne[2] * dst.ne[3];
    const int sub = lane % 4;
    for (long long mat = blockIdx.y; mat < nmat; mat += gridDim.y) {
        long long i3, i2;
        divmod64(mat, dst.ne[2], i3, i2);
        const char *arow = row_ptr(a, i, i2 / r2, i3 / r3);
        const char *bmat = (const char *)b.data + i2 * b.nb[2] + i3 * b.nb[3];
        float acc[MMV_MAX_COLS];
#pragma unroll
        for (int c = 0; c < MMV_MAX_COLS; c++) {
            acc[c] = 0.0f;
        }
        for (long long ib = lane / 4; ib < nblocks; ib += 8) {
            const char *block = arow + ib * Q::block_bytes;
            const float d = f16_bits_to_f32(*(const unsigned short *)block);
            float q[8];
            int pos[8];
            Q::get(block, sub, q, pos);
            const long long k0 = ib * QK;
#pragma unroll
            for (int c = 0; c < MMV_MAX_COLS; c++) {
                if (c < ncols) {
                    const char *bcol = bmat + c * b.nb[1];
                    float s = 0.0f;
#pragma unroll
                    for (int t = 0; t < 8; t++) {
                        s += q[t] * *(const float *)(bcol + (k0 + pos[t]) * b.nb[0]);
                    }
                    acc[c] += d * s;
                }
            }
        }
#pragma unroll
        for (int c = 0; c < MMV_MAX_COLS; c++) {
            acc[c] = warp_sum(acc[c]);
        }
        if (lane == 0) {
            char *dcol = (char *)dst.data + i * dst.nb[0] + i2 * dst.nb[2] + i3 * dst.nb[3];
#pragma unroll
            for (int c = 0; c < MMV_MAX_COLS; c++) {
                if (c < ncols) {
                    *(float *)(dcol + c * dst.nb[1]) = acc[c];
                }
            }
        }
    }
}

#define MUL_MAT_VEC_KERNEL(name, Q)                                                                              \
    extern "C" __global__ void name(const __grid_constant__ TensorArg a, const __grid_constant__ TensorArg b,     \
                                    const __grid_constant__ TensorArg dst, long long r2, long long r3, int ncols) { \
        mul_mat_vec_q<Q>(a, b, dst, r2, r3, ncols);                                                              \
    }

MUL_MAT_VEC_KERNEL(mul_mat_vec_q8_0, Q8_0_Part)
MUL_MAT_VEC_KERNEL(mul_mat_vec_q4_0, Q4_0_Part)

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
