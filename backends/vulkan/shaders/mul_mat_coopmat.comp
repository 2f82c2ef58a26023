// MUL_MAT on tensor cores (VK_KHR_cooperative_matrix, 16x16x16 f16 or bf16 tiles with f32
// accumulation, subgroups of 32): dst[m, n] = sum_k a[k, m] * b[k, n] for f16 (or, with
// BF16, bf16) weights `a` and f32 activations `b` (rounded to the weights' type as they are
// staged), dst f32.
//
// A workgroup computes a BM x BN block of dst (BM weight rows by BN columns of b) with 8
// subgroups, each 32 rows by 64 columns (2 x 4 accumulator tiles). Per step of BK values of
// k, both operands are staged in shared memory with 16-byte loads; the next step's loads are
// issued before this step's products, so memory and tensor cores overlap. Rows of both
// operands must be 16-byte aligned with k a multiple of 8 (the backend checks); partial
// blocks at the edges are padded with zeros and stored through shared memory.
//
// dst is [M, N, b2, b3]; a is [K, M, a2, a3] and repeats over b's dims 2 and 3. Every loop
// over accumulators and fragments is unrolled: arrays of cooperative matrices indexed at
// run time would live in memory (3.5x slower on an H100).
//
// variant: f16
// variant: bf16 BF16=1
#include "version.glsl"
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_control_flow_attributes : require
#ifdef BF16
#extension GL_EXT_bfloat16 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int16 : require
#define ELEM bfloat16_t
#else
#define ELEM float16_t
#endif
#include "common.glsl"

#define BM 128
#define BN 128
// Steps of 64 values of k (138 against 106 TFLOPS for steps of 32 on an H100). Shared rows
// are BK + 8 halves long (144 bytes): 16-byte aligned and off the bank period.
#define BK 64
#define SK (BK + 8)
#define A_LOADS (BM * BK / 8 / 256)
#define B_LOADS (BN * BK / 4 / 256)

layout(local_size_x = 256) in;

layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer U4Ref { uvec4 v; };
layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer V4Ref { vec4 v; };
layout(buffer_reference, std430, buffer_reference_align = 16) buffer F32Array { float v[]; };

shared ELEM As[BM * SK];
shared ELEM Bs[BN * SK];
// One 16x16 f32 tile per subgroup, for stores at the edges.
shared float Cs[8 * 256];

// What one invocation stages per step: A_LOADS x 8 halves of a, B_LOADS x 4 floats of b.
uvec4 ra[A_LOADS];
vec4 rb[B_LOADS];

void load_step(Tensor a, Tensor b, uint64_t a_base, uint64_t b_base, uint m0, uint n0, uint k0) {
    uint t = gl_LocalInvocationID.x;
    [[unroll]] for (uint i = 0; i < A_LOADS; i++) {
        uint q = t + i * 256;
        uint row = q / (BK / 8);
        uint k = k0 + (q % (BK / 8)) * 8;
        ra[i] = uvec4(0);
        if (m0 + row < a.ne[1] && k < a.ne[0]) {
            ra[i] = U4Ref(a_base + uint64_t(m0 + row) * a.nb[1] + uint64_t(k) * 2).v;
        }
    }
    [[unroll]] for (uint i = 0; i < B_LOADS; i++) {
        uint q = t + i * 256;
        uint col = q / (BK / 4);
        uint k = k0 + (q % (BK / 4)) * 4;
        rb[i] = vec4(0.0);
        if (n0 + col < b.ne[1] && k < b.ne[0]) {
            rb[i] = V4Ref(b_base + uint64_t(n0 + col) * b.nb[1] + uint64_t(k) * 4).v;
        }
    }
}

void store_step() {
    uint t = gl_LocalInvocationID.x;
    [[unroll]] for (uint i = 0; i < A_LOADS; i++) {
        uint q = t + i * 256;
        uint row = q / (BK / 8);
        uint k = (q % (BK / 8)) * 8;
        [[unroll]] for (uint w = 0; w < 4; w++) {
#ifdef BF16
            As[row * SK + k + 2 * w] = uintBitsToBFloat16EXT(uint16_t(ra[i][w] & 0xffffu));
            As[row * SK + k + 2 * w + 1] = uintBitsToBFloat16EXT(uint16_t(ra[i][w] >> 16));
#else
            f16vec2 h = unpackFloat2x16(ra[i][w]);
            As[row * SK + k + 2 * w] = h.x;
            As[row * SK + k + 2 * w + 1] = h.y;
#endif
        }
    }
    [[unroll]] for (uint i = 0; i < B_LOADS; i++) {
        uint q = t + i * 256;
        uint at = (q / (BK / 4)) * SK + (q % (BK / 4)) * 4;
        [[unroll]] for (uint w = 0; w < 4; w++) {
            Bs[at + w] = ELEM(rb[i][w]);
        }
    }
}

