//! The CPU backend family.

use tessera_core::registry::{extension, Extension};
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
            _ => None,
        }
    }
}
