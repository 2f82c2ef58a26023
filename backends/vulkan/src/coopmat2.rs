//! `VK_NV_cooperative_matrix2`: workgroup-scope cooperative matrices with tensor-addressed
//! loads and stores, whose staging through shared memory the driver schedules.
//!
//! ash 0.38 predates the extension, so its structures and the one query are declared here
//! from the Vulkan registry (`VkPhysicalDeviceCooperativeMatrix2FeaturesNV`,
//! `VkPhysicalDeviceCooperativeMatrix2PropertiesNV`,
//! `VkCooperativeMatrixFlexibleDimensionsPropertiesNV`).

use std::ffi::{c_void, CStr};

use ash::vk;

use crate::instance::Vk;

pub(crate) const NAME: &CStr = c"VK_NV_cooperative_matrix2";

const FEATURES_TYPE: vk::StructureType = vk::StructureType::from_raw(1_000_593_000);
const FLEXIBLE_TYPE: vk::StructureType = vk::StructureType::from_raw(1_000_593_001);
const PROPERTIES_TYPE: vk::StructureType = vk::StructureType::from_raw(1_000_593_002);

/// `VkPhysicalDeviceCooperativeMatrix2FeaturesNV`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct Features {
    s_type: vk::StructureType,
    p_next: *mut c_void,
    pub workgroup_scope: vk::Bool32,
    pub flexible_dimensions: vk::Bool32,
    pub reductions: vk::Bool32,
    pub conversions: vk::Bool32,
    pub per_element_operations: vk::Bool32,
    pub tensor_addressing: vk::Bool32,
    pub block_loads: vk::Bool32,
}

impl Default for Features {
    fn default() -> Features {
        Features {
            s_type: FEATURES_TYPE,
            p_next: std::ptr::null_mut(),
            workgroup_scope: vk::FALSE,
            flexible_dimensions: vk::FALSE,
            reductions: vk::FALSE,
            conversions: vk::FALSE,
            per_element_operations: vk::FALSE,
            tensor_addressing: vk::FALSE,
            block_loads: vk::FALSE,
        }
    }
}

impl Features {
    /// What `mul_mat_cm2.comp` uses (block loads: its decode function, which rounds b).
    pub(crate) fn for_mul_mat() -> Features {
        Features {
            workgroup_scope: vk::TRUE,
            flexible_dimensions: vk::TRUE,
            tensor_addressing: vk::TRUE,
            block_loads: vk::TRUE,
            ..Features::default()
        }
    }

    pub(crate) fn has_mul_mat(&self) -> bool {
        [self.workgroup_scope, self.flexible_dimensions, self.tensor_addressing, self.block_loads]
            .iter()
            .all(|&f| f == vk::TRUE)
    }
}

// SAFETY: `Features` is the registry's structure, `sType` and `pNext` first, so the chains of
// these create and query infos may hold it.
unsafe impl vk::ExtendsPhysicalDeviceFeatures2 for Features {}
// SAFETY: as above.
unsafe impl vk::ExtendsDeviceCreateInfo for Features {}

/// `VkPhysicalDeviceCooperativeMatrix2PropertiesNV`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct Properties {
    s_type: vk::StructureType,
    p_next: *mut c_void,
    pub max_workgroup_size: u32,
    pub max_dimension: u32,
    pub reserved_shared_memory: u32,
}

impl Default for Properties {
    fn default() -> Properties {
        Properties {
            s_type: PROPERTIES_TYPE,
            p_next: std::ptr::null_mut(),
            max_workgroup_size: 0,
            max_dimension: 0,
            reserved_shared_memory: 0,
        }
    }
}

// SAFETY: `Properties` is the registry's structure, `sType` and `pNext` first.
unsafe impl vk::ExtendsPhysicalDeviceProperties2 for Properties {}

