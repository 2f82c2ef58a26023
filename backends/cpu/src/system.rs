//! What the platform tells about the processor and its memory.

use tessera_core::MemoryInfo;

/// Target features this build was compiled with, as (name, "1"), and under `std` the kernel
/// set chosen for this processor at run time, as ("KERNELS", "avx512-vnni").
pub fn features() -> &'static [(&'static str, &'static str)] {
    #[cfg(feature = "std")]
    {
        extern crate std;
        static ALL: std::sync::OnceLock<alloc::vec::Vec<(&'static str, &'static str)>> = std::sync::OnceLock::new();
        ALL.get_or_init(|| {
            let mut all = alloc::vec::Vec::from(compiled_features());
            all.push(("KERNELS", crate::fast::best_kernels()));
            all
        })
    }
    #[cfg(not(feature = "std"))]
    compiled_features()
}

/// Target features this build was compiled with, as (name, "1").
fn compiled_features() -> &'static [(&'static str, &'static str)] {
    const FEATURES: &[(&str, &str)] = &[
        ("REFERENCE_KERNELS", "1"),
        #[cfg(target_feature = "sse2")]
        ("SSE2", "1"),
        #[cfg(target_feature = "avx2")]
        ("AVX2", "1"),
        #[cfg(target_feature = "fma")]
        ("FMA", "1"),
        #[cfg(target_feature = "avx512f")]
        ("AVX512F", "1"),
        #[cfg(target_feature = "neon")]
        ("NEON", "1"),
    ];
    FEATURES
}

#[cfg(all(feature = "std", target_os = "linux"))]
mod os {
    extern crate std;
    use std::string::String;
    use std::sync::OnceLock;

    use tessera_core::MemoryInfo;

    /// The "model name" line of /proc/cpuinfo.
    pub fn cpu_description() -> &'static str {
        static NAME: OnceLock<String> = OnceLock::new();
        NAME.get_or_init(|| {
            std::fs::read_to_string("/proc/cpuinfo")
                .ok()
                .and_then(|s| {
                    s.lines()
                        .find(|l| l.starts_with("model name"))
                        .and_then(|l| l.split(':').nth(1))
                        .map(|n| n.trim().into())
                })
                .unwrap_or_else(|| "CPU".into())
        })
    }

    /// MemAvailable and MemTotal of /proc/meminfo.
    pub fn memory() -> MemoryInfo {
        let Ok(info) = std::fs::read_to_string("/proc/meminfo") else {
            return MemoryInfo::default();
        };
        let field = |name: &str| -> usize {
            info.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<usize>().ok())
                .map_or(0, |kib| kib.saturating_mul(1024))
        };
        MemoryInfo { free: field("MemAvailable:"), total: field("MemTotal:") }
    }
}

#[cfg(not(all(feature = "std", target_os = "linux")))]
mod os {
    use tessera_core::MemoryInfo;

    pub fn cpu_description() -> &'static str {
        "CPU"
    }

    /// Unknown without an operating system to ask.
    pub fn memory() -> MemoryInfo {
        MemoryInfo::default()
    }
}

pub fn cpu_description() -> &'static str {
    os::cpu_description()
}

pub fn memory() -> MemoryInfo {
    os::memory()
}
