// What every tessera compute shader shares: the arguments of a dispatch, tensors addressed
// through buffer device addresses, and loads and stores of each value type.
//
// A dispatch's push constant is the address of its `Args` (written by the backend into a
// host-visible buffer when the split is recorded): the destination, up to four sources and
// the op's integer and float parameters. A tensor is its address, byte strides and sizes,
// as ggml lays it out: element (i0, i1, i2, i3) starts at data + i0*nb0 + ... + i3*nb3, and
// for a block-quantized type i0 counts blocks.
#include "version.glsl"

// Type codes, as `dtype_code` in the backend's args.rs writes them.
#define T_F32 0u
#define T_F16 1u
#define T_BF16 2u
#define T_I32 3u
#define T_Q8_0 4u
#define T_Q4_0 5u
#define T_Q4_K 6u
#define T_Q5_K 7u
#define T_Q6_K 8u
#define T_Q4_1 9u
#define T_Q5_0 10u
#define T_Q5_1 11u
#define T_Q2_K 12u
#define T_Q3_K 13u

struct Tensor {
    uint64_t data;
    uint64_t nb[4];
    uint ne[4];
    uint type;
    uint pad;
};

layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer Args {
    Tensor dst;
    Tensor src[4];
    int i[8];
    float f[8];
};

layout(push_constant) uniform Push {
    Args args;
} pc;

layout(buffer_reference, std430, buffer_reference_align = 4) buffer F32Ref { float v; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer I32Ref { int v; };
layout(buffer_reference, std430, buffer_reference_align = 2) buffer U16Ref { uint16_t v; };
layout(buffer_reference, std430, buffer_reference_align = 1) buffer U8Ref { uint8_t v; };
layout(buffer_reference, std430, buffer_reference_align = 1) buffer I8Ref { int8_t v; };

// The index of this invocation among all of a 1-D dispatch of `local` invocations per
// workgroup, spread over the x and y workgroup counts (x is limited to 65535 on some devices).
uint global_index(uint local) {
    return (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * local + gl_LocalInvocationID.x;
}

// The workgroup's index in a dispatch spread over x and y.
uint group_index() {
    return gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
}

uint nelements(Tensor t) {
    return t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3];
}

// Coordinates of the `i`th value of `t` in row-major order.
uvec4 coords(Tensor t, uint i) {
    uint i0 = i % t.ne[0];
    i /= t.ne[0];
    uint i1 = i % t.ne[1];
    i /= t.ne[1];
    uint i2 = i % t.ne[2];
    return uvec4(i0, i1, i2, i / t.ne[2]);
}

// Byte address of element `c` of a plain (not block-quantized) tensor.
uint64_t at(Tensor t, uvec4 c) {
    return t.data + uint64_t(c.x) * t.nb[0] + uint64_t(c.y) * t.nb[1] + uint64_t(c.z) * t.nb[2] + uint64_t(c.w) * t.nb[3];
}

// Byte address of the start of row (i1, i2, i3).
uint64_t row_at(Tensor t, uint i1, uint i2, uint i3) {
    return t.data + uint64_t(i1) * t.nb[1] + uint64_t(i2) * t.nb[2] + uint64_t(i3) * t.nb[3];
}

// f16 to f32, exactly (subnormals included), in integer arithmetic so that no device
// flushes or rounds differently.
float f16_bits_to_float(uint h) {
    uint sign = (h & 0x8000u) << 16;
    uint e = (h >> 10) & 0x1fu;
    uint m = h & 0x3ffu;
    if (e == 0u) {
        // Zero or subnormal: m * 2^-24, exact in f32.
        float v = float(m) * 5.9604644775390625e-8;
        return uintBitsToFloat(floatBitsToUint(v) | sign);
    }
    if (e == 31u) {
        return uintBitsToFloat(sign | 0x7f800000u | (m << 13));
    }
    return uintBitsToFloat(sign | ((e + 112u) << 23) | (m << 13));
}

float bf16_bits_to_float(uint bits) {
    return uintBitsToFloat(bits << 16);
}

// bf16 from f32, rounding to nearest even; NaN stays a (quiet) NaN.
uint float_to_bf16_bits(float v) {
    uint u = floatBitsToUint(v);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        return (u >> 16) | 0x40u;
    }
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

// f16 from f32, rounding to nearest even (as the CPU backend does), overflow to infinity,
// NaN to a quiet NaN.
uint float_to_f16_bits(float v) {
    uint u = floatBitsToUint(v);
    uint sign = (u >> 16) & 0x8000u;
    uint a = u & 0x7fffffffu;
    if (a > 0x7f800000u) {
        return sign | 0x7e00u;
    }
    if (a >= 0x477ff000u) {
        // At or above 65520 rounds to infinity.
        return sign | 0x7c00u;
    }
    if (a < 0x38800000u) {
        // Below the smallest normal f16 (2^-14): a subnormal, m * 2^-24, rounded to even.
        if (a < 0x33000000u) {
            return sign; // below half the smallest subnormal
        }
        uint e = a >> 23;
        uint m = (a & 0x7fffffu) | 0x800000u;
        uint shift = 126u - e; // 14..24 for the exponents that reach here
        uint half_bits = m >> shift;
        uint rest = m & ((1u << shift) - 1u);
        uint halfway = 1u << (shift - 1u);
        if (rest > halfway || (rest == halfway && (half_bits & 1u) == 1u)) {
            half_bits += 1u;
        }
        return sign | half_bits;
    }
    // Normal: rebias the exponent and round the mantissa to 10 bits, to even.
    uint r = a - 0x38000000u;
    r += 0xfffu + ((r >> 13) & 1u);
    return sign | (r >> 13);
}

// A value of a plain type (f32, f16, bf16, i32) as f32.
float load_plain(uint type, uint64_t a) {
    if (type == T_F32) {
        return F32Ref(a).v;
    } else if (type == T_F16) {
        return f16_bits_to_float(uint(U16Ref(a).v));
    } else if (type == T_BF16) {
        return bf16_bits_to_float(uint(U16Ref(a).v));
    }
    return float(I32Ref(a).v);
}

void store_plain(uint type, uint64_t a, float v) {
    if (type == T_F32) {
        F32Ref(a).v = v;
    } else if (type == T_F16) {
        U16Ref(a).v = uint16_t(float_to_f16_bits(v));
    } else if (type == T_BF16) {
        U16Ref(a).v = uint16_t(float_to_bf16_bits(v));
    } else {
        I32Ref(a).v = int(v);
    }
}

uint load_u8(uint64_t a) {
    return uint(U8Ref(a).v);
}

uint load_u16(uint64_t a) {
    return uint(U16Ref(a).v);
}

float load_f16(uint64_t a) {
    return f16_bits_to_float(load_u16(a));
}

bool is_quantized(uint type) {
    return type >= T_Q8_0;
}

// Values per block of a quantized type.
uint block_len(uint type) {
    bool k = (type >= T_Q4_K && type <= T_Q6_K) || type >= T_Q2_K;
    return k ? 256u : 32u;
}
