//! Kernel tables: for one instruction set, the micro-kernels, packers and quantizers the
//! matrix-multiplication drivers call through function pointers. `dispatch` picks the table.
//!
//! Memory layouts shared by the drivers and the kernels (all little-endian):
//! - packed float weights ("A"): `[k][mr]` f32 for a panel of `mr` rows, zero-padded rows;
//! - packed float activations ("B"): `[k][nr]` f32 for a panel of `nr` columns, zero-padded;
//! - the same panels for native bf16 dot products ([`GemmKernels::k_pack`] = 2): `[k / 2][mr]`
//!   and `[k / 2][nr]` slots of two bf16 (value `2p` in the low half, `2p + 1` in the high
//!   half, a missing last value zero);
//! - packed int8 weights: per block of 32 values, `[8 groups][mr rows][4 values]` bytes, then
//!   `mr` f32 scales ([`qa_block_bytes`]);
//! - packed int8 activations: per block, `[nr][32]` i8 values, `nr` f32 scales, `nr` i32
//!   corrections ([`qb_block_bytes`]);
//! - int8 activations for the matrix-vector path: per column, `nblocks` blocks of 32 i8
//!   values, then the `nblocks` f32 scales, then the `nblocks` i32 corrections
//!   ([`QvColumn`]), so that kernels can load the scales of 16 blocks at once; a table's
//!   [`GemvKernels::arrange`] may then reorder them within the column for its kernels.
//!
//! The correction of a block is `-bias * sum(q)`: kernels that take weights as unsigned bytes
//! (`w + bias`, for `vpdpbusd`, or Q4_0's stored nibbles) start each block's integer sum from
//! it ([`GemvKernels::bias`]).
//!
//! K-quant weights (Q4_K, Q5_K, Q6_K) take their own int8 layouts, because their values carry
//! a scale and a min per 16 or 32 values (value = `scale * q - min`, `q` unsigned):
//! - packed K-quant weights, per super-block (8 blocks of 32 values): per block
//!   `[8 groups][mr rows][4 values]` unsigned bytes, then two vectors of `mr` f32, the scales
//!   of values 0-15 and of 16-31; after the 8 blocks the mins, `[4][mr]` i32 each holding the
//!   6-bit mins of blocks `2p` and `2p + 1` as an i16 pair, then `mr` f32 `dmin` (Q6_K: zeros;
//!   its min is `32 * scale`);
//! - packed K-quant activations, per super-block: per block `[nr][32]` i8 values, then per
//!   column two i32 starts `-32 * sum(q)` over values 0-15 and 16-31 (where Q6_K's integer
//!   sums start); after the 8 blocks, `nr` f32 scales `d` (one per super-block), then per
//!   column 4 i32, each the sums of blocks `2p` and `2p + 1` as an i16 pair.
//!
//!   Both take [`kq_superblock_bytes`] with the offsets of [`kq_block_at`] and
//!   [`kq_tail_at`]; the mins of a super-block meet the activations' block sums in four
//!   `vpdpwssd` per register, once per super-block.
//! - K-quant activations for the matrix-vector path, as ggml's Q8_K: per column, the i8
//!   values of its super-blocks (256 values each, one scale per super-block), then per
//!   super-block the sums of each 16 values (16 i16), then the f32 scales ([`K8Column`]).

#[cfg(target_arch = "x86_64")]
pub mod avx2;
#[cfg(target_arch = "x86_64")]
pub mod avx512;
#[cfg(target_arch = "aarch64")]
pub mod neon;
pub mod scalar;

use tessera_core::DType;

use super::vector::RowKernels;

/// Values per quantized block (Q8_0, Q4_0 and the activations' 8-bit blocks).
pub const QK: usize = 32;

/// Bytes of one block of a packed int8 weight panel of `mr` rows.
pub const fn qa_block_bytes(mr: usize) -> usize {
    mr * (QK + 4)
}

/// Bytes of one block of a packed int8 activation panel of `nr` columns.
pub const fn qb_block_bytes(nr: usize) -> usize {
    nr * (QK + 8)
}

/// Bytes per block of a matrix-vector int8 activation column.
pub const QV_BLOCK_BYTES: usize = QK + 8;

/// Bytes of one super-block of a packed K-quant panel of `n` rows (weights) or columns
/// (activations).
pub const fn kq_superblock_bytes(n: usize) -> usize {
    n * (8 * (QK + 8) + 20)
}

