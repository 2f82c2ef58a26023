// Row kernels: SUM_ROWS and MEAN, ARGMAX, SOFT_MAX, NORM and RMS_NORM (reductions along
// dimension 0, sums in f64 as the reference), and DIAG_MASK_INF (element-wise).
//
// Launch: reductions run one block per row (blockDim.x a multiple of 32, at most 1024,
// blockDim.y == 1), grid-strided over rows; each thread keeps the same values of its row in
// every pass, so a destination may alias its source. DIAG_MASK_INF runs on 2-D blocks like the
// element-wise kernels.
#include "common.cuh"

// dst[0, i1, i2, i3] = sum (or mean, when `mean`) of row (i1, i2, i3), in the type of `D`.
template <typename S, typename D>
__device__ void sum_rows(const TensorArg &src, const TensorArg &dst, int mean) {
    __shared__ double shared[32];
    const long long ne0 = src.ne[0];
    FOR_EACH_BLOCK_ROW(row, nrows_of(src)) {
        long long i1, i2, i3;
        unravel_row(row, src.ne[1], src.ne[2], i1, i2, i3);
        const char *srow = row_ptr(src, i1, i2, i3);
        double sum = 0.0;
        FOR_EACH_THREAD_I0(i0, ne0) {
            sum += (double)S::load(srow, i0, src.nb[0]);
        }
        sum = block_sum(sum, shared);
        if (threadIdx.x == 0) {
            const double v = mean ? sum / (double)ne0 : sum;
            D::store(row_ptr(dst, i1, i2, i3), 0, dst.nb[0], (float)v);
        }
    }
}

// Whether candidate (v, i) beats (best, bi): a value beats none (index -1), a larger value wins,
// equal values go to the smaller index (the first of the row).
__device__ __forceinline__ bool argmax_better(float v, long long i, float best, long long bi) {
    return i >= 0 && (bi < 0 || v > best || (v == best && i < bi));
}

// dst[i1] = the first index of the largest value of row i1 of a matrix; NaN values are skipped
// and a row of only NaN gives 0.
template <typename S>
__device__ void argmax(const TensorArg &src, const TensorArg &dst) {
    __shared__ float shared_v[32];
    __shared__ long long shared_i[32];
    const long long ne0 = src.ne[0];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    FOR_EACH_BLOCK_ROW(row, src.ne[1]) {
        const char *srow = row_ptr(src, row, 0, 0);
        float best = 0.0f;
        long long bi = -1;
        FOR_EACH_THREAD_I0(i0, ne0) {
            const float v = S::load(srow, i0, src.nb[0]);
            if (v == v && (bi < 0 || v > best)) {
                best = v;
                bi = i0;
            }
        }
#pragma unroll
        for (int offset = 16; offset > 0; offset >>= 1) {
            const float v = __shfl_xor_sync(0xffffffffu, best, offset);
            const long long i = __shfl_xor_sync(0xffffffffu, bi, offset);
            if (argmax_better(v, i, best, bi)) {
                best = v;
                bi = i;
            }
        }
        __syncthreads(); // the previous row's use of the shared arrays is finished
        if (lane == 0) {
            shared_v[warp] = best;
            shared_i[warp] = bi;
        }
        __syncthreads();
        if (warp == 0) {
            best = lane < nwarps ? shared_v[lane] : 0.0f;
            bi = lane < nwarps ? shared_i[lane] : -1;
#pragma unroll
            for (int offset = 16; offset > 0; offset >>= 1) {
                const float v = __shfl_xor_sync(0xffffffffu, best, offset);
                const long long i = __shfl_xor_sync(0xffffffffu, bi, offset);
                if (argmax_better(v, i, best, bi)) {
                    best = v;
                    bi = i;
                }
            }
            if (lane == 0) {
                *(int *)((char *)dst.data + row * dst.nb[0]) = bi < 0 ? 0 : (int)bi;
            }
        }
    }
}

// Value i0 of a soft-max row: x * scale (+ mask), rounded after each step as the reference does.
template <typename T, typename M>
__device__ __forceinline__ float soft_max_input(const char *srow, const char *mrow, long long i0, long long snb0,
                                                long long mnb0, float scale) {
    const float x = __fmul_rn(T::load(srow, i0, snb0), scale);
    return mrow != nullptr ? __fadd_rn(x, M::load(mrow, i0, mnb0)) : x;
}

