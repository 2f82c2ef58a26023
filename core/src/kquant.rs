//! K-quants: ggml's Q4_K, Q5_K and Q6_K, whose blocks ("super-blocks") hold 256 values in
//! sub-blocks that each have their own quantized scale (the types of the Q4_K_M, Q5_K_M and
//! Q6_K files most models are published in).
//!
//! Dequantization follows ggml's formulas operation for operation, so values are bit-identical
//! to ggml's. Quantization is a plain range fit per sub-block, its quantized scales rounded up
//! so that no value is clipped (ggml searches for the scales that minimise the error; its
//! choices of scale, and so its bytes, can differ).

use half::f16;

/// Values per K-quant super-block.
pub const QK_K: usize = 256;
/// Q4_K: f16 `d`, f16 `dmin`, 12 bytes of 6-bit scales and mins for 8 sub-blocks of 32, then
/// 128 bytes of nibbles. Value = `d * scale * q - dmin * min`.
pub const Q4_K_BLOCK_BYTES: usize = 2 + 2 + 12 + QK_K / 2;
/// Q5_K: as Q4_K with a fifth bit per value in 32 bytes (`qh`) before the nibbles.
pub const Q5_K_BLOCK_BYTES: usize = 2 + 2 + 12 + QK_K / 8 + QK_K / 2;
/// Q6_K: 128 bytes of low nibbles (`ql`), 64 bytes of high bit pairs (`qh`), 16 `i8` scales of
/// sub-blocks of 16, then f16 `d`. Value = `d * scale * (q - 32)`.
pub const Q6_K_BLOCK_BYTES: usize = QK_K / 2 + QK_K / 4 + QK_K / 16 + 2;

fn half_at(block: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([block[at], block[at + 1]]).to_f32()
}

/// Sub-block `j`'s 6-bit scale and min from the 12 packed bytes (ggml's `get_scale_min_k4`):
/// sub-blocks 0-3 in the low 6 bits of bytes 0-7, sub-blocks 4-7 in the nibbles of bytes 8-11
/// with their top two bits in the top bits of bytes 0-7.
pub fn scale_min(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    }
}

/// Packs eight 6-bit scales and mins as [`scale_min`] reads them.
fn pack_scale_min(scales: &[u8; 8], mins: &[u8; 8], q: &mut [u8]) {
    q[..12].fill(0);
    for j in 0..8 {
        let (ls, lm) = (scales[j], mins[j]);
        if j < 4 {
            q[j] = ls;
            q[j + 4] = lm;
        } else {
            q[j + 4] = (ls & 0xf) | ((lm & 0xf) << 4);
            q[j - 4] |= (ls >> 4) << 6;
            q[j] |= (lm >> 4) << 6;
        }
    }
}

/// Dequantizes Q4_K blocks.
pub fn dequantize_row_q4_k(src: &[u8], dst: &mut [f32]) {
    for (block, y) in src.chunks_exact(Q4_K_BLOCK_BYTES).zip(dst.chunks_exact_mut(QK_K)) {
        let (d, min) = (half_at(block, 0), half_at(block, 2));
        let scales = &block[4..16];
        let qs = &block[16..];
        for (c, (q, y)) in qs.chunks_exact(32).zip(y.chunks_exact_mut(64)).enumerate() {
            let (sc, m) = scale_min(2 * c, scales);
            let (d1, m1) = (d * f32::from(sc), min * f32::from(m));
            let (sc, m) = scale_min(2 * c + 1, scales);
            let (d2, m2) = (d * f32::from(sc), min * f32::from(m));
            for l in 0..32 {
                y[l] = d1 * f32::from(q[l] & 0xf) - m1;
                y[l + 32] = d2 * f32::from(q[l] >> 4) - m2;
            }
        }
    }
}

