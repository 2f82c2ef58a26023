//! The portable float micro-kernel.

/// [`crate::fast::simd::GemmTile`] for an `MR x NR` tile.
///
/// # Safety
/// `a` and `b` must hold `kc` packed steps of `MR` and `NR` f32 values (f32-aligned); `c`
/// must be valid for the `NR` columns of `MR` values `ldc` apart.
pub unsafe fn tile<const MR: usize, const NR: usize>(
    kc: usize,
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    accumulate: bool,
) {
    let mut acc = [[0.0f32; MR]; NR];
    for p in 0..kc {
        // SAFETY: step `p < kc` of each packed panel; packed panels are f32-aligned.
        let (ap, bp) = unsafe { (&*a.add(p * MR).cast::<[f32; MR]>(), &*b.add(p * NR).cast::<[f32; NR]>()) };
        for (accj, &bj) in acc.iter_mut().zip(bp) {
            for (x, &ai) in accj.iter_mut().zip(ap) {
                *x += ai * bj;
            }
        }
    }
    for (j, accj) in acc.iter().enumerate() {
        for (i, &x) in accj.iter().enumerate() {
            // SAFETY: element `i < MR` of column `j < NR` of the tile.
            let out = unsafe { &mut *c.add(j * ldc + i) };
            *out = if accumulate { *out + x } else { x };
        }
    }
}
