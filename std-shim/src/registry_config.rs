//! What the environment says about backend discovery: where to search for plugins, which
//! families are disabled, which of a family's devices are visible.
//!
//! - `TESSERA_BACKEND_DIR`: plugin directories searched first (several separated like `PATH`);
//!   read at run time, and its value when the program was compiled is searched next, then
//!   the executable's directory (the current directory only when named, as `.`);
//! - `TESSERA_BACKEND_PATH`: one more plugin file to load after the search;
//! - `TESSERA_DISABLE_<FAMILY>=1`: skip a family, built in and plugins, e.g.
//!   `TESSERA_DISABLE_CUDA=1`; `=builtin` skips only the family compiled into the program
//!   (so that a plugin of it is used instead), `=plugin` only its plugins;
//! - `TESSERA_<FAMILY>_VISIBLE_DEVICES=0,2`: keep only those devices of a family, in that
//!   order (like `CUDA_VISIBLE_DEVICES`);
//! - `TESSERA_SHOW_DUPLICATE_DEVICES=1`: list a GPU once per API it is seen through (an
//!   NVIDIA GPU as `CUDA0` and `Vulkan0`), so that placement can name either.
//!
//! `<FAMILY>` is the family's name in upper case with anything but letters and digits
//! turned into `_`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

/// Where variables come from: the process environment, or a fixed table (tests).
type VarSource = dyn Fn(&str) -> Option<String> + Send + Sync;

/// The discovery settings, read from variables when asked.
#[derive(Clone)]
pub struct RegistryConfig {
    vars: Arc<VarSource>,
    /// Directories the program gave ([`RegistryConfig::with_backend_dir`]), searched first.
    program_dirs: Vec<PathBuf>,
    /// `TESSERA_BACKEND_DIR` when this crate was compiled (from the environment only).
    compiled_dir: Option<PathBuf>,
}

/// What `TESSERA_DISABLE_<FAMILY>` turns off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Disabled {
    /// The built-in family and its plugins (`1`, `true`, `yes`, anything but the below).
    All,
    /// The built-in family only (`builtin`).
    BuiltIn,
    /// Plugins of the family only (`plugin`).
    Plugins,
}

impl Default for RegistryConfig {
    fn default() -> Self {
        RegistryConfig::from_env()
    }
}

impl std::fmt::Debug for RegistryConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryConfig")
            .field("program_dirs", &self.program_dirs)
            .field("compiled_dir", &self.compiled_dir)
            .finish_non_exhaustive()
    }
}

/// `TESSERA_BACKEND_DIR` as it was when this crate was compiled.
pub const COMPILED_BACKEND_DIR: Option<&str> = option_env!("TESSERA_BACKEND_DIR");

impl RegistryConfig {
    /// Settings from the process environment.
    pub fn from_env() -> RegistryConfig {
        RegistryConfig {
            vars: Arc::new(|name: &str| std::env::var(name).ok()),
            program_dirs: Vec::new(),
            compiled_dir: COMPILED_BACKEND_DIR.filter(|d| !d.is_empty()).map(PathBuf::from),
        }
    }

    /// Settings from a fixed table of variables (the process environment is not read).
    pub fn from_vars(vars: &[(&str, &str)]) -> RegistryConfig {
        let table: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        RegistryConfig {
            vars: Arc::new(move |name: &str| table.get(name).cloned()),
            program_dirs: Vec::new(),
            compiled_dir: None,
        }
    }

    pub fn var(&self, name: &str) -> Option<String> {
        (self.vars)(name)
    }

    /// Whether `TESSERA_SHOW_DUPLICATE_DEVICES` keeps devices with the PCI bus id of one
    /// already listed.
    pub fn show_duplicates(&self) -> bool {
        self.var("TESSERA_SHOW_DUPLICATE_DEVICES")
            .is_some_and(|v| !matches!(v.trim().to_ascii_lowercase().as_str(), "" | "0" | "false" | "no" | "off"))
    }

