//! The GEMM of BF16 weights on AMX tiles (`tdpbf16ps`): 32 weight rows by 32 activation
//! columns held in four 16 x 16 f32 accumulator tiles. One `tdpbf16ps` multiplies a 16 x 32
//! bf16 tile by a 32 x 16 one, 8 times the work of a `vdpbf16ps` per cycle.
//!
//! The tile computes the transposed product: its first operand is 16 activation columns of 32
//! values each (`[k / 32][nr][32]` bf16 panels, one 64-byte row per column), its second the
//! weights as the bf16-pair panels of the AVX-512 BF16 GEMM (`[k / 2][mr]` slots: one 64-byte
//! row holds a pair of `k` values for 16 weight rows). So each accumulator row is 16
//! consecutive output values of one column, which is how the output is laid out.
//!
//! Panels hold `k` in whole blocks of 32 values, zero-padded ([`K_BLOCK`]). Activations are
//! rounded to bf16 (to nearest, ties to even) as in the AVX-512 BF16 GEMM; AMX treats bf16
//! subnormals as zero.
//!
//! The tile registers are configured at the start of every tile and released at its end, so a
//! thread that leaves the GEMM holds no tile state for the operating system to save.

use core::arch::asm;
use core::arch::x86_64::*;

use tessera_core::DType;

use super::bf16_gemm;
use crate::fast::simd::scalar::pack::get_f32;
use crate::fast::simd::{Cols, Rows};

pub const MR: usize = 32;
pub const NR: usize = 32;
/// Values of `k` per tile step; panels are padded to whole steps.
pub const K_BLOCK: usize = 32;
/// Bytes of one 16-row operand tile (16 rows of 64 bytes).
const TILE_BYTES: usize = 1024;

/// `ldtilecfg`'s 64-byte operand: palette 1, eight tiles of 16 rows of 64 bytes.
#[repr(C, align(64))]
struct TileConfig([u8; 64]);

const CONFIG: TileConfig = {
    let mut c = [0u8; 64];
    c[0] = 1;
    let mut t = 0;
    while t < 8 {
        c[16 + 2 * t] = 64; // bytes per row (little-endian u16)
        c[48 + t] = 16; // rows
        t += 1;
    }
    TileConfig(c)
};

/// Slots (pairs of bf16) of `kc` values padded to whole tile steps.
fn padded_slots(kc: usize) -> usize {
    kc.next_multiple_of(K_BLOCK) / 2
}

/// [`crate::fast::simd::GemmTile`] for a 32 x 32 tile: `a` is a panel of 32 weight rows in
/// bf16 pairs, `b` one of 32 activation columns in blocks of 32 bf16, both padded to
/// `kc.div_ceil(32)` steps.
///
/// # Safety
/// As [`crate::fast::simd::GemmTile`]; the processor must have AMX-TILE and AMX-BF16, and the
/// operating system must have let this process use the tile registers.
pub unsafe fn tile(kc: usize, a: *const f32, b: *const f32, c: *mut f32, ldc: usize, accumulate: bool) {
    let steps = kc.div_ceil(K_BLOCK);
    let c_stride = ldc * 4;
    // Accumulators: tmm0 = columns 0-15 x rows 0-15, tmm1 = columns 0-15 x rows 16-31,
    // tmm2 and tmm3 the same for columns 16-31. Operands: tmm4/tmm5 the activations of
    // columns 0-15/16-31, tmm6/tmm7 the weights of rows 0-15/16-31.
    // SAFETY: `a` and `b` hold `steps` steps of the panels described above; the output tile's
    // 32 columns of 32 values at `c`, `ldc` apart, are readable and writable, as the caller
    // guarantees. The tile registers are used by no compiled code.
    unsafe {
        asm!(
            "ldtilecfg [{cfg}]",
            "test {acc:e}, {acc:e}",
            "jz 2f",
            "tileloadd tmm0, [{c} + {cs}*1]",
            "tileloadd tmm1, [{c} + {cs}*1 + 64]",
            "tileloadd tmm2, [{c16} + {cs}*1]",
            "tileloadd tmm3, [{c16} + {cs}*1 + 64]",
            "jmp 3f",
            "2:",
            "tilezero tmm0",
            "tilezero tmm1",
            "tilezero tmm2",
            "tilezero tmm3",
            "3:",
            "tileloadd tmm4, [{b} + {s64}*1]",
            "tileloadd tmm6, [{a} + {s128}*1]",
            "tdpbf16ps tmm0, tmm4, tmm6",
            "tileloadd tmm7, [{a} + {s128}*1 + 64]",
            "tdpbf16ps tmm1, tmm4, tmm7",
            "tileloadd tmm5, [{b} + {s64}*1 + 1024]",
            "tdpbf16ps tmm2, tmm5, tmm6",
            "tdpbf16ps tmm3, tmm5, tmm7",
            "add {a}, 2048",
            "add {b}, 2048",
            "dec {steps}",
            "jnz 3b",
            "tilestored [{c} + {cs}*1], tmm0",
            "tilestored [{c} + {cs}*1 + 64], tmm1",
            "tilestored [{c16} + {cs}*1], tmm2",
            "tilestored [{c16} + {cs}*1 + 64], tmm3",
            "tilerelease",
            cfg = in(reg) CONFIG.0.as_ptr(),
            acc = in(reg) u32::from(accumulate),
            c = in(reg) c,
            c16 = in(reg) c.add(16 * ldc),
            cs = in(reg) c_stride,
            a = inout(reg) a => _,
            b = inout(reg) b => _,
            s64 = in(reg) 64usize,
            s128 = in(reg) 128usize,
            steps = inout(reg) steps => _,
            options(nostack),
        );
    }
}

