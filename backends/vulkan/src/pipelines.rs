//! The compute pipelines of a device, one per shader, made on first use.
//!
//! Every shader takes one push constant, the device address of its dispatch's arguments, so
//! one pipeline layout without descriptor sets serves them all.

use std::sync::Mutex;

use ash::{vk, Device};

use crate::shaders::Shader;

/// Bytes of push constants: the address of a dispatch's `Args`.
pub(crate) const PUSH_BYTES: u32 = 8;

pub(crate) struct Pipelines {
    pub layout: vk::PipelineLayout,
    made: Mutex<Vec<Option<vk::Pipeline>>>,
}

impl Pipelines {
    pub(crate) fn new(device: &Device) -> Result<Pipelines, String> {
        let ranges = [vk::PushConstantRange::default().stage_flags(vk::ShaderStageFlags::COMPUTE).size(PUSH_BYTES)];
        let info = vk::PipelineLayoutCreateInfo::default().push_constant_ranges(&ranges);
        // SAFETY: a valid create info for this device.
        let layout =
            unsafe { device.create_pipeline_layout(&info, None) }.map_err(|e| format!("no pipeline layout ({e})"))?;
        Ok(Pipelines { layout, made: Mutex::new(vec![None; Shader::ALL.len()]) })
    }

    /// The pipeline of `shader`, compiled by the driver the first time it is asked for.
    pub(crate) fn get(&self, device: &Device, shader: Shader) -> Result<vk::Pipeline, vk::Result> {
        let mut made = self.made.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(Some(p)) = made.get(shader as usize) {
            return Ok(*p);
        }
        let code = shader.spirv();
        let module_info = vk::ShaderModuleCreateInfo::default().code(&code);
        // SAFETY: `code` is SPIR-V made by the shader generator (checked in CI against its
        // sources), for the features this device was opened with.
        let module = unsafe { device.create_shader_module(&module_info, None) }?;
        let stage = vk::PipelineShaderStageCreateInfo::default()
            .stage(vk::ShaderStageFlags::COMPUTE)
            .module(module)
            .name(c"main");
        let info = [vk::ComputePipelineCreateInfo::default().stage(stage).layout(self.layout)];
        // SAFETY: the module and layout belong to this device and live through the call.
        let result = unsafe { device.create_compute_pipelines(vk::PipelineCache::null(), &info, None) };
        // SAFETY: the module is not needed once the pipeline exists (or failed).
        unsafe { device.destroy_shader_module(module, None) };
        let pipeline = result.map_err(|(_, e)| e)?.first().copied().ok_or(vk::Result::ERROR_UNKNOWN)?;
        if let Some(slot) = made.get_mut(shader as usize) {
            *slot = Some(pipeline);
        }
        Ok(pipeline)
    }

    /// Releases the pipelines and the layout.
    ///
    /// # Safety
    /// Nothing may use them any more.
    pub(crate) unsafe fn destroy(&self, device: &Device) {
        let made = self.made.lock().unwrap_or_else(|p| p.into_inner());
        for p in made.iter().flatten() {
            // SAFETY: the caller promises the pipelines are unused.
            unsafe { device.destroy_pipeline(*p, None) };
        }
        // SAFETY: as above.
        unsafe { device.destroy_pipeline_layout(self.layout, None) };
    }
}
