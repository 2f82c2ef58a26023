// Dequantization of ggml's block types as tessera lays them out (core/src/quant.rs and
// core/src/kquant.rs), and loads of any value type as f32.
//
// Block layouts (bytes):
//   q8_0  (34, 32 values):  f16 d | 32 x i8 q                 value = q * d
//   q4_0  (18, 32 values):  f16 d | 16 bytes: value l in the low nibble of byte l, value
//                           l + 16 in its high nibble         value = (q - 8) * d
//   q4_1  (20, 32 values):  f16 d | f16 m | nibbles as q4_0   value = q * d + m
//   q5_0  (22, 32 values):  f16 d | u32 qh: bit l is value l's fifth bit | nibbles as q4_0
//                                                             value = (q - 16) * d
//   q5_1  (24, 32 values):  f16 d | f16 m | u32 qh | nibbles  value = q * d + m
//   q2_K  (84, 256 values): 16 bytes of 4-bit scales (low) and mins (high) per 16 values |
//                           64 bytes of 2-bit quants | f16 d | f16 dmin; value v's bits are
//                           at byte 32 (v / 128) + v % 32, shift 2 ((v % 128) / 32)
//                                                             value = d*sc*q - dmin*m
//   q3_K (110, 256 values): 32 bytes hmask | 64 bytes of 2-bit quants (as q2_K) | 12 bytes
//                           of 6-bit scales (offset 32) | f16 d; value v's third bit is bit
//                           4 (v / 128) + (v % 128) / 32 of hmask[v % 32], and clear means
//                           minus 4                           value = d*(sc - 32)*q
//   q4_K (144, 256 values): f16 d | f16 dmin | 12 bytes of 6-bit scales and mins of eight
//                           sub-blocks of 32 | 128 bytes of nibbles: chunk c (64 values)
//                           is bytes 32c..32c+32, values 64c+l in the low nibbles and
//                           64c+32+l in the high ones        value = d*sc*q - dmin*m
//   q5_K (176, 256 values): as q4_K with 32 bytes qh before the nibbles: the fifth bit of
//                           value 64c+l is bit 2c of qh[l], of 64c+32+l bit 2c+1
//   q6_K (210, 256 values): 128 bytes ql | 64 bytes qh | 16 x i8 scales | f16 d; half h
//                           (128 values) uses ql[64h..], qh[32h..], scales[8h..]: its
//                           group g (32 values) takes the low (g < 2) or high nibble of
//                           ql[l + 32 (g & 1)], bits 2g..2g+1 of qh[l] and scale
//                           l / 16 + 2g                       value = d*sc*(q - 32)
//
// The products follow the CPU's order of operations, marked `precise` so that no compiler
// fuses them into a multiply-add that would round differently.
#include "common.glsl"

// Four bytes at a 2-byte aligned address, the first in the low bits.
uint load_u32_a2(uint64_t a) {
    return load_u16(a) | (load_u16(a + 2) << 16);
}

// Byte `e` of `w` as an unsigned value.
uint byte_of(uint w, uint e) {
    return (w >> (8u * e)) & 0xffu;
}

// Sub-block `j`'s 6-bit scale (x) and min (y) from the 12 packed bytes at `q`: sub-blocks
// 0-3 in the low 6 bits of bytes 0-7, sub-blocks 4-7 in the nibbles of bytes 8-11 with
// their top two bits in the top bits of bytes 0-7.
uvec2 kquant_scale_min(uint64_t q, uint j) {
    if (j < 4u) {
        return uvec2(load_u8(q + j) & 63u, load_u8(q + j + 4u) & 63u);
    }
    uint packed = load_u8(q + j + 4u);
    uint sc = (packed & 0xfu) | ((load_u8(q + j - 4u) >> 6) << 4);
    uint m = (packed >> 4) | ((load_u8(q + j) >> 6) << 4);
    return uvec2(sc, m);
}

vec4 dequant4_q8_0(uint64_t b, uint j) {
    float d = load_f16(b);
    uint w = load_u32_a2(b + 2u + j);
    vec4 r;
    for (uint e = 0u; e < 4u; e++) {
        int q = int(w << (24u - 8u * e)) >> 24;
        precise float v = float(q) * d;
        r[e] = v;
    }
    return r;
}

