// CPY and CONT into a plain type (f32, f16, bf16, i32): the destination's values in
// row-major order are the source's, converted. Shapes may differ (the value counts match)
// and either side may have any strides; a quantized source is dequantized. i32 to i32 is
// copied exactly.
#include "common.glsl"
#include "quant.glsl"

layout(local_size_x = 256) in;

void main() {
    Tensor dst = pc.args.dst;
    Tensor src = pc.args.src[0];
    uint i = global_index(256);
    if (i >= nelements(dst)) {
        return;
    }
    uvec4 cd = coords(dst, i);
    uvec4 cs = coords(src, i);
    if (src.type == T_I32 && dst.type == T_I32) {
        I32Ref(at(dst, cd)).v = I32Ref(at(src, cs)).v;
        return;
    }
    store_plain(dst.type, at(dst, cd), load_value(src, cs));
}
