//! The runtime registry: the families compiled in plus those loaded from plugins.
//!
//! Devices are listed family by family in registration order. While a family is
//! registered its devices are filtered by `TESSERA_<FAMILY>_VISIBLE_DEVICES`, and a device
//! with the PCI bus id of one already listed (the same GPU seen through a second API) is
//! hidden, keeping the first (unless `TESSERA_SHOW_DUPLICATE_DEVICES=1`). `TESSERA_DISABLE_<FAMILY>=1` skips a family (`=builtin` only
//! the compiled-in one, `=plugin` only its plugins). Plugins come from
//! [`RuntimeRegistry::load`] (one file), [`RuntimeRegistry::load_best`] (the
//! highest-scoring variant of one family) and [`RuntimeRegistry::load_all`] (every family in
//! the search paths, then `TESSERA_BACKEND_PATH`); [`RuntimeRegistry::discover`] is the
//! built-in families plus `load_all`, what every program uses. A plugin that cannot be used
//! is skipped with a one-line reason and the rest keeps working; [`RuntimeRegistry::unload`]
//! takes one out again.
//!
//! A family is listed once: the first source registered wins. The built-in families are
//! registered first, so a plugin of a family compiled into the program is skipped ("the CPU
//! family is already provided by the built-in reg") unless `TESSERA_DISABLE_<FAMILY>=builtin`
//! keeps the built-in one out; of two plugin files of one family, the higher score wins.
//! Finding devices (by name, family or type, the best one, a user's request) is
//! [`tessera_core::registry`]'s, over [`RuntimeRegistry::devices`].

use std::fmt;
use std::path::{Path, PathBuf};

use tessera_core::registry::{self as lookup, extension, Extension};
use tessera_core::{Backend, BackendReg, Device, DeviceType, Error, Result};
use tessera_plugin_abi::PluginReg;

use crate::plugin_loader::{parse_plugin_file_name, PluginLibrary};
use crate::registry_config::RegistryConfig;

/// Where a family came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Compiled into this program.
    BuiltIn,
    /// Loaded from a plugin file, with the score it gave itself.
    Plugin { path: PathBuf, score: u32 },
    /// Routed through the plugin tables within this process (no library).
    Loopback,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::BuiltIn => f.write_str("built in"),
            Origin::Plugin { path, score } => write!(f, "plugin {} (score {score})", path.display()),
            Origin::Loopback => f.write_str("plugin tables, in process"),
        }
    }
}

/// A plugin file (or built-in family) that was not used, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    /// The file's path, or `built-in <NAME>`.
    pub source: String,
    /// The family it would have provided, when known (from the file name or the reg).
    pub family: Option<String>,
    /// One line.
    pub reason: String,
}

impl fmt::Display for Skipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.source, self.reason)
    }
}

impl Skipped {
    fn from_error(e: Error, source: &Path) -> Skipped {
        let family = file_family(source);
        match e {
            Error::Plugin { plugin, message } => Skipped { source: plugin, family, reason: message },
            e => Skipped { source: source.display().to_string(), family, reason: e.to_string() },
        }
    }

    fn file(path: &Path, reason: String) -> Skipped {
        Skipped { source: path.display().to_string(), family: file_family(path), reason }
    }

    /// Whether this was a source of `family` (case-insensitive).
    pub fn is_of(&self, family: &str) -> bool {
        self.family.as_deref().is_some_and(|f| f.eq_ignore_ascii_case(family))
    }
}

/// The family a plugin file's name says it holds (lower case).
fn file_family(path: &Path) -> Option<String> {
    parse_plugin_file_name(path.file_name()?.to_str()?).map(|(family, _)| family)
}

/// A device that a family has but the registry does not list.
#[derive(Clone)]
pub struct HiddenDevice {
    pub device: &'static dyn Device,
    pub reason: String,
    /// The device listed in its place, when it is the same GPU seen through another API.
    pub duplicate_of: Option<&'static dyn Device>,
}

/// What one loading call did.
#[derive(Clone, Debug, Default)]
pub struct LoadReport {
    /// (family name, file, score) of each plugin loaded.
    pub loaded: Vec<(String, PathBuf, u32)>,
    pub skipped: Vec<Skipped>,
}

/// One registered family.
pub struct RegEntry {
    reg: &'static dyn BackendReg,
    origin: Origin,
    devices: Vec<&'static dyn Device>,
    plugin: Option<&'static PluginReg>,
    library: Option<PluginLibrary>,
}

impl RegEntry {
    pub fn reg(&self) -> &'static dyn BackendReg {
        self.reg
    }
    pub fn name(&self) -> &str {
        self.reg.name()
    }
    pub fn origin(&self) -> &Origin {
        &self.origin
    }
    /// The family's devices the registry lists (after visibility filters and de-duplication).
    pub fn devices(&self) -> &[&'static dyn Device] {
        &self.devices
    }
    /// The loaded plugin's reg, for plugin families.
    pub fn plugin(&self) -> Option<&'static PluginReg> {
        self.plugin
    }
    /// The features the family reports (`("AVX2", "1")`, ...).
    pub fn features(&self) -> Vec<(String, String)> {
        match (self.plugin, self.reg.extension(extension::FEATURES)) {
            (Some(p), _) => p.features().to_vec(),
            (None, Some(Extension::Features(f))) => f().iter().map(|(n, v)| (n.to_string(), v.to_string())).collect(),
            _ => Vec::new(),
        }
    }
    fn path(&self) -> Option<&Path> {
        match &self.origin {
            Origin::Plugin { path, .. } => Some(path),
            _ => None,
        }
    }
}

