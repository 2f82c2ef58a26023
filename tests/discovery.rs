//! One registry for every program: the compiled-in families plus the plugins found at run
//! time, filtered by `TESSERA_DISABLE_<FAMILY>`, each family listed once; module placement
//! resolving among its devices; and `hello_graph` run as a process under those variables.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "plugin_support/mod.rs"]
mod plugin_support;

use std::path::Path;
use std::process::{Command, Output};

use plugin_support::{built, built_example, PluginDir};
use tessera::allocator::alloc_graph_tensors;
use tessera::cpu::CpuBackend;
use tessera::host_buffer::HOST_BUFFER_TYPE;
use tessera::runtime::placement::{ModuleDecl, Placement};
use tessera::runtime::{Origin, RegistryConfig, RuntimeRegistry};
use tessera::{Backend, DType, Device, Error, Graph};

/// What `discover` finds with these variables (and no others) set.
fn discover(vars: &[(&str, &str)]) -> RuntimeRegistry {
    tessera::discover_with(RegistryConfig::from_vars(vars))
}

fn dir_var(dir: &PluginDir) -> &str {
    dir.path.to_str().expect("a temporary directory with a UTF-8 path")
}

fn origin(registry: &RuntimeRegistry, device: &dyn Device) -> Origin {
    registry.entry_of(device).expect("a listed device has a family").origin().clone()
}

fn skipped_of(registry: &RuntimeRegistry, family: &str) -> Vec<String> {
    registry.skipped_of(family).map(|s| s.to_string()).collect()
}

/// `silu(a · b)` on `device` equals the built-in CPU's result with the kernel set `kernels`
/// (the set the plugin reports it runs).
fn assert_computes(device: &'static dyn Device, kernels: &str) {
    let mut g = Graph::new();
    let a = g.new_tensor(DType::F32, &[32, 8]).unwrap();
    let b = g.new_tensor(DType::F32, &[32, 4]).unwrap();
    let y = g.mul_mat(a, b).unwrap();
    let y = g.silu(y).unwrap();
    g.build_forward(y).unwrap();
    let mut reference = g.clone();
    alloc_graph_tensors(&mut g, device.buffer_type()).unwrap();
    alloc_graph_tensors(&mut reference, &HOST_BUFFER_TYPE).unwrap();
    let values = |n: usize, seed: f32| (0..n).map(|i| (i as f32 * 0.37 + seed).sin()).collect::<Vec<_>>();
    for graph in [&g, &reference] {
        graph.set_f32(a, &values(256, 0.5)).unwrap();
        graph.set_f32(b, &values(128, 1.5)).unwrap();
    }
    device.init_backend().unwrap().compute_graph(&g).unwrap();
    CpuBackend::with_kernels(kernels, 1).unwrap().compute_graph(&reference).unwrap();
    assert_eq!(g.get_f32(y).unwrap(), reference.get_f32(y).unwrap());
}

#[test]
fn with_the_cpu_family_disabled_and_no_plugin_there_is_no_device() {
    let empty = PluginDir::new("no-plugins");
    let registry = discover(&[("TESSERA_DISABLE_CPU", "1"), ("TESSERA_BACKEND_DIR", dir_var(&empty))]);
    assert_eq!(registry.device_names(), "none");
    let e = registry.select(None).err().unwrap();
    assert!(matches!(e, Error::NoDevice { .. }), "{e:?}");
    assert_eq!(
        e.to_string(),
        "no device found for 'auto'; devices: none (built-in CPU: disabled by TESSERA_DISABLE_CPU=1)"
    );
    assert_eq!(registry.init_best().err().map(|e| e.to_string()), Some(e.to_string()));
}

