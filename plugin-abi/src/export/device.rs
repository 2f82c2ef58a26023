//! The device table.

use alloc::boxed::Box;
use alloc::string::String;
use alloc::sync::Arc;
use core::ptr::NonNull;

use tessera_core::{Buffer, BufferType, Device, DeviceType, Error, Event, Graph, Result, TensorId};

use super::buffer_type::ExportedBufferType;
use super::{fallible, obj, put, Exporter};
use crate::abi::*;
use crate::desc::{abi_string, decode_graph, read_sized};
use crate::tables::{AbiBackend, AbiBuffer, AbiBufferType, AbiDevice, AbiDeviceFns, AbiEvent, DeviceExports};
use crate::tables::{BackendExports, BufferExports, EventExports};

/// A device of the exported family, with its buffer types (their contexts live here).
pub(super) struct ExportedDevice {
    device: &'static dyn Device,
    buffer_type: ExportedBufferType,
    host_buffer_type: Option<ExportedBufferType>,
}

impl ExportedDevice {
    pub(super) fn new(device: &'static dyn Device) -> ExportedDevice {
        ExportedDevice {
            device,
            buffer_type: ExportedBufferType::new(device.buffer_type()),
            host_buffer_type: device.host_buffer_type().map(ExportedBufferType::new),
        }
    }

    /// The handle of this device (it lives as long as the plugin).
    pub(super) fn handle<E: Exporter>(&self) -> AbiDevice {
        AbiDevice { fns: DeviceExports::<E>::TABLE, ctx: (self as *const ExportedDevice).cast_mut().cast() }
    }
}

/// # Safety
/// `ctx` must be a device context this plugin handed out.
unsafe fn device<'a>(ctx: Ctx) -> Result<&'a ExportedDevice> {
    // SAFETY: forwarded from the caller.
    unsafe { obj::<ExportedDevice>(ctx) }
}

/// Asks `f` about node `node` of the described graph; any error is a "no".
///
/// # Safety
/// `ctx` must be a device context of this plugin and `graph` a valid graph descriptor.
unsafe fn ask_node<E: Exporter>(
    ctx: Ctx,
    graph: *const AbiGraph,
    node: usize,
    f: fn(&dyn Device, &Graph, TensorId) -> bool,
) -> bool {
    E::catch(|| {
        // SAFETY: forwarded from the caller.
        let Ok(d) = (unsafe { device(ctx) }) else { return false };
        // SAFETY: forwarded from the caller.
        let Ok(g) = (unsafe { decode_graph(graph, None) }) else { return false };
        g.nodes().get(node).is_some_and(|&id| f(d.device, &g, id))
    })
    .unwrap_or(false)
}

/// A buffer type of someone else, as far as a description tells.
struct ForeignBufferType {
    name: String,
    alignment: usize,
    max_size: usize,
    is_host: bool,
}

impl BufferType for ForeignBufferType {
    fn name(&self) -> &str {
        &self.name
    }
    fn alignment(&self) -> usize {
        self.alignment
    }
    fn max_size(&self) -> usize {
        self.max_size
    }
    fn is_host(&self) -> bool {
        self.is_host
    }
    fn alloc_buffer(&'static self, _size: usize) -> Result<Arc<dyn Buffer>> {
        Err(Error::Backend { backend: self.name.clone(), message: "a foreign buffer type cannot allocate here".into() })
    }
}

impl<E: Exporter> DeviceExports<E> {
    const TABLE: &'static AbiDeviceFns = &Self::table();

    pub(crate) unsafe extern "C" fn name(ctx: Ctx) -> AbiStr {
        // SAFETY: `ctx` is a device context of this plugin (the host's side of the contract).
        E::catch(|| unsafe { device(ctx) }.map_or(AbiStr::EMPTY, |d| AbiStr::new(d.device.name())))
            .unwrap_or(AbiStr::EMPTY)
    }

    pub(crate) unsafe extern "C" fn description(ctx: Ctx) -> AbiStr {
        // SAFETY: as in `name`.
        E::catch(|| unsafe { device(ctx) }.map_or(AbiStr::EMPTY, |d| AbiStr::new(d.device.description())))
            .unwrap_or(AbiStr::EMPTY)
    }