/// Where block `b` (of 8) of a packed K-quant super-block of `n` rows or columns starts; its
/// scales (weights) or starts (activations) follow its `32 n` values.
pub const fn kq_block_at(n: usize, b: usize) -> usize {
    b * n * (QK + 8)
}

/// Where the mins (weights) or the scales and block sums (activations) of a packed K-quant
/// super-block of `n` rows or columns start, after its 8 blocks.
pub const fn kq_tail_at(n: usize) -> usize {
    kq_block_at(n, 8)
}

/// Bytes per super-block of a matrix-vector K-quant activation column.
pub const K8_SUPERBLOCK_BYTES: usize = 256 + 32 + 4;

/// A K-quant activation column of the matrix-vector path (see the module docs).
#[derive(Clone, Copy)]
#[cfg_attr(not(any(target_arch = "x86_64", target_arch = "aarch64")), allow(dead_code))]
pub struct K8Column {
    /// Super-block `s`'s 256 values at `q + 256 s` (in an order the kernel set may choose per
    /// weight type; the sums are always those of values `16i..16i + 16`).
    pub q: *const u8,
    /// Super-block `s`'s sums of each 16 values (16 i16) at `s + 32 s`.
    pub s: *const u8,
    /// Super-block `s`'s scale at `d + s`.
    pub d: *const f32,
}

#[cfg_attr(not(any(target_arch = "x86_64", target_arch = "aarch64")), allow(dead_code))]
impl K8Column {
    /// The column of `superblocks` super-blocks that starts at `x`.
    pub fn at(x: *const u8, superblocks: usize) -> K8Column {
        K8Column { q: x, s: x.wrapping_add(256 * superblocks), d: x.wrapping_add(288 * superblocks).cast() }
    }

    /// Writes super-block `sb`'s sums and scale (its values go to `q + 256 sb` directly).
    ///
    /// # Safety
    /// The column must be writable and hold super-block `sb`.
    pub unsafe fn put(&self, sb: usize, sums: [i16; 16], d: f32) {
        // SAFETY: as the caller guarantees.
        unsafe {
            core::ptr::write_unaligned(self.s.add(32 * sb).cast_mut().cast::<[i16; 16]>(), sums);
            core::ptr::write_unaligned(self.d.add(sb).cast_mut(), d);
        }
    }
}

/// The kinds of K-quant rows, as the matrix-vector kernels' const parameters.
#[cfg_attr(not(any(target_arch = "x86_64", target_arch = "aarch64")), allow(dead_code))]
pub mod kind {
    pub const Q4: u8 = 4;
    pub const Q5: u8 = 5;
    pub const Q6: u8 = 6;
}

/// Calls `$cols::<KIND, N>(nblocks, rows, x, ldx, y, ldy)` for the kind of `rows` (Q4_K, Q5_K
/// or Q6_K) and `N = $n`, one of 1 to 8: the kernels of the matrix-vector path are generic in
/// both.
#[cfg_attr(not(any(target_arch = "x86_64", target_arch = "aarch64")), allow(unused_macros))]
macro_rules! kquant_columns {
    ($cols:ident, $n:expr, $nblocks:expr, $rows:expr, $x:expr, $ldx:expr, $y:expr, $ldy:expr) => {{
        use $crate::fast::simd::kind::{Q4, Q5, Q6};
        let (n, nblocks, rows, x, ldx, y, ldy) = ($n, $nblocks, $rows, $x, $ldx, $y, $ldy);
        macro_rules! by_columns {
            ($t:ident) => {
                match n {
                    1 => $cols::<$t, 1>(nblocks, rows, x, ldx, y, ldy),
                    2 => $cols::<$t, 2>(nblocks, rows, x, ldx, y, ldy),
                    3 => $cols::<$t, 3>(nblocks, rows, x, ldx, y, ldy),
                    4 => $cols::<$t, 4>(nblocks, rows, x, ldx, y, ldy),
                    5 => $cols::<$t, 5>(nblocks, rows, x, ldx, y, ldy),
                    6 => $cols::<$t, 6>(nblocks, rows, x, ldx, y, ldy),
                    7 => $cols::<$t, 7>(nblocks, rows, x, ldx, y, ldy),
                    _ => $cols::<$t, 8>(nblocks, rows, x, ldx, y, ldy),
                }
            };
        }
        match rows.dtype {
            tessera_core::DType::Q4_K => by_columns!(Q4),
            tessera_core::DType::Q5_K => by_columns!(Q5),
            _ => by_columns!(Q6),
        }
    }};
}
#[cfg_attr(not(any(target_arch = "x86_64", target_arch = "aarch64")), allow(unused_imports))]
pub(crate) use kquant_columns;

