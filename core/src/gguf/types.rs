//! The type tags of a GGUF file: metadata value types and ggml tensor type ids.

use core::fmt;

use crate::dtype::DType;

/// The type of a metadata value (the `u32` tag before each value).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum ValueType {
    U8 = 0,
    I8 = 1,
    U16 = 2,
    I16 = 3,
    U32 = 4,
    I32 = 5,
    F32 = 6,
    /// One byte, 0 or 1.
    Bool = 7,
    /// A `u64` length and that many bytes of UTF-8.
    String = 8,
    /// A `u32` element type, a `u64` count and the elements (arrays may nest).
    Array = 9,
    U64 = 10,
    I64 = 11,
    F64 = 12,
}

impl ValueType {
    /// Every value type, in tag order.
    pub const ALL: [ValueType; 13] = [
        ValueType::U8,
        ValueType::I8,
        ValueType::U16,
        ValueType::I16,
        ValueType::U32,
        ValueType::I32,
        ValueType::F32,
        ValueType::Bool,
        ValueType::String,
        ValueType::Array,
        ValueType::U64,
        ValueType::I64,
        ValueType::F64,
    ];

    /// The type with tag `tag`, if there is one.
    pub const fn from_u32(tag: u32) -> Option<ValueType> {
        Some(match tag {
            0 => ValueType::U8,
            1 => ValueType::I8,
            2 => ValueType::U16,
            3 => ValueType::I16,
            4 => ValueType::U32,
            5 => ValueType::I32,
            6 => ValueType::F32,
            7 => ValueType::Bool,
            8 => ValueType::String,
            9 => ValueType::Array,
            10 => ValueType::U64,
            11 => ValueType::I64,
            12 => ValueType::F64,
            _ => return None,
        })
    }

    /// The tag written in files.
    pub const fn tag(self) -> u32 {
        self as u32
    }

    /// The type's name in messages ("u32", "string", "array").
    pub const fn name(self) -> &'static str {
        match self {
            ValueType::U8 => "u8",
            ValueType::I8 => "i8",
            ValueType::U16 => "u16",
            ValueType::I16 => "i16",
            ValueType::U32 => "u32",
            ValueType::I32 => "i32",
            ValueType::F32 => "f32",
            ValueType::Bool => "bool",
            ValueType::String => "string",
            ValueType::Array => "array",
            ValueType::U64 => "u64",
            ValueType::I64 => "i64",
            ValueType::F64 => "f64",
        }
    }

    /// Bytes of one value of a fixed-size type; `None` for strings and arrays.
    pub const fn fixed_size(self) -> Option<usize> {
        match self {
            ValueType::U8 | ValueType::I8 | ValueType::Bool => Some(1),
            ValueType::U16 | ValueType::I16 => Some(2),
            ValueType::U32 | ValueType::I32 | ValueType::F32 => Some(4),
            ValueType::U64 | ValueType::I64 | ValueType::F64 => Some(8),
            ValueType::String | ValueType::Array => None,
        }
    }

    /// The fewest bytes one value of this type can take (an empty string: its length; an empty
    /// array: its element type and count). Counts are checked against this before anything is
    /// read or allocated.
    pub const fn min_size(self) -> usize {
        match self {
            ValueType::String => 8,
            ValueType::Array => 12,
            _ => match self.fixed_size() {
                Some(n) => n,
                None => 1,
            },
        }
    }
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// ggml's type id of a tessera type (what a GGUF tensor info stores).
pub const fn ggml_type_id(dtype: DType) -> u32 {
    match dtype {
        DType::F32 => 0,
        DType::F16 => 1,
        DType::Q4_0 => 2,
        DType::Q4_1 => 3,
        DType::Q5_0 => 6,
        DType::Q5_1 => 7,
        DType::Q8_0 => 8,
        DType::Q2_K => 10,
        DType::Q3_K => 11,
        DType::Q4_K => 12,
        DType::Q5_K => 13,
        DType::Q6_K => 14,
        DType::I32 => 26,
        DType::BF16 => 30,
    }
}

/// The tessera type of a ggml type id, if tessera supports it.
pub const fn dtype_from_ggml(id: u32) -> Option<DType> {
    Some(match id {
        0 => DType::F32,
        1 => DType::F16,
        2 => DType::Q4_0,
        3 => DType::Q4_1,
        6 => DType::Q5_0,
        7 => DType::Q5_1,
        8 => DType::Q8_0,
        10 => DType::Q2_K,
        11 => DType::Q3_K,
        12 => DType::Q4_K,
        13 => DType::Q5_K,
        14 => DType::Q6_K,
        26 => DType::I32,
        30 => DType::BF16,
        _ => return None,
    })
}

/// ggml's name of a type id, for messages about types tessera does not support; `None` for ids
/// ggml never assigned or has retired.
pub const fn ggml_type_name(id: u32) -> Option<&'static str> {
    Some(match id {
        0 => "f32",
        1 => "f16",
        2 => "q4_0",
        3 => "q4_1",
        6 => "q5_0",
        7 => "q5_1",
        8 => "q8_0",
        9 => "q8_1",
        10 => "q2_K",
        11 => "q3_K",
        12 => "q4_K",
        13 => "q5_K",
        14 => "q6_K",
        15 => "q8_K",
        16 => "iq2_xxs",
        17 => "iq2_xs",
        18 => "iq3_xxs",
        19 => "iq1_s",
        20 => "iq4_nl",
        21 => "iq3_s",
        22 => "iq2_s",
        23 => "iq4_xs",
        24 => "i8",
        25 => "i16",
        26 => "i32",
        27 => "i64",
        28 => "f64",
        29 => "iq1_m",
        30 => "bf16",
        34 => "tq1_0",
        35 => "tq2_0",
        39 => "mxfp4",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_type_tags_round_trip() {
        for (i, ty) in ValueType::ALL.iter().enumerate() {
            assert_eq!(ty.tag() as usize, i);
            assert_eq!(ValueType::from_u32(ty.tag()), Some(*ty));
            assert!(ty.min_size() >= 1);
        }
        assert_eq!(ValueType::from_u32(13), None);
        assert_eq!(ValueType::from_u32(u32::MAX), None);
        assert_eq!(ValueType::F64.fixed_size(), Some(8));
        assert_eq!(ValueType::String.fixed_size(), None);
        assert_eq!(ValueType::Array.min_size(), 12);
    }

    #[test]
    fn ggml_ids_round_trip_for_every_dtype() {
        for dtype in DType::ALL {
            let id = ggml_type_id(dtype);
            assert_eq!(dtype_from_ggml(id), Some(dtype));
            assert_eq!(ggml_type_name(id), Some(dtype.name()));
        }
        assert_eq!(dtype_from_ggml(27), None);
        assert_eq!(ggml_type_name(27), Some("i64"));
        assert_eq!(ggml_type_name(4), None);
    }
}
