// CPY and CONT into a quantized type: one invocation per destination block gathers the
// block's values from the source in row-major order (any type, quantized sources
// dequantized, any strides) and quantizes them exactly as the CPU does (core/src/quant.rs,
// core/src/kquant.rs): the same scales, the same roundings, the same bytes.
#include "common.glsl"
#include "quant.glsl"

layout(local_size_x = 64) in;

// The values of the block being quantized.
float x[256];

// a / b rounded to nearest even, as the CPU divides. Vulkan lets a device's division be off
// by a few ulps and its fma be a multiply and an add, so for normal operands and results
// the quotient is computed from the significands in integer arithmetic; zero, subnormal,
// infinite and NaN operands, or a result outside the normal range, take the device's
// division.
float div_rn(float a, float b) {
    uint ua = floatBitsToUint(a);
    uint ub = floatBitsToUint(b);
    uint sign = (ua ^ ub) & 0x80000000u;
    int ea = int((ua >> 23) & 0xffu);
    int eb = int((ub >> 23) & 0xffu);
    if (ea == 0 || eb == 0 || ea == 255 || eb == 255) {
        return a == 0.0 && b != 0.0 ? uintBitsToFloat(sign) : a / b;
    }
    uint64_t ma = uint64_t((ua & 0x7fffffu) | 0x800000u);
    uint64_t mb = uint64_t((ub & 0x7fffffu) | 0x800000u);
    // 25 bits of the quotient (24 of the result and a rounding bit), the rest sticky.
    int e = ea - eb + 127;
    uint64_t num = ma << 24;
    if (ma < mb) {
        num <<= 1;
        e -= 1;
    }
    uint64_t q = num / mb;
    bool sticky = num != q * mb;
    uint m = uint(q >> 1);
    if ((q & 1ul) != 0ul && (sticky || (m & 1u) != 0u)) {
        m += 1u;
    }
    if (m == 0x1000000u) {
        m = 0x800000u;
        e += 1;
    }
    if (e < 1 || e > 254) {
        return a / b;
    }
    return uintBitsToFloat(sign | (uint(e) << 23) | (m & 0x7fffffu));
}

// Rounding half away from zero (C's roundf).
float round_away(float v) {
    precise float t = trunc(v);
    precise float frac = abs(v - t);
    if (frac >= 0.5) {
        t += sign(v);
    }
    return t;
}

// Two bytes at a 2-byte aligned address.
void store2(uint64_t a, uint lo, uint hi) {
    U16Ref(a).v = uint16_t((lo & 0xffu) | ((hi & 0xffu) << 8));
}

// ---- q8_0: d = max|x| / 127, q = round(x / d).

void quantize_q8_0(uint64_t blk) {
    float amax = 0.0;
    for (uint j = 0u; j < 32u; j++) {
        amax = max(amax, abs(x[j]));
    }
    float d = div_rn(amax, 127.0);
    float id = d != 0.0 ? div_rn(1.0, d) : 0.0;
    U16Ref(blk).v = uint16_t(float_to_f16_bits(d));
    for (uint j = 0u; j < 32u; j += 2u) {
        precise float v0 = x[j] * id;
        precise float v1 = x[j + 1u] * id;
        int q0 = int(clamp(round_away(v0), -128.0, 127.0));
        int q1 = int(clamp(round_away(v1), -128.0, 127.0));
        store2(blk + 2u + j, uint(q0), uint(q1));
    }
}

// ---- q4_0: d = m / -8 for the value m of largest magnitude, q = min(15, trunc(x / d + 8.5)).

uint nibble_q4_0(float v, float id) {
    precise float t = v * id + 8.5;
    return uint(int(clamp(t, 0.0, 15.0)));
}

void quantize_q4_0(uint64_t blk) {
    float amax = 0.0;
    float m = 0.0;
    for (uint j = 0u; j < 32u; j++) {
        if (amax < abs(x[j])) {
            amax = abs(x[j]);
            m = x[j];
        }
    }
    float d = m * -0.125;
    float id = d != 0.0 ? div_rn(1.0, d) : 0.0;
    U16Ref(blk).v = uint16_t(float_to_f16_bits(d));
    for (uint j = 0u; j < 16u; j += 2u) {
        uint b0 = nibble_q4_0(x[j], id) | (nibble_q4_0(x[j + 16u], id) << 4);
        uint b1 = nibble_q4_0(x[j + 1u], id) | (nibble_q4_0(x[j + 17u], id) << 4);
        store2(blk + 2u + j, b0, b1);
    }
}

