//! ggml's other 32-value block types: Q4_1, Q5_0 and Q5_1 (Q8_0 and Q4_0 are in
//! [`quant`](crate::quant)).
//!
//! Layouts (little-endian):
//! - `Q4_1` (20 bytes): f16 `d`, f16 `m`, 16 bytes of nibbles; value = `d * q + m`.
//! - `Q5_0` (22 bytes): f16 `d`, a u32 of fifth bits, 16 bytes of nibbles; value = `d * (q - 16)`.
//! - `Q5_1` (24 bytes): f16 `d`, f16 `m`, a u32 of fifth bits, 16 bytes of nibbles; value = `d * q + m`.
//!
//! Byte `j` of the nibbles holds value `j` in its low nibble and value `j + 16` in its high one;
//! bit `i` of the fifth bits belongs to value `i`. Dequantization and quantization follow ggml's
//! reference code operation for operation, so both give ggml's bits.

use half::f16;

use crate::quant::QK;

/// Bytes of one Q4_1 block.
pub const Q4_1_BLOCK_BYTES: usize = 2 + 2 + QK / 2;
/// Bytes of one Q5_0 block.
pub const Q5_0_BLOCK_BYTES: usize = 2 + 4 + QK / 2;
/// Bytes of one Q5_1 block.
pub const Q5_1_BLOCK_BYTES: usize = 2 + 2 + 4 + QK / 2;

fn half_at(block: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([block[at], block[at + 1]]).to_f32()
}

fn u32_at(block: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([block[at], block[at + 1], block[at + 2], block[at + 3]])
}

/// The 32 unsigned 4- or 5-bit quants of a block: nibbles plus, with `qh`, fifth bits.
fn quants(nibbles: &[u8], qh: u32) -> [u8; QK] {
    let mut q = [0u8; QK];
    for j in 0..QK / 2 {
        let high = |i: usize| (((qh >> i) & 1) as u8) << 4;
        q[j] = (nibbles[j] & 0xf) | high(j);
        q[j + QK / 2] = (nibbles[j] >> 4) | high(j + QK / 2);
    }
    q
}

/// Packs 32 quants of up to 5 bits as nibbles and fifth bits (returned).
fn pack(q: &[u8; QK], nibbles: &mut [u8]) -> u32 {
    let mut qh = 0u32;
    for j in 0..QK / 2 {
        let (lo, hi) = (q[j], q[j + QK / 2]);
        nibbles[j] = (lo & 0xf) | ((hi & 0xf) << 4);
        qh |= u32::from((lo >> 4) & 1) << j;
        qh |= u32::from((hi >> 4) & 1) << (j + QK / 2);
    }
    qh
}

/// The smallest and largest value of a block, as ggml finds them (NaN compares false, so it
/// never becomes either).
fn min_max(x: &[f32]) -> (f32, f32) {
    let (mut min, mut max) = (f32::MAX, -f32::MAX);
    for &v in x {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    (min, max)
}

/// The value of largest magnitude, sign kept (the first one on ties).
fn signed_max(x: &[f32]) -> f32 {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if amax < libm::fabsf(v) {
            amax = libm::fabsf(v);
            max = v;
        }
    }
    max
}

fn inverse(d: f32) -> f32 {
    if d != 0.0 {
        1.0 / d
    } else {
        0.0
    }
}

/// Dequantizes Q4_1 blocks.
pub fn dequantize_row_q4_1(src: &[u8], dst: &mut [f32]) {
    for (block, y) in src.chunks_exact(Q4_1_BLOCK_BYTES).zip(dst.chunks_exact_mut(QK)) {
        let (d, m) = (half_at(block, 0), half_at(block, 2));
        for (y, q) in y.iter_mut().zip(quants(&block[4..], 0)) {
            *y = f32::from(q) * d + m;
        }
    }
}

/// Dequantizes Q5_0 blocks.
pub fn dequantize_row_q5_0(src: &[u8], dst: &mut [f32]) {
    for (block, y) in src.chunks_exact(Q5_0_BLOCK_BYTES).zip(dst.chunks_exact_mut(QK)) {
        let d = half_at(block, 0);
        for (y, q) in y.iter_mut().zip(quants(&block[6..], u32_at(block, 2))) {
            *y = (i32::from(q) - 16) as f32 * d;
        }
    }
}

