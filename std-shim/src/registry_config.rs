//! What the environment says about backend discovery: where to search for plugins, which
//! families are disabled, which of a family's devices are visible.
//!
//! - `TESSERA_BACKEND_DIR` (at compile time): a directory searched first;
//! - `TESSERA_BACKEND_PATH`: one more plugin file to load after the search;
//! - `TESSERA_DISABLE_<FAMILY>=1`: skip a family (built in or plugin), e.g.
//!   `TESSERA_DISABLE_CUDA=1`;
//! - `TESSERA_<FAMILY>_VISIBLE_DEVICES=0,2`: keep only those devices of a family, in that
//!   order (like `CUDA_VISIBLE_DEVICES`).
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
    backend_dir: Option<PathBuf>,
}

impl Default for RegistryConfig {
    fn default() -> Self {
        RegistryConfig::from_env()
    }
}

impl std::fmt::Debug for RegistryConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryConfig").field("backend_dir", &self.backend_dir).finish_non_exhaustive()
    }
}

/// `TESSERA_BACKEND_DIR` as it was when this crate was compiled.
pub const COMPILED_BACKEND_DIR: Option<&str> = option_env!("TESSERA_BACKEND_DIR");

impl RegistryConfig {
    /// Settings from the process environment.
    pub fn from_env() -> RegistryConfig {
        RegistryConfig {
            vars: Arc::new(|name: &str| std::env::var(name).ok()),
            backend_dir: COMPILED_BACKEND_DIR.filter(|d| !d.is_empty()).map(PathBuf::from),
        }
    }

    /// Settings from a fixed table of variables (the process environment is not read).
    pub fn from_vars(vars: &[(&str, &str)]) -> RegistryConfig {
        let table: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        RegistryConfig { vars: Arc::new(move |name: &str| table.get(name).cloned()), backend_dir: None }
    }

    pub fn var(&self, name: &str) -> Option<String> {
        (self.vars)(name)
    }

    /// `CUDA` for "cuda", `MY_GPU` for "my-gpu".
    pub fn family_key(family: &str) -> String {
        family.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_uppercase() } else { '_' }).collect()
    }

    /// The variable setting that disables `family` (`TESSERA_DISABLE_CUDA=1`), if one does.
    pub fn disabled_by(&self, family: &str) -> Option<String> {
        let name = format!("TESSERA_DISABLE_{}", Self::family_key(family));
        let value = self.var(&name)?;
        let off = matches!(value.trim().to_ascii_lowercase().as_str(), "" | "0" | "false" | "no" | "off");
        (!off).then(|| format!("{name}={value}"))
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

    /// Where plugins are searched: the compile-time `TESSERA_BACKEND_DIR`, the executable's
    /// directory, the current directory (each once).
    pub fn search_dirs(&self) -> Vec<PathBuf> {
        let mut dirs = Vec::new();
        dirs.extend(self.backend_dir.clone());
        if let Some(dir) = std::env::current_exe().ok().and_then(|p| p.parent().map(PathBuf::from)) {
            dirs.push(dir);
        }
        if let Ok(dir) = std::env::current_dir() {
            dirs.push(dir);
        }
        let mut unique: Vec<PathBuf> = Vec::new();
        for d in dirs {
            let key = d.canonicalize().unwrap_or_else(|_| d.clone());
            if !unique.iter().any(|u| u.canonicalize().unwrap_or_else(|_| u.clone()) == key) {
                unique.push(d);
            }
        }
        unique
    }

    /// The same settings with `dir` searched first (as if compiled with
    /// `TESSERA_BACKEND_DIR=dir`).
    pub fn with_backend_dir(mut self, dir: impl Into<PathBuf>) -> RegistryConfig {
        self.backend_dir = Some(dir.into());
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
        assert_eq!(c.disabled_by("cuda").as_deref(), Some("TESSERA_DISABLE_CUDA=1"));
        assert_eq!(c.disabled_by("CUDA").as_deref(), Some("TESSERA_DISABLE_CUDA=1"));
        assert_eq!(c.disabled_by("vulkan"), None);
        assert_eq!(c.disabled_by("cpu"), None);
        assert_eq!(c.visible_devices("my-gpu"), Some(Ok(vec![2, 0])));
        assert!(c.visible_devices("sim").unwrap().unwrap_err().contains("'x' is not a device index"));
        assert_eq!(c.visible_devices("cpu"), None);
    }
}