// ---- K-quants: f16 super-block scales, quantized sub-block scales rounded up.

// The smallest f16 d (as bits) with d * steps >= m (m >= 0).
uint super_scale(float m, float steps) {
    if (m == 0.0) {
        // +0 whatever the sign of a zero m (compilers may pick either zero in max).
        return 0u;
    }
    uint d = float_to_f16_bits(div_rn(m, steps));
    precise float back = f16_bits_to_float(d) * steps;
    if (back < m) {
        d += 1u;
    }
    return d;
}

// v / d rounded up, at most `most` (0 when d is 0).
uint ceil_steps(float v, uint d_bits, uint most) {
    float d = f16_bits_to_float(d_bits);
    if (d > 0.0) {
        return uint(clamp(ceil(div_rn(v, d)), 0.0, float(most)));
    }
    return 0u;
}

// Per sub-block of 32 (q4_K, q5_K): the factor and offset that give q = round((x + off) * inv).
float sub_inv[8];
float sub_off[8];

// Fits eight sub-blocks of 32 as scale * q - min with q in 0..levels: mins quantized first
// (rounded up, so the lowest value is covered), then each scale to the range above its min.
// Writes d, dmin and the 12 bytes of packed scales and mins to `blk`.
void fit_scale_min(uint64_t blk, float levels) {
    float lo[8];
    float hi[8];
    float neg_lo = 0.0;
    for (uint j = 0u; j < 8u; j++) {
        lo[j] = 0.0;
        hi[j] = 0.0;
        for (uint l = 0u; l < 32u; l++) {
            lo[j] = min(lo[j], x[32u * j + l]);
            hi[j] = max(hi[j], x[32u * j + l]);
        }
        neg_lo = max(neg_lo, -lo[j]);
    }
    uint dmin = super_scale(neg_lo, 63.0);
    float dminf = f16_bits_to_float(dmin);
    uint lm[8];
    float scale[8];
    float smax = 0.0;
    for (uint j = 0u; j < 8u; j++) {
        lm[j] = ceil_steps(-lo[j], dmin, 63u);
        precise float shift = dminf * float(lm[j]);
        precise float top = hi[j] + shift;
        scale[j] = div_rn(top, levels);
        smax = max(smax, scale[j]);
    }
    uint d = super_scale(smax, 63.0);
    float df = f16_bits_to_float(d);
    uint packed[12];
    for (uint j = 0u; j < 12u; j++) {
        packed[j] = 0u;
    }
    for (uint j = 0u; j < 8u; j++) {
        uint ls = ceil_steps(scale[j], d, 63u);
        precise float step = df * float(ls);
        precise float off = dminf * float(lm[j]);
        sub_inv[j] = step > 0.0 ? div_rn(1.0, step) : 0.0;
        sub_off[j] = off;
        if (j < 4u) {
            packed[j] = ls;
            packed[j + 4u] = lm[j];
        } else {
            packed[j + 4u] = (ls & 0xfu) | ((lm[j] & 0xfu) << 4);
            packed[j - 4u] |= (ls >> 4) << 6;
            packed[j] |= (lm[j] >> 4) << 6;
        }
    }
    U16Ref(blk).v = uint16_t(d);
    U16Ref(blk + 2u).v = uint16_t(dmin);
    for (uint j = 0u; j < 12u; j += 2u) {
        store2(blk + 4u + j, packed[j], packed[j + 1u]);
    }
}

// The quant of value v of the super-block, in 0..levels.
uint q_scale_min(uint v, float levels) {
    uint j = v / 32u;
    precise float shifted = x[v] + sub_off[j];
    precise float t = shifted * sub_inv[j];
    return uint(int(clamp(round_away(t), 0.0, levels)));
}

void quantize_q4_k(uint64_t blk) {
    fit_scale_min(blk, 15.0);
    for (uint c = 0u; c < 4u; c++) {
        for (uint l = 0u; l < 32u; l += 2u) {
            uint b0 = q_scale_min(64u * c + l, 15.0) | (q_scale_min(64u * c + 32u + l, 15.0) << 4);
            uint b1 = q_scale_min(64u * c + l + 1u, 15.0) | (q_scale_min(64u * c + 33u + l, 15.0) << 4);
            store2(blk + 16u + 32u * c + l, b0, b1);
        }
    }
}

