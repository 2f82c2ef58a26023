//! Per-module device placement: `--backend embed=cpu,encoder=cuda0` (where each module's
//! graphs run) and `--params-backend ...` (where its weights live), resolved against the
//! devices that exist.
//!
//! Syntax, the same for both: comma-separated items; an item without `=` sets the default;
//! `module=device` sets one module (the model declares module names and aliases, matched
//! case-insensitively with `-` and `_` ignored); `module.N=device` and `module.N-M=device` set
//! layers N to M (inclusive) of a module that has numbered layers; `*=`, `all=` and
//! `default=` set the default inside a list; later items override earlier ones. Device names:
//! `auto`/`default` (the best device), `gpu` (the first GPU, else integrated GPU), a family
//! (`cpu`, `cuda`: its first device), or an exact device name (`cuda1`), all
//! case-insensitive, resolved by [`tessera_core::registry::resolve_device`] among the devices
//! given: a program passes the runtime registry's (`tessera::discover().devices()`), so
//! plugins and the environment apply. A compute device may end in `:K` to run on the K-th
//! backend (stream) of that device (`cuda0:1`): two instances of one GPU run their parts
//! concurrently, as two GPUs would.
//!
//! `--split-layers cuda0,cuda1` ([`Placement::resolve_split`], [`Placement::split_layers`])
//! divides a module's layers into contiguous runs, one per device, in proportion to each
//! device's free memory; explicit layer items still win over it.

use std::fmt;

use tessera_core::registry::resolve_device;
use tessera_core::Device;

/// A module a model declares: its name, the other names users may call it by, and whether it
/// is made of numbered layers that can be placed one by one (`encoder.0-2=cuda0`).
#[derive(Clone, Copy, Debug)]
pub struct ModuleDecl {
    pub name: &'static str,
    pub aliases: &'static [&'static str],
    pub layered: bool,
}

/// The most backend instances of one device a placement may ask for (`cuda0:7`).
pub const MAX_INSTANCES: usize = 8;

/// What went wrong with a placement.
#[derive(Clone, Debug, PartialEq)]
pub enum PlacementError {
    /// An item with an empty module or device (`=cpu`, `encoder=`, `a,,b`).
    EmptyItem {
        spec: String,
        item: String,
    },
    UnknownModule {
        module: String,
        modules: String,
    },
    /// A layer range on a module without layers, or one that is not `N` or `N-M` with N <= M.
    InvalidLayers {
        item: String,
        why: String,
    },
    /// A layer range past the model's last layer.
    LayersOutOfRange {
        module: String,
        first: usize,
        last: usize,
        layers: usize,
    },
    /// A `:K` suffix that is not a number below [`MAX_INSTANCES`].
    InvalidInstance {
        request: String,
    },
    /// A device request that names no device there is (`unknown device 'cuda9'; devices:
    /// CPU`), or `gpu`/`auto` with none to give.
    Device(tessera_core::Error),
}

impl fmt::Display for PlacementError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlacementError::EmptyItem { spec, item } => {
                write!(f, "invalid backend assignment '{item}' in '{spec}': expected 'device' or 'module=device'")
            }
            PlacementError::UnknownModule { module, modules } => {
                write!(f, "unknown module '{module}'; modules: {modules}")
            }
            PlacementError::InvalidLayers { item, why } => write!(f, "invalid layer range in '{item}': {why}"),
            PlacementError::LayersOutOfRange { module, first, last, layers } => write!(
                f,
                "layers {first}-{last} of '{module}' do not exist: the model has {layers} (0-{})",
                layers.saturating_sub(1)
            ),
            PlacementError::InvalidInstance { request } => write!(
                f,
                "invalid device instance in '{request}': expected 'device' or 'device:K' with K below {MAX_INSTANCES}"
            ),
            PlacementError::Device(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for PlacementError {}

impl From<tessera_core::Error> for PlacementError {
    fn from(e: tessera_core::Error) -> Self {
        PlacementError::Device(e)
    }
}

/// A parsed assignment: an optional default, per-module and per-layer device requests
/// (unresolved).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Assignment {
    pub default: Option<String>,
    /// `(module index, device request)`, later entries winning.
    pub modules: Vec<(usize, String)>,
    /// `(module index, first layer, last layer, device request)`, later entries winning.
    pub layers: Vec<(usize, usize, usize, String)>,
}

