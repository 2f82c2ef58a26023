//! The reg table: the family and its devices.

use alloc::boxed::Box;
use alloc::vec::Vec;

use tessera_core::registry::{extension, Extension};

use super::device::ExportedDevice;
use super::{obj, put, Exporter};
use crate::abi::{AbiStr, Ctx, ABI_VERSION, EXT_SET_N_THREADS};
use crate::tables::{AbiDevice, AbiReg, RegExports};

/// The exported reg table, made once per load and never freed (it lives as long as the
/// plugin is mapped).
#[derive(Clone, Copy)]
pub struct RegHandle(pub *const AbiReg);

// SAFETY: the table is immutable after it is built and its context only holds `'static`
// references to `Sync` objects.
unsafe impl Send for RegHandle {}
// SAFETY: as above.
unsafe impl Sync for RegHandle {}

struct ExportedReg {
    devices: Vec<ExportedDevice>,
}

/// Builds the reg table of `E` (its devices and their buffer types), leaked for the life of
/// the plugin.
pub fn export_reg<E: Exporter>() -> RegHandle {
    let reg = E::reg();
    let devices = (0..reg.device_count()).filter_map(|i| reg.device(i)).map(ExportedDevice::new).collect();
    let ctx: &'static mut ExportedReg = Box::leak(Box::new(ExportedReg { devices }));
    let extensions = if reg.extension(extension::SET_THREADS).is_some() { EXT_SET_N_THREADS } else { 0 };
    let table = RegExports::<E>::table(ABI_VERSION, extensions, (ctx as *mut ExportedReg).cast());
    RegHandle(Box::leak(Box::new(table)))
}

impl<E: Exporter> RegExports<E> {
    pub(crate) unsafe extern "C" fn name(_ctx: Ctx) -> AbiStr {
        E::catch(|| AbiStr::new(E::reg().name())).unwrap_or(AbiStr::EMPTY)
    }

    pub(crate) unsafe extern "C" fn device_count(ctx: Ctx) -> usize {
        // SAFETY: `ctx` is the reg context this plugin made in `export_reg`.
        E::catch(|| unsafe { obj::<ExportedReg>(ctx) }.map_or(0, |r| r.devices.len())).unwrap_or(0)
    }

    pub(crate) unsafe extern "C" fn device(ctx: Ctx, index: usize, out: *mut AbiDevice) -> bool {
        E::catch(|| {
            // SAFETY: `ctx` is the reg context this plugin made in `export_reg`.
            let Ok(reg) = (unsafe { obj::<ExportedReg>(ctx) }) else { return false };
            let Some(d) = reg.devices.get(index) else { return false };
            // SAFETY: the host passes a writable AbiDevice (or null, refused by `put`).
            unsafe { put(out, d.handle::<E>()) }.is_ok()
        })
        .unwrap_or(false)
    }

    pub(crate) unsafe extern "C" fn feature(_ctx: Ctx, index: usize, name: *mut AbiStr, value: *mut AbiStr) -> bool {
        E::catch(|| {
            let Some(Extension::Features(features)) = E::reg().extension(extension::FEATURES) else { return false };
            let Some((n, v)) = features().get(index) else { return false };
            // SAFETY: the host passes writable AbiStrs (or null, refused by `put`).
            unsafe { put(name, AbiStr::new(n)).and_then(|()| put(value, AbiStr::new(v))) }.is_ok()
        })
        .unwrap_or(false)
    }

    /// Nothing to release: the reg context is shared by every init of this mapping of the
    /// library and leaked with it.
    pub(crate) unsafe extern "C" fn release(_ctx: Ctx) {}
}
