//! What a physical device offers, and whether tessera can use it.
//!
//! tessera's shaders address memory through buffer device addresses with 64-bit integers and
//! read 8- and 16-bit values from storage buffers; its programs order work with timeline
//! semaphores. A device without one of these is skipped with a log line naming the missing
//! feature.

use std::ffi::CStr;

use ash::{ext, khr, vk};

use crate::bfloat16;
use crate::coopmat2;
use crate::instance::Vk;
use tessera_core::DeviceType;

/// The workgroup size, the smallest block (m, n, k) and the longest side of a matrix of
/// `mul_mat_cm2.comp`.
const CM2_INVOCATIONS: u32 = 256;
const CM2_TILE: [u32; 3] = [128, 128, 32];
const CM2_SIDE: u32 = 256;

/// A physical device tessera can run on, with what it was found to offer.
pub(crate) struct Physical {
    pub handle: vk::PhysicalDevice,
    pub name: String,
    pub device_type: DeviceType,
    /// Vulkan's own type, to tell a CPU implementation (lavapipe) apart in descriptions.
    pub vk_type: vk::PhysicalDeviceType,
    pub queue_family: u32,
    pub pci_bus_id: Option<String>,
    pub memory_budget: bool,
    pub max_allocation: u64,
    pub subgroup_size: u32,
    /// Subgroup reductions (add, max) in compute shaders.
    pub subgroup_arithmetic: bool,
    pub float16: bool,
    /// Nanoseconds per timestamp tick, where the compute queue writes timestamps.
    pub timestamp_period: Option<f32>,
    /// 8-bit integer arithmetic in shaders.
    pub int8: bool,
    /// `VK_KHR_cooperative_matrix`: tensor-core tiles in shaders.
    pub cooperative_matrix: bool,
    /// `VK_KHR_shader_integer_dot_product`, and whether packed signed 8-bit dot products are
    /// accelerated (an instruction, not emulated).
    pub integer_dot: bool,
    pub integer_dot_accelerated: bool,
    /// The Vulkan memory model (the cooperative-matrix shaders are written against it).
    pub memory_model: bool,
    /// 16x16x16 f16 tiles accumulating in f32 over subgroups of 32: the subgroup-scope
    /// MUL_MAT shader (`mul_mat_coopmat.comp`) runs here.
    pub coopmat_f16: bool,
    /// `VK_NV_cooperative_matrix2` with workgroup-scope f16 products over the tiles of
    /// `mul_mat_cm2.comp`: the MUL_MAT shader whose staging the driver schedules runs here.
    pub coopmat2_f16: bool,
    /// As `coopmat_f16` and `coopmat2_f16` for bf16 (`VK_KHR_shader_bfloat16`, whose
    /// features are then enabled, with 16-bit integers for the subgroup-scope shader).
    pub coopmat_bf16: bool,
    pub coopmat2_bf16: bool,
}

impl Physical {
    /// What the device offers that the shaders can use, for the family's `features`.
    pub(crate) fn summary(&self) -> String {
        let yes = |b: bool| if b { "yes" } else { "no" };
        format!(
            "{}: subgroup {}, fp16 {}, int8 {}, cooperative matrix {}{}, int8 dot product {}{}, timestamps {}",
            self.name,
            self.subgroup_size,
            yes(self.float16),
            yes(self.int8),
            yes(self.cooperative_matrix),
            mul_mat_paths(self),
            yes(self.integer_dot),
            if self.integer_dot_accelerated { " (accelerated)" } else { "" },
            yes(self.timestamp_period.is_some()),
        )
    }
}

/// The tensor-core MUL_MAT paths of a device, for its summary.
fn mul_mat_paths(p: &Physical) -> String {
    let path = |workgroup: bool, subgroup: bool, t: &str| {
        if workgroup {
            Some(format!("{t} workgroup-scope MUL_MAT (NV cooperative matrix 2)"))
        } else if subgroup {
            Some(format!("{t} 16x16x16 MUL_MAT"))
        } else {
            None
        }
    };
    let paths: Vec<String> =
        [path(p.coopmat2_f16, p.coopmat_f16, "f16"), path(p.coopmat2_bf16, p.coopmat_bf16, "bf16")]
            .into_iter()
            .flatten()
            .collect();
    if paths.is_empty() {
        String::new()
    } else {
        format!(" ({})", paths.join(", "))
    }
}