// y = exp(x - max) / sum exp(x - max) along rows of x = src * scale + mask; the mask row of
// source row (i1, i2, i3) is (i1 % m1, i2 % m2, i3 % m3). A row of only -inf becomes zeros; a NaN
// makes its row NaN.
template <typename T, typename M>
__device__ void soft_max(const TensorArg &src, const TensorArg &mask, const TensorArg &dst, float scale,
                         int has_mask) {
    __shared__ double shared_d[32];
    __shared__ float shared_f[32];
    const long long ne0 = src.ne[0];
    FOR_EACH_BLOCK_ROW(row, nrows_of(src)) {
        long long i1, i2, i3;
        unravel_row(row, src.ne[1], src.ne[2], i1, i2, i3);
        const char *srow = row_ptr(src, i1, i2, i3);
        char *drow = row_ptr(dst, i1, i2, i3);
        const char *mrow =
            has_mask ? row_ptr(mask, mod64(i1, mask.ne[1]), mod64(i2, mask.ne[2]), mod64(i3, mask.ne[3]))
                     : (const char *)nullptr;

        float mx = -INFINITY;
        int any = 0; // a value other than -inf
        FOR_EACH_THREAD_I0(i0, ne0) {
            const float v = soft_max_input<T, M>(srow, mrow, i0, src.nb[0], mask.nb[0], scale);
            mx = fmaxf(mx, v);
            any |= v != -INFINITY;
        }
        mx = block_max(mx, shared_f);
        if (!__syncthreads_or(any)) {
            FOR_EACH_THREAD_I0(i0, ne0) {
                T::store(drow, i0, dst.nb[0], 0.0f);
            }
            continue;
        }

        double sum = 0.0;
        FOR_EACH_THREAD_I0(i0, ne0) {
            sum += (double)expf(soft_max_input<T, M>(srow, mrow, i0, src.nb[0], mask.nb[0], scale) - mx);
        }
        sum = block_sum(sum, shared_d);

        FOR_EACH_THREAD_I0(i0, ne0) {
            const float e = expf(soft_max_input<T, M>(srow, mrow, i0, src.nb[0], mask.nb[0], scale) - mx);
            T::store(drow, i0, dst.nb[0], (float)((double)e / sum));
        }
    }
}

// NORM: (x - mean) / sqrt(var + eps); RMS_NORM (`rms`): x / sqrt(mean(x^2) + eps); in f64.
template <typename T>
__device__ void norm(const TensorArg &src, const TensorArg &dst, float eps, int rms) {
    __shared__ double shared[32];
    const long long ne0 = src.ne[0];
    FOR_EACH_BLOCK_ROW(row, nrows_of(src)) {
        long long i1, i2, i3;
        unravel_row(row, src.ne[1], src.ne[2], i1, i2, i3);
        const char *srow = row_ptr(src, i1, i2, i3);
        char *drow = row_ptr(dst, i1, i2, i3);
        if (rms) {
            double sum = 0.0;
            FOR_EACH_THREAD_I0(i0, ne0) {
                const double x = (double)T::load(srow, i0, src.nb[0]);
                sum += x * x;
            }
            sum = block_sum(sum, shared);
            const double inv_rms = 1.0 / sqrt(sum / (double)ne0 + (double)eps);
            FOR_EACH_THREAD_I0(i0, ne0) {
                const double x = (double)T::load(srow, i0, src.nb[0]);
                T::store(drow, i0, dst.nb[0], (float)(x * inv_rms));
            }
        } else {
            double sum = 0.0;
            FOR_EACH_THREAD_I0(i0, ne0) {
                sum += (double)T::load(srow, i0, src.nb[0]);
            }
            const double mean = block_sum(sum, shared) / (double)ne0;
            double var = 0.0;
            FOR_EACH_THREAD_I0(i0, ne0) {
                const double d = (double)T::load(srow, i0, src.nb[0]) - mean;
                var += d * d;
            }
            var = block_sum(var, shared) / (double)ne0;
            const double inv_std = 1.0 / sqrt(var + (double)eps);
            FOR_EACH_THREAD_I0(i0, ne0) {
                const double d = (double)T::load(srow, i0, src.nb[0]) - mean;
                T::store(drow, i0, dst.nb[0], (float)(d * inv_std));
            }
        }
    }
}

