//! Row kernels for the element-wise, normalisation, softmax and rotary ops: one portable body
//! per kernel ([`bodies`], over the sixteen-lane arrays of [`lanes`]), compiled once per
//! instruction set by [`row_kernels!`] inside `#[target_feature]` functions, where LLVM
//! vectorises it for that set. One source, no intrinsics, every set fast. (A kernel table may
//! still replace one of them where fused multiply-adds pay: the AVX-512 SiLU.)

mod bodies;
mod lanes;
mod math;
mod quantize;

use tessera_core::{BinaryOp, DType, RopeMode, UnaryOp};

/// `y = a op b` over rows of `n` values.
pub type Binary = unsafe fn(op: BinaryOp, n: usize, a: *const f32, b: *const f32, y: *mut f32);
/// `y = a op s` over a row of `n` values.
pub type BinaryScalar = unsafe fn(op: BinaryOp, n: usize, a: *const f32, s: f32, y: *mut f32);
/// `y = f(x)` over a row of `n` values.
pub type Unary = unsafe fn(op: UnaryOp, n: usize, x: *const f32, y: *mut f32);
/// `y = softmax(x * scale + mask)` over a row of `n` values; `mask` may be null.
pub type SoftMax = unsafe fn(n: usize, x: *const f32, mask: *const f32, scale: f32, y: *mut f32);
/// One query row's attention over f32 keys (transposed) and values (see `bodies::attend`):
/// `(d, dv, kv)`, query, keys, values, mask row (or null), scale, scores, result.
pub type Attend =
    unsafe fn((usize, usize, usize), *const f32, *const f32, *const f32, *const f32, f32, *mut f32, *mut f32);
/// NORM or RMS_NORM of a row of `n > 0` values.
pub type Norm = unsafe fn(n: usize, x: *const f32, eps: f32, y: *mut f32);
/// ROPE of a row of `n` values, the first `n_dims` rotated by a precomputed table.
pub type Rope = unsafe fn(mode: RopeMode, n: usize, n_dims: usize, x: *const f32, table: *const f32, y: *mut f32);

/// `sin[i], cos[i]` of `n` angles `theta[i]`.
pub type SinCos = unsafe fn(n: usize, theta: *const f32, sin: *mut f32, cos: *mut f32);
/// Reads a row of `n` values of a type into f32 (dequantizing).
pub type ToF32 = unsafe fn(dtype: DType, n: usize, x: *const u8, y: *mut f32);
/// Writes a row of `n` f32 as a type (quantizing).
pub type FromF32 = unsafe fn(dtype: DType, n: usize, x: *const f32, y: *mut u8);

/// The row kernels of one instruction set. Sources and destinations are raw rows; a
/// destination may be its source (in-place ops).
#[derive(Clone, Copy)]
pub struct RowKernels {
    pub binary: Binary,
    /// `binary` for destinations larger than the caches (same-shape operands); the portable
    /// `binary` where a set has nothing better.
    pub binary_streaming: Binary,
    pub binary_scalar: BinaryScalar,
    pub unary: Unary,
    pub soft_max: SoftMax,
    pub attend: Attend,
    pub norm: Norm,
    pub rms_norm: Norm,
    pub rope: Rope,
    pub sin_cos: SinCos,
    pub to_f32: ToF32,
    pub from_f32: FromF32,
}

/// Defines `$name: RowKernels` from the bodies, each compiled with `$features` enabled.
macro_rules! row_kernels {
    ($(#[$attr:meta])* $name:ident, $($features:literal)?) => {
        $(#[$attr])*
        pub const $name: RowKernels = {
            $(#[target_feature(enable = $features)])?
            unsafe fn binary(op: BinaryOp, n: usize, a: *const f32, b: *const f32, y: *mut f32) {
                // SAFETY: forwarded; the table is only handed out where `$features` exist.
                unsafe { bodies::binary(op, n, a, b, y) }
            }
            $(#[target_feature(enable = $features)])?
            unsafe fn binary_scalar(op: BinaryOp, n: usize, a: *const f32, s: f32, y: *mut f32) {
                // SAFETY: as above.
                unsafe { bodies::binary_scalar(op, n, a, s, y) }
            }
            $(#[target_feature(enable = $features)])?
            unsafe fn unary(op: UnaryOp, n: usize, x: *const f32, y: *mut f32) {
                // SAFETY: as above.
                unsafe { bodies::unary(op, n, x, y) }
            }
            $(#[target_feature(enable = $features)])?
            unsafe fn soft_max(n: usize, x: *const f32, mask: *const f32, scale: f32, y: *mut f32) {
                // SAFETY: as above.
                unsafe { bodies::soft_max(n, x, mask, scale, y) }
            }
            $(#[target_feature(enable = $features)])?
            #[allow(clippy::too_many_arguments)]
            unsafe fn attend(
                dims: (usize, usize, usize),
                q: *const f32,
                keys: *const f32,
                values: *const f32,
                mask: *const f32,
                scale: f32,
                scores: *mut f32,
                y: *mut f32,
            ) {
                // SAFETY: as above.
                unsafe { bodies::attend(dims, q, keys, values, mask, scale, scores, y) }
            }
            $(#[target_feature(enable = $features)])?
            unsafe fn norm(n: usize, x: *const f32, eps: f32, y: *mut f32) {
                // SAFETY: as above.
                unsafe { bodies::norm(n, x, eps, y) }
            }
            $(#[target_feature(enable = $features)])?
            unsafe fn rms_norm(n: usize, x: *const f32, eps: f32, y: *mut f32) {
                // SAFETY: as above.
                unsafe { bodies::rms_norm(n, x, eps, y) }
            }
            $(#[target_feature(enable = $features)])?
            unsafe fn rope(mode: RopeMode, n: usize, n_dims: usize, x: *const f32, table: *const f32, y: *mut f32) {
                // SAFETY: as above.
                unsafe { bodies::rope(mode, n, n_dims, x, table, y) }
            }
            $(#[target_feature(enable = $features)])?
            unsafe fn sin_cos(n: usize, theta: *const f32, sin: *mut f32, cos: *mut f32) {
                // SAFETY: as above.
                unsafe { bodies::sin_cos(n, theta, sin, cos) }
            }
            $(#[target_feature(enable = $features)])?
            unsafe fn to_f32(dtype: DType, n: usize, x: *const u8, y: *mut f32) {
                // SAFETY: as above.
                unsafe { bodies::to_f32(dtype, n, x, y) }
            }
            $(#[target_feature(enable = $features)])?
            unsafe fn from_f32(dtype: DType, n: usize, x: *const f32, y: *mut u8) {
                // SAFETY: as above.
                unsafe { bodies::from_f32(dtype, n, x, y) }
            }
            RowKernels { binary, binary_streaming: binary, binary_scalar, unary, soft_max, attend, norm, rms_norm, rope, sin_cos, to_f32, from_f32 }
        };
    };
}

row_kernels!(
    /// The bodies with the target's baseline features.
    SCALAR,
);
row_kernels!(
    #[cfg(target_arch = "x86_64")]
    AVX2,
    "avx2,fma,f16c"
);
row_kernels!(
    #[cfg(target_arch = "x86_64")]
    AVX512,
    "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c"
);
row_kernels!(
    #[cfg(target_arch = "aarch64")]
    NEON,
    "neon"
);
