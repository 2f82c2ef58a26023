//! Placement strings: every syntax rule, name resolution, and errors that list what exists.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::OnceLock;

use tessera::registry::resolve_device;
use tessera::runtime::placement::{parse, ModuleDecl, Placement, PlacementError};
use tessera::Device;
use tessera_sim::{SimConfig, SimDevice};

const MODULES: &[ModuleDecl] = &[
    ModuleDecl { name: "embed", aliases: &["embeddings", "tok_embd"], layered: false },
    ModuleDecl { name: "encoder", aliases: &["layers", "text_encoder"], layered: true },
    ModuleDecl { name: "pool", aliases: &["pooler"], layered: false },
];

/// SIM0, SIM1 (simulated GPUs) and the CPU, in priority order.
fn devices() -> &'static [&'static dyn Device] {
    static DEVICES: OnceLock<Vec<&'static dyn Device>> = OnceLock::new();
    DEVICES.get_or_init(|| {
        let sim0: &'static dyn Device = SimDevice::create(SimConfig::new("SIM0"));
        let sim1: &'static dyn Device = SimDevice::create(SimConfig::new("SIM1"));
        vec![sim0, sim1, &tessera::cpu::CPU_DEVICE]
    })
}

fn cpu_only() -> &'static [&'static dyn Device] {
    static DEVICES: [&dyn Device; 1] = [&tessera::cpu::CPU_DEVICE];
    &DEVICES
}

