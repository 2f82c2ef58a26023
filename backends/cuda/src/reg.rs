//! The CUDA family: its devices, enumerated once, on first use.

use std::sync::OnceLock;

use tessera_core::registry::BackendReg;
use tessera_core::Device;

use crate::device::CudaDevice;
use crate::driver;

/// The GPUs the driver lists (none without a driver).
pub struct CudaReg {
    devices: OnceLock<Vec<&'static CudaDevice>>,
}

pub static CUDA_REG: CudaReg = CudaReg { devices: OnceLock::new() };

impl CudaReg {
    fn devices(&self) -> &[&'static CudaDevice] {
        self.devices.get_or_init(|| {
            let (contexts, why) = driver::contexts();
            if let Some(why) = why {
                log::info!("CUDA: {} device(s): {why}", contexts.len());
            }
            contexts.into_iter().map(CudaDevice::create).collect()
        })
    }
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
}
