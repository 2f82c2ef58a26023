//! Every backend family and device this program can use: the ones compiled in and the ones
//! loaded from plugins, with where each came from.
//!
//! `cargo run --release --example devices [-- PLUGIN_DIR]`
//!
//! Without a directory, plugins are searched where `load_all` looks (the compile-time
//! `TESSERA_BACKEND_DIR`, the executable's directory, the current directory) and
//! `TESSERA_BACKEND_PATH` is loaded too; `scripts/build-cpu-plugins.sh` builds the CPU
//! plugins into `target/plugins`. `TESSERA_DISABLE_<FAMILY>=1` and
//! `TESSERA_<FAMILY>_VISIBLE_DEVICES=0,2` apply.

use std::path::PathBuf;

use tessera::runtime::RuntimeRegistry;
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

fn main() {
    let mut registry = RuntimeRegistry::new(tessera::BUILTIN_REGS);
    let report = match std::env::args_os().nth(1).map(PathBuf::from) {
        Some(dir) => {
            println!("plugins from {}", dir.display());
            registry.load_all_from(&dir)
        }
        None => {
            let dirs: Vec<String> = registry.config().search_dirs().iter().map(|d| d.display().to_string()).collect();
            println!("plugins searched in: {}", dirs.join(", "));
            registry.load_all()
        }
    };
    let n_devices = registry.devices().count();
    println!(
        "{} backend families, {} devices ({} plugins loaded)\n",
        registry.regs().count(),
        n_devices,
        report.loaded.len()
    );
    for entry in registry.regs() {
        println!("{}  [{}]", entry.name(), entry.origin());
        let features: Vec<String> = entry.features().iter().map(|(n, v)| format!("{n}={v}")).collect();
        if !features.is_empty() {
            println!("  features: {}", features.join(" "));
        }
        if entry.devices().is_empty() {
            println!("  (no devices)");
        }
        for d in entry.devices() {
            println!("  {}: {}", d.name(), d.description());
            println!("      type {}, memory {}", d.device_type().name(), memory(*d));
            println!("      caps: {}", caps(d.caps()));
            println!(
                "      buffer type {}{}",
                d.buffer_type().name(),
                if d.buffer_type().is_host() { " (host)" } else { "" }
            );
            if let Some(pci) = d.pci_bus_id() {
                println!("      PCI {pci}");
            }
        }
        println!();
    }
    for h in registry.hidden() {
        println!("hidden: {}: {}", h.device.name(), h.reason);
    }
    for s in registry.skipped() {
        println!("skipped: {s}");
    }
    match registry.best_device() {
        Some(d) => println!("best device: {}", d.name()),
        None => println!("best device: none"),
    }
}