/// Every family and device this process can use.
pub struct RuntimeRegistry {
    config: RegistryConfig,
    entries: Vec<RegEntry>,
    skipped: Vec<Skipped>,
    hidden: Vec<HiddenDevice>,
}

impl RuntimeRegistry {
    /// The families compiled in (in priority order), filtered by the process environment.
    pub fn new(builtin: &[&'static dyn BackendReg]) -> RuntimeRegistry {
        RuntimeRegistry::with_config(builtin, RegistryConfig::from_env())
    }

    /// Every family this process can use under `config`: the ones compiled in (in priority
    /// order), then the best variant of each plugin family in the search paths and
    /// `TESSERA_BACKEND_PATH` ([`Self::load_all`]).
    pub fn discover(builtin: &[&'static dyn BackendReg], config: RegistryConfig) -> RuntimeRegistry {
        let mut registry = RuntimeRegistry::with_config(builtin, config);
        registry.load_all();
        registry
    }

    /// The families compiled in, filtered by `config`.
    pub fn with_config(builtin: &[&'static dyn BackendReg], config: RegistryConfig) -> RuntimeRegistry {
        let mut registry = RuntimeRegistry { config, entries: Vec::new(), skipped: Vec::new(), hidden: Vec::new() };
        for &reg in builtin {
            if let Err(e) = registry.register(reg) {
                log::info!("{e}");
            }
        }
        registry
    }

    pub fn config(&self) -> &RegistryConfig {
        &self.config
    }

    /// Adds a family compiled into the program (after those already registered). Refused if
    /// `TESSERA_DISABLE_<FAMILY>` keeps it out or the family is already registered.
    pub fn register(&mut self, reg: &'static dyn BackendReg) -> Result<&RegEntry> {
        let refused = match self.config.builtin_disabled_by(reg.name()) {
            Some(by) => Some(format!("disabled by {by}")),
            None => self.already_provided(reg.name()),
        };
        if let Some(reason) = refused {
            let source = format!("built-in {}", reg.name());
            self.skipped.push(Skipped {
                source: source.clone(),
                family: Some(reg.name().into()),
                reason: reason.clone(),
            });
            return Err(Error::Plugin { plugin: source, message: reason });
        }
        Ok(self.push_entry(reg, Origin::BuiltIn, None, None))
    }

    /// Adds a family whose tables were wrapped in this process ([`tessera_plugin_abi::loopback`]),
    /// refused (and shut down) like a plugin file of that family would be.
    pub fn register_loopback(&mut self, reg: &'static PluginReg) -> Result<&RegEntry> {
        let refused = match self.config.plugin_disabled_by(reg.name()) {
            Some(by) => Some(format!("disabled by {by}")),
            None => self.already_provided(reg.name()),
        };
        if let Some(reason) = refused {
            let _ = reg.shutdown();
            return Err(Error::Plugin { plugin: reg.name().into(), message: reason });
        }
        Ok(self.push_entry(reg, Origin::Loopback, Some(reg), None))
    }

    /// The registered family called `family` (case-insensitive), by its reg's name or the
    /// family its plugin file is named for.
    fn provider(&self, family: &str) -> Option<&RegEntry> {
        self.entries.iter().find(|e| {
            e.name().eq_ignore_ascii_case(family)
                || e.path().and_then(file_family).is_some_and(|f| f.eq_ignore_ascii_case(family))
        })
    }

    /// Why another source of `family` is not used, if the family is registered already.
    fn already_provided(&self, family: &str) -> Option<String> {
        let entry = self.provider(family)?;
        let name = entry.name();
        Some(match &entry.origin {
            Origin::BuiltIn => format!(
                "the {name} family is already provided by the built-in reg \
                 (TESSERA_DISABLE_{}=builtin uses a plugin instead)",
                RegistryConfig::family_key(name)
            ),
            Origin::Plugin { path, .. } => format!("the {name} family is already loaded from {}", path.display()),
            Origin::Loopback => format!("the {name} family is already provided through the plugin tables in process"),
        })
    }

    fn push_entry(
        &mut self,
        reg: &'static dyn BackendReg,
        origin: Origin,
        plugin: Option<&'static PluginReg>,
        library: Option<PluginLibrary>,
    ) -> &RegEntry {
        let all: Vec<&'static dyn Device> = (0..reg.device_count()).filter_map(|i| reg.device(i)).collect();
        let mut candidates = all.clone();
        match self.config.visible_devices(reg.name()) {
            None => {}
            Some(Ok(visible)) => {
                let setting = format!("TESSERA_{}_VISIBLE_DEVICES", RegistryConfig::family_key(reg.name()));
                candidates = visible.iter().filter_map(|&i| all.get(i).copied()).collect();
                for (i, &d) in all.iter().enumerate() {
                    if !visible.contains(&i) {
                        self.hidden.push(HiddenDevice {
                            device: d,
                            reason: format!("device {i} is not in {setting}"),
                            duplicate_of: None,
                        });
                    }
                }
                for &i in visible.iter().filter(|&&i| i >= all.len()) {
                    log::warn!("{setting} names device {i}, but {} has {} device(s)", reg.name(), all.len());
                }
            }
            Some(Err(message)) => {
                log::warn!("{message}; showing every device of {}", reg.name());
                self.skipped.push(Skipped {
                    source: format!("{} devices", reg.name()),
                    family: Some(reg.name().into()),
                    reason: message,
                });
            }
        }
        let mut devices: Vec<&'static dyn Device> = Vec::new();
        for d in candidates {
            let first = d.pci_bus_id().filter(|_| !self.config.show_duplicates()).and_then(|pci| {
                self.devices()
                    .chain(devices.iter().copied())
                    .find(|o| o.pci_bus_id().is_some_and(|p| p.eq_ignore_ascii_case(pci)))
                    .map(|o| (pci, o))
            });
            match first {
                Some((pci, o)) => {
                    log::info!(
                        "hiding {}: the same PCI device {pci} as {}, which was registered first",
                        d.name(),
                        o.name()
                    );
                    self.hidden.push(HiddenDevice {
                        device: d,
                        reason: format!("the same PCI device {pci} as {}, which was registered first", o.name()),
                        duplicate_of: Some(o),
                    });
                }
                None => devices.push(d),
            }
        }
        let i = self.entries.len();
        self.entries.push(RegEntry { reg, origin, devices, plugin, library });
        &self.entries[i]
    }

    /// Every registered family, in priority order.
    pub fn regs(&self) -> impl Iterator<Item = &RegEntry> + '_ {
        self.entries.iter()
    }

    /// The family called `name` (case-insensitive).
    pub fn reg_by_name(&self, name: &str) -> Option<&RegEntry> {
        self.entries.iter().find(|e| e.name().eq_ignore_ascii_case(name))
    }

    /// The family a listed device belongs to, which says where it came from.
    pub fn entry_of(&self, device: &dyn Device) -> Option<&RegEntry> {
        self.entries.iter().find(|e| e.devices.iter().any(|d| std::ptr::addr_eq(*d as *const dyn Device, device)))
    }

    /// Every listed device, in priority order.
    pub fn devices(&self) -> impl Iterator<Item = &'static dyn Device> + Clone + '_ {
        self.entries.iter().flat_map(|e| e.devices.iter().copied())
    }

    /// Devices a family has that are not listed, and why.
    pub fn hidden(&self) -> &[HiddenDevice] {
        &self.hidden
    }

    /// Every plugin file or family skipped so far, with the reason.
    pub fn skipped(&self) -> &[Skipped] {
        &self.skipped
    }

    /// The skipped sources of `family` (case-insensitive).
    pub fn skipped_of<'a>(&'a self, family: &'a str) -> impl Iterator<Item = &'a Skipped> + 'a {
        self.skipped.iter().filter(move |s| s.is_of(family))
    }

    /// "CPU, CUDA0, ..." (or "none").
    pub fn device_names(&self) -> String {
        lookup::device_names(self.devices())
    }

    /// The device called `name` (case-insensitive); the error lists the devices there are.
    pub fn device_by_name(&self, name: &str) -> Result<&'static dyn Device> {
        lookup::device_by_name(self.devices(), name)
    }

