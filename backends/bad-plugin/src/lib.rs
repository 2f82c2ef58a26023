//! A deliberately broken backend plugin, for tests of the loader. The variable
//! `TESSERA_BAD_PLUGIN` (read at each call) picks the misbehaviour:
//!
//! | value         | what the plugin does                                              |
//! |---------------|-------------------------------------------------------------------|
//! | `abi-version` | reports plugin ABI `ABI_VERSION + 1`                               |
//! | `score-zero`  | scores 0 ("cannot run here")                                       |
//! | `init-error`  | `tessera_backend_init` fails with a message                        |
//! | `init-panic`  | `tessera_backend_init` panics (caught: no unwinding into the host) |
//! | `null-init`   | `tessera_backend_init` returns null without a message             |
//! | `old-table`   | returns a reg table too short for this host (an older ABI)         |
//! | `reg-abi`     | returns a reg table claiming another ABI version                   |
//! | anything else | works: a family "BAD" with no devices                              |
//!
//! Every entry point is written out by hand (not with `export_backend!`) and catches panics
//! itself.

use tessera_core::{BackendReg, Device};
use tessera_plugin_abi::abi::{AbiError, AbiHostInfo, ABI_VERSION, STATUS_ERROR};
use tessera_plugin_abi::export::{self, panic_message, Exporter};
use tessera_plugin_abi::tables::AbiReg;

struct BadReg;

static BAD_REG: BadReg = BadReg;

impl BackendReg for BadReg {
    fn name(&self) -> &str {
        "BAD"
    }
    fn device_count(&self) -> usize {
        0
    }
    fn device(&self, _index: usize) -> Option<&'static dyn Device> {
        None
    }
}

struct Export;

impl Exporter for Export {
    fn reg() -> &'static dyn BackendReg {
        &BAD_REG
    }
    fn catch<R>(f: impl FnOnce() -> R) -> Result<R, String> {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|p| panic_message(&*p))
    }
}

fn mode() -> String {
    std::env::var("TESSERA_BAD_PLUGIN").unwrap_or_default()
}

/// A copy of the working reg table with `edit` applied, leaked like every reg table.
fn edited_table(edit: impl FnOnce(&mut AbiReg)) -> *const AbiReg {
    // SAFETY: `export_reg` returns a valid, leaked table.
    let mut table = unsafe { *export::export_reg::<Export>().0 };
    edit(&mut table);
    Box::leak(Box::new(table))
}

/// The ABI version this plugin claims.
#[unsafe(no_mangle)]
pub extern "C" fn tessera_backend_abi_version() -> u32 {
    Export::catch(|| if mode() == "abi-version" { ABI_VERSION + 1 } else { ABI_VERSION }).unwrap_or(0)
}

/// This plugin's score.
#[unsafe(no_mangle)]
pub extern "C" fn tessera_backend_score() -> u32 {
    export::score::<Export>(|| if mode() == "score-zero" { 0 } else { 1 })
}

/// The reg table, or null, depending on `TESSERA_BAD_PLUGIN`.
///
/// # Safety
/// `host` and `err` must be null or valid, as the plugin ABI describes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tessera_backend_init(host: *const AbiHostInfo, err: *mut AbiError) -> *const AbiReg {
    let mode = Export::catch(mode).unwrap_or_default();
    match mode.as_str() {
        "init-error" => {
            export::report(err, STATUS_ERROR, "no device answered: the driver is too old (need 550, found 470)");
            std::ptr::null()
        }
        // SAFETY: forwarded from the host.
        "init-panic" => unsafe {
            export::init::<Export>(host, err, || panic!("simulated crash while probing devices"))
        },
        "null-init" => std::ptr::null(),
        "old-table" => Export::catch(|| edited_table(|t| t.size = std::mem::offset_of!(AbiReg, device)))
            .unwrap_or(std::ptr::null()),
        "reg-abi" => Export::catch(|| edited_table(|t| t.abi_version = 0)).unwrap_or(std::ptr::null()),
        // SAFETY: forwarded from the host.
        _ => unsafe { export::init::<Export>(host, err, export::export_reg::<Export>) },
    }
}
