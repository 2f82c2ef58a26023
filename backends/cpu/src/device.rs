//! The CPU device.

use alloc::boxed::Box;
use alloc::sync::Arc;
use core::any::Any;
use core::ptr::NonNull;

use tessera_core::host_buffer::{HostBuffer, HOST_BUFFER_TYPE};
use tessera_core::registry::BackendReg;
use tessera_core::{
    Backend, Buffer, BufferType, Device, DeviceCaps, DeviceType, Graph, MemoryInfo, Op, Result, TensorId,
};

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
        DeviceCaps { buffer_from_host_ptr: true, ..DeviceCaps::default() }
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
    /// The CPU computes on host memory where it is: the buffer wraps it, read-only.
    unsafe fn buffer_from_host_ptr(
        &'static self,
        ptr: NonNull<u8>,
        size: usize,
        owner: Box<dyn Any + Send + Sync>,
    ) -> Result<Arc<dyn Buffer>> {
        // SAFETY: the caller promises `ptr` is valid for reads of `size` bytes while `owner`
        // lives and unwritten meanwhile; the buffer is read-only and keeps `owner`.
        let buffer = unsafe { HostBuffer::from_raw(ptr, size, false, owner) };
        let buffer: Arc<dyn Buffer> = tessera_core::fallible::try_arc(buffer)?;
        Ok(buffer)
    }
    fn init_backend(&'static self) -> Result<Box<dyn Backend>> {
        Ok(Box::new(CpuBackend::new()))
    }
}
