// MUL_MAT for float weights (f32, f16 or bf16: the variants) against f32 activations, on the
// shader cores: dst[m, n] = sum_k a[k, m] * b[k, n], accumulated in f32.
//
// A workgroup of 256 computes a 128 x 128 block of dst; each invocation an 8 x 8 block of
// it (rows tx*4 + {0..3} and 64 + tx*4 + {0..3}, columns likewise from ty), reading both
// operands from shared memory as 16-byte vectors: 64 multiply-adds per 4 vector reads. Per
// step of BK values of k, both tiles are staged k-major in shared memory with 16-byte global
// loads, and the next step's loads are issued before this step's arithmetic. Rows of both
// operands must be 16-byte aligned with k a multiple of 8 (the backend checks); rows and
// columns past the edges read zeros and are not written.
//
// dst is [M, N, b2, b3]; a is [K, M, a2, a3] and repeats over b's dims 2 and 3. With i[3] = 1,
// source 2 is a packed f32 row of M values (a bias, 16-byte aligned) added to every column
// as it is stored: a product and the ADD after it in one dispatch, with the same bits.
//
// variant: f32 A_TYPE=0
// variant: f16 A_TYPE=1
// variant: bf16 A_TYPE=2
#include "version.glsl"
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"

#define BM 128
#define BN 128
#define BK 16

layout(local_size_x = 256) in;

layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer U4Ref { uvec4 v; };
layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer V4Ref { vec4 v; };
layout(buffer_reference, std430, buffer_reference_align = 16) writeonly buffer W4Ref { vec4 v; };

shared vec4 As[BK * BM / 4];
shared vec4 Bs[BK * BN / 4];

// What one invocation stages per step: 8 values of a (2 x 4 for f32, 8 halves otherwise)
// and 2 x 4 values of b.
#if A_TYPE == 0
vec4 ra[2];
#else
uvec4 ra;
#endif
vec4 rb[2];

vec2 halves(uint w) {
#if A_TYPE == 1
    return vec2(f16_bits_to_float(w & 0xffffu), f16_bits_to_float(w >> 16));
#else
    return vec2(bf16_bits_to_float(w & 0xffffu), bf16_bits_to_float(w >> 16));
#endif
}

void load_step(Tensor a, Tensor b, uint64_t a_base, uint64_t b_base, uint m0, uint n0, uint k0) {
    uint t = gl_LocalInvocationID.x;
    uint K = a.ne[0];
#if A_TYPE == 0
    [[unroll]] for (uint i = 0; i < 2; i++) {
        uint q = t + i * 256;
        uint row = q / 4;
        uint k = k0 + (q % 4) * 4;
        ra[i] = vec4(0.0);
        if (m0 + row < a.ne[1] && k < K) {
            ra[i] = V4Ref(a_base + uint64_t(m0 + row) * a.nb[1] + uint64_t(k) * 4).v;
        }
    }
#else
    {
        uint row = t / 2;
        uint k = k0 + (t % 2) * 8;
        ra = uvec4(0);
        if (m0 + row < a.ne[1] && k < K) {
            ra = U4Ref(a_base + uint64_t(m0 + row) * a.nb[1] + uint64_t(k) * 2).v;
        }
    }
#endif
    [[unroll]] for (uint i = 0; i < 2; i++) {
        uint q = t + i * 256;
        uint col = q / 4;
        uint k = k0 + (q % 4) * 4;
        rb[i] = vec4(0.0);
        if (n0 + col < b.ne[1] && k < K) {
            rb[i] = V4Ref(b_base + uint64_t(n0 + col) * b.nb[1] + uint64_t(k) * 4).v;
        }
    }
}