/// Dequantizes Q5_K blocks.
pub fn dequantize_row_q5_k(src: &[u8], dst: &mut [f32]) {
    for (block, y) in src.chunks_exact(Q5_K_BLOCK_BYTES).zip(dst.chunks_exact_mut(QK_K)) {
        let (d, min) = (half_at(block, 0), half_at(block, 2));
        let scales = &block[4..16];
        let qh = &block[16..48];
        let qs = &block[48..];
        for (c, (q, y)) in qs.chunks_exact(32).zip(y.chunks_exact_mut(64)).enumerate() {
            let (u1, u2) = (1u8 << (2 * c), 2u8 << (2 * c));
            let (sc, m) = scale_min(2 * c, scales);
            let (d1, m1) = (d * f32::from(sc), min * f32::from(m));
            let (sc, m) = scale_min(2 * c + 1, scales);
            let (d2, m2) = (d * f32::from(sc), min * f32::from(m));
            for l in 0..32 {
                let high = |bit: u8| if qh[l] & bit != 0 { 16 } else { 0 };
                y[l] = d1 * f32::from((q[l] & 0xf) + high(u1)) - m1;
                y[l + 32] = d2 * f32::from((q[l] >> 4) + high(u2)) - m2;
            }
        }
    }
}

/// Dequantizes Q6_K blocks.
pub fn dequantize_row_q6_k(src: &[u8], dst: &mut [f32]) {
    for (block, y) in src.chunks_exact(Q6_K_BLOCK_BYTES).zip(dst.chunks_exact_mut(QK_K)) {
        let d = half_at(block, 208);
        // Two halves of 128 values: 64 bytes of `ql`, 32 of `qh`, 8 scales each.
        for h in 0..2 {
            let ql = &block[64 * h..64 * h + 64];
            let qh = &block[128 + 32 * h..128 + 32 * h + 32];
            let sc = &block[192 + 8 * h..192 + 8 * h + 8];
            let y = &mut y[128 * h..128 * h + 128];
            for l in 0..32 {
                let is = l / 16;
                let q = |low: u8, shift: u32| i32::from(low | (((qh[l] >> shift) & 3) << 4)) - 32;
                let q1 = q(ql[l] & 0xf, 0);
                let q2 = q(ql[l + 32] & 0xf, 2);
                let q3 = q(ql[l] >> 4, 4);
                let q4 = q(ql[l + 32] >> 4, 6);
                let scale = |i: usize| d * f32::from(sc[i] as i8);
                y[l] = scale(is) * q1 as f32;
                y[l + 32] = scale(is + 2) * q2 as f32;
                y[l + 64] = scale(is + 4) * q3 as f32;
                y[l + 96] = scale(is + 6) * q4 as f32;
            }
        }
    }
}

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
pub fn quantize_row_q4_k(src: &[f32], dst: &mut [u8]) {
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
pub fn quantize_row_q5_k(src: &[f32], dst: &mut [u8]) {
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
pub fn quantize_row_q6_k(src: &[f32], dst: &mut [u8]) {
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
        for h in 0..2 {
            let q = &q[128 * h..];
            for l in 0..32 {
                block[64 * h + l] = (q[l] & 0xf) | ((q[l + 64] & 0xf) << 4);
                block[64 * h + l + 32] = (q[l + 32] & 0xf) | ((q[l + 96] & 0xf) << 4);
                block[128 + 32 * h + l] =
                    (q[l] >> 4) | ((q[l + 32] >> 4) << 2) | ((q[l + 64] >> 4) << 4) | ((q[l + 96] >> 4) << 6);
            }
        }
        for (b, s) in block[192..208].iter_mut().zip(sc) {
            *b = s as u8;
        }
        block[208..].copy_from_slice(&d.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wave(seed: f32) -> [f32; 2 * QK_K] {
        let mut x = [0.0f32; 2 * QK_K];
        for (i, v) in x.iter_mut().enumerate() {
            let t = i as f32;
            *v = libm::sinf(t * 0.37 + seed) * 2.0 + libm::cosf(t * 0.011) * (1.0 + (i / 32) as f32 * 0.3);
        }
        x
    }

    fn round_trip(x: &[f32], quantize: fn(&[f32], &mut [u8]), dequantize: fn(&[u8], &mut [f32]), bytes: usize) -> f32 {
        let mut q = [0u8; 2 * Q6_K_BLOCK_BYTES];
        quantize(x, &mut q[..2 * bytes]);
        let mut y = [0.0f32; 2 * QK_K];
        dequantize(&q[..2 * bytes], &mut y);
        let err: f32 = x.iter().zip(&y).map(|(a, b)| (a - b) * (a - b)).sum();
        let norm: f32 = x.iter().map(|a| a * a).sum();
        err / norm
    }

    #[test]
    fn k_quant_round_trips_lose_less_with_more_bits() {
        let x = wave(0.5);
        let q4 = round_trip(&x, quantize_row_q4_k, dequantize_row_q4_k, Q4_K_BLOCK_BYTES);
        let q5 = round_trip(&x, quantize_row_q5_k, dequantize_row_q5_k, Q5_K_BLOCK_BYTES);
        let q6 = round_trip(&x, quantize_row_q6_k, dequantize_row_q6_k, Q6_K_BLOCK_BYTES);
        assert!(q4 < 3e-3 && q5 < q4 && q6 < q5, "relative squared errors: q4_K {q4}, q5_K {q5}, q6_K {q6}");
    }

    /// Random blocks and their values as llama.cpp's `gguf` package dequantizes them
    /// (scripts/make_kquant_fixture.py): equal bit for bit.
    #[test]
    fn dequantization_is_bit_identical_to_the_gguf_package() {
        type Dequantize = fn(&[u8], &mut [f32]);
        let cases: [(&str, &[u8], &[u8], Dequantize); 3] = [
            (
                "q4_K",
                include_bytes!("../../tests/data/kquant/q4_K.blocks"),
                include_bytes!("../../tests/data/kquant/q4_K.f32"),
                dequantize_row_q4_k,
            ),
            (
                "q5_K",
                include_bytes!("../../tests/data/kquant/q5_K.blocks"),
                include_bytes!("../../tests/data/kquant/q5_K.f32"),
                dequantize_row_q5_k,
            ),
            (
                "q6_K",
                include_bytes!("../../tests/data/kquant/q6_K.blocks"),
                include_bytes!("../../tests/data/kquant/q6_K.f32"),
                dequantize_row_q6_k,
            ),
        ];
        for (name, blocks, values, dequantize) in cases {
            let mut y = [0.0f32; 8 * QK_K];
            dequantize(blocks, &mut y);
            for (i, (got, want)) in y.iter().zip(values.chunks_exact(4)).enumerate() {
                let want = f32::from_le_bytes([want[0], want[1], want[2], want[3]]);
                assert_eq!(got.to_bits(), want.to_bits(), "{name} value {i}: {got} != {want}");
            }
        }
    }

    #[test]
    fn scales_and_mins_pack_as_ggml_reads_them() {
        let scales = [1, 62, 17, 33, 63, 40, 5, 48];
        let mins = [63, 0, 21, 9, 18, 63, 50, 7];
        let mut q = [0u8; 12];
        pack_scale_min(&scales, &mins, &mut q);
        for j in 0..8 {
            assert_eq!(scale_min(j, &q), (scales[j], mins[j]), "sub-block {j}");
        }
    }

    #[test]
    fn zero_blocks_dequantize_to_zero() {
        let x = [0.0f32; QK_K];
        let mut q = [0xa5u8; Q6_K_BLOCK_BYTES];
        let mut y = [1.0f32; QK_K];
        quantize_row_q6_k(&x, &mut q);
        dequantize_row_q6_k(&q, &mut y);
        assert!(y.iter().all(|v| *v == 0.0));
        quantize_row_q4_k(&x, &mut q[..Q4_K_BLOCK_BYTES]);
        dequantize_row_q4_k(&q[..Q4_K_BLOCK_BYTES], &mut y);
        assert!(y.iter().all(|v| *v == 0.0));
    }
}
