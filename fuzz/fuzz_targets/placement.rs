//! Placement strings against a fixed device list: parsing and resolving never panic, and
//! every accepted placement names devices that exist.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use tessera::registry::resolve_device;
use tessera::runtime::placement::{parse, ModuleDecl, Placement};
use tessera::Device;
use tessera_sim::{SimConfig, SimDevice};

const MODULES: &[ModuleDecl] = &[
    ModuleDecl { name: "embed", aliases: &["embeddings"], layered: false },
    ModuleDecl { name: "encoder", aliases: &["layers", "text_encoder"], layered: true },
    ModuleDecl { name: "pool", aliases: &["pooler"], layered: false },
];

fn devices() -> &'static [&'static dyn Device] {
    static D: OnceLock<Vec<&'static dyn Device>> = OnceLock::new();
    D.get_or_init(|| {
        let g0: &'static dyn Device = SimDevice::create(SimConfig::new("SIM0"));
        let g1: &'static dyn Device = SimDevice::create(SimConfig::new("SIM1"));
        vec![g0, g1, &tessera::cpu::CPU_DEVICE]
    })
}

fuzz_target!(|input: (&str, &str)| {
    let (backend, params) = input;
    let d = devices();
    if let Ok(a) = parse(backend, MODULES) {
        for m in 0..MODULES.len() {
            if let Some(r) = a.request(m) {
                let _ = resolve_device(d.iter().copied(), r);
            }
        }
    }
    if let Ok(p) = Placement::resolve(backend, params, MODULES, d) {
        assert_eq!(p.compute.len(), MODULES.len());
        let set = p.devices(d);
        for dev in p.compute.iter().chain(&p.params) {
            assert!(Placement::index_in(&set, *dev).is_some(), "{} is not among the backends", dev.name());
        }
        assert_eq!(set.last().map(|x| x.name()), Some("CPU"));
    }
});