    pub(crate) unsafe extern "C" fn memory(ctx: Ctx, free: *mut usize, total: *mut usize) {
        let _ = E::catch(|| {
            // SAFETY: as in `name`.
            let m = unsafe { device(ctx) }.map(|d| d.device.memory()).unwrap_or_default();
            // SAFETY: the host passes writable usizes (or null, refused by `put`).
            unsafe {
                let _ = put(free, m.free);
                let _ = put(total, m.total);
            }
        });
    }

    pub(crate) unsafe extern "C" fn device_type(ctx: Ctx) -> u32 {
        E::catch(|| {
            // SAFETY: as in `name`.
            match unsafe { device(ctx) }.map(|d| d.device.device_type()) {
                Ok(DeviceType::Gpu) => DEVICE_GPU,
                Ok(DeviceType::IGpu) => DEVICE_IGPU,
                Ok(DeviceType::Accel) => DEVICE_ACCEL,
                _ => DEVICE_CPU,
            }
        })
        .unwrap_or(DEVICE_CPU)
    }

    pub(crate) unsafe extern "C" fn caps(ctx: Ctx) -> u32 {
        E::catch(|| {
            // SAFETY: as in `name`.
            let Ok(d) = (unsafe { device(ctx) }) else { return 0 };
            let c = d.device.caps();
            [(c.async_compute, CAP_ASYNC), (c.host_buffer, CAP_HOST_BUFFER)]
                .into_iter()
                .chain([(c.buffer_from_host_ptr, CAP_BUFFER_FROM_HOST_PTR), (c.events, CAP_EVENTS)])
                .chain([(c.prompt_flash_attn, CAP_PROMPT_FLASH_ATTN)])
                .filter(|(on, _)| *on)
                .fold(0, |bits, (_, bit)| bits | bit)
        })
        .unwrap_or(0)
    }

    pub(crate) unsafe extern "C" fn pci_bus_id(ctx: Ctx) -> AbiStr {
        E::catch(|| {
            // SAFETY: as in `name`.
            unsafe { device(ctx) }.ok().and_then(|d| d.device.pci_bus_id()).map_or(AbiStr::EMPTY, AbiStr::new)
        })
        .unwrap_or(AbiStr::EMPTY)
    }

    pub(crate) unsafe extern "C" fn supports_op(ctx: Ctx, graph: *const AbiGraph, node: usize) -> bool {
        // SAFETY: the host passes a device context of this plugin and a valid graph.
        unsafe { ask_node::<E>(ctx, graph, node, |d, g, id| d.supports_op(g, id)) }
    }

    pub(crate) unsafe extern "C" fn supports_buffer_type(ctx: Ctx, bt: *const AbiBufferTypeRef) -> bool {
        E::catch(|| {
            // SAFETY: as in `name`.
            let Ok(d) = (unsafe { device(ctx) }) else { return false };
            // SAFETY: the host passes a valid AbiBufferTypeRef or null.
            let Ok(r) = (unsafe { read_sized(bt, "buffer type") }) else { return false };
            if !r.own.is_null() {
                // SAFETY: `own` is a buffer type context this plugin handed out.
                return unsafe { super::buffer_type::exported(r.own) }.is_ok_and(|b| d.device.supports_buffer_type(b));
            }
            let foreign = ForeignBufferType {
                // SAFETY: the host passes valid strings.
                name: unsafe { abi_string(r.name) },
                alignment: r.alignment,
                max_size: r.max_size,
                is_host: r.is_host,
            };
            d.device.supports_buffer_type(&foreign)
        })
        .unwrap_or(false)
    }

    pub(crate) unsafe extern "C" fn offload_op(ctx: Ctx, graph: *const AbiGraph, node: usize) -> bool {
        // SAFETY: as in `supports_op`.
        unsafe { ask_node::<E>(ctx, graph, node, |d, g, id| d.offload_op(g, id)) }
    }

