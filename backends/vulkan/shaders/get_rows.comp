// GET_ROWS: dst[i0, j, i2, i3] = a[i0, b[j, i2, i3], i2, i3] for i32 indices b. The
// destination is f32 (rows of any type dequantized), or i32 copied exactly from an i32 a.
// An index outside the rows of a gives zeros.
#include "common.glsl"
#include "quant.glsl"

layout(local_size_x = 256) in;

void main() {
    Tensor dst = pc.args.dst;
    Tensor a = pc.args.src[0];
    Tensor b = pc.args.src[1];
    uint i = global_index(256);
    if (i >= nelements(dst)) {
        return;
    }
    uvec4 c = coords(dst, i);
    int row = I32Ref(at(b, uvec4(c.y, c.z, c.w, 0u))).v;
    uint64_t out_at = at(dst, c);
    if (row < 0 || uint(row) >= a.ne[1]) {
        store_plain(dst.type, out_at, 0.0);
        return;
    }
    uvec4 ca = uvec4(c.x, uint(row), c.z, c.w);
    if (a.type == T_I32 && dst.type == T_I32) {
        I32Ref(out_at).v = I32Ref(at(a, ca)).v;
        return;
    }
    store_plain(dst.type, out_at, load_value(a, ca));
}
