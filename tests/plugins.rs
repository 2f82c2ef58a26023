//! Backend plugins: families crossing the C tables (in process, and as shared libraries that
//! the tests build), the full op conformance suite through them, the scheduler over a
//! plugin device with memory of its own, unloading, and the loader skipping every kind of
//! bad plugin with a one-line reason while the rest keeps working.
//!
//! The variant choice (AVX-512 vs AVX2 builds) is in `plugin_variants.rs`: it sets a
//! variable the plugins read, which must not race with these tests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "conformance/mod.rs"]
mod conformance;
#[path = "plugin_support/mod.rs"]
mod plugin_support;

use std::path::Path;
use std::sync::OnceLock;

use conformance::{run_cases, selected_cases, Target};
use plugin_support::{built, with_env, PluginDir};
use tessera::allocator::{alloc_graph_tensors, alloc_tensors};
use tessera::cpu::CpuBackend;
use tessera::host_buffer::HOST_BUFFER_TYPE;
use tessera::plugin::export::panic_message;
use tessera::plugin::{loopback, Exporter, PluginBuffer, PluginProgram, ABI_VERSION};
use tessera::runtime::{Origin, RegistryConfig, RuntimeRegistry};
use tessera::{
    Backend, BackendReg, BufferBase, BufferUsage, Completion, DType, Device, Graph, Program, Result, Scheduler,
    SchedulerOptions, SplitRef, TensorData,
};
use tessera_sim::{SimConfig, SimDevice};

fn catch<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|p| panic_message(&*p))
}

/// The built-in CPU family, exported through the plugin tables.
struct CpuExport;

impl Exporter for CpuExport {
    fn reg() -> &'static dyn BackendReg {
        &tessera::cpu::CPU_REG
    }
    fn catch<R>(f: impl FnOnce() -> R) -> Result<R, String> {
        catch(f)
    }
}

fn assert_suite_passes(name: &str, summary: &conformance::Summary) {
    summary.print();
    assert_eq!(summary.failed, 0, "{name}: {}", summary.line());
    assert_eq!(summary.skipped, 0, "{name} supports every op: {}", summary.line());
    assert!(summary.passed >= 300, "{name}: {}", summary.line());
}

#[test]
fn the_cpu_family_through_the_tables_passes_the_conformance_suite() {
    let reg = loopback::<CpuExport>("CPU through the tables").unwrap();
    let device = reg.device(0).unwrap();
    assert_eq!((device.name(), device.reg().name()), ("CPU", "CPU"));
    // Tensors in buffers the plugin allocated: their handles cross the boundary.
    assert_suite_passes("plugin buffers", &conformance::run_suite(&[device]));
    // Tensors in host memory the host allocated: their addresses cross the boundary.
    let mut backend = device.init_backend().unwrap();
    let mut target = Target {
        name: "CPU through the tables, host memory".into(),
        backend: &mut *backend,
        buffer_type: &HOST_BUFFER_TYPE,
        supports_op: None,
    };
    assert_suite_passes("host memory", &run_cases(&selected_cases(), &mut target));
    drop(backend);
    reg.shutdown().unwrap();
}

/// A backend that computes through programs, as the scheduler runs a split: each call's
/// nodes are prepared into a program of the plugin once and the program runs twice, the
/// nodes' outputs poisoned in between, so the second run (a replay) must produce every
/// result again.
struct ThroughPrograms {
    inner: Box<dyn Backend>,
    prepared: usize,
    runs: usize,
}

impl ThroughPrograms {
    /// Fills the memory of the computed nodes among `nodes` with NaN bytes.
    fn poison(graph: &Graph, nodes: std::ops::Range<usize>) -> Result<()> {
        for &id in &graph.nodes()[nodes] {
            let t = graph.tensor(id)?;
            // SET_ROWS writes only the rows it names; the rest of its memory is its
            // destination's, which a replay keeps rather than recomputes.
            let partial = t.op() == tessera::Op::SetRows;
            if let (false, Some(d)) = (t.op().is_view() || partial, graph.data(id)) {
                d.buffer.fill(d.offset, t.nbytes(), 0xff)?;
            }
        }
        Ok(())
    }
}

