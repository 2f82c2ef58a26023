// unary.comp for packed f32 rows whose length is a multiple of 4: 16-byte loads and stores,
// no per-value address arithmetic, and VPI vectors per invocation (a workgroup covers
// 256 * VPI consecutive vectors) so that reading the arguments is paid for a few times over.
#include "version.glsl"
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "unary_ops.glsl"

layout(local_size_x = 256) in;

layout(buffer_reference, std430, buffer_reference_align = 16) buffer V4Ref { vec4 v; };

#define VPI 4

void main() {
    uint64_t src = pc.args.src[0].data;
    uint64_t dst = pc.args.dst.data;
    uint n4 = nelements(pc.args.dst) / 4;
    int op = pc.args.i[0];
    // Coordinates matter only to DIAG_MASK_INF, which does not take this shader.
    uvec4 c = uvec4(0);
    uint first = group_index() * 256 * VPI + gl_LocalInvocationID.x;
    [[unroll]] for (uint j = 0; j < VPI; j++) {
        uint i = first + j * 256;
        if (i < n4) {
            vec4 x = V4Ref(src + uint64_t(i) * 16).v;
            V4Ref(dst + uint64_t(i) * 16).v = vec4(apply(op, x.x, c), apply(op, x.y, c), apply(op, x.z, c), apply(op, x.w, c));
        }
    }
}
