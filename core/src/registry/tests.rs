//! Device lookup and request resolution over made-up families.
#![allow(clippy::unwrap_used)]

use alloc::boxed::Box;
use alloc::string::ToString;
use alloc::vec::Vec;

use super::*;
use crate::buffer::BufferType;
use crate::device::{DeviceCaps, MemoryInfo};
use crate::error::Error;
use crate::graph::Graph;
use crate::host_buffer::HOST_BUFFER_TYPE;
use crate::tensor::TensorId;

struct TestDevice {
    name: &'static str,
    device_type: DeviceType,
    reg: &'static TestReg,
    /// Computes in host memory (the CPU backend) or in memory of its own (lavapipe).
    host_memory: bool,
}

/// Memory of a device that is not the host's.
struct DeviceMemory;

impl BufferType for DeviceMemory {
    fn name(&self) -> &str {
        "device memory"
    }
    fn alignment(&self) -> usize {
        256
    }
    fn is_host(&self) -> bool {
        false
    }
    fn alloc_buffer(&'static self, _size: usize) -> Result<alloc::sync::Arc<dyn crate::buffer::Buffer>> {
        Err(Error::Backend { backend: "test".into(), message: "test memory cannot be allocated".into() })
    }
}

struct TestReg {
    name: &'static str,
    devices: &'static [TestDevice],
}

impl BackendReg for TestReg {
    fn name(&self) -> &str {
        self.name
    }
    fn device_count(&self) -> usize {
        self.devices.len()
    }
    fn device(&self, index: usize) -> Option<&'static dyn Device> {
        self.devices.get(index).map(|d| d as &'static dyn Device)
    }
}

impl Device for TestDevice {
    fn name(&self) -> &str {
        self.name
    }
    fn description(&self) -> &str {
        "a test device"
    }
    fn memory(&self) -> MemoryInfo {
        MemoryInfo::default()
    }
    fn device_type(&self) -> DeviceType {
        self.device_type
    }
    fn caps(&self) -> DeviceCaps {
        DeviceCaps::default()
    }
    fn reg(&self) -> &'static dyn BackendReg {
        self.reg
    }
    fn supports_op(&self, _graph: &Graph, _node: TensorId) -> bool {
        false
    }
    fn supports_buffer_type(&self, buffer_type: &dyn BufferType) -> bool {
        buffer_type.is_host()
    }
    fn buffer_type(&self) -> &'static dyn BufferType {
        if self.host_memory {
            &HOST_BUFFER_TYPE
        } else {
            &DeviceMemory
        }
    }
    fn init_backend(&'static self) -> Result<Box<dyn Backend>> {
        Err(Error::Backend { backend: self.name.into(), message: "a test device cannot compute".into() })
    }
}

const fn device(name: &'static str, device_type: DeviceType, reg: &'static TestReg) -> TestDevice {
    TestDevice { name, device_type, reg, host_memory: true }
}

static CUDA: TestReg = TestReg {
    name: "CUDA",
    devices: &[device("CUDA0", DeviceType::Gpu, &CUDA), device("CUDA1", DeviceType::Gpu, &CUDA)],
};
static VULKAN: TestReg = TestReg {
    name: "Vulkan",
    devices: &[device("Vulkan0", DeviceType::IGpu, &VULKAN), device("Vulkan1", DeviceType::Gpu, &VULKAN)],
};
static CPU: TestReg = TestReg { name: "CPU", devices: &[device("CPU", DeviceType::Cpu, &CPU)] };
/// A CPU implementation of a GPU API (Mesa's lavapipe): a CPU-type device with memory of its
/// own.
static LAVAPIPE: TestReg = TestReg {
    name: "Vulkan",
    devices: &[TestDevice { name: "Vulkan0", device_type: DeviceType::Cpu, reg: &LAVAPIPE, host_memory: false }],
};
static BLAS: TestReg = TestReg { name: "BLAS", devices: &[device("BLAS", DeviceType::Accel, &BLAS)] };

