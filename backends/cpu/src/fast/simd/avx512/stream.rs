//! Same-shape binary ops into destinations larger than the caches, with streaming stores:
//! an ordinary store first reads its cache line from memory (for ownership), a third more
//! traffic for an ADD; `vmovntps` writes whole lines without reading them.

use core::arch::x86_64::*;

use tessera_core::BinaryOp;

use crate::fast::vector::AVX512 as PORTABLE;

/// [`crate::fast::vector::Binary`] with streaming stores from the first 64-byte boundary of
/// `y`, and a store fence at the end, so that other threads that synchronize with this one
/// afterwards see the values.
///
/// # Safety
/// As [`crate::fast::vector::Binary`]; AVX-512F.
#[target_feature(enable = "avx512f")]
pub unsafe fn binary(op: BinaryOp, n: usize, a: *const f32, b: *const f32, y: *mut f32) {
    let head = ((64 - y as usize % 64) % 64 / 4).min(n);
    let body = (n - head) / 16 * 16;
    macro_rules! each {
        ($f:ident) => {
            for i in (head..head + body).step_by(16) {
                // SAFETY: values `i..i + 16` of the three rows; `y + i` is 64-byte aligned.
                {
                    let r = $f(_mm512_loadu_ps(a.add(i)), _mm512_loadu_ps(b.add(i)));
                    _mm512_stream_ps(y.add(i), r);
                }
            }
        };
    }
    // SAFETY: the head and the tail are values of the rows; the rest as above.
    unsafe {
        (PORTABLE.binary)(op, head, a, b, y);
        match op {
            BinaryOp::Add => each!(_mm512_add_ps),
            BinaryOp::Sub => each!(_mm512_sub_ps),
            BinaryOp::Mul => each!(_mm512_mul_ps),
            BinaryOp::Div => each!(_mm512_div_ps),
        }
        let done = head + body;
        (PORTABLE.binary)(op, n - done, a.add(done), b.add(done), y.add(done));
        _mm_sfence();
    }
}

#[cfg(all(test, feature = "std"))]
mod tests {
    extern crate std;
    use alloc::vec::Vec;

    use super::*;

    #[test]
    fn streamed_rows_are_the_portable_kernels_bits() {
        if !std::is_x86_feature_detected!("avx512f") {
            return;
        }
        let a: Vec<f32> = (0..1100).map(|i| (i as f32 * 0.37).sin() * 3.0).collect();
        let b: Vec<f32> = (0..1100).map(|i| (i as f32 * 0.11).cos() + 1.5).collect();
        for op in [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div] {
            for n in [0, 5, 16, 17, 100, 1000] {
                // Destinations at every 4-byte offset of a cache line, so each head length.
                for offset in 0..16 {
                    let (mut want, mut got) = (std::vec![0f32; n + 16], std::vec![0f32; n + 32]);
                    let at = (16 - got.as_ptr() as usize / 4 % 16 + offset) % 16;
                    // SAFETY: `n` values of each row (and `at + n` fit in `got`).
                    unsafe {
                        (PORTABLE.binary)(op, n, a.as_ptr().add(3), b.as_ptr(), want.as_mut_ptr());
                        binary(op, n, a.as_ptr().add(3), b.as_ptr(), got.as_mut_ptr().add(at));
                    }
                    let same = want[..n].iter().zip(&got[at..at + n]).all(|(p, q)| p.to_bits() == q.to_bits());
                    assert!(same, "{op:?}, {n} values at offset {at}");
                }
            }
        }
    }
}
