// CPY and CONT: values copied in row-major order from one tensor into another of any shape
// with as many values, either side strided, converted (and quantized) to the destination type
// exactly as tessera-core's row conversions do. Also FILL, which MUL_MAT uses for K = 0.
//
// Launch: 2-D blocks (x over dimension 0 of a destination row, or its blocks when quantized;
// y over rows), grid-strided over the destination's rows; `cpy_transposed_*` as it says.
//
// The K-quants (kquant.cuh, kquant_low.cuh) are copied into the float types only: quantizing
// into them is ggml's scale search, which the CUDA backend leaves to the CPU. Q4_1, Q5_0 and
// Q5_1 (legacy_quant.cuh) are copied to and from the float types.
#include "kquant_low.cuh"
#include "legacy_quant.cuh"

// True when both tensors have the same shape: row (i1, i2, i3) of the destination is then row
// (i1, i2, i3) of the source, with no per-value index arithmetic.
__device__ __forceinline__ bool same_shape(const TensorArg &a, const TensorArg &b) {
    return a.ne[0] == b.ne[0] && a.ne[1] == b.ne[1] && a.ne[2] == b.ne[2] && a.ne[3] == b.ne[3];
}

// Value `flat` (row-major) of `t`, read through `S`.
template <typename S>
__device__ __forceinline__ float load_flat(const TensorArg &t, long long flat) {
    long long j0, j1, j2, j3;
    unravel_flat(flat, t.ne, j0, j1, j2, j3);
    return S::load(row_ptr(t, j1, j2, j3), j0, t.nb[0]);
}

// Into a plain type: one thread per destination value.
template <typename S, typename D>
__device__ void cpy_convert(const TensorArg &src, const TensorArg &dst) {
    const long long ne0 = dst.ne[0];
    const bool same = same_shape(src, dst);
    FOR_EACH_ROW(row, nrows_of(dst)) {
        long long i1, i2, i3;
        unravel_row(row, dst.ne[1], dst.ne[2], i1, i2, i3);
        char *drow = row_ptr(dst, i1, i2, i3);
        if (same) {
            const char *srow = row_ptr(src, i1, i2, i3);
            FOR_EACH_I0(i0, ne0) {
                D::store(drow, i0, dst.nb[0], S::load(srow, i0, src.nb[0]));
            }
        } else {
            const long long base = row * ne0;
            FOR_EACH_I0(i0, ne0) {
                D::store(drow, i0, dst.nb[0], load_flat<S>(src, base + i0));
            }
        }
    }
}

// Into a quantized type of 32-value blocks: one thread per destination block.
template <typename S, typename D>
__device__ void cpy_quantize(const TensorArg &src, const TensorArg &dst) {
    const long long nblocks = dst.ne[0] / QK;
    const bool same = same_shape(src, dst);
    FOR_EACH_ROW(row, nrows_of(dst)) {
        long long i1, i2, i3;
        unravel_row(row, dst.ne[1], dst.ne[2], i1, i2, i3);
        char *drow = row_ptr(dst, i1, i2, i3);
        FOR_EACH_I0(ib, nblocks) {
            float x[QK];
            if (same) {
                const char *srow = row_ptr(src, i1, i2, i3);
                for (int j = 0; j < QK; j++) {
                    x[j] = S::load(srow, ib * QK + j, src.nb[0]);
                }
            } else {
                // Values of the source in row-major order from `base` on, stepping the indices.
                long long j0, j1, j2, j3;
                unravel_flat(row * dst.ne[0] + ib * QK, src.ne, j0, j1, j2, j3);
                for (int j = 0; j < QK; j++) {
                    x[j] = S::load(row_ptr(src, j1, j2, j3), j0, src.nb[0]);
                    if (++j0 == src.ne[0]) {
                        j0 = 0;
                        if (++j1 == src.ne[1]) {
                            j1 = 0;
                            if (++j2 == src.ne[2]) {
                                j2 = 0;
                                ++j3;
                            }
                        }
                    }
                }
            }
            D::quantize(x, drow + ib * D::block_bytes);
        }
    }
}

// Same plain type on both sides: the bits are moved (I32 exactly; a float's value is kept).
template <typename T>
__device__ void cpy_raw(const TensorArg &src, const TensorArg &dst) {
    const long long ne0 = dst.ne[0];
    const bool same = same_shape(src, dst);
    FOR_EACH_ROW(row, nrows_of(dst)) {
        long long i1, i2, i3;
        unravel_row(row, dst.ne[1], dst.ne[2], i1, i2, i3);
        char *drow = row_ptr(dst, i1, i2, i3);
        if (same) {
            const char *srow = row_ptr(src, i1, i2, i3);
            FOR_EACH_I0(i0, ne0) {
                *(T *)(drow + i0 * dst.nb[0]) = *(const T *)(srow + i0 * src.nb[0]);
            }
        } else {
            const long long base = row * ne0;
            FOR_EACH_I0(i0, ne0) {
                long long j0, j1, j2, j3;
                unravel_flat(base + i0, src.ne, j0, j1, j2, j3);
                *(T *)(drow + i0 * dst.nb[0]) = *(const T *)(row_ptr(src, j1, j2, j3) + j0 * src.nb[0]);
            }
        }
    }
}

