// MUL_MAT with one column (n = 1): the matrix-vector products of decoding. Same operands
// and broadcasting as mul_mat.comp. With i[2] = 1, a product of a few columns of one matrix
// (b2 = b3 = 1) as one matrix-vector product per column: workgroup z is the column.
//
// A workgroup computes ROWS consecutive rows of the result for one (i2, i3) (workgroup z is
// i2 + b2 * i3; the row group spreads over x and y). Its invocations stride over k, 4
// values at a time (one load of the vector serves all ROWS rows), and the partial sums are
// added up in shared memory, without relying on the subgroup size.
#include "version.glsl"
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "quant.glsl"

#define ROWS 4
#define WG 128

layout(local_size_x = WG) in;

shared float partial[ROWS * WG];

void main() {
    Tensor dst = pc.args.dst;
    Tensor a = pc.args.src[0];
    Tensor b = pc.args.src[1];
    uint K = a.ne[0];
    uint M = a.ne[1];
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
    for (uint k = lid * 4u; k < K; k += WG * 4u) {
        vec4 vb = load4(b, b_row, k, K);
        [[unroll]] for (uint r = 0u; r < ROWS; r++) {
            if (row0 + r < M) {
                acc[r] += dot(load4(a, a_rows[r], k, K), vb);
            }
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
