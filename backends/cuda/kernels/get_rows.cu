// GET_ROWS: rows of `a: [n, r, d2, d3]` (any type) picked by the I32 indices
// `idx: [m, d2, d3, 1]`; `dst: [n, m, d2, d3]` is F32 (rows dequantized), or I32 copied exactly
// from an I32 `a`.
//
// An index outside 0..r cannot be reported from a kernel: the reference fails the compute, here
// the destination row is filled with NaN (F32) or i32::MIN (I32) and nothing outside `a` is read.
//
// Launch: 2-D blocks (x over dimension 0, y over destination rows), grid-strided over rows;
// `get_rows_x8_*`: 1-D blocks over groups of 8 values, grid-strided.
#include "kquant_low.cuh"
#include "legacy_quant.cuh"

// The row of `a` that destination row (j, i2, i3) copies, or -1 if its index is out of range.
__device__ __forceinline__ long long picked_row(const TensorArg &a, const TensorArg &idx, long long j, long long i2,
                                                long long i3) {
    const int r = *(const int *)((const char *)idx.data + j * idx.nb[0] + i2 * idx.nb[1] + i3 * idx.nb[2]);
    return (r < 0 || (long long)r >= a.ne[1]) ? -1 : (long long)r;
}

template <typename S>
__device__ void get_rows(const TensorArg &a, const TensorArg &idx, const TensorArg &dst) {
    const long long ne0 = dst.ne[0];
    FOR_EACH_ROW(row, nrows_of(dst)) {
        long long j, i2, i3;
        unravel_row(row, dst.ne[1], dst.ne[2], j, i2, i3);
        char *drow = row_ptr(dst, j, i2, i3);
        const long long r = picked_row(a, idx, j, i2, i3);
        if (r < 0) {
            FOR_EACH_I0(i0, ne0) {
                F32::store(drow, i0, dst.nb[0], __int_as_float(0x7fc00000));
            }
            continue;
        }
        const char *arow = row_ptr(a, r, i2, i3);
        FOR_EACH_I0(i0, ne0) {
            F32::store(drow, i0, dst.nb[0], S::load(arow, i0, a.nb[0]));
        }
    }
}

__device__ void get_rows_exact_i32(const TensorArg &a, const TensorArg &idx, const TensorArg &dst) {
    const long long ne0 = dst.ne[0];
    FOR_EACH_ROW(row, nrows_of(dst)) {
        long long j, i2, i3;
        unravel_row(row, dst.ne[1], dst.ne[2], j, i2, i3);
        char *drow = row_ptr(dst, j, i2, i3);
        const long long r = picked_row(a, idx, j, i2, i3);
        const char *arow = r < 0 ? nullptr : row_ptr(a, r, i2, i3);
        FOR_EACH_I0(i0, ne0) {
            *(int *)(drow + i0 * dst.nb[0]) = r < 0 ? (int)(-2147483647 - 1) : *(const int *)(arow + i0 * a.nb[0]);
        }
    }
}

// Eight values of a packed f32, f16 or bf16 row from `p` (16-byte aligned), as f32.
template <typename S> __device__ __forceinline__ void load8(const char *p, float (&v)[8]);
template <> __device__ __forceinline__ void load8<F32>(const char *p, float (&v)[8]) {
    const float4 x = ((const float4 *)p)[0], y = ((const float4 *)p)[1];
    v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w, v[4] = y.x, v[5] = y.y, v[6] = y.z, v[7] = y.w;
}
template <> __device__ __forceinline__ void load8<F16>(const char *p, float (&v)[8]) {
    const uint4 u = *(const uint4 *)p;
    const unsigned int w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int k = 0; k < 4; k++) {
        v[2 * k] = f16_bits_to_f32((unsigned short)(w[k] & 0xffffu));
        v[2 * k + 1] = f16_bits_to_f32((unsigned short)(w[k] >> 16));
    }
}
template <> __device__ __forceinline__ void load8<BF16>(const char *p, float (&v)[8]) {
    const uint4 u = *(const uint4 *)p;
    const unsigned int w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int k = 0; k < 4; k++) {
        v[2 * k] = bf16_bits_to_f32((unsigned short)(w[k] & 0xffffu));
        v[2 * k + 1] = bf16_bits_to_f32((unsigned short)(w[k] >> 16));
    }
}

