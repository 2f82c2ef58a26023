// IM2COL: convolution patches unfolded into rows. Source 0 is the kernel (only its sizes
// are read), source 1 the input; i[0..6] = s0, s1, p0, p1, d0, d1 and i[6] = 1 for 2-D.
//   2-D: input [IW, IH, IC, N], kernel [KW, KH, IC, OC], dst [IC*KH*KW, OW, OH, N],
//        dst[(ic*KH + kh)*KW + kw, ow, oh, n] = input[ow*s0 + kw*d0 - p0, oh*s1 + kh*d1 - p1, ic, n];
//   1-D: input [IW, IC, N], kernel [KW, IC, OC], dst [IC*KW, OW, N],
//        dst[ic*KW + kw, ow, n] = input[ow*s0 + kw*d0 - p0, ic, n];
// 0 where the input index falls outside the input. One invocation per destination value.
#include "common.glsl"

layout(local_size_x = 256) in;

void main() {
    Tensor dst = pc.args.dst;
    Tensor kernel = pc.args.src[0];
    Tensor x = pc.args.src[1];
    uint idx = global_index(256);
    if (idx >= nelements(dst)) {
        return;
    }
    bool is_2d = pc.args.i[6] == 1;
    uvec4 c = coords(dst, idx);
    uint kw_n = kernel.ne[0];
    uint kh_n = is_2d ? kernel.ne[1] : 1u;
    uint ic = c.x / (kh_n * kw_n);
    uint kh = (c.x / kw_n) % kh_n;
    uint kw = c.x % kw_n;
    uint ow = c.y;
    uint oh = is_2d ? c.z : 0u;
    uint n = is_2d ? c.w : c.z;
    int ix = int(ow) * pc.args.i[0] + int(kw) * pc.args.i[4] - pc.args.i[2];
    int iy = is_2d ? int(oh) * pc.args.i[1] + int(kh) * pc.args.i[5] - pc.args.i[3] : 0;
    uint ih_n = is_2d ? x.ne[1] : 1u;
    float v = 0.0;
    if (ix >= 0 && ix < int(x.ne[0]) && iy >= 0 && iy < int(ih_n)) {
        uvec4 at_in = is_2d ? uvec4(uint(ix), uint(iy), ic, n) : uvec4(uint(ix), ic, n, 0u);
        v = load_plain(x.type, at(x, at_in));
    }
    store_plain(dst.type, at(dst, c), v);
}
