// FLASH_ATTN in reduced precision (tessera's Precision::Reduced) on f16 tensor cores, for keys
// and values in f16 with heads of 32, 64 or 128 values and f32 or f16 queries: an encoder's
// attention over a batch of sequences whose projections wrote its queries, keys and values in
// f16, or a prompt over a cache kept in f16.
//
// A block of 4 warps takes 64 query rows of one head and batch, 16 a warp, and walks the keys in
// tiles of KEYS positions. Each tile is copied to shared memory as it is stored, 16 bytes a copy
// with cp.async, while the tile before it is multiplied (two buffers). The scores are
// `mma.sync m16n8k16` products of the queries (rounded to f16 once, when read) by the keys, with
// f32 sums; the soft-max is kept online in f32 and in base 2 (the scale includes log2(e)); its
// weights, rounded to f16, are the A operand of the product by the values straight from the
// scores' accumulator registers (two tiles of 8 keys make one of 16), and the rows' sums of the
// weights are their product by ones, so that they sum the weights as rounded (and a thread
// holds its rows' whole sums). Keys reach the B operand through ldmatrix, values through
// ldmatrix.trans, from rows padded by 8 values so that the 8 rows a matrix load reads fall in
// distinct banks.
//
// Sequences of at most 128 keys with heads of 32 (an encoder's) take flash_attn_half_short
// instead, which copies every key and value at once and multiplies the same tiles without
// waiting between them (a kernel of its own where every query row shares one mask row, whose
// warps take 32 query rows each: 128 a block).
//
// Keys that no query row of the block may see, and positions past the last, are zeros in shared
// memory whatever the tensors hold there (cp.async fills them), so that a cache's unwritten rows
// cannot turn a sum into NaN; a tile no row may see is neither copied nor multiplied.
//
// The launcher takes this kernel only for keys and values whose rows start on 16-byte
// boundaries (the copies' size), queries on 8-byte boundaries (read two values at a time) and
// an f16 result on 16-byte boundaries (written 16 bytes at a time).
#include <type_traits>

#include "flash_attn_rows.cuh"

// Two values rounded to f16 in one register, `lo` in the low half (an operand's pair of columns).
__device__ __forceinline__ unsigned int fah_pack(float lo, float hi) {
    unsigned int r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// c += a * b (16 x 16 by 16 x 8, f16 operands, f32 sums).
__device__ __forceinline__ void fah_mma(float (&c)[4], const unsigned int (&a)[4], unsigned int b0, unsigned int b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four 8 x 8 matrices of 16-bit values from shared memory, lane l giving the address of row
// l % 8 of matrix l / 8; with TRANS each is handed out transposed.
template <bool TRANS> __device__ __forceinline__ void fah_ldmatrix(unsigned int (&r)[4], const void *row) {
    const unsigned int at = (unsigned int)__cvta_generic_to_shared(row);
    if constexpr (TRANS) {
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(at)
                     : "memory");
    } else {
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(at)
                     : "memory");
    }
}

// Copies 16 bytes from global to shared memory without waiting, or writes 16 zero bytes
// (`fill` false: nothing is read).
__device__ __forceinline__ void fah_copy16(void *to, const void *from, bool fill) {
    const unsigned int at = (unsigned int)__cvta_generic_to_shared(to);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(at), "l"(from), "r"(fill ? 16 : 0) : "memory");
}

__device__ __forceinline__ void fah_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void fah_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }

// The factors that turn this thread's rows' sums into their results: one over the rows' sums
// of weights `sums` (an accumulator of their product by ones: row g in sums[0], g + 8 in
// sums[2]); zero for a row no key reached, whose result is zeros.
__device__ __forceinline__ void fah_row_scales(const float (&sums)[4], float (&scale)[2]) {
#pragma unroll
    for (int i = 0; i < 2; i++) {
        scale[i] = sums[2 * i] == 0.0f ? 0.0f : 1.0f / sums[2 * i];
    }
}

