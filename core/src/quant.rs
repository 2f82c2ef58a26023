//! Q8_0 and Q4_0 block quantization (ggml's layouts and rounding rules).

use half::f16;

/// Values per quantized block.
pub const QK: usize = 32;
/// Bytes of one Q8_0 block: f16 scale + 32 x i8.
pub const Q8_0_BLOCK_BYTES: usize = 2 + QK;
/// Bytes of one Q4_0 block: f16 scale + 16 bytes of nibbles.
pub const Q4_0_BLOCK_BYTES: usize = 2 + QK / 2;

fn read_scale(block: &[u8]) -> f32 {
    f16::from_le_bytes([block[0], block[1]]).to_f32()
}

fn write_scale(block: &mut [u8], d: f32) {
    block[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
}

/// Quantizes `src` (a whole number of blocks) into Q8_0 blocks in `dst`.
/// Each block: `d = max|x| / 127`, `q = round(x / d)`.
#[inline]
pub fn quantize_row_q8_0(src: &[f32], dst: &mut [u8]) {
    for (x, block) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(Q8_0_BLOCK_BYTES)) {
        let amax = x.iter().fold(0.0f32, |m, v| m.max(libm::fabsf(*v)));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        write_scale(block, d);
        for (q, v) in block[2..].iter_mut().zip(x) {
            *q = (libm::roundf(v * id) as i8) as u8;
        }
    }
}

/// Dequantizes Q8_0 blocks in `src` into `dst` (a whole number of blocks).
#[inline]
pub fn dequantize_row_q8_0(src: &[u8], dst: &mut [f32]) {
    for (block, y) in src.chunks_exact(Q8_0_BLOCK_BYTES).zip(dst.chunks_exact_mut(QK)) {
        let d = read_scale(block);
        for (out, q) in y.iter_mut().zip(&block[2..]) {
            *out = (*q as i8) as f32 * d;
        }
    }
}

/// Quantizes `src` into Q4_0 blocks in `dst`.
/// Each block: `d = m / -8` where `m` is the value of largest magnitude (sign kept),
/// `q = min(15, trunc(x / d + 8.5))`.
#[inline]
pub fn quantize_row_q4_0(src: &[f32], dst: &mut [u8]) {
    for (x, block) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(Q4_0_BLOCK_BYTES)) {
        let mut amax = 0.0f32;
        let mut max = 0.0f32;
        for v in x {
            if amax < libm::fabsf(*v) {
                amax = libm::fabsf(*v);
                max = *v;
            }
        }
        let d = max / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        write_scale(block, d);
        let nibble = |v: f32| -> u8 {
            // The float-to-int cast saturates, so NaN and huge values stay in range.
            let q = (v * id + 8.5) as i32;
            q.clamp(0, 15) as u8
        };
        for j in 0..QK / 2 {
            block[2 + j] = nibble(x[j]) | (nibble(x[j + QK / 2]) << 4);
        }
    }
}

/// Dequantizes Q4_0 blocks in `src` into `dst`.
#[inline]
pub fn dequantize_row_q4_0(src: &[u8], dst: &mut [f32]) {
    for (block, y) in src.chunks_exact(Q4_0_BLOCK_BYTES).zip(dst.chunks_exact_mut(QK)) {
        let d = read_scale(block);
        for j in 0..QK / 2 {
            let b = block[2 + j];
            y[j] = ((b & 0x0f) as i32 - 8) as f32 * d;
            y[j + QK / 2] = ((b >> 4) as i32 - 8) as f32 * d;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ramp(n: usize) -> [f32; 64] {
        let mut x = [0.0f32; 64];
        for (i, v) in x.iter_mut().enumerate().take(n) {
            *v = (i as f32 * 0.37).sin() * 3.0;
        }
        x
    }

    #[test]
    fn q8_0_round_trip_is_within_half_a_step() {
        let x = ramp(64);
        let mut q = [0u8; 2 * Q8_0_BLOCK_BYTES];
        quantize_row_q8_0(&x, &mut q);
        let mut y = [0.0f32; 64];
        dequantize_row_q8_0(&q, &mut y);
        for b in 0..2 {
            let amax = x[b * 32..][..32].iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let step = amax / 127.0;
            for i in b * 32..b * 32 + 32 {
                assert!((x[i] - y[i]).abs() <= step * 0.5 + amax * 1e-3, "{i}");
            }
        }
    }

    #[test]
    fn q4_0_layout_matches_ggml() {
        // Largest magnitude is -8.0 at index 0: d = 1, so q = x + 8.
        let mut x = [0.0f32; 32];
        x[0] = -8.0;
        x[1] = 7.0;
        x[16] = 3.0;
        let mut q = [0u8; Q4_0_BLOCK_BYTES];
        quantize_row_q4_0(&x, &mut q);
        assert_eq!(f16::from_le_bytes([q[0], q[1]]).to_f32(), 1.0);
        assert_eq!(q[2], (11 << 4)); // value 0 -> nibble 0, value 16 -> 3 + 8
        assert_eq!(q[3], 15 | (8 << 4)); // value 1 -> 7 + 8, value 17 -> 0 + 8
        let mut y = [0.0f32; 32];
        dequantize_row_q4_0(&q, &mut y);
        assert_eq!(y[0], -8.0);
        assert_eq!(y[1], 7.0);
        assert_eq!(y[16], 3.0);
        assert_eq!(y[5], 0.0);
    }

    #[test]
    fn zero_blocks_have_zero_scale() {
        let x = [0.0f32; 32];
        let mut q = [0xffu8; Q8_0_BLOCK_BYTES];
        quantize_row_q8_0(&x, &mut q);
        assert!(q.iter().all(|b| *b == 0));
    }
}
