// POOL_2D: max and average pooling of `src: [IW, IH, C, N]` (float) into F32
// `dst: [OW, OH, C, N]` (reference/src/kernels/pool.rs). The window of output (ow, oh) covers
// ix = ow*s0 + kx - p0 (kx < k0), iy = oh*s1 + ky - p1 (ky < k1); positions outside the input are
// skipped. Max: the largest in-bounds value (-f32::MAX if none, NaN ignored). Avg: the sum of the
// in-bounds values (in f64, in window order) divided by k0 * k1.
//
// Launch: 2-D blocks (x over output columns, y over output rows), grid-strided over rows.
#include "common.cuh"

#define POOL_MAX 0
#define POOL_AVG 1

template <typename S>
__device__ void pool_2d(const TensorArg &src, const TensorArg &dst, int kind, long long k0, long long k1,
                        long long s0, long long s1, long long p0, long long p1) {
    const long long iw = src.ne[0], ih = src.ne[1];
    FOR_EACH_ROW(row, nrows_of(dst)) {
        long long oh, c, n;
        unravel_row(row, dst.ne[1], dst.ne[2], oh, c, n);
        char *drow = row_ptr(dst, oh, c, n);
        FOR_EACH_I0(ow, dst.ne[0]) {
            float mx = -3.40282346638528859812e+38f;
            double sum = 0.0;
            for (long long ky = 0; ky < k1; ky++) {
                const long long iy = oh * s1 + ky - p1;
                if (iy < 0 || iy >= ih) {
                    continue;
                }
                const char *srow = row_ptr(src, iy, c, n);
                for (long long kx = 0; kx < k0; kx++) {
                    const long long ix = ow * s0 + kx - p0;
                    if (ix < 0 || ix >= iw) {
                        continue;
                    }
                    const float v = S::load(srow, ix, src.nb[0]);
                    mx = fmaxf(mx, v);
                    sum += (double)v;
                }
            }
            const float out = kind == POOL_MAX ? mx : (float)(sum / (double)(k0 * k1));
            F32::store(drow, ow, dst.nb[0], out);
        }
    }
}

#define POOL_2D_KERNEL(name, S)                                                                                  \
    extern "C" __global__ void name(const __grid_constant__ TensorArg src, const __grid_constant__ TensorArg dst, \
                                    int kind, long long k0, long long k1, long long s0, long long s1,            \
                                    long long p0, long long p1) {                                                \
        await_prior_kernel();                                                                                    \
        pool_2d<S>(src, dst, kind, k0, k1, s0, s1, p0, p1);                                                      \
    }

POOL_2D_KERNEL(pool_2d_f32, F32)
POOL_2D_KERNEL(pool_2d_f16, F16)
POOL_2D_KERNEL(pool_2d_bf16, BF16)
