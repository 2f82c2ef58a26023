//! Opening one backend plugin: the shared library, its entry points, its score and its reg.
//!
//! File names are `libtessera-<name>[-<variant>].so` (`.dylib` on macOS,
//! `tessera-<name>[-<variant>].dll` on Windows); `<name>` is the family (no `-` in it), the
//! variant is free-form (`x86-64-v3`). Every failure is a [`tessera_core::Error::Plugin`]
//! naming the file, with a one-line reason.

use std::path::{Path, PathBuf};

use tessera_core::{Error, Result};
use tessera_plugin_abi::abi::{
    AbiError, AbiHostInfo, AbiVersionFn, InitFn, ScoreFn, ABI_VERSION, ABI_VERSION_SYMBOL, INIT_SYMBOL, SCORE_SYMBOL,
    STATUS_PANIC,
};
use tessera_plugin_abi::{wrap_reg, PluginReg};

/// What plugin file names start with on this platform.
pub const FILE_PREFIX: &str = if cfg!(windows) { "tessera-" } else { "libtessera-" };
/// What plugin file names end with on this platform (`.so`, `.dylib`, `.dll`).
pub const FILE_SUFFIX: &str = std::env::consts::DLL_SUFFIX;

/// `libtessera-<family>[-<variant>].so`.
pub fn plugin_file_name(family: &str, variant: Option<&str>) -> String {
    match variant {
        Some(v) => format!("{FILE_PREFIX}{family}-{v}{FILE_SUFFIX}"),
        None => format!("{FILE_PREFIX}{family}{FILE_SUFFIX}"),
    }
}

/// The family (lower case) and variant a plugin file name encodes, or `None` for a file
/// that is not named like a plugin.
pub fn parse_plugin_file_name(file_name: &str) -> Option<(String, Option<String>)> {
    let stem = file_name.strip_prefix(FILE_PREFIX)?.strip_suffix(FILE_SUFFIX)?;
    let (family, variant) = match stem.split_once('-') {
        Some((f, v)) => (f, Some(v.to_string())),
        None => (stem, None),
    };
    let ok = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !ok(family) || variant.as_deref().is_some_and(|v| v.is_empty() || v.contains(['/', '\\'])) {
        return None;
    }
    Some((family.to_ascii_lowercase(), variant))
}

/// A plugin library that is open and speaks this host's ABI, not yet initialised.
pub struct PluginLibrary {
    path: PathBuf,
    init: InitFn,
    score: Option<ScoreFn>,
    // Last: the entry points above point into it.
    library: libloading::Library,
}

fn plugin_error(path: &Path, message: impl Into<String>) -> Error {
    Error::Plugin { plugin: path.display().to_string(), message: message.into() }
}

