//! tessera's CPU backend as a plugin.
//!
//! One crate, built once per processor level with `RUSTFLAGS="-C target-cpu=..."`: baseline
//! `x86-64`, `x86-64-v3` (AVX2, FMA, F16C, BMI2) and `x86-64-v4` (AVX-512 F/CD/VL/DQ/BW);
//! on aarch64 the baseline and `+dotprod`. Each build scores itself in
//! `tessera_backend_score`: 0 if a feature it was compiled for is missing at run time, else
//! 1 plus a bit per feature (ggml's numbering), so the most specific build that can run
//! wins. For tests, `TESSERA_CPU_DISABLE_AVX512=1` (and `TESSERA_CPU_DISABLE_AVX2=1`,
//! `TESSERA_CPU_DISABLE_DOTPROD=1`) make the score treat that feature as missing.
//! `scripts/build-cpu-plugins.sh` builds and names the variants.
//!
//! A variant runs the kernels of the instruction sets it was built (and scored) for, not the
//! best the processor has: the AVX2 build runs AVX2 kernels on an AVX-512 processor too, and
//! its `KERNELS` feature says so.
//!
//! The score asks the processor itself (x86-64: CPUID, [`x86_cpu`]; AArch64 Linux: the
//! auxiliary vector, `arm_hwcap`): the standard library's feature macros answer `true`
//! without asking for a feature the build was compiled for.

#[cfg(all(target_arch = "aarch64", target_os = "linux"))]
mod arm_hwcap;
#[cfg(target_arch = "x86_64")]
mod x86_cpu;

tessera_plugin_abi::export_backend!(
    reg: {
        tessera_cpu::limit_kernels_to_build_target();
        &tessera_cpu::CPU_REG
    },
    score: score
);

/// A processor feature a build may be compiled for.
struct Feature {
    /// What the variable `TESSERA_CPU_DISABLE_<name>` hides.
    name: &'static str,
    /// What it adds to the score.
    bit: u32,
    /// Whether this build was compiled to use it.
    compiled: bool,
    /// Whether this processor has it.
    present: bool,
}

/// Whether `TESSERA_CPU_DISABLE_<name>` hides a feature that is present.
fn disabled(name: &str) -> bool {
    std::env::var(format!("TESSERA_CPU_DISABLE_{name}"))
        .is_ok_and(|v| !matches!(v.trim().to_ascii_lowercase().as_str(), "" | "0" | "false" | "no" | "off"))
}

/// 0 if a compiled-in feature is missing, else 1 plus the bits of the compiled-in features.
fn score_of(features: &[Feature]) -> u32 {
    let mut score = 1;
    for f in features.iter().filter(|f| f.compiled) {
        if !f.present || disabled(f.name) {
            return 0;
        }
        score += f.bit;
    }
    score
}

#[cfg(target_arch = "x86_64")]
fn features() -> [Feature; 7] {
    let cpu = x86_cpu::Cpu::detect();
    [
        Feature { name: "FMA", bit: 1, compiled: cfg!(target_feature = "fma"), present: cpu.fma },
        Feature { name: "F16C", bit: 2, compiled: cfg!(target_feature = "f16c"), present: cpu.f16c },
        Feature { name: "SSE42", bit: 4, compiled: cfg!(target_feature = "sse4.2"), present: cpu.sse42 },
        Feature { name: "BMI2", bit: 8, compiled: cfg!(target_feature = "bmi2"), present: cpu.bmi2 },
        Feature { name: "AVX", bit: 16, compiled: cfg!(target_feature = "avx"), present: cpu.avx },
        Feature { name: "AVX2", bit: 32, compiled: cfg!(target_feature = "avx2"), present: cpu.avx2 },
        Feature {
            name: "AVX512",
            bit: 128,
            compiled: cfg!(all(
                target_feature = "avx512f",
                target_feature = "avx512cd",
                target_feature = "avx512vl",
                target_feature = "avx512dq",
                target_feature = "avx512bw"
            )),
            present: cpu.avx512,
        },
    ]
}

#[cfg(all(target_arch = "aarch64", target_os = "linux"))]
fn features() -> [Feature; 3] {
    let cpu = arm_hwcap::Cpu::detect();
    [
        Feature { name: "DOTPROD", bit: 2, compiled: cfg!(target_feature = "dotprod"), present: cpu.dotprod },
        Feature { name: "FP16", bit: 4, compiled: cfg!(target_feature = "fp16"), present: cpu.fp16 },
        Feature { name: "I8MM", bit: 16, compiled: cfg!(target_feature = "i8mm"), present: cpu.i8mm },
    ]
}

/// Elsewhere on AArch64 the standard library's answers, which are `true` for every feature
/// the build enables: a variant is trusted to run where it was built for.
#[cfg(all(target_arch = "aarch64", not(target_os = "linux")))]
fn features() -> [Feature; 3] {
    use std::arch::is_aarch64_feature_detected as has;
    [
        Feature { name: "DOTPROD", bit: 2, compiled: cfg!(target_feature = "dotprod"), present: has!("dotprod") },
        Feature { name: "FP16", bit: 4, compiled: cfg!(target_feature = "fp16"), present: has!("fp16") },
        Feature { name: "I8MM", bit: 16, compiled: cfg!(target_feature = "i8mm"), present: has!("i8mm") },
    ]
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn features() -> [Feature; 0] {
    []
}

/// This build's score on this processor.
fn score() -> u32 {
    score_of(&features())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_feature_scores_zero_and_present_ones_add_their_bits() {
        let f = |bit, compiled, present| Feature { name: "TEST_ONLY", bit, compiled, present };
        assert_eq!(score_of(&[]), 1);
        assert_eq!(score_of(&[f(1, true, true), f(32, true, true), f(128, false, false)]), 34);
        assert_eq!(score_of(&[f(1, true, true), f(128, true, false)]), 0);
        // This very build runs here, so it scores at least 1.
        assert!(score() >= 1);
    }
}
