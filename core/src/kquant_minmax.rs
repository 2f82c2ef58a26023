//! The K-quant quantizers tessera had before ggml's scale searches: a plain range fit per
//! sub-block, quantized scales rounded up so that no value is clipped. Kept for tests only,
//! as the baseline the searches must beat.

use half::f16;

use crate::kquant::{pack_q6_k, pack_scale_min, Q4_K_BLOCK_BYTES, Q5_K_BLOCK_BYTES, Q6_K_BLOCK_BYTES, QK_K};

fn round_clamped(v: f32, max: u8) -> u8 {
    // The float-to-int cast saturates, so NaN and huge values stay in range.
    (libm::roundf(v) as i32).clamp(0, i32::from(max)) as u8
}

/// The smallest f16 `d` with `d * steps >= max` (`max >= 0`): a scale quantized against it
/// never needs more than `steps`.
fn super_scale(max: f32, steps: f32) -> f16 {
    let d = f16::from_f32(max / steps);
    if d.to_f32() * steps < max {
        f16::from_bits(d.to_bits() + 1)
    } else {
        d
    }
}

/// `v / d` rounded up, at most `max` (0 when `d` is 0): quantized scales round up so that the
/// values they cover never fall outside the quants' range.
fn ceil_steps(v: f32, d: f16, max: u8) -> u8 {
    let d = d.to_f32();
    if d > 0.0 {
        (libm::ceilf(v / d) as i32).clamp(0, i32::from(max)) as u8
    } else {
        0
    }
}

/// Super-block scales of eight sub-blocks of 32 fitted as `scale * q - min` with `q` in
/// `0..=levels`: the f16 `d` and `dmin`, the 6-bit scales and mins, and each value's `q`.
/// Mins are quantized first (rounded up, so the lowest value is covered), then each scale is
/// fitted to the range above the quantized min.
fn fit_scale_min(x: &[f32], levels: u8, q: &mut [u8; QK_K]) -> (f16, f16, [u8; 8], [u8; 8]) {
    let (mut lo, mut hi) = ([0.0f32; 8], [0.0f32; 8]);
    for (j, sub) in x.chunks_exact(32).enumerate() {
        lo[j] = sub.iter().fold(0.0f32, |m, v| m.min(*v));
        hi[j] = sub.iter().fold(0.0f32, |m, v| m.max(*v));
    }
    let dmin = super_scale(lo.iter().fold(0.0f32, |m, v| m.max(-v)), 63.0);
    let lm = lo.map(|l| ceil_steps(-l, dmin, 63));
    let mut scale = [0.0f32; 8];
    for j in 0..8 {
        scale[j] = (hi[j] + dmin.to_f32() * f32::from(lm[j])) / f32::from(levels);
    }
    let d = super_scale(scale.iter().fold(0.0f32, |m, v| m.max(*v)), 63.0);
    let ls = scale.map(|s| ceil_steps(s, d, 63));
    for (j, (sub, q)) in x.chunks_exact(32).zip(q.chunks_exact_mut(32)).enumerate() {
        let (step, offset) = (d.to_f32() * f32::from(ls[j]), dmin.to_f32() * f32::from(lm[j]));
        let inv = if step > 0.0 { 1.0 / step } else { 0.0 };
        for (q, v) in q.iter_mut().zip(sub) {
            *q = round_clamped((v + offset) * inv, levels);
        }
    }
    (d, dmin, ls, lm)
}

/// Quantizes `src` (a whole number of super-blocks) into Q4_K blocks in `dst`.
pub(crate) fn quantize_row_q4_k(src: &[f32], dst: &mut [u8]) {
    for (x, block) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(Q4_K_BLOCK_BYTES)) {
        let mut q = [0u8; QK_K];
        let (d, dmin, ls, lm) = fit_scale_min(x, 15, &mut q);
        block[..2].copy_from_slice(&d.to_le_bytes());
        block[2..4].copy_from_slice(&dmin.to_le_bytes());
        pack_scale_min(&ls, &lm, &mut block[4..16]);
        for (c, out) in block[16..].chunks_exact_mut(32).enumerate() {
            for (l, b) in out.iter_mut().enumerate() {
                *b = q[64 * c + l] | (q[64 * c + 32 + l] << 4);
            }
        }
    }
}

/// Quantizes `src` (a whole number of super-blocks) into Q5_K blocks in `dst`.
pub(crate) fn quantize_row_q5_k(src: &[f32], dst: &mut [u8]) {
    for (x, block) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(Q5_K_BLOCK_BYTES)) {
        let mut q = [0u8; QK_K];
        let (d, dmin, ls, lm) = fit_scale_min(x, 31, &mut q);
        block[..2].copy_from_slice(&d.to_le_bytes());
        block[2..4].copy_from_slice(&dmin.to_le_bytes());
        pack_scale_min(&ls, &lm, &mut block[4..16]);
        let (qh, qs) = block[16..].split_at_mut(32);
        qh.fill(0);
        for (c, out) in qs.chunks_exact_mut(32).enumerate() {
            for (l, b) in out.iter_mut().enumerate() {
                let (lo, hi) = (q[64 * c + l], q[64 * c + 32 + l]);
                *b = (lo & 0xf) | ((hi & 0xf) << 4);
                qh[l] |= ((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1));
            }
        }
    }
}

/// Quantizes `src` (a whole number of super-blocks) into Q6_K blocks in `dst`: each
/// sub-block of 16 gets the positive scale that maps its largest magnitude to 31 (rounded up
/// against the shared f16 `d`, so no value falls outside `-32..=31`).
pub(crate) fn quantize_row_q6_k(src: &[f32], dst: &mut [u8]) {
    for (x, block) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(Q6_K_BLOCK_BYTES)) {
        let mut scale = [0.0f32; 16];
        for (s, sub) in scale.iter_mut().zip(x.chunks_exact(16)) {
            *s = sub.iter().fold(0.0f32, |m, v| m.max(libm::fabsf(*v))) / 31.0;
        }
        let d = super_scale(scale.iter().fold(0.0f32, |m, v| m.max(*v)), 127.0);
        let sc = scale.map(|s| ceil_steps(s, d, 127) as i8);
        let mut q = [0u8; QK_K];
        for (j, (sub, q)) in x.chunks_exact(16).zip(q.chunks_exact_mut(16)).enumerate() {
            let step = d.to_f32() * f32::from(sc[j]);
            let inv = if step > 0.0 { 1.0 / step } else { 0.0 };
            for (q, v) in q.iter_mut().zip(sub) {
                *q = ((libm::roundf(v * inv) as i32).clamp(-32, 31) + 32) as u8;
            }
        }
        pack_q6_k(&q, sc, d, block);
    }
}
