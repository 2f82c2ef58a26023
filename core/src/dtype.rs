//! Element types and their storage layout.

use core::fmt;

use crate::error::{Error, Result};

/// The element type of a tensor.
///
/// Quantized types store values in blocks; their layouts are ggml's so that model files
/// written for ggml load unchanged:
/// - `Q8_0`: 32 values = an f16 scale followed by 32 `i8` (34 bytes); value = scale * q.
/// - `Q4_0`: 32 values = an f16 scale followed by 16 bytes of nibbles (18 bytes); byte `j`
///   holds value `j` in its low nibble and value `j + 16` in its high nibble; value = scale * (q - 8).
/// - `Q4_1`, `Q5_0`, `Q5_1`: 32 values with an f16 scale (and min), 4 or 5 bits each (20, 22
///   and 24 bytes); see [`legacy_quant`](crate::legacy_quant).
/// - `Q2_K`, `Q3_K`, `Q4_K`, `Q5_K`, `Q6_K`: 256 values in sub-blocks with quantized scales
///   (84, 110, 144, 176 and 210 bytes); see [`kquant_low`](crate::kquant_low) and
///   [`kquant`](crate::kquant).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)] // ggml's names: Q4_K is not Q4K.
pub enum DType {
    F32,
    F16,
    BF16,
    I32,
    Q8_0,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
}

impl DType {
    /// Every type, in a fixed order (useful for tests and tables).
    pub const ALL: [DType; 14] = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::I32,
        DType::Q8_0,
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q2_K,
        DType::Q3_K,
        DType::Q4_K,
        DType::Q5_K,
        DType::Q6_K,
    ];

    /// ggml's name of the type ("f32", "q8_0", ...).
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I32 => "i32",
            DType::Q8_0 => "q8_0",
            DType::Q4_0 => "q4_0",
            DType::Q4_1 => "q4_1",
            DType::Q5_0 => "q5_0",
            DType::Q5_1 => "q5_1",
            DType::Q2_K => "q2_K",
            DType::Q3_K => "q3_K",
            DType::Q4_K => "q4_K",
            DType::Q5_K => "q5_K",
            DType::Q6_K => "q6_K",
        }
    }

    /// Number of values in one storage block (1 for plain types).
    pub const fn block_len(self) -> usize {
        match self {
            DType::Q8_0 | DType::Q4_0 | DType::Q4_1 | DType::Q5_0 | DType::Q5_1 => crate::quant::QK,
            DType::Q2_K | DType::Q3_K | DType::Q4_K | DType::Q5_K | DType::Q6_K => crate::kquant::QK_K,
            _ => 1,
        }
    }

    /// Bytes of one storage block (for plain types: bytes of one value).
    pub const fn block_bytes(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::Q8_0 => 34,
            DType::Q4_0 => 18,
            DType::Q4_1 => crate::legacy_quant::Q4_1_BLOCK_BYTES,
            DType::Q5_0 => crate::legacy_quant::Q5_0_BLOCK_BYTES,
            DType::Q5_1 => crate::legacy_quant::Q5_1_BLOCK_BYTES,
            DType::Q2_K => crate::kquant_low::Q2_K_BLOCK_BYTES,
            DType::Q3_K => crate::kquant_low::Q3_K_BLOCK_BYTES,
            DType::Q4_K => crate::kquant::Q4_K_BLOCK_BYTES,
            DType::Q5_K => crate::kquant::Q5_K_BLOCK_BYTES,
            DType::Q6_K => crate::kquant::Q6_K_BLOCK_BYTES,
        }
    }

    pub const fn is_quantized(self) -> bool {
        self.block_len() > 1
    }

    /// Floating-point types that element-wise kernels read and write.
    pub const fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16)
    }

    /// Bytes of a row of `n` values; `n` must be a whole number of blocks.
    pub fn row_bytes(self, n: usize) -> Result<usize> {
        if n % self.block_len() != 0 {
            return Err(Error::BlockAlignment { dtype: self, len: n });
        }
        (n / self.block_len()).checked_mul(self.block_bytes()).ok_or(Error::Overflow { what: "row size in bytes" })
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_sizes_follow_block_layouts() {
        assert_eq!(DType::F32.row_bytes(10).unwrap(), 40);
        assert_eq!(DType::BF16.row_bytes(3).unwrap(), 6);
        assert_eq!(DType::Q8_0.row_bytes(64).unwrap(), 68);
        assert_eq!(DType::Q4_0.row_bytes(96).unwrap(), 54);
        assert!(matches!(DType::Q4_0.row_bytes(33), Err(Error::BlockAlignment { .. })));
        assert_eq!(DType::Q4_K.row_bytes(512).unwrap(), 288);
        assert_eq!(DType::Q5_K.row_bytes(256).unwrap(), 176);
        assert_eq!(DType::Q6_K.row_bytes(256).unwrap(), 210);
        assert!(matches!(DType::Q6_K.row_bytes(128), Err(Error::BlockAlignment { .. })));
        assert_eq!(DType::Q4_1.row_bytes(64).unwrap(), 40);
        assert_eq!(DType::Q5_0.row_bytes(64).unwrap(), 44);
        assert_eq!(DType::Q5_1.row_bytes(64).unwrap(), 48);
        assert_eq!(DType::Q2_K.row_bytes(512).unwrap(), 168);
        assert_eq!(DType::Q3_K.row_bytes(256).unwrap(), 110);
    }
}