vec4 dequant4_q4_0(uint64_t b, uint j) {
    float d = load_f16(b);
    uint w = load_u32_a2(b + 2u + (j & 15u));
    uint shift = j >= 16u ? 4u : 0u;
    vec4 r;
    for (uint e = 0u; e < 4u; e++) {
        int q = int((byte_of(w, e) >> shift) & 0xfu) - 8;
        precise float v = float(q) * d;
        r[e] = v;
    }
    return r;
}

// q4_1, q5_0 and q5_1: the nibble of value j + e in the byte j % 16 + e, the fifth bit (q5)
// in bit j + e of qh; `minus` 16 for q5_0, whose values are centered.
vec4 dequant4_q4_1_q5(uint64_t b, uint j, uint nibbles, uint qh_at, bool with_min) {
    float d = load_f16(b);
    float m = with_min ? load_f16(b + 2u) : 0.0;
    uint w = load_u32_a2(b + nibbles + (j & 15u));
    uint qh = qh_at != 0u ? load_u32_a2(b + qh_at) : 0u;
    uint shift = j >= 16u ? 4u : 0u;
    vec4 r;
    for (uint e = 0u; e < 4u; e++) {
        uint q = ((byte_of(w, e) >> shift) & 0xfu) | (((qh >> (j + e)) & 1u) << 4);
        if (with_min) {
            precise float p = float(q) * d;
            precise float v = p + m;
            r[e] = v;
        } else {
            precise float v = float(int(q) - 16) * d;
            r[e] = v;
        }
    }
    return r;
}

// The 2-bit quants of values j..j+3 (j a multiple of 4) of a q2_K or q3_K block whose quants
// start at `qs`, as the 4 bytes of a word.
uint low_bits4(uint64_t qs, uint j) {
    uint r = j % 128u;
    uint w = load_u32_a2(qs + 32u * (j / 128u) + r % 32u);
    uint shift = 2u * (r / 32u);
    return (w >> shift) & 0x03030303u;
}

vec4 dequant4_q2_k(uint64_t b, uint j) {
    uint sc = load_u8(b + j / 16u);
    float d = load_f16(b + 80u);
    float dmin = load_f16(b + 82u);
    precise float dl = d * float(sc & 0xfu);
    precise float ml = dmin * float(sc >> 4);
    uint q = low_bits4(b + 16u, j);
    vec4 r;
    for (uint e = 0u; e < 4u; e++) {
        precise float p = dl * float(byte_of(q, e));
        precise float v = p - ml;
        r[e] = v;
    }
    return r;
}

vec4 dequant4_q3_k(uint64_t b, uint j) {
    uint g = j / 16u;
    uint64_t scales = b + 96u;
    uint low = g < 8u ? (load_u8(scales + g) & 0xfu) : (load_u8(scales + g - 8u) >> 4);
    uint sc = low | (((load_u8(scales + 8u + g % 4u) >> (2u * (g / 4u))) & 3u) << 4);
    float d = load_f16(b + 108u);
    precise float dl = d * float(int(sc) - 32);
    uint q = low_bits4(b + 32u, j);
    uint hm = load_u32_a2(b + j % 32u);
    uint bit = 4u * (j / 128u) + (j % 128u) / 32u;
    vec4 r;
    for (uint e = 0u; e < 4u; e++) {
        int v3 = int(byte_of(q, e)) - (((byte_of(hm, e) >> bit) & 1u) != 0u ? 0 : 4);
        precise float v = dl * float(v3);
        r[e] = v;
    }
    return r;
}

