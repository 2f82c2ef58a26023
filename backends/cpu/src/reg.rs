//! The CPU backend family.

use tessera_core::registry::{extension, Extension};
#[cfg(feature = "std")]
use tessera_core::{Backend, Error, Result};
use tessera_core::{BackendReg, Device};

use crate::device::CPU_DEVICE;

pub struct CpuReg;

/// The CPU family, with its one device.
pub static CPU_REG: CpuReg = CpuReg;

impl BackendReg for CpuReg {
    fn name(&self) -> &str {
        "CPU"
    }
    fn device_count(&self) -> usize {
        1
    }
    fn device(&self, index: usize) -> Option<&'static dyn Device> {
        (index == 0).then_some(&CPU_DEVICE as &'static dyn Device)
    }
    fn extension(&self, name: &str) -> Option<Extension> {
        match name {
            extension::FEATURES => Some(Extension::Features(crate::system::features)),
            #[cfg(feature = "std")]
            extension::SET_THREADS => Some(Extension::SetThreads(set_threads)),
            _ => None,
        }
    }
}

/// [`extension::SET_THREADS`]: the thread count of a CPU backend.
#[cfg(feature = "std")]
fn set_threads(backend: &mut dyn Backend, threads: usize) -> Result<()> {
    let name = alloc::string::String::from(backend.name());
    match backend.as_any_mut().downcast_mut::<crate::CpuBackend>() {
        Some(cpu) => cpu.set_threads(threads),
        None => Err(Error::Backend {
            backend: name,
            message: "set_n_threads of the CPU family applies to CPU backends only".into(),
        }),
    }
}