void main() {
    Tensor dst = pc.args.dst;
    Tensor a = pc.args.src[0];
    Tensor b = pc.args.src[1];
    uint K = a.ne[0];
    uint m0 = gl_WorkGroupID.x * BM;
    uint n0 = gl_WorkGroupID.y * BN;
    uint i2 = gl_WorkGroupID.z % dst.ne[2];
    uint i3 = gl_WorkGroupID.z / dst.ne[2];
    uint64_t a_base = a.data + uint64_t(i2 / (dst.ne[2] / a.ne[2])) * a.nb[2] + uint64_t(i3 / (dst.ne[3] / a.ne[3])) * a.nb[3];
    uint64_t b_base = b.data + uint64_t(i2) * b.nb[2] + uint64_t(i3) * b.nb[3];
    uint64_t d_base = dst.data + uint64_t(i2) * dst.nb[2] + uint64_t(i3) * dst.nb[3];

    uint sg = gl_LocalInvocationID.x / 32;
    uint wn = (sg % 2) * 64; // this subgroup's columns of b within the block
    uint wm = (sg / 2) * 32; // and rows of a

    coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> acc[4][2];
    [[unroll]] for (uint i = 0; i < 4; i++) {
        [[unroll]] for (uint j = 0; j < 2; j++) {
            acc[i][j] = coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(0.0);
        }
    }

    load_step(a, b, a_base, b_base, m0, n0, 0);
    for (uint k0 = 0; k0 < K; k0 += BK) {
        barrier();
        store_step();
        barrier();
        if (k0 + BK < K) {
            load_step(a, b, a_base, b_base, m0, n0, k0 + BK);
        }
        [[unroll]] for (uint kk = 0; kk < BK; kk += 16) {
            // C tile (n, m) = B rows (n, k) x A^T (k, m): b is the left operand.
            coopmat<ELEM, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> fb[4];
            coopmat<ELEM, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB> fa[2];
            [[unroll]] for (uint i = 0; i < 4; i++) {
                coopMatLoad(fb[i], Bs, (wn + i * 16) * SK + kk, SK, gl_CooperativeMatrixLayoutRowMajor);
            }
            [[unroll]] for (uint j = 0; j < 2; j++) {
                coopMatLoad(fa[j], As, (wm + j * 16) * SK + kk, SK, gl_CooperativeMatrixLayoutColumnMajor);
            }
            [[unroll]] for (uint i = 0; i < 4; i++) {
                [[unroll]] for (uint j = 0; j < 2; j++) {
                    acc[i][j] = coopMatMulAdd(fb[i], fa[j], acc[i][j]);
                }
            }
        }
    }

    // dst's rows over n are nb[1] apart; a tile stores straight to memory when whole and
    // 16-byte aligned, else through this subgroup's shared tile.
    uint stride = uint(dst.nb[1] / 4);
    bool aligned = dst.nb[1] % 16 == 0 && d_base % 16 == 0;
    uint lane = gl_LocalInvocationID.x % 32;
    [[unroll]] for (uint i = 0; i < 4; i++) {
        [[unroll]] for (uint j = 0; j < 2; j++) {
            uint n = n0 + wn + i * 16;
            uint m = m0 + wm + j * 16;
            if (n >= dst.ne[1] || m >= dst.ne[0]) {
                continue;
            }
            if (aligned && n + 16 <= dst.ne[1] && m + 16 <= dst.ne[0]) {
                coopMatStore(acc[i][j], F32Array(d_base).v, n * stride + m, stride, gl_CooperativeMatrixLayoutRowMajor);
            } else {
                coopMatStore(acc[i][j], Cs, sg * 256, 16, gl_CooperativeMatrixLayoutRowMajor);
                subgroupBarrier();
                for (uint e = lane; e < 256; e += 32) {
                    uint r = e / 16;
                    uint c = e % 16;
                    if (n + r < dst.ne[1] && m + c < dst.ne[0]) {
                        F32Ref(d_base + uint64_t(n + r) * dst.nb[1] + uint64_t(m + c) * 4).v = Cs[sg * 256 + e];
                    }
                }
                subgroupBarrier();
            }
        }
    }
}