// A warp's 16 query rows from `first` (those below `n`) of head h and batch i3 written to `dst`
// as packed f16 rows (on 16-byte boundaries): the sums times `scale`, rounded to f16, laid out
// in `stage` (16 rows of D + 8 values in shared memory) first, so that each row is stored in
// whole 16-byte pieces.
template <int D>
__device__ __forceinline__ void fah_store_rows_f16(const float (&out)[D / 8][4], const float (&scale)[2], int first,
                                                   int n, const TensorArg &dst, int h, int i3,
                                                   unsigned short (*stage)[D + 8]) {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int i = 0; i < 2; i++) {
#pragma unroll
        for (int s = 0; s < D / 8; s++) {
            *(unsigned int *)&stage[g + 8 * i][8 * s + 2 * t] =
                f32x2_to_16x2_bits<false>(out[s][2 * i] * scale[i], out[s][2 * i + 1] * scale[i]);
        }
    }
    __syncwarp();
    for (int p = lane; p < 16 * (D / 8); p += 32) {
        const int r = p / (D / 8), c = p % (D / 8);
        if (first + r < n) {
            *(uint4 *)(row_ptr(dst, h, first + r, i3) + 16 * c) = *(const uint4 *)&stage[r][8 * c];
        }
    }
}

// This thread's queries (rows g and g + 8 of the warp's 16 from `first`; rows from `n` on are
// zeros) of head h and batch i3, read first. f32 values (Q = F32) go to qv[s][x][i], value
// 16s + 2t + (x & 1) + 8(x / 2) of row i, to be rounded to f16 (`fah_query_fragments`) once the
// first keys' copies are queued; f16 values (Q = F16) go straight to their A fragments `qa`
// (an aligned pair of f16 values is one fragment register), which the first product waits for.
template <typename Q, int D>
__device__ __forceinline__ void fah_load_queries(const TensorArg &q, int first, int n, int h, int i3,
                                                 float (&qv)[D / 16][4][2], unsigned int (&qa)[D / 16][4]) {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int row = first + g + 8 * i;
        const char *qrow = row < n ? row_ptr(q, row, h, i3) : nullptr;
#pragma unroll
        for (int s = 0; s < D / 16; s++) {
            // Values e and e + 1 side by side: one 8-byte (f32) or 4-byte (f16) load (rows on
            // 8-byte boundaries).
#pragma unroll
            for (int x = 0; x < 4; x += 2) {
                const int e = 16 * s + 2 * t + 8 * (x / 2);
                if constexpr (std::is_same_v<Q, F16>) {
                    qa[s][i + x] = qrow ? *(const unsigned int *)(qrow + 2 * e) : 0u;
                } else {
                    const float2 v = qrow ? *(const float2 *)(qrow + 4 * e) : make_float2(0.0f, 0.0f);
                    qv[s][x][i] = v.x;
                    qv[s][x + 1][i] = v.y;
                }
            }
        }
    }
}

// The queries as A fragments: qa[s] = {(g, 2t), (g + 8, 2t), (g, 2t + 8), (g + 8, 2t + 8)}
// (each with the next column) of values 16s .. 16s + 15; f16 queries are there already.
template <typename Q, int D>
__device__ __forceinline__ void fah_query_fragments(const float (&qv)[D / 16][4][2], unsigned int (&qa)[D / 16][4]) {
    if constexpr (std::is_same_v<Q, F32>) {
#pragma unroll
        for (int s = 0; s < D / 16; s++) {
#pragma unroll
            for (int i = 0; i < 2; i++) {
                qa[s][i] = fah_pack(qv[s][0][i], qv[s][1][i]);
                qa[s][i + 2] = fah_pack(qv[s][2][i], qv[s][3][i]);
            }
        }
    }
}