void store_step() {
    uint t = gl_LocalInvocationID.x;
#if A_TYPE == 0
    [[unroll]] for (uint i = 0; i < 2; i++) {
        uint q = t + i * 256;
        uint row = q / 4;
        uint k = (q % 4) * 4;
        [[unroll]] for (uint e = 0; e < 4; e++) {
            As[((k + e) * BM + row) / 4][row % 4] = ra[i][e];
        }
    }
#else
    {
        uint row = t / 2;
        uint k = (t % 2) * 8;
        [[unroll]] for (uint w = 0; w < 4; w++) {
            vec2 h = halves(ra[w]);
            As[((k + 2 * w) * BM + row) / 4][row % 4] = h.x;
            As[((k + 2 * w + 1) * BM + row) / 4][row % 4] = h.y;
        }
    }
#endif
    [[unroll]] for (uint i = 0; i < 2; i++) {
        uint q = t + i * 256;
        uint col = q / 4;
        uint k = (q % 4) * 4;
        [[unroll]] for (uint e = 0; e < 4; e++) {
            Bs[((k + e) * BN + col) / 4][col % 4] = rb[i][e];
        }
    }
}

void main() {
    Tensor dst = pc.args.dst;
    Tensor a = pc.args.src[0];
    Tensor b = pc.args.src[1];
    uint K = a.ne[0];
    uint m0 = gl_WorkGroupID.x * BM;
    uint n0 = gl_WorkGroupID.y * BN;
    uint i2 = gl_WorkGroupID.z % dst.ne[2];
    uint i3 = gl_WorkGroupID.z / dst.ne[2];
    uint64_t a_base = a.data + uint64_t(i2 / (dst.ne[2] / a.ne[2])) * a.nb[2] + uint64_t(i3 / (dst.ne[3] / a.ne[3])) * a.nb[3];
    uint64_t b_base = b.data + uint64_t(i2) * b.nb[2] + uint64_t(i3) * b.nb[3];
    uint64_t d_base = dst.data + uint64_t(i2) * dst.nb[2] + uint64_t(i3) * dst.nb[3];
    uint tx = gl_LocalInvocationID.x % 16;
    uint ty = gl_LocalInvocationID.x / 16;

    vec4 acc[8][2]; // [column][row group]: rows tx*4 + {0..3} and 64 + tx*4 + {0..3}
    [[unroll]] for (uint c = 0; c < 8; c++) {
        acc[c][0] = vec4(0.0);
        acc[c][1] = vec4(0.0);
    }

    load_step(a, b, a_base, b_base, m0, n0, 0);
    for (uint k0 = 0; k0 < K; k0 += BK) {
        barrier();
        store_step();
        barrier();
        if (k0 + BK < K) {
            load_step(a, b, a_base, b_base, m0, n0, k0 + BK);
        }
        [[unroll]] for (uint kk = 0; kk < BK; kk++) {
            vec4 a0 = As[(kk * BM) / 4 + tx];
            vec4 a1 = As[(kk * BM + 64) / 4 + tx];
            vec4 b0 = Bs[(kk * BN) / 4 + ty];
            vec4 b1 = Bs[(kk * BN + 64) / 4 + ty];
            [[unroll]] for (uint c = 0; c < 4; c++) {
                acc[c][0] += a0 * b0[c];
                acc[c][1] += a1 * b0[c];
                acc[c + 4][0] += a0 * b1[c];
                acc[c + 4][1] += a1 * b1[c];
            }
        }
    }

    bool vec_ok = dst.nb[1] % 16 == 0 && d_base % 16 == 0;
    bool biased = pc.args.i[3] == 1;
    uint64_t bias = pc.args.src[2].data;
    [[unroll]] for (uint c = 0; c < 8; c++) {
        uint n = n0 + (c < 4 ? ty * 4 + c : 64 + ty * 4 + c - 4);
        if (n >= dst.ne[1]) {
            continue;
        }
        [[unroll]] for (uint g = 0; g < 2; g++) {
            uint m = m0 + g * 64 + tx * 4;
            uint64_t at_m = d_base + uint64_t(n) * dst.nb[1] + uint64_t(m) * 4;
            if (vec_ok && m + 4 <= dst.ne[0]) {
                W4Ref(at_m).v = biased ? acc[c][g] + V4Ref(bias + uint64_t(m) * 4).v : acc[c][g];
            } else {
                for (uint e = 0; e < 4 && m + e < dst.ne[0]; e++) {
                    F32Ref(at_m + e * 4).v = biased ? acc[c][g][e] + F32Ref(bias + uint64_t(m + e) * 4).v : acc[c][g][e];
                }
            }
        }
    }
}
