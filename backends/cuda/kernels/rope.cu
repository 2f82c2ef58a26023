// ROPE: rotary position embedding of `src: [head_dim, heads, tokens, d3]` (float) by the I32
// positions `pos: [tokens]` (rope.cuh: the rotation and how it is rounded), with the pair
// (x[2k], x[2k + 1]) in mode 0 (normal) and (x[k], x[k + n_dims / 2]) in mode 2 (neox); values
// at i0 >= n_dims pass through. A decoded token's ROPE is one f64 sine and cosine per thread.
//
// Launch: 2-D blocks (x over the n_dims / 2 pairs and the ne0 - n_dims passed-through values of
// a row, y over rows), grid-strided over rows.
#include "rope.cuh"

#define ROPE_NORMAL 0
#define ROPE_NEOX 2

template <typename T>
__device__ void rope(const TensorArg &src, const TensorArg &pos, const TensorArg &dst, long long n_dims, int mode,
                     float freq_base, float freq_scale, const RopePowers &powers) {
    const long long half = n_dims / 2;
    const long long slots = half + (dst.ne[0] - n_dims);
    FOR_EACH_ROW(row, nrows_of(dst)) {
        long long i1, i2, i3;
        unravel_row(row, dst.ne[1], dst.ne[2], i1, i2, i3);
        const char *srow = row_ptr(src, i1, i2, i3);
        char *drow = row_ptr(dst, i1, i2, i3);
        const float position = (float)*(const int *)((const char *)pos.data + i2 * pos.nb[0]);
        FOR_EACH_I0(s, slots) {
            if (s >= half) {
                const long long i0 = n_dims + (s - half);
                T::store(drow, i0, dst.nb[0], T::load(srow, i0, src.nb[0]));
                continue;
            }
            const long long k = s;
            float cos_t, sin_t;
            rope_cos_sin(position, k, n_dims, freq_base, freq_scale, powers, cos_t, sin_t);
            const long long ia = mode == ROPE_NEOX ? k : 2 * k;
            const long long ib = mode == ROPE_NEOX ? k + half : 2 * k + 1;
            const float x0 = T::load(srow, ia, src.nb[0]);
            const float x1 = T::load(srow, ib, src.nb[0]);
            T::store(drow, ia, dst.nb[0], rope_first(x0, x1, cos_t, sin_t));
            T::store(drow, ib, dst.nb[0], rope_second(x0, x1, cos_t, sin_t));
        }
    }
}

#define ROPE_KERNEL(name, T)                                                                                     \
    extern "C" __global__ void name(const __grid_constant__ TensorArg src, const __grid_constant__ TensorArg pos, \
                                    const __grid_constant__ TensorArg dst, long long n_dims, int mode,           \
                                    float freq_base, float freq_scale,                                           \
                                    const __grid_constant__ RopePowers powers) {                                 \
        await_prior_kernel();                                                                                    \
        rope<T>(src, pos, dst, n_dims, mode, freq_base, freq_scale, powers);                                     \
    }

ROPE_KERNEL(rope_f32, F32)
ROPE_KERNEL(rope_f16, F16)
ROPE_KERNEL(rope_bf16, BF16)