// One tile of KEYS keys at key position p0 for a warp's R x 16 query rows (R tiles of 16 rows,
// each key and value fragment loaded once for all of them): the scores of the queries `qa` by
// the keys (`keys`, rows of D + 8 values in shared memory), the online soft-max over them
// (`fa_online_softmax`, with the tile's biases at `bias` or, for R = 1, the rows' mask rows
// `mrow`; `zero_bias` where those biases are all 0), and the weighted values (`values`, laid out
// as the keys) added to `out`, the weights to the rows' sums `sums` (`fah_row_scales`).
template <typename M, int D, int KEYS, int R>
__device__ __forceinline__ void fah_tile(const unsigned int (&qa)[R][D / 16][4], const unsigned short (*keys)[D + 8],
                                         const unsigned short (*values)[D + 8], float (&out)[R][D / 8][4],
                                         float (&row_max)[R][2], float (&sums)[R][4], bool one_row, bool zero_bias,
                                         const float *bias, const char *const (&mrow)[2], long long mask_nb0, int p0,
                                         int kv, float scale2) {
    const int lane = threadIdx.x % 32;
    // Scores: sc[r][c] = {(g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1)} of row tile r and
    // keys 8c .. 8c + 7. Lane l addresses key row l % 8 of the tile pair's 8 keys 8(c + l / 16)
    // and values 8(l / 8 % 2) of the 16 of step s.
    float sc[R][KEYS / 8][4];
#pragma unroll
    for (int r = 0; r < R; r++) {
#pragma unroll
        for (int c = 0; c < KEYS / 8; c++) {
            sc[r][c][0] = sc[r][c][1] = sc[r][c][2] = sc[r][c][3] = 0.0f;
        }
    }
#pragma unroll
    for (int s = 0; s < D / 16; s++) {
#pragma unroll
        for (int c = 0; c < KEYS / 8; c += 2) {
            unsigned int kf[4];
            fah_ldmatrix<false>(kf, &keys[8 * c + 8 * (lane / 16) + lane % 8][16 * s + 8 * (lane / 8 % 2)]);
#pragma unroll
            for (int r = 0; r < R; r++) {
                fah_mma(sc[r][c], qa[r][s], kf[0], kf[1]);
                fah_mma(sc[r][c + 1], qa[r][s], kf[2], kf[3]);
            }
        }
    }

#pragma unroll
    for (int r = 0; r < R; r++) {
        fa_online_softmax<M, KEYS, D, 4>(sc[r], out[r], row_max[r], sums[r], one_row, zero_bias, bias, mrow, mask_nb0,
                                         p0, kv, scale2);
    }

    // Weighted values: the weights of keys 16j .. 16j + 15 are the A fragment of step j, from
    // the scores of tiles 2j and 2j + 1 as they lie. Lane l addresses value row
    // 16j + 8(l / 8 % 2) + l % 8, columns 16s + 8(l / 16): matrices 0 and 1 are the B fragment
    // of columns 16s .. 16s + 7, 2 and 3 that of the 8 after. The weights times ones (two f16
    // ones a register) are the rows' sums.
    constexpr unsigned int ONES = 0x3C003C00u;
#pragma unroll
    for (int j = 0; j < KEYS / 16; j++) {
        unsigned int w[R][4];
#pragma unroll
        for (int r = 0; r < R; r++) {
            w[r][0] = fah_pack(sc[r][2 * j][0], sc[r][2 * j][1]);
            w[r][1] = fah_pack(sc[r][2 * j][2], sc[r][2 * j][3]);
            w[r][2] = fah_pack(sc[r][2 * j + 1][0], sc[r][2 * j + 1][1]);
            w[r][3] = fah_pack(sc[r][2 * j + 1][2], sc[r][2 * j + 1][3]);
            fah_mma(sums[r], w[r], ONES, ONES);
        }
#pragma unroll
        for (int s = 0; s < D / 16; s++) {
            unsigned int vf[4];
            fah_ldmatrix<true>(vf, &values[16 * j + 8 * (lane / 8 % 2) + lane % 8][16 * s + 8 * (lane / 16)]);
#pragma unroll
            for (int r = 0; r < R; r++) {
                fah_mma(out[r][2 * s], w[r], vf[0], vf[1]);
                fah_mma(out[r][2 * s + 1], w[r], vf[2], vf[3]);
            }
        }
    }
}

// Whether the KEYS biases at `bias` (a one-row mask's, in shared memory) are all 0, as the
// warp sees them. The callers take a tile with zero biases as one (`zero_bias` of
// fa_online_softmax) only for a positive scale, under which the largest score stays the
// largest once scaled.
template <int KEYS> __device__ __forceinline__ bool fah_zero_biases(const float *bias) {
    bool zero = true;
#pragma unroll
    for (int j = threadIdx.x % 32; j < KEYS; j += 32) {
        zero &= bias[j] == 0.0f;
    }
    return __all_sync(0xffffffffu, zero);
}

