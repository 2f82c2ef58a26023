// SUM_ROWS and MEAN: dst[0, i1, i2, i3] = the sum of row (i1, i2, i3) of the source, divided
// by its length when i[0] is 1 (MEAN). One workgroup per row; the source may have any
// strides and float type, the destination any float type. Sums in f32.
#include "common.glsl"
#include "row_reduce.glsl"

void main() {
    Tensor src = pc.args.src[0];
    Tensor dst = pc.args.dst;
    uint row = group_index();
    if (row >= row_count(src.ne)) {
        return;
    }
    uvec3 r = row_coords(row, src.ne);
    uint64_t base = row_at(src, r.x, r.y, r.z);
    uint n = src.ne[0];
    float s = 0.0;
    for (uint i = gl_LocalInvocationID.x; i < n; i += ROW_THREADS) {
        s += load_plain(src.type, base + uint64_t(i) * src.nb[0]);
    }
    s = group_sum(s);
    if (gl_LocalInvocationID.x == 0u) {
        float v = pc.args.i[0] == 1 ? s / float(n) : s;
        store_plain(dst.type, at(dst, uvec4(0u, r)), v);
    }
}
