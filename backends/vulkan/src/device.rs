//! A Vulkan device as tessera lists it: `Vulkan0`, `Vulkan1`, ...

use std::sync::Arc;

use ash::vk;
use tessera_core::registry::BackendReg;
use tessera_core::tensor::MAX_SRC;
use tessera_core::{
    Backend, BufferType, Device, DeviceCaps, DeviceType, Event, Graph, MemoryInfo, Op, Result, TensorId,
};

use crate::args::TensorDesc;
use crate::backend::VulkanBackend;
use crate::buffer::VulkanBufferType;
use crate::context::Context;
use crate::event::VulkanEvent;
use crate::instance;
use crate::memory::MemoryKind;
use crate::ops::{self, Operand};

/// One GPU (or CPU implementation) seen through Vulkan. Devices live for the process.
pub struct VulkanDevice {
    name: String,
    description: String,
    ctx: Arc<Context>,
    buffer_type: &'static VulkanBufferType,
    host: &'static VulkanBufferType,
}

impl VulkanDevice {
    pub(crate) fn create(ctx: Context) -> &'static VulkanDevice {
        let ctx = Arc::new(ctx);
        let name = ctx.name.clone();
        let kind = match ctx.physical.vk_type {
            vk::PhysicalDeviceType::CPU => " (CPU implementation)",
            _ => "",
        };
        let description = format!("{}{kind}", ctx.physical.name);
        Box::leak(Box::new(VulkanDevice {
            buffer_type: Box::leak(Box::new(VulkanBufferType::new(name.clone(), ctx.clone(), MemoryKind::Device))),
            host: Box::leak(Box::new(VulkanBufferType::new(format!("{name}_Host"), ctx.clone(), MemoryKind::Host))),
            name,
            description,
            ctx,
        }))
    }

    pub(crate) fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// The device's own memory, as its concrete type.
    pub fn vulkan_buffer_type(&self) -> &'static VulkanBufferType {
        self.buffer_type
    }

    pub(crate) fn name_string(&self) -> String {
        self.name.clone()
    }

    /// What the device offers the shaders (subgroup size, fp16, int8, cooperative matrices,
    /// integer dot products, timestamps).
    pub fn summary(&self) -> String {
        self.ctx.physical.summary()
    }

    /// The shader paths this device has.
    pub(crate) fn caps(&self) -> ops::Caps {
        ops::Caps {
            coopmat_f16: self.ctx.physical.coopmat_f16 && !coopmat_disabled(),
            coopmat2_f16: self.ctx.physical.coopmat2_f16 && !coopmat_disabled() && !coopmat2_disabled(),
            coopmat_bf16: self.ctx.physical.coopmat_bf16 && !coopmat_disabled(),
            coopmat2_bf16: self.ctx.physical.coopmat2_bf16 && !coopmat_disabled() && !coopmat2_disabled(),
            subgroup_arithmetic: self.ctx.physical.subgroup_arithmetic,
            integer_dot: self.ctx.physical.integer_dot && !integer_dot_disabled(),
        }
    }

    /// The subgroup size the device reports.
    pub fn subgroup_size(&self) -> u32 {
        self.ctx.physical.subgroup_size
    }
}

/// Whether the shaders run `node` of `graph` (addresses do not matter to that question).
pub(crate) fn supports(graph: &Graph, node: TensorId) -> bool {
    let Ok(t) = graph.tensor(node) else { return false };
    let operand = |id: TensorId| {
        let s = graph.tensor(id).ok()?;
        Some(Operand { desc: TensorDesc::from_parts(0, s.dtype(), s.ne(), s.nb())?, dtype: s.dtype() })
    };
    let mut srcs = [None; MAX_SRC];
    for (slot, id) in t.srcs() {
        match operand(id) {
            Some(o) => srcs[slot] = Some(o),
            None => return false,
        }
    }
    let Some(dst) = operand(node) else { return false };
    ops::plan(&ops::Caps::default(), t.op(), dst, &srcs).is_ok()
}

