//! A buffer of a loaded plugin, and how any buffer crosses into a plugin.

use alloc::boxed::Box;
use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use core::any::Any;
use core::mem::{offset_of, size_of};

use tessera_core::buffer::check_range;
use tessera_core::tensor::Tensor;
use tessera_core::{Buffer, BufferBase, BufferType, BufferUsage, Error, Result};

use super::{free_handle, PluginBufferType, PluginShared};
use crate::abi::*;
use crate::desc::encode_lone_tensor;
use crate::tables::{AbiBuffer, AbiBufferFns, BufferFns};

/// A buffer allocated by a plugin.
pub struct PluginBuffer {
    shared: Arc<PluginShared>,
    buffer_type: &'static PluginBufferType,
    fns: BufferFns,
    ctx: Ctx,
    size: usize,
    base: BufferBase,
    /// What keeps host memory the buffer uses in place alive (`buffer_from_host_ptr`);
    /// dropped after the plugin's handle is freed.
    _owner: Option<Box<dyn Any + Send + Sync>>,
}

// SAFETY: buffer functions may be called from several threads on disjoint bytes (the ABI's
// contract, the same as `Buffer`'s); the base is memory that lives as long as the buffer.
unsafe impl Send for PluginBuffer {}
// SAFETY: as above.
unsafe impl Sync for PluginBuffer {}

/// A base as a plugin reported it, checked.
fn base_of(b: AbiBufferBase) -> Result<BufferBase> {
    let host = || {
        usize::try_from(b.address)
            .ok()
            .filter(|a| *a != 0)
            .map(core::ptr::with_exposed_provenance_mut::<u8>)
            .ok_or_else(|| format!("reports host memory at address {:#x}", b.address))
    };
    let base = match b.kind {
        BASE_HOST => host().map(BufferBase::Host),
        BASE_HOST_READ_ONLY => host().map(|p| BufferBase::HostReadOnly(p.cast_const())),
        BASE_DEVICE => Ok(BufferBase::Device(b.address)),
        BASE_OPAQUE => Ok(BufferBase::Opaque(b.address)),
        kind => Err(format!("reports a base of unknown kind {kind} (known: 0 to 3)")),
    };
    base.map_err(|message| Error::Backend { backend: "buffer".into(), message })
}

impl PluginBuffer {
    /// Wraps a buffer handle; on failure the handle is freed.
    ///
    /// # Safety
    /// `handle` must be a buffer handle `bt`'s plugin just returned for `requested` bytes, and
    /// the plugin must stay loaded during the call.
    pub(super) unsafe fn wrap(
        bt: &'static PluginBufferType,
        handle: AbiBuffer,
        requested: usize,
        owner: Option<Box<dyn Any + Send + Sync>>,
    ) -> Result<PluginBuffer> {
        let ctx = handle.ctx;
        // SAFETY: the plugin's buffer function table.
        let fns = match unsafe { BufferFns::read(handle.fns) } {
            Ok(fns) => fns,
            Err(e) => {
                // SAFETY: the handle's own free function (if readable), exactly once.
                unsafe { free_handle(handle.fns, ctx, offset_of!(AbiBufferFns, free), |t| t.free) };
                return Err(e);
            }
        };
        // SAFETY: functions of the buffer's table with its context.
        let (size, base) = unsafe { ((fns.buffer_size)(ctx), (fns.base)(ctx)) };
        let checked = base_of(base).and_then(|base| {
            let fail = |message: String| Err(Error::Backend { backend: bt.name().into(), message });
            if size < requested {
                return fail(format!("returned a buffer of {size} bytes for {requested} requested"));
            }
            if bt.is_host() && base.host_ptr().is_none() {
                return fail("is a host buffer type but returned a buffer without a host address".into());
            }
            Ok(base)
        });
        let base = match checked {
            Ok(base) => base,
            Err(e) => {
                // SAFETY: the buffer's own free function and context, called once.
                unsafe { (fns.free)(ctx) };
                return Err(e);
            }
        };
        let shared = bt.shared().clone();
        shared.hold();
        Ok(PluginBuffer { shared, buffer_type: bt, fns, ctx, size, base, _owner: owner })
    }

    fn abi_ref(&self) -> AbiBufferRef {
        AbiBufferRef {
            size: size_of::<AbiBufferRef>(),
            own: self.ctx,
            host_base: self.base.host_ptr().map_or(core::ptr::null_mut(), <*const u8>::cast_mut),
            bytes: self.size,
            writable: self.base.host_ptr_mut().is_some(),
            name: AbiStr::new(self.buffer_type.name()),
        }
    }
}