impl Assignment {
    /// The device request for module `m`: its own entry, else the default.
    pub fn request(&self, m: usize) -> Option<&str> {
        self.modules.iter().rev().find(|(i, _)| *i == m).map(|(_, d)| d.as_str()).or(self.default.as_deref())
    }
}

/// Lower case without `-` and `_`, for module-name matching.
fn normalize(s: &str) -> String {
    s.trim().chars().filter(|c| *c != '-' && *c != '_').flat_map(char::to_lowercase).collect()
}

/// `N` or `N-M` (N <= M) as `(N, M)`.
fn layer_range(text: &str, item: &str) -> Result<(usize, usize), PlacementError> {
    let invalid = |why: &str| PlacementError::InvalidLayers { item: item.trim().into(), why: why.into() };
    let number = |t: &str| t.trim().parse::<usize>().map_err(|_| invalid("expected N or N-M, N and M numbers"));
    let (first, last) = match text.split_once('-') {
        Some((a, b)) => (number(a)?, number(b)?),
        None => {
            let n = number(text)?;
            (n, n)
        }
    };
    if first > last {
        return Err(invalid("the first layer comes after the last"));
    }
    Ok((first, last))
}

/// Parses one `--backend` / `--params-backend` value against the model's modules.
pub fn parse(spec: &str, modules: &[ModuleDecl]) -> Result<Assignment, PlacementError> {
    let mut out = Assignment::default();
    if spec.trim().is_empty() {
        return Ok(out);
    }
    for item in spec.split(',') {
        let empty = || PlacementError::EmptyItem { spec: spec.into(), item: item.into() };
        match item.split_once('=') {
            None => {
                let device = item.trim();
                if device.is_empty() {
                    return Err(empty());
                }
                out.default = Some(device.into());
            }
            Some((raw_key, device)) => {
                let (name, layers) = match raw_key.split_once('.') {
                    Some((name, layers)) => (name, Some(layers)),
                    None => (raw_key, None),
                };
                let (key, device) = (normalize(name), device.trim());
                if key.is_empty() || device.is_empty() {
                    return Err(empty());
                }
                if layers.is_none() && matches!(key.as_str(), "*" | "all" | "default") {
                    out.default = Some(device.into());
                    continue;
                }
                let m = modules
                    .iter()
                    .position(|d| normalize(d.name) == key || d.aliases.iter().any(|a| normalize(a) == key))
                    .ok_or_else(|| PlacementError::UnknownModule {
                        module: name.trim().into(),
                        modules: modules.iter().map(|d| d.name).collect::<Vec<_>>().join(", "),
                    })?;
                match layers {
                    None => out.modules.push((m, device.into())),
                    Some(_) if !modules[m].layered => {
                        return Err(PlacementError::InvalidLayers {
                            item: item.trim().into(),
                            why: format!("module '{}' has no numbered layers", modules[m].name),
                        })
                    }
                    Some(text) => {
                        let (first, last) = layer_range(text, item)?;
                        out.layers.push((m, first, last, device.into()));
                    }
                }
            }
        }
    }
    Ok(out)
}

/// A backend to run on: a device, and which of its instances (streams); instance 0 unless a
/// request asked for another with `device:K`.
#[derive(Clone, Copy)]
pub struct Target {
    pub device: &'static dyn Device,
    pub instance: usize,
}

impl Target {
    pub fn new(device: &'static dyn Device) -> Target {
        Target { device, instance: 0 }
    }

    /// Resolves `name` or `name:K` among `devices`.
    pub fn resolve(devices: &[&'static dyn Device], request: &str) -> Result<Target, PlacementError> {
        let (name, instance) = match request.rsplit_once(':') {
            Some((name, k)) => {
                let k = k.trim().parse::<usize>().ok().filter(|&k| k < MAX_INSTANCES);
                (name, k.ok_or_else(|| PlacementError::InvalidInstance { request: request.trim().into() })?)
            }
            None => (request, 0),
        };
        Ok(Target { device: resolve_device(devices.iter().copied(), name.trim())?, instance })
    }

    /// Index of this target among `set` (from [`Placement::targets`]).
    pub fn index_in(&self, set: &[Target]) -> Option<usize> {
        set.iter().position(|t| t == self)
    }
}

impl PartialEq for Target {
    fn eq(&self, other: &Target) -> bool {
        std::ptr::addr_eq(self.device as *const dyn Device, other.device as *const dyn Device)
            && self.instance == other.instance
    }
}

impl Eq for Target {}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.instance {
            0 => f.write_str(self.device.name()),
            k => write!(f, "{}:{k}", self.device.name()),
        }
    }
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Where layers `first..=last` of module `module` run, or keep their weights.
#[derive(Clone, Copy)]
pub struct LayerRule {
    pub module: usize,
    pub first: usize,
    pub last: usize,
    /// Where they run (`None`: as their module).
    pub compute: Option<Target>,
    /// Where their weights live (`None`: as their module's `--params-backend`, else where the
    /// layer runs).
    pub params: Option<&'static dyn Device>,
}

