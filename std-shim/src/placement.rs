//! Per-module device placement: `--backend embed=cpu,encoder=cuda0` (where each module's
//! graphs run) and `--params-backend ...` (where its weights live), resolved against the
//! devices that exist.
//!
//! Syntax, the same for both: comma-separated items; an item without `=` sets the default;
//! `module=device` sets one module (the model declares module names and aliases, matched
//! case-insensitively with `-` and `_` ignored); `*=`, `all=` and `default=` set the default
//! inside a list; later items override earlier ones. Device names: `auto`/`default` (the best
//! device), `gpu` (the first GPU, else integrated GPU), a family (`cpu`, `cuda`: its first
//! device), or an exact device name (`cuda1`), all case-insensitive, resolved by
//! [`tessera_core::registry::resolve_device`] among the devices given: a program passes the
//! runtime registry's (`tessera::discover().devices()`), so plugins and the environment apply.

use std::fmt;

use tessera_core::registry::resolve_device;
use tessera_core::Device;

/// A module a model declares: its name and the other names users may call it by.
#[derive(Clone, Copy, Debug)]
pub struct ModuleDecl {
    pub name: &'static str,
    pub aliases: &'static [&'static str],
}

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

/// A parsed assignment: an optional default and per-module device requests (unresolved).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Assignment {
    pub default: Option<String>,
    /// `(module index, device request)`, later entries winning.
    pub modules: Vec<(usize, String)>,
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
            Some((key, device)) => {
                let (key, device) = (normalize(key), device.trim());
                if key.is_empty() || device.is_empty() {
                    return Err(empty());
                }
                if matches!(key.as_str(), "*" | "all" | "default") {
                    out.default = Some(device.into());
                    continue;
                }
                let m = modules
                    .iter()
                    .position(|d| normalize(d.name) == key || d.aliases.iter().any(|a| normalize(a) == key))
                    .ok_or_else(|| PlacementError::UnknownModule {
                        module: item.split_once('=').map_or("", |p| p.0).trim().into(),
                        modules: modules.iter().map(|d| d.name).collect::<Vec<_>>().join(", "),
                    })?;
                out.modules.push((m, device.into()));
            }
        }
    }
    Ok(out)
}

/// Where every module runs and where its weights live.
pub struct Placement {
    /// Per module (in the model's order): the device its graphs run on.
    pub compute: Vec<&'static dyn Device>,
    /// Per module: the device whose memory holds its weights.
    pub params: Vec<&'static dyn Device>,
}

impl Placement {
    /// Resolves `--backend` and `--params-backend` values for `modules` among `devices`.
    /// Modules without a compute request run on the best device; modules without a params
    /// request keep their weights where they run.
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

    pub fn resolve(
        backend: &str,
        params_backend: &str,
        modules: &[ModuleDecl],
        devices: &[&'static dyn Device],
    ) -> Result<Placement, PlacementError> {
        let compute_spec = parse(backend, modules)?;
        let params_spec = parse(params_backend, modules)?;
        let mut compute = Vec::with_capacity(modules.len());
        let mut params = Vec::with_capacity(modules.len());
        for m in 0..modules.len() {
            let c = resolve_device(devices.iter().copied(), compute_spec.request(m).unwrap_or("auto"))?;
            let p = match params_spec.request(m) {
                Some(r) => resolve_device(devices.iter().copied(), r)?,
                None => c,
            };
            compute.push(c);
            params.push(p);
        }
        Ok(Placement { compute, params })
    }

    /// The distinct devices used, in the priority order of `devices`, the CPU last: one
    /// backend each, shared by every module placed there.
    pub fn devices(&self, devices: &[&'static dyn Device]) -> Vec<&'static dyn Device> {
        let used = |d: &&'static dyn Device| {
            self.compute
                .iter()
                .chain(&self.params)
                .any(|u| std::ptr::addr_eq(*u as *const dyn Device, *d as *const dyn Device))
        };
        let mut out: Vec<&'static dyn Device> =
            devices.iter().copied().filter(|d| !d.is_host_cpu()).filter(used).collect();
        // The scheduler's last backend must be the host CPU, used or not.
        if let Some(cpu) = devices.iter().copied().find(|d| d.is_host_cpu()) {
            out.push(cpu);
        }
        out
    }

    /// Index of `device` among `set` (from [`Placement::devices`]).
    pub fn index_in(set: &[&'static dyn Device], device: &'static dyn Device) -> Option<usize> {
        set.iter().position(|d| std::ptr::addr_eq(*d as *const dyn Device, device as *const dyn Device))
    }
}
