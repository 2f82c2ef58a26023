// ADD, SUB, MUL, DIV of a by b repeated to a's shape (each size of b divides a's). i[0] is
// the op. a and the destination share a type; b may be another float type.
#include "common.glsl"

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
    uvec4 cb = uvec4(c.x % b.ne[0], c.y % b.ne[1], c.z % b.ne[2], c.w % b.ne[3]);
    float x = load_plain(a.type, at(a, c));
    float y = load_plain(b.type, at(b, cb));
    float r;
    switch (pc.args.i[0]) {
    case 0: r = x + y; break;
    case 1: r = x - y; break;
    case 2: r = x * y; break;
    default: r = x / y; break;
    }
    store_plain(dst.type, at(dst, c), r);
}
