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
fn candidates() -> [Option<&'static Kernels>; 6] {
    extern crate std;
    use std::is_x86_feature_detected as has;
    let avx2 = has!("avx2") && has!("fma") && has!("f16c");
    let avx512 = avx2 && has!("avx512f") && has!("avx512bw") && has!("avx512vl") && has!("avx512dq");
    let vnni = avx512 && has!("avx512vnni");
    let bf16 = vnni && has!("avx512bf16");
    let amx = bf16 && amx_bf16_usable();
    [
        amx.then_some(&simd::avx512::KERNELS_AMX),
        bf16.then_some(&simd::avx512::KERNELS_BF16),
        vnni.then_some(&simd::avx512::KERNELS_VNNI),
        avx512.then_some(&simd::avx512::KERNELS),
        avx2.then_some(&simd::avx2::KERNELS),
        Some(&simd::scalar::KERNELS),
    ]
}

#[cfg(all(not(feature = "std"), target_arch = "x86_64"))]
fn candidates() -> [Option<&'static Kernels>; 6] {
    compiled_candidates()
}

/// The tables of the instruction sets this build was compiled for, in [`candidates`]' order.
/// AMX is never among them: its tiles need the operating system's permission, asked at run
/// time.
#[cfg(target_arch = "x86_64")]
fn compiled_candidates() -> [Option<&'static Kernels>; 6] {
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
        None,
        BF16.then_some(&simd::avx512::KERNELS_BF16),
        VNNI.then_some(&simd::avx512::KERNELS_VNNI),
        AVX512.then_some(&simd::avx512::KERNELS),
        AVX2.then_some(&simd::avx2::KERNELS),
        Some(&simd::scalar::KERNELS),
    ]
}

/// Whether this processor has AMX-TILE and AMX-BF16, the operating system saves the tile state
/// (XCR0 bits 17 and 18) and lets this process use it. Linux asks each process to request
/// the tile data first; it is requested once, here. Elsewhere AMX is left unused.
#[cfg(all(feature = "std", target_arch = "x86_64"))]
fn amx_bf16_usable() -> bool {
    extern crate std;
    use core::arch::x86_64::{__cpuid, __cpuid_count, _xgetbv};
    static USABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *USABLE.get_or_init(|| {
        let leaf7 = __cpuid_count(7, 0);
        let (bf16, tile) = (leaf7.edx >> 22 & 1 == 1, leaf7.edx >> 24 & 1 == 1);
        let osxsave = __cpuid(1).ecx >> 27 & 1 == 1;
        const TILE_STATE: u64 = 0b11 << 17;
        // SAFETY: OSXSAVE says `xgetbv` may run and XCR0 exists.
        tile && bf16 && osxsave && unsafe { _xgetbv(0) } & TILE_STATE == TILE_STATE && request_tile_data()
    })
}

/// Asks Linux to let this process use the AMX tile data (`arch_prctl(ARCH_REQ_XCOMP_PERM,
/// XFEATURE_XTILEDATA)`); without it the first tile instruction faults.
#[cfg(all(feature = "std", target_arch = "x86_64", target_os = "linux"))]
fn request_tile_data() -> bool {
    const SYS_ARCH_PRCTL: usize = 158;
    const ARCH_REQ_XCOMP_PERM: usize = 0x1023;
    const XFEATURE_XTILEDATA: usize = 18;
    let ret: isize;
    // SAFETY: the system call only changes which register state the process may use.
    unsafe {
        core::arch::asm!(
            "syscall",
            inlateout("rax") SYS_ARCH_PRCTL => ret,
            in("rdi") ARCH_REQ_XCOMP_PERM,
            in("rsi") XFEATURE_XTILEDATA,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret == 0
}

#[cfg(all(feature = "std", target_arch = "x86_64", not(target_os = "linux")))]
fn request_tile_data() -> bool {
    false
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