// dst[i0, i1, i2, i3] = -inf where i0 > n_past + i1, else src[i0, i1, i2, i3].
template <typename T>
__device__ void diag_mask_inf(const TensorArg &src, const TensorArg &dst, long long n_past) {
    const long long ne0 = dst.ne[0];
    FOR_EACH_ROW(row, nrows_of(dst)) {
        long long i1, i2, i3;
        unravel_row(row, dst.ne[1], dst.ne[2], i1, i2, i3);
        const char *srow = row_ptr(src, i1, i2, i3);
        char *drow = row_ptr(dst, i1, i2, i3);
        FOR_EACH_I0(i0, ne0) {
            // i0 - i1 > n_past cannot overflow, unlike n_past + i1.
            const float v = i0 - i1 > n_past ? -INFINITY : T::load(srow, i0, src.nb[0]);
            T::store(drow, i0, dst.nb[0], v);
        }
    }
}

#define SUM_ROWS_KERNEL(name, S, D)                                                                              \
    extern "C" __global__ void name(const __grid_constant__ TensorArg src, const __grid_constant__ TensorArg dst, \
                                    int mean) {                                                                  \
        await_prior_kernel();                                                                                    \
        sum_rows<S, D>(src, dst, mean);                                                                          \
    }
#define ARGMAX_KERNEL(name, S)                                                                                   \
    extern "C" __global__ void name(const __grid_constant__ TensorArg src, const __grid_constant__ TensorArg dst) { \
        await_prior_kernel();                                                                                    \
        argmax<S>(src, dst);                                                                                     \
    }
#define SOFT_MAX_KERNEL(name, T, M)                                                                              \
    extern "C" __global__ void name(const __grid_constant__ TensorArg src, const __grid_constant__ TensorArg mask, \
                                    const __grid_constant__ TensorArg dst, float scale, int has_mask) {          \
        await_prior_kernel();                                                                                    \
        soft_max<T, M>(src, mask, dst, scale, has_mask);                                                         \
    }
#define NORM_KERNEL(name, T)                                                                                     \
    extern "C" __global__ void name(const __grid_constant__ TensorArg src, const __grid_constant__ TensorArg dst, \
                                    float eps, int rms) {                                                        \
        await_prior_kernel();                                                                                    \
        norm<T>(src, dst, eps, rms);                                                                             \
    }
#define DIAG_MASK_INF_KERNEL(name, T)                                                                            \
    extern "C" __global__ void name(const __grid_constant__ TensorArg src, const __grid_constant__ TensorArg dst, \
                                    long long n_past) {                                                          \
        await_prior_kernel();                                                                                    \
        diag_mask_inf<T>(src, dst, n_past);                                                                      \
    }

SUM_ROWS_KERNEL(sum_rows_f32_f32, F32, F32)
SUM_ROWS_KERNEL(sum_rows_f16_f16, F16, F16)
SUM_ROWS_KERNEL(sum_rows_bf16_bf16, BF16, BF16)
SUM_ROWS_KERNEL(sum_rows_f16_f32, F16, F32)
SUM_ROWS_KERNEL(sum_rows_bf16_f32, BF16, F32)

ARGMAX_KERNEL(argmax_f32, F32)
ARGMAX_KERNEL(argmax_f16, F16)
ARGMAX_KERNEL(argmax_bf16, BF16)

SOFT_MAX_KERNEL(soft_max_f32_f32, F32, F32)
SOFT_MAX_KERNEL(soft_max_f32_f16, F32, F16)
SOFT_MAX_KERNEL(soft_max_f16_f32, F16, F32)
SOFT_MAX_KERNEL(soft_max_f16_f16, F16, F16)
SOFT_MAX_KERNEL(soft_max_bf16_f32, BF16, F32)
SOFT_MAX_KERNEL(soft_max_bf16_f16, BF16, F16)

NORM_KERNEL(norm_f32, F32)
NORM_KERNEL(norm_f16, F16)
NORM_KERNEL(norm_bf16, BF16)

DIAG_MASK_INF_KERNEL(diag_mask_inf_f32, F32)
DIAG_MASK_INF_KERNEL(diag_mask_inf_f16, F16)
DIAG_MASK_INF_KERNEL(diag_mask_inf_bf16, BF16)
