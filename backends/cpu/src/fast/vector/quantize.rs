//! Row conversions from f32 to F16, Q8_0 and Q4_0 (and F16 back to f32), written for the
//! vectoriser: the same results as `tessera_core`'s conversions, which are scalar loops with
//! library calls (`roundf`, the `half` crate) that LLVM cannot vectorise. (Plain loops, not
//! `core::array::from_fn`: that is a call LLVM leaves out of line, without the kernel's target
//! features.)

use super::lanes::{load, map, max, steps, store, zip, LANES};
use super::math::{f16_bits, f16_value, round_away, trunc_i32};

/// Values per quantized block.
const QK: usize = 32;

#[inline(always)]
fn abs(x: f32) -> f32 {
    f32::from_bits(x.to_bits() & 0x7fff_ffff)
}

#[inline(always)]
fn put_f16(out: *mut u8, v: f32) {
    let b = (f16_bits(v) as u16).to_le_bytes();
    // SAFETY: the callers' blocks start with two bytes for the scale.
    unsafe { core::ptr::copy_nonoverlapping(b.as_ptr(), out, 2) };
}

/// A row of `n` f32 as F16.
///
/// # Safety
/// `x` readable for `n` f32, `y` writable for `2 n` bytes.
#[inline(always)]
pub unsafe fn to_f16(n: usize, x: *const f32, y: *mut u8) {
    steps!(n, |i, c| {
        // SAFETY: values `i..i + c` of the row.
        let v = unsafe { load(x.add(i), c, 0.0) };
        let mut h = [0u16; LANES];
        for (h, &v) in h.iter_mut().zip(&v) {
            *h = f16_bits(v) as u16;
        }
        // SAFETY: halves `i..i + c` of the output.
        unsafe { core::ptr::copy_nonoverlapping(h.as_ptr().cast::<u8>(), y.add(2 * i), 2 * c) };
    });
}

/// A row of `n` F16 values as f32.
///
/// # Safety
/// `x` readable for `2 n` bytes, `y` writable for `n` f32.
#[inline(always)]
pub unsafe fn from_f16(n: usize, x: *const u8, y: *mut f32) {
    steps!(n, |i, c| {
        let mut h = [0u16; LANES];
        // SAFETY: halves `i..i + c` of the row.
        unsafe { core::ptr::copy_nonoverlapping(x.add(2 * i), h.as_mut_ptr().cast::<u8>(), 2 * c) };
        let mut v = [0f32; LANES];
        for (v, &h) in v.iter_mut().zip(&h) {
            *v = f16_value(u32::from(u16::from_le(h)));
        }
        // SAFETY: values `i..i + c` of the output.
        unsafe { store(y.add(i), c, v) };
    });
}

/// The 32 values of a block as two lane arrays, and their largest magnitude (NaN skipped).
///
/// # Safety
/// `x` readable for 32 f32.
#[inline(always)]
unsafe fn block(x: *const f32) -> ([f32; LANES], [f32; LANES], f32) {
    // SAFETY: the block's 32 values.
    let (a, b) = unsafe { (load(x, LANES, 0.0), load(x.add(LANES), LANES, 0.0)) };
    // Running maxima from 0, so that NaN values (never greater) are skipped.
    let larger = |m: f32, p: f32| if p > m { p } else { m };
    let m = zip(zip([0.0; LANES], map(a, abs), larger), map(b, abs), larger);
    (a, b, max(m))
}

/// A row of `n` f32 (whole blocks) as Q8_0: `d = max|x| / 127`, `q = round(x / d)`.
///
/// # Safety
/// `x` readable for `n` f32, `y` writable for `n / 32` blocks of 34 bytes.
#[inline(always)]
pub unsafe fn to_q8_0(n: usize, x: *const f32, y: *mut u8) {
    for b in 0..n / QK {
        // SAFETY: block `b` of the row and of the output.
        let (lo, hi, amax) = unsafe { block(x.add(QK * b)) };
        let out = y.wrapping_add(34 * b);
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        put_f16(out, d);
        let mut q = [0u8; QK];
        let (q_lo, q_hi) = q.split_at_mut(LANES);
        for (q, &v) in q_lo.iter_mut().zip(&lo) {
            *q = round_away(v * id) as i8 as u8;
        }
        for (q, &v) in q_hi.iter_mut().zip(&hi) {
            *q = round_away(v * id) as i8 as u8;
        }
        // SAFETY: the block's 32 value bytes follow its scale.
        unsafe { core::ptr::copy_nonoverlapping(q.as_ptr(), out.add(2), QK) };
    }
}