impl LayerRule {
    fn covers(&self, module: usize, layer: usize) -> bool {
        self.module == module && (self.first..=self.last).contains(&layer)
    }
}

/// Where every module (and layer) runs and where its weights live.
pub struct Placement {
    /// Per module (in the model's order): the device its graphs run on.
    pub compute: Vec<&'static dyn Device>,
    /// Per module: which instance of its compute device it runs on (`cuda0:1`).
    pub instances: Vec<usize>,
    /// Per module: the device whose memory holds its weights.
    pub params: Vec<&'static dyn Device>,
    /// Per module: whether `params` was asked for (else it follows the compute device, and a
    /// layer placed elsewhere takes its weights along).
    pub params_given: Vec<bool>,
    /// Layer rules in the order given, later ones winning.
    pub layers: Vec<LayerRule>,
}

impl Placement {
    /// [`resolve`](Self::resolve) among the devices `registry` lists; a request it cannot
    /// satisfy also says why sources were skipped.
    pub fn resolve_in(
        registry: &crate::RuntimeRegistry,
        backend: &str,
        params_backend: &str,
        modules: &[ModuleDecl],
    ) -> Result<Placement, PlacementError> {
        let devices: Vec<&'static dyn Device> = registry.requestable_devices().collect();
        Placement::resolve(backend, params_backend, modules, &devices).map_err(|e| match e {
            PlacementError::Device(e) => PlacementError::Device(registry.explain(e)),
            other => other,
        })
    }