// i % n for 0 <= i and 0 < n (both below 2^31), without a division where n is 1 or above i: a
// block's head and batch index tensors that broadcast or match them.
__device__ __forceinline__ int fah_mod(int i, int n) { return i < n ? i : n == 1 ? 0 : i % n; }

// Where a block of 16 R WARPS query rows (R tiles of 16 a warp) stands: its rows (from `first`,
// of `n`), head and batch, its key and value head's rows and its mask rows; and this thread's
// two query rows of its warp's first 16 (g and g + 8) with their mask rows.
template <int WARPS, int R> struct FahBlock {
    int n, kv, first, h, i3, warp;
    const char *kbase, *vbase, *mbase;
    // Rows of the mask that differ for the block's query rows (rows repeat past mask.ne[1]);
    // with one (or no mask, `one_row`) a tile's biases are read once into shared memory.
    int mask_rows;
    bool one_row, warp_live;
    int rows[2];
    const char *mrow[2]; // with several mask rows: this thread's (null past the last query row)

    __device__ __forceinline__ FahBlock(const TensorArg &q, const TensorArg &k, const TensorArg &v,
                                        const TensorArg &mask, int has_mask) {
        // Query rows and key positions fit 31 bits, heads and batches 16 (validated).
        n = (int)q.ne[1], kv = (int)k.ne[1], first = blockIdx.x * 16 * R * WARPS;
        h = blockIdx.y, i3 = blockIdx.z, warp = threadIdx.x / 32;
        const int hq = (int)q.ne[2], hk = (int)k.ne[2];
        const int kh = hq == hk ? h : h / (hq / hk), kb = fah_mod(i3, (int)k.ne[3]);
        kbase = (const char *)k.data + kh * k.nb[2] + kb * k.nb[3];
        vbase = (const char *)v.data + kh * v.nb[2] + kb * v.nb[3];
        mask_rows = (int)min((long long)min(16 * R * WARPS, n - first), mask.ne[1]);
        one_row = !has_mask || mask_rows == 1;
        mbase = has_mask ? row_ptr(mask, 0, fah_mod(h, (int)mask.ne[2]), fah_mod(i3, (int)mask.ne[3])) : nullptr;
        const int g = threadIdx.x % 32 / 4;
        warp_live = first + warp * 16 * R < n;
#pragma unroll
        for (int i = 0; i < 2; i++) {
            rows[i] = first + warp * 16 * R + g + 8 * i;
            const bool own = !one_row && rows[i] < n;
            mrow[i] = own ? mbase + fa_mask_row(rows[i], mask.ne[1]) * mask.nb[1] : nullptr;
        }
    }
};

// Marks the N keys from position p0 that some query row of block `at` may see in `live`; with
// one mask row, also writes their biases (times log2(e); -inf past the last position) to
// `bias`. Whether this thread found one. With several mask rows, the entries of `live` are zero
// before.
template <typename M, int N, int WARPS, int R>
__device__ __forceinline__ bool fah_mark(const FahBlock<WARPS, R> &at, int p0, float *bias, int *live, int has_mask,
                                         const TensorArg &mask) {
    bool any = false;
    if (at.one_row) {
        for (int j = threadIdx.x; j < N; j += 32 * WARPS) {
            const int p = p0 + j;
            const float b = p >= at.kv ? -INFINITY : has_mask ? M::load(at.mbase, p, mask.nb[0]) : 0.0f;
            bias[j] = b * FA_LOG2E;
            live[j] = b != -INFINITY;
            any |= b != -INFINITY;
        }
    } else {
        for (int i = threadIdx.x; i < at.mask_rows * N; i += 32 * WARPS) {
            const int j = i % N, p = p0 + j;
            const char *m = at.mbase + fa_mask_row(at.first + i / N, mask.ne[1]) * mask.nb[1];
            if (p < at.kv && M::load(m, p, mask.nb[0]) != -INFINITY) {
                live[j] = 1;
                any = true;
            }
        }
    }
    return any;
}

