// The low-bit K-quants (ggml's Q2_K and Q3_K; tessera-core's kquant_low.rs): 256 values in 16
// sub-blocks of 16. Read value by value (`load`) or 8 consecutive values at a time (`load8`),
// operation for operation as kquant_low.rs, so the values are the CPU's. Nothing quantizes into
// them here (the CPU's quantizer is ggml's scale search).
//
// Both keep 2-bit quants in 64 bytes `qs`: in half h (128 values), byte 32h + l holds values
// 128h + 32g + l (g = 0..3) in its bit pairs 2g. Value v is in sub-block v / 16.
#pragma once

#include "kquant.cuh"

#define Q2_K_BYTES 84
#define Q3_K_BYTES 110

// Where the 8 values 8t .. 8t + 7 (t in 0..32) sit: half h, group g, first position l0 of 32.
__device__ __forceinline__ void kql_place(int t, int &h, int &g, int &l0) {
    const int v = 8 * t;
    h = v / 128;
    g = (v % 128) / 32;
    l0 = v % 32;
}

// Q2_K: 16 scale bytes (low nibble: the sub-block's scale, high nibble: its min), qs, f16 d,
// f16 dmin; value = d * scale * q - dmin * min.
struct Q2_K {
    static constexpr int block_bytes = Q2_K_BYTES;

    // d * scale and dmin * min of sub-block j.
    __device__ __forceinline__ static void scales(const unsigned char *block, int j, float &dl, float &ml) {
        const int sc = block[j];
        dl = __fmul_rn(f16_bits_to_f32((unsigned short)(block[80] | (block[81] << 8))), (float)(sc & 0xf));
        ml = __fmul_rn(f16_bits_to_f32((unsigned short)(block[82] | (block[83] << 8))), (float)(sc >> 4));
    }

    __device__ __forceinline__ static float load(const char *row, long long i0, long long) {
        const unsigned char *block = (const unsigned char *)row + (i0 / QK_K) * Q2_K_BYTES;
        const int v = (int)(i0 % QK_K), h = v / 128, g = (v % 128) / 32, l = v % 32;
        float dl, ml;
        scales(block, v / 16, dl, ml);
        return kq_scaled(dl, ml, (block[16 + 32 * h + l] >> (2 * g)) & 3);
    }

    __device__ __forceinline__ static void load8(const unsigned char *block, int t, float (&y)[8]) {
        int h, g, l0;
        kql_place(t, h, g, l0);
        float dl, ml;
        scales(block, t / 2, dl, ml);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            y[i] = kq_scaled(dl, ml, (block[16 + 32 * h + l0 + i] >> (2 * g)) & 3);
        }
    }
};

// Q3_K: 32 bytes of high bits `hmask` (bit 4h + g of byte l is value 128h + 32g + l's), qs, 12
// bytes of 6-bit scales, f16 d. A value's quant is its 2 bits minus 4 where its high bit is
// clear; value = d * (scale - 32) * q.
struct Q3_K {
    static constexpr int block_bytes = Q3_K_BYTES;

    // Sub-block j's 6-bit scale (offset by 32) from the 12 bytes at `s`: low nibbles in bytes
    // 0-7 (sub-blocks 8-15 in the high nibbles), bit pair j / 4 of byte 8 + j % 4 on top.
    __device__ __forceinline__ static int scale(const unsigned char *s, int j) {
        const int low = j < 8 ? s[j] & 0xf : s[j - 8] >> 4;
        return low | (((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4);
    }

    __device__ __forceinline__ static float step(const unsigned char *block, int j) {
        const float d = f16_bits_to_f32((unsigned short)(block[108] | (block[109] << 8)));
        return __fmul_rn(d, (float)(scale(block + 96, j) - 32));
    }

    __device__ __forceinline__ static int quant(const unsigned char *block, int h, int g, int l) {
        const int low = (block[32 + 32 * h + l] >> (2 * g)) & 3;
        return low - ((block[l] >> (4 * h + g)) & 1 ? 0 : 4);
    }

    __device__ __forceinline__ static float load(const char *row, long long i0, long long) {
        const unsigned char *block = (const unsigned char *)row + (i0 / QK_K) * Q3_K_BYTES;
        const int v = (int)(i0 % QK_K), h = v / 128, g = (v % 128) / 32, l = v % 32;
        return __fmul_rn(step(block, v / 16), (float)quant(block, h, g, l));
    }

    __device__ __forceinline__ static void load8(const unsigned char *block, int t, float (&y)[8]) {
        int h, g, l0;
        kql_place(t, h, g, l0);
        const float dl = step(block, t / 2);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            y[i] = __fmul_rn(dl, (float)quant(block, h, g, l0 + i));
        }
    }
};
