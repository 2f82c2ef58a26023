//! The SPIR-V of every shader, compiled from `shaders/*.comp` by
//! `scripts/build-vulkan-shaders.sh` and embedded here.

macro_rules! shaders {
    ($($variant:ident => $file:literal,)*) => {
        /// A compute shader of the backend.
        #[derive(Clone, Copy, PartialEq, Eq, Debug)]
        pub(crate) enum Shader {
            $($variant,)*
        }

        impl Shader {
            pub(crate) const ALL: &'static [Shader] = &[$(Shader::$variant,)*];

            fn bytes(self) -> &'static [u8] {
                match self {
                    $(Shader::$variant => include_bytes!(concat!("../shaders/bin/", $file, ".spv")),)*
                }
            }
        }
    };
}

shaders! {
    Unary => "unary",
    Binary => "binary",
    UnaryF32 => "unary_f32",
    BinaryF32 => "binary_f32",
    MulMatCoopmatF16 => "mul_mat_coopmat_f16",
    MulMatCoopmatBf16 => "mul_mat_coopmat_bf16",
    MulMatCm2 => "mul_mat_cm2_128x128",
    MulMatCm2Wide => "mul_mat_cm2_128x256",
    MulMatCm2Bf16 => "mul_mat_cm2_bf16_128x128",
    MulMatCm2Bf16Wide => "mul_mat_cm2_bf16_128x256",
    MulMatTiledF32 => "mul_mat_tiled_f32",
    MulMatTiledF16 => "mul_mat_tiled_f16",
    MulMatTiledBf16 => "mul_mat_tiled_bf16",
    SumRows => "sum_rows",
    Norm => "norm",
    SoftMax => "soft_max",
    SoftMaxF32 => "rows_f32_soft_max",
    NormF32 => "rows_f32_norm",
    SoftMaxF32Subgroup => "rows_f32_soft_max_sg",
    NormF32Subgroup => "rows_f32_norm_sg",
    Argmax => "argmax",
    Rope => "rope",
    Concat => "concat",
    Im2Col => "im2col",
    Pool2d => "pool2d",
    Copy => "copy",
    Quantize => "quantize",
    GetRows => "get_rows",
    SetRows => "set_rows",
    FlashAttn => "flash_attn",
    MulMat => "mul_mat",
    MulMatVec => "mul_mat_vec",
    MulMatVecQ8 => "mul_mat_vec_q8",
}

impl Shader {
    /// Whether the shader adds a bias row (source 2) to what it stores when `i[3]` is 1.
    pub(crate) fn adds_bias(self) -> bool {
        matches!(self, Shader::MulMatTiledF32 | Shader::MulMatTiledF16 | Shader::MulMatTiledBf16)
    }

    /// The shader's SPIR-V words (copied out of the embedded bytes, which carry no alignment).
    pub(crate) fn spirv(self) -> Vec<u32> {
        self.bytes().chunks_exact(4).map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]])).collect()
    }
}
