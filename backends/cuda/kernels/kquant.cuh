// The K-quants (ggml's Q4_K, Q5_K, Q6_K; tessera-core's kquant.rs): super-blocks of 256 values
// in sub-blocks with their own quantized scales. Values are read one at a time (`load`, as the
// element types of common.cuh) or 8 consecutive ones at a time (`load8`, for whole rows),
// following kquant.rs operation for operation (explicitly rounded, never contracted into
// multiply-adds), so the values are the CPU's. Nothing quantizes into them here: the CPU's
// quantizer is ggml's iterative scale search, which the CUDA backend leaves to the CPU (as
// ggml's own CUDA backend does).
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
// Q4_K: f16 d, f16 dmin, 12 bytes of scales and mins, 128 bytes of nibbles. Byte 32c + l holds
// value 64c + l (low nibble, sub-block 2c) and value 64c + 32 + l (high nibble, sub-block 2c + 1).

struct Q4_K {
    static constexpr int block_bytes = Q4_K_BYTES;

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
};

// Q5_K: as Q4_K with a fifth bit per value: bit 2c (low nibble) or 2c + 1 (high nibble) of
// byte l of the 32 bytes `qh` before the nibbles adds 16.
struct Q5_K {
    static constexpr int block_bytes = Q5_K_BYTES;

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
};

// Q6_K: 128 bytes of low nibbles `ql`, 64 bytes of high bit pairs `qh`, 16 int8 scales of
// sub-blocks of 16, then f16 d. In half h (values 128h ..), group g (32 values) and position l:
// the low nibble is in ql[64h + 32(g & 1) + l] (low half for g < 2), the high pair is bits
// 2g, 2g + 1 of qh[32h + l], the scale is scales[8h + 2g + l / 16]; value = d * scale * (q - 32).
struct Q6_K {
    static constexpr int block_bytes = Q6_K_BYTES;

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
};
