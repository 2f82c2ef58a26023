//! NEON (dotprod) matrix-vector products of K-quant weights with [`K8Column`]s: a row's
//! super-block is unpacked once for all the columns into 16 registers of 16 values (all
//! below 64, so signed bytes for `sdot`); per column each scale group's `sdot` sums are
//! multiplied by its integer scale into two integer accumulators, and the mins meet the
//! activations' sums in widening products, so a super-block costs one float step per column.

use core::arch::aarch64::*;

use tessera_core::kquant::{scale_min, QK_K};
use tessera_core::DType;

use super::qgemm::sdot;
use crate::fast::simd::kind::{Q4, Q6};
use crate::fast::simd::{kquant_columns, K8Column, Rows, QK};

/// A super-block unpacked for the products.
struct Unpacked {
    /// Values `16g..16g + 16`.
    w: [int8x16_t; 16],
    /// The scale of each 16 values.
    scales: [i32; 16],
    /// The min of each 16 values (Q6_K: 32 times the scale).
    mins: [int16x8_t; 2],
    d: f32,
    /// The scale of the mins (Q6_K: `d`).
    dmin: f32,
}

/// The f16 at `at` as f32.
///
/// # Safety
/// `at` must address 2 readable bytes.
unsafe fn half_at(at: *const u8) -> f32 {
    // SAFETY: as the caller guarantees.
    let bits = unsafe { core::ptr::read_unaligned(at.cast::<u16>()) };
    half::f16::from_bits(bits).to_f32()
}

/// Unpacks super-block `block` of kind `T`.
///
/// # Safety
/// `block` must address one super-block of kind `T`; NEON.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn unpack<const T: u8>(block: *const u8) -> Unpacked {
    let low = vdupq_n_u8(0x0f);
    let mut w = [vdupq_n_u8(0); 16];
    let mut scales = [0i32; 16];
    let mut mins = [0i16; 16];
    let (d, dmin);
    if T == Q6 {
        // SAFETY: the 16 i8 scales at 192 and `d` at 208.
        d = unsafe { half_at(block.add(208)) };
        dmin = d;
        for (i, (s, m)) in scales.iter_mut().zip(&mut mins).enumerate() {
            // SAFETY: scale `i`.
            *s = i32::from(unsafe { *block.add(192 + i) } as i8);
            *m = 32 * *s as i16;
        }
        let two_bits = vdupq_n_u8(0x30);
        for h in 0..2 {
            // SAFETY: `ql` bytes `64h..64h + 64` and `qh` bytes `32h..32h + 32`.
            let (a, b, q) = unsafe {
                let ql = block.add(64 * h);
                let qh = block.add(128 + 32 * h);
                (
                    [vld1q_u8(ql), vld1q_u8(ql.add(16))],
                    [vld1q_u8(ql.add(32)), vld1q_u8(ql.add(48))],
                    [vld1q_u8(qh), vld1q_u8(qh.add(16))],
                )
            };
            // Values `128h + 32t + l`: a nibble of `a` (t even) or `b` (t odd), low for t < 2,
            // with bits `2t, 2t + 1` of `qh` as bits 4-5.
            for i in 0..2 {
                let bits = |v: uint8x16_t| vandq_u8(v, two_bits);
                w[8 * h + i] = vorrq_u8(vandq_u8(a[i], low), bits(vshlq_n_u8::<4>(q[i])));
                w[8 * h + 2 + i] = vorrq_u8(vandq_u8(b[i], low), bits(vshlq_n_u8::<2>(q[i])));
                w[8 * h + 4 + i] = vorrq_u8(vshrq_n_u8::<4>(a[i]), bits(q[i]));
                w[8 * h + 6 + i] = vorrq_u8(vshrq_n_u8::<4>(b[i]), bits(vshrq_n_u8::<2>(q[i])));
            }
        }
    } else {
        // SAFETY: `d` at 0, `dmin` at 2, the 12 bytes of 6-bit scales and mins at 4.
        let packed = unsafe {
            (d, dmin) = (half_at(block), half_at(block.add(2)));
            &*block.add(4).cast::<[u8; 12]>()
        };
        for j in 0..8 {
            let (sc, m) = scale_min(j, packed);
            scales[2 * j..2 * j + 2].fill(i32::from(sc));
            mins[2 * j..2 * j + 2].fill(i16::from(m));
        }
        let (qs, qh) = if T == Q4 { (16, None) } else { (48, Some(16)) };
        // SAFETY: the 32 bytes of fifth bits.
        let h = qh.map(|o| unsafe { [vld1q_u8(block.add(o)), vld1q_u8(block.add(o + 16))] });
        let sixteen = vdupq_n_u8(16);
        for c in 0..4 {
            for i in 0..2 {
                // SAFETY: nibble bytes `32c + 16i..32c + 16i + 16`: low nibbles are values
                // `64c + 16i..`, high nibbles `64c + 32 + 16i..`.
                let v = unsafe { vld1q_u8(block.add(qs + 32 * c + 16 * i)) };
                let (mut lo, mut hi) = (vandq_u8(v, low), vshrq_n_u8::<4>(v));
                if let Some(h) = h {
                    // Bits `2c` and `2c + 1` of `qh` are the fifth bits of the two halves.
                    lo = vorrq_u8(lo, vandq_u8(vtstq_u8(h[i], vdupq_n_u8(1 << (2 * c))), sixteen));
                    hi = vorrq_u8(hi, vandq_u8(vtstq_u8(h[i], vdupq_n_u8(2 << (2 * c))), sixteen));
                }
                (w[4 * c + i], w[4 * c + 2 + i]) = (lo, hi);
            }
        }
    }
    // SAFETY: 2 x 8 i16.
    let mins = unsafe { [vld1q_s16(mins.as_ptr()), vld1q_s16(mins.as_ptr().add(8))] };
    Unpacked { w: w.map(|v| vreinterpretq_s8_u8(v)), scales, mins, d, dmin }
}

