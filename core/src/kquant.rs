//! K-quants: ggml's Q4_K, Q5_K and Q6_K, whose blocks ("super-blocks") hold 256 values in
//! sub-blocks that each have their own quantized scale (the types of the Q4_K_M, Q5_K_M and
//! Q6_K files most models are published in).
//!
//! Dequantization follows ggml's formulas operation for operation, so values are bit-identical
//! to ggml's; quantization is ggml's reference quantizer with its scale searches
//! ([`kquant_search`](crate::kquant_search)), so blocks are ggml's bytes too.

use half::f16;

use crate::kquant_search::{make_qkx2_quants, make_qx_quants, nearest_int, sqrtf, GROUP_MAX_EPS};

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
pub(crate) fn pack_scale_min(scales: &[u8; 8], mins: &[u8; 8], q: &mut [u8]) {
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

/// Writes the quants `q` (values `0..=31`) of a Q4_K or Q5_K block: low nibbles in 128
/// bytes of `qs` (bytes `32 c + l` hold values `64 c + l` and `64 c + 32 + l`), fifth bits,
/// when `qh` is given, at bits `2 c` and `2 c + 1` of byte `l`.
fn pack_4_5(q: &[u8; QK_K], qs: &mut [u8], mut qh: Option<&mut [u8]>) {
    if let Some(qh) = qh.as_deref_mut() {
        qh.fill(0);
    }
    for (c, out) in qs.chunks_exact_mut(32).enumerate() {
        for (l, b) in out.iter_mut().enumerate() {
            let (lo, hi) = (q[64 * c + l], q[64 * c + 32 + l]);
            *b = (lo & 0xf) | ((hi & 0xf) << 4);
            if let Some(qh) = qh.as_deref_mut() {
                qh[l] |= ((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1));
            }
        }
    }
}

/// ggml's Q4_K / Q5_K quantizer (quants `0..=nmax`): each sub-block of 32 fitted as
/// `scale * q - min` by [`make_qkx2_quants`] (weighted by `rms + |x|`), scales and mins
/// quantized to 6 bits against the block's largest, and the quants recomputed for the
/// quantized values. Writes `d`, `dmin` and the packed scales to `head` (16 bytes) and
/// returns the quants.
fn quantize_scale_min(x: &[f32], nmax: i32, rmin: f32, nstep: i32, head: &mut [u8]) -> [u8; QK_K] {
    let mut l = [0u8; QK_K];
    let (mut scales, mut mins) = ([0.0f32; 8], [0.0f32; 8]);
    let (mut max_scale, mut max_min) = (0.0f32, 0.0f32);
    for (j, (x, l)) in x.chunks_exact(32).zip(l.chunks_exact_mut(32)).enumerate() {
        let mut sum_x2 = 0.0f32;
        for v in x {
            sum_x2 += v * v;
        }
        let av_x = sqrtf(sum_x2 / 32.0);
        let weights: [f32; 32] = core::array::from_fn(|i| av_x + libm::fabsf(x[i]));
        (scales[j], mins[j]) = make_qkx2_quants(nmax, x, &weights, l, rmin, 0.1, nstep, false);
        if scales[j] > max_scale {
            max_scale = scales[j];
        }
        if mins[j] > max_min {
            max_min = mins[j];
        }
    }
    let inv_scale = if max_scale > 0.0 { 63.0 / max_scale } else { 0.0 };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    // ggml keeps the rounded values in bytes (wrapping) before capping them at 63.
    let ls = scales.map(|s| (nearest_int(inv_scale * s) as u8).min(63));
    let lm = mins.map(|m| (nearest_int(inv_min * m) as u8).min(63));
    let (d, dmin) = (f16::from_f32(max_scale / 63.0), f16::from_f32(max_min / 63.0));
    head[..2].copy_from_slice(&d.to_le_bytes());
    head[2..4].copy_from_slice(&dmin.to_le_bytes());
    pack_scale_min(&ls, &lm, &mut head[4..16]);
    for (j, (x, l)) in x.chunks_exact(32).zip(l.chunks_exact_mut(32)).enumerate() {
        let (sc, m) = scale_min(j, &head[4..16]);
        let step = d.to_f32() * f32::from(sc);
        if step == 0.0 {
            continue;
        }
        let dm = dmin.to_f32() * f32::from(m);
        for (l, &v) in l.iter_mut().zip(x) {
            *l = nearest_int((v + dm) / step).clamp(0, nmax) as u8;
        }
    }
    l
}

/// Quantizes `src` (a whole number of super-blocks) into Q4_K blocks in `dst`, as ggml's
/// reference quantizer does.
pub fn quantize_row_q4_k(src: &[f32], dst: &mut [u8]) {
    for (x, block) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(Q4_K_BLOCK_BYTES)) {
        let (head, qs) = block.split_at_mut(16);
        let q = quantize_scale_min(x, 15, -1.0, 20, head);
        pack_4_5(&q, qs, None);
    }
}

/// Quantizes `src` (a whole number of super-blocks) into Q5_K blocks in `dst`, as ggml's
/// reference quantizer does.
pub fn quantize_row_q5_k(src: &[f32], dst: &mut [u8]) {
    for (x, block) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(Q5_K_BLOCK_BYTES)) {
        let (head, rest) = block.split_at_mut(16);
        let q = quantize_scale_min(x, 31, -0.5, 15, head);
        let (qh, qs) = rest.split_at_mut(32);
        pack_4_5(&q, qs, Some(qh));
    }
}

/// Quantizes `src` (a whole number of super-blocks) into Q6_K blocks in `dst`, as ggml's
/// reference quantizer does: each sub-block of 16 fitted by [`make_qx_quants`], the scales
/// quantized to 8 signed bits against the one of largest magnitude, and the quants
/// recomputed for the quantized scales.
pub fn quantize_row_q6_k(src: &[f32], dst: &mut [u8]) {
    for (x, block) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(Q6_K_BLOCK_BYTES)) {
        let mut l = [0i8; QK_K];
        let mut scales = [0.0f32; 16];
        let (mut max_scale, mut max_abs) = (0.0f32, 0.0f32);
        for (j, (x, l)) in x.chunks_exact(16).zip(l.chunks_exact_mut(16)).enumerate() {
            scales[j] = make_qx_quants(32, x, l);
            if libm::fabsf(scales[j]) > max_abs {
                max_abs = libm::fabsf(scales[j]);
                max_scale = scales[j];
            }
        }
        if max_abs < GROUP_MAX_EPS {
            block.fill(0);
            continue;
        }
        let iscale = -128.0 / max_scale;
        let d = f16::from_f32(1.0 / iscale);
        // ggml stores the capped scale into an i8 (wrapping).
        let sc = scales.map(|s| nearest_int(iscale * s).min(127) as i8);
        for (j, (x, l)) in x.chunks_exact(16).zip(l.chunks_exact_mut(16)).enumerate() {
            let step = d.to_f32() * f32::from(sc[j]);
            if step == 0.0 {
                continue;
            }
            for (l, &v) in l.iter_mut().zip(x) {
                *l = (nearest_int(v / step).clamp(-32, 31) + 32) as i8;
            }
        }
        pack_q6_k(&l.map(|l| l as u8), sc, d, block);
    }
}

/// Writes one Q6_K block: 256 values `q` in `0..64` (value + 32), 16 scales and `d`.
pub(crate) fn pack_q6_k(q: &[u8; QK_K], sc: [i8; 16], d: f16, block: &mut [u8]) {
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
