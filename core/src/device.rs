//! Devices: a piece of hardware that computes, with its memory and capabilities.

use alloc::boxed::Box;
use alloc::sync::Arc;
use core::any::Any;
use core::ptr::NonNull;

use crate::backend::{Backend, Event};
use crate::buffer::{Buffer, BufferType};
use crate::error::{Error, Result};
use crate::graph::Graph;
use crate::registry::BackendReg;
use crate::tensor::TensorId;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeviceType {
    /// The host processor, with system memory.
    Cpu,
    /// A GPU with dedicated memory.
    Gpu,
    /// A GPU that shares host memory.
    IGpu,
    /// An accelerator used together with the CPU (BLAS, AMX).
    Accel,
}

impl DeviceType {
    pub const fn name(self) -> &'static str {
        match self {
            DeviceType::Cpu => "CPU",
            DeviceType::Gpu => "GPU",
            DeviceType::IGpu => "IGPU",
            DeviceType::Accel => "ACCEL",
        }
    }
}

/// Memory of a device in bytes; 0 means unknown.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryInfo {
    pub free: usize,
    pub total: usize,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceCaps {
    /// Tensor transfers and compute can run asynchronously.
    pub async_compute: bool,
    /// Offers a pinned host buffer type for faster transfers.
    pub host_buffer: bool,
    /// Can wrap host memory (an mmap) as a buffer without copying.
    pub buffer_from_host_ptr: bool,
    /// Supports events for synchronisation between backends.
    pub events: bool,
    /// Computes FLASH_ATTN over many query rows faster than the same attention as products, a
    /// soft-max and the copies around them, at least for batches of short sequences (an
    /// encoder's), so the BERT graph uses it there. (The Llama generator measures its own
    /// choice: its causal prompts run faster as products on CUDA.)
    pub prompt_flash_attn: bool,
}

/// A device of a backend family ("CPU", "CUDA0", "Vulkan1").
///
/// Devices are `'static`: a family enumerates them once and keeps them for the process.
pub trait Device: Send + Sync {
    /// Short unique name ("CPU", "CUDA0").
    fn name(&self) -> &str;
    /// What the hardware is ("AMD EPYC 9B45", "NVIDIA H100 80GB HBM3").
    fn description(&self) -> &str;
    fn memory(&self) -> MemoryInfo;
    fn device_type(&self) -> DeviceType;
    /// Whether this is the host processor computing in host memory: the CPU backend (or a
    /// plugin of it), which the scheduler needs last. A CPU implementation of a GPU API
    /// (Mesa's lavapipe) is a CPU-type device with memory of its own, and is not.
    fn is_host_cpu(&self) -> bool {
        self.device_type() == DeviceType::Cpu && self.buffer_type().is_host()
    }
    fn caps(&self) -> DeviceCaps;
    /// Lower-case PCI bus id ("0000:65:00.0"), so one GPU seen through two APIs is recognised.
    fn pci_bus_id(&self) -> Option<&str> {
        None
    }
    /// The family this device belongs to.
    fn reg(&self) -> &'static dyn BackendReg;
    /// Whether this device can compute `node` of `graph` (its op, types and shapes).
    fn supports_op(&self, graph: &Graph, node: TensorId) -> bool;
    /// Whether this device can read tensors that live in buffers of `buffer_type`.
    fn supports_buffer_type(&self, buffer_type: &dyn BufferType) -> bool;
    /// Whether this device wants to run `node` even though its weights are in host memory
    /// (worth it for large batches).
    fn offload_op(&self, _graph: &Graph, _node: TensorId) -> bool {
        false
    }
    /// The device's own memory.
    fn buffer_type(&self) -> &'static dyn BufferType;
    /// Pinned host memory for fast transfers, if the device has it.
    fn host_buffer_type(&self) -> Option<&'static dyn BufferType> {
        None
    }
    /// Makes `size` bytes of caller memory at `ptr` (an mmap'd model file) a buffer this
    /// device computes on without a copy, where it can (`caps().buffer_from_host_ptr`);
    /// `owner` keeps the memory alive and is dropped with the buffer. Devices that cannot
    /// import host memory say so with an error (the caller then copies).
    ///
    /// # Safety
    /// `ptr` must be valid for reads of `size` bytes for as long as `owner` lives, and nothing
    /// may write to it meanwhile.
    unsafe fn buffer_from_host_ptr(
        &'static self,
        _ptr: NonNull<u8>,
        _size: usize,
        _owner: Box<dyn Any + Send + Sync>,
    ) -> Result<Arc<dyn Buffer>> {
        Err(Error::Backend {
            backend: self.name().into(),
            message: "this device cannot use host memory in place (no buffer_from_host_ptr)".into(),
        })
    }
    /// Whether this device's backends copy from the memory of `from` (another device)
    /// directly, peer to peer over NVLink or PCIe, rather than through host memory; plans
    /// print it for copies between devices.
    fn copies_peer_to_peer(&self, _from: &dyn Device) -> bool {
        false
    }
    /// A new stream on this device.
    fn init_backend(&'static self) -> Result<Box<dyn Backend>>;
    /// A new event, if the device supports events.
    fn new_event(&self) -> Result<Option<Box<dyn Event>>> {
        Ok(None)
    }
    /// A new event that also measures device time ([`Event::elapsed_since`]), if the device
    /// can; recording one costs more than a plain event, so it is for benchmarks and
    /// profiles, not for ordering work.
    fn new_timing_event(&self) -> Result<Option<Box<dyn Event>>> {
        Ok(None)
    }
}
