// CONCAT: `a` and `b` joined along dimension `dim`; all three tensors have one plain type
// (f32, f16, bf16 or i32), whose bits are copied.
//
// Launch: 2-D blocks (x over dimension 0, y over rows), grid-strided over the destination's rows.
#include "common.cuh"

// dst[i] = a[i] where i[dim] < a.ne[dim], else b[i] with i[dim] -= a.ne[dim].
template <typename T>
__device__ void concat(const TensorArg &a, const TensorArg &b, const TensorArg &dst, int dim) {
    const long long ne0 = dst.ne[0];
    FOR_EACH_ROW(row, nrows_of(dst)) {
        long long i1, i2, i3;
        unravel_row(row, dst.ne[1], dst.ne[2], i1, i2, i3);
        char *drow = row_ptr(dst, i1, i2, i3);
        if (dim == 0) {
            const char *arow = row_ptr(a, i1, i2, i3);
            const char *brow = row_ptr(b, i1, i2, i3);
            const long long na = a.ne[0];
            FOR_EACH_I0(i0, ne0) {
                const T v = i0 < na ? *(const T *)(arow + i0 * a.nb[0]) : *(const T *)(brow + (i0 - na) * b.nb[0]);
                *(T *)(drow + i0 * dst.nb[0]) = v;
            }
            continue;
        }
        long long j[4] = {0, i1, i2, i3};
        const TensorArg *s = &a;
        if (j[dim] >= a.ne[dim]) {
            j[dim] -= a.ne[dim];
            s = &b;
        }
        const char *srow = row_ptr(*s, j[1], j[2], j[3]);
        const long long snb0 = s->nb[0];
        FOR_EACH_I0(i0, ne0) {
            *(T *)(drow + i0 * dst.nb[0]) = *(const T *)(srow + i0 * snb0);
        }
    }
}

#define CONCAT_KERNEL(name, T)                                                                                   \
    extern "C" __global__ void name(const __grid_constant__ TensorArg a, const __grid_constant__ TensorArg b,    \
                                    const __grid_constant__ TensorArg dst, int dim) {                            \
        await_prior_kernel();                                                                                    \
        concat<T>(a, b, dst, dim);                                                                               \
    }

// f32, i32
CONCAT_KERNEL(concat_b32, unsigned int)
// f16, bf16
CONCAT_KERNEL(concat_b16, unsigned short)
