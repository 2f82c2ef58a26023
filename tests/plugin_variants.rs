//! Choosing among CPU plugin variants at run time: the baseline x86-64 build, x86-64-v3
//! (AVX2/FMA) and x86-64-v4 (AVX-512) each score themselves by the processor features they
//! find; the highest score that can run wins. With `TESSERA_CPU_DISABLE_AVX512=1` the
//! AVX-512 build scores 0 and the AVX2 one wins, running AVX2 kernels. The variable is read by the plugins
//! themselves, so this is the only test in its process.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![cfg(target_arch = "x86_64")]

#[path = "conformance/mod.rs"]
mod conformance;
#[path = "plugin_support/mod.rs"]
mod plugin_support;

use plugin_support::{built, with_env, PluginDir};
use tessera::runtime::{LoadReport, Origin, RegistryConfig, RuntimeRegistry};

const BASELINE: u32 = 1;
/// FMA 1 + F16C 2 + SSE4.2 4 + BMI2 8 + AVX 16 + AVX2 32, plus 1.
const V3: u32 = 64;
/// V3 + AVX-512 128.
const V4: u32 = 192;

fn has_avx512() -> bool {
    use std::arch::is_x86_feature_detected as has;
    has!("avx512f") && has!("avx512cd") && has!("avx512vl") && has!("avx512dq") && has!("avx512bw")
}

fn has_v3() -> bool {
    use std::arch::is_x86_feature_detected as has;
    has!("avx2") && has!("fma") && has!("f16c") && has!("bmi2") && has!("avx") && has!("sse4.2")
}

/// Loads every family in `dir` with the variables set; returns the report and the chosen
/// CPU plugin (file name, score).
fn choose(dir: &PluginDir, vars: &[(&str, Option<&str>)]) -> (LoadReport, String, u32) {
    with_env(vars, || {
        let mut registry = RuntimeRegistry::with_config(&[], RegistryConfig::from_vars(&[]));
        let report = registry.load_all_from(&dir.path);
        let entry = registry.reg_by_name("cpu").expect("a CPU variant was loaded");
        let Origin::Plugin { path, score } = entry.origin().clone() else { panic!("{}", entry.origin()) };
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let features: Vec<String> = entry.features().iter().map(|(n, _)| n.clone()).collect();
        println!("chosen: {name} (score {score}), features {features:?}");
        // Each variant runs (and reports) the kernels it was built and scored for, not the
        // best this processor has.
        let kernels = entry.features().into_iter().find(|(n, _)| n == "KERNELS").map(|(_, v)| v);
        let expected: &[&str] = match score {
            V4 => &["avx512"],
            V3 => &["avx2"],
            _ => &["scalar"],
        };
        assert!(
            kernels.as_deref().is_some_and(|k| expected.contains(&k)),
            "{name}: KERNELS={kernels:?}, expected {expected:?}"
        );
        for s in &report.skipped {
            println!("  skipped {s}");
        }
        if score == V4 {
            assert!(features.iter().any(|f| f == "AVX512F"), "{features:?}");
            // The AVX-512 build really runs here: the whole suite through it.
            let summary = conformance::run_suite(&[entry.devices()[0]]);
            summary.print();
            assert_eq!(summary.failed, 0, "{}", summary.line());
        }
        (report, name, score)
    })
}

#[test]
fn the_best_cpu_variant_that_can_run_here_is_chosen() {
    let built = built();
    let dir = PluginDir::new("variants");
    for (variant, file) in &built.cpu {
        dir.install(file, "cpu", Some(variant));
    }
    let v4 = "libtessera-cpu-x86-64-v4.so";
    let v3 = "libtessera-cpu-x86-64-v3.so";
    let baseline = "libtessera-cpu-x86-64.so";
    let off = [("TESSERA_CPU_DISABLE_AVX512", None), ("TESSERA_CPU_DISABLE_AVX2", None)];

    let (report, name, score) = choose(&dir, &off);
    assert_eq!(report.loaded.len(), 1);
    assert_eq!(report.skipped.len(), 2, "{:?}", report.skipped);
    if has_avx512() && has_v3() {
        assert_eq!((name.as_str(), score), (v4, V4));
        let reasons: Vec<String> = report.skipped.iter().map(|s| s.reason.clone()).collect();
        assert_eq!(
            reasons,
            [
                format!("not chosen: {v4} scores {V4}, this variant {V3}"),
                format!("not chosen: {v4} scores {V4}, this variant {BASELINE}"),
            ]
        );
    } else if has_v3() {
        eprintln!("this processor has no AVX-512: the v3 build wins");
        assert_eq!((name.as_str(), score), (v3, V3));
    } else {
        assert_eq!((name.as_str(), score), (baseline, BASELINE));
    }

    // AVX-512 forced off: the AVX2 build wins, the AVX-512 build says why it lost.
    let (report, name, score) =
        choose(&dir, &[("TESSERA_CPU_DISABLE_AVX512", Some("1")), ("TESSERA_CPU_DISABLE_AVX2", None)]);
    if has_v3() {
        assert_eq!((name.as_str(), score), (v3, V3));
    }
    let v4_reason = report.skipped.iter().find(|s| s.source.ends_with(v4)).map(|s| s.reason.clone());
    assert_eq!(
        v4_reason.as_deref(),
        Some("scores 0: it cannot run on this machine (a processor feature or device it needs is missing)")
    );

    // AVX2 forced off as well: only the baseline build can run.
    let (_, name, score) =
        choose(&dir, &[("TESSERA_CPU_DISABLE_AVX512", Some("1")), ("TESSERA_CPU_DISABLE_AVX2", Some("1"))]);
    assert_eq!((name.as_str(), score), (baseline, BASELINE));

    // load_best does the same for one family (whose built-in reg is kept out).
    with_env(&off, || {
        let config = RegistryConfig::from_vars(&[("TESSERA_DISABLE_CPU", "builtin")]);
        let mut registry = RuntimeRegistry::with_config(&[&tessera::cpu::CPU_REG], config);
        let entry = registry.load_best("CPU", Some(&dir.path)).unwrap();
        assert!(matches!(entry.origin(), Origin::Plugin { score, .. } if *score >= V3 || !has_v3()));
        assert_eq!(registry.regs().count(), 1);
    });
}