/// How `buffer` crosses into the plugin of `shared`: as its own handle, or as host memory
/// (`backend` names the plugin's side in the error when it is neither).
pub(super) fn buffer_ref(shared: &Arc<PluginShared>, buffer: &dyn Buffer, backend: &str) -> Result<AbiBufferRef> {
    if let Some(own) = buffer.as_any().downcast_ref::<PluginBuffer>().filter(|b| Arc::ptr_eq(&b.shared, shared)) {
        return Ok(own.abi_ref());
    }
    let (host_base, writable) = match buffer.base() {
        BufferBase::Host(p) => (p, true),
        BufferBase::HostReadOnly(p) => (p.cast_mut(), false),
        BufferBase::Device(_) | BufferBase::Opaque(_) => {
            return Err(Error::IncompatibleBuffer {
                tensor: String::new(),
                buffer: buffer.buffer_type().name().into(),
                backend: backend.into(),
            })
        }
    };
    Ok(AbiBufferRef {
        size: size_of::<AbiBufferRef>(),
        own: core::ptr::null_mut(),
        host_base,
        bytes: buffer.size(),
        writable,
        name: AbiStr::new(buffer.buffer_type().name()),
    })
}

impl Drop for PluginBuffer {
    fn drop(&mut self) {
        // SAFETY: the buffer's own free function and context, called exactly once.
        unsafe { self.shared.release(self.fns.free, self.ctx) };
    }
}

impl Buffer for PluginBuffer {
    fn buffer_type(&self) -> &'static dyn BufferType {
        self.buffer_type
    }
    fn size(&self) -> usize {
        self.size
    }
    fn usage(&self) -> BufferUsage {
        let Some(_call) = self.shared.enter() else { return BufferUsage::Any };
        // SAFETY: a function of the buffer's table with its context.
        BufferUsage::from_u8(unsafe { (self.fns.usage)(self.ctx) })
    }
    fn set_usage(&self, usage: BufferUsage) {
        if let Some(_call) = self.shared.enter() {
            // SAFETY: a function of the buffer's table with its context.
            unsafe { (self.fns.set_usage)(self.ctx, usage as u8) };
        }
    }
    fn base(&self) -> BufferBase {
        self.base
    }
    fn init_tensor(&self, tensor: &Tensor, offset: usize) -> Result<()> {
        let Some(f) = self.fns.init_tensor else { return Ok(()) };
        let d = encode_lone_tensor(tensor);
        // SAFETY: a function of the buffer's table with its context; `d` lives for the call.
        self.shared.call(self.buffer_type.name(), |err| unsafe { f(self.ctx, &d, offset, err) })
    }
    fn set_bytes(&self, offset: usize, data: &[u8]) -> Result<()> {
        check_range(self, offset, data.len())?;
        // SAFETY: a function of the buffer's table with its context; `data` is valid for its
        // length during the call.
        self.shared.call(self.buffer_type.name(), |err| unsafe {
            (self.fns.set_bytes)(self.ctx, offset, data.as_ptr(), data.len(), err)
        })
    }
    fn get_bytes(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        check_range(self, offset, out.len())?;
        // SAFETY: a function of the buffer's table with its context; `out` is writable for its
        // length and exclusively ours during the call.
        self.shared.call(self.buffer_type.name(), |err| unsafe {
            (self.fns.get_bytes)(self.ctx, offset, out.as_mut_ptr(), out.len(), err)
        })
    }
    fn fill(&self, offset: usize, len: usize, value: u8) -> Result<()> {
        check_range(self, offset, len)?;
        // SAFETY: a function of the buffer's table with its context.
        self.shared.call(self.buffer_type.name(), |err| unsafe { (self.fns.fill)(self.ctx, offset, len, value, err) })
    }
    fn copy_from(&self, dst_offset: usize, src: &dyn Buffer, src_offset: usize, len: usize) -> Result<bool> {
        check_range(self, dst_offset, len)?;
        check_range(src, src_offset, len)?;
        let Some(f) = self.fns.copy_from else {
            return match src.host_ptr() {
                Some(base) => {
                    // SAFETY: the range was checked against the host buffer, which stays alive
                    // for the call and is not written through this borrow.
                    let bytes = unsafe { core::slice::from_raw_parts(base.add(src_offset), len) };
                    self.set_bytes(dst_offset, bytes).map(|()| true)
                }
                None => Ok(false),
            };
        };
        let Ok(r) = buffer_ref(&self.shared, src, self.buffer_type.name()) else { return Ok(false) };
        let mut copied = false;
        // SAFETY: a function of the buffer's table with its context; `r` describes a live
        // buffer of this plugin or host memory valid for the call.
        self.shared.call(self.buffer_type.name(), |err| unsafe {
            f(self.ctx, dst_offset, &r, src_offset, len, &mut copied, err)
        })?;
        Ok(copied)
    }
    fn reset(&self) {
        if let (Some(f), Some(_call)) = (self.fns.reset, self.shared.enter()) {
            // SAFETY: a function of the buffer's table with its context.
            unsafe { f(self.ctx) };
        }
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}