// Queues the copies of the N keys and values of block `at` from position p0 (rows `knb` and
// `vnb` bytes apart) into `keys` and `values`; keys not `live` become zeros.
template <int D, int N, int WARPS, int R>
__device__ __forceinline__ void fah_copy(const FahBlock<WARPS, R> &at, unsigned short (*keys)[D + 8],
                                         unsigned short (*values)[D + 8], const int *live, long long knb,
                                         long long vnb, int p0) {
    constexpr int THREADS = 32 * WARPS;
    // 16-byte pieces of the keys (and values) each thread copies.
    constexpr int PIECES = N * (D / 8) / THREADS;
    static_assert(PIECES * THREADS == N * (D / 8), "the keys are whole pieces of the block's threads");
#pragma unroll
    for (int u = 0; u < PIECES; u++) {
        const int i = threadIdx.x + u * THREADS, j = i / (D / 8), e = 8 * (i % (D / 8));
        const long long p = min(p0 + j, at.kv - 1);
        const bool seen = live[j];
        fah_copy16(&keys[j][e], at.kbase + p * knb + 2 * e, seen);
        fah_copy16(&values[j][e], at.vbase + p * vnb + 2 * e, seen);
    }
    fah_commit();
}

// Two tiles of keys and values (one multiplied, one being copied) with what the block knows of
// their positions.
template <int D, int KEYS> struct FahTile {
    __align__(16) unsigned short keys[2][KEYS][D + 8];
    __align__(16) unsigned short values[2][KEYS][D + 8];
    float bias[2][KEYS]; // the mask row of every query of the block, where they share one
    int live[2][KEYS];   // whether some query row of the block sees the key
};

template <typename M, typename Q, int D, int KEYS, int WARPS, int R>
__device__ void flash_attn_half(const TensorArg &q, const TensorArg &k, const TensorArg &v, const TensorArg &mask,
                               const TensorArg &dst, float scale, int has_mask, int out_f16, FahTile<D, KEYS> &tile) {
    static_assert(R == 1, "a warp of the streaming kernel takes 16 query rows");
    const float scale2 = scale * FA_LOG2E;

    const FahBlock<WARPS, 1> at(q, k, v, mask, has_mask);
    const int tid = threadIdx.x;
    float qv[D / 16][4][2];
    unsigned int qa[1][D / 16][4];
    fah_load_queries<Q, D>(q, at.first + at.warp * 16, at.n, at.h, at.i3, qv, qa[0]);

    // Marks the keys of the tile at p0 in buffer b (entries of `live` are zero before: a
    // buffer's are cleared once its tile is copied), and queues their copies.
    auto mark = [&](int p0, int b) { return fah_mark<M, KEYS>(at, p0, tile.bias[b], tile.live[b], has_mask, mask); };
    auto copy = [&](int p0, int b) {
        fah_copy<D, KEYS>(at, tile.keys[b], tile.values[b], tile.live[b], k.nb[1], v.nb[1], p0);
    };

    float row_max[1][2] = {{-INFINITY, -INFINITY}}, sums[1][4] = {{0.0f, 0.0f, 0.0f, 0.0f}};
    float out[1][D / 8][4];
#pragma unroll
    for (int s = 0; s < D / 8; s++) {
        out[0][s][0] = out[0][s][1] = out[0][s][2] = out[0][s][3] = 0.0f;
    }
    if (tid < KEYS) {
        tile.live[0][tid] = tile.live[1][tid] = 0;
    }
    __syncthreads();
    bool seen = __syncthreads_or(mark(0, 0));
    if (seen) {
        copy(0, 0);
    }
    fah_query_fragments<Q, D>(qv, qa[0]);

    for (int p0 = 0, b = 0; p0 < at.kv; p0 += KEYS, b ^= 1) {
        // The next tile's keys marked, this tile's copies awaited; then the next tile's copies
        // queued, to land while this one is multiplied.
        const int next = p0 + KEYS;
        const bool next_mark = next < at.kv && mark(next, b ^ 1);
        fah_wait_all();
        const bool next_seen = __syncthreads_or(next_mark);
        if (next_seen) {
            copy(next, b ^ 1);
        }
        if (tid < KEYS) {
            tile.live[b][tid] = 0; // this tile's copies were queued before the last barrier
        }

        if (seen && at.warp_live) {
            if (at.one_row && scale2 > 0.0f && fah_zero_biases<KEYS>(tile.bias[b])) {
                fah_tile<M, D, KEYS, 1>(qa, tile.keys[b], tile.values[b], out, row_max, sums, true, true,
                                     &tile.bias[b][0], at.mrow, mask.nb[0], p0, at.kv, scale2);
            } else {
                fah_tile<M, D, KEYS, 1>(qa, tile.keys[b], tile.values[b], out, row_max, sums, at.one_row, false,
                                     &tile.bias[b][0], at.mrow, mask.nb[0], p0, at.kv, scale2);
            }
        }
        seen = next_seen;
        __syncthreads(); // this buffer is read no more before it is marked and copied again
    }

    float row_scale[2];
    fah_row_scales(sums[0], row_scale);
    if (out_f16) {
        // The keys' buffers, read no more (the last tile ended with a barrier), stage each
        // warp's 16 rows.
        static_assert(2 * KEYS >= 16 * WARPS, "the key buffers hold every warp's rows");
        fah_store_rows_f16<D>(out[0], row_scale, at.first + at.warp * 16, at.n, dst, at.h, at.i3,
                              &tile.keys[0][0] + at.warp * 16);
    } else {
        fa_store_rows<D>(out[0], row_scale, at.rows, at.n, dst, at.h, at.i3);
    }
}

