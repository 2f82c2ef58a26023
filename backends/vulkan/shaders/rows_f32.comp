// SOFT_MAX, NORM and RMS_NORM (the variants) of packed f32 rows of a multiple of 4 values, up
// to 8192: each row is read once into registers with 16-byte loads (up to 8 vectors per
// invocation) and written once. A workgroup of 256 holds 256 / T rows of T invocations each
// (T = i[4], a power of two from 32 to 256 chosen from the row length), reducing within its
// row's invocations through shared memory, or (the `_sg` variants, on devices with subgroup
// arithmetic) within each subgroup first, then across the row's subgroups. Parameters and
// results as soft_max.comp and norm.comp, but SOFT_MAX takes only masks whose rows it can read
// as vectors (see below); the destination may be the source.
//
// variant: soft_max SOFT_MAX=1 SUBGROUP=0
// variant: norm SOFT_MAX=0 SUBGROUP=0
// variant: soft_max_sg SOFT_MAX=1 SUBGROUP=1
// variant: norm_sg SOFT_MAX=0 SUBGROUP=1
#include "version.glsl"
#extension GL_EXT_control_flow_attributes : require
#if SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
#include "common.glsl"

layout(local_size_x = 256) in;

layout(buffer_reference, std430, buffer_reference_align = 16) buffer V4Ref { vec4 v; };
layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer U2Ref { uvec2 v; };

#define VECS 8

const float NEG_INF = uintBitsToFloat(0xff800000u);
const float NAN = uintBitsToFloat(0x7fc00000u);

shared float red[256];

uint T;
uint lane;
uint base;

#if SUBGROUP
// The row's subgroups are consecutive invocations (1-D workgroups are split into subgroups in
// order on every implementation), each wholly inside the row when the subgroup is no wider
// than the row's invocations; otherwise the shared-memory tree below is used.
float across_subgroups(float partial, bool is_max) {
    if (subgroupElect()) {
        red[gl_SubgroupID] = partial;
    }
    barrier();
    uint first = base / gl_SubgroupSize;
    float r = red[first];
    for (uint i = 1; i < T / gl_SubgroupSize; i++) {
        float o = red[first + i];
        r = is_max ? max(r, o) : r + o;
    }
    barrier();
    return r;
}
#endif

float row_sum(float x) {
#if SUBGROUP
    if (gl_SubgroupSize <= T) {
        return across_subgroups(subgroupAdd(x), false);
    }
#endif
    red[gl_LocalInvocationID.x] = x;
    barrier();
    for (uint s = T / 2; s > 0; s /= 2) {
        if (lane < s) {
            red[base + lane] += red[base + lane + s];
        }
        barrier();
    }
    float r = red[base];
    barrier();
    return r;
}

float row_max(float x) {
#if SUBGROUP
    if (gl_SubgroupSize <= T) {
        // NaN never wins: it takes no part (the callers' values are never NaN here, as the
        // running maximum skips them).
        return across_subgroups(subgroupMax(x), true);
    }
#endif
    red[gl_LocalInvocationID.x] = x;
    barrier();
    for (uint s = T / 2; s > 0; s /= 2) {
        if (lane < s) {
            // NaN-skipping maximum: a NaN never wins.
            float o = red[base + lane + s];
            if (o > red[base + lane]) {
                red[base + lane] = o;
            }
        }
        barrier();
    }
    float r = red[base];
    barrier();
    return r;
}

float vmax(vec4 v, float m) {
    [[unroll]] for (uint e = 0; e < 4; e++) {
        if (v[e] > m) {
            m = v[e];
        }
    }
    return m;
}