    /// The first device of the family called `family` (case-insensitive).
    pub fn device_by_family(&self, family: &str) -> Option<&'static dyn Device> {
        lookup::device_by_family(self.devices(), family)
    }

    /// The first device of `device_type`.
    pub fn device_by_type(&self, device_type: DeviceType) -> Option<&'static dyn Device> {
        lookup::device_by_type(self.devices(), device_type)
    }

    /// The first GPU, else the first integrated GPU, else the first CPU.
    pub fn best_device(&self) -> Option<&'static dyn Device> {
        lookup::best_device(self.devices())
    }

    /// A backend on the best device.
    pub fn init_best(&self) -> Result<Box<dyn Backend>> {
        self.select(None)?.init_backend()
    }

    /// The device a user asked for: `None` is `auto`, the best one; otherwise `gpu`, a family
    /// or a device name ([`lookup::resolve_device`]). When nothing matches, the error lists
    /// the devices there are and, for a family asked for by name or when there are none at
    /// all, why sources were skipped: `no device found for 'auto'; devices: none (built-in
    /// CPU: disabled by TESSERA_DISABLE_CPU=1)`.
    pub fn select(&self, request: Option<&str>) -> Result<&'static dyn Device> {
        lookup::resolve_device(self.requestable_devices(), request.unwrap_or("auto")).map_err(|e| self.explain(e))
    }

    /// The devices a request can name: [`RuntimeRegistry::devices`], then those hidden as a
    /// GPU already listed through another API (so `vulkan0` reaches an NVIDIA GPU listed as
    /// `CUDA0`; `auto` and `gpu` still find the listed one first).
    pub fn requestable_devices(&self) -> impl Iterator<Item = &'static dyn Device> + Clone + '_ {
        self.devices().chain(self.hidden.iter().filter(|h| h.duplicate_of.is_some()).map(|h| h.device))
    }

    /// Adds to a device-lookup error (unknown device, none of a kind) why sources that might
    /// have provided it were skipped (disabled by the environment, a plugin that failed).
    pub fn explain(&self, mut e: Error) -> Error {
        let request = match &e {
            Error::UnknownDevice { name, .. } => name.clone(),
            Error::NoDevice { request, .. } => request.clone(),
            _ => return e,
        };
        let none_listed = self.devices().next().is_none();
        let reasons: Vec<String> =
            self.skipped.iter().filter(|s| none_listed || s.is_of(&request)).map(|s| s.to_string()).collect();
        if let (false, Error::UnknownDevice { available, .. } | Error::NoDevice { available, .. }) =
            (reasons.is_empty(), &mut e)
        {
            available.push_str(&format!(" ({})", reasons.join("; ")));
        }
        e
    }

    fn loaded_from(&self, path: &Path) -> Option<&RegEntry> {
        let key = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
        self.entries
            .iter()
            .find(|e| e.path().is_some_and(|p| p.canonicalize().unwrap_or_else(|_| p.to_path_buf()) == key))
    }

    /// Loads one plugin file. It is refused if its family is disabled, it is not a plugin of
    /// this ABI, it scores 0 here, or its init fails; the error is a one-line reason, also
    /// recorded in [`Self::skipped`].
    pub fn load(&mut self, path: &Path) -> Result<&RegEntry> {
        match self.try_load(path) {
            Ok(i) => Ok(&self.entries[i]),
            Err(e) => {
                let skipped = Skipped::from_error(e.clone(), path);
                log::info!("skipping plugin {skipped}");
                self.skipped.push(skipped);
                Err(e)
            }
        }
    }

    fn try_load(&mut self, path: &Path) -> Result<usize> {
        let fail = |message: String| Error::Plugin { plugin: path.display().to_string(), message };
        let family = file_family(path);
        if let Some(by) = family.as_deref().and_then(|f| self.config.plugin_disabled_by(f)) {
            return Err(fail(format!("disabled by {by}")));
        }
        if let Some(e) = self.loaded_from(path) {
            return Err(fail(format!("already loaded (family {})", e.name())));
        }
        if let Some(reason) = family.as_deref().and_then(|f| self.already_provided(f)) {
            return Err(fail(reason));
        }
        let library = PluginLibrary::open(path)?;
        let score = match library.score() {
            Some(0) => return Err(fail(score_zero())),
            Some(s) => s,
            None => 1,
        };
        self.install(library, score)
    }

    /// Initialises an opened plugin and registers its family, unless the family its reg
    /// names is disabled or registered already.
    fn install(&mut self, library: PluginLibrary, score: u32) -> Result<usize> {
        let reg = library.init()?;
        let path = library.path().to_path_buf();
        let refused = match self.config.plugin_disabled_by(reg.name()) {
            Some(by) => Some(format!("disabled by {by}")),
            None => self.already_provided(reg.name()),
        };
        if let Some(message) = refused {
            if reg.shutdown().is_ok() {
                library.close();
            } else {
                library.leak();
            }
            return Err(Error::Plugin { plugin: path.display().to_string(), message });
        }
        log::info!("loaded the {} backend from {} (score {score})", reg.name(), path.display());
        self.push_entry(reg, Origin::Plugin { path, score }, Some(reg), Some(library));
        Ok(self.entries.len() - 1)
    }

    /// Loads the highest-scoring usable variant of `family` from `dir`, or from the search
    /// paths when `dir` is `None`.
    pub fn load_best(&mut self, family: &str, dir: Option<&Path>) -> Result<&RegEntry> {
        let dirs = match dir {
            Some(d) => vec![d.to_path_buf()],
            None => self.config.search_dirs(),
        };
        let family = family.to_ascii_lowercase();
        let candidates: Vec<PathBuf> =
            plugin_files(&dirs).into_iter().filter(|(f, _)| *f == family).map(|(_, p)| p).collect();
        let mut report = LoadReport::default();
        let loaded = self.load_family(&family, &candidates, &mut report);
        self.skipped.extend(report.skipped.iter().cloned());
        match loaded {
            Some(i) => Ok(&self.entries[i]),
            None if candidates.is_empty() => Err(Error::Plugin {
                plugin: family.clone(),
                message: format!(
                    "no plugin file for it in {}",
                    dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ")
                ),
            }),
            None => Err(Error::Plugin {
                plugin: family,
                message: format!(
                    "no usable variant: {}",
                    report.skipped.iter().map(|s| s.to_string()).collect::<Vec<_>>().join("; ")
                ),
            }),
        }
    }

    /// Loads the best variant of every family found in the search paths
    /// ([`RegistryConfig::search_dirs`]: `TESSERA_BACKEND_DIR`, the executable's directory),
    /// then the file named by `TESSERA_BACKEND_PATH`. A configured directory that does not
    /// exist, or is a file, is reported in [`LoadReport::skipped`].
    pub fn load_all(&mut self) -> LoadReport {
        let dirs = self.config.search_dirs();
        let mut report = self.load_all_in(&dirs);
        // A directory the user named that is not there is worth a line, not silence.
        for dir in self.config.configured_dirs() {
            let reason = match std::fs::metadata(&dir) {
                Ok(m) if m.is_dir() => continue,
                Ok(_) => "is not a directory: plugin directories hold libtessera-<family>[-<variant>] libraries",
                Err(_) => "does not exist: no plugins were loaded from it",
            };
            let skipped = Skipped { source: dir.display().to_string(), family: None, reason: reason.into() };
            log::warn!("plugin directory {skipped}");
            self.skipped.push(skipped.clone());
            report.skipped.push(skipped);
        }
        if let Some(path) = self.config.backend_path() {
            match self.load(&path) {
                Ok(e) => {
                    let score = match e.origin() {
                        Origin::Plugin { score, .. } => *score,
                        _ => 0,
                    };
                    report.loaded.push((e.name().to_string(), path, score));
                }
                Err(e) => report.skipped.push(Skipped::from_error(e, &path)),
            }
        }
        report
    }

    /// Loads the best variant of every family found in `dir` only.
    pub fn load_all_from(&mut self, dir: &Path) -> LoadReport {
        self.load_all_in(&[dir.to_path_buf()])
    }

    fn load_all_in(&mut self, dirs: &[PathBuf]) -> LoadReport {
        let files = plugin_files(dirs);
        let mut families: Vec<String> = Vec::new();
        for (f, _) in &files {
            if !families.contains(f) {
                families.push(f.clone());
            }
        }
        // Accelerator families first, the CPU last: the order devices are preferred in.
        families.sort_by_key(|f| (f == "cpu", f.clone()));
        let mut report = LoadReport::default();
        for family in families {
            let candidates: Vec<PathBuf> = files.iter().filter(|(f, _)| *f == family).map(|(_, p)| p.clone()).collect();
            self.load_family(&family, &candidates, &mut report);
        }
        self.skipped.extend(report.skipped.iter().cloned());
        report
    }

    /// Probes every candidate file of `family`, then initialises the highest-scoring one
    /// (falling back to the next if its init fails). Returns the new entry's index.
    fn load_family(&mut self, family: &str, candidates: &[PathBuf], report: &mut LoadReport) -> Option<usize> {
        let skip = |report: &mut LoadReport, path: &Path, reason: String| {
            log::info!("skipping plugin {}: {reason}", path.display());
            report.skipped.push(Skipped::file(path, reason));
        };
        if let Some(by) = self.config.plugin_disabled_by(family) {
            for path in candidates {
                skip(report, path, format!("disabled by {by}"));
            }
            return None;
        }
        if let Some(reason) = self.already_provided(family) {
            for path in candidates.iter().filter(|p| self.loaded_from(p).is_none()) {
                skip(report, path, reason.clone());
            }
            return None;
        }
        let mut probed: Vec<(PluginLibrary, u32)> = Vec::new();
        for path in candidates {
            let is_variant = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(parse_plugin_file_name)
                .is_some_and(|(_, v)| v.is_some());
            match PluginLibrary::open(path) {
                Err(e) => report.skipped.push(Skipped::from_error(e, path)),
                Ok(lib) => match lib.score() {
                    Some(0) => skip(report, path, score_zero()),
                    Some(s) => probed.push((lib, s)),
                    None if is_variant => skip(
                        report,
                        path,
                        "a variant must export `tessera_backend_score` so that the best one can be chosen".into(),
                    ),
                    None => probed.push((lib, 1)),
                },
            }
        }
        probed.sort_by_key(|(_, s)| std::cmp::Reverse(*s));
        let mut winner: Option<(usize, PathBuf, u32)> = None;
        for (lib, score) in probed {
            let path = lib.path().to_path_buf();
            if let Some((_, won, best)) = &winner {
                let name = won.file_name().map_or_else(|| won.display().to_string(), |n| n.to_string_lossy().into());
                skip(report, &path, format!("not chosen: {name} scores {best}, this variant {score}"));
                lib.close();
                continue;
            }
            match self.install(lib, score) {
                Ok(i) => {
                    report.loaded.push((self.entries[i].name().to_string(), path.clone(), score));
                    winner = Some((i, path, score));
                }
                Err(e) => report.skipped.push(Skipped::from_error(e, &path)),
            }
        }
        winner.map(|(i, _, _)| i)
    }

    /// Takes a plugin family out of the registry and closes its library. Refused (and the
    /// family kept) while any buffer, backend or event of it is alive.
    pub fn unload(&mut self, name: &str) -> Result<()> {
        let i = self
            .entries
            .iter()
            .position(|e| e.plugin.is_some() && e.name().eq_ignore_ascii_case(name))
            .ok_or_else(|| {
                let plugins: Vec<&str> = self.entries.iter().filter(|e| e.plugin.is_some()).map(|e| e.name()).collect();
                Error::Plugin {
                    plugin: name.into(),
                    message: format!(
                        "is not a loaded plugin family (loaded: {})",
                        if plugins.is_empty() { "none".into() } else { plugins.join(", ") }
                    ),
                }
            })?;
        if let Some(plugin) = self.entries[i].plugin {
            plugin.shutdown()?;
        }
        let entry = self.entries.remove(i);
        if let Some(library) = entry.library {
            library.close();
        }
        log::info!("unloaded the {} backend", entry.reg.name());
        Ok(())
    }
}

