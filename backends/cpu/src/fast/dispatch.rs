//! Choosing the kernel table: once, at run time, from the processor's features (`std`), or
//! at compile time from the target's features (without `std`). The scalar table is the
//! fallback everywhere.

use super::simd::{self, Kernels};

use core::sync::atomic::{AtomicBool, Ordering};

/// Set by [`limit_to_build_target`]: only the tables of instruction sets this build was
/// compiled for may run, whatever else the processor has.
static BUILD_TARGET_ONLY: AtomicBool = AtomicBool::new(false);

/// From now on, run only the kernel tables of instruction sets this build was compiled for
/// (`-C target-cpu=...`). A plugin variant built and scored for AVX2 then runs AVX2
/// kernels even on a processor with AVX-512 (and reports them); the built-in backend of a
/// program keeps choosing the best the processor has.
pub fn limit_to_build_target() {
    BUILD_TARGET_ONLY.store(true, Ordering::Relaxed);
}

/// Every table this processor can run, best first (the scalar one last).
pub fn available() -> impl Iterator<Item = &'static Kernels> {
    available_for(BUILD_TARGET_ONLY.load(Ordering::Relaxed))
}

/// Every table this processor can run, or with `build_target_only` those of them this build
/// was also compiled for.
pub fn available_for(build_target_only: bool) -> impl Iterator<Item = &'static Kernels> {
    let compiled = compiled_candidates();
    candidates()
        .into_iter()
        .zip(compiled)
        .filter_map(move |(runs, built)| if build_target_only { built.and(runs) } else { runs })
}

/// The best table this processor can run (and this build may, see [`limit_to_build_target`]).
pub fn best() -> &'static Kernels {
    available().next().unwrap_or(&simd::scalar::KERNELS)
}

/// The table called `name` ("avx512-bf16", "avx512-vnni", "avx2", "scalar", ...) if this processor can run it.
pub fn by_name(name: &str) -> Option<&'static Kernels> {
    available().find(|k| k.name.eq_ignore_ascii_case(name))
}

#[cfg(all(feature = "std", target_arch = "x86_64"))]
fn candidates() -> [Option<&'static Kernels>; 5] {
    extern crate std;
    use std::is_x86_feature_detected as has;
    let avx2 = has!("avx2") && has!("fma") && has!("f16c");
    let avx512 = avx2 && has!("avx512f") && has!("avx512bw") && has!("avx512vl") && has!("avx512dq");
    let vnni = avx512 && has!("avx512vnni");
    let bf16 = vnni && has!("avx512bf16");
    [
        bf16.then_some(&simd::avx512::KERNELS_BF16),
        vnni.then_some(&simd::avx512::KERNELS_VNNI),
        avx512.then_some(&simd::avx512::KERNELS),
        avx2.then_some(&simd::avx2::KERNELS),
        Some(&simd::scalar::KERNELS),
    ]
}

#[cfg(all(not(feature = "std"), target_arch = "x86_64"))]
fn candidates() -> [Option<&'static Kernels>; 5] {
    compiled_candidates()
}

/// The tables of the instruction sets this build was compiled for, in [`candidates`]' order.
#[cfg(target_arch = "x86_64")]
fn compiled_candidates() -> [Option<&'static Kernels>; 5] {
    const AVX2: bool = cfg!(all(target_feature = "avx2", target_feature = "fma", target_feature = "f16c"));
    const AVX512: bool = AVX2
        && cfg!(all(
            target_feature = "avx512f",
            target_feature = "avx512bw",
            target_feature = "avx512vl",
            target_feature = "avx512dq"
        ));
    const VNNI: bool = AVX512 && cfg!(target_feature = "avx512vnni");
    const BF16: bool = VNNI && cfg!(target_feature = "avx512bf16");
    [
        BF16.then_some(&simd::avx512::KERNELS_BF16),
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
    compiled_candidates()
}

/// The tables of the instruction sets this build was compiled for, in [`candidates`]' order.
#[cfg(target_arch = "aarch64")]
fn compiled_candidates() -> [Option<&'static Kernels>; 3] {
    const NEON: bool = cfg!(target_feature = "neon");
    const DOT: bool = NEON && cfg!(target_feature = "dotprod");
    [DOT.then_some(&simd::neon::KERNELS_DOT), NEON.then_some(&simd::neon::KERNELS), Some(&simd::scalar::KERNELS)]
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn candidates() -> [Option<&'static Kernels>; 1] {
    [Some(&simd::scalar::KERNELS)]
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn compiled_candidates() -> [Option<&'static Kernels>; 1] {
    [Some(&simd::scalar::KERNELS)]
}

#[cfg(test)]
mod tests {
    extern crate alloc;
    use alloc::vec::Vec;

    use super::*;

    /// A variant built for one instruction set runs only kernels of the sets it was built
    /// for, though the processor may have more (the test build is for the target's baseline).
    #[test]
    fn kernels_limited_to_the_build_target_are_only_the_compiled_instruction_sets() {
        let names = |build_target_only| available_for(build_target_only).map(|k| k.name).collect::<Vec<_>>();
        let limited = names(true);
        let compiled: Vec<&str> = compiled_candidates().into_iter().flatten().map(|k| k.name).collect();
        assert!(limited.iter().all(|n| compiled.contains(n)), "{limited:?} not all in {compiled:?}");
        assert!(limited.iter().all(|n| names(false).contains(n)), "{limited:?}");
        assert_eq!(limited.last(), Some(&"scalar"));
        #[cfg(all(target_arch = "x86_64", not(target_feature = "avx2")))]
        assert_eq!(limited, ["scalar"]);
    }
}