/// Every row of kind `T` by `N` columns.
///
/// # Safety
/// As [`crate::fast::simd::QGemv`] on rows of kind `T` and [`K8Column`]s with `n = N`; NEON
/// and dotprod.
#[target_feature(enable = "neon,dotprod")]
unsafe fn cols<const T: u8, const N: usize>(
    nblocks: usize,
    rows: &Rows,
    x: *const u8,
    ldx: usize,
    y: *mut f32,
    ldy: usize,
) {
    let superblocks = nblocks * QK / QK_K;
    let columns: [K8Column; N] = core::array::from_fn(|j| K8Column::at(x.wrapping_add(j * ldx), superblocks));
    let bytes = rows.dtype.block_bytes();
    for r in 0..rows.count {
        let row = rows.ptr.wrapping_add(r * rows.stride);
        let mut acc = [0.0f32; N];
        for sb in 0..superblocks {
            // SAFETY: super-block `sb` of row `r`.
            let u = unsafe { unpack::<T>(row.add(sb * bytes)) };
            for (j, col) in columns.iter().enumerate() {
                // SAFETY: super-block `sb` of column `j`: sums and scale.
                let (sums, dy) = unsafe {
                    let s = col.s.add(32 * sb).cast::<i16>();
                    ([vld1q_s16(s), vld1q_s16(s.add(8))], core::ptr::read_unaligned(col.d.add(sb)))
                };
                let q = col.q.wrapping_add(QK_K * sb).cast::<i8>();
                let mut sum = [vdupq_n_s32(0); 2];
                for g in 0..16 {
                    // SAFETY: values `16g..16g + 16` of the column's super-block.
                    let dot = sdot(vdupq_n_s32(0), u.w[g], unsafe { vld1q_s8(q.add(16 * g)) });
                    sum[g % 2] = vmlaq_n_s32(sum[g % 2], dot, u.scales[g]);
                }
                let min_sum = vmlal_s16(
                    vmull_s16(vget_low_s16(u.mins[0]), vget_low_s16(sums[0])),
                    vget_high_s16(u.mins[0]),
                    vget_high_s16(sums[0]),
                );
                let min_sum = vmlal_s16(
                    vmlal_s16(min_sum, vget_low_s16(u.mins[1]), vget_low_s16(sums[1])),
                    vget_high_s16(u.mins[1]),
                    vget_high_s16(sums[1]),
                );
                let (sum, min_sum) = (vaddvq_s32(vaddq_s32(sum[0], sum[1])), vaddvq_s32(min_sum));
                acc[j] += dy * (u.d * sum as f32 - u.dmin * min_sum as f32);
            }
        }
        for (j, a) in acc.iter().enumerate() {
            // SAFETY: output `r` of column `j`.
            unsafe { *y.add(j * ldy + r) = *a };
        }
    }
}

/// [`crate::fast::simd::QGemv`] on K-quant rows and [`K8Column`]s.
///
/// # Safety
/// As [`crate::fast::simd::QGemv`] on K-quant rows and [`K8Column`]s; NEON and dotprod.
#[target_feature(enable = "neon,dotprod")]
pub unsafe fn gemv(nblocks: usize, rows: &Rows, x: *const u8, ldx: usize, n: usize, y: *mut f32, ldy: usize) {
    debug_assert!((nblocks * QK).is_multiple_of(QK_K));
    // SAFETY: forwarded; `n <= 8` columns exist.
    unsafe { kquant_columns!(cols, n, nblocks, rows, x, ldx, y, ldy) }
}

/// [`crate::fast::simd::K8Quantize`]: per super-block `d = max|x| / 127` and
/// `q = round_half_even(x / d)` (times `1 / d`), and the sums of each 16 values.
///
/// # Safety
/// As [`crate::fast::simd::K8Quantize`]; NEON.
#[target_feature(enable = "neon")]
pub unsafe fn quantize(x: *const f32, superblocks: usize, _weights: DType, out: *mut u8) {
    let col = K8Column::at(out, superblocks);
    for sb in 0..superblocks {
        // SAFETY: values `256 sb..256 sb + 256` of the input.
        let v: [float32x4_t; 64] = core::array::from_fn(|i| unsafe { vld1q_f32(x.add(QK_K * sb + 4 * i)) });
        let amax = v.iter().fold(vdupq_n_f32(0.0), |m, &vi| vmaxq_f32(m, vabsq_f32(vi)));
        let d = vmaxvq_f32(amax) / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut sums = [0i16; 16];
        for (g, s) in sums.iter_mut().enumerate() {
            let q: [int32x4_t; 4] = core::array::from_fn(|i| vcvtnq_s32_f32(vmulq_n_f32(v[4 * g + i], id)));
            // At most 16 * 127 in magnitude.
            *s = vaddvq_s32(vaddq_s32(vaddq_s32(q[0], q[1]), vaddq_s32(q[2], q[3]))) as i16;
            let words =
                [vcombine_s16(vmovn_s32(q[0]), vmovn_s32(q[1])), vcombine_s16(vmovn_s32(q[2]), vmovn_s32(q[3]))];
            let bytes = vcombine_s8(vmovn_s16(words[0]), vmovn_s16(words[1]));
            // SAFETY: values `16g..16g + 16` of super-block `sb`.
            unsafe { vst1q_s8(col.q.add(QK_K * sb + 16 * g).cast_mut().cast(), bytes) };
        }
        // SAFETY: the super-block's sums and scale.
        unsafe { col.put(sb, sums, d) };
    }
}
