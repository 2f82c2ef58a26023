//! K-quant super-blocks as the int8 kernels take them: 256 unsigned values and, per 16
//! values, a scale and a min with value = `scale * q - min`. This regroups ggml's formulas
//! (Q6_K's `d * sc * (q - 32)` becomes `scale = d * sc`, `min = 32 * scale`), so products
//! through it differ from the dequantized values only by rounding.
//!
//! Also the portable packer of K-quant weight panels (edges of the SIMD packers) and the
//! layout of K-quant activation blocks.

use half::f16;
use tessera_core::kquant::{scale_min, QK_K};
use tessera_core::DType;

use crate::fast::simd::scalar::pack::put_f32;
use crate::fast::simd::{kqa_block_bytes, Rows, QK};

/// Scales and mins of a super-block, one per 16 values.
pub type HalfScales = ([f32; 16], [f32; 16]);

fn half_at(block: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([block[at], block[at + 1]]).to_f32()
}

/// The scales and mins of one super-block of `dtype` (Q4_K, Q5_K or Q6_K; other types give
/// zeros).
pub fn scales(dtype: DType, block: &[u8]) -> HalfScales {
    let (mut scale, mut min) = ([0.0; 16], [0.0; 16]);
    match dtype {
        DType::Q4_K | DType::Q5_K => {
            let (d, dmin) = (half_at(block, 0), half_at(block, 2));
            for j in 0..8 {
                let (sc, m) = scale_min(j, &block[4..16]);
                let (s, m) = (d * f32::from(sc), dmin * f32::from(m));
                scale[2 * j..2 * j + 2].fill(s);
                min[2 * j..2 * j + 2].fill(m);
            }
        }
        DType::Q6_K => {
            let d = half_at(block, 208);
            for (i, (s, m)) in scale.iter_mut().zip(&mut min).enumerate() {
                *s = d * f32::from(block[192 + i] as i8);
                *m = 32.0 * *s;
            }
        }
        _ => {}
    }
    (scale, min)
}

/// The 256 unsigned values of one super-block of `dtype` (Q4_K and Q5_K: 0-15 and 0-31;
/// Q6_K: 0-63).
pub fn values(dtype: DType, block: &[u8]) -> [u8; QK_K] {
    let mut q = [0u8; QK_K];
    match dtype {
        DType::Q4_K | DType::Q5_K => {
            let (qs, qh) =
                if dtype == DType::Q4_K { (&block[16..144], None) } else { (&block[48..176], Some(&block[16..48])) };
            for c in 0..4 {
                for l in 0..32 {
                    let high = |bit: usize| qh.map_or(0, |h: &[u8]| ((h[l] >> bit) & 1) << 4);
                    q[64 * c + l] = (qs[32 * c + l] & 0xf) | high(2 * c);
                    q[64 * c + 32 + l] = (qs[32 * c + l] >> 4) | high(2 * c + 1);
                }
            }
        }
        DType::Q6_K => {
            for h in 0..2 {
                let (ql, qh) = (&block[64 * h..64 * h + 64], &block[128 + 32 * h..160 + 32 * h]);
                for l in 0..32 {
                    let two = |shift: u32| ((qh[l] >> shift) & 3) << 4;
                    q[128 * h + l] = (ql[l] & 0xf) | two(0);
                    q[128 * h + 32 + l] = (ql[l + 32] & 0xf) | two(2);
                    q[128 * h + 64 + l] = (ql[l] >> 4) | two(4);
                    q[128 * h + 96 + l] = (ql[l + 32] >> 4) | two(6);
                }
            }
        }
        _ => {}
    }
    q
}

/// Writes the scales and mins of super-block `sb` of `rows.count` rows (starting at row 0)
/// into the 8 K-quant panel blocks at `dst` (rows past `count` up to `mr` get zeros).
///
/// # Safety
/// The rows must hold super-block `sb`; `dst` must hold 8 blocks of a panel of `mr` rows.
pub unsafe fn pack_scales(rows: &Rows, sb: usize, mr: usize, dst: *mut u8) {
    let bs = rows.dtype.block_bytes();
    for r in 0..mr {
        let (scale, min) = if r < rows.count {
            // SAFETY: super-block `sb` of row `r` (`bs` bytes).
            let block = unsafe { core::slice::from_raw_parts(rows.ptr.add(r * rows.stride + sb * bs), bs) };
            scales(rows.dtype, block)
        } else {
            ([0.0; 16], [0.0; 16])
        };
        for j in 0..8 {
            // SAFETY: block `j` of the 8; its four f32 vectors of `mr` follow the values.
            unsafe {
                let at = dst.add(j * kqa_block_bytes(mr) + QK * mr + 4 * r);
                put_f32(at, scale[2 * j]);
                put_f32(at.add(4 * mr), scale[2 * j + 1]);
                put_f32(at.add(8 * mr), min[2 * j]);
                put_f32(at.add(12 * mr), min[2 * j + 1]);
            }
        }
    }
}

/// [`crate::fast::simd::PackAK`], value by value.
///
/// # Safety
/// As [`crate::fast::simd::PackAK`].
pub unsafe fn pack_a(rows: &Rows, b0: usize, nblocks: usize, mr: usize, dst: *mut u8) {
    let bs = rows.dtype.block_bytes();
    for s in 0..nblocks / 8 {
        let sb = b0 / 8 + s;
        // SAFETY: blocks `8s..8s + 8` of the panel.
        let out = unsafe { dst.add(8 * s * kqa_block_bytes(mr)) };
        for r in 0..mr {
            let q = if r < rows.count {
                // SAFETY: super-block `sb` of row `r`.
                values(rows.dtype, unsafe { core::slice::from_raw_parts(rows.ptr.add(r * rows.stride + sb * bs), bs) })
            } else {
                [0; QK_K]
            };
            for (j, v) in q.chunks_exact(QK).enumerate() {
                for g in 0..QK / 4 {
                    for t in 0..4 {
                        // SAFETY: byte `(g * mr + r) * 4 + t` of block `j`'s `32 * mr` values.
                        unsafe { *out.add(j * kqa_block_bytes(mr) + (g * mr + r) * 4 + t) = v[4 * g + t] };
                    }
                }
            }
        }
        // SAFETY: the rows hold super-block `sb`; `out` holds its 8 blocks.
        unsafe { pack_scales(rows, sb, mr, out) };
    }
}

/// Where K-quant activation blocks go (one column of a packed panel): block `b`'s values at
/// `q + b * stride`, its scale `d` at `d + b * stride`, and at `s + b * stride` the weight of
/// its mins `d * sum(q)` (f32), then `-32 * sum(q)` over values 0-15 and over 16-31 (i32,
/// where Q6_K's integer sums start).
#[derive(Clone, Copy)]
pub struct KOut {
    pub q: *mut u8,
    pub d: *mut u8,
    pub s: *mut u8,
    pub stride: usize,
}

/// Writes `nblocks` blocks of zeros (padding columns).
///
/// # Safety
/// `out` must address `nblocks` blocks.
pub unsafe fn zero_blocks(nblocks: usize, out: &KOut) {
    for b in 0..nblocks {
        // SAFETY: block `b`'s values, scale and sums.
        unsafe {
            core::ptr::write_bytes(out.q.add(b * out.stride), 0, QK);
            core::ptr::write_bytes(out.d.add(b * out.stride), 0, 4);
            core::ptr::write_bytes(out.s.add(b * out.stride), 0, 12);
        }
    }
}