#[test]
fn a_family_built_in_and_found_as_a_plugin_is_listed_once() {
    let dir = PluginDir::new("duplicate");
    let path = dir.install(built().cpu_baseline(), "cpu", Some("x86-64"));
    let in_dir = ("TESSERA_BACKEND_DIR", dir_var(&dir));

    // The built-in family wins; the plugin file says why it was not used.
    let registry = discover(&[in_dir]);
    assert_eq!(registry.device_names(), "CPU");
    let device = registry.select(None).unwrap();
    assert!(std::ptr::addr_eq(device, &tessera::cpu::CPU_DEVICE as &dyn Device));
    assert_eq!(origin(&registry, device), Origin::BuiltIn);
    assert_eq!(
        skipped_of(&registry, "CPU"),
        [format!(
            "{}: the CPU family is already provided by the built-in reg \
             (TESSERA_DISABLE_CPU=builtin uses a plugin instead)",
            path.display()
        )]
    );

    // `=builtin` keeps the built-in family out: the plugin's CPU runs.
    let registry = discover(&[("TESSERA_DISABLE_CPU", "builtin"), in_dir]);
    assert_eq!(registry.device_names(), "CPU");
    let device = registry.select(Some("cpu")).unwrap();
    assert_eq!(origin(&registry, device), Origin::Plugin { path: path.clone(), score: 1 });
    assert!(!std::ptr::addr_eq(device, &tessera::cpu::CPU_DEVICE as &dyn Device));
    assert_eq!(skipped_of(&registry, "cpu"), ["built-in CPU: disabled by TESSERA_DISABLE_CPU=builtin"]);
    let entry = registry.entry_of(device).unwrap();
    let kernels = entry.features().into_iter().find(|(name, _)| name == "KERNELS").map(|(_, set)| set);
    // The baseline build runs the baseline kernels, whatever this processor has.
    assert_eq!(kernels.as_deref(), Some(if cfg!(target_arch = "aarch64") { "neon" } else { "scalar" }));
    assert_computes(device, kernels.as_deref().unwrap());

    // `=plugin` keeps the plugins out, `=1` both.
    let registry = discover(&[("TESSERA_DISABLE_CPU", "plugin"), in_dir]);
    assert_eq!(origin(&registry, registry.select(None).unwrap()), Origin::BuiltIn);
    assert_eq!(skipped_of(&registry, "cpu"), [format!("{}: disabled by TESSERA_DISABLE_CPU=plugin", path.display())]);
    let registry = discover(&[("TESSERA_DISABLE_CPU", "1"), in_dir]);
    assert_eq!(
        registry.select(None).err().unwrap().to_string(),
        format!(
            "no device found for 'auto'; devices: none (built-in CPU: disabled by TESSERA_DISABLE_CPU=1; \
             {}: disabled by TESSERA_DISABLE_CPU=1)",
            path.display()
        )
    );
}

#[test]
fn the_plugin_directories_are_searched_in_order() {
    let first = PluginDir::new("first");
    let second = PluginDir::new("second");
    let a = first.install(built().cpu_baseline(), "cpu", None);
    let b = second.install(built().cpu_baseline(), "cpu", None);
    // Two directories in TESSERA_BACKEND_DIR: of equal scores, the first directory's wins.
    let list = std::env::join_paths([&first.path, &second.path]).unwrap().into_string().unwrap();
    let registry = discover(&[("TESSERA_DISABLE_CPU", "builtin"), ("TESSERA_BACKEND_DIR", &list)]);
    assert_eq!(origin(&registry, registry.select(None).unwrap()), Origin::Plugin { path: a.clone(), score: 1 });
    let reasons = skipped_of(&registry, "cpu");
    assert!(reasons.iter().any(|r| r.starts_with(&b.display().to_string())), "{reasons:?}");
    // A directory the program gives comes before the variable's.
    let config = RegistryConfig::from_vars(&[("TESSERA_DISABLE_CPU", "builtin"), ("TESSERA_BACKEND_DIR", &list)])
        .with_backend_dir(&second.path);
    let registry = tessera::discover_with(config);
    assert_eq!(origin(&registry, registry.select(None).unwrap()), Origin::Plugin { path: b, score: 1 });
}

const MODULES: &[ModuleDecl] = &[
    ModuleDecl { name: "embed", aliases: &[], layered: false },
    ModuleDecl { name: "encoder", aliases: &[], layered: true },
    ModuleDecl { name: "pool", aliases: &[], layered: false },
];