/// An int8 activation column of the matrix-vector path (see the module docs).
#[derive(Clone, Copy)]
pub struct QvColumn {
    /// Block `b`'s 32 values at `q + 32 b`.
    pub q: *const u8,
    /// Block `b`'s f32 scale at `d + 4 b`.
    pub d: *const u8,
    /// Block `b`'s i32 correction at `c + 4 b` (read by kernels with unsigned weights).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub c: *const u8,
}

impl QvColumn {
    /// The column of `nblocks` blocks that starts at `x`.
    pub fn at(x: *const u8, nblocks: usize) -> QvColumn {
        QvColumn { q: x, d: x.wrapping_add(QK * nblocks), c: x.wrapping_add((QK + 4) * nblocks) }
    }

    /// Where a quantizer writes the column of `nblocks` blocks that starts at `x`.
    pub fn out(x: *mut u8, nblocks: usize) -> QuantOut {
        QuantOut {
            q: x,
            q_stride: QK,
            d: x.wrapping_add(QK * nblocks),
            c: x.wrapping_add((QK + 4) * nblocks),
            dc_stride: 4,
        }
    }
}

/// Rows of a weight matrix: `count` rows of type `dtype`, `stride` bytes apart, each with its
/// values densely packed.
#[derive(Clone, Copy)]
pub struct Rows {
    pub ptr: *const u8,
    pub stride: usize,
    pub count: usize,
    pub dtype: DType,
}

/// Columns of an f32 activation matrix: value `k` of column `j` is at
/// `ptr + k * k_stride + j * col_stride` (any strides).
#[derive(Clone, Copy)]
pub struct Cols {
    pub ptr: *const u8,
    pub k_stride: usize,
    pub col_stride: usize,
    pub count: usize,
}

/// Where a quantizer writes block `b`: values at `q + b * q_stride`, the scale (f32) at
/// `d + b * dc_stride`, the correction (i32) at `c + b * dc_stride`.
#[derive(Clone, Copy)]
pub struct QuantOut {
    pub q: *mut u8,
    pub q_stride: usize,
    pub d: *mut u8,
    pub c: *mut u8,
    pub dc_stride: usize,
}

