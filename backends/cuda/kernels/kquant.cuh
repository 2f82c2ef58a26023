// The K-quants (ggml's Q4_K, Q5_K, Q6_K; tessera-core's kquant.rs): super-blocks of 256 values
// in sub-blocks with their own quantized scales. Values are read one at a time (`load`, as the
// element types of common.cuh) or 8 consecutive ones at a time (`load8`, for whole rows), and
// blocks are written by `quantize`. Both follow kquant.rs operation for operation (explicitly
// rounded, never contracted into multiply-adds), so the values and bytes are the CPU's.
#pragma once

#include "common.cuh"

#define QK_K 256
#define Q4_K_BYTES 144
#define Q5_K_BYTES 176
#define Q6_K_BYTES 210

// Sub-block j's 6-bit scale and min from the 12 packed bytes `q` (ggml's get_scale_min_k4).
__device__ __forceinline__ void kq_scale_min(int j, const unsigned char *q, int &sc, int &m) {
    if (j < 4) {
        sc = q[j] & 63;
        m = q[j + 4] & 63;
    } else {
        sc = (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4);
        m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

// d * scale * q - dmin * min, rounded as kquant.rs rounds it.
__device__ __forceinline__ float kq_scaled(float d1, float m1, int q) {
    return __fsub_rn(__fmul_rn(d1, (float)q), m1);
}

// ---------------------------------------------------------------------------------------------
// Quantizing: the range fit of kquant.rs.

// The smallest f16 d with d * steps >= max (max >= 0).
__device__ __forceinline__ unsigned short kq_super_scale(float max, float steps) {
    const unsigned short d = f32_to_f16_bits(__fdiv_rn(max, steps));
    return __fmul_rn(f16_bits_to_f32(d), steps) < max ? (unsigned short)(d + 1) : d;
}

// v / d rounded up, clamped to 0..top (0 when d is 0).
__device__ __forceinline__ int kq_ceil_steps(float v, float d, int top) {
    if (!(d > 0.0f)) {
        return 0;
    }
    return min(max(f32_to_i32_sat(ceilf(__fdiv_rn(v, d))), 0), top);
}

__device__ __forceinline__ float kq_inverse(float step) {
    return step > 0.0f ? __fdiv_rn(1.0f, step) : 0.0f;
}

// The fit of eight sub-blocks of 32 as scale * q - min, q in 0..levels, of the values x(0..256):
// d and dmin (f16 bits), the packed 6-bit scales and mins (12 bytes at `scales`), and per
// sub-block the step, offset and inverse step that quantize its values.
template <typename X>
__device__ __forceinline__ void kq_fit_scale_min(const X &x, float levels, unsigned short &d, unsigned short &dmin,
                                                 unsigned char *scales, float (&step)[8], float (&offset)[8],
                                                 float (&inv)[8]) {
    float lo[8], hi[8];
    float max_neg_lo = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; j++) {
        lo[j] = 0.0f;
        hi[j] = 0.0f;
        for (int v = 0; v < 32; v++) {
            const float value = x(32 * j + v);
            lo[j] = fminf(lo[j], value);
            hi[j] = fmaxf(hi[j], value);
        }
        max_neg_lo = fmaxf(max_neg_lo, -lo[j]);
    }
    dmin = kq_super_scale(max_neg_lo, 63.0f);
    const float dminf = f16_bits_to_f32(dmin);
    int lm[8], ls[8];
    float scale[8];
    float max_scale = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; j++) {
        lm[j] = kq_ceil_steps(-lo[j], dminf, 63);
        scale[j] = __fdiv_rn(__fadd_rn(hi[j], __fmul_rn(dminf, (float)lm[j])), levels);
        max_scale = fmaxf(max_scale, scale[j]);
    }
    d = kq_super_scale(max_scale, 63.0f);
    const float df = f16_bits_to_f32(d);
#pragma unroll
    for (int j = 0; j < 8; j++) {
        ls[j] = kq_ceil_steps(scale[j], df, 63);
        step[j] = __fmul_rn(df, (float)ls[j]);
        offset[j] = __fmul_rn(dminf, (float)lm[j]);
        inv[j] = kq_inverse(step[j]);
    }
#pragma unroll
    for (int j = 0; j < 12; j++) {
        scales[j] = 0;
    }
#pragma unroll
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            scales[j] = (unsigned char)ls[j];
            scales[j + 4] = (unsigned char)lm[j];
        } else {
            scales[j + 4] = (unsigned char)((ls[j] & 0xf) | ((lm[j] & 0xf) << 4));
            scales[j - 4] |= (unsigned char)((ls[j] >> 4) << 6);
            scales[j] |= (unsigned char)((lm[j] >> 4) << 6);
        }
    }
}

// round((v + offset) * inv) clamped to 0..levels.
__device__ __forceinline__ int kq_quant(float v, float offset, float inv, int levels) {
    return min(max(f32_to_i32_sat(roundf(__fmul_rn(__fadd_rn(v, offset), inv))), 0), levels);
}

