//! What an AArch64 processor supports, as Linux reports it in the process's auxiliary vector
//! (`AT_HWCAP`, `AT_HWCAP2`). `is_aarch64_feature_detected!` cannot answer this in a build
//! compiled to use a feature: it answers `true` at compile time without asking, which is
//! exactly the case a variant's score has to catch (a `+dotprod` build on a processor
//! without the dot-product instructions).

/// The features a CPU plugin variant may be compiled for, as this processor reports them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cpu {
    pub dotprod: bool,
    /// Half-precision arithmetic, scalar and vector.
    pub fp16: bool,
    pub i8mm: bool,
}

const AT_HWCAP: u64 = 16;
const AT_HWCAP2: u64 = 26;
const HWCAP_FPHP: u64 = 1 << 9;
const HWCAP_ASIMDHP: u64 = 1 << 10;
const HWCAP_ASIMDDP: u64 = 1 << 20;
const HWCAP2_I8MM: u64 = 1 << 13;

impl Cpu {
    /// From `/proc/self/auxv`; a vector that cannot be read reports no feature, so a
    /// variant built for one scores 0 rather than risk running it.
    pub(crate) fn detect() -> Cpu {
        let auxv = std::fs::read("/proc/self/auxv").unwrap_or_default();
        Cpu::from_auxv(&auxv)
    }

    /// From the auxiliary vector's bytes: pairs of native-endian u64 (type, value).
    fn from_auxv(auxv: &[u8]) -> Cpu {
        let (mut hwcap, mut hwcap2) = (0, 0);
        for pair in auxv.chunks_exact(16) {
            let word = |at: usize| pair.get(at..at + 8).and_then(|b| b.try_into().ok()).map(u64::from_ne_bytes);
            match (word(0), word(8)) {
                (Some(AT_HWCAP), Some(v)) => hwcap = v,
                (Some(AT_HWCAP2), Some(v)) => hwcap2 = v,
                _ => {}
            }
        }
        let has = |word: u64, bits: u64| word & bits == bits;
        Cpu {
            dotprod: has(hwcap, HWCAP_ASIMDDP),
            fp16: has(hwcap, HWCAP_FPHP | HWCAP_ASIMDHP),
            i8mm: has(hwcap2, HWCAP2_I8MM),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auxv(pairs: &[(u64, u64)]) -> Vec<u8> {
        pairs.iter().flat_map(|&(k, v)| k.to_ne_bytes().into_iter().chain(v.to_ne_bytes())).collect()
    }

    #[test]
    fn the_auxiliary_vector_is_read_pair_by_pair() {
        let none = Cpu { dotprod: false, fp16: false, i8mm: false };
        assert_eq!(Cpu::from_auxv(&[]), none);
        assert_eq!(
            Cpu::from_auxv(&auxv(&[(AT_HWCAP, HWCAP_ASIMDDP | HWCAP_FPHP), (0, 0)])),
            Cpu { dotprod: true, ..none }
        );
        let all = auxv(&[(AT_HWCAP, HWCAP_ASIMDDP | HWCAP_FPHP | HWCAP_ASIMDHP), (AT_HWCAP2, HWCAP2_I8MM), (0, 0)]);
        assert_eq!(Cpu::from_auxv(&all), Cpu { dotprod: true, fp16: true, i8mm: true });
    }

    /// Built without `-C target-feature` (as `cargo test` builds), the standard library asks
    /// the system too: both must agree.
    #[test]
    fn agrees_with_the_standard_library_where_it_asks_the_system() {
        use std::arch::is_aarch64_feature_detected as has;
        let std = Cpu { dotprod: has!("dotprod"), fp16: has!("fp16"), i8mm: has!("i8mm") };
        assert_eq!(Cpu::detect(), std);
    }
}