static ALL: &[&'static dyn BackendReg] = &[&CUDA, &VULKAN, &BLAS, &CPU];

fn name(d: Result<&'static dyn Device>) -> Result<&'static str, alloc::string::String> {
    d.map(|d| d.name()).map_err(|e| e.to_string())
}

#[test]
fn requests_resolve_to_the_best_a_gpu_a_family_or_a_name() {
    let r = Registry::new(ALL);
    for best in ["", "  ", "auto", "AUTO", " default "] {
        assert_eq!(name(r.resolve(best)), Ok("CUDA0"), "{best:?}");
    }
    assert_eq!(name(r.resolve("gpu")), Ok("CUDA0"));
    assert_eq!(name(r.resolve("vulkan")), Ok("Vulkan0"), "a family is its first device");
    assert_eq!(name(r.resolve("Vulkan1")), Ok("Vulkan1"));
    assert_eq!(name(r.resolve("cuda1")), Ok("CUDA1"));
    assert_eq!(name(r.resolve("blas")), Ok("BLAS"), "an accelerator by name");
    assert_eq!(
        name(r.resolve("cuda9")),
        Err("unknown device 'cuda9'; devices: CUDA0, CUDA1, Vulkan0, Vulkan1, BLAS, CPU".into())
    );
    assert_eq!(r.device_names(), "CUDA0, CUDA1, Vulkan0, Vulkan1, BLAS, CPU");
}

#[test]
fn the_best_device_is_a_gpu_then_an_integrated_gpu_then_the_cpu() {
    let cpu_igpu: &[&'static dyn BackendReg] = &[&CPU, &BLAS, &VULKAN];
    let r = Registry::new(cpu_igpu);
    assert_eq!(r.best_device().map(|d| d.name()), Some("Vulkan1"), "a GPU even when listed after an IGPU");
    let d: Vec<&'static dyn Device> = Registry::new(&[&CPU, &BLAS]).devices().collect();
    assert_eq!(best_device(d.iter().copied()).map(|d| d.name()), Some("CPU"));
    assert_eq!(first_gpu(d.iter().copied()).map(|d| d.name()), None);
    assert_eq!(device_by_type(d.iter().copied(), DeviceType::Accel).map(|d| d.name()), Some("BLAS"));
    let igpu_and_cpu = [&CPU.devices[0] as &'static dyn Device, &VULKAN.devices[0]];
    assert_eq!(best_device(igpu_and_cpu).map(|d| d.name()), Some("Vulkan0"));
    assert_eq!(first_gpu(igpu_and_cpu).map(|d| d.name()), Some("Vulkan0"));
}

#[test]
fn the_cpu_backend_is_best_over_a_cpu_implementation_of_a_gpu_api() {
    static BOTH: &[&'static dyn BackendReg] = &[&LAVAPIPE, &CPU];
    static ALONE: &[&'static dyn BackendReg] = &[&LAVAPIPE];
    let r = Registry::new(BOTH);
    assert_eq!(r.best_device().map(|d| d.name()), Some("CPU"));
    assert_eq!(name(r.resolve("vulkan")), Ok("Vulkan0"), "still there when asked for");
    assert_eq!(name(r.resolve("gpu")), Err("no GPU found for 'gpu'; devices: Vulkan0, CPU".into()));
    let alone = Registry::new(ALONE);
    assert_eq!(alone.best_device().map(|d| d.name()), Some("Vulkan0"), "when nothing else is there");
}

#[test]
fn requests_that_find_nothing_say_what_exists() {
    let only_blas: &[&'static dyn BackendReg] = &[&BLAS];
    let r = Registry::new(only_blas);
    assert_eq!(name(r.resolve("auto")), Err("no device found for 'auto'; devices: BLAS".into()));
    assert_eq!(name(r.resolve("")), Err("no device found for 'auto'; devices: BLAS".into()));
    assert_eq!(name(r.resolve("GPU")), Err("no GPU found for 'GPU'; devices: BLAS".into()));
    let empty = Registry::new(&[]);
    assert_eq!(name(empty.resolve("default")), Err("no device found for 'default'; devices: none".into()));
    assert_eq!(
        empty.init_best().err().map(|e| e.to_string()).as_deref(),
        Some("no device found for 'auto'; devices: none")
    );
    assert_eq!(
        Registry::new(ALL).device_by_name("cpu0").err(),
        Some(Error::UnknownDevice {
            name: "cpu0".into(),
            available: "CUDA0, CUDA1, Vulkan0, Vulkan1, BLAS, CPU".into()
        })
    );
    assert_eq!(Registry::new(ALL).device_by_family("vulkan").map(|d| d.name()), Some("Vulkan0"));
    assert_eq!(Registry::new(ALL).reg_by_name("cuda").map(|r| r.name()), Some("CUDA"));
}
