// ARGMAX: dst[i1] (i32) = the first index of the largest value of row i1 of a matrix, NaN
// skipped; 0 for a row of only NaN. One workgroup per row: each invocation keeps the best of
// the values it visits, then the workgroup combines them (larger value, or equal value and
// smaller index).
#include "common.glsl"

layout(local_size_x = 256) in;

#define THREADS 256u
#define NONE 0xffffffffu

shared float best_value[THREADS];
shared uint best_index[THREADS];

// Whether candidate (v, i) beats (bv, bi).
bool beats(float v, uint i, float bv, uint bi) {
    return i != NONE && (bi == NONE || v > bv || (v == bv && i < bi));
}

void main() {
    Tensor src = pc.args.src[0];
    Tensor dst = pc.args.dst;
    uint row = group_index();
    if (row >= src.ne[1]) {
        return;
    }
    uint t = gl_LocalInvocationID.x;
    uint64_t base = row_at(src, row, 0u, 0u);
    float bv = 0.0;
    uint bi = NONE;
    for (uint i = t; i < src.ne[0]; i += THREADS) {
        float v = load_plain(src.type, base + uint64_t(i) * src.nb[0]);
        if (!isnan(v) && (bi == NONE || v > bv)) {
            bv = v;
            bi = i;
        }
    }
    best_value[t] = bv;
    best_index[t] = bi;
    barrier();
    for (uint half_n = THREADS / 2u; half_n > 0u; half_n >>= 1) {
        if (t < half_n && beats(best_value[t + half_n], best_index[t + half_n], best_value[t], best_index[t])) {
            best_value[t] = best_value[t + half_n];
            best_index[t] = best_index[t + half_n];
        }
        barrier();
    }
    if (t == 0u) {
        uint i = best_index[0];
        I32Ref(at(dst, uvec4(row, 0u, 0u, 0u))).v = int(i == NONE ? 0u : i);
    }
}
