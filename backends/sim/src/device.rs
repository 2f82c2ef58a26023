//! The simulated device and its configuration.

use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};

use tessera_core::registry::BackendReg;
use tessera_core::{
    Backend, BufferType, DType, Device, DeviceCaps, DeviceType, Event, Graph, MemoryInfo, Op, Result, TensorId,
};

use crate::backend::SimBackend;
use crate::buffer::{SimBufferType, SimHostBufferType};
use crate::event::SimEvent;

/// What a simulated device can do.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Device name ("SIM0").
    pub name: String,
    /// Ops it cannot run, by name ("SOFT_MAX").
    pub unsupported_ops: Vec<&'static str>,
    /// Types it cannot compute with (as a result or an operand).
    pub unsupported_types: Vec<DType>,
    /// Largest single buffer.
    pub max_buffer: usize,
    /// Whether it has events (for pipeline parallelism).
    pub events: bool,
    /// Offers a pinned host buffer type (`host_buffer_type`).
    pub pinned_host: bool,
    /// Ask for MUL_MAT with at least this many columns even when its weights are in host
    /// memory (`op_offload`); `None` never asks.
    pub offload_min_batch: Option<usize>,
}

impl SimConfig {
    /// A device that runs every op and type, with events and no buffer cap.
    pub fn new(name: &str) -> SimConfig {
        SimConfig {
            name: name.into(),
            unsupported_ops: Vec::new(),
            unsupported_types: Vec::new(),
            max_buffer: usize::MAX,
            events: true,
            pinned_host: false,
            offload_min_batch: None,
        }
    }
}

/// A simulated accelerator. Devices are created at run time and live for the process.
pub struct SimDevice {
    name: String,
    config: spin::Mutex<SimConfig>,
    buffer_type: &'static SimBufferType,
    host_buffer_type: &'static SimHostBufferType,
    prepared: AtomicU64,
    updated: AtomicU64,
}

/// How often the device's backends prepared and updated split programs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProgramCounts {
    pub prepared: u64,
    pub updated: u64,
}

impl SimDevice {
    /// Creates a device; it is leaked, like every enumerated device, to be `'static`.
    pub fn create(config: SimConfig) -> &'static SimDevice {
        let buffer_type = Box::leak(Box::new(SimBufferType::new(config.name.clone(), config.max_buffer)));
        let host_buffer_type = Box::leak(Box::new(SimHostBufferType::new(alloc::format!("{}_Host", config.name))));
        Box::leak(Box::new(SimDevice {
            name: config.name.clone(),
            config: spin::Mutex::new(config),
            buffer_type,
            host_buffer_type,
            prepared: AtomicU64::new(0),
            updated: AtomicU64::new(0),
        }))
    }

    /// The device's current configuration.
    pub fn config(&self) -> SimConfig {
        self.config.lock().clone()
    }

    /// Changes what the device supports (its name stays): lets a fuzzer reuse a few devices
    /// instead of leaking a new one per case. Buffers already allocated keep their size.
    pub fn reconfigure(&self, mut config: SimConfig) {
        config.name = self.name.clone();
        self.buffer_type.set_max_size(config.max_buffer);
        *self.config.lock() = config;
    }

    /// The simulated pinned host memory (offered as `host_buffer_type` when configured).
    pub fn pinned_host_type(&self) -> &'static SimHostBufferType {
        self.host_buffer_type
    }

    /// How many split programs this device's backends have prepared and updated.
    pub fn program_counts(&self) -> ProgramCounts {
        ProgramCounts { prepared: self.prepared.load(Ordering::Relaxed), updated: self.updated.load(Ordering::Relaxed) }
    }

    pub(crate) fn count_prepare(&self) {
        self.prepared.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_update(&self) {
        self.updated.fetch_add(1, Ordering::Relaxed);
    }
}

/// The simulated family. Its devices are made with [`SimDevice::create`], not enumerated.
pub struct SimReg;

pub static SIM_REG: SimReg = SimReg;

impl BackendReg for SimReg {
    fn name(&self) -> &str {
        "SIM"
    }
    fn device_count(&self) -> usize {
        0
    }
    fn device(&self, _index: usize) -> Option<&'static dyn Device> {
        None
    }
}

impl Device for SimDevice {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> &str {
        "simulated accelerator"
    }
    fn memory(&self) -> MemoryInfo {
        MemoryInfo::default()
    }
    fn device_type(&self) -> DeviceType {
        DeviceType::Gpu
    }
    fn caps(&self) -> DeviceCaps {
        let config = self.config.lock();
        DeviceCaps {
            async_compute: true,
            host_buffer: config.pinned_host,
            buffer_from_host_ptr: false,
            events: config.events,
            prompt_flash_attn: false,
        }
    }
    fn reg(&self) -> &'static dyn BackendReg {
        &SIM_REG
    }
    fn supports_op(&self, graph: &Graph, node: TensorId) -> bool {
        let Ok(t) = graph.tensor(node) else { return false };
        if t.op() == Op::None || t.op().is_view() {
            return true;
        }
        let config = self.config.lock();
        let type_ok = |id: TensorId| graph.tensor(id).is_ok_and(|s| !config.unsupported_types.contains(&s.dtype()));
        !config.unsupported_ops.contains(&t.op().name()) && type_ok(node) && t.srcs().all(|(_, s)| type_ok(s))
    }
    fn supports_buffer_type(&self, buffer_type: &dyn BufferType) -> bool {
        tessera_core::buffer::same_buffer_type(buffer_type, self.buffer_type)
    }
    fn offload_op(&self, graph: &Graph, node: TensorId) -> bool {
        let Some(min) = self.config.lock().offload_min_batch else { return false };
        graph.tensor(node).is_ok_and(|t| t.op() == Op::MulMat && t.ne()[1] >= min)
    }
    fn buffer_type(&self) -> &'static dyn BufferType {
        self.buffer_type
    }
    fn host_buffer_type(&self) -> Option<&'static dyn BufferType> {
        self.config.lock().pinned_host.then_some(self.host_buffer_type as &'static dyn BufferType)
    }
    fn init_backend(&'static self) -> Result<Box<dyn Backend>> {
        Ok(Box::new(SimBackend::new(self)))
    }
    fn new_event(&self) -> Result<Option<Box<dyn Event>>> {
        Ok(self.config.lock().events.then(|| Box::new(SimEvent::new()) as Box<dyn Event>))
    }
}