// q4_K and q5_K share everything but the fifth bit.
vec4 dequant4_q45_k(uint64_t b, uint j, bool five) {
    uint c = j / 64u;
    uint l = j % 64u;
    uint high = l / 32u;
    l %= 32u;
    uvec2 sm = kquant_scale_min(b + 4u, 2u * c + high);
    float d = load_f16(b);
    float dmin = load_f16(b + 2u);
    precise float d1 = d * float(sm.x);
    precise float m1 = dmin * float(sm.y);
    uint qs = five ? 48u : 16u;
    uint w = load_u32_a2(b + qs + 32u * c + l);
    uint qh = five ? load_u32_a2(b + 16u + l) : 0u;
    uint bit = 2u * c + high;
    vec4 r;
    for (uint e = 0u; e < 4u; e++) {
        uint q = (byte_of(w, e) >> (4u * high)) & 0xfu;
        if (five && ((byte_of(qh, e) >> bit) & 1u) != 0u) {
            q += 16u;
        }
        precise float v = d1 * float(q) - m1;
        r[e] = v;
    }
    return r;
}

vec4 dequant4_q6_k(uint64_t b, uint j) {
    uint h = j / 128u;
    uint g = (j % 128u) / 32u;
    uint l = j % 32u;
    float d = load_f16(b + 208u);
    uint ql = load_u32_a2(b + 64u * h + l + 32u * (g & 1u));
    uint qh = load_u32_a2(b + 128u + 32u * h + l);
    int sc = int(load_u8(b + 192u + 8u * h + l / 16u + 2u * g) << 24) >> 24;
    precise float scale = d * float(sc);
    vec4 r;
    for (uint e = 0u; e < 4u; e++) {
        uint low = (byte_of(ql, e) >> (4u * (g >> 1))) & 0xfu;
        uint hi = (byte_of(qh, e) >> (2u * g)) & 3u;
        int q = int(low | (hi << 4)) - 32;
        precise float v = scale * float(q);
        r[e] = v;
    }
    return r;
}

// Values j..j+3 (j a multiple of 4 below the block length) of the block of quantized
// `type` at byte address `b` (2-byte aligned).
vec4 dequant4(uint type, uint64_t b, uint j) {
    if (type == T_Q8_0) {
        return dequant4_q8_0(b, j);
    } else if (type == T_Q4_0) {
        return dequant4_q4_0(b, j);
    } else if (type == T_Q4_K) {
        return dequant4_q45_k(b, j, false);
    } else if (type == T_Q5_K) {
        return dequant4_q45_k(b, j, true);
    } else if (type == T_Q4_1) {
        return dequant4_q4_1_q5(b, j, 4u, 0u, true);
    } else if (type == T_Q5_0) {
        return dequant4_q4_1_q5(b, j, 6u, 2u, false);
    } else if (type == T_Q5_1) {
        return dequant4_q4_1_q5(b, j, 8u, 4u, true);
    } else if (type == T_Q2_K) {
        return dequant4_q2_k(b, j);
    } else if (type == T_Q3_K) {
        return dequant4_q3_k(b, j);
    }
    return dequant4_q6_k(b, j);
}

// Value `j` of the block of quantized `type` at `b`.
float dequant1(uint type, uint64_t b, uint j) {
    return dequant4(type, b, j & ~3u)[j & 3u];
}

// Value c = (i0, i1, i2, i3) of `t`, of any type but i32 read exactly, as f32.
float load_value(Tensor t, uvec4 c) {
    if (is_quantized(t.type)) {
        uint bl = block_len(t.type);
        uint64_t block = row_at(t, c.y, c.z, c.w) + uint64_t(c.x / bl) * t.nb[0];
        return dequant1(t.type, block, c.x % bl);
    }
    return load_plain(t.type, at(t, c));
}

// Values k..k+3 of the row of `t` starting at byte address `row`, zero from `n` on. For a
// quantized type, k is a multiple of 4 and the row holds whole blocks.
vec4 load4(Tensor t, uint64_t row, uint k, uint n) {
    if (is_quantized(t.type)) {
        uint bl = block_len(t.type);
        return dequant4(t.type, row + uint64_t(k / bl) * t.nb[0], k % bl);
    }
    vec4 r = vec4(0.0);
    for (uint e = 0u; e < 4u; e++) {
        if (k + e < n) {
            r[e] = load_plain(t.type, row + uint64_t(k + e) * t.nb[0]);
        }
    }
    return r;
}
