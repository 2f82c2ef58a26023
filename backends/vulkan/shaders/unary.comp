// Value-by-value ops of one source in its shape: the unary ops, SCALE and DIAG_MASK_INF.
// i[0] is the op (UNARY_* in unary_ops.glsl), f[0] SCALE's factor, i[1] DIAG_MASK_INF's n_past. Source
// and destination may have any strides; both are f32, f16 or bf16, of one type.
#include "common.glsl"

layout(local_size_x = 256) in;

#include "unary_ops.glsl"

void main() {
    Tensor dst = pc.args.dst;
    Tensor src = pc.args.src[0];
    uint i = global_index(256);
    if (i >= nelements(dst)) {
        return;
    }
    uvec4 c = coords(dst, i);
    float x = load_plain(src.type, at(src, c));
    store_plain(dst.type, at(dst, c), apply(pc.args.i[0], x, c));
}
