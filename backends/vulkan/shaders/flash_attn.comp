// FLASH_ATTN: out[:, h, i, i3] = sum_p softmax_p(f[0] * q[:, i, h, i3] . k[:, p] + mask) v[:, p]
// over the keys and values of head h / (hq / hk) and batch i3 % bk, with the mask (source 3,
// f32 or f16, when i[0] is 1) row (i % m1, h % m2, i3 % m3). One workgroup per query row and
// head walks the keys in chunks of ROW_THREADS positions, one per invocation, keeping the
// soft-max online (running maximum and sum); invocation t sums value elements t, t + 256, ...
// (heads of up to 1024 values). A position whose mask is -inf reads no key; a query that sees
// no position gets zeros.
#include "common.glsl"
#include "row_reduce.glsl"

const float NEG_INF = uintBitsToFloat(0xff800000u);
const uint MAX_PARTS = 4u;

shared float weights[ROW_THREADS];

void main() {
    Tensor q = pc.args.src[0];
    Tensor k = pc.args.src[1];
    Tensor v = pc.args.src[2];
    Tensor mask = pc.args.src[3];
    Tensor dst = pc.args.dst;
    uint row = group_index();
    if (row >= row_count(dst.ne)) {
        return;
    }
    uvec3 r = row_coords(row, dst.ne);
    uint h = r.x, i = r.y, i3 = r.z;
    uint d = q.ne[0], dv = v.ne[0], kv = k.ne[1];
    uint kh = h / (q.ne[2] / k.ne[2]), kb = i3 % k.ne[3];
    bool masked = pc.args.i[0] == 1;
    uint64_t q_row = row_at(q, i, h, i3);
    uint64_t m_row = masked ? row_at(mask, i % mask.ne[1], h % mask.ne[2], i3 % mask.ne[3]) : 0ul;
    uint t = gl_LocalInvocationID.x;

    float acc[MAX_PARTS] = float[MAX_PARTS](0.0, 0.0, 0.0, 0.0);
    float run_max = NEG_INF;
    float run_sum = 0.0;
    for (uint p0 = 0u; p0 < kv; p0 += ROW_THREADS) {
        uint p = p0 + t;
        float s = NEG_INF;
        if (p < kv) {
            float bias = masked ? load_plain(mask.type, m_row + uint64_t(p) * mask.nb[0]) : 0.0;
            if (bias != NEG_INF) {
                uint64_t k_row = row_at(k, p, kh, kb);
                float dot = 0.0;
                for (uint e = 0u; e < d; e++) {
                    dot += load_plain(q.type, q_row + uint64_t(e) * q.nb[0]) *
                           load_plain(k.type, k_row + uint64_t(e) * k.nb[0]);
                }
                s = dot * pc.args.f[0] + bias;
            }
        }
        float next = max(run_max, group_max(s));
        float w = next == NEG_INF ? 0.0 : exp(s - next);
        float rescale = run_max == NEG_INF ? 0.0 : exp(run_max - next);
        run_sum = run_sum * rescale + group_sum(w);
        run_max = next;
        weights[t] = w;
        barrier();
        uint end = min(kv - p0, ROW_THREADS);
        for (uint j = 0u; j < MAX_PARTS; j++) {
            uint e = t + j * ROW_THREADS;
            if (e < dv) {
                float a = acc[j] * rescale;
                for (uint pp = 0u; pp < end; pp++) {
                    a += weights[pp] * load_plain(v.type, row_at(v, p0 + pp, kh, kb) + uint64_t(e) * v.nb[0]);
                }
                acc[j] = a;
            }
        }
        barrier();
    }
    uint64_t d_row = row_at(dst, h, i, i3);
    for (uint j = 0u; j < MAX_PARTS; j++) {
        uint e = t + j * ROW_THREADS;
        if (e < dv) {
            store_plain(dst.type, d_row + uint64_t(e) * dst.nb[0], run_sum == 0.0 ? 0.0 : acc[j] / run_sum);
        }
    }
}
