//! tessera's CUDA backend as a plugin (`libtessera-cuda.so`): a program built without the
//! `cuda` feature finds NVIDIA GPUs at run time by loading it from its plugin directories.
//! It scores 0 (cannot run here) when the driver lists no GPU, so the loader skips it with
//! the reason instead of registering an empty family.

use tessera_core::registry::BackendReg;

tessera_plugin_abi::export_backend!(reg: &tessera_cuda::CUDA_REG, score: score);

/// 0 without a usable GPU, else 1.
fn score() -> u32 {
    u32::from(tessera_cuda::CUDA_REG.device_count() > 0)
}
