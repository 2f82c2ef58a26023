//! What an x86-64 processor and its operating system support, asked of the processor with
//! CPUID and XGETBV. `is_x86_feature_detected!` cannot answer this in a build compiled to use
//! a feature: it answers `true` at compile time without asking, which is exactly the case a
//! variant's score has to catch (an x86-64-v4 build on a processor without AVX-512).

use core::arch::x86_64::{__cpuid, __cpuid_count, _xgetbv, CpuidResult};

/// The features a CPU plugin variant may be compiled for, as this processor reports them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cpu {
    pub sse42: bool,
    pub fma: bool,
    pub f16c: bool,
    pub bmi2: bool,
    pub avx: bool,
    pub avx2: bool,
    /// AVX-512 F, CD, VL, DQ and BW, all of them.
    pub avx512: bool,
}

impl Cpu {
    pub(crate) fn detect() -> Cpu {
        let max_leaf = __cpuid(0).eax;
        let leaf1 = __cpuid(1);
        let leaf7 = if max_leaf >= 7 { __cpuid_count(7, 0) } else { CpuidResult { eax: 0, ebx: 0, ecx: 0, edx: 0 } };
        let bit = |register: u32, n: u32| register & (1 << n) != 0;
        // The registers' state the OS saves: XMM and YMM for AVX, the opmask and ZMM ones too
        // for AVX-512. XGETBV exists where the OS enabled XSAVE (OSXSAVE).
        let xcr0 = if bit(leaf1.ecx, 27) {
            // SAFETY: OSXSAVE is set, so XGETBV is available and register 0 exists.
            unsafe { _xgetbv(0) }
        } else {
            0
        };
        let avx = xcr0 & 0b110 == 0b110 && bit(leaf1.ecx, 28);
        let avx512_state = xcr0 & 0b1110_0110 == 0b1110_0110;
        Cpu {
            sse42: bit(leaf1.ecx, 20),
            fma: avx && bit(leaf1.ecx, 12),
            f16c: avx && bit(leaf1.ecx, 29),
            bmi2: bit(leaf7.ebx, 8),
            avx,
            avx2: avx && bit(leaf7.ebx, 5),
            // F 16, DQ 17, CD 28, BW 30, VL 31.
            avx512: avx512_state && [16, 17, 28, 30, 31].iter().all(|&n| bit(leaf7.ebx, n)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Built without `-C target-cpu` (as `cargo test` builds), the standard library asks the
    /// processor too: both must agree on every feature.
    #[test]
    fn agrees_with_the_standard_library_where_it_asks_the_processor() {
        use std::arch::is_x86_feature_detected as has;
        let cpu = Cpu::detect();
        let std = Cpu {
            sse42: has!("sse4.2"),
            fma: has!("fma"),
            f16c: has!("f16c"),
            bmi2: has!("bmi2"),
            avx: has!("avx"),
            avx2: has!("avx2"),
            avx512: has!("avx512f") && has!("avx512cd") && has!("avx512vl") && has!("avx512dq") && has!("avx512bw"),
        };
        assert_eq!(cpu, std);
    }
}
