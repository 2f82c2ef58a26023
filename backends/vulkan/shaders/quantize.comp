// CPY and CONT into Q8_0, Q4_0, Q4_1, Q5_0 or Q5_1: one invocation per destination block
// gathers the block's values from the source in row-major order (any type, quantized sources
// dequantized, any strides) and quantizes them exactly as the CPU does (core/src/quant.rs,
// core/src/legacy_quant.rs): the same scales, the same roundings, the same bytes. (The
// K-quants search their scales as ggml does; the CPU quantizes into them.)
#include "common.glsl"
#include "quant.glsl"

layout(local_size_x = 64) in;

// The values of the block being quantized.
float x[32];

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

// ---- q4_1, q5_1: d = (max - min) / (2^bits - 1), m = min, q = trunc((x - min) / d + 0.5);
// q5_0: d = m / -16 for the value m of largest magnitude, q = trunc(x / d + 16.5).

uint quant_with_min(float v, float lo, float id, float top) {
    precise float t = (v - lo) * id + 0.5;
    return uint(int(clamp(t, 0.0, top)));
}

uint quant_q5_0(float v, float id) {
    precise float t = v * id + 16.5;
    return uint(int(clamp(t, 0.0, 31.0)));
}

// Writes the 32 quants `q` (as nibbles at `nibbles`, and their fifth bits at `qh` unless 0).
uint q[32];
void store_quants(uint64_t nibbles, uint64_t qh) {
    uint bits = 0u;
    for (uint j = 0u; j < 32u; j++) {
        bits |= ((q[j] >> 4) & 1u) << j;
    }
    for (uint j = 0u; j < 16u; j += 2u) {
        uint b0 = (q[j] & 0xfu) | ((q[j + 16u] & 0xfu) << 4);
        uint b1 = (q[j + 1u] & 0xfu) | ((q[j + 17u] & 0xfu) << 4);
        store2(nibbles + j, b0, b1);
    }
    if (qh != 0ul) {
        U16Ref(qh).v = uint16_t(bits & 0xffffu);
        U16Ref(qh + 2ul).v = uint16_t(bits >> 16);
    }
}

void quantize_with_min(uint64_t blk, float top, uint64_t nibbles, uint64_t qh) {
    float lo = 3.402823466e+38;
    float hi = -3.402823466e+38;
    for (uint j = 0u; j < 32u; j++) {
        if (x[j] < lo) {
            lo = x[j];
        }
        if (x[j] > hi) {
            hi = x[j];
        }
    }
    precise float range = hi - lo;
    float d = div_rn(range, top);
    float id = d != 0.0 ? div_rn(1.0, d) : 0.0;
    U16Ref(blk).v = uint16_t(float_to_f16_bits(d));
    U16Ref(blk + 2ul).v = uint16_t(float_to_f16_bits(lo));
    for (uint j = 0u; j < 32u; j++) {
        q[j] = quant_with_min(x[j], lo, id, top);
    }
    store_quants(nibbles, qh);
}

void quantize_q5_0(uint64_t blk) {
    float amax = 0.0;
    float m = 0.0;
    for (uint j = 0u; j < 32u; j++) {
        if (amax < abs(x[j])) {
            amax = abs(x[j]);
            m = x[j];
        }
    }
    float d = m * -0.0625;
    float id = d != 0.0 ? div_rn(1.0, d) : 0.0;
    U16Ref(blk).v = uint16_t(float_to_f16_bits(d));
    for (uint j = 0u; j < 32u; j++) {
        q[j] = quant_q5_0(x[j], id);
    }
    store_quants(blk + 6ul, blk + 2ul);
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
    } else if (dst.type == T_Q4_1) {
        quantize_with_min(blk, 15.0, blk + 4ul, 0ul);
    } else if (dst.type == T_Q5_0) {
        quantize_q5_0(blk);
    } else {
        quantize_with_min(blk, 31.0, blk + 8ul, blk + 4ul);
    }
}
