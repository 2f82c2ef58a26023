// binary.comp for packed f32 a and destination with rows of a multiple of 4 values, and b
// with packed rows of the same length repeated over a's rows: four values per invocation with
// 16-byte loads and stores, VPI vectors per invocation as unary_f32.comp. i[1] says how b repeats: 1, b is packed in a's shape; 2, b is one
// row; 0, anything else (rows of b found from a's coordinates).
#include "version.glsl"
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"

layout(local_size_x = 256) in;

layout(buffer_reference, std430, buffer_reference_align = 16) buffer V4Ref { vec4 v; };

#define VPI 4

void main() {
    Tensor a = pc.args.src[0];
    Tensor b = pc.args.src[1];
    uint64_t dst = pc.args.dst.data;
    uint n4 = nelements(a) / 4;
    int op = pc.args.i[0];
    int repeat = pc.args.i[1];
    uint first = group_index() * 256 * VPI + gl_LocalInvocationID.x;
    [[unroll]] for (uint j = 0; j < VPI; j++) {
        uint i = first + j * 256;
        if (i >= n4) {
            break;
        }
        uint e = i * 4;
        uint64_t b_at;
        if (repeat == 1) {
            b_at = b.data + uint64_t(e) * 4;
        } else if (repeat == 2) {
            b_at = b.data + uint64_t(e % a.ne[0]) * 4;
        } else {
            uint row = e / a.ne[0];
            uint col = e - row * a.ne[0];
            uint i1 = row % a.ne[1];
            uint i23 = row / a.ne[1];
            uint i2 = i23 % a.ne[2];
            uint i3 = i23 / a.ne[2];
            b_at = row_at(b, i1 % b.ne[1], i2 % b.ne[2], i3 % b.ne[3]) + uint64_t(col) * 4;
        }
        vec4 x = V4Ref(a.data + uint64_t(e) * 4).v;
        vec4 y = V4Ref(b_at).v;
        vec4 r;
        switch (op) {
        case 0: r = x + y; break;
        case 1: r = x - y; break;
        case 2: r = x * y; break;
        default: r = x / y; break;
        }
        V4Ref(dst + uint64_t(e) * 4).v = r;
    }
}