#[test]
fn placement_resolves_among_the_devices_the_registry_lists() {
    let dir = PluginDir::new("placement");
    let path = dir.install(built().cpu_baseline(), "cpu", None);
    let registry = discover(&[("TESSERA_DISABLE_CPU", "builtin"), ("TESSERA_BACKEND_DIR", dir_var(&dir))]);
    let devices: Vec<&'static dyn Device> = registry.devices().collect();
    let p = Placement::resolve("encoder=cpu", "", MODULES, &devices).unwrap();
    for d in p.compute.iter().chain(&p.params) {
        assert_eq!(origin(&registry, *d), Origin::Plugin { path: path.clone(), score: 1 });
    }
    assert_eq!(p.devices(&devices).len(), 1);
    let e = Placement::resolve("encoder=cuda", "", MODULES, &devices).err().unwrap();
    assert_eq!(e.to_string(), "unknown device 'cuda'; devices: CPU");
    let e = Placement::resolve("gpu", "", MODULES, &devices).err().unwrap();
    assert_eq!(e.to_string(), "no GPU found for 'gpu'; devices: CPU");
    let e = Placement::resolve("", "", MODULES, &[]).err().unwrap();
    assert_eq!(e.to_string(), "no device found for 'auto'; devices: none");
}

/// Runs `exe` in `cwd` with only these of tessera's variables set.
fn run(exe: &Path, cwd: &Path, vars: &[(&str, &str)]) -> Output {
    let mut command = Command::new(exe);
    command.current_dir(cwd);
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(|n| n.starts_with("TESSERA_")) {
            command.env_remove(name);
        }
    }
    let out = command.envs(vars.iter().copied()).output().expect("running the example");
    println!("$ {} {vars:?}: {}", exe.display(), out.status);
    println!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    out
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The lines `hello_graph` prints its results on.
fn results(stdout: &str) -> Vec<&str> {
    stdout.lines().filter(|l| l.starts_with("sample ")).collect()
}

#[test]
fn hello_graph_runs_where_the_environment_says_and_says_where() {
    let exe = built_example("hello_graph");
    let dir = PluginDir::new("hello-graph");
    let plugin = dir.install(built().cpu_baseline(), "cpu", None);
    let empty = PluginDir::new("hello-graph-cwd");
    let cwd = empty.path.as_path();

    let out = run(&exe, cwd, &[]);
    assert!(out.status.success());
    let built_in = text(&out.stdout);
    assert!(built_in.contains("\nfrom: built in\n"), "{built_in}");
    assert_eq!(results(&built_in).len(), 2, "{built_in}");

    // No CPU family and no plugin: a clear error and a failing exit status, no panic.
    let out = run(&exe, cwd, &[("TESSERA_DISABLE_CPU", "1")]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "hello_graph: no device found for 'auto'; devices: none (built-in CPU: disabled by TESSERA_DISABLE_CPU=1)\n"
    );
    assert!(out.stdout.is_empty());

    // The built-in family kept out, the plugin found in TESSERA_BACKEND_DIR: it runs there,
    // with the built-in's results.
    let out = run(&exe, cwd, &[("TESSERA_DISABLE_CPU", "builtin"), ("TESSERA_BACKEND_DIR", dir_var(&dir))]);
    assert!(out.status.success());
    let from_plugin = text(&out.stdout);
    assert!(from_plugin.contains(&format!("\nfrom: plugin {} (score 1)\n", plugin.display())), "{from_plugin}");
    assert_eq!(results(&from_plugin), results(&built_in));

    // `=1` keeps the plugin out as well.
    let out = run(&exe, cwd, &[("TESSERA_DISABLE_CPU", "1"), ("TESSERA_BACKEND_DIR", dir_var(&dir))]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains(&format!("{}: disabled by TESSERA_DISABLE_CPU=1", plugin.display())));
}

#[test]
fn a_plugin_in_the_current_directory_is_loaded_only_when_asked_for() {
    let exe = built_example("hello_graph");
    let cwd = PluginDir::new("untrusted-cwd");
    let plugin = cwd.install(built().cpu_baseline(), "cpu", None);
    // Run in a directory holding a plugin: it is not loaded (no CPU is left without it).
    let out = run(&exe, &cwd.path, &[("TESSERA_DISABLE_CPU", "builtin")]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    assert!(text(&out.stderr).contains("no device found for 'auto'"), "{}", text(&out.stderr));
    // Named as `.`, it is, and the program says where it came from.
    let out = run(&exe, &cwd.path, &[("TESSERA_DISABLE_CPU", "builtin"), ("TESSERA_BACKEND_DIR", ".")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let name = plugin.file_name().unwrap().to_string_lossy().into_owned();
    assert!(text(&out.stdout).contains(&format!("\nfrom: plugin ./{name} (score 1)\n")), "{}", text(&out.stdout));
    assert!(text(&out.stderr).contains(&format!("loaded plugin CPU from ./{name} (score 1)")), "{}", text(&out.stderr));
}