/// Whether `name` is among `extensions`.
fn has(extensions: &[vk::ExtensionProperties], name: &CStr) -> bool {
    extensions.iter().any(|e| e.extension_name_as_c_str().is_ok_and(|n| n == name))
}

/// `device` as tessera would use it, or why it cannot.
pub(crate) fn inspect(vk: &Vk, device: vk::PhysicalDevice) -> Result<Physical, String> {
    let instance = &vk.instance;
    // SAFETY: `device` was enumerated from this instance, which is alive.
    let props = unsafe { instance.get_physical_device_properties(device) };
    let name = props.device_name_as_c_str().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    if props.api_version < vk::API_VERSION_1_2 {
        return Err(format!("{name}: Vulkan 1.2 is needed"));
    }
    // SAFETY: as above.
    let extensions = unsafe { instance.enumerate_device_extension_properties(device) }.unwrap_or_default();

    let has_coopmat = has(&extensions, khr::cooperative_matrix::NAME);
    let has_dot = has(&extensions, khr::shader_integer_dot_product::NAME);
    let has_coopmat2 = has_coopmat && has(&extensions, coopmat2::NAME);
    let has_bf16 = has_coopmat && has(&extensions, bfloat16::NAME);
    let mut f11 = vk::PhysicalDeviceVulkan11Features::default();
    let mut f12 = vk::PhysicalDeviceVulkan12Features::default();
    let mut coopmat = vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default();
    let mut dot = vk::PhysicalDeviceShaderIntegerDotProductFeatures::default();
    let mut coopmat2_features = coopmat2::Features::default();
    let mut bf16_features = bfloat16::Features::default();
    let mut features = vk::PhysicalDeviceFeatures2::default().push_next(&mut f11).push_next(&mut f12);
    if has_coopmat {
        features = features.push_next(&mut coopmat);
    }
    if has_dot {
        features = features.push_next(&mut dot);
    }
    if has_coopmat2 {
        features = features.push_next(&mut coopmat2_features);
    }
    if has_bf16 {
        features = features.push_next(&mut bf16_features);
    }
    // SAFETY: as above; the chained structures live through the call, and extension
    // structures are chained only where the extension exists.
    unsafe { instance.get_physical_device_features2(device, &mut features) };
    let core = features.features;
    let needs = [
        (f12.buffer_device_address, "bufferDeviceAddress"),
        (f12.timeline_semaphore, "timelineSemaphore"),
        (f12.storage_buffer8_bit_access, "storageBuffer8BitAccess"),
        (f11.storage_buffer16_bit_access, "storageBuffer16BitAccess"),
        (core.shader_int64, "shaderInt64"),
    ];
    if let Some((_, missing)) = needs.iter().find(|(on, _)| *on == vk::FALSE) {
        return Err(format!("{name}: the feature {missing} is missing"));
    }
    let float16 = f12.shader_float16 == vk::TRUE;

    // SAFETY: as above.
    let families = unsafe { instance.get_physical_device_queue_family_properties(device) };
    // A compute queue; a family without graphics (an async compute queue) when there is one.
    let compute = |f: &vk::QueueFamilyProperties| f.queue_flags.contains(vk::QueueFlags::COMPUTE);
    let queue_family = families
        .iter()
        .position(|f| compute(f) && !f.queue_flags.contains(vk::QueueFlags::GRAPHICS))
        .or_else(|| families.iter().position(compute))
        .ok_or_else(|| format!("{name}: no compute queue"))?;

    let pci = has(&extensions, ext::pci_bus_info::NAME);
    let mut pci_info = vk::PhysicalDevicePCIBusInfoPropertiesEXT::default();
    let mut maintenance3 = vk::PhysicalDeviceMaintenance3Properties::default();
    let mut subgroup = vk::PhysicalDeviceSubgroupProperties::default();
    let mut dot_props = vk::PhysicalDeviceShaderIntegerDotProductProperties::default();
    let mut coopmat2_props = coopmat2::Properties::default();
    let mut props2 = vk::PhysicalDeviceProperties2::default().push_next(&mut maintenance3).push_next(&mut subgroup);
    if has_coopmat2 {
        props2 = props2.push_next(&mut coopmat2_props);
    }
    if has_dot {
        props2 = props2.push_next(&mut dot_props);
    }
    if pci {
        props2 = props2.push_next(&mut pci_info);
    }
    // SAFETY: as above; the chained structures live through the call, and extension ones are
    // chained only where the extension exists.
    unsafe { instance.get_physical_device_properties2(device, &mut props2) };
    let pci_bus_id = pci.then(|| {
        format!(
            "{:04x}:{:02x}:{:02x}.{:x}",
            pci_info.pci_domain, pci_info.pci_bus, pci_info.pci_device, pci_info.pci_function
        )
    });

    let device_type = match props.device_type {
        vk::PhysicalDeviceType::DISCRETE_GPU => DeviceType::Gpu,
        vk::PhysicalDeviceType::INTEGRATED_GPU => DeviceType::IGpu,
        vk::PhysicalDeviceType::CPU => DeviceType::Cpu,
        _ => DeviceType::Accel,
    };
    let coopmat_f16 = has_coopmat
        && coopmat.cooperative_matrix == vk::TRUE
        && f12.vulkan_memory_model == vk::TRUE
        && f12.shader_float16 == vk::TRUE
        && subgroup.subgroup_size == 32;
    // The workgroup-scope shaders' SPIR-V 1.6 needs Vulkan 1.3 of both the instance and the
    // device.
    let coopmat2 = coopmat_f16
        && vk.api_version >= vk::API_VERSION_1_3
        && props.api_version >= vk::API_VERSION_1_3
        && has_coopmat2
        && coopmat2_features.has_mul_mat()
        && coopmat2_props.max_workgroup_size >= CM2_INVOCATIONS
        && coopmat2_props.max_dimension >= CM2_SIDE;
    let bf16 = coopmat_f16 && has_bf16 && bf16_features.has_mul_mat();
    let f16 = vk::ComponentTypeKHR::FLOAT16;
    Ok(Physical {
        handle: device,
        name,
        device_type,
        vk_type: props.device_type,
        queue_family: u32::try_from(queue_family).unwrap_or(0),
        pci_bus_id,
        memory_budget: has(&extensions, ext::memory_budget::NAME),
        max_allocation: maintenance3.max_memory_allocation_size,
        subgroup_size: subgroup.subgroup_size,
        subgroup_arithmetic: subgroup.supported_operations.contains(vk::SubgroupFeatureFlags::ARITHMETIC)
            && subgroup.supported_stages.contains(vk::ShaderStageFlags::COMPUTE),
        float16,
        timestamp_period: (families[queue_family].timestamp_valid_bits > 0).then_some(props.limits.timestamp_period),
        int8: f12.shader_int8 == vk::TRUE,
        cooperative_matrix: has_coopmat && coopmat.cooperative_matrix == vk::TRUE,
        integer_dot: has_dot && dot.shader_integer_dot_product == vk::TRUE,
        integer_dot_accelerated: dot_props.integer_dot_product4x8_bit_packed_signed_accelerated == vk::TRUE,
        memory_model: f12.vulkan_memory_model == vk::TRUE,
        coopmat_f16: coopmat_f16 && has_tiles(vk, device, f16),
        coopmat2_f16: coopmat2 && coopmat2::has_workgroup_tiles(vk, device, f16, CM2_INVOCATIONS, CM2_TILE),
        coopmat_bf16: bf16 && core.shader_int16 == vk::TRUE && has_tiles(vk, device, bfloat16::COMPONENT),
        coopmat2_bf16: bf16
            && coopmat2
            && coopmat2::has_workgroup_tiles(vk, device, bfloat16::COMPONENT, CM2_INVOCATIONS, CM2_TILE),
    })
}

/// Whether the device multiplies 16x16x16 tiles of `ab` (f16 or bf16) into f32 at subgroup
/// scope.
fn has_tiles(vk: &Vk, device: vk::PhysicalDevice, ab: vk::ComponentTypeKHR) -> bool {
    let coopmat = khr::cooperative_matrix::Instance::new(&vk.entry, &vk.instance);
    // SAFETY: the device has the extension (checked by the caller) and belongs to the instance.
    let shapes = unsafe { coopmat.get_physical_device_cooperative_matrix_properties(device) }.unwrap_or_default();
    let f32 = vk::ComponentTypeKHR::FLOAT32;
    shapes.iter().any(|p| {
        (p.m_size, p.n_size, p.k_size) == (16, 16, 16)
            && (p.a_type, p.b_type, p.c_type, p.result_type) == (ab, ab, f32, f32)
            && p.scope == vk::ScopeKHR::SUBGROUP
    })
}