// Every key and value of a sequence of at most KV positions, with what the block knows of them.
template <int D, int KV> struct FahWhole {
    __align__(16) unsigned short keys[KV][D + 8];
    __align__(16) unsigned short values[KV][D + 8];
    float bias[KV];
    int live[KV];
};

// flash_attn_half for at most KV keys (an encoder's short sequences): the block marks and copies
// every key and value at once and then multiplies the tiles of 32 keys with no barrier between
// them, where the streaming kernel waits at two barriers a tile and for a mask read before each.
// The tiles, and so the sums, are those of flash_attn_half with tiles of 32 keys. A warp takes
// R tiles of 16 query rows, which share each key and value it loads from shared memory and the
// block's set-up (R > 1 with one mask row only).
// ONE_ROW is `at.one_row`, known when compiled: each case takes fewer registers than one body
// taking both.
template <typename M, typename Q, int D, int KV, int WARPS, int R, bool ONE_ROW>
__device__ __forceinline__ void fah_whole(const FahBlock<WARPS, R> &at, const TensorArg &q, const TensorArg &k,
                                          const TensorArg &v, const TensorArg &mask, const TensorArg &dst,
                                          float scale, int has_mask, int out_f16, FahWhole<D, KV> &tile) {
    constexpr int KEYS = 32;
    static_assert(KV % KEYS == 0 && KV >= 16 * R * WARPS, "whole tiles; the key rows stage every warp's results");
    static_assert(R == 1 || ONE_ROW, "the rows' own mask rows are those of a warp's first 16");
    const float scale2 = scale * FA_LOG2E;
    const int lane = threadIdx.x % 32;
    const int first = at.first + at.warp * 16 * R; // the warp's first query row
    float qv[R][D / 16][4][2];
    unsigned int qa[R][D / 16][4];
#pragma unroll
    for (int r = 0; r < R; r++) {
        fah_load_queries<Q, D>(q, first + 16 * r, at.n, at.h, at.i3, qv[r], qa[r]);
    }

    if constexpr (!ONE_ROW) {
        for (int j = threadIdx.x; j < KV; j += 32 * WARPS) {
            tile.live[j] = 0;
        }
        __syncthreads();
    }
    const bool seen = __syncthreads_or(fah_mark<M, KV>(at, 0, tile.bias, tile.live, has_mask, mask));
    if (seen) {
        fah_copy<D, KV>(at, tile.keys, tile.values, tile.live, k.nb[1], v.nb[1], 0);
    }
    float row_max[R][2], sums[R][4], out[R][D / 8][4];
#pragma unroll
    for (int r = 0; r < R; r++) {
        fah_query_fragments<Q, D>(qv[r], qa[r]);
        row_max[r][0] = row_max[r][1] = -INFINITY;
        sums[r][0] = sums[r][1] = sums[r][2] = sums[r][3] = 0.0f;
#pragma unroll
        for (int s = 0; s < D / 8; s++) {
            out[r][s][0] = out[r][s][1] = out[r][s][2] = out[r][s][3] = 0.0f;
        }
    }
    fah_wait_all();
    __syncthreads();

    if (seen && at.warp_live) {
        for (int p0 = 0; p0 < at.kv; p0 += KEYS) {
            // A tile no row of the block sees is skipped, as the streaming kernel skips it.
            if (__any_sync(0xffffffffu, tile.live[p0 + lane])) {
                if (ONE_ROW && scale2 > 0.0f && fah_zero_biases<KEYS>(&tile.bias[p0])) {
                    fah_tile<M, D, KEYS, R>(qa, tile.keys + p0, tile.values + p0, out, row_max, sums, true, true,
                                            &tile.bias[p0], at.mrow, mask.nb[0], p0, at.kv, scale2);
                } else {
                    fah_tile<M, D, KEYS, R>(qa, tile.keys + p0, tile.values + p0, out, row_max, sums, ONE_ROW, false,
                                            &tile.bias[p0], at.mrow, mask.nb[0], p0, at.kv, scale2);
                }
            }
        }
    }

    if (out_f16) {
        __syncthreads(); // every warp is done with the keys, which stage the rows
    }
#pragma unroll
    for (int r = 0; r < R; r++) {
        float row_scale[2];
        fah_row_scales(sums[r], row_scale);
        if (out_f16) {
            fah_store_rows_f16<D>(out[r], row_scale, first + 16 * r, at.n, dst, at.h, at.i3,
                                  tile.keys + at.warp * 16 * R + 16 * r);
        } else {
            const int rows[2] = {at.rows[0] + 16 * r, at.rows[1] + 16 * r};
            fa_store_rows<D>(out[r], row_scale, rows, at.n, dst, at.h, at.i3);
        }
    }
}

