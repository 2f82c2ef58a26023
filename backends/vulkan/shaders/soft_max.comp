// SOFT_MAX along rows: y = exp(v - max v) / sum exp(v - max v) with v = x * f[0] (the scale)
// plus, when i[0] is 1, the mask (source 1, f32 or f16) row (i1 % m1, i2 % m2, i3 % m3).
// A row of only -inf becomes zeros; a NaN makes its row NaN. One workgroup per row, three
// passes over it (max, sum, write); each invocation writes only values it read itself, after
// the reductions, so the destination may be the source.
#include "common.glsl"
#include "row_reduce.glsl"

const float NEG_INF = uintBitsToFloat(0xff800000u);
const float NAN = uintBitsToFloat(0x7fc00000u);

Tensor src;
Tensor mask;
uint64_t src_row;
uint64_t mask_row;
bool masked;

float value(uint i) {
    float v = load_plain(src.type, src_row + uint64_t(i) * src.nb[0]) * pc.args.f[0];
    if (masked) {
        v += load_plain(mask.type, mask_row + uint64_t(i) * mask.nb[0]);
    }
    return v;
}

void main() {
    src = pc.args.src[0];
    mask = pc.args.src[1];
    Tensor dst = pc.args.dst;
    uint row = group_index();
    if (row >= row_count(src.ne)) {
        return;
    }
    uvec3 r = row_coords(row, src.ne);
    src_row = row_at(src, r.x, r.y, r.z);
    masked = pc.args.i[0] == 1;
    mask_row = masked ? row_at(mask, r.x % mask.ne[1], r.y % mask.ne[2], r.z % mask.ne[3]) : 0ul;
    uint64_t dst_row = row_at(dst, r.x, r.y, r.z);
    uint n = src.ne[0];

    // The largest value, NaN skipped.
    float m = NEG_INF;
    for (uint i = gl_LocalInvocationID.x; i < n; i += ROW_THREADS) {
        float v = value(i);
        if (v > m) {
            m = v;
        }
    }
    m = group_max(m);
    // With no finite or +inf value the row is all -inf (zeros) unless it holds a NaN.
    bool none = m == NEG_INF;

    float s = 0.0;
    for (uint i = gl_LocalInvocationID.x; i < n; i += ROW_THREADS) {
        float v = value(i);
        s += none ? (isnan(v) ? NAN : 0.0) : exp(v - m);
    }
    s = group_sum(s);

    for (uint i = gl_LocalInvocationID.x; i < n; i += ROW_THREADS) {
        float y = none ? (isnan(s) ? NAN : 0.0) : exp(value(i) - m) / s;
        store_plain(dst.type, dst_row + uint64_t(i) * dst.nb[0], y);
    }
}