/// `c[j * ldc + i] (+)= sum_k a[k * mr + i] * b[k * nr + j]` for a whole `mr x nr` tile, over
/// `kc` steps: the sum starts from zero and is added to `c` (or stored, unless `accumulate`).
pub type GemmTile = unsafe fn(kc: usize, a: *const f32, b: *const f32, c: *mut f32, ldc: usize, accumulate: bool);
/// Packs values `k0..k0 + kc` of up to `mr` weight rows (F32, F16 or BF16) as `[kc][mr]` f32.
pub type PackA = unsafe fn(rows: &Rows, k0: usize, kc: usize, mr: usize, dst: *mut f32);
/// Packs values `k0..k0 + kc` of up to `nr` activation columns as `[kc][nr]` f32.
pub type PackB = unsafe fn(cols: &Cols, k0: usize, kc: usize, nr: usize, dst: *mut f32);
/// The int8 tile: like [`GemmTile`] over `nblocks` blocks of packed int8 panels.
pub type QGemmTile = unsafe fn(nblocks: usize, a: *const u8, b: *const u8, c: *mut f32, ldc: usize, accumulate: bool);
/// Packs blocks `b0..b0 + nblocks` of up to `mr` Q8_0/Q4_0 weight rows as an int8 panel;
/// `unsigned` stores `w + bias` as unsigned bytes instead of `w`.
pub type PackAQ = unsafe fn(rows: &Rows, b0: usize, nblocks: usize, mr: usize, unsigned: bool, dst: *mut u8);
/// Packs blocks `b0..b0 + nblocks` (`b0` and `nblocks` multiples of 8: whole super-blocks) of
/// up to `mr` K-quant weight rows as a K-quant int8 panel.
pub type PackAK = unsafe fn(rows: &Rows, b0: usize, nblocks: usize, mr: usize, dst: *mut u8);
/// Quantizes `nblocks * 32` f32 values (`nblocks` a multiple of 8) into K-quant activation
/// blocks with one scale per 256 values, and their half sums.
pub type KQuantize = unsafe fn(x: *const f32, nblocks: usize, out: &scalar::kquant::KOut);
/// Quantizes `superblocks * 256` f32 values into a [`K8Column`] at `out`, its values in the
/// order the set's matrix-vector kernel reads them for rows of type `weights`.
pub type K8Quantize = unsafe fn(x: *const f32, superblocks: usize, weights: DType, out: *mut u8);
/// Quantizes `nblocks * 32` f32 values into 8-bit blocks (`d = max|x| / 127`, `q = round(x / d)`).
pub type Quantize = unsafe fn(x: *const f32, nblocks: usize, bias: i32, out: &QuantOut);
/// Matrix-vector products of float weights: `y[j * ldy + r] = dot(row r, x[j * ldx..][..k])`
/// for every row of `rows` and `j < n` (n <= 8).
pub type Gemv = unsafe fn(k: usize, rows: &Rows, x: *const f32, ldx: usize, n: usize, y: *mut f32, ldy: usize);
/// Matrix-vector products of BF16 weights with activations already rounded to bf16: columns of
/// `k` bf16 values `ldx` values apart, otherwise as [`Gemv`].
pub type GemvBf16 = unsafe fn(k: usize, rows: &Rows, x: *const u16, ldx: usize, n: usize, y: *mut f32, ldy: usize);
/// Reorders a quantized activation column of `nblocks` blocks ([`QvColumn`]) in place into the
/// order a table's int8 matrix-vector kernels read.
pub type ArrangeColumn = unsafe fn(x: *mut u8, nblocks: usize);
/// Matrix-vector products of int8 weights (Q8_0/Q4_0, or K-quants with [`K8Column`]s) with
/// quantized activation columns `ldx` bytes apart.
pub type QGemv = unsafe fn(nblocks: usize, rows: &Rows, x: *const u8, ldx: usize, n: usize, y: *mut f32, ldy: usize);

/// Float GEMM: tile size, micro-kernel and packers.
#[derive(Clone, Copy)]
pub struct GemmKernels {
    pub mr: usize,
    pub nr: usize,
    /// Values of `k` per 4-byte slot of a packed panel: 1 (f32) or 2 (a pair of bf16).
    pub k_pack: usize,
    /// Panels hold `k` in whole blocks of this many values, zero-padded (a multiple of
    /// `k_pack`; `k` ranges start at multiples of it): `kc.next_multiple_of(k_block) / k_pack`
    /// slots per row or column.
    pub k_block: usize,
    pub tile: GemmTile,
    pub pack_a: PackA,
    pub pack_b: PackB,
}

impl GemmKernels {
    /// A GEMM on f32 panels: one value of `k` per slot, no padding.
    pub const fn f32(mr: usize, nr: usize, tile: GemmTile, pack_a: PackA, pack_b: PackB) -> GemmKernels {
        GemmKernels { mr, nr, k_pack: 1, k_block: 1, tile, pack_a, pack_b }
    }
}

/// Int8 GEMM for Q8_0/Q4_0 weights.
#[derive(Clone, Copy)]
pub struct QGemmKernels {
    pub mr: usize,
    pub nr: usize,
    pub tile: QGemmTile,
    pub pack_a: PackAQ,
    /// A tile for Q4_0 panels packed as their stored nibbles (unsigned, bias 8), where the set
    /// has one; `tile` takes every other panel.
    pub q4_0_tile: Option<QGemmTile>,
}

/// The int8 GEMM of K-quant weights. The tiles take K-quant panels; `tile_halves` applies a
/// scale per 16 values (Q6_K), `tile` one per 32 (Q4_K, Q5_K, whose halves share it).
#[derive(Clone, Copy)]
pub struct KQuantKernels {
    pub mr: usize,
    pub nr: usize,
    pub tile: QGemmTile,
    pub tile_halves: QGemmTile,
    pub pack_a: PackAK,
    /// The GEMM's activation quantizer.
    pub quantize: KQuantize,
}