// CONT of a transposed view into packed rows, bits as they are (`W`: 32- or 16-bit values):
// `src` and `dst` of one shape, `src`'s dimension 1 packed and its dimension 0 strided. Blocks
// of 32 x 8 threads move 32 x 32 tiles through shared memory, read along the source's dimension
// 1 and written along the destination's dimension 0, so that both sides are coalesced (one
// thread per value, reading down a column, is not).
// Grid: (dimension 1 / 32, dimension 0 / 32, dimensions 2 x 3).
template <typename W>
__device__ void cpy_transposed(const TensorArg &src, const TensorArg &dst) {
    __shared__ W tile[32][33];
    const long long i0b = (long long)blockIdx.y * 32, i1b = (long long)blockIdx.x * 32;
    const long long i2 = blockIdx.z % dst.ne[2], i3 = blockIdx.z / dst.ne[2];
    const int tx = threadIdx.x;
    for (int k = threadIdx.y; k < 32; k += 8) {
        const long long i0 = i0b + k, i1 = i1b + tx;
        if (i0 < dst.ne[0] && i1 < dst.ne[1]) {
            tile[k][tx] = *(const W *)(row_ptr(src, i1, i2, i3) + i0 * src.nb[0]);
        }
    }
    __syncthreads();
    for (int k = threadIdx.y; k < 32; k += 8) {
        const long long i0 = i0b + tx, i1 = i1b + k;
        if (i0 < dst.ne[0] && i1 < dst.ne[1]) {
            *(W *)(row_ptr(dst, i1, i2, i3) + i0 * dst.nb[0]) = tile[tx][k];
        }
    }
}

#define CPY_KERNEL(name, S, D)                                                                                   \
    extern "C" __global__ void name(const __grid_constant__ TensorArg src, const __grid_constant__ TensorArg dst) { \
        await_prior_kernel();                                                                                    \
        cpy_convert<S, D>(src, dst);                                                                             \
    }
#define CPY_QUANTIZE_KERNEL(name, S, D)                                                                          \
    extern "C" __global__ void name(const __grid_constant__ TensorArg src, const __grid_constant__ TensorArg dst) { \
        await_prior_kernel();                                                                                    \
        cpy_quantize<S, D>(src, dst);                                                                            \
    }
#define CPY_RAW_KERNEL(name, T)                                                                                  \
    extern "C" __global__ void name(const __grid_constant__ TensorArg src, const __grid_constant__ TensorArg dst) { \
        await_prior_kernel();                                                                                    \
        cpy_raw<T>(src, dst);                                                                                    \
    }

CPY_KERNEL(cpy_f32_f16, F32, F16)
CPY_KERNEL(cpy_f32_bf16, F32, BF16)
CPY_KERNEL(cpy_f16_f32, F16, F32)
CPY_KERNEL(cpy_f16_bf16, F16, BF16)
CPY_KERNEL(cpy_bf16_f32, BF16, F32)
CPY_KERNEL(cpy_bf16_f16, BF16, F16)
CPY_KERNEL(cpy_q8_0_f32, Q8_0, F32)
CPY_KERNEL(cpy_q8_0_f16, Q8_0, F16)
CPY_KERNEL(cpy_q8_0_bf16, Q8_0, BF16)
CPY_KERNEL(cpy_q4_0_f32, Q4_0, F32)
CPY_KERNEL(cpy_q4_0_f16, Q4_0, F16)
CPY_KERNEL(cpy_q4_0_bf16, Q4_0, BF16)
CPY_KERNEL(cpy_q4_K_f32, Q4_K, F32)
CPY_KERNEL(cpy_q4_K_f16, Q4_K, F16)
CPY_KERNEL(cpy_q4_K_bf16, Q4_K, BF16)
CPY_KERNEL(cpy_q5_K_f32, Q5_K, F32)
CPY_KERNEL(cpy_q5_K_f16, Q5_K, F16)
CPY_KERNEL(cpy_q5_K_bf16, Q5_K, BF16)
CPY_KERNEL(cpy_q6_K_f32, Q6_K, F32)
CPY_KERNEL(cpy_q6_K_f16, Q6_K, F16)
CPY_KERNEL(cpy_q6_K_bf16, Q6_K, BF16)
CPY_KERNEL(cpy_q4_1_f32, Q4_1, F32)
CPY_KERNEL(cpy_q4_1_f16, Q4_1, F16)
CPY_KERNEL(cpy_q4_1_bf16, Q4_1, BF16)
CPY_KERNEL(cpy_q5_0_f32, Q5_0, F32)
CPY_KERNEL(cpy_q5_0_f16, Q5_0, F16)
CPY_KERNEL(cpy_q5_0_bf16, Q5_0, BF16)
CPY_KERNEL(cpy_q5_1_f32, Q5_1, F32)
CPY_KERNEL(cpy_q5_1_f16, Q5_1, F16)
CPY_KERNEL(cpy_q5_1_bf16, Q5_1, BF16)
CPY_KERNEL(cpy_q2_K_f32, Q2_K, F32)
CPY_KERNEL(cpy_q2_K_f16, Q2_K, F16)
CPY_KERNEL(cpy_q2_K_bf16, Q2_K, BF16)
CPY_KERNEL(cpy_q3_K_f32, Q3_K, F32)
CPY_KERNEL(cpy_q3_K_f16, Q3_K, F16)
CPY_KERNEL(cpy_q3_K_bf16, Q3_K, BF16)