__device__ __forceinline__ void kq_store_f16(char *p, unsigned short h) {
    p[0] = (char)(h & 0xff);
    p[1] = (char)(h >> 8);
}

// ---------------------------------------------------------------------------------------------
// Q4_K: f16 d, f16 dmin, 12 bytes of scales and mins, 128 bytes of nibbles. Byte 32c + l holds
// value 64c + l (low nibble, sub-block 2c) and value 64c + 32 + l (high nibble, sub-block 2c + 1).

struct Q4_K {
    static constexpr bool quantized = true;
    static constexpr int block_bytes = Q4_K_BYTES;
    static constexpr int block_values = QK_K;

    __device__ __forceinline__ static float load(const char *row, long long i0, long long) {
        const unsigned char *block = (const unsigned char *)row + (i0 / QK_K) * Q4_K_BYTES;
        const int j = (int)(i0 % QK_K), c = j / 64, l = j % 32, high = (j % 64) / 32;
        int sc, m;
        kq_scale_min(2 * c + high, block + 4, sc, m);
        const float d = f16_bits_to_f32(*(const unsigned short *)block);
        const float dmin = f16_bits_to_f32(*(const unsigned short *)(block + 2));
        const unsigned char b = block[16 + 32 * c + l];
        return kq_scaled(__fmul_rn(d, (float)sc), __fmul_rn(dmin, (float)m), high ? b >> 4 : b & 0xf);
    }

    // Values 8t .. 8t + 7 of the block (t in 0..32).
    __device__ __forceinline__ static void load8(const unsigned char *block, int t, float (&y)[8]) {
        const int j0 = 8 * t, c = j0 / 64, l0 = j0 % 32, high = (j0 % 64) / 32;
        int sc, m;
        kq_scale_min(2 * c + high, block + 4, sc, m);
        const float d1 = __fmul_rn(f16_bits_to_f32(*(const unsigned short *)block), (float)sc);
        const float m1 = __fmul_rn(f16_bits_to_f32(*(const unsigned short *)(block + 2)), (float)m);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const unsigned char b = block[16 + 32 * c + l0 + i];
            y[i] = kq_scaled(d1, m1, high ? b >> 4 : b & 0xf);
        }
    }

    template <typename X> __device__ __forceinline__ static void quantize(const X &x, char *block) {
        unsigned short d, dmin;
        float step[8], offset[8], inv[8];
        kq_fit_scale_min(x, 15.0f, d, dmin, (unsigned char *)block + 4, step, offset, inv);
        kq_store_f16(block, d);
        kq_store_f16(block + 2, dmin);
#pragma unroll
        for (int c = 0; c < 4; c++) {
            for (int l = 0; l < 32; l++) {
                const int lo = kq_quant(x(64 * c + l), offset[2 * c], inv[2 * c], 15);
                const int hi = kq_quant(x(64 * c + 32 + l), offset[2 * c + 1], inv[2 * c + 1], 15);
                block[16 + 32 * c + l] = (char)(lo | (hi << 4));
            }
        }
    }
};

// Q5_K: as Q4_K with a fifth bit per value: bit 2c (low nibble) or 2c + 1 (high nibble) of
// byte l of the 32 bytes `qh` before the nibbles adds 16.
struct Q5_K {
    static constexpr bool quantized = true;
    static constexpr int block_bytes = Q5_K_BYTES;
    static constexpr int block_values = QK_K;

    __device__ __forceinline__ static float load(const char *row, long long i0, long long) {
        const unsigned char *block = (const unsigned char *)row + (i0 / QK_K) * Q5_K_BYTES;
        const int j = (int)(i0 % QK_K), c = j / 64, l = j % 32, high = (j % 64) / 32;
        int sc, m;
        kq_scale_min(2 * c + high, block + 4, sc, m);
        const float d = f16_bits_to_f32(*(const unsigned short *)block);
        const float dmin = f16_bits_to_f32(*(const unsigned short *)(block + 2));
        const unsigned char b = block[48 + 32 * c + l];
        const int q = (high ? b >> 4 : b & 0xf) + (((block[16 + l] >> (2 * c + high)) & 1) << 4);
        return kq_scaled(__fmul_rn(d, (float)sc), __fmul_rn(dmin, (float)m), q);
    }

