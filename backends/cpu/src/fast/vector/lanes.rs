//! Sixteen f32 lanes as a plain array, and loops over rows in steps of sixteen. Compiled
//! inside a `#[target_feature]` function, LLVM turns each lane-wise loop into vector
//! instructions of that feature set (one AVX-512 register, two AVX2 or four NEON ones), so
//! every instruction set shares these bodies.
//!
//! Rows are raw pointers, and each step loads all its lanes before it stores any, so a
//! destination may be the source itself (in-place ops).

pub const LANES: usize = 16;
pub type V = [f32; LANES];

/// Loads the first `n <= 16` values at `p`, the other lanes `fill`.
///
/// # Safety
/// `p` must be valid for reading `n` f32.
#[inline(always)]
pub unsafe fn load(p: *const f32, n: usize, fill: f32) -> V {
    if n == LANES {
        // SAFETY: 16 values are readable (caller); `read_unaligned` needs no alignment.
        return unsafe { p.cast::<V>().read_unaligned() };
    }
    let mut v = [fill; LANES];
    for (i, lane) in v.iter_mut().enumerate().take(n) {
        // SAFETY: `i < n` values are readable.
        *lane = unsafe { *p.add(i) };
    }
    v
}

/// Stores the first `n <= 16` lanes of `v` at `p`.
///
/// # Safety
/// `p` must be valid for writing `n` f32.
#[inline(always)]
pub unsafe fn store(p: *mut f32, n: usize, v: V) {
    if n == LANES {
        // SAFETY: 16 values are writable (caller).
        return unsafe { p.cast::<V>().write_unaligned(v) };
    }
    for (i, &lane) in v.iter().enumerate().take(n) {
        // SAFETY: `i < n` values are writable.
        unsafe { *p.add(i) = lane };
    }
}

#[inline(always)]
pub fn map(v: V, f: impl Fn(f32) -> f32) -> V {
    let mut r = v;
    for x in r.iter_mut() {
        *x = f(*x);
    }
    r
}

#[inline(always)]
pub fn zip(a: V, b: V, f: impl Fn(f32, f32) -> f32) -> V {
    let mut r = a;
    for (x, y) in r.iter_mut().zip(b) {
        *x = f(*x, y);
    }
    r
}

/// The lanes combined pairwise in a fixed tree (lane `i` with lane `i + width`, halving the
/// width), so that results do not depend on anything but the values.
#[inline(always)]
fn tree(v: V, f: impl Fn(f32, f32) -> f32) -> f32 {
    let mut w = v;
    let mut width = LANES / 2;
    while width > 0 {
        for i in 0..width {
            w[i] = f(w[i], w[i + width]);
        }
        width /= 2;
    }
    w[0]
}

/// The sum of the lanes.
#[inline(always)]
pub fn sum(v: V) -> f32 {
    tree(v, |a, b| a + b)
}

/// The largest lane (of lanes that are not NaN).
#[inline(always)]
pub fn max(v: V) -> f32 {
    tree(v, |a, b| if b > a { b } else { a })
}

// The loops over a row are macros, not functions taking closures: a closure is a function of
// its own, compiled without the target features of the kernel it serves unless LLVM chooses
// to inline it, which it does not for big bodies. Macros put every body inside the kernel.

/// Ends a whole step of a row loop. Without it LLVM may vectorise the loop over steps itself
/// (lane `j` of a vector taking value `j` of sixteen consecutive steps, through gathers and
/// scatters, ten times slower) instead of each step's sixteen lanes: it does so for in-place
/// loops. An empty assembly block is opaque to the loop vectoriser and costs no instruction.
#[inline(always)]
pub fn step_barrier() {
    // Miri cannot run inline assembly and needs no barrier; other architectures than these
    // have no stable `asm!` (their loops go without the barrier).
    #[cfg(all(
        not(miri),
        any(
            target_arch = "x86",
            target_arch = "x86_64",
            target_arch = "arm",
            target_arch = "aarch64",
            target_arch = "riscv32",
            target_arch = "riscv64"
        )
    ))]
    // SAFETY: an empty block: no instructions, no memory, no registers, no flags.
    unsafe {
        core::arch::asm!("", options(nomem, nostack, preserves_flags))
    };
}

/// Runs `$body` for the steps of a row of `$n` values: `$i` is the step's offset and `$c` its
/// count (16, and `n % 16` for the last step).
macro_rules! steps {
    ($n:expr, |$i:ident, $c:ident| $body:block) => {{
        let n: usize = $n;
        let mut at = 0usize;
        while at + $crate::fast::vector::lanes::LANES <= n {
            let ($i, $c) = (at, $crate::fast::vector::lanes::LANES);
            $body
            $crate::fast::vector::lanes::step_barrier();
            at += $crate::fast::vector::lanes::LANES;
        }
        if at < n {
            let ($i, $c) = (at, n - at);
            $body
        }
    }};
}

/// `y[i] = f(x[i])` (lane-wise `f: V -> V`) for a row of `n` values; `y` may be `x`.
/// Callers guarantee `x` readable and `y` writable for `n` f32.
macro_rules! map_row {
    ($n:expr, $x:expr, $y:expr, |$v:ident| $f:expr) => {{
        let (x, y): (*const f32, *mut f32) = ($x, $y);
        steps!($n, |i, c| {
            // SAFETY: values `i..i + c` of both rows (`i + c <= n`), as the caller guarantees.
            let $v = unsafe { $crate::fast::vector::lanes::load(x.add(i), c, 0.0) };
            let r = $f;
            // SAFETY: as above.
            unsafe { $crate::fast::vector::lanes::store(y.add(i), c, r) };
        })
    }};
}

/// The sum of `f(x[i])` (lane-wise) over a row of `n` values, in 16 running lanes; padding
/// lanes read as `$fill`, which `f` must map to 0. Callers guarantee `x` readable for `n` f32.
macro_rules! sum_row {
    ($n:expr, $x:expr, $fill:expr, |$v:ident| $f:expr) => {{
        let x: *const f32 = $x;
        let mut acc = [0.0f32; $crate::fast::vector::lanes::LANES];
        steps!($n, |i, c| {
            // SAFETY: values `i..i + c` of the row, as the caller guarantees.
            let $v = unsafe { $crate::fast::vector::lanes::load(x.add(i), c, $fill) };
            acc = $crate::fast::vector::lanes::zip(acc, $f, |a, b| a + b);
        });
        $crate::fast::vector::lanes::sum(acc)
    }};
}

pub(super) use {map_row, steps, sum_row};