    /// `CUDA` for "cuda", `MY_GPU` for "my-gpu".
    pub fn family_key(family: &str) -> String {
        family.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_uppercase() } else { '_' }).collect()
    }

    /// The variable setting that keeps the built-in `family` out (`TESSERA_DISABLE_CUDA=1`,
    /// `TESSERA_DISABLE_CPU=builtin`), if one does.
    pub fn builtin_disabled_by(&self, family: &str) -> Option<String> {
        self.disabled(family).and_then(|(scope, setting)| (scope != Disabled::Plugins).then_some(setting))
    }

    /// The variable setting that keeps plugins of `family` out (`TESSERA_DISABLE_CUDA=1`,
    /// `TESSERA_DISABLE_CPU=plugin`), if one does.
    pub fn plugin_disabled_by(&self, family: &str) -> Option<String> {
        self.disabled(family).and_then(|(scope, setting)| (scope != Disabled::BuiltIn).then_some(setting))
    }

    fn disabled(&self, family: &str) -> Option<(Disabled, String)> {
        let name = format!("TESSERA_DISABLE_{}", Self::family_key(family));
        let value = self.var(&name)?;
        let scope = match value.trim().to_ascii_lowercase().as_str() {
            "" | "0" | "false" | "no" | "off" => return None,
            "builtin" | "built-in" => Disabled::BuiltIn,
            "plugin" | "plugins" => Disabled::Plugins,
            _ => Disabled::All,
        };
        Some((scope, format!("{name}={value}")))
    }

    /// The devices of `family` to keep, by index in the family's list, if
    /// `TESSERA_<FAMILY>_VISIBLE_DEVICES` is set; `Err` says what is wrong with its value.
    pub fn visible_devices(&self, family: &str) -> Option<Result<Vec<usize>, String>> {
        let name = format!("TESSERA_{}_VISIBLE_DEVICES", Self::family_key(family));
        let value = self.var(&name)?;
        let mut out = Vec::new();
        for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            match item.parse::<usize>() {
                Ok(i) if !out.contains(&i) => out.push(i),
                Ok(_) => {}
                Err(_) => {
                    return Some(Err(format!("{name}={value}: '{item}' is not a device index (expected e.g. 0,2)")))
                }
            }
        }
        Some(Ok(out))
    }

    /// `TESSERA_BACKEND_PATH`: one more plugin to load.
    pub fn backend_path(&self) -> Option<PathBuf> {
        self.var("TESSERA_BACKEND_PATH").filter(|p| !p.trim().is_empty()).map(PathBuf::from)
    }

    /// The plugin directories named explicitly: those the program gave
    /// ([`Self::with_backend_dir`]), `TESSERA_BACKEND_DIR` now, `TESSERA_BACKEND_DIR` when
    /// this crate was compiled.
    pub fn configured_dirs(&self) -> Vec<PathBuf> {
        let mut dirs = self.program_dirs.clone();
        if let Some(value) = self.var("TESSERA_BACKEND_DIR") {
            dirs.extend(std::env::split_paths(&value).filter(|d| !d.as_os_str().is_empty()));
        }
        dirs.extend(self.compiled_dir.clone());
        dirs
    }

    /// Where plugins are searched, each directory once: the [configured
    /// ones](Self::configured_dirs), then the executable's directory. The current directory is
    /// searched only when one of those names it (`TESSERA_BACKEND_DIR=.`): a program run in a
    /// directory it does not trust must not load the libraries it finds there.
    pub fn search_dirs(&self) -> Vec<PathBuf> {
        let mut dirs = self.configured_dirs();
        if let Some(dir) = std::env::current_exe().ok().and_then(|p| p.parent().map(PathBuf::from)) {
            dirs.push(dir);
        }
        let key = |d: &PathBuf| d.canonicalize().unwrap_or_else(|_| d.clone());
        let mut unique: Vec<PathBuf> = Vec::new();
        for d in dirs {
            if !unique.iter().any(|u| key(u) == key(&d)) {
                unique.push(d);
            }
        }
        unique
    }

    /// The same settings with `dir` searched before every other directory (a program's
    /// `--plugins DIR` option, a test's directory).
    pub fn with_backend_dir(mut self, dir: impl Into<PathBuf>) -> RegistryConfig {
        self.program_dirs.push(dir.into());
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_are_disabled_and_filtered_by_variables() {
        let c = RegistryConfig::from_vars(&[
            ("TESSERA_DISABLE_CUDA", "1"),
            ("TESSERA_DISABLE_VULKAN", "0"),
            ("TESSERA_MY_GPU_VISIBLE_DEVICES", "2, 0,2"),
            ("TESSERA_SIM_VISIBLE_DEVICES", "0,x"),
        ]);
        assert_eq!(c.builtin_disabled_by("cuda").as_deref(), Some("TESSERA_DISABLE_CUDA=1"));
        assert_eq!(c.plugin_disabled_by("CUDA").as_deref(), Some("TESSERA_DISABLE_CUDA=1"));
        assert_eq!(c.builtin_disabled_by("vulkan"), None);
        assert_eq!(c.plugin_disabled_by("vulkan"), None);
        assert_eq!(c.builtin_disabled_by("cpu"), None);
        assert_eq!(c.visible_devices("my-gpu"), Some(Ok(vec![2, 0])));
        assert!(c.visible_devices("sim").unwrap().unwrap_err().contains("'x' is not a device index"));
        assert_eq!(c.visible_devices("cpu"), None);
    }

    #[test]
    fn the_built_in_family_or_its_plugins_can_be_disabled_alone() {
        let c = RegistryConfig::from_vars(&[("TESSERA_DISABLE_CPU", "builtin"), ("TESSERA_DISABLE_CUDA", "Plugin")]);
        assert_eq!(c.builtin_disabled_by("cpu").as_deref(), Some("TESSERA_DISABLE_CPU=builtin"));
        assert_eq!(c.plugin_disabled_by("cpu"), None);
        assert_eq!(c.builtin_disabled_by("cuda"), None);
        assert_eq!(c.plugin_disabled_by("cuda").as_deref(), Some("TESSERA_DISABLE_CUDA=Plugin"));
    }

    #[test]
    fn plugin_directories_are_searched_in_order_each_once() {
        let base = std::env::temp_dir().join(format!("tessera-search-dirs-{}", std::process::id()));
        let (a, b, c) = (base.join("a"), base.join("b"), base.join("c"));
        let list = std::env::join_paths([&b, &a]).unwrap().into_string().unwrap();
        let config =
            RegistryConfig::from_vars(&[("TESSERA_BACKEND_DIR", &list)]).with_backend_dir(&c).with_backend_dir(&b);
        let dirs = config.search_dirs();
        assert_eq!(dirs[..3], [c, b, a], "the program's directories, then TESSERA_BACKEND_DIR's, each once");
        let exe_dir = std::env::current_exe().unwrap().parent().unwrap().to_path_buf();
        assert_eq!(dirs[3..], *std::slice::from_ref(&exe_dir));
        assert_eq!(RegistryConfig::from_vars(&[]).search_dirs(), [exe_dir]);
    }

    #[test]
    fn the_current_directory_is_searched_only_when_named() {
        let cwd = std::env::current_dir().unwrap().canonicalize().unwrap();
        let exe_dir = std::env::current_exe().unwrap().parent().unwrap().canonicalize().unwrap();
        let searched = |c: &RegistryConfig| c.search_dirs().iter().any(|d| d.canonicalize().ok() == Some(cwd.clone()));
        if cwd != exe_dir {
            assert!(!searched(&RegistryConfig::from_vars(&[])), "{:?}", RegistryConfig::from_vars(&[]).search_dirs());
        }
        assert!(searched(&RegistryConfig::from_vars(&[("TESSERA_BACKEND_DIR", ".")])));
        assert!(searched(&RegistryConfig::from_vars(&[]).with_backend_dir(".")));
    }
}
