//! Conversion of whole rows between any storage type and f32.
//!
//! These are the element accessors every reference kernel is written with: a row is read
//! into f32, computed on, and written back in the destination type.

use half::{bf16, f16};

use crate::dtype::DType;
use crate::{kquant, kquant_low, legacy_quant, quant};

/// Reads `out.len()` values of type `dtype` from `src` (densely packed) into f32.
/// I32 values are converted numerically.
#[inline]
pub fn row_to_f32(dtype: DType, src: &[u8], out: &mut [f32]) {
    match dtype {
        DType::F32 => {
            for (o, b) in out.iter_mut().zip(src.chunks_exact(4)) {
                *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
        }
        DType::I32 => {
            for (o, b) in out.iter_mut().zip(src.chunks_exact(4)) {
                *o = i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f32;
            }
        }
        DType::F16 => {
            for (o, b) in out.iter_mut().zip(src.chunks_exact(2)) {
                *o = f16::from_le_bytes([b[0], b[1]]).to_f32();
            }
        }
        DType::BF16 => {
            for (o, b) in out.iter_mut().zip(src.chunks_exact(2)) {
                *o = bf16::from_le_bytes([b[0], b[1]]).to_f32();
            }
        }
        DType::Q8_0 => quant::dequantize_row_q8_0(src, out),
        DType::Q4_0 => quant::dequantize_row_q4_0(src, out),
        DType::Q4_1 => legacy_quant::dequantize_row_q4_1(src, out),
        DType::Q5_0 => legacy_quant::dequantize_row_q5_0(src, out),
        DType::Q5_1 => legacy_quant::dequantize_row_q5_1(src, out),
        DType::Q2_K => kquant_low::dequantize_row_q2_k(src, out),
        DType::Q3_K => kquant_low::dequantize_row_q3_k(src, out),
        DType::Q4_K => kquant::dequantize_row_q4_k(src, out),
        DType::Q5_K => kquant::dequantize_row_q5_k(src, out),
        DType::Q6_K => kquant::dequantize_row_q6_k(src, out),
    }
}

/// Writes `src` as densely packed values of type `dtype` into `out`.
/// Conversion to I32 truncates toward zero (saturating).
#[inline]
pub fn row_from_f32(dtype: DType, src: &[f32], out: &mut [u8]) {
    match dtype {
        DType::F32 => {
            for (b, v) in out.chunks_exact_mut(4).zip(src) {
                b.copy_from_slice(&v.to_le_bytes());
            }
        }
        DType::I32 => {
            for (b, v) in out.chunks_exact_mut(4).zip(src) {
                b.copy_from_slice(&(*v as i32).to_le_bytes());
            }
        }
        DType::F16 => {
            for (b, v) in out.chunks_exact_mut(2).zip(src) {
                b.copy_from_slice(&f16::from_f32(*v).to_le_bytes());
            }
        }
        DType::BF16 => {
            for (b, v) in out.chunks_exact_mut(2).zip(src) {
                b.copy_from_slice(&bf16::from_f32(*v).to_le_bytes());
            }
        }
        DType::Q8_0 => quant::quantize_row_q8_0(src, out),
        DType::Q4_0 => quant::quantize_row_q4_0(src, out),
        DType::Q4_1 => legacy_quant::quantize_row_q4_1(src, out),
        DType::Q5_0 => legacy_quant::quantize_row_q5_0(src, out),
        DType::Q5_1 => legacy_quant::quantize_row_q5_1(src, out),
        DType::Q2_K => kquant_low::quantize_row_q2_k(src, out),
        DType::Q3_K => kquant_low::quantize_row_q3_k(src, out),
        DType::Q4_K => kquant::quantize_row_q4_k(src, out),
        DType::Q5_K => kquant::quantize_row_q5_k(src, out),
        DType::Q6_K => kquant::quantize_row_q6_k(src, out),
    }
}

/// Converts a whole number of blocks of f32 values to `dtype` bytes, returning them.
pub fn to_bytes(dtype: DType, src: &[f32]) -> crate::Result<alloc::vec::Vec<u8>> {
    let n = dtype.row_bytes(src.len())?;
    let mut out = alloc::vec![0u8; n];
    row_from_f32(dtype, src, &mut out);
    Ok(out)
}

/// Converts `dtype` bytes (a whole number of blocks) to f32 values.
pub fn to_f32_vec(dtype: DType, src: &[u8]) -> alloc::vec::Vec<f32> {
    let n = src.len() / dtype.block_bytes() * dtype.block_len();
    let mut out = alloc::vec![0.0f32; n];
    row_to_f32(dtype, src, &mut out);
    out
}

/// Reads `out.len()` values of `dtype` whose consecutive elements are `stride` bytes apart
/// (for quantized types the blocks must be packed: `stride == block_bytes`).
pub fn strided_to_f32(dtype: DType, src: &[u8], stride: usize, out: &mut [f32]) {
    if dtype.is_quantized() || stride == dtype.block_bytes() {
        row_to_f32(dtype, src, out);
        return;
    }
    let size = dtype.block_bytes();
    for (i, o) in out.iter_mut().enumerate() {
        let at = i * stride;
        row_to_f32(dtype, &src[at..at + size], core::slice::from_mut(o));
    }
}

/// Writes `src` as values of `dtype` placed `stride` bytes apart into `out`.
pub fn f32_to_strided(dtype: DType, src: &[f32], stride: usize, out: &mut [u8]) {
    if dtype.is_quantized() || stride == dtype.block_bytes() {
        row_from_f32(dtype, src, out);
        return;
    }
    let size = dtype.block_bytes();
    for (i, v) in src.iter().enumerate() {
        let at = i * stride;
        row_from_f32(dtype, core::slice::from_ref(v), &mut out[at..at + size]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_types_round_trip() {
        let x = [1.5f32, -2.25, 0.0, 1024.0];
        for dtype in [DType::F32, DType::F16, DType::BF16, DType::I32] {
            let bytes = to_bytes(dtype, &x).unwrap();
            assert_eq!(bytes.len(), 4 * dtype.block_bytes());
            let y = to_f32_vec(dtype, &bytes);
            let expect: [f32; 4] = if dtype == DType::I32 { [1.0, -2.0, 0.0, 1024.0] } else { x };
            assert_eq!(y, expect, "{dtype}");
        }
    }

    #[test]
    fn bf16_rounds_to_nearest_even() {
        // 1 + 2^-8 lies exactly between two bf16 values; ties go to the even mantissa (1.0).
        let bytes = to_bytes(DType::BF16, &[1.0 + 1.0 / 256.0]).unwrap();
        assert_eq!(to_f32_vec(DType::BF16, &bytes), [1.0]);
    }
}
