// MUL_MAT: dst[i, j, i2, i3] = sum_k a[k, i, i2 / (b2 / a2), i3 / (b3 / a3)] * b[k, j, i2, i3]
// for a of any float or quantized type, b f32 and dst f32, all with any strides (a's rows
// of quantized blocks packed).
//
// A workgroup computes a BM x BN tile of one matrix of the destination (workgroup z is
// i2 + b2 * i3), stepping over k in slices of BK: each invocation loads 4 values of one
// row of a (dequantized to f32) and of b into shared memory, then accumulates TM x TN
// outputs in f32. Invocation (tx, ty) owns rows tx + 16 r and columns ty + 16 c, so that
// neighbours read neighbouring words of the a tile.
#include "version.glsl"
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "quant.glsl"

#define BM 64
#define BN 64
#define BK 16
#define TM 4
#define TN 4

layout(local_size_x = 256) in;

shared float tile_a[BK * BM];
shared float tile_b[BK * BN];

void main() {
    Tensor dst = pc.args.dst;
    Tensor a = pc.args.src[0];
    Tensor b = pc.args.src[1];
    uint K = a.ne[0];
    uint M = a.ne[1];
    uint N = b.ne[1];
    uint i2 = gl_WorkGroupID.z % b.ne[2];
    uint i3 = gl_WorkGroupID.z / b.ne[2];
    uint a2 = i2 / (b.ne[2] / a.ne[2]);
    uint a3 = i3 / (b.ne[3] / a.ne[3]);
    uint m0 = gl_WorkGroupID.x * BM;
    uint n0 = gl_WorkGroupID.y * BN;
    uint lid = gl_LocalInvocationID.x;
    uint tx = lid % 16u;
    uint ty = lid / 16u;

    // What this invocation loads: 4 values at k0 + lk of row lr of each tile.
    uint lr = lid / 4u;
    uint lk = (lid % 4u) * 4u;
    bool a_in = m0 + lr < M;
    bool b_in = n0 + lr < N;
    uint64_t a_row = row_at(a, a_in ? m0 + lr : 0u, a2, a3);
    uint64_t b_row = row_at(b, b_in ? n0 + lr : 0u, i2, i3);

    float acc[TM][TN];
    [[unroll]] for (uint r = 0u; r < TM; r++) {
        [[unroll]] for (uint c = 0u; c < TN; c++) {
            acc[r][c] = 0.0;
        }
    }

    for (uint k0 = 0u; k0 < K; k0 += BK) {
        vec4 va = a_in ? load4(a, a_row, k0 + lk, K) : vec4(0.0);
        vec4 vb = b_in ? load4(b, b_row, k0 + lk, K) : vec4(0.0);
        [[unroll]] for (uint e = 0u; e < 4u; e++) {
            tile_a[(lk + e) * BM + lr] = va[e];
            tile_b[(lk + e) * BN + lr] = vb[e];
        }
        barrier();
        for (uint kk = 0u; kk < BK; kk++) {
            float ra[TM];
            float rb[TN];
            [[unroll]] for (uint r = 0u; r < TM; r++) {
                ra[r] = tile_a[kk * BM + tx + 16u * r];
            }
            [[unroll]] for (uint c = 0u; c < TN; c++) {
                rb[c] = tile_b[kk * BN + ty + 16u * c];
            }
            [[unroll]] for (uint r = 0u; r < TM; r++) {
                [[unroll]] for (uint c = 0u; c < TN; c++) {
                    acc[r][c] += ra[r] * rb[c];
                }
            }
        }
        barrier();
    }

    [[unroll]] for (uint c = 0u; c < TN; c++) {
        uint n = n0 + ty + 16u * c;
        if (n >= N) {
            continue;
        }
        [[unroll]] for (uint r = 0u; r < TM; r++) {
            uint m = m0 + tx + 16u * r;
            if (m < M) {
                F32Ref(at(dst, uvec4(m, n, i2, i3))).v = acc[r][c];
            }
        }
    }
}
