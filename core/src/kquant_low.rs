//! The low-bit K-quants: ggml's Q2_K and Q3_K, 256 values per block in 16 sub-blocks of 16.
//!
//! Both keep 2-bit quants in 64 bytes (`qs`): in each half of 128 values, byte `w` (of 32)
//! holds values `w`, `w + 32`, `w + 64` and `w + 96` of the half in its bit pairs 0, 2, 4, 6.
//! - `Q2_K` (84 bytes): 16 scale bytes (low nibble: the sub-block's scale, high nibble: its
//!   min), `qs`, f16 `d`, f16 `dmin`. Value = `d * scale * q - dmin * min`.
//! - `Q3_K` (110 bytes): 32 bytes of high bits (`hmask`: bit `4 * half + pair` of byte `w`
//!   is value `w`'s), `qs`, 12 bytes of 6-bit scales, f16 `d`. A value's quant is its 2 bits
//!   minus 4 where its high bit is clear; value = `d * (scale - 32) * q`.
//!
//! Dequantization follows ggml's formulas operation for operation; quantization is ggml's
//! reference quantizer (its scale searches are in [`kquant_search`](crate::kquant_search)), so
//! both give ggml's bits.

use half::f16;

use crate::kquant::QK_K;
use crate::kquant_search::{make_q3_quants, make_qkx2_quants, nearest_int};

/// Bytes of one Q2_K block.
pub const Q2_K_BLOCK_BYTES: usize = QK_K / 16 + QK_K / 4 + 2 + 2;
/// Bytes of one Q3_K block.
pub const Q3_K_BLOCK_BYTES: usize = QK_K / 8 + QK_K / 4 + 12 + 2;

fn half_at(block: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([block[at], block[at + 1]]).to_f32()
}

/// Where value `v` (of 256) keeps its 2 low bits: the byte of `qs` and the shift.
#[inline]
fn low_bits_at(v: usize) -> (usize, usize) {
    let (half, r) = (v / 128, v % 128);
    (32 * half + r % 32, 2 * (r / 32))
}

/// Packs 256 quants of 2 bits (higher bits ignored) into `qs`.
fn pack_low_bits(q: &[u8; QK_K], qs: &mut [u8]) {
    qs[..QK_K / 4].fill(0);
    for (v, &q) in q.iter().enumerate() {
        let (byte, shift) = low_bits_at(v);
        qs[byte] |= (q & 3) << shift;
    }
}