fn score_zero() -> String {
    "scores 0: it cannot run on this machine (a processor feature or device it needs is missing)".into()
}

/// Every file in `dirs` named like a plugin, as (family, path): directories in order, files
/// by name.
fn plugin_files(dirs: &[PathBuf]) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    for dir in dirs {
        let Ok(read) = std::fs::read_dir(dir) else { continue };
        let mut files: Vec<(String, PathBuf)> = read
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file() || t.is_symlink()))
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let (family, _) = parse_plugin_file_name(&name)?;
                Some((family, e.path()))
            })
            .collect();
        files.sort_by(|a, b| a.1.cmp(&b.1));
        out.extend(files);
    }
    out
}

impl Drop for RuntimeRegistry {
    /// Unloads every plugin whose objects are all gone; a plugin with live objects stays
    /// mapped for the rest of the process (its code may still run).
    fn drop(&mut self) {
        for entry in self.entries.drain(..) {
            let (Some(plugin), library) = (entry.plugin, entry.library) else { continue };
            match (plugin.shutdown(), library) {
                (Ok(()), Some(library)) => library.close(),
                (Err(e), Some(library)) => {
                    log::warn!("{e}; keeping it loaded");
                    library.leak();
                }
                (_, None) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_core::{BufferType, DeviceCaps, Graph, MemoryInfo, TensorId};

    /// A device of a made-up family, computing with the CPU backend.
    struct FakeDevice {
        name: &'static str,
        device_type: DeviceType,
        pci: Option<&'static str>,
        reg: &'static FakeReg,
    }

    struct FakeReg {
        name: &'static str,
        devices: std::sync::OnceLock<Vec<&'static FakeDevice>>,
    }

    impl BackendReg for FakeReg {
        fn name(&self) -> &str {
            self.name
        }
        fn device_count(&self) -> usize {
            self.devices.get().map_or(0, Vec::len)
        }
        fn device(&self, index: usize) -> Option<&'static dyn Device> {
            self.devices.get()?.get(index).map(|d| *d as &'static dyn Device)
        }
    }

    impl Device for FakeDevice {
        fn name(&self) -> &str {
            self.name
        }
        fn description(&self) -> &str {
            "a fake device"
        }
        fn memory(&self) -> MemoryInfo {
            MemoryInfo::default()
        }
        fn device_type(&self) -> DeviceType {
            self.device_type
        }
        fn caps(&self) -> DeviceCaps {
            DeviceCaps::default()
        }
        fn pci_bus_id(&self) -> Option<&str> {
            self.pci
        }
        fn reg(&self) -> &'static dyn BackendReg {
            self.reg
        }
        fn supports_op(&self, graph: &Graph, node: TensorId) -> bool {
            tessera_cpu::CPU_DEVICE.supports_op(graph, node)
        }
        fn supports_buffer_type(&self, buffer_type: &dyn BufferType) -> bool {
            buffer_type.is_host()
        }
        fn buffer_type(&self) -> &'static dyn BufferType {
            tessera_cpu::CPU_DEVICE.buffer_type()
        }
        fn init_backend(&'static self) -> Result<Box<dyn Backend>> {
            tessera_cpu::CPU_DEVICE.init_backend()
        }
    }

    /// A family `name` with devices (name, type, PCI bus id), leaked.
    fn family(name: &'static str, devices: &[(&'static str, DeviceType, Option<&'static str>)]) -> &'static FakeReg {
        let reg: &'static FakeReg = Box::leak(Box::new(FakeReg { name, devices: std::sync::OnceLock::new() }));
        let list = devices
            .iter()
            .map(|&(name, device_type, pci)| &*Box::leak(Box::new(FakeDevice { name, device_type, pci, reg })))
            .collect();
        let _ = reg.devices.set(list);
        reg
    }

    fn names(r: &RuntimeRegistry) -> Vec<&str> {
        r.devices().map(|d| d.name()).collect()
    }

    #[test]
    fn the_same_gpu_seen_twice_is_listed_once_keeping_the_first() {
        let cuda = family(
            "CUDA",
            &[("CUDA0", DeviceType::Gpu, Some("0000:65:00.0")), ("CUDA1", DeviceType::Gpu, Some("0000:66:00.0"))],
        );
        let vulkan = family(
            "Vulkan",
            &[
                ("Vulkan0", DeviceType::Gpu, Some("0000:66:00.0")),
                ("Vulkan1", DeviceType::IGpu, Some("0000:00:02.0")),
                ("Vulkan2", DeviceType::Gpu, Some("0000:65:00.0")),
            ],
        );
        let r = RuntimeRegistry::with_config(&[cuda, vulkan, &tessera_cpu::CPU_REG], RegistryConfig::from_vars(&[]));
        assert_eq!(names(&r), ["CUDA0", "CUDA1", "Vulkan1", "CPU"]);
        let hidden: Vec<String> = r.hidden().iter().map(|h| format!("{}: {}", h.device.name(), h.reason)).collect();
        assert_eq!(
            hidden,
            [
                "Vulkan0: the same PCI device 0000:66:00.0 as CUDA1, which was registered first",
                "Vulkan2: the same PCI device 0000:65:00.0 as CUDA0, which was registered first"
            ]
        );
        assert_eq!(r.best_device().map(|d| d.name()), Some("CUDA0"));
        assert_eq!(r.device_by_type(DeviceType::IGpu).map(|d| d.name()), Some("Vulkan1"));
        assert_eq!(r.device_by_name("vulkan1").map(|d| d.name()), Ok("Vulkan1"));
        assert_eq!(
            r.device_by_name("vulkan0").err().map(|e| e.to_string()).as_deref(),
            Some("unknown device 'vulkan0'; devices: CUDA0, CUDA1, Vulkan1, CPU")
        );
        // Named, the hidden one is still reached; `auto` and `gpu` find the listed ones first.
        assert_eq!(r.select(Some("vulkan0")).map(|d| d.name()), Ok("Vulkan0"));
        assert_eq!(r.select(Some("gpu")).map(|d| d.name()), Ok("CUDA0"));
        assert_eq!(r.select(Some("auto")).map(|d| d.name()), Ok("CUDA0"));
        assert_eq!(r.reg_by_name("vulkan").map(|e| e.devices().len()), Some(1));
    }

    #[test]
    fn duplicates_are_listed_when_asked_for() {
        let cuda = family("CUDA", &[("CUDA0", DeviceType::Gpu, Some("0000:65:00.0"))]);
        let vulkan = family("Vulkan", &[("Vulkan0", DeviceType::Gpu, Some("0000:65:00.0"))]);
        let config = RegistryConfig::from_vars(&[("TESSERA_SHOW_DUPLICATE_DEVICES", "1")]);
        let r = RuntimeRegistry::with_config(&[cuda, vulkan, &tessera_cpu::CPU_REG], config);
        assert_eq!(names(&r), ["CUDA0", "Vulkan0", "CPU"]);
        assert!(r.hidden().is_empty());
        assert_eq!(r.best_device().map(|d| d.name()), Some("CUDA0"));
        assert_eq!(r.select(Some("vulkan0")).map(|d| d.name()), Ok("Vulkan0"));
    }

    #[test]
    fn families_can_be_disabled_and_their_devices_filtered() {
        let cuda = family(
            "CUDA",
            &[("CUDA0", DeviceType::Gpu, None), ("CUDA1", DeviceType::Gpu, None), ("CUDA2", DeviceType::Gpu, None)],
        );
        let igpu = family("my-igpu", &[("IG0", DeviceType::IGpu, None)]);
        let config = RegistryConfig::from_vars(&[("TESSERA_CUDA_VISIBLE_DEVICES", "2,0")]);
        let r = RuntimeRegistry::with_config(&[cuda, igpu, &tessera_cpu::CPU_REG], config);
        assert_eq!(names(&r), ["CUDA2", "CUDA0", "IG0", "CPU"]);
        assert_eq!(r.hidden().len(), 1);
        assert_eq!(r.hidden()[0].reason, "device 1 is not in TESSERA_CUDA_VISIBLE_DEVICES");

        let config = RegistryConfig::from_vars(&[("TESSERA_DISABLE_CUDA", "1"), ("TESSERA_DISABLE_MY_IGPU", "true")]);
        let r = RuntimeRegistry::with_config(&[cuda, igpu, &tessera_cpu::CPU_REG], config);
        assert_eq!(names(&r), ["CPU"]);
        assert_eq!(r.best_device().map(|d| d.name()), Some("CPU"));
        let skipped: Vec<String> = r.skipped().iter().map(|s| s.to_string()).collect();
        assert_eq!(
            skipped,
            [
                "built-in CUDA: disabled by TESSERA_DISABLE_CUDA=1",
                "built-in my-igpu: disabled by TESSERA_DISABLE_MY_IGPU=true"
            ]
        );
        // With no GPU at all, the integrated one is preferred over the CPU.
        let r = RuntimeRegistry::with_config(&[&tessera_cpu::CPU_REG, igpu], RegistryConfig::from_vars(&[]));
        assert_eq!(r.best_device().map(|d| d.name()), Some("IG0"));
        let mut b = r.init_best().unwrap();
        assert_eq!(b.name(), "CPU");
        b.synchronize().unwrap();

        let config = RegistryConfig::from_vars(&[("TESSERA_DISABLE_CPU", "1")]);
        let r = RuntimeRegistry::with_config(&[&tessera_cpu::CPU_REG], config);
        assert!(r.init_best().is_err());
        assert_eq!(
            r.select(None).err().map(|e| e.to_string()).as_deref(),
            Some("no device found for 'auto'; devices: none (built-in CPU: disabled by TESSERA_DISABLE_CPU=1)")
        );
        let config = RegistryConfig::from_vars(&[("TESSERA_DISABLE_CUDA", "builtin")]);
        let r = RuntimeRegistry::with_config(&[cuda, &tessera_cpu::CPU_REG], config);
        assert_eq!(
            r.select(Some("gpu")).err().map(|e| e.to_string()).as_deref(),
            Some("no GPU found for 'gpu'; devices: CPU")
        );
        assert_eq!(
            r.select(Some("cuda")).err().map(|e| e.to_string()).as_deref(),
            Some("unknown device 'cuda'; devices: CPU (built-in CUDA: disabled by TESSERA_DISABLE_CUDA=builtin)")
        );
    }

    struct CpuExport;

    impl tessera_plugin_abi::Exporter for CpuExport {
        fn reg() -> &'static dyn BackendReg {
            &tessera_cpu::CPU_REG
        }
        fn catch<R>(f: impl FnOnce() -> R) -> std::result::Result<R, String> {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
                .map_err(|p| tessera_plugin_abi::export::panic_message(&*p))
        }
    }

    #[test]
    fn a_family_is_listed_once_the_built_in_one_unless_it_is_disabled() {
        let mut r = RuntimeRegistry::with_config(&[&tessera_cpu::CPU_REG], RegistryConfig::from_vars(&[]));
        let tables = tessera_plugin_abi::loopback::<CpuExport>("CPU through the tables").unwrap();
        let e = r.register_loopback(tables).err().map(|e| e.to_string());
        assert_eq!(
            e.as_deref(),
            Some(
                "plugin CPU: the CPU family is already provided by the built-in reg \
                 (TESSERA_DISABLE_CPU=builtin uses a plugin instead)"
            )
        );
        assert!(!tables.is_loaded(), "a refused family is shut down");
        assert_eq!(names(&r), ["CPU"]);
        assert_eq!(r.entry_of(r.devices().next().unwrap()).map(|e| e.origin().clone()), Some(Origin::BuiltIn));

        let config = RegistryConfig::from_vars(&[("TESSERA_DISABLE_CPU", "builtin")]);
        let mut r = RuntimeRegistry::with_config(&[&tessera_cpu::CPU_REG], config);
        let tables = tessera_plugin_abi::loopback::<CpuExport>("CPU through the tables").unwrap();
        let device = r.register_loopback(tables).unwrap().devices()[0];
        assert_eq!(r.entry_of(device).map(|e| e.origin().clone()), Some(Origin::Loopback));
        assert_eq!(r.select(Some("cpu")).map(|d| d.name()), Ok("CPU"));
        assert!(r.entry_of(&tessera_cpu::CPU_DEVICE).is_none(), "the built-in device is not listed");
        let skipped: Vec<String> = r.skipped_of("cpu").map(|s| s.to_string()).collect();
        assert_eq!(skipped, ["built-in CPU: disabled by TESSERA_DISABLE_CPU=builtin"]);
        // A built-in registered after a plugin of its family is the one skipped.
        let e = r.register(&tessera_cpu::CPU_REG).err().map(|e| e.to_string());
        assert_eq!(e.as_deref(), Some("plugin built-in CPU: disabled by TESSERA_DISABLE_CPU=builtin"),);
        r.unload("cpu").unwrap();

        let config = RegistryConfig::from_vars(&[("TESSERA_DISABLE_CPU", "plugin")]);
        let mut r = RuntimeRegistry::with_config(&[&tessera_cpu::CPU_REG], config);
        let tables = tessera_plugin_abi::loopback::<CpuExport>("CPU through the tables").unwrap();
        let e = r.register_loopback(tables).err().map(|e| e.to_string());
        assert_eq!(e.as_deref(), Some("plugin CPU: disabled by TESSERA_DISABLE_CPU=plugin"));
        assert_eq!(r.entry_of(r.devices().next().unwrap()).map(|e| e.origin().clone()), Some(Origin::BuiltIn));
    }

    #[test]
    fn missing_plugins_and_unknown_families_are_clear_errors() {
        let mut r = RuntimeRegistry::with_config(&[&tessera_cpu::CPU_REG], RegistryConfig::from_vars(&[]));
        let dir = std::env::temp_dir().join(format!("tessera-empty-plugin-dir-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let e = r.load_best("cuda", Some(&dir)).err().unwrap().to_string();
        assert_eq!(e, format!("plugin cuda: no plugin file for it in {}", dir.display()));
        let report = r.load_all_from(&dir);
        assert!(report.loaded.is_empty() && report.skipped.is_empty());
        let e = r.unload("CPU").unwrap_err().to_string();
        assert_eq!(e, "plugin CPU: is not a loaded plugin family (loaded: none)");
        let e = r.load(&dir.join("libtessera-missing.so")).err().unwrap().to_string();
        assert!(e.contains("not a loadable shared library"), "{e}");
        assert_eq!(r.skipped().len(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn configured_plugin_directories_that_are_missing_or_files_are_reported() {
        let base = std::env::temp_dir().join(format!("tessera-configured-dirs-{}", std::process::id()));
        std::fs::create_dir_all(&base).unwrap();
        let (missing, file) = (base.join("missing"), base.join("file"));
        std::fs::write(&file, b"not a directory").unwrap();
        let config = RegistryConfig::from_vars(&[]).with_backend_dir(&missing).with_backend_dir(&file);
        let mut r = RuntimeRegistry::with_config(&[], config);
        let report = r.load_all();
        let reasons: Vec<String> = report.skipped.iter().map(|s| s.to_string()).collect();
        assert_eq!(
            reasons,
            [
                format!("{}: does not exist: no plugins were loaded from it", missing.display()),
                format!(
                    "{}: is not a directory: plugin directories hold libtessera-<family>[-<variant>] libraries",
                    file.display()
                ),
            ]
        );
        assert_eq!(r.skipped().len(), 2);
        let _ = std::fs::remove_dir_all(&base);
    }
}
