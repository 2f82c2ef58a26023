//! A device of a loaded plugin.

use alloc::boxed::Box;
use alloc::string::String;
use alloc::sync::Arc;
use core::any::Any;
use core::mem::size_of;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicPtr, Ordering};

use tessera_core::buffer::same_buffer_type;
use tessera_core::registry::BackendReg;
use tessera_core::{
    Backend, Buffer, BufferType, Device, DeviceCaps, DeviceType, Error, Event, Graph, MemoryInfo, Result, TensorId,
};

use super::{PluginBackend, PluginBuffer, PluginBufferType, PluginEvent, PluginReg, PluginShared};
use crate::abi::*;
use crate::desc::{abi_string, encode_graph};
use crate::tables::{AbiBackend, AbiBuffer, AbiBufferType, AbiDevice, AbiEvent, DeviceFns};

/// A device of a loaded family.
pub struct PluginDevice {
    shared: Arc<PluginShared>,
    reg: AtomicPtr<PluginReg>,
    fns: DeviceFns,
    ctx: Ctx,
    name: String,
    description: String,
    device_type: DeviceType,
    caps: DeviceCaps,
    pci_bus_id: Option<String>,
    buffer_type: &'static PluginBufferType,
    host_buffer_type: Option<&'static PluginBufferType>,
}

// SAFETY: device functions may be called from any thread (the ABI's contract).
unsafe impl Send for PluginDevice {}
// SAFETY: as above.
unsafe impl Sync for PluginDevice {}

fn device_type_of(v: u32) -> DeviceType {
    match v {
        DEVICE_GPU => DeviceType::Gpu,
        DEVICE_IGPU => DeviceType::IGpu,
        DEVICE_ACCEL => DeviceType::Accel,
        _ => DeviceType::Cpu,
    }
}

/// What a device of an unloaded plugin reports as its family if its reg is gone.
struct DetachedReg;

impl BackendReg for DetachedReg {
    fn name(&self) -> &str {
        "unloaded plugin"
    }
    fn device_count(&self) -> usize {
        0
    }
    fn device(&self, _index: usize) -> Option<&'static dyn Device> {
        None
    }
}

static DETACHED_REG: DetachedReg = DetachedReg;

impl PluginDevice {
    /// # Safety
    /// `handle` must be a device handle the plugin returned.
    pub(super) unsafe fn wrap(shared: &Arc<PluginShared>, handle: AbiDevice) -> Result<PluginDevice> {
        // SAFETY: the plugin's device function table.
        let fns = unsafe { DeviceFns::read(handle.fns) }?;
        let ctx = handle.ctx;
        // SAFETY: the functions of the device's table, with its context; strings are copied.
        let (name, description, device_type, caps_bits) = unsafe {
            (abi_string((fns.name)(ctx)), abi_string((fns.description)(ctx)), (fns.device_type)(ctx), (fns.caps)(ctx))
        };
        if name.is_empty() {
            return Err(Error::Backend { backend: "device".into(), message: "has an empty name".into() });
        }
        // SAFETY: as above.
        let pci_bus_id = fns.pci_bus_id.map(|f| unsafe { abi_string(f(ctx)) }).filter(|s| !s.is_empty());
        let caps = DeviceCaps {
            async_compute: caps_bits & CAP_ASYNC != 0,
            host_buffer: caps_bits & CAP_HOST_BUFFER != 0,
            buffer_from_host_ptr: caps_bits & CAP_BUFFER_FROM_HOST_PTR != 0 && fns.buffer_from_host_ptr.is_some(),
            events: caps_bits & CAP_EVENTS != 0,
            prompt_flash_attn: caps_bits & CAP_PROMPT_FLASH_ATTN != 0,
        };
        let mut bt = AbiBufferType::NULL;
        // SAFETY: as above, with a writable output.
        if !unsafe { (fns.buffer_type)(ctx, &mut bt) } {
            return Err(Error::Backend { backend: name, message: "has no buffer type".into() });
        }
        // SAFETY: a buffer type handle the plugin just returned.
        let buffer_type: &'static PluginBufferType =
            Box::leak(Box::new(unsafe { PluginBufferType::wrap(shared, bt) }?));
        let mut host_buffer_type = None;
        if let Some(f) = fns.host_buffer_type {
            let mut hbt = AbiBufferType::NULL;
            // SAFETY: as above.
            if unsafe { f(ctx, &mut hbt) } {
                // SAFETY: a buffer type handle the plugin just returned.
                host_buffer_type = Some(&*Box::leak(Box::new(unsafe { PluginBufferType::wrap(shared, hbt) }?)));
            }
        }
        Ok(PluginDevice {
            shared: shared.clone(),
            reg: AtomicPtr::new(core::ptr::null_mut()),
            fns,
            ctx,
            name,
            description,
            device_type: device_type_of(device_type),
            caps,
            pci_bus_id,
            buffer_type,
            host_buffer_type,
        })
    }

    /// Records the family this device belongs to, once it is built.
    pub(super) fn attach(&self, reg: &'static PluginReg) {
        self.reg.store((reg as *const PluginReg).cast_mut(), Ordering::Release);
    }