template <typename M, typename Q, int D, int KV, int WARPS, int R>
__device__ void flash_attn_half_short(const TensorArg &q, const TensorArg &k, const TensorArg &v,
                                      const TensorArg &mask, const TensorArg &dst, float scale, int has_mask,
                                      int out_f16, FahWhole<D, KV> &tile) {
    // The launcher takes at most KV keys.
    const FahBlock<WARPS, R> at(q, k, v, mask, has_mask);
    if (at.one_row) {
        fah_whole<M, Q, D, KV, WARPS, R, true>(at, q, k, v, mask, dst, scale, has_mask, out_f16, tile);
    } else {
        fah_whole<M, Q, D, KV, WARPS, R, false>(at, q, k, v, mask, dst, scale, has_mask, out_f16, tile);
    }
}

// flash_attn_half_short for a mask of one row that every query row shares, or none (an
// encoder's padding mask): the launcher takes it only then.
template <typename M, typename Q, int D, int KV, int WARPS, int R>
__device__ void flash_attn_half_short_one_row(const TensorArg &q, const TensorArg &k, const TensorArg &v,
                                              const TensorArg &mask, const TensorArg &dst, float scale, int has_mask,
                                              int out_f16, FahWhole<D, KV> &tile) {
    const FahBlock<WARPS, R> at(q, k, v, mask, has_mask);
    fah_whole<M, Q, D, KV, WARPS, R, true>(at, q, k, v, mask, dst, scale, has_mask, out_f16, tile);
}