CPY_QUANTIZE_KERNEL(cpy_f32_q8_0, F32, Q8_0)
CPY_QUANTIZE_KERNEL(cpy_f16_q8_0, F16, Q8_0)
CPY_QUANTIZE_KERNEL(cpy_bf16_q8_0, BF16, Q8_0)
CPY_QUANTIZE_KERNEL(cpy_q8_0_q8_0, Q8_0, Q8_0)
CPY_QUANTIZE_KERNEL(cpy_q4_0_q8_0, Q4_0, Q8_0)
CPY_QUANTIZE_KERNEL(cpy_f32_q4_0, F32, Q4_0)
CPY_QUANTIZE_KERNEL(cpy_f16_q4_0, F16, Q4_0)
CPY_QUANTIZE_KERNEL(cpy_bf16_q4_0, BF16, Q4_0)
CPY_QUANTIZE_KERNEL(cpy_q8_0_q4_0, Q8_0, Q4_0)
CPY_QUANTIZE_KERNEL(cpy_q4_0_q4_0, Q4_0, Q4_0)
CPY_QUANTIZE_KERNEL(cpy_f32_q4_1, F32, Q4_1)
CPY_QUANTIZE_KERNEL(cpy_f16_q4_1, F16, Q4_1)
CPY_QUANTIZE_KERNEL(cpy_bf16_q4_1, BF16, Q4_1)
CPY_QUANTIZE_KERNEL(cpy_f32_q5_0, F32, Q5_0)
CPY_QUANTIZE_KERNEL(cpy_f16_q5_0, F16, Q5_0)
CPY_QUANTIZE_KERNEL(cpy_bf16_q5_0, BF16, Q5_0)
CPY_QUANTIZE_KERNEL(cpy_f32_q5_1, F32, Q5_1)
CPY_QUANTIZE_KERNEL(cpy_f16_q5_1, F16, Q5_1)
CPY_QUANTIZE_KERNEL(cpy_bf16_q5_1, BF16, Q5_1)

// f32 -> f32, i32 -> i32
CPY_RAW_KERNEL(cpy_b32, unsigned int)
// f16 -> f16, bf16 -> bf16
CPY_RAW_KERNEL(cpy_b16, unsigned short)

// Every value of an F32 tensor set to `value`.
extern "C" __global__ void fill_f32(const __grid_constant__ TensorArg dst, float value) {
    await_prior_kernel();
    FOR_EACH_ROW(row, nrows_of(dst)) {
        long long i1, i2, i3;
        unravel_row(row, dst.ne[1], dst.ne[2], i1, i2, i3);
        char *drow = row_ptr(dst, i1, i2, i3);
        FOR_EACH_I0(i0, dst.ne[0]) {
            F32::store(drow, i0, dst.nb[0], value);
        }
    }
}

#define CPY_TRANSPOSED_KERNEL(name, W)                                                                           \
    extern "C" __global__ void name(const __grid_constant__ TensorArg src, const __grid_constant__ TensorArg dst) { \
        await_prior_kernel();                                                                                    \
        cpy_transposed<W>(src, dst);                                                                             \
    }

CPY_TRANSPOSED_KERNEL(cpy_transposed_b32, unsigned int)
CPY_TRANSPOSED_KERNEL(cpy_transposed_b16, unsigned short)
