// POOL_2D: src [IW, IH, C, N], dst [OW, OH, C, N]; i[0] is the kind (0: max, 1: average),
// i[1..7] = k0, k1, s0, s1, p0, p1. The window of (ow, oh) covers ix = ow*s0 + kx - p0,
// iy = oh*s1 + ky - p1 for kx < k0, ky < k1, skipping positions outside the input. Max: the
// largest value in it (-FLT_MAX if none); average: the sum over k0 * k1 (padding counts as
// zeros). One invocation per destination value.
#include "common.glsl"

layout(local_size_x = 256) in;

void main() {
    Tensor dst = pc.args.dst;
    Tensor src = pc.args.src[0];
    uint idx = global_index(256);
    if (idx >= nelements(dst)) {
        return;
    }
    uvec4 c = coords(dst, idx);
    int k0 = pc.args.i[1];
    int k1 = pc.args.i[2];
    int x0 = int(c.x) * pc.args.i[3] - pc.args.i[5];
    int y0 = int(c.y) * pc.args.i[4] - pc.args.i[6];
    float largest = -3.40282347e38;
    float sum = 0.0;
    for (int ky = 0; ky < k1; ky++) {
        int iy = y0 + ky;
        if (iy < 0 || iy >= int(src.ne[1])) {
            continue;
        }
        for (int kx = 0; kx < k0; kx++) {
            int ix = x0 + kx;
            if (ix < 0 || ix >= int(src.ne[0])) {
                continue;
            }
            float v = load_plain(src.type, at(src, uvec4(uint(ix), uint(iy), c.z, c.w)));
            largest = max(largest, v);
            sum += v;
        }
    }
    float r = pc.args.i[0] == 0 ? largest : sum / float(k0 * k1);
    store_plain(dst.type, at(dst, c), r);
}
