// CONCAT: dst = src0 joined with src1 along dimension i[0]. All three share one type of
// i[1] bytes a value (4: f32 or i32, 2: f16 or bf16), copied bit for bit. One invocation
// per destination value; sources and destination may have any strides.
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
    uint dim = uint(pc.args.i[0]);
    uint64_t from;
    if (c[dim] < a.ne[dim]) {
        from = at(a, c);
    } else {
        c[dim] -= a.ne[dim];
        from = at(b, c);
        c[dim] += a.ne[dim];
    }
    uint64_t to = at(dst, c);
    if (pc.args.i[1] == 4) {
        I32Ref(to).v = I32Ref(from).v;
    } else {
        U16Ref(to).v = U16Ref(from).v;
    }
}