// GET_ROWS of packed f32, f16 or bf16 rows of a multiple of 8 values into packed f32 rows, all
// starting on 16-byte boundaries: one thread per 8 values (16-byte loads and stores), over a
// flat grid-strided range of (destination row, group of 8) pairs. The bits of `get_rows`.
template <typename S, int BYTES>
__device__ void get_rows_x8(const TensorArg &a, const TensorArg &idx, const TensorArg &dst) {
    const long long groups = dst.ne[0] / 8, n = nrows_of(dst) * groups;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        long long row, g, j, i2, i3;
        divmod64(i, groups, row, g);
        unravel_row(row, dst.ne[1], dst.ne[2], j, i2, i3);
        float4 *d = (float4 *)(row_ptr(dst, j, i2, i3) + g * 32);
        const long long r = picked_row(a, idx, j, i2, i3);
        float v[8];
        if (r < 0) {
#pragma unroll
            for (int k = 0; k < 8; k++) {
                v[k] = __int_as_float(0x7fc00000);
            }
        } else {
            load8<S>(row_ptr(a, r, i2, i3) + g * 8 * BYTES, v);
        }
        d[0] = make_float4(v[0], v[1], v[2], v[3]);
        d[1] = make_float4(v[4], v[5], v[6], v[7]);
    }
}

#define GET_ROWS_X8_KERNEL(name, S, BYTES)                                                                       \
    extern "C" __global__ void name(const __grid_constant__ TensorArg a, const __grid_constant__ TensorArg idx,  \
                                    const __grid_constant__ TensorArg dst) {                                     \
        await_prior_kernel();                                                                                    \
        get_rows_x8<S, BYTES>(a, idx, dst);                                                                      \
    }

GET_ROWS_X8_KERNEL(get_rows_x8_f32, F32, 4)
GET_ROWS_X8_KERNEL(get_rows_x8_f16, F16, 2)
GET_ROWS_X8_KERNEL(get_rows_x8_bf16, BF16, 2)

#define GET_ROWS_KERNEL(name, S)                                                                                 \
    extern "C" __global__ void name(const __grid_constant__ TensorArg a, const __grid_constant__ TensorArg idx,  \
                                    const __grid_constant__ TensorArg dst) {                                     \
        await_prior_kernel();                                                                                    \
        get_rows<S>(a, idx, dst);                                                                                \
    }

GET_ROWS_KERNEL(get_rows_f32, F32)
GET_ROWS_KERNEL(get_rows_f16, F16)
GET_ROWS_KERNEL(get_rows_bf16, BF16)
GET_ROWS_KERNEL(get_rows_q8_0, Q8_0)
GET_ROWS_KERNEL(get_rows_q4_0, Q4_0)
GET_ROWS_KERNEL(get_rows_q4_1, Q4_1)
GET_ROWS_KERNEL(get_rows_q5_0, Q5_0)
GET_ROWS_KERNEL(get_rows_q5_1, Q5_1)
GET_ROWS_KERNEL(get_rows_q2_K, Q2_K)
GET_ROWS_KERNEL(get_rows_q3_K, Q3_K)
GET_ROWS_KERNEL(get_rows_q4_K, Q4_K)
GET_ROWS_KERNEL(get_rows_q5_K, Q5_K)
GET_ROWS_KERNEL(get_rows_q6_K, Q6_K)

extern "C" __global__ void get_rows_i32(const __grid_constant__ TensorArg a, const __grid_constant__ TensorArg idx,
                                        const __grid_constant__ TensorArg dst) {
    await_prior_kernel();
    get_rows_exact_i32(a, idx, dst);
}

// SET_ROWS: rows of the F32 values `b: [n, m, d2, d3]` written into `dst: [n, r, d2, d3]`
// (F32, F16 or BF16) at the rows the I32 indices `idx: [m, d2, d3, 1]` name. A row whose index
// is outside 0..r is skipped (the reference fails the compute instead); nothing outside `dst`
// is written.
//
// Launch: 2-D blocks (x over dimension 0, y over value rows), grid-strided over rows.
template <typename D>
__device__ void set_rows(const TensorArg &b, const TensorArg &idx, const TensorArg &dst) {
    const long long ne0 = b.ne[0];
    FOR_EACH_ROW(row, nrows_of(b)) {
        long long j, i2, i3;
        unravel_row(row, b.ne[1], b.ne[2], j, i2, i3);
        const int r = *(const int *)((const char *)idx.data + j * idx.nb[0] + i2 * idx.nb[1] + i3 * idx.nb[2]);
        if (r < 0 || (long long)r >= dst.ne[1]) {
            continue;
        }
        const char *brow = row_ptr(b, j, i2, i3);
        char *drow = row_ptr(dst, r, i2, i3);
        FOR_EACH_I0(i0, ne0) {
            D::store(drow, i0, dst.nb[0], F32::load(brow, i0, b.nb[0]));
        }
    }
}

#define SET_ROWS_KERNEL(name, D)                                                                                 \
    extern "C" __global__ void name(const __grid_constant__ TensorArg b, const __grid_constant__ TensorArg idx,  \
                                    const __grid_constant__ TensorArg dst) {                                     \
        await_prior_kernel();                                                                                    \
        set_rows<D>(b, idx, dst);                                                                                \
    }

SET_ROWS_KERNEL(set_rows_f32, F32)
SET_ROWS_KERNEL(set_rows_f16, F16)
SET_ROWS_KERNEL(set_rows_bf16, BF16)
