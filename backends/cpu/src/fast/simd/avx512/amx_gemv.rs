//! Matrix-vector products of BF16 weights on AMX tiles: up to 16 weight rows by up to 8
//! columns per `tdpbf16ps`. The weight tile is loaded straight from the rows (16 rows of 32
//! values, one row stride apart), so the weights stream once, unpacked; the activations come
//! rounded to bf16 in pairs interleaved across the columns ([`crate::fast::simd::GemvKernels`]'s
//! `bf16_paired`), which is the layout of the second operand of `tdpbf16ps`.
//!
//! Two accumulators take alternate steps of 32 values, so consecutive `tdpbf16ps` do not wait
//! for each other; the last one or two steps (a partial step zero-padded) run from a copy of
//! the rows' tails. The products are memory-bound: a tile of 16 x 8 outputs costs one
//! `tdpbf16ps` per 1 KB of weights.

use core::arch::asm;

use tessera_core::DType;

use crate::fast::simd::Rows;

/// Values of `k` per step.
const STEP: usize = 32;
/// The activations' padding: whole pairs of steps.
pub const K_PAD: usize = 2 * STEP;
/// Weight rows per tile.
const TILE_ROWS: usize = 16;

/// `ldtilecfg`'s operand for `rows` weight rows by `n` columns: tmm0/tmm1 the accumulators,
/// tmm2/tmm4 the weights of two steps, tmm3/tmm5 the activations of those steps.
#[repr(C, align(64))]
struct TileConfig([u8; 64]);

fn config(rows: usize, n: usize) -> TileConfig {
    let mut c = [0u8; 64];
    c[0] = 1;
    let mut set = |t: usize, rows: usize, bytes: usize| {
        c[16 + 2 * t] = bytes as u8;
        c[48 + t] = rows as u8;
    };
    for t in [0, 1] {
        set(t, rows, 4 * n);
    }
    for t in [2, 4] {
        set(t, rows, 64);
    }
    for t in [3, 5] {
        set(t, STEP / 2, 4 * n);
    }
    TileConfig(c)
}

/// [`crate::fast::simd::GemvBf16`] with `x` in pairs interleaved across the `n` columns,
/// zero-padded to a multiple of [`K_PAD`] values (`ldx` unused).
///
/// # Safety
/// As [`crate::fast::simd::GemvBf16`] for that layout, `n <= 8`; the processor must have
/// AMX-TILE and AMX-BF16, and the operating system must have let this process use them.
pub unsafe fn bf16(k: usize, rows: &Rows, x: *const u16, _ldx: usize, n: usize, y: *mut f32, ldy: usize) {
    debug_assert!(rows.dtype == DType::BF16 && (1..=8).contains(&n));
    let pairs = k / (2 * STEP);
    let main = pairs * 2 * STEP;
    let x_pair_bytes = 2 * (STEP / 2) * n * 4;
    for r0 in (0..rows.count).step_by(TILE_ROWS) {
        let count = (rows.count - r0).min(TILE_ROWS);
        let w = rows.ptr.wrapping_add(r0 * rows.stride);
        // The values past the last whole pair of steps, zero-padded to one pair.
        let mut tail = [0u8; TILE_ROWS * 2 * STEP * 2];
        let rest = k - main;
        if rest > 0 {
            for r in 0..count {
                // SAFETY: row `r0 + r` holds values `main..k`.
                unsafe {
                    core::ptr::copy_nonoverlapping(
                        w.add(r * rows.stride + 2 * main),
                        tail.as_mut_ptr().add(r * 4 * STEP),
                        2 * rest,
                    )
                };
            }
        }
        let cfg = config(count, n);
        let mut c = [[0f32; 8]; 2 * TILE_ROWS];
        // SAFETY: the rows hold `main` values from `w`, the tail copy one pair of steps; `x`
        // holds `pairs + 1` pairs of steps of `n` interleaved columns when `rest > 0`, else
        // `pairs`; `c` holds both accumulators (32 bytes a row). The tile registers are used
        // by no compiled code.
        unsafe {
            asm!(
                "ldtilecfg [{cfg}]",
                "tilezero tmm0",
                "tilezero tmm1",
                "test {pairs}, {pairs}",
                "jz 3f",
                "2:",
                "tileloadd tmm2, [{w} + {ws}*1]",
                "tileloadd tmm3, [{x} + {xs}*1]",
                "tdpbf16ps tmm0, tmm2, tmm3",
                "tileloadd tmm4, [{w} + {ws}*1 + 64]",
                "tileloadd tmm5, [{x2} + {xs}*1]",
                "tdpbf16ps tmm1, tmm4, tmm5",
                "add {w}, 128",
                "add {x}, {xp}",
                "add {x2}, {xp}",
                "dec {pairs}",
                "jnz 2b",
                "3:",
                "test {rest}, {rest}",
                "jz 4f",
                "tileloadd tmm2, [{t} + {ts}*1]",
                "tileloadd tmm3, [{x} + {xs}*1]",
                "tdpbf16ps tmm0, tmm2, tmm3",
                "tileloadd tmm4, [{t} + {ts}*1 + 64]",
                "tileloadd tmm5, [{x2} + {xs}*1]",
                "tdpbf16ps tmm1, tmm4, tmm5",
                "4:",
                "tilestored [{c} + {cs}*1], tmm0",
                "tilestored [{c2} + {cs}*1], tmm1",
                "tilerelease",
                cfg = in(reg) cfg.0.as_ptr(),
                pairs = inout(reg) pairs => _,
                w = inout(reg) w => _,
                ws = in(reg) rows.stride,
                x = inout(reg) x => _,
                x2 = inout(reg) x.cast::<u8>().add(x_pair_bytes / 2) => _,
                xs = in(reg) 4 * n,
                xp = in(reg) x_pair_bytes,
                rest = in(reg) rest,
                t = in(reg) tail.as_ptr(),
                ts = in(reg) 4 * STEP,
                c = in(reg) c.as_mut_ptr(),
                c2 = in(reg) c.as_mut_ptr().add(TILE_ROWS),
                cs = in(reg) 32usize,
                options(nostack),
            );
        }
        let (even, odd) = c.split_at(TILE_ROWS);
        for (r, (e, o)) in even.iter().zip(odd).enumerate().take(count) {
            for (j, (p, q)) in e.iter().zip(o).enumerate().take(n) {
                // SAFETY: output `r0 + r` of column `j`.
                unsafe { *y.add(j * ldy + r0 + r) = p + q };
            }
        }
    }
}