impl Backend for ThroughPrograms {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn device(&self) -> &'static dyn Device {
        self.inner.device()
    }
    unsafe fn set_tensor_async(&mut self, dst: &TensorData, offset: usize, src: *const u8, len: usize) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { self.inner.set_tensor_async(dst, offset, src, len) }
    }
    unsafe fn get_tensor_async(&mut self, src: &TensorData, offset: usize, dst: *mut u8, len: usize) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { self.inner.get_tensor_async(src, offset, dst, len) }
    }
    fn synchronize(&mut self) -> Result<()> {
        self.inner.synchronize()
    }
    fn compute(&mut self, graph: &Graph, nodes: std::ops::Range<usize>) -> Result<()> {
        // Every tensor counted as read elsewhere: nothing may be fused away.
        let consumers = vec![u32::MAX; graph.tensors().len()];
        let split = SplitRef { graph, nodes: nodes.clone(), consumers: &consumers, layout: 1 };
        let mut program: Box<dyn Program> = self.inner.prepare(&split)?;
        assert!(program.as_any_mut().downcast_mut::<PluginProgram>().is_some(), "a program of the plugin");
        self.prepared += 1;
        self.inner.run(&mut *program, graph)?;
        self.inner.synchronize()?;
        Self::poison(graph, nodes)?;
        self.inner.run(&mut *program, graph)?;
        self.runs += 2;
        Ok(())
    }
    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

/// The conformance suite on `device`, every node prepared and replayed through its plugin's
/// program entries.
fn suite_through_programs(name: &str, device: &'static dyn Device) {
    let mut backend = ThroughPrograms { inner: device.init_backend().unwrap(), prepared: 0, runs: 0 };
    let mut target = Target::new(&mut backend);
    target.name = format!("{} ({name}, prepare + run twice)", device.name());
    let summary = run_cases(&selected_cases(), &mut target);
    assert_suite_passes(name, &summary);
    println!("{name}: {} programs prepared, {} runs", backend.prepared, backend.runs);
    assert!(backend.prepared >= summary.passed && backend.runs == 2 * backend.prepared);
}

#[test]
fn the_cpu_plugin_passes_the_conformance_suite_through_prepared_programs() {
    let reg = loopback::<CpuExport>("CPU through the tables").unwrap();
    suite_through_programs("loopback", reg.device(0).unwrap());
    reg.shutdown().unwrap();

    let built = built();
    let dir = PluginDir::new("programs");
    let path = dir.install(built.cpu_baseline(), "cpu", None);
    let mut registry = plugin_only_registry();
    let entry = with_env(&[], || registry.load(&path)).unwrap();
    suite_through_programs("the CPU plugin library", entry.devices()[0]);
    registry.unload("cpu").unwrap();
}

/// A family of simulated accelerators (device memory the host cannot read, a queue, events).
struct SimFamily {
    devices: Vec<&'static SimDevice>,
}

impl BackendReg for SimFamily {
    fn name(&self) -> &str {
        "SIM"
    }
    fn device_count(&self) -> usize {
        self.devices.len()
    }
    fn device(&self, index: usize) -> Option<&'static dyn Device> {
        self.devices.get(index).map(|d| *d as &'static dyn Device)
    }
}

struct SimExport;

impl Exporter for SimExport {
    fn reg() -> &'static dyn BackendReg {
        static FAMILY: OnceLock<SimFamily> = OnceLock::new();
        FAMILY.get_or_init(|| {
            let mut no_softmax = SimConfig::new("SIM1");
            no_softmax.unsupported_ops.push("SOFT_MAX");
            SimFamily { devices: vec![SimDevice::create(SimConfig::new("SIM0")), SimDevice::create(no_softmax)] }
        })
    }
    fn catch<R>(f: impl FnOnce() -> R) -> Result<R, String> {
        catch(f)
    }
}