    pub(crate) unsafe extern "C" fn buffer_type(ctx: Ctx, out: *mut AbiBufferType) -> bool {
        E::catch(|| {
            // SAFETY: as in `name`; `out` is writable or null (refused by `put`).
            unsafe { device(ctx).and_then(|d| put(out, d.buffer_type.handle::<E>())) }.is_ok()
        })
        .unwrap_or(false)
    }

    pub(crate) unsafe extern "C" fn host_buffer_type(ctx: Ctx, out: *mut AbiBufferType) -> bool {
        E::catch(|| {
            // SAFETY: as in `name`.
            let Ok(d) = (unsafe { device(ctx) }) else { return false };
            let Some(b) = &d.host_buffer_type else { return false };
            // SAFETY: `out` is writable or null (refused by `put`).
            unsafe { put(out, b.handle::<E>()) }.is_ok()
        })
        .unwrap_or(false)
    }

    pub(crate) unsafe extern "C" fn init_backend(ctx: Ctx, out: *mut AbiBackend, err: *mut AbiError) -> i32 {
        fallible::<E>(err, "init_backend", || {
            // SAFETY: as in `name`.
            let d = unsafe { device(ctx) }?;
            if out.is_null() {
                return Err(super::null_output());
            }
            let handle = BackendExports::<E>::handle(d.device.init_backend()?);
            // SAFETY: non-null (checked above) and writable (the host's promise).
            unsafe { put(out, handle) }
        })
    }

    pub(crate) unsafe extern "C" fn new_event(ctx: Ctx, out: *mut AbiEvent, err: *mut AbiError) -> i32 {
        // SAFETY: forwarded from the caller.
        unsafe { Self::event_of(ctx, out, err, "new_event", |d| d.new_event()) }
    }

    pub(crate) unsafe extern "C" fn new_timing_event(ctx: Ctx, out: *mut AbiEvent, err: *mut AbiError) -> i32 {
        // SAFETY: forwarded from the caller.
        unsafe { Self::event_of(ctx, out, err, "new_timing_event", |d| d.new_timing_event()) }
    }

    /// Hands out the event `make` gives (a null handle for none).
    ///
    /// # Safety
    /// As for the table's `new_event`.
    unsafe fn event_of(
        ctx: Ctx,
        out: *mut AbiEvent,
        err: *mut AbiError,
        what: &'static str,
        make: impl FnOnce(&dyn Device) -> Result<Option<Box<dyn Event>>>,
    ) -> i32 {
        fallible::<E>(err, what, || {
            // SAFETY: as in `name`.
            let d = unsafe { device(ctx) }?;
            if out.is_null() {
                return Err(super::null_output());
            }
            let handle = match make(d.device)? {
                None => AbiEvent::NULL,
                Some(event) => EventExports::<E>::handle(event),
            };
            // SAFETY: non-null (checked above) and writable (the host's promise).
            unsafe { put(out, handle) }
        })
    }

    pub(crate) unsafe extern "C" fn buffer_from_host_ptr(
        ctx: Ctx,
        ptr: *const u8,
        size: usize,
        out: *mut AbiBuffer,
        err: *mut AbiError,
    ) -> i32 {
        fallible::<E>(err, "buffer_from_host_ptr", || {
            // SAFETY: as in `name`.
            let d = unsafe { device(ctx) }?;
            let Some(ptr) = NonNull::new(ptr.cast_mut()) else {
                return Err(Error::InvalidParam { op: "BUFFER_FROM_HOST_PTR", message: "null host memory".into() });
            };
            if out.is_null() {
                return Err(super::null_output());
            }
            // SAFETY: the host keeps `size` bytes at `ptr` valid and unwritten until it has
            // freed the buffer and nothing of this plugin uses it any more (the entry's
            // contract), so the buffer needs no owner of its own.
            let buffer = unsafe { d.device.buffer_from_host_ptr(ptr, size, Box::new(())) }?;
            // SAFETY: non-null (checked above) and writable (the host's promise).
            unsafe { put(out, BufferExports::<E>::handle(buffer)) }
        })
    }
}
