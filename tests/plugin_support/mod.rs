//! Building the plugin crates for tests, once per test process.
//!
//! Cargo cannot build one crate with several `-C target-cpu` settings in one invocation, and
//! a test cannot build into the target directory the running `cargo test` holds locked, so
//! each variant is built by a nested `cargo build` into its own directory under
//! `target/plugin-variants/<variant>/` (profile `plugin-test`, unoptimised and quick to
//! compile). Builds are incremental: a second test process finds them up to date in a
//! fraction of a second. The files are then copied into temporary directories under the
//! names the loader looks for (`libtessera-cpu-x86-64-v3.so`, ...). Examples a test runs as
//! processes are built the same way ([`built_example`]).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, MutexGuard, OnceLock};

/// The CPU plugin variants: (variant name in the file name, `-C target-cpu`).
#[cfg(target_arch = "x86_64")]
pub const CPU_VARIANTS: [(&str, &str); 3] =
    [("x86-64", "x86-64"), ("x86-64-v3", "x86-64-v3"), ("x86-64-v4", "x86-64-v4")];
#[cfg(not(target_arch = "x86_64"))]
pub const CPU_VARIANTS: [(&str, &str); 1] = [("generic", "generic")];

/// The plugin files one build produced.
pub struct Built {
    /// (variant, path of `libtessera_cpu_plugin.so` built for it).
    pub cpu: Vec<(String, PathBuf)>,
    /// The deliberately broken plugin (baseline build).
    pub bad: PathBuf,
    /// A shared library with no tessera entry point (baseline build).
    pub no_entry: PathBuf,
}

impl Built {
    /// The baseline CPU plugin.
    pub fn cpu_baseline(&self) -> &Path {
        &self.cpu[0].1
    }
}

pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

const PROFILE: &str = "plugin-test";

/// This machine's target triple (`rustc -vV`). The nested builds name it with `--target`, so
/// that a variant's `-C target-cpu` reaches the crates it builds but not their build
/// scripts, which run here: an x86-64-v4 build script stops with SIGILL on a processor
/// without AVX-512.
fn host_triple() -> &'static str {
    static HOST: OnceLock<String> = OnceLock::new();
    HOST.get_or_init(|| {
        let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
        let out = Command::new(rustc).arg("-vV").output().expect("running rustc -vV");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let host = text.lines().find_map(|l| l.strip_prefix("host: ")).expect("rustc -vV names the host");
        host.trim().to_string()
    })
}

/// Where a nested build into `target_dir` puts its files.
fn output_dir(target_dir: &Path) -> PathBuf {
    target_dir.join(host_triple()).join(PROFILE)
}

fn cargo_build(target_cpu: &str, target_dir: &Path, args: &[&str]) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(workspace_root())
        .args(["build", "--offline", "--quiet", "--profile", PROFILE, "--target", host_triple(), "--target-dir"])
        .arg(target_dir)
        .args(args)
        .env("RUSTFLAGS", format!("-C target-cpu={target_cpu}"))
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_BUILD_RUSTFLAGS")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET_DIR")
        .output()
        .expect("running cargo");
    assert!(
        out.status.success(),
        "cargo build {args:?} (target-cpu {target_cpu}) failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn dll(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(format!("{}{name}{}", std::env::consts::DLL_PREFIX, std::env::consts::DLL_SUFFIX));
    assert!(path.is_file(), "{} was not built", path.display());
    path
}

/// Builds every plugin once per process (the first caller waits; later ones reuse it).
pub fn built() -> &'static Built {
    static BUILT: OnceLock<Built> = OnceLock::new();
    BUILT.get_or_init(|| {
        let start = std::time::Instant::now();
        let base = workspace_root().join("target").join("plugin-variants");
        let mut cpu = Vec::new();
        let mut bad = None;
        for (i, (variant, target_cpu)) in CPU_VARIANTS.iter().enumerate() {
            let dir = base.join(variant);
            if i == 0 {
                // The test plugins ride along with the baseline build.
                cargo_build(
                    target_cpu,
                    &dir,
                    &["-p", "tessera-cpu-plugin", "-p", "tessera-bad-plugin", "--lib", "--example", "no_entry"],
                );
                let out = output_dir(&dir);
                bad = Some((dll(&out, "tessera_bad_plugin"), dll(&out.join("examples"), "no_entry")));
            } else {
                cargo_build(target_cpu, &dir, &["-p", "tessera-cpu-plugin"]);
            }
            cpu.push((variant.to_string(), dll(&output_dir(&dir), "tessera_cpu_plugin")));
        }
        let (bad, no_entry) = bad.expect("the baseline build ran");
        eprintln!("plugins built in {:.1} s", start.elapsed().as_secs_f64());
        Built { cpu, bad, no_entry }
    })
}

/// Builds example `name` of the facade the way the plugins are built (the baseline variant's
/// directory and flags) and returns its executable: a test can run it as a process, with the
/// environment it chooses. The first build compiles the facade's dev-dependencies there too;
/// later ones find it up to date.
pub fn built_example(name: &str) -> PathBuf {
    let (variant, target_cpu) = CPU_VARIANTS[0];
    let dir = workspace_root().join("target").join("plugin-variants").join(variant);
    cargo_build(target_cpu, &dir, &["-p", "tessera", "--example", name]);
    let exe = output_dir(&dir).join("examples").join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(exe.is_file(), "{} was not built", exe.display());
    exe
}

/// A fresh, empty directory for one test's plugin files (removed when dropped).
pub struct PluginDir {
    pub path: PathBuf,
}

impl PluginDir {
    pub fn new(tag: &str) -> PluginDir {
        static COUNTER: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("tessera-plugins-{}-{tag}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        PluginDir { path }
    }

    /// Copies `file` in as `libtessera-<family>[-<variant>].so`; returns the new path.
    pub fn install(&self, file: &Path, family: &str, variant: Option<&str>) -> PathBuf {
        let name = tessera::runtime::plugin_loader::plugin_file_name(family, variant);
        let dst = self.path.join(name);
        std::fs::copy(file, &dst).unwrap_or_else(|e| panic!("copying {} to {}: {e}", file.display(), dst.display()));
        dst
    }

    /// Writes a file that is not a shared library under a plugin's name.
    pub fn install_junk(&self, family: &str) -> PathBuf {
        let dst = self.path.join(tessera::runtime::plugin_loader::plugin_file_name(family, None));
        std::fs::write(&dst, b"#!/bin/sh\necho this is not a shared library\n").unwrap();
        dst
    }
}

impl Drop for PluginDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Serialises the tests of one process that set environment variables a plugin reads (its
/// own `std` reads them without the host's lock).
pub fn env_lock() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `f` with the variables set (or removed, for `None`), then restores them.
pub fn with_env<R>(vars: &[(&str, Option<&str>)], f: impl FnOnce() -> R) -> R {
    let _guard = env_lock();
    let saved: Vec<(String, Option<String>)> =
        vars.iter().map(|(k, _)| (k.to_string(), std::env::var(k).ok())).collect();
    for (k, v) in vars {
        match v {
            Some(v) => std::env::set_var(k, v),
            None => std::env::remove_var(k),
        }
    }
    let result = f();
    for (k, v) in saved {
        match v {
            Some(v) => std::env::set_var(&k, v),
            None => std::env::remove_var(&k),
        }
    }
    result
}
