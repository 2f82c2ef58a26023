//! Choosing the kernel table: once, at run time, from the processor's features (`std`), or
//! at compile time from the target's features (without `std`). The scalar table is the
//! fallback everywhere.

use super::simd::{self, Kernels};

/// Every table this processor can run, best first (the scalar one last).
pub fn available() -> impl Iterator<Item = &'static Kernels> {
    candidates().into_iter().flatten()
}

/// The best table this processor can run (detected once per process under `std`).
pub fn best() -> &'static Kernels {
    #[cfg(feature = "std")]
    {
        extern crate std;
        static BEST: std::sync::OnceLock<&'static Kernels> = std::sync::OnceLock::new();
        BEST.get_or_init(|| available().next().unwrap_or(&simd::scalar::KERNELS))
    }
    #[cfg(not(feature = "std"))]
    available().next().unwrap_or(&simd::scalar::KERNELS)
}

/// The table called `name` ("avx512-vnni", "avx2", "scalar", ...) if this processor can run it.
pub fn by_name(name: &str) -> Option<&'static Kernels> {
    available().find(|k| k.name.eq_ignore_ascii_case(name))
}

#[cfg(all(feature = "std", target_arch = "x86_64"))]
fn candidates() -> [Option<&'static Kernels>; 4] {
    extern crate std;
    use std::is_x86_feature_detected as has;
    let avx2 = has!("avx2") && has!("fma") && has!("f16c");
    let avx512 = avx2 && has!("avx512f") && has!("avx512bw") && has!("avx512vl") && has!("avx512dq");
    let vnni = avx512 && has!("avx512vnni");
    [
        vnni.then_some(&simd::avx512::KERNELS_VNNI),
        avx512.then_some(&simd::avx512::KERNELS),
        avx2.then_some(&simd::avx2::KERNELS),
        Some(&simd::scalar::KERNELS),
    ]
}

#[cfg(all(not(feature = "std"), target_arch = "x86_64"))]
fn candidates() -> [Option<&'static Kernels>; 4] {
    const AVX2: bool = cfg!(all(target_feature = "avx2", target_feature = "fma", target_feature = "f16c"));
    const AVX512: bool = AVX2
        && cfg!(all(
            target_feature = "avx512f",
            target_feature = "avx512bw",
            target_feature = "avx512vl",
            target_feature = "avx512dq"
        ));
    const VNNI: bool = AVX512 && cfg!(target_feature = "avx512vnni");
    [
        VNNI.then_some(&simd::avx512::KERNELS_VNNI),
        AVX512.then_some(&simd::avx512::KERNELS),
        AVX2.then_some(&simd::avx2::KERNELS),
        Some(&simd::scalar::KERNELS),
    ]
}

#[cfg(all(feature = "std", target_arch = "aarch64"))]
fn candidates() -> [Option<&'static Kernels>; 3] {
    extern crate std;
    use std::arch::is_aarch64_feature_detected as has;
    let neon = has!("neon");
    let dot = neon && has!("dotprod");
    [dot.then_some(&simd::neon::KERNELS_DOT), neon.then_some(&simd::neon::KERNELS), Some(&simd::scalar::KERNELS)]
}

#[cfg(all(not(feature = "std"), target_arch = "aarch64"))]
fn candidates() -> [Option<&'static Kernels>; 3] {
    const NEON: bool = cfg!(target_feature = "neon");
    const DOT: bool = NEON && cfg!(target_feature = "dotprod");
    [DOT.then_some(&simd::neon::KERNELS_DOT), NEON.then_some(&simd::neon::KERNELS), Some(&simd::scalar::KERNELS)]
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn candidates() -> [Option<&'static Kernels>; 1] {
    [Some(&simd::scalar::KERNELS)]
}
