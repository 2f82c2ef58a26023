//! The CPU device.

use alloc::boxed::Box;

use tessera_core::host_buffer::HOST_BUFFER_TYPE;
use tessera_core::registry::BackendReg;
use tessera_core::{Backend, BufferType, Device, DeviceCaps, DeviceType, Graph, MemoryInfo, Op, Result, TensorId};

use crate::backend::CpuBackend;

/// The host processor.
pub struct CpuDevice;

/// The one CPU device.
pub static CPU_DEVICE: CpuDevice = CpuDevice;

impl Device for CpuDevice {
    fn name(&self) -> &str {
        "CPU"
    }
    fn description(&self) -> &str {
        crate::system::cpu_description()
    }
    fn memory(&self) -> MemoryInfo {
        crate::system::memory()
    }
    fn device_type(&self) -> DeviceType {
        DeviceType::Cpu
    }
    fn caps(&self) -> DeviceCaps {
        DeviceCaps { async_compute: false, host_buffer: false, buffer_from_host_ptr: true, events: false }
    }
    fn reg(&self) -> &'static dyn BackendReg {
        &crate::reg::CPU_REG
    }
    /// Every op and type combination the graph builder accepts has a reference kernel.
    fn supports_op(&self, graph: &Graph, node: TensorId) -> bool {
        graph.tensor(node).is_ok_and(|t| t.op() != Op::None)
    }
    fn supports_buffer_type(&self, buffer_type: &dyn BufferType) -> bool {
        buffer_type.is_host()
    }
    fn buffer_type(&self) -> &'static dyn BufferType {
        &HOST_BUFFER_TYPE
    }
    fn init_backend(&'static self) -> Result<Box<dyn Backend>> {
        Ok(Box::new(CpuBackend::new()))
    }
}
