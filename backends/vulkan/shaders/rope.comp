// ROPE: rotary position embedding of rows src[.., i1, i2, i3] by the position pos[i2]
// (source 1, i32). i[0] is the mode (0: pairs (x[2k], x[2k+1]), 1: NeoX halves (x[k],
// x[k + n_dims/2])), i[1] n_dims, f[0] freq_scale, f[1] log2(freq_base). Pair k turns by
// theta = freq_scale * pos * freq_base^(-2k / n_dims); values at i0 >= n_dims pass through.
//
// One invocation per pair and per passed-through value (ne0 - n_dims/2 items a row), so
// each invocation writes only what it read and the destination may be the source.
#include "common.glsl"

layout(local_size_x = 256) in;

// sin and cos of `theta` after an exact reduction to [-pi, pi] (2 pi split in two parts, the
// product of the first exact through fma), so large angles keep the precision that
// devices' sin and cos have near zero.
vec2 sin_cos(float theta) {
    const float TWO_PI_HI = 6.28318548202514648;
    const float TWO_PI_LO = -1.7484555314695172e-7;
    precise float k = round(theta * 0.15915494309189535);
    precise float r = fma(-k, TWO_PI_HI, theta);
    r = fma(-k, TWO_PI_LO, r);
    return vec2(sin(r), cos(r));
}

void main() {
    Tensor src = pc.args.src[0];
    Tensor pos = pc.args.src[1];
    Tensor dst = pc.args.dst;
    uint n_dims = uint(pc.args.i[1]);
    uint half_dims = n_dims / 2u;
    uint per_row = src.ne[0] - half_dims;
    uint idx = global_index(256);
    if (idx >= per_row * src.ne[1] * src.ne[2] * src.ne[3]) {
        return;
    }
    uint row = idx / per_row;
    uint j = idx % per_row;
    uvec3 r = uvec3(row % src.ne[1], (row / src.ne[1]) % src.ne[2], row / (src.ne[1] * src.ne[2]));
    uint64_t sa = row_at(src, r.x, r.y, r.z);
    uint64_t da = row_at(dst, r.x, r.y, r.z);
    if (j >= half_dims) {
        uint i0 = j + half_dims;
        store_plain(dst.type, da + uint64_t(i0) * dst.nb[0], load_plain(src.type, sa + uint64_t(i0) * src.nb[0]));
        return;
    }
    uint k = j;
    uint ia = pc.args.i[0] == 0 ? 2u * k : k;
    uint ib = pc.args.i[0] == 0 ? 2u * k + 1u : k + half_dims;
    float p = float(I32Ref(at(pos, uvec4(r.y, 0u, 0u, 0u))).v);
    float exponent = -float(2u * k) / float(n_dims);
    float theta = pc.args.f[0] * p * exp2(exponent * pc.args.f[1]);
    vec2 sc = sin_cos(theta);
    float a = load_plain(src.type, sa + uint64_t(ia) * src.nb[0]);
    float b = load_plain(src.type, sa + uint64_t(ib) * src.nb[0]);
    store_plain(dst.type, da + uint64_t(ia) * dst.nb[0], a * sc.y - b * sc.x);
    store_plain(dst.type, da + uint64_t(ib) * dst.nb[0], a * sc.x + b * sc.y);
}