    fn reg_ref(&self) -> Option<&'static PluginReg> {
        let p = self.reg.load(Ordering::Acquire);
        // SAFETY: the pointer is null or was set from a leaked `&'static PluginReg` in
        // `attach`; leaked memory is never freed.
        unsafe { p.cast_const().as_ref() }
    }

    /// The plugin's own context for `bt` if it is a buffer type of the same plugin.
    fn own_buffer_type(&self, bt: &dyn BufferType) -> Option<&'static PluginBufferType> {
        self.reg_ref()?
            .plugin_devices()
            .iter()
            .flat_map(|d| core::iter::once(d.buffer_type).chain(d.host_buffer_type))
            .find(|own| same_buffer_type(*own, bt))
    }

    fn ask(&self, graph: &Graph, node: TensorId, f: unsafe extern "C" fn(Ctx, *const AbiGraph, usize) -> bool) -> bool {
        let Some(_call) = self.shared.enter() else { return false };
        let Ok(encoded) = encode_graph(graph, &[node], None) else { return false };
        let abi = encoded.as_abi();
        // SAFETY: a function of the device's table with its context; the descriptor lives
        // until the call returns.
        unsafe { f(self.ctx, &abi, 0) }
    }
}

impl Device for PluginDevice {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> &str {
        &self.description
    }
    fn memory(&self) -> MemoryInfo {
        let Some(_call) = self.shared.enter() else { return MemoryInfo::default() };
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: a function of the device's table with its context and writable outputs.
        unsafe { (self.fns.memory)(self.ctx, &mut free, &mut total) };
        MemoryInfo { free, total }
    }
    fn device_type(&self) -> DeviceType {
        self.device_type
    }
    fn caps(&self) -> DeviceCaps {
        self.caps
    }
    fn pci_bus_id(&self) -> Option<&str> {
        self.pci_bus_id.as_deref()
    }
    fn reg(&self) -> &'static dyn BackendReg {
        match self.reg_ref() {
            Some(r) => r,
            None => &DETACHED_REG,
        }
    }
    fn supports_op(&self, graph: &Graph, node: TensorId) -> bool {
        self.ask(graph, node, self.fns.supports_op)
    }
    fn supports_buffer_type(&self, buffer_type: &dyn BufferType) -> bool {
        let Some(_call) = self.shared.enter() else { return false };
        let r = AbiBufferTypeRef {
            size: size_of::<AbiBufferTypeRef>(),
            own: self.own_buffer_type(buffer_type).map_or(core::ptr::null_mut(), |b| b.ctx()),
            name: AbiStr::new(buffer_type.name()),
            alignment: buffer_type.alignment(),
            max_size: buffer_type.max_size(),
            is_host: buffer_type.is_host(),
        };
        // SAFETY: a function of the device's table with its context; `r` lives for the call.
        unsafe { (self.fns.supports_buffer_type)(self.ctx, &r) }
    }
    fn offload_op(&self, graph: &Graph, node: TensorId) -> bool {
        self.fns.offload_op.is_some_and(|f| self.ask(graph, node, f))
    }
    fn buffer_type(&self) -> &'static dyn BufferType {
        self.buffer_type
    }
    fn host_buffer_type(&self) -> Option<&'static dyn BufferType> {
        self.host_buffer_type.map(|b| b as &'static dyn BufferType)
    }
    unsafe fn buffer_from_host_ptr(
        &'static self,
        ptr: NonNull<u8>,
        size: usize,
        owner: Box<dyn Any + Send + Sync>,
    ) -> Result<Arc<dyn Buffer>> {
        let Some(f) = self.fns.buffer_from_host_ptr.filter(|_| self.caps.buffer_from_host_ptr) else {
            return Err(Error::Backend {
                backend: self.name.clone(),
                message: "this device cannot use host memory in place (no buffer_from_host_ptr)".into(),
            });
        };
        let _call = self.shared.enter_or_err()?;
        let mut handle = AbiBuffer::NULL;
        // SAFETY: a function of the device's table with its context and writable outputs; the
        // caller keeps the memory valid and unwritten while `owner` lives, and the buffer
        // keeps `owner` until after it has freed the plugin's handle.
        self.shared.call(&self.name, |err| unsafe { f(self.ctx, ptr.as_ptr(), size, &mut handle, err) })?;
        // SAFETY: a buffer handle the plugin just returned for `size` bytes.
        Ok(Arc::new(unsafe { PluginBuffer::wrap(self.buffer_type, handle, size, Some(owner)) }?))
    }
    fn init_backend(&'static self) -> Result<Box<dyn Backend>> {
        let _call = self.shared.enter_or_err()?;
        let mut handle = AbiBackend::NULL;
        // SAFETY: a function of the device's table with its context and writable outputs.
        self.shared.call(&self.name, |err| unsafe { (self.fns.init_backend)(self.ctx, &mut handle, err) })?;
        // SAFETY: a backend handle the plugin just returned.
        Ok(Box::new(unsafe { PluginBackend::wrap(&self.shared, handle, self) }?))
    }
    fn new_event(&self) -> Result<Option<Box<dyn Event>>> {
        self.event_of(self.fns.new_event)
    }
    fn new_timing_event(&self) -> Result<Option<Box<dyn Event>>> {
        self.event_of(self.fns.new_timing_event)
    }
}

impl PluginDevice {
    /// The event the plugin's `f` (`new_event` or `new_timing_event`) hands out, if any.
    fn event_of(
        &self,
        f: Option<unsafe extern "C" fn(Ctx, *mut AbiEvent, *mut AbiError) -> i32>,
    ) -> Result<Option<Box<dyn Event>>> {
        let Some(f) = f else { return Ok(None) };
        let _call = self.shared.enter_or_err()?;
        let mut handle = AbiEvent::NULL;
        // SAFETY: a function of the device's table with its context and writable outputs.
        self.shared.call(&self.name, |err| unsafe { f(self.ctx, &mut handle, err) })?;
        if handle.fns.is_null() {
            return Ok(None);
        }
        // SAFETY: an event handle the plugin just returned.
        Ok(Some(Box::new(unsafe { PluginEvent::wrap(&self.shared, handle) }?)))
    }
}
