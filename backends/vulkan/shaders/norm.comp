// NORM and RMS_NORM along rows, i[0] choosing (0: NORM, 1: RMS_NORM), f[0] = eps:
//   NORM:     (x - mean) / sqrt(var + eps), var = mean((x - mean)^2), taken around the mean
//             in a second pass so that values far from zero keep their precision;
//   RMS_NORM: x / sqrt(mean(x^2) + eps).
// One workgroup per row; source and destination of the same shape, any strides and float
// types. Each invocation writes only values it read itself, after the reductions, so the
// destination may be the source.
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
    uint64_t sa = row_at(src, r.x, r.y, r.z);
    uint64_t da = row_at(dst, r.x, r.y, r.z);
    uint n = src.ne[0];
    float eps = pc.args.f[0];
    bool rms = pc.args.i[0] == 1;

    float mean = 0.0;
    if (!rms) {
        float s = 0.0;
        for (uint i = gl_LocalInvocationID.x; i < n; i += ROW_THREADS) {
            s += load_plain(src.type, sa + uint64_t(i) * src.nb[0]);
        }
        mean = group_sum(s) / float(n);
    }
    float sq = 0.0;
    for (uint i = gl_LocalInvocationID.x; i < n; i += ROW_THREADS) {
        float d = load_plain(src.type, sa + uint64_t(i) * src.nb[0]) - mean;
        sq += d * d;
    }
    float inv = 1.0 / sqrt(group_sum(sq) / float(n) + eps);
    for (uint i = gl_LocalInvocationID.x; i < n; i += ROW_THREADS) {
        float x = load_plain(src.type, sa + uint64_t(i) * src.nb[0]);
        store_plain(dst.type, da + uint64_t(i) * dst.nb[0], (x - mean) * inv);
    }
}