fn names(devs: &[&'static dyn Device]) -> Vec<String> {
    devs.iter().map(|d| d.name().to_string()).collect()
}

#[test]
fn an_item_without_equals_sets_the_default() {
    let a = parse("cpu", MODULES).unwrap();
    assert_eq!(a.default.as_deref(), Some("cpu"));
    assert!(a.modules.is_empty());
    assert_eq!(a.request(2), Some("cpu"));
    assert_eq!(parse("", MODULES).unwrap().request(0), None);
}

#[test]
fn module_items_aliases_and_normalisation() {
    let a = parse(" Embeddings = cpu , TEXT-ENCODER=sim1,Pooler=auto", MODULES).unwrap();
    assert_eq!(a.request(0), Some("cpu"));
    assert_eq!(a.request(1), Some("sim1"));
    assert_eq!(a.request(2), Some("auto"));
}

#[test]
fn star_all_and_default_set_the_default_inside_a_list() {
    for key in ["*", "all", "default", "ALL"] {
        let a = parse(&format!("embed=cpu,{key}=sim0"), MODULES).unwrap();
        assert_eq!(a.request(0), Some("cpu"), "{key}");
        assert_eq!(a.request(1), Some("sim0"), "{key}");
    }
}

#[test]
fn later_items_override_earlier_ones() {
    let a = parse("encoder=cpu,sim0,encoder=sim1,cpu", MODULES).unwrap();
    assert_eq!(a.request(1), Some("sim1"));
    assert_eq!(a.request(0), Some("cpu"), "the last default wins");
}

#[test]
fn malformed_items_and_unknown_modules_are_errors() {
    for spec in ["=cpu", "encoder=", "cpu,,sim0", "cpu,", " , "] {
        let err = parse(spec, MODULES).unwrap_err();
        assert!(matches!(err, PlacementError::EmptyItem { .. }), "{spec}: {err:?}");
        assert!(err.to_string().starts_with("invalid backend assignment"), "{err}");
    }
    let err = parse("vae=cpu", MODULES).unwrap_err();
    assert_eq!(err.to_string(), "unknown module 'vae'; modules: embed, encoder, pool");
}

#[test]
fn device_names_resolve_case_insensitively() {
    let d = devices();
    let name = |r: &str| resolve_device(d.iter().copied(), r).map(|x| x.name().to_string());
    assert_eq!(name("auto").unwrap(), "SIM0", "best = first GPU");
    assert_eq!(name("DEFAULT").unwrap(), "SIM0");
    assert_eq!(name("gpu").unwrap(), "SIM0");
    assert_eq!(name("sim").unwrap(), "SIM0", "a family is its first device");
    assert_eq!(name("Sim1").unwrap(), "SIM1");
    assert_eq!(name("cpu").unwrap(), "CPU");
    let err = resolve_device(d.iter().copied(), "cuda9").err().unwrap();
    assert_eq!(err.to_string(), "unknown device 'cuda9'; devices: SIM0, SIM1, CPU");
    // Without a GPU, `auto` is the CPU and `gpu` is an error naming what exists.
    let cpu = || cpu_only().iter().copied();
    assert_eq!(resolve_device(cpu(), "auto").unwrap().name(), "CPU");
    assert_eq!(resolve_device(cpu(), "gpu").err().unwrap().to_string(), "no GPU found for 'gpu'; devices: CPU");
}

#[test]
fn params_follow_compute_unless_given_and_instances_are_shared() {
    let d = devices();
    let p = Placement::resolve("embed=cpu,encoder=sim1", "", MODULES, d).unwrap();
    assert_eq!(names(&p.compute), ["CPU", "SIM1", "SIM0"]);
    assert_eq!(names(&p.params), ["CPU", "SIM1", "SIM0"]);
    // One backend per distinct device, GPUs in priority order, the CPU last.
    assert_eq!(names(&p.devices(d)), ["SIM0", "SIM1", "CPU"]);

    let p = Placement::resolve("sim1", "cpu", MODULES, d).unwrap();
    assert_eq!(names(&p.compute), ["SIM1", "SIM1", "SIM1"]);
    assert_eq!(names(&p.params), ["CPU", "CPU", "CPU"]);
    assert_eq!(names(&p.devices(d)), ["SIM1", "CPU"]);
    assert_eq!(Placement::index_in(&p.devices(d), p.compute[0]), Some(0));

    let p = Placement::resolve("cpu", "", MODULES, d).unwrap();
    assert_eq!(names(&p.devices(d)), ["CPU"], "all on the CPU: one backend");

    let err = Placement::resolve("encoder=sim7", "", MODULES, d).err().unwrap();
    assert_eq!(err.to_string(), "unknown device 'sim7'; devices: SIM0, SIM1, CPU");
    assert!(matches!(err, PlacementError::Device(tessera::Error::UnknownDevice { .. })));
    let err = Placement::resolve("cpu", "decoder=cpu", MODULES, d).err().unwrap();
    assert!(matches!(err, PlacementError::UnknownModule { .. }));
}

/// A device that computes on host memory uses a model file's mapping in place
/// (`Device::buffer_from_host_ptr`); a simulated accelerator, which cannot, gets uploads.
#[test]
fn weights_are_used_in_place_where_the_device_can_and_uploaded_elsewhere() {
    use tessera::runtime::model_file::{place_weights, ModelFile, WeightSpec};
    let file = ModelFile::open(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/gguf/python_writer.gguf")).unwrap();
    let specs: Vec<WeightSpec> =
        file.tensors().iter().map(|t| WeightSpec { name: &t.name, parts: &[], dtype: t.dtype, ne: t.ne }).collect();
    assert!(!specs.is_empty());
    let base = file.bytes().as_ptr() as usize;
    let cpu = place_weights(&file, &specs, &tessera::cpu::CPU_DEVICE, &mut |_, _| {}).unwrap();
    assert!(cpu.uploaded.is_empty(), "the CPU reads the mapping where it is");
    for (spec, t) in specs.iter().zip(file.tensors()) {
        let data = cpu.get(spec.name).unwrap();
        let at = data.buffer.host_ptr().unwrap() as usize + data.offset;
        assert_eq!(at, base + t.offset, "{} is not the file's own bytes", spec.name);
    }
    let sim = tessera_sim::SimDevice::create(tessera_sim::SimConfig::new("SIM_IMPORT"));
    let uploaded = place_weights(&file, &specs, sim, &mut |_, _| {}).unwrap();
    assert!(!uploaded.uploaded.is_empty(), "the simulated device cannot use host memory in place");
}

#[test]
fn layer_ranges_instances_and_their_errors() {
    let d = devices();
    let a = parse("sim0,encoder.0-2=cpu,layers.3=sim1:1", MODULES).unwrap();
    assert_eq!(a.layers, [(1, 0, 2, "cpu".to_string()), (1, 3, 3, "sim1:1".to_string())]);
    let p = Placement::resolve("sim0,encoder.0-2=cpu,encoder.3=sim1:1,encoder.2=sim0:2", "", MODULES, d).unwrap();
    let at = |l: Option<usize>| p.compute_of(1, l).to_string();
    assert_eq!(
        [at(Some(0)), at(Some(2)), at(Some(3)), at(Some(4)), at(None)],
        ["CPU", "SIM0:2", "SIM1:1", "SIM0", "SIM0"]
    );
    assert_eq!(p.params_of(1, Some(3)).name(), "SIM1", "a layer's weights go where it runs");
    let targets: Vec<String> = p.targets(d).iter().map(|t| t.to_string()).collect();
    assert_eq!(targets, ["SIM0", "SIM0:2", "SIM1:1", "CPU"], "devices in priority order, the CPU last");
    assert!(p.check_layers(1, "encoder", 4).is_ok());
    let err = p.check_layers(1, "encoder", 3).unwrap_err();
    assert_eq!(err.to_string(), "layers 3-3 of 'encoder' do not exist: the model has 3 (0-2)");

    let p = Placement::resolve("cpu", "sim1,encoder.1=cpu", MODULES, d).unwrap();
    assert_eq!((p.params_of(1, Some(0)).name(), p.params_of(1, Some(1)).name()), ("SIM1", "CPU"));

    for (spec, want) in [
        ("embed.0=cpu", "invalid layer range in 'embed.0=cpu': module 'embed' has no numbered layers"),
        ("encoder.3-1=cpu", "invalid layer range in 'encoder.3-1=cpu': the first layer comes after the last"),
        ("encoder.x=cpu", "invalid layer range in 'encoder.x=cpu': expected N or N-M, N and M numbers"),
    ] {
        assert_eq!(parse(spec, MODULES).unwrap_err().to_string(), want);
    }
    for spec in ["sim0:x", "sim0:8", "cpu:-1"] {
        let err = Placement::resolve(spec, "", MODULES, d).err().unwrap();
        assert!(matches!(err, PlacementError::InvalidInstance { .. }), "{spec}: {err}");
    }
}

#[test]
fn split_layers_divide_layers_by_free_memory_and_explicit_layers_win() {
    let d = devices();
    let targets = Placement::resolve_split("sim0, sim1", d).unwrap();
    let mut p = Placement::resolve("sim0,encoder.5=cpu", "", MODULES, d).unwrap();
    p.split_layers(1, 6, &targets);
    let at: Vec<String> = (0..6).map(|l| p.compute_of(1, Some(l)).to_string()).collect();
    // The simulated devices have the same free memory: three layers each.
    assert_eq!(at, ["SIM0", "SIM0", "SIM0", "SIM1", "SIM1", "CPU"]);
    // Two streams of one device share its memory (a quarter each here, 1.25 and 2.5 layers
    // rounded); an odd count still covers every layer.
    let mut p = Placement::resolve("sim0", "", MODULES, d).unwrap();
    p.split_layers(1, 5, &Placement::resolve_split("sim0,sim0:1,sim1", d).unwrap());
    let at: Vec<String> = (0..5).map(|l| p.compute_of(1, Some(l)).to_string()).collect();
    assert_eq!(at, ["SIM0", "SIM0:1", "SIM0:1", "SIM1", "SIM1"]);
    assert!(matches!(Placement::resolve_split("sim0,,cpu", d), Err(PlacementError::EmptyItem { .. })));
}