void quantize_q5_k(uint64_t blk) {
    fit_scale_min(blk, 31.0);
    uint qh[32];
    for (uint l = 0u; l < 32u; l++) {
        qh[l] = 0u;
    }
    for (uint c = 0u; c < 4u; c++) {
        for (uint l = 0u; l < 32u; l += 2u) {
            uint b[2];
            for (uint e = 0u; e < 2u; e++) {
                uint lo = q_scale_min(64u * c + l + e, 31.0);
                uint hi = q_scale_min(64u * c + 32u + l + e, 31.0);
                b[e] = (lo & 0xfu) | ((hi & 0xfu) << 4);
                qh[l + e] |= ((lo >> 4) << (2u * c)) | ((hi >> 4) << (2u * c + 1u));
            }
            store2(blk + 48u + 32u * c + l, b[0], b[1]);
        }
    }
    for (uint l = 0u; l < 32u; l += 2u) {
        store2(blk + 16u + l, qh[l], qh[l + 1u]);
    }
}

// q6_K: sub-blocks of 16 with positive i8 scales mapping their largest magnitude to 31.
float q6_inv[16];

// The quant of value v of the super-block, in 0..63 (q - 32 is the signed value).
uint q6(uint v) {
    precise float t = x[v] * q6_inv[v / 16u];
    return uint(int(clamp(round_away(t), -32.0, 31.0)) + 32);
}

void quantize_q6_k(uint64_t blk) {
    float scale[16];
    float smax = 0.0;
    for (uint s = 0u; s < 16u; s++) {
        float amax = 0.0;
        for (uint l = 0u; l < 16u; l++) {
            amax = max(amax, abs(x[16u * s + l]));
        }
        scale[s] = div_rn(amax, 31.0);
        smax = max(smax, scale[s]);
    }
    uint d = super_scale(smax, 127.0);
    float df = f16_bits_to_float(d);
    uint sc[16];
    for (uint s = 0u; s < 16u; s++) {
        sc[s] = ceil_steps(scale[s], d, 127u);
        precise float step = df * float(sc[s]);
        q6_inv[s] = step > 0.0 ? div_rn(1.0, step) : 0.0;
    }
    for (uint h = 0u; h < 2u; h++) {
        uint q = 128u * h;
        for (uint l = 0u; l < 32u; l += 2u) {
            uint lo[2];
            uint mid[2];
            uint high[2];
            for (uint e = 0u; e < 2u; e++) {
                uint v = q + l + e;
                uint q1 = q6(v);
                uint q2 = q6(v + 32u);
                uint q3 = q6(v + 64u);
                uint q4 = q6(v + 96u);
                lo[e] = (q1 & 0xfu) | ((q3 & 0xfu) << 4);
                mid[e] = (q2 & 0xfu) | ((q4 & 0xfu) << 4);
                high[e] = (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6);
            }
            store2(blk + 64u * h + l, lo[0], lo[1]);
            store2(blk + 64u * h + l + 32u, mid[0], mid[1]);
            store2(blk + 128u + 32u * h + l, high[0], high[1]);
        }
    }
    for (uint s = 0u; s < 16u; s += 2u) {
        store2(blk + 192u + s, sc[s], sc[s + 1u]);
    }
    U16Ref(blk + 208u).v = uint16_t(d);
}

void main() {
    Tensor dst = pc.args.dst;
    Tensor src = pc.args.src[0];
    uint bl = block_len(dst.type);
    uint per_row = dst.ne[0] / bl;
    uint ib = global_index(64);
    if (per_row == 0u || ib >= per_row * dst.ne[1] * dst.ne[2] * dst.ne[3]) {
        return;
    }
    uint r = ib / per_row;
    uint i1 = r % dst.ne[1];
    r /= dst.ne[1];
    uint i2 = r % dst.ne[2];
    uint i3 = r / dst.ne[2];
    uint64_t blk = row_at(dst, i1, i2, i3) + uint64_t(ib % per_row) * dst.nb[0];
    uint first = ib * bl;
    for (uint j = 0u; j < bl; j++) {
        x[j] = load_value(src, coords(src, first + j));
    }
    if (dst.type == T_Q8_0) {
        quantize_q8_0(blk);
    } else if (dst.type == T_Q4_0) {
        quantize_q4_0(blk);
    } else if (dst.type == T_Q4_K) {
        quantize_q4_k(blk);
    } else if (dst.type == T_Q5_K) {
        quantize_q5_k(blk);
    } else {
        quantize_q6_k(blk);
    }
}