impl Device for VulkanDevice {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> &str {
        &self.description
    }
    /// Device-local heaps: free and total from `VK_EXT_memory_budget` where the driver has
    /// it, else the heaps' sizes.
    fn memory(&self) -> MemoryInfo {
        let vk = match instance::get() {
            Ok(vk) => vk,
            Err(_) => return MemoryInfo { free: 0, total: 0 },
        };
        let mut budget = vk::PhysicalDeviceMemoryBudgetPropertiesEXT::default();
        let mut props = vk::PhysicalDeviceMemoryProperties2::default();
        if self.ctx.physical.memory_budget {
            props = props.push_next(&mut budget);
        }
        // SAFETY: the physical device belongs to the instance; the chain lives through the call.
        unsafe { vk.instance.get_physical_device_memory_properties2(self.ctx.physical.handle, &mut props) };
        let p = props.memory_properties;
        let (mut free, mut total) = (0u64, 0u64);
        for (i, heap) in p.memory_heaps[..p.memory_heap_count as usize].iter().enumerate() {
            if heap.flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL) {
                total += heap.size;
                free += if self.ctx.physical.memory_budget {
                    budget.heap_budget[i].saturating_sub(budget.heap_usage[i])
                } else {
                    heap.size
                };
            }
        }
        let size = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
        MemoryInfo { free: size(free), total: size(total) }
    }
    fn device_type(&self) -> DeviceType {
        self.ctx.physical.device_type
    }
    fn caps(&self) -> DeviceCaps {
        DeviceCaps {
            async_compute: true,
            host_buffer: true,
            buffer_from_host_ptr: false,
            events: true,
            prompt_flash_attn: false,
        }
    }
    fn pci_bus_id(&self) -> Option<&str> {
        self.ctx.physical.pci_bus_id.as_deref()
    }
    fn reg(&self) -> &'static dyn BackendReg {
        &crate::reg::VULKAN_REG
    }
    fn supports_op(&self, graph: &Graph, node: TensorId) -> bool {
        match graph.tensor(node) {
            Ok(t) if t.op() == Op::None || t.op().is_view() => true,
            Ok(_) => supports(graph, node),
            Err(_) => false,
        }
    }
    fn supports_buffer_type(&self, buffer_type: &dyn BufferType) -> bool {
        tessera_core::buffer::same_buffer_type(buffer_type, self.buffer_type)
    }
    fn buffer_type(&self) -> &'static dyn BufferType {
        self.buffer_type
    }
    fn host_buffer_type(&self) -> Option<&'static dyn BufferType> {
        Some(self.host)
    }
    fn init_backend(&'static self) -> Result<Box<dyn Backend>> {
        Ok(Box::new(VulkanBackend::new(self)?))
    }
    fn new_event(&self) -> Result<Option<Box<dyn Event>>> {
        Ok(VulkanEvent::new(&self.ctx, false)?.map(|e| Box::new(e) as Box<dyn Event>))
    }
    fn new_timing_event(&self) -> Result<Option<Box<dyn Event>>> {
        Ok(VulkanEvent::new(&self.ctx, true)?.map(|e| Box::new(e) as Box<dyn Event>))
    }
}

/// `TESSERA_VULKAN_COOPMAT=0` keeps MUL_MAT off cooperative matrices, `=khr` on the
/// subgroup-scope ones of `VK_KHR_cooperative_matrix` (to compare paths).
fn coopmat_disabled() -> bool {
    std::env::var("TESSERA_VULKAN_COOPMAT").is_ok_and(|v| v.trim() == "0")
}

fn coopmat2_disabled() -> bool {
    std::env::var("TESSERA_VULKAN_COOPMAT").is_ok_and(|v| v.trim() == "khr")
}

/// `TESSERA_VULKAN_INTEGER_DOT=0`: q8_0 and q4_0 matrix-vector products dequantize to f32
/// instead of taking packed 8-bit dot products (to compare the two, or test the fallback).
fn integer_dot_disabled() -> bool {
    std::env::var("TESSERA_VULKAN_INTEGER_DOT").is_ok_and(|v| v.trim() == "0")
}