/// The cause libloading reports (its `Display` says only "dlopen failed"), on one line.
fn cause(e: &libloading::Error) -> String {
    let text = match std::error::Error::source(e) {
        Some(source) => source.to_string(),
        None => format!("{e:?}"),
    };
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

impl PluginLibrary {
    /// Opens `path` (resolving every symbol now, not lazily) and checks its entry points and
    /// ABI version.
    pub fn open(path: &Path) -> Result<PluginLibrary> {
        // SAFETY: loading a library runs its initialisers; a tessera plugin has none that
        // matter, and a file that is not one is refused below before any of its code is
        // called. This is the trust a user extends by putting a plugin in a search path.
        let library = unsafe { open_library(path) }
            .map_err(|e| plugin_error(path, format!("not a loadable shared library ({})", cause(&e))))?;
        // SAFETY: the symbol is declared with the signature the plugin ABI gives it.
        let init = match unsafe { library.get::<InitFn>(INIT_SYMBOL) } {
            Ok(f) => *f,
            Err(_) => {
                return Err(plugin_error(
                    path,
                    format!("has no `{INIT_SYMBOL}` entry point: not a tessera backend plugin"),
                ))
            }
        };
        // SAFETY: as above.
        let version = match unsafe { library.get::<AbiVersionFn>(ABI_VERSION_SYMBOL) } {
            Ok(f) => *f,
            Err(_) => {
                return Err(plugin_error(
                    path,
                    format!("has no `{ABI_VERSION_SYMBOL}` entry point: built for an unversioned plugin ABI"),
                ))
            }
        };
        // SAFETY: an entry point of the plugin ABI; it takes nothing and cannot unwind.
        let v = unsafe { version() };
        if v != ABI_VERSION {
            return Err(plugin_error(
                path,
                format!(
                    "was built for plugin ABI {v}, this host speaks {ABI_VERSION}; rebuild it against this tessera"
                ),
            ));
        }
        // SAFETY: as for `init`.
        let score = unsafe { library.get::<ScoreFn>(SCORE_SYMBOL) }.ok().map(|f| *f);
        Ok(PluginLibrary { path: path.to_path_buf(), init, score, library })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The plugin's score on this machine (`None`: it has no score function).
    pub fn score(&self) -> Option<u32> {
        // SAFETY: an entry point of the plugin ABI, resolved from the library we hold.
        self.score.map(|f| unsafe { f() })
    }

    /// Calls `tessera_backend_init` and wraps the reg it returns. The library must stay
    /// open until the reg's `shutdown` has succeeded.
    pub fn init(&self) -> Result<&'static PluginReg> {
        let host = AbiHostInfo { size: std::mem::size_of::<AbiHostInfo>(), abi_version: ABI_VERSION };
        let mut err = AbiError::new();
        // SAFETY: the plugin's init entry point, with valid host info and error outputs.
        let table = unsafe { (self.init)(&host, &mut err) };
        if table.is_null() {
            let message = err.message();
            let reason = match err.code {
                STATUS_PANIC => message,
                _ if message.is_empty() => format!("{INIT_SYMBOL} failed without saying why"),
                _ => format!("{INIT_SYMBOL} failed: {message}"),
            };
            return Err(plugin_error(&self.path, reason));
        }
        // SAFETY: the table the plugin's init just returned; the caller keeps the library open
        // until shutdown.
        unsafe { wrap_reg(table, &self.path.display().to_string()) }
    }

    /// Closes the library. Only sound once no code or data of it is used any more.
    pub(crate) fn close(self) {
        let path = self.path;
        if let Err(e) = self.library.close() {
            log::warn!("closing plugin {}: {}", path.display(), cause(&e));
        }
    }

    /// Keeps the library mapped for the rest of the process.
    pub(crate) fn leak(self) {
        std::mem::forget(self.library);
    }
}

/// # Safety
/// As `libloading::Library::new`: the library's initialisers run.
#[cfg(unix)]
unsafe fn open_library(path: &Path) -> std::result::Result<libloading::Library, libloading::Error> {
    use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};
    // SAFETY: forwarded from the caller.
    unsafe { Library::open(Some(path), RTLD_NOW | RTLD_LOCAL) }.map(Into::into)
}

/// # Safety
/// As `libloading::Library::new`: the library's initialisers run.
#[cfg(not(unix))]
unsafe fn open_library(path: &Path) -> std::result::Result<libloading::Library, libloading::Error> {
    // SAFETY: forwarded from the caller.
    unsafe { libloading::Library::new(path) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_round_trip() {
        let name = plugin_file_name("cpu", Some("x86-64-v3"));
        assert_eq!(parse_plugin_file_name(&name), Some(("cpu".into(), Some("x86-64-v3".into()))));
        let name = plugin_file_name("cuda", None);
        assert_eq!(parse_plugin_file_name(&name), Some(("cuda".into(), None)));
        assert_eq!(parse_plugin_file_name(&format!("{FILE_PREFIX}{FILE_SUFFIX}")), None);
        assert_eq!(parse_plugin_file_name(&format!("{FILE_PREFIX}cpu-{FILE_SUFFIX}")), None);
        assert_eq!(parse_plugin_file_name("libother.so.1"), None);
        #[cfg(target_os = "linux")]
        assert_eq!(plugin_file_name("cpu", Some("x86-64-v4")), "libtessera-cpu-x86-64-v4.so");
    }

    #[test]
    fn a_file_that_is_not_a_library_is_refused_with_the_loader_s_reason() {
        let dir = std::env::temp_dir().join(format!("tessera-loader-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(plugin_file_name("junk", None));
        std::fs::write(&path, b"not an ELF file\nat all").unwrap();
        let e = PluginLibrary::open(&path).err().unwrap().to_string();
        assert!(e.starts_with(&format!("plugin {}: not a loadable shared library (", path.display())), "{e}");
        assert!(!e.contains('\n'), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