/// Sub-block `j`'s 6-bit Q3_K scale (still offset by 32): low nibbles in bytes 0-7 (sub-blocks
/// 8-15 in the high nibbles), the top two bits in bytes 8-11, pair `j / 4` of byte `8 + j % 4`.
fn q3_scale(scales: &[u8], j: usize) -> u8 {
    let low = if j < 8 { scales[j] & 0xf } else { scales[j - 8] >> 4 };
    low | (((scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)
}

/// Dequantizes Q2_K blocks.
pub fn dequantize_row_q2_k(src: &[u8], dst: &mut [f32]) {
    for (block, y) in src.chunks_exact(Q2_K_BLOCK_BYTES).zip(dst.chunks_exact_mut(QK_K)) {
        let (scales, qs) = (&block[..16], &block[16..80]);
        let (d, min) = (half_at(block, 80), half_at(block, 82));
        for (j, y) in y.chunks_exact_mut(16).enumerate() {
            let sc = scales[j];
            let (dl, ml) = (d * f32::from(sc & 0xf), min * f32::from(sc >> 4));
            for (i, y) in y.iter_mut().enumerate() {
                let (byte, shift) = low_bits_at(16 * j + i);
                *y = dl * f32::from((qs[byte] >> shift) & 3) - ml;
            }
        }
    }
}

/// Dequantizes Q3_K blocks.
pub fn dequantize_row_q3_k(src: &[u8], dst: &mut [f32]) {
    for (block, y) in src.chunks_exact(Q3_K_BLOCK_BYTES).zip(dst.chunks_exact_mut(QK_K)) {
        let (hmask, qs, scales) = (&block[..32], &block[32..96], &block[96..108]);
        let d = half_at(block, 108);
        for (j, y) in y.chunks_exact_mut(16).enumerate() {
            let dl = d * (i32::from(q3_scale(scales, j)) - 32) as f32;
            for (i, y) in y.iter_mut().enumerate() {
                let v = 16 * j + i;
                let (byte, shift) = low_bits_at(v);
                let high = hmask[v % 32] & (1 << (4 * (v / 128) + (v % 128) / 32)) != 0;
                let q = i32::from((qs[byte] >> shift) & 3) - if high { 0 } else { 4 };
                *y = dl * q as f32;
            }
        }
    }
}

/// Quantizes `src` (a whole number of blocks) into Q2_K blocks in `dst`: each sub-block's
/// scale and min by ggml's search (weighted by `|x|`, absolute error), both then quantized to
/// 4 bits against the block's largest, and the quants recomputed for the quantized values.
pub fn quantize_row_q2_k(src: &[f32], dst: &mut [u8]) {
    const Q4SCALE: f32 = 15.0;
    for (x, block) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(Q2_K_BLOCK_BYTES)) {
        let mut l = [0u8; QK_K];
        let (mut scales, mut mins) = ([0.0f32; 16], [0.0f32; 16]);
        let (mut max_scale, mut max_min) = (0.0f32, 0.0f32);
        for (j, (x, l)) in x.chunks_exact(16).zip(l.chunks_exact_mut(16)).enumerate() {
            let weights: [f32; 16] = core::array::from_fn(|i| libm::fabsf(x[i]));
            (scales[j], mins[j]) = make_qkx2_quants(3, x, &weights, l, -0.5, 0.1, 15, true);
            if scales[j] > max_scale {
                max_scale = scales[j];
            }
            if mins[j] > max_min {
                max_min = mins[j];
            }
        }
        let mut sc = [0u8; 16];
        let mut d = f16::ZERO;
        if max_scale > 0.0 {
            let iscale = Q4SCALE / max_scale;
            // ggml stores the rounded scale into a byte as is (wrapping), as here.
            sc = scales.map(|s| nearest_int(iscale * s) as u8);
            d = f16::from_f32(max_scale / Q4SCALE);
        }
        let mut dmin = f16::ZERO;
        if max_min > 0.0 {
            let iscale = Q4SCALE / max_min;
            for (sc, m) in sc.iter_mut().zip(mins) {
                *sc |= (nearest_int(iscale * m) as u8) << 4;
            }
            dmin = f16::from_f32(max_min / Q4SCALE);
        }
        for (j, (x, l)) in x.chunks_exact(16).zip(l.chunks_exact_mut(16)).enumerate() {
            let step = d.to_f32() * f32::from(sc[j] & 0xf);
            if step == 0.0 {
                continue;
            }
            let dm = dmin.to_f32() * f32::from(sc[j] >> 4);
            for (l, &v) in l.iter_mut().zip(x) {
                *l = nearest_int((v + dm) / step).clamp(0, 3) as u8;
            }
        }
        block[..16].copy_from_slice(&sc);
        pack_low_bits(&l, &mut block[16..80]);
        block[80..82].copy_from_slice(&d.to_le_bytes());
        block[82..84].copy_from_slice(&dmin.to_le_bytes());
    }
}

/// Quantizes `src` (a whole number of blocks) into Q3_K blocks in `dst`: each sub-block's
/// scale by ggml's search, the scales quantized to 6 signed bits against the one of largest
/// magnitude, and the quants recomputed for the quantized scales.
pub fn quantize_row_q3_k(src: &[f32], dst: &mut [u8]) {
    for (x, block) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(Q3_K_BLOCK_BYTES)) {
        let mut l = [0i8; QK_K];
        let mut scales = [0.0f32; 16];
        let (mut max_scale, mut amax) = (0.0f32, 0.0f32);
        for (j, (x, l)) in x.chunks_exact(16).zip(l.chunks_exact_mut(16)).enumerate() {
            scales[j] = make_q3_quants(4, x, l);
            let a = libm::fabsf(scales[j]);
            if a > amax {
                amax = a;
                max_scale = scales[j];
            }
        }
        let packed = &mut block[96..108];
        packed.fill(0);
        let mut d = f16::ZERO;
        if max_scale != 0.0 {
            let iscale = -32.0 / max_scale;
            for (j, &s) in scales.iter().enumerate() {
                // ggml keeps the rounded scale in an i8 (wrapping) before clamping it.
                let q = ((nearest_int(iscale * s) as i8).clamp(-32, 31) + 32) as u8;
                if j < 8 {
                    packed[j] = q & 0xf;
                } else {
                    packed[j - 8] |= (q & 0xf) << 4;
                }
                packed[8 + j % 4] |= (q >> 4) << (2 * (j / 4));
            }
            d = f16::from_f32(1.0 / iscale);
        }
        for (j, (x, l)) in x.chunks_exact(16).zip(l.chunks_exact_mut(16)).enumerate() {
            let step = d.to_f32() * (i32::from(q3_scale(packed, j)) - 32) as f32;
            if step == 0.0 {
                continue;
            }
            for (l, &v) in l.iter_mut().zip(x) {
                *l = (nearest_int(v / step).clamp(-4, 3) + 4) as i8;
            }
        }
        // Quants 4..=7 keep their high bit in `hmask`, the rest their low 2 bits in `qs`.
        let mut q = [0u8; QK_K];
        let hmask = &mut block[..32];
        hmask.fill(0);
        for (v, (&l, q)) in l.iter().zip(q.iter_mut()).enumerate() {
            *q = l as u8;
            if l > 3 {
                hmask[v % 32] |= 1 << (v / 32);
            }
        }
        pack_low_bits(&q, &mut block[32..96]);
        block[108..110].copy_from_slice(&d.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q3_scales_pack_as_they_are_read() {
        let x: [f32; QK_K] = core::array::from_fn(|v| libm::sinf(v as f32 * 0.7) * (1 + v / 16) as f32);
        let mut block = [0u8; Q3_K_BLOCK_BYTES];
        quantize_row_q3_k(&x, &mut block);
        let scales: [u8; 16] = core::array::from_fn(|j| q3_scale(&block[96..108], j));
        // The scale of largest magnitude is quantized to -32: 0 after the offset.
        assert!(scales.contains(&0), "{scales:?}");
        let mut y = [0.0f32; QK_K];
        dequantize_row_q3_k(&block, &mut y);
        let (err, norm) = x.iter().zip(&y).fold((0.0, 0.0), |(e, n), (a, b)| (e + (a - b) * (a - b), n + a * a));
        assert!(err / norm < 0.05, "relative squared error {}", err / norm);
    }

    #[test]
    fn q2_k_keeps_a_two_bit_grid() {
        // Each sub-block is 0.5 * q - 0.25 * (j % 4) with q in 0..=3.
        let x: [f32; QK_K] = core::array::from_fn(|v| 0.5 * (v % 4) as f32 - 0.25 * ((v / 16) % 4) as f32);
        let mut block = [0u8; Q2_K_BLOCK_BYTES];
        quantize_row_q2_k(&x, &mut block);
        let mut y = [0.0f32; QK_K];
        dequantize_row_q2_k(&block, &mut y);
        for (a, b) in x.iter().zip(&y) {
            assert!((a - b).abs() < 0.01, "{a} vs {b}");
        }
    }
}