void main() {
    Tensor src = pc.args.src[0];
    Tensor dst = pc.args.dst;
    T = uint(pc.args.i[4]);
    lane = gl_LocalInvocationID.x % T;
    base = gl_LocalInvocationID.x - lane;
    uint rows = src.ne[1] * src.ne[2] * src.ne[3];
    uint row = group_index() * (256 / T) + gl_LocalInvocationID.x / T;
    // Rows past the end still take part in the barriers.
    bool live = row < rows;
    uint n4 = src.ne[0] / 4;
    uint64_t at = uint64_t(live ? row : 0) * src.nb[1];

    vec4 v[VECS];
    [[unroll]] for (uint j = 0; j < VECS; j++) {
        uint i = lane + j * T;
        v[j] = live && i < n4 ? V4Ref(src.data + at + uint64_t(i) * 16).v : vec4(0.0);
    }

#if SOFT_MAX
    // The mask, if any, is read as vectors: f32 rows on 16-byte boundaries or f16 rows on
    // 8-byte ones (the backend sends other masks to soft_max.comp). A scalar path for other
    // masks, unrolled over the row's values beside these, made this shader half as fast on
    // an H200 even where it never ran.
    Tensor mask = pc.args.src[1];
    bool masked = pc.args.i[0] == 1;
    bool mask_f16 = mask.type == T_F16;
    float scale = pc.args.f[0];
    uint i1 = row % src.ne[1];
    uint i2 = (row / src.ne[1]) % src.ne[2];
    uint i3 = row / (src.ne[1] * src.ne[2]);
    uint64_t mask_row = masked ? row_at(mask, i1 % mask.ne[1], i2 % mask.ne[2], i3 % mask.ne[3]) : 0ul;
    float m = NEG_INF;
    [[unroll]] for (uint j = 0; j < VECS; j++) {
        uint i = lane + j * T;
        if (live && i < n4) {
            v[j] *= scale;
            if (masked) {
                if (mask_f16) {
                    uvec2 h = U2Ref(mask_row + uint64_t(i) * 8).v;
                    v[j] += vec4(unpackHalf2x16(h.x), unpackHalf2x16(h.y));
                } else {
                    v[j] += V4Ref(mask_row + uint64_t(i) * 16).v;
                }
            }
            m = vmax(v[j], m);
        }
    }
    m = row_max(m);
    // With no finite or +inf value the row is all -inf (zeros) unless it holds a NaN: exp of
    // the values themselves is then 0 or NaN, and the factor below 0 or NaN.
    bool none = m == NEG_INF;
    float shift = none ? 0.0 : m;
    float s = 0.0;
    [[unroll]] for (uint j = 0; j < VECS; j++) {
        uint i = lane + j * T;
        if (live && i < n4) {
            v[j] = exp(v[j] - shift);
            s += v[j].x + v[j].y + v[j].z + v[j].w;
        }
    }
    s = row_sum(s);
    // One reciprocal a row: a division per value cost 4% more time on an H200.
    float inv = none ? (isnan(s) ? NAN : 0.0) : 1.0 / s;
    [[unroll]] for (uint j = 0; j < VECS; j++) {
        uint i = lane + j * T;
        if (live && i < n4) {
            V4Ref(dst.data + uint64_t(row) * dst.nb[1] + uint64_t(i) * 16).v = v[j] * inv;
        }
    }
#else
    bool rms = pc.args.i[0] == 1;
    float eps = pc.args.f[0];
    float n = float(src.ne[0]);
    float mean = 0.0;
    if (!rms) {
        float s = 0.0;
        [[unroll]] for (uint j = 0; j < VECS; j++) {
            s += v[j].x + v[j].y + v[j].z + v[j].w;
        }
        mean = row_sum(s) / n;
    }
    float sq = 0.0;
    [[unroll]] for (uint j = 0; j < VECS; j++) {
        uint i = lane + j * T;
        if (live && i < n4) {
            vec4 d = v[j] - mean;
            sq += dot(d, d);
        }
    }
    float inv = 1.0 / sqrt(row_sum(sq) / n + eps);
    [[unroll]] for (uint j = 0; j < VECS; j++) {
        uint i = lane + j * T;
        if (live && i < n4) {
            V4Ref(dst.data + uint64_t(row) * dst.nb[1] + uint64_t(i) * 16).v = (v[j] - mean) * inv;
        }
    }
#endif
}
