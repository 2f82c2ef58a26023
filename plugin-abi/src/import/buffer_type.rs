//! A buffer type of a loaded plugin.

use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;

use tessera_core::tensor::Tensor;
use tessera_core::{Buffer, BufferType, Error, Result};

use super::{PluginBuffer, PluginShared};
use crate::abi::Ctx;
use crate::desc::{abi_string, encode_lone_tensor};
use crate::tables::{AbiBuffer, AbiBufferType, BufferTypeFns};

/// A buffer type of a loaded family.
pub struct PluginBufferType {
    shared: Arc<PluginShared>,
    fns: BufferTypeFns,
    ctx: Ctx,
    name: String,
    alignment: usize,
    max_size: usize,
    is_host: bool,
}

// SAFETY: buffer type functions may be called from any thread (the ABI's contract).
unsafe impl Send for PluginBufferType {}
// SAFETY: as above.
unsafe impl Sync for PluginBufferType {}

impl PluginBufferType {
    /// # Safety
    /// `handle` must be a buffer type handle the plugin returned.
    pub(super) unsafe fn wrap(shared: &Arc<PluginShared>, handle: AbiBufferType) -> Result<PluginBufferType> {
        // SAFETY: the plugin's buffer type function table.
        let fns = unsafe { BufferTypeFns::read(handle.fns) }?;
        let ctx = handle.ctx;
        // SAFETY: the functions of the buffer type's table, with its context.
        let (name, alignment, max_size, is_host) =
            unsafe { (abi_string((fns.name)(ctx)), (fns.alignment)(ctx), (fns.max_size)(ctx), (fns.is_host)(ctx)) };
        if !alignment.is_power_of_two() {
            return Err(Error::Backend {
                backend: format!("buffer type '{name}'"),
                message: format!("has alignment {alignment}, not a power of two"),
            });
        }
        Ok(PluginBufferType { shared: shared.clone(), fns, ctx, name, alignment, max_size, is_host })
    }

    /// The plugin's context of this buffer type.
    pub(super) fn ctx(&self) -> Ctx {
        self.ctx
    }

    pub(super) fn shared(&self) -> &Arc<PluginShared> {
        &self.shared
    }
}

impl BufferType for PluginBufferType {
    fn name(&self) -> &str {
        &self.name
    }
    fn alignment(&self) -> usize {
        self.alignment
    }
    fn max_size(&self) -> usize {
        self.max_size
    }
    fn alloc_size(&self, tensor: &Tensor) -> usize {
        let (Some(f), Some(_call)) = (self.fns.alloc_size, self.shared.enter()) else { return tensor.nbytes() };
        let d = encode_lone_tensor(tensor);
        // SAFETY: a function of the buffer type's table with its context; `d` lives for the call.
        unsafe { f(self.ctx, &d) }.max(tensor.nbytes())
    }
    fn is_host(&self) -> bool {
        self.is_host
    }
    fn alloc_buffer(&'static self, size: usize) -> Result<Arc<dyn Buffer>> {
        let _call = self.shared.enter_or_err()?;
        let mut handle = AbiBuffer::NULL;
        let alloc = self.fns.alloc_buffer;
        // SAFETY: a function of the buffer type's table with its context and writable outputs.
        self.shared.call_for(&self.name, size, |err| unsafe { alloc(self.ctx, size, &mut handle, err) })?;
        // SAFETY: a buffer handle the plugin just returned for `size` bytes.
        Ok(Arc::new(unsafe { PluginBuffer::wrap(self, handle, size, None) }?))
    }
}