/// A row of `n` f32 (whole blocks) as Q4_0: `d = m / -8` for the first value `m` of largest
/// magnitude, `q = min(15, trunc(x / d + 8.5))`, values `j` and `j + 16` sharing a byte.
///
/// # Safety
/// `x` readable for `n` f32, `y` writable for `n / 32` blocks of 18 bytes.
#[inline(always)]
pub unsafe fn to_q4_0(n: usize, x: *const f32, y: *mut u8) {
    for b in 0..n / QK {
        // SAFETY: block `b` of the row and of the output.
        let (lo, hi, amax) = unsafe { block(x.add(QK * b)) };
        let out = y.wrapping_add(18 * b);
        // The first value of largest magnitude (0 for a block of zeros, as the reference has
        // it): the smallest index of the lanes that hold it, found in a tree.
        let mut first = [u32::MAX; LANES];
        for (l, f) in first.iter_mut().enumerate() {
            let index = |i: usize, v: f32| if abs(v) == amax { i as u32 } else { u32::MAX };
            *f = index(l, lo[l]).min(index(l + LANES, hi[l]));
        }
        let mut width = LANES / 2;
        while width > 0 {
            for l in 0..width {
                first[l] = first[l].min(first[l + width]);
            }
            width /= 2;
        }
        let m = match first[0] as usize {
            i if amax > 0.0 && i < LANES => lo[i],
            i if amax > 0.0 && i < QK => hi[i - LANES],
            _ => 0.0,
        };
        let d = m / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        put_f16(out, d);
        // Saturating, so NaN and huge values stay in range.
        let nibble = |v: f32| trunc_i32(v * id + 8.5).clamp(0, 15) as u8;
        let mut q = [0u8; QK / 2];
        for ((q, &a), &b) in q.iter_mut().zip(&lo).zip(&hi) {
            *q = nibble(a) | (nibble(b) << 4);
        }
        // SAFETY: the block's 16 bytes follow its scale.
        unsafe { core::ptr::copy_nonoverlapping(q.as_ptr(), out.add(2), QK / 2) };
    }
}

#[cfg(test)]
mod tests {
    use alloc::vec;
    use alloc::vec::Vec;

    use tessera_core::{convert, DType};

    use super::*;

    /// Blocks of varied values: random, all zero, a negative extreme first, ties of magnitude,
    /// a NaN, halfway values for the rounding.
    fn values() -> Vec<f32> {
        let mut s = 0x2545_f491_4f6c_dd1du64;
        let mut v: Vec<f32> = (0..32 * 6)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                ((s >> 40) as f32 / (1u64 << 23) as f32 - 1.0) * 3.0
            })
            .collect();
        v[32..64].fill(0.0);
        v[64] = -5.0;
        v[70] = 5.0;
        v[100] = 2.0;
        v[101] = -2.0;
        v[130] = f32::NAN;
        for (i, x) in v[160..192].iter_mut().enumerate() {
            *x = (i as f32 - 16.0) * 0.5;
        }
        v
    }

    #[test]
    fn conversions_match_tessera_core_bit_for_bit() {
        let x = values();
        let n = x.len();
        for (dtype, f) in [
            (DType::F16, to_f16 as unsafe fn(usize, *const f32, *mut u8)),
            (DType::Q8_0, to_q8_0),
            (DType::Q4_0, to_q4_0),
        ] {
            let bytes = n / dtype.block_len() * dtype.block_bytes();
            let mut want = vec![0u8; bytes];
            convert::row_from_f32(dtype, &x, &mut want);
            let mut got = vec![0u8; bytes];
            // SAFETY: `n` values in, `bytes` out.
            unsafe { f(n, x.as_ptr(), got.as_mut_ptr()) };
            assert_eq!(got, want, "{dtype}");
        }
        let mut halves = vec![0u8; 2 * n];
        convert::row_from_f32(DType::F16, &x, &mut halves);
        let mut want = vec![0f32; n];
        convert::row_to_f32(DType::F16, &halves, &mut want);
        let mut got = vec![0f32; n];
        // SAFETY: `n` halves in, `n` values out.
        unsafe { from_f16(n, halves.as_ptr(), got.as_mut_ptr()) };
        assert!(got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())));
    }
}