fn values(n: usize, seed: f32) -> Vec<f32> {
    (0..n).map(|i| (i as f32 * 0.37 + seed).sin() * 0.5).collect()
}

#[test]
fn a_device_with_its_own_memory_and_events_works_through_the_tables() {
    let reg = loopback::<SimExport>("SIM through the tables").unwrap();
    let (sim0, sim1) = (reg.device(0).unwrap(), reg.device(1).unwrap());
    assert!(sim0.caps().events && sim0.caps().async_compute && !sim0.buffer_type().is_host());
    assert!(!sim0.supports_buffer_type(&HOST_BUFFER_TYPE));
    assert!(sim0.supports_buffer_type(sim0.buffer_type()));
    assert!(!sim0.supports_buffer_type(sim1.buffer_type()), "each simulated device has its own memory");
    assert_suite_passes("SIM0 through the tables", &conformance::run_suite(&[sim0]));

    // The scheduler over [SIM1 (no SOFT_MAX), CPU] with the weights in SIM1 memory, two
    // copies per input (so events cross the tables too): the CPU's bits.
    let mut g = Graph::new();
    let x = g.new_tensor(DType::F32, &[64, 4]).unwrap();
    g.set_input(x).unwrap();
    let w = g.new_tensor(DType::F32, &[64, 16]).unwrap();
    let y = g.mul_mat(w, x).unwrap();
    let p = g.soft_max(y, None, 0.5).unwrap();
    let o = g.gelu(p).unwrap();
    g.set_output(o).unwrap();
    g.build_forward(o).unwrap();
    let mut reference = g.clone();
    alloc_graph_tensors(&mut reference, &HOST_BUFFER_TYPE).unwrap();
    let buffers = alloc_tensors(&mut g, &[w], sim1.buffer_type()).unwrap();
    assert!(buffers[0].as_any().downcast_ref::<PluginBuffer>().is_some(), "the weights live in a plugin buffer");
    assert!(matches!(buffers[0].base(), BufferBase::Device(a) if a != 0), "device memory: {:?}", buffers[0].base());
    buffers[0].set_usage(BufferUsage::Weights);
    assert_eq!(buffers[0].usage(), BufferUsage::Weights);
    let (wv, xv) = (values(64 * 16, 1.0), values(64 * 4, 2.0));
    for graph in [&g, &reference] {
        graph.set_f32(w, &wv).unwrap();
    }
    reference.set_f32(x, &xv).unwrap();
    // The simulated device computes with the reference kernels; so do both CPU runs.
    CpuBackend::reference().compute_graph(&reference).unwrap();

    let backends: Vec<Box<dyn Backend>> = vec![sim1.init_backend().unwrap(), Box::new(CpuBackend::reference())];
    let mut sched: Scheduler = Scheduler::new(backends, SchedulerOptions { n_copies: 2, op_offload: false }).unwrap();
    let plan = sched.alloc_graph(&g).unwrap();
    assert_eq!(plan.splits.len(), 3, "{plan}");
    for _ in 0..3 {
        sched.graph().unwrap().set_f32(x, &xv).unwrap();
        assert_eq!(sched.compute().unwrap(), Completion::Finished);
        let got = sched.graph().unwrap().get_f32(o).unwrap();
        let want = reference.get_f32(o).unwrap();
        assert_eq!(
            got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            want.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
    }
    assert!(reg.live_objects() > 0);
    let e = reg.shutdown().unwrap_err();
    assert!(e.to_string().starts_with("plugin SIM: still has"), "{e}");
    drop((sched, buffers, g));
    reg.shutdown().unwrap();
}

/// A small graph computed on `device` equals the built-in CPU's result with the kernel set the
/// device's family reports it runs (a plugin variant runs the set it was built for).
fn assert_computes(registry: &RuntimeRegistry, device: &'static dyn Device) {
    let entry = registry.entry_of(device).expect("a listed device");
    let kernels = entry.features().into_iter().find(|(name, _)| name == "KERNELS").map(|(_, set)| set);
    let kernels = kernels.expect("the CPU family reports its KERNELS");
    let mut g = Graph::new();
    let a = g.new_tensor(DType::F32, &[32, 8]).unwrap();
    let b = g.new_tensor(DType::F32, &[32, 4]).unwrap();
    let y = g.mul_mat(a, b).unwrap();
    let y = g.silu(y).unwrap();
    g.build_forward(y).unwrap();
    let mut reference = g.clone();
    alloc_graph_tensors(&mut g, device.buffer_type()).unwrap();
    alloc_graph_tensors(&mut reference, &HOST_BUFFER_TYPE).unwrap();
    for graph in [&g, &reference] {
        graph.set_f32(a, &values(256, 0.5)).unwrap();
        graph.set_f32(b, &values(128, 1.5)).unwrap();
    }
    device.init_backend().unwrap().compute_graph(&g).unwrap();
    CpuBackend::with_kernels(&kernels, 1).unwrap().compute_graph(&reference).unwrap();
    assert_eq!(g.get_f32(y).unwrap(), reference.get_f32(y).unwrap());
}

fn plugin_only_registry() -> RuntimeRegistry {
    RuntimeRegistry::with_config(&[], RegistryConfig::from_vars(&[]))
}

#[test]
fn the_cpu_plugin_library_passes_the_conformance_suite_and_unloads() {
    let built = built();
    let dir = PluginDir::new("conformance");
    let path = dir.install(built.cpu_baseline(), "cpu", None);
    // The built-in CPU family is listed first: a plugin of the same family is refused.
    let mut registry = RuntimeRegistry::with_config(&[&tessera::cpu::CPU_REG], RegistryConfig::from_vars(&[]));
    let e = with_env(&[], || registry.load(&path)).err().unwrap().to_string();
    assert!(e.ends_with("the CPU family is already provided by the built-in reg (TESSERA_DISABLE_CPU=builtin uses a plugin instead)"), "{e}");
    let config = RegistryConfig::from_vars(&[("TESSERA_DISABLE_CPU", "builtin")]);
    let mut registry = RuntimeRegistry::with_config(&[&tessera::cpu::CPU_REG], config);
    let entry = with_env(&[], || registry.load(&path)).unwrap();
    assert_eq!(entry.name(), "CPU");
    assert!(
        matches!(entry.origin(), Origin::Plugin { path: p, score } if p == &path && *score == 1),
        "{}",
        entry.origin()
    );
    assert!(entry.features().iter().any(|(n, v)| n == "REFERENCE_KERNELS" && v == "1"), "{:?}", entry.features());
    let device = entry.devices()[0];
    assert_eq!(device.name(), "CPU");
    assert!(device.memory().total > 0);
    assert_eq!(registry.devices().count(), 1, "the plugin's CPU only");
    assert!(std::ptr::addr_eq(device, registry.device_by_name("cpu").unwrap()));

    assert_suite_passes("the CPU plugin", &conformance::run_suite(&[device]));
    assert_computes(&registry, device);

    // Loading the same file again is refused; unloading waits for its objects.
    let e = registry.load(&path).err().unwrap().to_string();
    assert!(e.ends_with("already loaded (family CPU)"), "{e}");
    let backend = device.init_backend().unwrap();
    let buffer = device.buffer_type().alloc_buffer(64).unwrap();
    let e = registry.unload("cpu").unwrap_err().to_string();
    assert_eq!(
        e,
        "plugin CPU: still has 2 live buffer(s), backend(s), program(s) or event(s); drop them before unloading it"
    );
    drop((backend, buffer));
    registry.unload("cpu").unwrap();
    assert_eq!(registry.devices().count(), 0);
    // The device object outlives the library and answers without calling into it.
    assert_eq!(device.memory().total, 0);
    assert!(device.init_backend().err().unwrap().to_string().contains("has been unloaded"));
    // And the file loads again.
    let device = with_env(&[], || registry.load(&path)).unwrap().devices()[0];
    assert_computes(&registry, device);
}

/// A directory with the baseline CPU plugin and `bad` (installed by `setup`), loaded with
/// `TESSERA_BAD_PLUGIN=mode`: the bad file is skipped with `reason` and the CPU plugin works.
fn assert_skipped(tag: &str, mode: Option<&str>, setup: impl FnOnce(&PluginDir) -> std::path::PathBuf, reason: &str) {
    let built = built();
    let dir = PluginDir::new(tag);
    dir.install(built.cpu_baseline(), "cpu", None);
    let bad = setup(&dir);
    let mut registry = plugin_only_registry();
    let report = with_env(&[("TESSERA_BAD_PLUGIN", mode)], || registry.load_all_from(&dir.path));
    let skipped: Vec<_> = report.skipped.iter().filter(|s| Path::new(&s.source) == bad).collect();
    assert_eq!(skipped.len(), 1, "{tag}: {:?}", report.skipped);
    let line = skipped[0].to_string();
    println!("skipped: {line}");
    assert!(skipped[0].reason.contains(reason), "{tag}: expected '{reason}' in: {line}");
    assert!(!line.contains('\n'), "{tag}: one line: {line}");
    assert_eq!(report.loaded.len(), 1, "{tag}: {report:?}");
    assert_eq!(report.loaded[0].0, "CPU");
    assert_eq!(registry.device_names(), "CPU");
    assert_computes(&registry, registry.device_by_name("CPU").unwrap());
    assert_eq!(registry.skipped(), &report.skipped[..]);
}

#[test]
fn a_file_that_is_not_a_shared_library_is_skipped() {
    assert_skipped("junk", None, |d| d.install_junk("junk"), "not a loadable shared library (");
}

#[test]
fn a_library_without_the_entry_point_is_skipped() {
    assert_skipped(
        "no-entry",
        None,
        |d| d.install(&built().no_entry, "noentry", None),
        "has no `tessera_backend_init` entry point: not a tessera backend plugin",
    );
}

#[test]
fn a_plugin_of_another_abi_version_is_skipped() {
    assert_skipped(
        "abi",
        Some("abi-version"),
        |d| d.install(&built().bad, "bad", None),
        &format!(
            "was built for plugin ABI {}, this host speaks {ABI_VERSION}; rebuild it against this tessera",
            ABI_VERSION + 1
        ),
    );
}

#[test]
fn a_plugin_that_scores_zero_is_skipped() {
    assert_skipped(
        "score",
        Some("score-zero"),
        |d| d.install(&built().bad, "bad", None),
        "scores 0: it cannot run on this machine",
    );
}

#[test]
fn a_plugin_whose_init_fails_is_skipped() {
    assert_skipped(
        "init-error",
        Some("init-error"),
        |d| d.install(&built().bad, "bad", None),
        "tessera_backend_init failed: no device answered: the driver is too old (need 550, found 470)",
    );
}

#[test]
fn a_plugin_that_panics_in_init_is_skipped() {
    assert_skipped(
        "init-panic",
        Some("init-panic"),
        |d| d.install(&built().bad, "bad", None),
        "panicked in tessera_backend_init: simulated crash while probing devices",
    );
}

#[test]
fn a_plugin_with_an_older_or_foreign_reg_table_is_skipped() {
    assert_skipped(
        "old-table",
        Some("old-table"),
        |d| d.install(&built().bad, "bad", None),
        "reg table lacks the required function `device` (a plugin built for an older or broken ABI?)",
    );
    assert_skipped(
        "reg-abi",
        Some("reg-abi"),
        |d| d.install(&built().bad, "bad", None),
        &format!("its reg table speaks plugin ABI 0, this host speaks {ABI_VERSION}"),
    );
    assert_skipped(
        "null-init",
        Some("null-init"),
        |d| d.install(&built().bad, "bad", None),
        "failed without saying why",
    );
}

#[test]
fn a_working_plugin_without_devices_loads_and_families_can_be_disabled() {
    let built = built();
    let dir = PluginDir::new("disable");
    dir.install(built.cpu_baseline(), "cpu", None);
    let bad = dir.install(&built.bad, "bad", None);
    let mut registry = plugin_only_registry();
    let report = with_env(&[("TESSERA_BAD_PLUGIN", None)], || registry.load_all_from(&dir.path));
    let loaded: Vec<&str> = report.loaded.iter().map(|(n, _, _)| n.as_str()).collect();
    assert_eq!(loaded, ["BAD", "CPU"], "accelerator families first, the CPU last");
    assert!(report.skipped.is_empty(), "{:?}", report.skipped);
    assert_eq!(registry.reg_by_name("bad").map(|e| e.devices().len()), Some(0));
    registry.unload("BAD").unwrap();
    assert_eq!(registry.regs().count(), 1);

    // TESSERA_DISABLE_<FAMILY>: the files are not even opened.
    let config = RegistryConfig::from_vars(&[("TESSERA_DISABLE_CPU", "1")]);
    let mut registry = RuntimeRegistry::with_config(&[&tessera::cpu::CPU_REG], config);
    let report = with_env(&[("TESSERA_BAD_PLUGIN", None)], || registry.load_all_from(&dir.path));
    assert_eq!(report.loaded.len(), 1);
    assert_eq!(report.skipped.len(), 1);
    assert_eq!(report.skipped[0].reason, "disabled by TESSERA_DISABLE_CPU=1");
    assert_eq!(registry.device_names(), "none");
    assert_eq!(
        registry.select(None).err().map(|e| e.to_string()).as_deref(),
        Some(
            format!(
                "no device found for 'auto'; devices: none (built-in CPU: disabled by TESSERA_DISABLE_CPU=1; {}: \
                 disabled by TESSERA_DISABLE_CPU=1)",
                report.skipped[0].source
            )
            .as_str()
        )
    );
    assert_eq!(registry.skipped()[0].to_string(), "built-in CPU: disabled by TESSERA_DISABLE_CPU=1");
    let e = with_env(&[], || registry.load(&bad)).err().unwrap().to_string();
    assert!(e.ends_with("already loaded (family BAD)"), "{e}");
}

#[test]
fn an_unknown_family_or_file_is_a_clear_error() {
    let mut registry = plugin_only_registry();
    let dir = PluginDir::new("empty");
    let e = registry.load_best("cuda", Some(&dir.path)).err().unwrap().to_string();
    assert!(e.starts_with("plugin cuda: no plugin file for it in "), "{e}");
    let e = registry.load(&dir.path.join("libtessera-nothing.so")).err().unwrap().to_string();
    assert!(e.contains("not a loadable shared library"), "{e}");
    assert!(registry.init_best().is_err());
}

#[test]
fn a_family_through_the_tables_registers_like_a_plugin_and_unloads() {
    let mut registry = RuntimeRegistry::with_config(&[], RegistryConfig::from_vars(&[]));
    let reg = loopback::<CpuExport>("CPU through the tables").unwrap();
    let entry = registry.register_loopback(reg).unwrap();
    assert_eq!(*entry.origin(), Origin::Loopback);
    assert_eq!(entry.plugin().map(|p| p.name()), Some("CPU"));
    assert!(entry.features().iter().any(|(n, _)| n == "REFERENCE_KERNELS"));
    assert_eq!(registry.select(None).map(|d| d.name()), Ok("CPU"));
    assert_computes(&registry, registry.best_device().unwrap());
    registry.unload("cpu").unwrap();
    assert!(!reg.is_loaded());
    assert_eq!(registry.device_names(), "none");
}
