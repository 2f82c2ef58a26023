// IM2COL: convolution patches unfolded into rows (reference/src/kernels/im2col.rs).
//
// 2-D: input `[IW, IH, IC, N]`, dst `[IC*KH*KW, OW, OH, N]`:
//   dst[(ic*KH + kh)*KW + kw, ow, oh, n] = input[ow*s0 + kw*d0 - p0, oh*s1 + kh*d1 - p1, ic, n],
//   or 0 where that index falls outside the input.
// The 1-D form (input `[IW, IC, N]`, dst `[IC*KW, OW, N]`) is the 2-D one with KH = IH = OH = 1,
// which the launcher sets up by viewing both tensors with a dimension of size 1 inserted.
//
// Launch: 2-D blocks (x over dimension 0 of a destination row, y over rows), grid-strided over
// the destination's rows.
#include "common.cuh"

template <typename S, typename D>
__device__ void im2col(const TensorArg &input, const TensorArg &dst, long long kw_n, long long kh_n, long long s0,
                       long long s1, long long p0, long long p1, long long d0, long long d1) {
    const long long ne0 = dst.ne[0], iw = input.ne[0], ih = input.ne[1];
    FOR_EACH_ROW(row, nrows_of(dst)) {
        long long ow, oh, n;
        unravel_row(row, dst.ne[1], dst.ne[2], ow, oh, n);
        char *drow = row_ptr(dst, ow, oh, n);
        FOR_EACH_I0(i0, ne0) {
            long long t, kw, ic, kh;
            divmod64(i0, kw_n, t, kw);
            divmod64(t, kh_n, ic, kh);
            const long long ix = ow * s0 + kw * d0 - p0;
            const long long iy = oh * s1 + kh * d1 - p1;
            float v = 0.0f;
            if (ix >= 0 && ix < iw && iy >= 0 && iy < ih) {
                v = S::load(row_ptr(input, iy, ic, n), ix, input.nb[0]);
            }
            D::store(drow, i0, dst.nb[0], v);
        }
    }
}

#define IM2COL_KERNEL(name, S, D)                                                                                \
    extern "C" __global__ void name(const __grid_constant__ TensorArg input, const __grid_constant__ TensorArg dst, \
                                    long long kw, long long kh, long long s0, long long s1, long long p0,        \
                                    long long p1, long long d0, long long d1) {                                  \
        await_prior_kernel();                                                                                    \
        im2col<S, D>(input, dst, kw, kh, s0, s1, p0, p1, d0, d1);                                                \
    }

IM2COL_KERNEL(im2col_f32_f32, F32, F32)
IM2COL_KERNEL(im2col_f32_f16, F32, F16)
IM2COL_KERNEL(im2col_f16_f32, F16, F32)
IM2COL_KERNEL(im2col_f16_f16, F16, F16)
IM2COL_KERNEL(im2col_bf16_f32, BF16, F32)
IM2COL_KERNEL(im2col_bf16_f16, BF16, F16)
