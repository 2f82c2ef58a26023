// SET_ROWS: dst[i0, idx[j, i2, i3], i2, i3] = b[i0, j, i2, i3] for f32 values b and i32 indices
// idx, converted to the destination's float type. A row whose index is outside the rows of
// dst is skipped.
#include "common.glsl"
#include "quant.glsl"

layout(local_size_x = 256) in;

void main() {
    Tensor dst = pc.args.dst;
    Tensor b = pc.args.src[0];
    Tensor idx = pc.args.src[1];
    uint i = global_index(256);
    if (i >= nelements(b)) {
        return;
    }
    uvec4 c = coords(b, i);
    int row = I32Ref(at(idx, uvec4(c.y, c.z, c.w, 0u))).v;
    if (row < 0 || uint(row) >= dst.ne[1]) {
        return;
    }
    store_plain(dst.type, at(dst, uvec4(c.x, uint(row), c.z, c.w)), load_value(b, c));
}
