//! The arguments of one dispatch, laid out as `Args` in `shaders/common.glsl` (std430).

use tessera_core::{DType, TensorView};

/// A tensor as the shaders address it: its buffer device address, byte strides, sizes and
/// type code.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq)]
pub(crate) struct TensorDesc {
    pub data: u64,
    pub nb: [u64; 4],
    pub ne: [u32; 4],
    pub dtype: u32,
    pub pad: u32,
}

/// Everything a dispatch reads besides tensor data: 384 bytes.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub(crate) struct Args {
    pub dst: TensorDesc,
    pub src: [TensorDesc; 4],
    pub i: [i32; 8],
    pub f: [f32; 8],
}

/// Bytes between the `Args` of successive dispatches in an argument buffer.
pub(crate) const ARGS_STRIDE: usize = std::mem::size_of::<Args>();

const _: () = assert!(std::mem::size_of::<TensorDesc>() == 64 && ARGS_STRIDE == 384);

/// The shaders' code for a type (`T_*` in common.glsl).
pub(crate) fn dtype_code(dtype: DType) -> u32 {
    match dtype {
        DType::F32 => 0,
        DType::F16 => 1,
        DType::BF16 => 2,
        DType::I32 => 3,
        DType::Q8_0 => 4,
        DType::Q4_0 => 5,
        DType::Q4_K => 6,
        DType::Q5_K => 7,
        DType::Q6_K => 8,
        DType::Q4_1 => 9,
        DType::Q5_0 => 10,
        DType::Q5_1 => 11,
        DType::Q2_K => 12,
        DType::Q3_K => 13,
    }
}

impl TensorDesc {
    /// `view` at device address `data`; `None` when a size or stride does not fit the
    /// shaders' 32-bit sizes (the validation refuses such nodes first).
    pub(crate) fn new(data: u64, view: &TensorView) -> Option<TensorDesc> {
        TensorDesc::from_parts(data, view.dtype, view.ne, view.nb)
    }

    /// A tensor of `dtype`, sizes `ne` and byte strides `nb` at device address `data`; `None`
    /// when a size or stride does not fit the shaders' 32-bit sizes.
    pub(crate) fn from_parts(data: u64, dtype: DType, ne: [usize; 4], nb: [usize; 4]) -> Option<TensorDesc> {
        let mut desc = TensorDesc { data, dtype: dtype_code(dtype), ..TensorDesc::default() };
        for d in 0..4 {
            desc.ne[d] = u32::try_from(ne[d]).ok()?;
            desc.nb[d] = u64::try_from(nb[d]).ok()?;
        }
        Some(desc)
    }

    pub(crate) fn nelements(&self) -> u64 {
        self.ne.iter().map(|&n| u64::from(n)).product()
    }
}

impl Args {
    /// The bytes of the argument block as the shaders read them.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        // SAFETY: `Args` is `repr(C)` plain data without padding (checked by the size
        // assertion above: every field is 4 or 8 bytes and sizes add up), so all its bytes
        // are initialised.
        unsafe { std::slice::from_raw_parts((self as *const Args).cast::<u8>(), ARGS_STRIDE) }
    }
}