    __device__ __forceinline__ static void load8(const unsigned char *block, int t, float (&y)[8]) {
        const int j0 = 8 * t, c = j0 / 64, l0 = j0 % 32, high = (j0 % 64) / 32;
        int sc, m;
        kq_scale_min(2 * c + high, block + 4, sc, m);
        const float d1 = __fmul_rn(f16_bits_to_f32(*(const unsigned short *)block), (float)sc);
        const float m1 = __fmul_rn(f16_bits_to_f32(*(const unsigned short *)(block + 2)), (float)m);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const unsigned char b = block[48 + 32 * c + l0 + i];
            const int q = (high ? b >> 4 : b & 0xf) + (((block[16 + l0 + i] >> (2 * c + high)) & 1) << 4);
            y[i] = kq_scaled(d1, m1, q);
        }
    }

    template <typename X> __device__ __forceinline__ static void quantize(const X &x, char *block) {
        unsigned short d, dmin;
        float step[8], offset[8], inv[8];
        kq_fit_scale_min(x, 31.0f, d, dmin, (unsigned char *)block + 4, step, offset, inv);
        kq_store_f16(block, d);
        kq_store_f16(block + 2, dmin);
        for (int l = 0; l < 32; l++) {
            int qh = 0;
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const int lo = kq_quant(x(64 * c + l), offset[2 * c], inv[2 * c], 31);
                const int hi = kq_quant(x(64 * c + 32 + l), offset[2 * c + 1], inv[2 * c + 1], 31);
                block[48 + 32 * c + l] = (char)((lo & 0xf) | ((hi & 0xf) << 4));
                qh |= ((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1));
            }
            block[16 + l] = (char)qh;
        }
    }
};

// Q6_K: 128 bytes of low nibbles `ql`, 64 bytes of high bit pairs `qh`, 16 int8 scales of
// sub-blocks of 16, then f16 d. In half h (values 128h ..), group g (32 values) and position l:
// the low nibble is in ql[64h + 32(g & 1) + l] (low half for g < 2), the high pair is bits
// 2g, 2g + 1 of qh[32h + l], the scale is scales[8h + 2g + l / 16]; value = d * scale * (q - 32).
struct Q6_K {
    static constexpr bool quantized = true;
    static constexpr int block_bytes = Q6_K_BYTES;
    static constexpr int block_values = QK_K;

    __device__ __forceinline__ static int quant(const unsigned char *block, int h, int g, int l) {
        const unsigned char b = block[64 * h + 32 * (g & 1) + l];
        const int low = g < 2 ? b & 0xf : b >> 4;
        return (low | (((block[128 + 32 * h + l] >> (2 * g)) & 3) << 4)) - 32;
    }

    __device__ __forceinline__ static float scale(const unsigned char *block, int h, int g, int l) {
        const float d = f16_bits_to_f32((unsigned short)(block[208] | (block[209] << 8)));
        return __fmul_rn(d, (float)(signed char)block[192 + 8 * h + 2 * g + l / 16]);
    }

    __device__ __forceinline__ static float load(const char *row, long long i0, long long) {
        const unsigned char *block = (const unsigned char *)row + (i0 / QK_K) * Q6_K_BYTES;
        const int j = (int)(i0 % QK_K), h = j / 128, g = (j % 128) / 32, l = j % 32;
        return __fmul_rn(scale(block, h, g, l), (float)quant(block, h, g, l));
    }

    __device__ __forceinline__ static void load8(const unsigned char *block, int t, float (&y)[8]) {
        const int j0 = 8 * t, h = j0 / 128, g = (j0 % 128) / 32, l0 = j0 % 32;
        const float s = scale(block, h, g, l0);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            y[i] = __fmul_rn(s, (float)quant(block, h, g, l0 + i));
        }
    }

    template <typename X> __device__ __forceinline__ static void quantize(const X &x, char *block) {
        float scale[16];
        float max_scale = 0.0f;
#pragma unroll
        for (int j = 0; j < 16; j++) {
            float amax = 0.0f;
            for (int v = 0; v < 16; v++) {
                amax = fmaxf(amax, fabsf(x(16 * j + v)));
            }
            scale[j] = __fdiv_rn(amax, 31.0f);
            max_scale = fmaxf(max_scale, scale[j]);
        }
        const unsigned short d = kq_super_scale(max_scale, 127.0f);
        const float df = f16_bits_to_f32(d);
        float inv[16];
#pragma unroll
        for (int j = 0; j < 16; j++) {
            const int sc = kq_ceil_steps(scale[j], df, 127);
            block[192 + j] = (char)(signed char)sc;
            inv[j] = kq_inverse(__fmul_rn(df, (float)sc));
        }
#pragma unroll
        for (int h = 0; h < 2; h++) {
#pragma unroll
            for (int g = 0; g < 4; g++) {
                // Values 128h + 32g + l: sub-blocks 8h + 2g (l < 16) and 8h + 2g + 1.
                for (int l = 0; l < 32; l++) {
                    const float iv = l < 16 ? inv[8 * h + 2 * g] : inv[8 * h + 2 * g + 1];
                    const int r = f32_to_i32_sat(roundf(__fmul_rn(x(128 * h + 32 * g + l), iv)));
                    const int q = min(max(r, -32), 31) + 32;
                    char *low = block + 64 * h + 32 * (g & 1) + l;
                    char *high = block + 128 + 32 * h + l;
                    // Each byte is written in full by its first group (g = 0 for ql's low
                    // halves and qh, g = 1 for the other low halves) and completed by the later.
                    if (g < 2) {
                        *low = (char)(q & 0xf);
                    } else {
                        *low = (char)(*low | ((q & 0xf) << 4));
                    }
                    *high = (char)((g == 0 ? 0 : *high) | ((q >> 4) << (2 * g)));
                }
            }
        }
        kq_store_f16(block + 208, d);
    }
};