/// `VkCooperativeMatrixFlexibleDimensionsPropertiesNV`.
#[repr(C)]
#[derive(Clone, Copy)]
struct Flexible {
    s_type: vk::StructureType,
    p_next: *mut c_void,
    m_granularity: u32,
    n_granularity: u32,
    k_granularity: u32,
    a_type: vk::ComponentTypeKHR,
    b_type: vk::ComponentTypeKHR,
    c_type: vk::ComponentTypeKHR,
    result_type: vk::ComponentTypeKHR,
    saturating_accumulation: vk::Bool32,
    scope: vk::ScopeKHR,
    workgroup_invocations: u32,
}

impl Default for Flexible {
    fn default() -> Flexible {
        Flexible {
            s_type: FLEXIBLE_TYPE,
            p_next: std::ptr::null_mut(),
            m_granularity: 0,
            n_granularity: 0,
            k_granularity: 0,
            a_type: vk::ComponentTypeKHR::FLOAT16,
            b_type: vk::ComponentTypeKHR::FLOAT16,
            c_type: vk::ComponentTypeKHR::FLOAT32,
            result_type: vk::ComponentTypeKHR::FLOAT32,
            saturating_accumulation: vk::FALSE,
            scope: vk::ScopeKHR::SUBGROUP,
            workgroup_invocations: 0,
        }
    }
}

type GetFlexible = unsafe extern "system" fn(vk::PhysicalDevice, *mut u32, *mut Flexible) -> vk::Result;

/// Whether the device multiplies matrices of `ab` (f16 or bf16) into f32 at workgroup scope
/// over `invocations` invocations, with granularities that divide `tile` (m, n, k).
pub(crate) fn has_workgroup_tiles(
    vk: &Vk,
    device: vk::PhysicalDevice,
    ab: vk::ComponentTypeKHR,
    invocations: u32,
    tile: [u32; 3],
) -> bool {
    // SAFETY: a query of the instance's own function table by a NUL-terminated name.
    let f = unsafe {
        vk.entry.get_instance_proc_addr(
            vk.instance.handle(),
            c"vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV".as_ptr(),
        )
    };
    let Some(f) = f else { return false };
    // SAFETY: the loader returned this entry point for that name, whose C signature is
    // `GetFlexible`.
    let get: GetFlexible = unsafe { std::mem::transmute::<unsafe extern "system" fn(), GetFlexible>(f) };
    let mut count = 0u32;
    // SAFETY: the two-call idiom: first the count, then that many structures.
    if unsafe { get(device, &mut count, std::ptr::null_mut()) } != vk::Result::SUCCESS {
        return false;
    }
    let mut shapes = vec![Flexible::default(); count as usize];
    // SAFETY: `shapes` holds `count` initialised structures.
    if unsafe { get(device, &mut count, shapes.as_mut_ptr()) } != vk::Result::SUCCESS {
        return false;
    }
    shapes.truncate(count as usize);
    let f32 = vk::ComponentTypeKHR::FLOAT32;
    shapes.iter().any(|p| {
        p.scope == vk::ScopeKHR::WORKGROUP
            && p.workgroup_invocations == invocations
            && (p.a_type, p.b_type, p.c_type, p.result_type) == (ab, ab, f32, f32)
            && p.m_granularity > 0
            && p.n_granularity > 0
            && p.k_granularity > 0
            && tile[0] % p.m_granularity == 0
            && tile[1] % p.n_granularity == 0
            && tile[2] % p.k_granularity == 0
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn structures_have_the_registry_layout() {
        // sType (4), padding (4), pNext (8), then 32-bit members: 7 booleans, and 3 + 4 + 1 +
        // 1 + 1 words.
        assert_eq!(std::mem::size_of::<Features>(), 16 + 7 * 4 + 4);
        assert_eq!(std::mem::offset_of!(Features, workgroup_scope), 16);
        assert_eq!(std::mem::offset_of!(Features, block_loads), 16 + 6 * 4);
        assert_eq!(std::mem::size_of::<Flexible>(), 16 + 10 * 4);
        assert_eq!(std::mem::offset_of!(Flexible, workgroup_invocations), 16 + 9 * 4);
        assert_eq!(std::mem::size_of::<Properties>(), 16 + 3 * 4 + 4);
    }
}
