//! The CUDA family: its devices, enumerated once, on first use.

use std::sync::OnceLock;

use tessera_core::registry::{extension, BackendReg, Extension};
use tessera_core::Device;

use crate::device::CudaDevice;
use crate::driver;

/// The GPUs the driver lists (none without a driver).
pub struct CudaReg {
    devices: OnceLock<Vec<&'static CudaDevice>>,
}

pub static CUDA_REG: CudaReg = CudaReg { devices: OnceLock::new() };

/// Why the family lists fewer devices than the machine may have (no driver, a GPU that
/// failed to initialise), once enumerated.
static STATUS: OnceLock<String> = OnceLock::new();

/// The `features` extension: how enumeration went and the kernels' targets.
fn features() -> &'static [(&'static str, &'static str)] {
    static FEATURES: OnceLock<[(&'static str, &'static str); 2]> = OnceLock::new();
    FEATURES.get_or_init(|| {
        let status = STATUS.get().map_or("not enumerated yet", String::as_str);
        [("STATUS", status), ("KERNELS", "sm_80 sm_89 sm_90a compute_90")]
    })
}

impl CudaReg {
    /// The GPU called `name`, if this family listed it.
    pub(crate) fn find(&self, name: &str) -> Option<&'static CudaDevice> {
        self.devices().iter().copied().find(|d| d.name() == name)
    }

    fn devices(&self) -> &[&'static CudaDevice] {
        self.devices.get_or_init(|| {
            let (contexts, why) = driver::contexts();
            if let Some(why) = &why {
                log::info!("CUDA: {} device(s): {why}", contexts.len());
            }
            STATUS.get_or_init(|| why.unwrap_or_else(|| "ok".into()));
            contexts.into_iter().map(CudaDevice::create).collect()
        })
    }
}

/// The CUDA device at `index` of the family's list (`CUDA0` is 0), as its concrete type.
pub(crate) fn cuda_device(index: usize) -> Option<&'static CudaDevice> {
    CUDA_REG.devices().get(index).copied()
}

impl BackendReg for CudaReg {
    fn name(&self) -> &str {
        "CUDA"
    }
    fn device_count(&self) -> usize {
        self.devices().len()
    }
    fn device(&self, index: usize) -> Option<&'static dyn Device> {
        self.devices().get(index).map(|&d| d as &'static dyn Device)
    }
    fn extension(&self, name: &str) -> Option<Extension> {
        if name != extension::FEATURES {
            return None;
        }
        self.devices();
        Some(Extension::Features(features))
    }
}