// flash_attn_half_d<head>[_kv<keys>[_rows]](q, k, v, mask, dst, scale, has_mask, mask_f16, out_f16):
// grid of (query rows / (16 R WARPS), heads, batches) blocks of 32 WARPS threads, R tiles of 16
// query rows a warp; with out_f16, dst holds f16 values (a CPY of the result to f16 fused in),
// rows of packed values; queries of f32 values, or f16 where q's values are 2 bytes apart. BODY is
// flash_attn_half (tiles of KEYS keys in TILE = FahTile) or flash_attn_half_short[_one_row] (at
// most KEYS keys in TILE = FahWhole).
#define FLASH_ATTN_HALF_KERNEL(name, D, KEYS, WARPS, R, BLOCKS, TILE, BODY)                                    \
    extern "C" __global__ void __launch_bounds__(32 * WARPS, BLOCKS)                                            \
        name(const __grid_constant__ TensorArg q, const __grid_constant__ TensorArg k,                          \
             const __grid_constant__ TensorArg v, const __grid_constant__ TensorArg mask,                       \
             const __grid_constant__ TensorArg dst, float scale, int has_mask, int mask_f16, int out_f16) {     \
        __shared__ TILE<D, KEYS> tile;                                                                           \
        await_prior_kernel();                                                                                    \
        if (mask_f16 && q.nb[0] == 2) {                                                                          \
            BODY<F16, F16, D, KEYS, WARPS, R>(q, k, v, mask, dst, scale, has_mask, out_f16, tile);               \
        } else if (mask_f16) {                                                                                   \
            BODY<F16, F32, D, KEYS, WARPS, R>(q, k, v, mask, dst, scale, has_mask, out_f16, tile);               \
        } else if (q.nb[0] == 2) {                                                                               \
            BODY<F32, F16, D, KEYS, WARPS, R>(q, k, v, mask, dst, scale, has_mask, out_f16, tile);               \
        } else {                                                                                                 \
            BODY<F32, F32, D, KEYS, WARPS, R>(q, k, v, mask, dst, scale, has_mask, out_f16, tile);               \
        }                                                                                                        \
    }

// Two tiles of keys and values within 48 KiB of shared memory. Heads of 32 take tiles of 32
// keys at 6 blocks an SM (80 registers, a few bytes spill): on an H200, MiniLM's attention
// (1024 sequences of 128 tokens, 12 heads) took 412 us against 424 with 64 keys at 4 blocks
// and 467 with 32 keys at 4.
FLASH_ATTN_HALF_KERNEL(flash_attn_half_d32, 32, 32, 4, 1, 6, FahTile, flash_attn_half)
FLASH_ATTN_HALF_KERNEL(flash_attn_half_d64, 64, 64, 4, 1, 2, FahTile, flash_attn_half)
FLASH_ATTN_HALF_KERNEL(flash_attn_half_d128, 128, 32, 4, 1, 2, FahTile, flash_attn_half)
// Sequences of up to 128 keys with heads of 32 (21.5 KiB of shared memory a block). With one mask
// row (or none), warps of 32 query rows (two tiles of 16), blocks of 128 at 4 an SM (128
// registers): on an H200, MiniLM's attention (1024 sequences of 128 tokens, 12 heads) took
// 198-201 us against 207-209 with warps of 16 rows at 8 blocks an SM (64 registers), 210-220 at
// 5 blocks (96 registers, a few bytes spill) and 210-212 with blocks of 2 such warps at 8 an SM;
// 245-250 with warps of 64 rows; 240-282 us with one pass a warp of 16 rows over all 128 keys
// (no running maximum; 119 registers, at 2 blocks of 8 warps, 4 or 5 of 4 an SM); in a later
// sitting, where this kernel took 221-227 us, 236-242 with every row's maximum taken in a first
// pass (no rescaling) and 223 with the copies in two halves (the first multiplied while the
// second lands). A mask row per query row (`_rows`) takes warps of 16 rows
// (it would spill at more), as do one mask row's 64 query rows or fewer and grids of fewer
// than 16 blocks of 128 rows an SM (the launcher's choice: FLASH_ATTN_HALF_WIDE_MIN_ROWS).
FLASH_ATTN_HALF_KERNEL(flash_attn_half_d32_kv128, 32, 128, 4, 2, 4, FahWhole, flash_attn_half_short_one_row)
FLASH_ATTN_HALF_KERNEL(flash_attn_half_d32_kv128_rows, 32, 128, 4, 1, 6, FahWhole, flash_attn_half_short)