/// [`crate::fast::simd::PackA`]: the bf16-pair panels of the AVX-512 BF16 GEMM, zero-padded
/// to whole tile steps.
///
/// # Safety
/// As [`crate::fast::simd::PackA`] with BF16 rows, `k0` a multiple of 32 and `dst` valid for
/// `kc.next_multiple_of(32) / 2 * mr` slots; AVX-512F.
#[target_feature(enable = "avx512f")]
pub unsafe fn pack_a(rows: &Rows, k0: usize, kc: usize, mr: usize, dst: *mut f32) {
    debug_assert!(rows.dtype == DType::BF16 && mr == MR && k0.is_multiple_of(K_BLOCK));
    let written = kc.div_ceil(2);
    // SAFETY: as the caller guarantees; the padding slots follow the packed ones.
    unsafe {
        bf16_gemm::pack_a(rows, k0, kc, mr, dst);
        core::ptr::write_bytes(dst.add(written * MR), 0, (padded_slots(kc) - written) * MR);
    }
}

/// [`crate::fast::simd::PackB`] into `[kc / 32][32 columns][32]` bf16 panels, rounded to
/// nearest (ties to even), missing columns and values zero.
///
/// # Safety
/// As [`crate::fast::simd::PackB`] with `k0` a multiple of 32 and `dst` valid for
/// `kc.next_multiple_of(32) / 2 * nr` slots; AVX-512F and AVX-512 BF16.
#[target_feature(enable = "avx512f,avx512bf16")]
pub unsafe fn pack_b(cols: &Cols, k0: usize, kc: usize, nr: usize, dst: *mut f32) {
    debug_assert!(nr == NR && k0.is_multiple_of(K_BLOCK));
    let dst = dst.cast::<u8>();
    for step in 0..kc.div_ceil(K_BLOCK) {
        let kk = step * K_BLOCK;
        let n = (kc - kk).min(K_BLOCK);
        for j in 0..NR {
            // SAFETY: row `j` of step `step` of the panel.
            let out = unsafe { dst.add(step * TILE_BYTES * 2 + j * 64) };
            let values = if j >= cols.count {
                _mm512_setzero_si512()
            } else if cols.k_stride == 4 {
                // SAFETY: values `k0 + kk..k0 + kk + n` of column `j` exist; masked lanes are
                // not read.
                unsafe {
                    let x = cols.ptr.add(j * cols.col_stride + 4 * (k0 + kk)).cast::<f32>();
                    let lo = _mm512_maskz_loadu_ps(lanes(n), x);
                    let hi = _mm512_maskz_loadu_ps(lanes(n.saturating_sub(16)), x.add(16));
                    core::mem::transmute::<__m512bh, __m512i>(_mm512_cvtne2ps_pbh(hi, lo))
                }
            } else {
                let mut v = [0f32; K_BLOCK];
                for (i, vi) in v.iter_mut().enumerate().take(n) {
                    // SAFETY: value `k0 + kk + i` of column `j` exists.
                    *vi = unsafe { get_f32(cols.ptr.add((k0 + kk + i) * cols.k_stride + j * cols.col_stride)) };
                }
                // SAFETY: 32 f32 in, 32 bf16 out.
                unsafe {
                    core::mem::transmute::<__m512bh, __m512i>(_mm512_cvtne2ps_pbh(
                        _mm512_loadu_ps(v.as_ptr().add(16)),
                        _mm512_loadu_ps(v.as_ptr()),
                    ))
                }
            };
            // SAFETY: see `out`.
            unsafe { _mm512_storeu_si512(out.cast(), values) };
        }
    }
}

/// The mask of the first `n` (at most 16) lanes.
fn lanes(n: usize) -> __mmask16 {
    if n >= 16 {
        0xffff
    } else {
        (1u16 << n) - 1
    }
}
