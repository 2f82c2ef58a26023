// MUL_MAT of q8_0 or q4_0 weights with one column (or, with i[2] = 1, a few columns of one
// matrix), on packed 8-bit dot products (VK_KHR_shader_integer_dot_product): the layout of
// work is mul_mat_vec.comp's, but each invocation takes whole blocks of 32 values. It
// quantizes its block of b as the CPU quantizes activations (d = max|x| / 127, q = x / d
// rounded to nearest even), once for the workgroup's ROWS rows, and each row's block is then
// 8 `dotPacked4x8EXT` (q8_0) or 8 on the nibbles less 8 times the sum of b's quants (q4_0),
// scaled by the two block scales.
#include "version.glsl"
#extension GL_EXT_control_flow_attributes : require
#extension GL_EXT_integer_dot_product : require
#include "common.glsl"
#include "quant.glsl"

#define ROWS 16
#define WG 128

layout(local_size_x = WG) in;

shared float partial[ROWS * WG];

// Four quants in the bytes of a word, the first lowest.
int pack4(ivec4 q) {
    return (q.x & 0xff) | ((q.y & 0xff) << 8) | ((q.z & 0xff) << 16) | (q.w << 24);
}

void main() {
    Tensor dst = pc.args.dst;
    Tensor a = pc.args.src[0];
    Tensor b = pc.args.src[1];
    uint K = a.ne[0];
    uint M = a.ne[1];
    bool q4 = a.type == T_Q4_0;
    bool columns = pc.args.i[2] == 1;
    uint col = columns ? gl_WorkGroupID.z : 0u;
    uint i2 = columns ? 0u : gl_WorkGroupID.z % b.ne[2];
    uint i3 = columns ? 0u : gl_WorkGroupID.z / b.ne[2];
    uint a2 = i2 / (b.ne[2] / a.ne[2]);
    uint a3 = i3 / (b.ne[3] / a.ne[3]);
    uint row0 = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * ROWS;
    uint lid = gl_LocalInvocationID.x;

    uint64_t b_row = row_at(b, col, i2, i3);
    uint64_t a_rows[ROWS];
    float acc[ROWS];
    [[unroll]] for (uint r = 0u; r < ROWS; r++) {
        a_rows[r] = row_at(a, min(row0 + r, M - 1u), a2, a3);
        acc[r] = 0.0;
    }
    for (uint blk = lid; blk < K / 32u; blk += WG) {
        vec4 x[8];
        float amax = 0.0;
        [[unroll]] for (uint t = 0u; t < 8u; t++) {
            x[t] = load4(b, b_row, 32u * blk + 4u * t, K);
            amax = max(amax, max(max(abs(x[t].x), abs(x[t].y)), max(abs(x[t].z), abs(x[t].w))));
        }
        float d = amax / 127.0;
        float id = d != 0.0 ? 1.0 / d : 0.0;
        int qb[8];
        int sum_b = 0;
        [[unroll]] for (uint t = 0u; t < 8u; t++) {
            ivec4 q = clamp(ivec4(roundEven(x[t] * id)), ivec4(-127), ivec4(127));
            qb[t] = pack4(q);
            sum_b += q.x + q.y + q.z + q.w;
        }
        [[unroll]] for (uint r = 0u; r < ROWS; r++) {
            if (row0 + r >= M) {
                continue;
            }
            uint64_t block = a_rows[r] + uint64_t(blk) * a.nb[0];
            float da = load_f16(block);
            int s = 0;
            if (q4) {
                [[unroll]] for (uint t = 0u; t < 4u; t++) {
                    uint w = load_u32_a2(block + 2u + 4u * t);
                    s = dotPacked4x8AccSatEXT(int(w & 0x0f0f0f0fu), qb[t], s);
                    s = dotPacked4x8AccSatEXT(int((w >> 4) & 0x0f0f0f0fu), qb[4u + t], s);
                }
                s -= 8 * sum_b;
            } else {
                [[unroll]] for (uint t = 0u; t < 8u; t++) {
                    s = dotPacked4x8AccSatEXT(int(load_u32_a2(block + 2u + 4u * t)), qb[t], s);
                }
            }
            acc[r] += (da * d) * float(s);
        }
    }
    [[unroll]] for (uint r = 0u; r < ROWS; r++) {
        partial[r * WG + lid] = acc[r];
    }
    barrier();
    for (uint s = WG / 2u; s > 0u; s >>= 1) {
        if (lid < s) {
            [[unroll]] for (uint r = 0u; r < ROWS; r++) {
                partial[r * WG + lid] += partial[r * WG + lid + s];
            }
        }
        barrier();
    }
    if (lid < ROWS && row0 + lid < M) {
        F32Ref(at(dst, uvec4(row0 + lid, col, i2, i3))).v = partial[lid * WG];
    }
}