/// Matrix-vector products of K-quant weights with [`K8Column`]s, and their quantizer.
#[derive(Clone, Copy)]
pub struct KQuantGemv {
    pub gemv: QGemv,
    pub quantize: K8Quantize,
}

/// Matrix-vector kernels, one per weight type.
#[derive(Clone, Copy)]
pub struct GemvKernels {
    pub f32: Gemv,
    pub f16: Gemv,
    pub bf16: Gemv,
    /// BF16 weights on native bf16 dot products, where the set has them: the driver then
    /// rounds the activations to bf16 once per product and calls this instead of `bf16`.
    pub bf16_rounded: Option<GemvBf16>,
    /// The layout `bf16_rounded` reads the rounded activations in.
    pub bf16_columns: Bf16Columns,
    pub q8_0: QGemv,
    pub q4_0: QGemv,
    /// The bias `q8_0` and `q4_0` take their weights with: the activation columns they read
    /// carry the correction `-bias * sum(q)` of each block ([`QvColumn::c`]); 0 for kernels
    /// that take signed weights and ignore it.
    pub q8_0_bias: i32,
    pub q4_0_bias: i32,
    /// Applied to every activation column after quantizing, before `q8_0`/`q4_0` read it.
    pub arrange: ArrangeColumn,
    /// K-quant weights on int8 dot products, where the set has them (others dequantize).
    pub kquant: Option<KQuantGemv>,
}

impl GemvKernels {
    /// The bias of `q8_0` (Q8_0 weights) or `q4_0` (any other type).
    pub fn bias(&self, dtype: DType) -> i32 {
        if dtype == DType::Q4_0 {
            self.q4_0_bias
        } else {
            self.q8_0_bias
        }
    }
}

/// How the matrix-vector driver lays out the bf16-rounded activations of a product.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Bf16Columns {
    /// Column `j`'s `k` values in order at `x + j * ldx`.
    Separate,
    /// Pairs of values interleaved across the `n` columns: values `2p` and `2p + 1` of column
    /// `j` at `x + 2 (p n + j)`, zero-padded to a multiple of `pad` values (the layout of the
    /// second operand of AMX's `tdpbf16ps`).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    Paired { pad: usize },
}

/// [`ArrangeColumn`] for kernels that read columns as they are quantized.
///
/// # Safety
/// None needed: nothing is read or written.
pub unsafe fn as_quantized(_x: *mut u8, _nblocks: usize) {}

/// Everything the fast MUL_MAT needs on one instruction set.
#[derive(Clone, Copy)]
pub struct Kernels {
    /// Printed by the bench and the `features` extension: "avx512-vnni", "avx2", "scalar", ...
    pub name: &'static str,
    pub gemm: GemmKernels,
    /// The GEMM of BF16 weights: native bf16 dot products where the set has them (`k_pack` 2:
    /// activations rounded to bf16, as `gemv.bf16` then rounds them too), else `gemm`, which
    /// widens the weights to f32.
    pub gemm_bf16: GemmKernels,
    pub qgemm: QGemmKernels,
    pub gemv: GemvKernels,
    pub quantize: Quantize,
    /// Element-wise, normalisation, softmax and rotary row kernels.
    pub rows: RowKernels,
    /// Int8 kernels for K-quant weights, where the set has them; without them K-quant
    /// weights are dequantized to f32 and take the float kernels.
    pub kquant: Option<KQuantKernels>,
    /// Whether the int8 kernels take weights as unsigned bytes `w + bias` (`vpdpbusd`
    /// multiplies unsigned by signed bytes); otherwise weights stay signed.
    pub unsigned_weights: bool,
}

impl Kernels {
    /// Whether the int8 GEMM packs weights of `dtype` as unsigned bytes.
    pub fn packs_unsigned(&self, dtype: DType) -> bool {
        self.unsigned_weights || (dtype == DType::Q4_0 && self.qgemm.q4_0_tile.is_some())
    }

    /// The bias added to weights of `dtype` by the unsigned int8 GEMM kernels (0 when signed).
    pub fn weight_bias(&self, dtype: DType) -> i32 {
        match (self.packs_unsigned(dtype), dtype) {
            (true, DType::Q8_0) => 128,
            (true, DType::Q4_0) => 8,
            _ => 0,
        }
    }
}