    /// Resolves `--backend` and `--params-backend` values for `modules` among `devices`.
    /// Modules without a compute request run on the best device; modules without a params
    /// request keep their weights where they run.
    pub fn resolve(
        backend: &str,
        params_backend: &str,
        modules: &[ModuleDecl],
        devices: &[&'static dyn Device],
    ) -> Result<Placement, PlacementError> {
        let compute_spec = parse(backend, modules)?;
        let params_spec = parse(params_backend, modules)?;
        let n = modules.len();
        let mut p = Placement {
            compute: Vec::with_capacity(n),
            instances: Vec::with_capacity(n),
            params: Vec::with_capacity(n),
            params_given: Vec::with_capacity(n),
            layers: Vec::new(),
        };
        for m in 0..n {
            let c = Target::resolve(devices, compute_spec.request(m).unwrap_or("auto"))?;
            let params = params_spec.request(m).map(|r| resolve_device(devices.iter().copied(), r)).transpose()?;
            p.compute.push(c.device);
            p.instances.push(c.instance);
            p.params.push(params.unwrap_or(c.device));
            p.params_given.push(params.is_some());
        }
        for (module, first, last, request) in &compute_spec.layers {
            let compute = Some(Target::resolve(devices, request)?);
            p.layers.push(LayerRule { module: *module, first: *first, last: *last, compute, params: None });
        }
        for (module, first, last, request) in &params_spec.layers {
            let params = Some(resolve_device(devices.iter().copied(), request)?);
            p.layers.push(LayerRule { module: *module, first: *first, last: *last, compute: None, params });
        }
        Ok(p)
    }

    /// Parses `--split-layers` (device requests, comma-separated, `device:K` allowed).
    pub fn resolve_split(spec: &str, devices: &[&'static dyn Device]) -> Result<Vec<Target>, PlacementError> {
        let mut out = Vec::new();
        for item in spec.split(',') {
            if item.trim().is_empty() {
                return Err(PlacementError::EmptyItem { spec: spec.into(), item: item.into() });
            }
            out.push(Target::resolve(devices, item)?);
        }
        Ok(out)
    }

    /// Runs the `layers` layers of module `module` on `targets`, contiguous runs in their
    /// order, as many layers each as its share of the free memory (instances of one device
    /// share it); layer rules already given keep precedence.
    pub fn split_layers(&mut self, module: usize, layers: usize, targets: &[Target]) {
        let share = |t: &Target| {
            let copies = targets.iter().filter(|u| std::ptr::addr_eq(u.device, t.device)).count().max(1);
            let free = t.device.memory().free.max(1) as f64;
            free / copies as f64
        };
        let total: f64 = targets.iter().map(share).sum();
        let mut rules = Vec::new();
        let (mut done, mut acc) = (0usize, 0.0f64);
        for t in targets {
            acc += share(t);
            let end = ((acc / total) * layers as f64).round() as usize;
            let end = end.clamp(done, layers);
            if end > done {
                rules.push(LayerRule { module, first: done, last: end - 1, compute: Some(*t), params: None });
            }
            done = end;
        }
        rules.append(&mut self.layers);
        self.layers = rules;
    }

    /// Checks that the layer rules of module `module` (called `name`) name layers among its
    /// `layers`.
    pub fn check_layers(&self, module: usize, name: &str, layers: usize) -> Result<(), PlacementError> {
        match self.layers.iter().find(|r| r.module == module && r.last >= layers) {
            Some(r) => {
                Err(PlacementError::LayersOutOfRange { module: name.into(), first: r.first, last: r.last, layers })
            }
            None => Ok(()),
        }
    }

    /// Where module `module` (layer `layer`, for a layered module) runs.
    pub fn compute_of(&self, module: usize, layer: Option<usize>) -> Target {
        let rule = layer.and_then(|l| self.layers.iter().rev().find(|r| r.compute.is_some() && r.covers(module, l)));
        match rule.and_then(|r| r.compute) {
            Some(t) => t,
            None => Target { device: self.compute[module], instance: self.instances[module] },
        }
    }

    /// Where the weights of module `module` (layer `layer`) live.
    pub fn params_of(&self, module: usize, layer: Option<usize>) -> &'static dyn Device {
        let rule = layer.and_then(|l| self.layers.iter().rev().find(|r| r.params.is_some() && r.covers(module, l)));
        match rule.and_then(|r| r.params) {
            Some(d) => d,
            None if self.params_given[module] => self.params[module],
            None => self.compute_of(module, layer).device,
        }
    }

    /// Every target a module or layer runs on, and instance 0 of every device that holds
    /// weights, in the priority order of `devices` (instances of a device in order), the host
    /// CPU last: one backend each.
    pub fn targets(&self, devices: &[&'static dyn Device]) -> Vec<Target> {
        let mut used: Vec<Target> = (0..self.compute.len())
            .map(|m| Target { device: self.compute[m], instance: self.instances[m] })
            .chain(self.layers.iter().filter_map(|r| r.compute))
            .chain(self.params.iter().map(|&d| Target::new(d)))
            .chain(self.layers.iter().filter_map(|r| r.params.map(Target::new)))
            .collect();
        let rank = |t: &Target| {
            let at = Placement::index_in(devices, t.device).unwrap_or(usize::MAX);
            (t.device.is_host_cpu(), at, t.instance)
        };
        used.sort_by_key(rank);
        used.dedup();
        // The scheduler's last backend must be the host CPU, used or not.
        if !used.last().is_some_and(|t| t.device.is_host_cpu() && t.instance == 0) {
            if let Some(cpu) = devices.iter().copied().find(|d| d.is_host_cpu()) {
                used.retain(|t| *t != Target::new(cpu));
                used.push(Target::new(cpu));
            }
        }
        used
    }

    /// The distinct devices used, in the priority order of `devices`, the CPU last.
    pub fn devices(&self, devices: &[&'static dyn Device]) -> Vec<&'static dyn Device> {
        let mut out: Vec<&'static dyn Device> = Vec::new();
        for t in self.targets(devices) {
            if Placement::index_in(&out, t.device).is_none() {
                out.push(t.device);
            }
        }
        if let Some(i) = out.iter().position(|d| d.is_host_cpu()) {
            let cpu = out.remove(i);
            out.push(cpu);
        }
        out
    }

    /// Index of `device` among `set` (from [`Placement::devices`]).
    pub fn index_in(set: &[&'static dyn Device], device: &'static dyn Device) -> Option<usize> {
        set.iter().position(|d| std::ptr::addr_eq(*d as *const dyn Device, device as *const dyn Device))
    }
}
