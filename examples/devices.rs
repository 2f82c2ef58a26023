//! Every backend family and device this program can use: the ones compiled in and the ones
//! loaded from plugins, with where each came from and which sources of a family were not
//! used, and why.
//!
//! `cargo run --release --example devices [-- PLUGIN_DIR]`
//!
//! Plugins are searched in `PLUGIN_DIR` first (it must be a directory), then where every
//! program looks (`TESSERA_BACKEND_DIR`, the executable's directory), and
//! `TESSERA_BACKEND_PATH` is loaded too; `scripts/build-cpu-plugins.sh` builds the CPU
//! plugins into `target/plugins`. `TESSERA_DISABLE_<FAMILY>=1` (`=builtin`: only the
//! compiled-in family, so that its plugin is used) and `TESSERA_<FAMILY>_VISIBLE_DEVICES=0,2`
//! apply.

#[macro_use]
#[path = "common/mod.rs"]
mod common;

use std::path::PathBuf;
use std::process::ExitCode;

use tessera::runtime::RegistryConfig;
use tessera::{Device, DeviceCaps};

fn gib(bytes: usize) -> f64 {
    bytes as f64 / (1u64 << 30) as f64
}

fn memory(device: &dyn Device) -> String {
    let m = device.memory();
    if m.total == 0 {
        "unknown".into()
    } else {
        format!("{:.1} GiB free of {:.1} GiB", gib(m.free), gib(m.total))
    }
}

fn caps(c: DeviceCaps) -> String {
    let names: Vec<&str> = [
        (c.async_compute, "async"),
        (c.host_buffer, "host_buffer"),
        (c.buffer_from_host_ptr, "buffer_from_host_ptr"),
        (c.events, "events"),
        (c.prompt_flash_attn, "prompt_flash_attn"),
    ]
    .into_iter()
    .filter_map(|(on, name)| on.then_some(name))
    .collect();
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let mut config = RegistryConfig::from_env();
    if let Some(dir) = args.next().map(PathBuf::from) {
        match std::fs::metadata(&dir) {
            Ok(m) if m.is_dir() => config = config.with_backend_dir(dir),
            Ok(_) => return fail(&format!("{} is not a directory; expected a directory of plugins", dir.display())),
            Err(e) => return fail(&format!("plugin directory {}: {e}", dir.display())),
        }
    }
    if let Some(extra) = args.next() {
        return fail(&format!("unexpected argument '{}'; usage: devices [PLUGIN_DIR]", extra.to_string_lossy()));
    }
    let dirs: Vec<String> = config.search_dirs().iter().map(|d| d.display().to_string()).collect();
    outln!("plugins searched in: {}", dirs.join(", "));
    let registry = tessera::discover_with(config);
    let n_plugins = registry.regs().filter(|e| e.plugin().is_some()).count();
    outln!(
        "{} backend families, {} devices ({n_plugins} from plugins)\n",
        registry.regs().count(),
        registry.devices().count()
    );
    for entry in registry.regs() {
        outln!("{}  [{}]", entry.name(), entry.origin());
        for s in registry.skipped_of(entry.name()) {
            outln!("  not used: {s}");
        }
        let features: Vec<String> = entry.features().iter().map(|(n, v)| format!("{n}={v}")).collect();
        if !features.is_empty() {
            outln!("  features: {}", features.join(" "));
        }
        if entry.devices().is_empty() {
            outln!("  (no devices)");
        }
        for d in entry.devices() {
            outln!("  {}: {}", d.name(), d.description());
            outln!("      type {}, memory {}", d.device_type().name(), memory(*d));
            outln!("      caps: {}", caps(d.caps()));
            outln!(
                "      buffer type {}{}",
                d.buffer_type().name(),
                if d.buffer_type().is_host() { " (host)" } else { "" }
            );
            if let Some(pci) = d.pci_bus_id() {
                outln!("      PCI {pci}");
            }
        }
        outln!();
    }
    for h in registry.hidden() {
        outln!("hidden: {}: {}", h.device.name(), h.reason);
    }
    let listed = |family: &str| registry.reg_by_name(family).is_some();
    for s in registry.skipped().iter().filter(|s| !s.family.as_deref().is_some_and(listed)) {
        outln!("skipped: {s}");
    }
    match registry.select(None) {
        Ok(d) => outln!("best device: {}", d.name()),
        Err(e) => outln!("best device: none ({e})"),
    }
    ExitCode::SUCCESS
}

fn fail(message: &str) -> ExitCode {
    eprintln!("devices: {message}");
    ExitCode::FAILURE
}
