// ggml's other 32-value block types (tessera-core's legacy_quant.rs): Q4_1, Q5_0 and Q5_1, read
// value by value (`load`, as the element types of common.cuh) and written a block at a time
// (`quantize`), both operation for operation as legacy_quant.rs (explicitly rounded, never
// contracted into multiply-adds), so the values and the bytes are the CPU's.
//
// Byte j of the 16 bytes of nibbles holds value j (low nibble) and value j + 16 (high nibble);
// bit i of the fifth bits (a little-endian u32 at a 2-byte aligned address) belongs to value i.
#pragma once

#include "common.cuh"

#define Q4_1_BYTES 20
#define Q5_0_BYTES 22
#define Q5_1_BYTES 24

__device__ __forceinline__ float lq_half_at(const char *block, int at) {
    return f16_bits_to_f32(*(const unsigned short *)(block + at));
}

__device__ __forceinline__ unsigned int lq_u32_at(const char *block, int at) {
    const unsigned short *h = (const unsigned short *)(block + at);
    return (unsigned int)h[0] | ((unsigned int)h[1] << 16);
}

// The unsigned 4-bit quant of value j (0..32) from the nibbles at `qs`, plus its fifth bit from
// `qh` (0 for Q4_1).
__device__ __forceinline__ int lq_quant(const char *qs, unsigned int qh, int j) {
    const unsigned char b = (unsigned char)qs[j & 15];
    return (j < 16 ? (b & 0xf) : (b >> 4)) | (((qh >> j) & 1) << 4);
}

// The smallest and largest value as legacy_quant.rs finds them: NaN compares false and never
// becomes either.
__device__ __forceinline__ void lq_min_max(const float *x, float &lo, float &hi) {
    lo = 3.40282347e+38f;
    hi = -3.40282347e+38f;
#pragma unroll
    for (int j = 0; j < QK; j++) {
        if (x[j] < lo) {
            lo = x[j];
        }
        if (x[j] > hi) {
            hi = x[j];
        }
    }
}

__device__ __forceinline__ float lq_inverse(float d) {
    return d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
}

// Stores 32 quants of up to 5 bits as nibbles at `qs` and returns their fifth bits.
__device__ __forceinline__ unsigned int lq_pack(const int (&q)[QK], char *qs) {
    unsigned int qh = 0;
#pragma unroll
    for (int j = 0; j < QK / 2; j++) {
        qs[j] = (char)((q[j] & 0xf) | ((q[j + QK / 2] & 0xf) << 4));
        qh |= (unsigned int)((q[j] >> 4) & 1) << j;
        qh |= (unsigned int)((q[j + QK / 2] >> 4) & 1) << (j + QK / 2);
    }
    return qh;
}

__device__ __forceinline__ void lq_store_f16(char *p, float v) {
    *(unsigned short *)p = f32_to_f16_bits(v);
}

__device__ __forceinline__ void lq_store_u32(char *p, unsigned int v) {
    unsigned short *h = (unsigned short *)p;
    h[0] = (unsigned short)(v & 0xffff);
    h[1] = (unsigned short)(v >> 16);
}

// Q4_1: f16 d, f16 m, nibbles; value = q * d + m. Quantizing: d = (max - min) / 15, m = min,
// q = trunc((x - min) * (1 / d) + 0.5) clamped to 0..15 (saturating, NaN -> 0).
struct Q4_1 {
    static constexpr int block_bytes = Q4_1_BYTES;
    __device__ __forceinline__ static float load(const char *row, long long i0, long long) {
        const char *block = row + (i0 / QK) * Q4_1_BYTES;
        const int q = lq_quant(block + 4, 0, (int)(i0 % QK));
        return __fadd_rn(__fmul_rn((float)q, lq_half_at(block, 0)), lq_half_at(block, 2));
    }
    __device__ __forceinline__ static void quantize(const float *x, char *block) {
        float lo, hi;
        lq_min_max(x, lo, hi);
        const float d = __fdiv_rn(__fsub_rn(hi, lo), 15.0f);
        const float id = lq_inverse(d);
        lq_store_f16(block, d);
        lq_store_f16(block + 2, lo);
        int q[QK];
#pragma unroll
        for (int j = 0; j < QK; j++) {
            q[j] = min(max(f32_to_i32_sat(__fadd_rn(__fmul_rn(__fsub_rn(x[j], lo), id), 0.5f)), 0), 15);
        }
        lq_pack(q, block + 4);
    }
};

// Q5_0: f16 d, fifth bits, nibbles; value = (q - 16) * d. Quantizing: d = m / -16 for the value
// m of largest magnitude (the first one, sign kept), q = trunc(x * (1 / d) + 16.5) clamped to
// 0..31.
struct Q5_0 {
    static constexpr int block_bytes = Q5_0_BYTES;
    __device__ __forceinline__ static float load(const char *row, long long i0, long long) {
        const char *block = row + (i0 / QK) * Q5_0_BYTES;
        const int q = lq_quant(block + 6, lq_u32_at(block, 2), (int)(i0 % QK));
        return __fmul_rn((float)(q - 16), lq_half_at(block, 0));
    }
    __device__ __forceinline__ static void quantize(const float *x, char *block) {
        float amax = 0.0f, m = 0.0f;
#pragma unroll
        for (int j = 0; j < QK; j++) {
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                m = x[j];
            }
        }
        const float d = __fdiv_rn(m, -16.0f);
        const float id = lq_inverse(d);
        lq_store_f16(block, d);
        int q[QK];
#pragma unroll
        for (int j = 0; j < QK; j++) {
            q[j] = min(max(f32_to_i32_sat(__fadd_rn(__fmul_rn(x[j], id), 16.5f)), 0), 31);
        }
        lq_store_u32(block + 2, lq_pack(q, block + 6));
    }
};

// Q5_1: f16 d, f16 m, fifth bits, nibbles; value = q * d + m. Quantizing as Q4_1 with 31 steps.
struct Q5_1 {
    static constexpr int block_bytes = Q5_1_BYTES;
    __device__ __forceinline__ static float load(const char *row, long long i0, long long) {
        const char *block = row + (i0 / QK) * Q5_1_BYTES;
        const int q = lq_quant(block + 8, lq_u32_at(block, 4), (int)(i0 % QK));
        return __fadd_rn(__fmul_rn((float)q, lq_half_at(block, 0)), lq_half_at(block, 2));
    }
    __device__ __forceinline__ static void quantize(const float *x, char *block) {
        float lo, hi;
        lq_min_max(x, lo, hi);
        const float d = __fdiv_rn(__fsub_rn(hi, lo), 31.0f);
        const float id = lq_inverse(d);
        lq_store_f16(block, d);
        lq_store_f16(block + 2, lo);
        int q[QK];
#pragma unroll
        for (int j = 0; j < QK; j++) {
            q[j] = min(max(f32_to_i32_sat(__fadd_rn(__fmul_rn(__fsub_rn(x[j], lo), id), 0.5f)), 0), 31);
        }
        lq_store_u32(block + 4, lq_pack(q, block + 8));
    }
};
