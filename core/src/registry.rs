//! Backend families (regs) and the registry of those compiled in.

use alloc::boxed::Box;
use alloc::string::String;

use crate::backend::Backend;
use crate::device::{Device, DeviceType};
use crate::error::Result;

mod lookup;

pub use lookup::{
    best_device, device_by_family, device_by_name, device_by_type, device_names, first_gpu, resolve_device,
};

/// Well-known extension names (ggml's `get_proc_address` names, in Rust form).
pub mod extension {
    /// [`super::Extension::SetThreads`].
    pub const SET_THREADS: &str = "set_n_threads";
    /// [`super::Extension::Features`].
    pub const FEATURES: &str = "features";
}

/// A named, family-specific function a reg may offer.
#[derive(Clone, Copy)]
pub enum Extension {
    /// Sets the number of worker threads of a backend of this family.
    SetThreads(fn(&mut dyn Backend, usize) -> Result<()>),
    /// The features this family was built with and found at run time, as (name, value).
    Features(fn() -> &'static [(&'static str, &'static str)]),
}

/// A backend family: CPU, CUDA, Vulkan, or a loaded plugin.
pub trait BackendReg: Send + Sync {
    fn name(&self) -> &str;
    fn device_count(&self) -> usize;
    fn device(&self, index: usize) -> Option<&'static dyn Device>;
    /// A named extension function, if this family has it.
    fn extension(&self, _name: &str) -> Option<Extension> {
        None
    }
}

/// The regs compiled in, in priority order (GPU families first, the CPU last). Building one,
/// listing its regs and finding its devices allocate nothing (only errors do).
#[derive(Clone, Copy)]
pub struct Registry<'a> {
    regs: &'a [&'static dyn BackendReg],
}

impl<'a> Registry<'a> {
    pub const fn new(regs: &'a [&'static dyn BackendReg]) -> Registry<'a> {
        Registry { regs }
    }

    pub fn regs(&self) -> &'a [&'static dyn BackendReg] {
        self.regs
    }

    /// The reg called `name` (case-insensitive).
    pub fn reg_by_name(&self, name: &str) -> Option<&'static dyn BackendReg> {
        self.regs.iter().copied().find(|r| r.name().eq_ignore_ascii_case(name))
    }

    /// Every device of every reg, in priority order.
    pub fn devices(&self) -> impl Iterator<Item = &'static dyn Device> + Clone + 'a {
        self.regs.iter().flat_map(|r| (0..r.device_count()).filter_map(move |i| r.device(i)))
    }

    /// The device called `name` (case-insensitive); the error lists the devices that exist.
    pub fn device_by_name(&self, name: &str) -> Result<&'static dyn Device> {
        device_by_name(self.devices(), name)
    }

    /// The first device of the family called `family` (case-insensitive).
    pub fn device_by_family(&self, family: &str) -> Option<&'static dyn Device> {
        device_by_family(self.devices(), family)
    }

    /// The first device of `device_type`.
    pub fn device_by_type(&self, device_type: DeviceType) -> Option<&'static dyn Device> {
        device_by_type(self.devices(), device_type)
    }

    /// The first GPU, else the first integrated GPU, else the first CPU.
    pub fn best_device(&self) -> Option<&'static dyn Device> {
        best_device(self.devices())
    }

    /// The device a user asked for (`auto`, `gpu`, a family, a device name): see
    /// [`resolve_device`].
    pub fn resolve(&self, request: &str) -> Result<&'static dyn Device> {
        resolve_device(self.devices(), request)
    }

    /// A backend on the best device.
    pub fn init_best(&self) -> Result<Box<dyn Backend>> {
        self.resolve("auto")?.init_backend()
    }

    /// "CPU, CUDA0, ..." (or "none").
    pub fn device_names(&self) -> String {
        device_names(self.devices())
    }
}

#[cfg(test)]
mod tests;
