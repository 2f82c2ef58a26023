//! K-quant super-blocks as the int8 kernels take them: 256 unsigned values, a scale per 16
//! values and, for Q4_K and Q5_K, a 6-bit min per 32 with its own scale `dmin` (value =
//! `scale * q - dmin * min`; Q6_K's `d * sc * (q - 32)` is `scale * (q - 32)`), so products
//! through it differ from the dequantized values only by rounding.
//!
//! Also the portable packer of K-quant weight panels (edges of the SIMD packers) and the
//! layout of K-quant activation panels.

use half::f16;
use tessera_core::kquant::{scale_min, QK_K};
use tessera_core::DType;

use crate::fast::simd::scalar::pack::put_f32;
use crate::fast::simd::{kq_block_at, kq_superblock_bytes, kq_tail_at, Rows, QK};

/// The scales of a super-block, one per 16 values, with its 6-bit mins (one per 32 values)
/// and their scale `dmin` (value = `scale * q - dmin * min`; Q6_K's is `scale * (q - 32)`,
/// with zero mins).
pub struct Scales {
    pub scale: [f32; 16],
    pub min: [u8; 8],
    pub dmin: f32,
}

fn half_at(block: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([block[at], block[at + 1]]).to_f32()
}

/// The scales of one super-block of `dtype` (Q4_K, Q5_K or Q6_K; other types give zeros).
pub fn scales(dtype: DType, block: &[u8]) -> Scales {
    let mut s = Scales { scale: [0.0; 16], min: [0; 8], dmin: 0.0 };
    match dtype {
        DType::Q4_K | DType::Q5_K => {
            let d = half_at(block, 0);
            s.dmin = half_at(block, 2);
            for j in 0..8 {
                let (sc, m) = scale_min(j, &block[4..16]);
                s.scale[2 * j..2 * j + 2].fill(d * f32::from(sc));
                s.min[j] = m;
            }
        }
        DType::Q6_K => {
            let d = half_at(block, 208);
            for (i, v) in s.scale.iter_mut().enumerate() {
                *v = d * f32::from(block[192 + i] as i8);
            }
        }
        _ => {}
    }
    s
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
/// into the packed super-block at `dst` (rows past `count` up to `mr` get zeros).
///
/// # Safety
/// The rows must hold super-block `sb`; `dst` must hold a packed super-block of `mr` rows.
pub unsafe fn pack_scales(rows: &Rows, sb: usize, mr: usize, dst: *mut u8) {
    let bs = rows.dtype.block_bytes();
    for r in 0..mr {
        let s = if r < rows.count {
            // SAFETY: super-block `sb` of row `r` (`bs` bytes).
            let block = unsafe { core::slice::from_raw_parts(rows.ptr.add(r * rows.stride + sb * bs), bs) };
            scales(rows.dtype, block)
        } else {
            Scales { scale: [0.0; 16], min: [0; 8], dmin: 0.0 }
        };
        // SAFETY: the two scale vectors of each block, then the mins and `dmin` of row `r`.
        unsafe {
            for j in 0..8 {
                let at = dst.add(kq_block_at(mr, j) + QK * mr + 4 * r);
                put_f32(at, s.scale[2 * j]);
                put_f32(at.add(4 * mr), s.scale[2 * j + 1]);
            }
            let tail = dst.add(kq_tail_at(mr) + 4 * r);
            for p in 0..4 {
                let pair = [s.min[2 * p], 0, s.min[2 * p + 1], 0];
                core::ptr::write_unaligned(tail.add(4 * mr * p).cast::<[u8; 4]>(), pair);
            }
            put_f32(tail.add(16 * mr), s.dmin);
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
        // SAFETY: super-block `s` of the panel.
        let out = unsafe { dst.add(s * kq_superblock_bytes(mr)) };
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
                        unsafe { *out.add(kq_block_at(mr, j) + (g * mr + r) * 4 + t) = v[4 * g + t] };
                    }
                }
            }
        }
        // SAFETY: the rows hold super-block `sb`; `out` is its packed super-block.
        unsafe { pack_scales(rows, sb, mr, out) };
    }
}

/// One column of a packed K-quant activation panel of `nr` columns at `panel`.
#[derive(Clone, Copy)]
pub struct KOut {
    pub panel: *mut u8,
    pub nr: usize,
    pub column: usize,
}

#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
impl KOut {
    fn superblock(&self, sb: usize) -> *mut u8 {
        self.panel.wrapping_add(sb * kq_superblock_bytes(self.nr))
    }

    /// The 32 values of block `b` of super-block `sb`.
    pub fn values(&self, sb: usize, b: usize) -> *mut u8 {
        self.superblock(sb).wrapping_add(kq_block_at(self.nr, b) + QK * self.column)
    }

    /// The two i32 starts of block `b` of super-block `sb`.
    pub fn starts(&self, sb: usize, b: usize) -> *mut u8 {
        self.superblock(sb).wrapping_add(kq_block_at(self.nr, b) + QK * self.nr + 8 * self.column)
    }

    /// The f32 scale of super-block `sb`.
    pub fn scale(&self, sb: usize) -> *mut u8 {
        self.superblock(sb).wrapping_add(kq_tail_at(self.nr) + 4 * self.column)
    }

    /// The 4 i16 pairs of block sums of super-block `sb`.
    pub fn sums(&self, sb: usize) -> *mut u8 {
        self.superblock(sb).wrapping_add(kq_tail_at(self.nr) + 4 * self.nr + 16 * self.column)
    }
}

/// Writes `superblocks` super-blocks of zeros (a padding column).
///
/// # Safety
/// `out` must address `superblocks` super-blocks.
pub unsafe fn zero_superblocks(superblocks: usize, out: &KOut) {
    for sb in 0..superblocks {
        // SAFETY: the column's slots in super-block `sb`.
        unsafe {
            for b in 0..8 {
                core::ptr::write_bytes(out.values(sb, b), 0, QK);
                core::ptr::write_bytes(out.starts(sb, b), 0, 8);
            }
            core::ptr::write_bytes(out.scale(sb), 0, 4);
            core::ptr::write_bytes(out.sums(sb), 0, 16);
        }
    }
}
