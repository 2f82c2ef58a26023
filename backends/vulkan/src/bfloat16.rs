//! `VK_KHR_shader_bfloat16`: bf16 values and cooperative matrices of them in shaders.
//!
//! ash 0.38 predates the extension, so its feature structure
//! (`VkPhysicalDeviceShaderBfloat16FeaturesKHR`) and component type are declared here from
//! the Vulkan registry.

use std::ffi::{c_void, CStr};

use ash::vk;

pub(crate) const NAME: &CStr = c"VK_KHR_shader_bfloat16";

/// `VK_COMPONENT_TYPE_BFLOAT16_KHR`.
pub(crate) const COMPONENT: vk::ComponentTypeKHR = vk::ComponentTypeKHR::from_raw(1_000_141_000);

const FEATURES_TYPE: vk::StructureType = vk::StructureType::from_raw(1_000_141_000);

/// `VkPhysicalDeviceShaderBfloat16FeaturesKHR`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct Features {
    s_type: vk::StructureType,
    p_next: *mut c_void,
    pub types: vk::Bool32,
    pub dot_product: vk::Bool32,
    pub cooperative_matrix: vk::Bool32,
}

impl Default for Features {
    fn default() -> Features {
        Features {
            s_type: FEATURES_TYPE,
            p_next: std::ptr::null_mut(),
            types: vk::FALSE,
            dot_product: vk::FALSE,
            cooperative_matrix: vk::FALSE,
        }
    }
}

impl Features {
    /// What the bf16 MUL_MAT shaders use.
    pub(crate) fn for_mul_mat() -> Features {
        Features { types: vk::TRUE, cooperative_matrix: vk::TRUE, ..Features::default() }
    }

    pub(crate) fn has_mul_mat(&self) -> bool {
        self.types == vk::TRUE && self.cooperative_matrix == vk::TRUE
    }
}

// SAFETY: `Features` is the registry's structure, `sType` and `pNext` first, so the chains of
// these create and query infos may hold it.
unsafe impl vk::ExtendsPhysicalDeviceFeatures2 for Features {}
// SAFETY: as above.
unsafe impl vk::ExtendsDeviceCreateInfo for Features {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn features_have_the_registry_layout() {
        assert_eq!(std::mem::size_of::<Features>(), 16 + 3 * 4 + 4);
        assert_eq!(std::mem::offset_of!(Features, cooperative_matrix), 16 + 2 * 4);
    }
}