/// Dequantizes Q5_1 blocks.
pub fn dequantize_row_q5_1(src: &[u8], dst: &mut [f32]) {
    for (block, y) in src.chunks_exact(Q5_1_BLOCK_BYTES).zip(dst.chunks_exact_mut(QK)) {
        let (d, m) = (half_at(block, 0), half_at(block, 2));
        for (y, q) in y.iter_mut().zip(quants(&block[8..], u32_at(block, 4))) {
            *y = f32::from(q) * d + m;
        }
    }
}

/// Quantizes into Q4_1 blocks: `d = (max - min) / 15`, `m = min`, `q = trunc((x - min) / d + 0.5)`.
pub fn quantize_row_q4_1(src: &[f32], dst: &mut [u8]) {
    for (x, block) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(Q4_1_BLOCK_BYTES)) {
        let (min, max) = min_max(x);
        let d = (max - min) / 15.0;
        let id = inverse(d);
        block[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
        block[2..4].copy_from_slice(&f16::from_f32(min).to_le_bytes());
        // The float-to-int casts saturate (NaN gives 0), so every input stays in range.
        let q = core::array::from_fn(|i| (((x[i] - min) * id + 0.5) as i8).clamp(0, 15) as u8);
        pack(&q, &mut block[4..]);
    }
}

/// Quantizes into Q5_0 blocks: `d = max / -16` for the value of largest magnitude `max`,
/// `q = min(31, trunc(x / d + 16.5))`.
pub fn quantize_row_q5_0(src: &[f32], dst: &mut [u8]) {
    for (x, block) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(Q5_0_BLOCK_BYTES)) {
        let d = signed_max(x) / -16.0;
        let id = inverse(d);
        block[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
        let q = core::array::from_fn(|i| ((x[i] * id + 16.5) as i8).clamp(0, 31) as u8);
        let qh = pack(&q, &mut block[6..]);
        block[2..6].copy_from_slice(&qh.to_le_bytes());
    }
}

/// Quantizes into Q5_1 blocks: `d = (max - min) / 31`, `m = min`, `q = trunc((x - min) / d + 0.5)`.
pub fn quantize_row_q5_1(src: &[f32], dst: &mut [u8]) {
    for (x, block) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(Q5_1_BLOCK_BYTES)) {
        let (min, max) = min_max(x);
        let d = (max - min) / 31.0;
        let id = inverse(d);
        block[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
        block[2..4].copy_from_slice(&f16::from_f32(min).to_le_bytes());
        let q = core::array::from_fn(|i| (((x[i] - min) * id + 0.5) as u8).min(31));
        let qh = pack(&q, &mut block[8..]);
        block[4..8].copy_from_slice(&qh.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ramp_survives_q4_1_exactly() {
        // 0, 1, ..., 15 twice: d = 1, m = 0 and every value is a quant.
        let x: [f32; QK] = core::array::from_fn(|i| (i % 16) as f32);
        let mut q = [0u8; Q4_1_BLOCK_BYTES];
        quantize_row_q4_1(&x, &mut q);
        let mut y = [0.0f32; QK];
        dequantize_row_q4_1(&q, &mut y);
        assert_eq!(x, y);
    }

    #[test]
    fn fifth_bits_land_on_their_values() {
        // Q5_0 of -16..=15: d = 1 (max = -16), q = x + 16 covers 0..=31.
        let x: [f32; QK] = core::array::from_fn(|i| i as f32 - 16.0);
        let mut q = [0u8; Q5_0_BLOCK_BYTES];
        quantize_row_q5_0(&x, &mut q);
        assert_eq!(u32_at(&q, 2), 0xffff_0000, "values 16.. have q >= 16");
        let mut y = [0.0f32; QK];
        dequantize_row_q5_0(&q, &mut y);
        assert_eq!(x, y);
        let x: [f32; QK] = core::array::from_fn(|i| (31 - i) as f32 * 0.5 - 3.0);
        let mut q = [0u8; Q5_1_BLOCK_BYTES];
        quantize_row_q5_1(&x, &mut q);
        dequantize_row_q5_1(&q, &mut y);
        assert_eq!(x, y);
    }
}
