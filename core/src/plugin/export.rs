//! The plugin side: a Rust backend family exported through the C tables.
//!
//! A backend crate builds a `cdylib` and calls [`crate::export_backend!`], which implements
//! [`Exporter`] (the reg to export, and panic catching with the plugin's `std`) and defines
//! the entry points. Every function here runs its body inside [`Exporter::catch`], so no
//! panic unwinds into the host.

use alloc::boxed::Box;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::any::Any;
use core::marker::PhantomData;
use core::mem::size_of;
use core::ptr::NonNull;

use super::abi::*;
use super::desc::{abi_string, decode_graph, decode_lone_tensor, read_sized};
use crate::backend::{Backend, Event};
use crate::buffer::{Buffer, BufferType, BufferUsage, TensorData};
use crate::device::{Device, DeviceType};
use crate::error::{Error, Result};
use crate::host_buffer::HostBuffer;
use crate::registry::{extension, BackendReg, Extension};
use crate::tensor::TensorId;

/// What a plugin crate provides to the export: its reg, and a way to catch panics (which
/// needs `std`; [`crate::export_backend!`] implements it with `std::panic::catch_unwind`).
pub trait Exporter: 'static {
    /// The family to export.
    fn reg() -> &'static dyn BackendReg;
    /// Runs `f`; a panic comes back as `Err` with its message instead of unwinding.
    fn catch<R>(f: impl FnOnce() -> R) -> core::result::Result<R, String>;
}

/// The message of a caught panic payload.
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).into()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a non-string payload".into()
    }
}

/// The exported reg table, made once per load and never freed (it lives as long as the
/// plugin is mapped).
#[derive(Clone, Copy)]
pub struct RegHandle(pub *const AbiReg);

// SAFETY: the table is immutable after it is built and its context only holds `'static`
// references to `Sync` objects.
unsafe impl Send for RegHandle {}
// SAFETY: as above.
unsafe impl Sync for RegHandle {}

struct ExportedReg {
    devices: Vec<ExportedDevice>,
}

struct ExportedDevice {
    device: &'static dyn Device,
    buffer_type: ExportedBufferType,
    host_buffer_type: Option<ExportedBufferType>,
}

struct ExportedBufferType {
    buffer_type: &'static dyn BufferType,
}

struct ExportedBuffer {
    buffer: Arc<dyn Buffer>,
}

struct ExportedBackend {
    backend: Box<dyn Backend>,
}

struct ExportedEvent {
    event: Box<dyn Event>,
}

/// Builds the reg table of `E` (its devices and their buffer types), leaked for the life of
/// the plugin.
pub fn export_reg<E: Exporter>() -> RegHandle {
    let reg = E::reg();
    let devices = (0..reg.device_count())
        .filter_map(|i| reg.device(i))
        .map(|device| ExportedDevice {
            device,
            buffer_type: ExportedBufferType { buffer_type: device.buffer_type() },
            host_buffer_type: device.host_buffer_type().map(|buffer_type| ExportedBufferType { buffer_type }),
        })
        .collect();
    let ctx: &'static mut ExportedReg = Box::leak(Box::new(ExportedReg { devices }));
    let extensions = if reg.extension(extension::SET_THREADS).is_some() { EXT_SET_N_THREADS } else { 0 };
    let table = AbiReg {
        size: size_of::<AbiReg>(),
        abi_version: ABI_VERSION,
        extensions,
        ctx: (ctx as *mut ExportedReg).cast(),
        name: Some(reg_name::<E>),
        device_count: Some(reg_device_count::<E>),
        device: Some(reg_device::<E>),
        feature: Some(reg_feature::<E>),
        release: None,
    };
    RegHandle(Box::leak(Box::new(table)))
}

/// The body of `tessera_backend_init`: checks the host's ABI, then returns the reg table
/// (`table` makes or fetches it), or null with `err` filled in.
///
/// # Safety
/// `host` must be null or point to an [`AbiHostInfo`]; `err` must be null or point to an
/// [`AbiError`] the callee may write.
pub unsafe fn init<E: Exporter>(
    host: *const AbiHostInfo,
    err: *mut AbiError,
    table: impl FnOnce() -> RegHandle,
) -> *const AbiReg {
    let host_abi = if host.is_null() {
        None
    } else {
        // SAFETY: non-null, and the caller promises it points to an AbiHostInfo, whose first
        // two fields every version shares.
        Some(unsafe { (*host).abi_version })
    };
    if let Some(v) = host_abi.filter(|v| *v != ABI_VERSION) {
        report(err, STATUS_UNSUPPORTED, &format!("the host speaks plugin ABI {v}, this plugin {ABI_VERSION}"));
        return core::ptr::null();
    }
    match E::catch(table) {
        Ok(handle) => handle.0,
        Err(panic) => {
            report(err, STATUS_PANIC, &format!("panicked in tessera_backend_init: {panic}"));
            core::ptr::null()
        }
    }
}

/// The body of `tessera_backend_score`: `score()`, or 0 if it panics.
pub fn score<E: Exporter>(score: fn() -> u32) -> u32 {
    E::catch(score).unwrap_or(0)
}

/// Writes a failure into `err` (if the caller gave one).
pub fn report(err: *mut AbiError, code: i32, message: &str) {
    if let Some(mut e) = NonNull::new(err) {
        // SAFETY: the caller of the exported function passed a writable AbiError.
        unsafe { e.as_mut() }.set(code, message);
    }
}

/// The status an error travels as.
pub fn status_of(e: &Error) -> i32 {
    match e {
        Error::OutOfMemory { .. } => STATUS_OUT_OF_MEMORY,
        Error::Unsupported { .. } | Error::IncompatibleBuffer { .. } | Error::NoBackend { .. } => STATUS_UNSUPPORTED,
        Error::InvalidParam { .. }
        | Error::UnknownTensor { .. }
        | Error::BufferRange { .. }
        | Error::ViewOutOfBounds { .. }
        | Error::TensorRange { .. } => STATUS_INVALID,
        _ => STATUS_ERROR,
    }
}

/// Runs a fallible body: its error or panic becomes a status and a message.
fn run<E: Exporter>(err: *mut AbiError, what: &str, f: impl FnOnce() -> Result<()>) -> i32 {
    match E::catch(f) {
        Ok(Ok(())) => STATUS_OK,
        Ok(Err(e)) => {
            let code = status_of(&e);
            report(err, code, &e.to_string());
            code
        }
        Err(panic) => {
            report(err, STATUS_PANIC, &format!("panicked in {what}: {panic}"));
            STATUS_PANIC
        }
    }
}

/// The object behind a context this plugin handed out.
///
/// # Safety
/// `ctx` must be a context of type `T` that this plugin handed out and that is still alive.
unsafe fn obj<'a, T>(ctx: Ctx) -> Result<&'a T> {
    // SAFETY: forwarded from the caller; a null context is refused rather than dereferenced.
    unsafe { ctx.cast::<T>().as_ref() }
        .ok_or_else(|| Error::InvalidParam { op: "PLUGIN", message: "null object context".into() })
}

/// # Safety
/// As [`obj`], and no other reference to the object may be in use (one backend is used by
/// one thread at a time).
unsafe fn obj_mut<'a, T>(ctx: Ctx) -> Result<&'a mut T> {
    // SAFETY: forwarded from the caller.
    unsafe { ctx.cast::<T>().as_mut() }
        .ok_or_else(|| Error::InvalidParam { op: "PLUGIN", message: "null object context".into() })
}

/// Writes `value` to `out` if it is not null.
///
/// # Safety
/// `out` must be null or valid for a write of `T`.
unsafe fn put<T>(out: *mut T, value: T) -> Result<()> {
    if out.is_null() {
        return Err(Error::InvalidParam { op: "PLUGIN", message: "null output pointer".into() });
    }
    // SAFETY: non-null; the caller promises it is writable.
    unsafe { out.write(value) };
    Ok(())
}

/// A buffer reference from the host as memory a kernel can use: one of this plugin's
/// buffers, or host memory wrapped without copying.
///
/// # Safety
/// `r` must come from the host following the ABI: `own` a live buffer context of this
/// plugin or null, `host_base` valid for `size` bytes (writable if `writable`) until the
/// call returns (for queued work, until the next synchronize of the backend).
unsafe fn resolve(r: &AbiBufferRef) -> Result<Arc<dyn Buffer>> {
    if !r.own.is_null() {
        // SAFETY: a context of one of this plugin's buffers, by the caller's promise.
        return Ok(unsafe { obj::<ExportedBuffer>(r.own) }?.buffer.clone());
    }
    let Some(base) = NonNull::new(r.host_base) else {
        // SAFETY: the host passes valid strings.
        let name = unsafe { abi_string(r.name) };
        return Err(Error::IncompatibleBuffer {
            tensor: String::new(),
            buffer: name,
            backend: "this plugin (it can use its own buffers and host memory)".into(),
        });
    };
    // SAFETY: the caller promises `base` is valid for `bytes` bytes (and writes if `writable`)
    // for as long as the work using it runs.
    Ok(Arc::new(unsafe { HostBuffer::from_raw(base, r.bytes, r.writable, Box::new(())) }))
}

/// The function tables of `E`, one static copy each.
struct Tables<E>(PhantomData<E>);

impl<E: Exporter> Tables<E> {
    const DEVICE: &'static AbiDeviceFns = &AbiDeviceFns {
        size: size_of::<AbiDeviceFns>(),
        name: Some(device_name::<E>),
        description: Some(device_description::<E>),
        memory: Some(device_memory::<E>),
        device_type: Some(device_type::<E>),
        caps: Some(device_caps::<E>),
        pci_bus_id: Some(device_pci_bus_id::<E>),
        supports_op: Some(device_supports_op::<E>),
        supports_buffer_type: Some(device_supports_buffer_type::<E>),
        offload_op: Some(device_offload_op::<E>),
        buffer_type: Some(device_buffer_type::<E>),
        host_buffer_type: Some(device_host_buffer_type::<E>),
        init_backend: Some(device_init_backend::<E>),
        new_event: Some(device_new_event::<E>),
    };
    const BUFFER_TYPE: &'static AbiBufferTypeFns = &AbiBufferTypeFns {
        size: size_of::<AbiBufferTypeFns>(),
        name: Some(buft_name::<E>),
        alignment: Some(buft_alignment::<E>),
        max_size: Some(buft_max_size::<E>),
        is_host: Some(buft_is_host::<E>),
        alloc_size: Some(buft_alloc_size::<E>),
        alloc_buffer: Some(buft_alloc_buffer::<E>),
    };
    const BUFFER: &'static AbiBufferFns = &AbiBufferFns {
        size: size_of::<AbiBufferFns>(),
        free: Some(buffer_free::<E>),
        buffer_size: Some(buffer_size::<E>),
        host_base: Some(buffer_host_base::<E>),
        host_writable: Some(buffer_host_writable::<E>),
        usage: Some(buffer_usage::<E>),
        set_usage: Some(buffer_set_usage::<E>),
        set_bytes: Some(buffer_set_bytes::<E>),
        get_bytes: Some(buffer_get_bytes::<E>),
        fill: Some(buffer_fill::<E>),
        copy_from: Some(buffer_copy_from::<E>),
        reset: Some(buffer_reset::<E>),
    };
    const BACKEND: &'static AbiBackendFns = &AbiBackendFns {
        size: size_of::<AbiBackendFns>(),
        free: Some(backend_free::<E>),
        name: Some(backend_name::<E>),
        set_tensor_async: Some(backend_set_tensor_async::<E>),
        get_tensor_async: Some(backend_get_tensor_async::<E>),
        synchronize: Some(backend_synchronize::<E>),
        compute: Some(backend_compute::<E>),
        record_event: Some(backend_record_event::<E>),
        wait_event: Some(backend_wait_event::<E>),
        set_n_threads: Some(backend_set_n_threads::<E>),
    };
    const EVENT: &'static AbiEventFns = &AbiEventFns {
        size: size_of::<AbiEventFns>(),
        free: Some(event_free::<E>),
        synchronize: Some(event_synchronize::<E>),
    };
}

// ---- reg ----------------------------------------------------------------------------------

unsafe extern "C" fn reg_name<E: Exporter>(_ctx: Ctx) -> AbiStr {
    E::catch(|| AbiStr::new(E::reg().name())).unwrap_or(AbiStr::EMPTY)
}

unsafe extern "C" fn reg_device_count<E: Exporter>(ctx: Ctx) -> usize {
    // SAFETY: `ctx` is the reg context this plugin made in `export_reg`.
    E::catch(|| unsafe { obj::<ExportedReg>(ctx) }.map_or(0, |r| r.devices.len())).unwrap_or(0)
}

unsafe extern "C" fn reg_device<E: Exporter>(ctx: Ctx, index: usize, out: *mut AbiDevice) -> bool {
    E::catch(|| {
        // SAFETY: `ctx` is the reg context this plugin made in `export_reg`.
        let Ok(reg) = (unsafe { obj::<ExportedReg>(ctx) }) else { return false };
        let Some(d) = reg.devices.get(index) else { return false };
        let handle = AbiDevice { fns: Tables::<E>::DEVICE, ctx: (d as *const ExportedDevice).cast_mut().cast() };
        // SAFETY: the host passes a writable AbiDevice (or null, refused by `put`).
        unsafe { put(out, handle) }.is_ok()
    })
    .unwrap_or(false)
}

unsafe extern "C" fn reg_feature<E: Exporter>(_ctx: Ctx, index: usize, name: *mut AbiStr, value: *mut AbiStr) -> bool {
    E::catch(|| {
        let Some(Extension::Features(features)) = E::reg().extension(extension::FEATURES) else { return false };
        let Some((n, v)) = features().get(index) else { return false };
        // SAFETY: the host passes writable AbiStrs (or null, refused by `put`).
        unsafe { put(name, AbiStr::new(n)).and_then(|()| put(value, AbiStr::new(v))) }.is_ok()
    })
    .unwrap_or(false)
}

// ---- device -------------------------------------------------------------------------------

/// # Safety
/// `ctx` must be a device context this plugin handed out.
unsafe fn device<'a>(ctx: Ctx) -> Result<&'a ExportedDevice> {
    // SAFETY: forwarded from the caller.
    unsafe { obj::<ExportedDevice>(ctx) }
}

unsafe extern "C" fn device_name<E: Exporter>(ctx: Ctx) -> AbiStr {
    // SAFETY: `ctx` is a device context of this plugin (the host's side of the contract).
    E::catch(|| unsafe { device(ctx) }.map_or(AbiStr::EMPTY, |d| AbiStr::new(d.device.name()))).unwrap_or(AbiStr::EMPTY)
}

unsafe extern "C" fn device_description<E: Exporter>(ctx: Ctx) -> AbiStr {
    // SAFETY: as in `device_name`.
    E::catch(|| unsafe { device(ctx) }.map_or(AbiStr::EMPTY, |d| AbiStr::new(d.device.description())))
        .unwrap_or(AbiStr::EMPTY)
}

unsafe extern "C" fn device_memory<E: Exporter>(ctx: Ctx, free: *mut usize, total: *mut usize) {
    let _ = E::catch(|| {
        // SAFETY: as in `device_name`.
        let m = unsafe { device(ctx) }.map(|d| d.device.memory()).unwrap_or_default();
        // SAFETY: the host passes writable usizes (or null, refused by `put`).
        unsafe {
            let _ = put(free, m.free);
            let _ = put(total, m.total);
        }
    });
}

unsafe extern "C" fn device_type<E: Exporter>(ctx: Ctx) -> u32 {
    E::catch(|| {
        // SAFETY: as in `device_name`.
        match unsafe { device(ctx) }.map(|d| d.device.device_type()) {
            Ok(DeviceType::Gpu) => DEVICE_GPU,
            Ok(DeviceType::IGpu) => DEVICE_IGPU,
            Ok(DeviceType::Accel) => DEVICE_ACCEL,
            _ => DEVICE_CPU,
        }
    })
    .unwrap_or(DEVICE_CPU)
}

unsafe extern "C" fn device_caps<E: Exporter>(ctx: Ctx) -> u32 {
    E::catch(|| {
        // SAFETY: as in `device_name`.
        let Ok(d) = (unsafe { device(ctx) }) else { return 0 };
        let c = d.device.caps();
        [(c.async_compute, CAP_ASYNC), (c.host_buffer, CAP_HOST_BUFFER)]
            .into_iter()
            .chain([(c.buffer_from_host_ptr, CAP_BUFFER_FROM_HOST_PTR), (c.events, CAP_EVENTS)])
            .filter(|(on, _)| *on)
            .fold(0, |bits, (_, bit)| bits | bit)
    })
    .unwrap_or(0)
}

unsafe extern "C" fn device_pci_bus_id<E: Exporter>(ctx: Ctx) -> AbiStr {
    E::catch(|| {
        // SAFETY: as in `device_name`.
        unsafe { device(ctx) }.ok().and_then(|d| d.device.pci_bus_id()).map_or(AbiStr::EMPTY, AbiStr::new)
    })
    .unwrap_or(AbiStr::EMPTY)
}

/// Asks `f` about node `node` of the described graph; any error is a "no".
///
/// # Safety
/// `ctx` must be a device context of this plugin and `graph` a valid graph descriptor.
unsafe fn ask_node<E: Exporter>(
    ctx: Ctx,
    graph: *const AbiGraph,
    node: usize,
    f: fn(&dyn Device, &crate::graph::Graph, TensorId) -> bool,
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

unsafe extern "C" fn device_supports_op<E: Exporter>(ctx: Ctx, graph: *const AbiGraph, node: usize) -> bool {
    // SAFETY: the host passes a device context of this plugin and a valid graph.
    unsafe { ask_node::<E>(ctx, graph, node, |d, g, id| d.supports_op(g, id)) }
}

unsafe extern "C" fn device_offload_op<E: Exporter>(ctx: Ctx, graph: *const AbiGraph, node: usize) -> bool {
    // SAFETY: as in `device_supports_op`.
    unsafe { ask_node::<E>(ctx, graph, node, |d, g, id| d.offload_op(g, id)) }
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

unsafe extern "C" fn device_supports_buffer_type<E: Exporter>(ctx: Ctx, bt: *const AbiBufferTypeRef) -> bool {
    E::catch(|| {
        // SAFETY: as in `device_name`.
        let Ok(d) = (unsafe { device(ctx) }) else { return false };
        // SAFETY: the host passes a valid AbiBufferTypeRef or null.
        let Ok(r) = (unsafe { read_sized(bt, "buffer type") }) else { return false };
        if !r.own.is_null() {
            // SAFETY: `own` is a buffer type context this plugin handed out.
            return unsafe { obj::<ExportedBufferType>(r.own) }
                .is_ok_and(|b| d.device.supports_buffer_type(b.buffer_type));
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

fn buffer_type_handle<E: Exporter>(b: &ExportedBufferType) -> AbiBufferType {
    AbiBufferType { fns: Tables::<E>::BUFFER_TYPE, ctx: (b as *const ExportedBufferType).cast_mut().cast() }
}

unsafe extern "C" fn device_buffer_type<E: Exporter>(ctx: Ctx, out: *mut AbiBufferType) -> bool {
    E::catch(|| {
        // SAFETY: as in `device_name`; `out` is writable or null (refused by `put`).
        unsafe { device(ctx).and_then(|d| put(out, buffer_type_handle::<E>(&d.buffer_type))) }.is_ok()
    })
    .unwrap_or(false)
}

unsafe extern "C" fn device_host_buffer_type<E: Exporter>(ctx: Ctx, out: *mut AbiBufferType) -> bool {
    E::catch(|| {
        // SAFETY: as in `device_name`.
        let Ok(d) = (unsafe { device(ctx) }) else { return false };
        let Some(b) = &d.host_buffer_type else { return false };
        // SAFETY: `out` is writable or null (refused by `put`).
        unsafe { put(out, buffer_type_handle::<E>(b)) }.is_ok()
    })
    .unwrap_or(false)
}

unsafe extern "C" fn device_init_backend<E: Exporter>(ctx: Ctx, out: *mut AbiBackend, err: *mut AbiError) -> i32 {
    run::<E>(err, "init_backend", || {
        // SAFETY: as in `device_name`.
        let d = unsafe { device(ctx) }?;
        let backend = Box::new(ExportedBackend { backend: d.device.init_backend()? });
        let handle = AbiBackend { fns: Tables::<E>::BACKEND, ctx: Box::into_raw(backend).cast() };
        // SAFETY: `out` is writable or null; on failure the backend is taken back and dropped.
        unsafe { put(out, handle) }.inspect_err(|_| {
            // SAFETY: `handle.ctx` came from `Box::into_raw` just above and was not handed out.
            drop(unsafe { Box::from_raw(handle.ctx.cast::<ExportedBackend>()) });
        })
    })
}

unsafe extern "C" fn device_new_event<E: Exporter>(ctx: Ctx, out: *mut AbiEvent, err: *mut AbiError) -> i32 {
    run::<E>(err, "new_event", || {
        // SAFETY: as in `device_name`.
        let d = unsafe { device(ctx) }?;
        let handle = match d.device.new_event()? {
            None => AbiEvent { fns: core::ptr::null(), ctx: core::ptr::null_mut() },
            Some(event) => {
                AbiEvent { fns: Tables::<E>::EVENT, ctx: Box::into_raw(Box::new(ExportedEvent { event })).cast() }
            }
        };
        // SAFETY: `out` is writable or null; on failure the event is taken back and dropped.
        unsafe { put(out, handle) }.inspect_err(|_| {
            if !handle.ctx.is_null() {
                // SAFETY: `handle.ctx` came from `Box::into_raw` just above and was not handed out.
                drop(unsafe { Box::from_raw(handle.ctx.cast::<ExportedEvent>()) });
            }
        })
    })
}

// ---- buffer type --------------------------------------------------------------------------

/// # Safety
/// `ctx` must be a buffer type context this plugin handed out.
unsafe fn buft(ctx: Ctx) -> Result<&'static dyn BufferType> {
    // SAFETY: forwarded from the caller; buffer type contexts live as long as the plugin.
    unsafe { obj::<ExportedBufferType>(ctx) }.map(|b| b.buffer_type)
}

unsafe extern "C" fn buft_name<E: Exporter>(ctx: Ctx) -> AbiStr {
    // SAFETY: `ctx` is a buffer type context of this plugin.
    E::catch(|| unsafe { buft(ctx) }.map_or(AbiStr::EMPTY, |b| AbiStr::new(b.name()))).unwrap_or(AbiStr::EMPTY)
}

unsafe extern "C" fn buft_alignment<E: Exporter>(ctx: Ctx) -> usize {
    // SAFETY: as in `buft_name`.
    E::catch(|| unsafe { buft(ctx) }.map_or(0, |b| b.alignment())).unwrap_or(0)
}

unsafe extern "C" fn buft_max_size<E: Exporter>(ctx: Ctx) -> usize {
    // SAFETY: as in `buft_name`.
    E::catch(|| unsafe { buft(ctx) }.map_or(0, |b| b.max_size())).unwrap_or(0)
}

unsafe extern "C" fn buft_is_host<E: Exporter>(ctx: Ctx) -> bool {
    // SAFETY: as in `buft_name`.
    E::catch(|| unsafe { buft(ctx) }.is_ok_and(|b| b.is_host())).unwrap_or(false)
}

unsafe extern "C" fn buft_alloc_size<E: Exporter>(ctx: Ctx, tensor: *const AbiTensor) -> usize {
    E::catch(|| {
        // SAFETY: as in `buft_name`.
        let Ok(b) = (unsafe { buft(ctx) }) else { return 0 };
        // SAFETY: the host passes a valid descriptor or null.
        let Ok(d) = (unsafe { read_sized(tensor, "tensor") }) else { return 0 };
        decode_lone_tensor(&d, String::new()).map_or(0, |t| b.alloc_size(&t))
    })
    .unwrap_or(0)
}

unsafe extern "C" fn buft_alloc_buffer<E: Exporter>(
    ctx: Ctx,
    size: usize,
    out: *mut AbiBuffer,
    err: *mut AbiError,
) -> i32 {
    run::<E>(err, "alloc_buffer", || {
        // SAFETY: as in `buft_name`.
        let buffer = unsafe { buft(ctx) }?.alloc_buffer(size)?;
        let handle =
            AbiBuffer { fns: Tables::<E>::BUFFER, ctx: Box::into_raw(Box::new(ExportedBuffer { buffer })).cast() };
        // SAFETY: `out` is writable or null; on failure the buffer is taken back and dropped.
        unsafe { put(out, handle) }.inspect_err(|_| {
            // SAFETY: `handle.ctx` came from `Box::into_raw` just above and was not handed out.
            drop(unsafe { Box::from_raw(handle.ctx.cast::<ExportedBuffer>()) });
        })
    })
}

// ---- buffer -------------------------------------------------------------------------------

/// # Safety
/// `ctx` must be a live buffer context this plugin handed out.
unsafe fn buffer<'a>(ctx: Ctx) -> Result<&'a Arc<dyn Buffer>> {
    // SAFETY: forwarded from the caller.
    unsafe { obj::<ExportedBuffer>(ctx) }.map(|b| &b.buffer)
}

unsafe extern "C" fn buffer_free<E: Exporter>(ctx: Ctx) {
    if ctx.is_null() {
        return;
    }
    // SAFETY: `ctx` came from `Box::into_raw` in `buft_alloc_buffer`; the host frees each
    // buffer exactly once.
    let _ = E::catch(|| drop(unsafe { Box::from_raw(ctx.cast::<ExportedBuffer>()) }));
}

unsafe extern "C" fn buffer_size<E: Exporter>(ctx: Ctx) -> usize {
    // SAFETY: `ctx` is a live buffer context of this plugin.
    E::catch(|| unsafe { buffer(ctx) }.map_or(0, |b| b.size())).unwrap_or(0)
}

unsafe extern "C" fn buffer_host_base<E: Exporter>(ctx: Ctx) -> *mut u8 {
    E::catch(|| {
        // SAFETY: as in `buffer_size`.
        let Ok(b) = (unsafe { buffer(ctx) }) else { return core::ptr::null_mut() };
        b.host_ptr_mut().or_else(|| b.host_ptr().map(<*const u8>::cast_mut)).unwrap_or(core::ptr::null_mut())
    })
    .unwrap_or(core::ptr::null_mut())
}

unsafe extern "C" fn buffer_host_writable<E: Exporter>(ctx: Ctx) -> bool {
    // SAFETY: as in `buffer_size`.
    E::catch(|| unsafe { buffer(ctx) }.is_ok_and(|b| b.host_ptr_mut().is_some())).unwrap_or(false)
}

unsafe extern "C" fn buffer_usage<E: Exporter>(ctx: Ctx) -> u8 {
    // SAFETY: as in `buffer_size`.
    E::catch(|| unsafe { buffer(ctx) }.map_or(0, |b| b.usage() as u8)).unwrap_or(0)
}

unsafe extern "C" fn buffer_set_usage<E: Exporter>(ctx: Ctx, usage: u8) {
    // SAFETY: as in `buffer_size`.
    let _ = E::catch(|| unsafe { buffer(ctx) }.map(|b| b.set_usage(BufferUsage::from_u8(usage))));
}

unsafe extern "C" fn buffer_set_bytes<E: Exporter>(
    ctx: Ctx,
    offset: usize,
    src: *const u8,
    len: usize,
    err: *mut AbiError,
) -> i32 {
    run::<E>(err, "set_bytes", || {
        // SAFETY: `ctx` is a live buffer context; the host promises `src` holds `len` bytes.
        unsafe { buffer(ctx)?.set_bytes(offset, super::desc::abi_slice(src, len, "source bytes")?) }
    })
}

unsafe extern "C" fn buffer_get_bytes<E: Exporter>(
    ctx: Ctx,
    offset: usize,
    dst: *mut u8,
    len: usize,
    err: *mut AbiError,
) -> i32 {
    run::<E>(err, "get_bytes", || {
        // SAFETY: `ctx` is a live buffer context of this plugin.
        let b = unsafe { buffer(ctx) }?;
        if len == 0 {
            return Ok(());
        }
        if dst.is_null() {
            return Err(Error::InvalidParam { op: "GET_BYTES", message: "null destination".into() });
        }
        // SAFETY: non-null; the host promises `dst` is writable for `len` bytes and not
        // otherwise accessed during the call.
        b.get_bytes(offset, unsafe { core::slice::from_raw_parts_mut(dst, len) })
    })
}

unsafe extern "C" fn buffer_fill<E: Exporter>(
    ctx: Ctx,
    offset: usize,
    len: usize,
    value: u8,
    err: *mut AbiError,
) -> i32 {
    // SAFETY: `ctx` is a live buffer context of this plugin.
    run::<E>(err, "fill", || unsafe { buffer(ctx) }?.fill(offset, len, value))
}

unsafe extern "C" fn buffer_copy_from<E: Exporter>(
    ctx: Ctx,
    dst_offset: usize,
    src: *const AbiBufferRef,
    src_offset: usize,
    len: usize,
    copied: *mut bool,
    err: *mut AbiError,
) -> i32 {
    run::<E>(err, "copy_from", || {
        // SAFETY: `ctx` is a live buffer context of this plugin.
        let b = unsafe { buffer(ctx) }?;
        // SAFETY: the host passes a valid reference or null.
        let r = unsafe { read_sized(src, "source buffer") }?;
        // SAFETY: the reference follows the ABI (the host's side of the contract).
        let source = unsafe { resolve(&r) }?;
        let done = b.copy_from(dst_offset, &*source, src_offset, len)?;
        // SAFETY: `copied` is writable or null (refused by `put`).
        unsafe { put(copied, done) }
    })
}

unsafe extern "C" fn buffer_reset<E: Exporter>(ctx: Ctx) {
    // SAFETY: `ctx` is a live buffer context of this plugin.
    let _ = E::catch(|| unsafe { buffer(ctx) }.map(|b| b.reset()));
}

// ---- backend ------------------------------------------------------------------------------

/// # Safety
/// `ctx` must be a live backend context this plugin handed out, used by one thread at a time.
unsafe fn backend<'a>(ctx: Ctx) -> Result<&'a mut (dyn Backend + 'static)> {
    // SAFETY: forwarded from the caller.
    unsafe { obj_mut::<ExportedBackend>(ctx) }.map(|b| &mut *b.backend)
}

unsafe extern "C" fn backend_free<E: Exporter>(ctx: Ctx) {
    if ctx.is_null() {
        return;
    }
    // SAFETY: `ctx` came from `Box::into_raw` in `device_init_backend`; the host frees each
    // backend exactly once.
    let _ = E::catch(|| drop(unsafe { Box::from_raw(ctx.cast::<ExportedBackend>()) }));
}

unsafe extern "C" fn backend_name<E: Exporter>(ctx: Ctx) -> AbiStr {
    // SAFETY: `ctx` is a live backend context; the name lives as long as the backend.
    E::catch(|| unsafe { backend(ctx) }.map_or(AbiStr::EMPTY, |b| AbiStr::new(b.name()))).unwrap_or(AbiStr::EMPTY)
}

/// The memory behind a buffer reference, as tensor data at offset 0.
///
/// # Safety
/// `r` must be null or a valid reference following the ABI.
unsafe fn tensor_data(r: *const AbiBufferRef) -> Result<TensorData> {
    // SAFETY: forwarded from the caller.
    let r = unsafe { read_sized(r, "buffer") }?;
    // SAFETY: forwarded from the caller.
    Ok(TensorData { buffer: unsafe { resolve(&r) }?, offset: 0 })
}

unsafe extern "C" fn backend_set_tensor_async<E: Exporter>(
    ctx: Ctx,
    dst: *const AbiBufferRef,
    offset: usize,
    src: *const u8,
    len: usize,
    err: *mut AbiError,
) -> i32 {
    run::<E>(err, "set_tensor_async", || {
        // SAFETY: the host passes a live backend context and a valid reference, and keeps
        // `src` valid for `len` bytes until the next synchronize.
        unsafe {
            let td = tensor_data(dst)?;
            if len > 0 && src.is_null() {
                return Err(Error::InvalidParam { op: "SET_TENSOR", message: "null source".into() });
            }
            backend(ctx)?.set_tensor_async(&td, offset, src, len)
        }
    })
}

unsafe extern "C" fn backend_get_tensor_async<E: Exporter>(
    ctx: Ctx,
    src: *const AbiBufferRef,
    offset: usize,
    dst: *mut u8,
    len: usize,
    err: *mut AbiError,
) -> i32 {
    run::<E>(err, "get_tensor_async", || {
        // SAFETY: the host passes a live backend context and a valid reference, and keeps
        // `dst` valid and untouched for `len` bytes until the next synchronize.
        unsafe {
            let td = tensor_data(src)?;
            if len > 0 && dst.is_null() {
                return Err(Error::InvalidParam { op: "GET_TENSOR", message: "null destination".into() });
            }
            backend(ctx)?.get_tensor_async(&td, offset, dst, len)
        }
    })
}

unsafe extern "C" fn backend_synchronize<E: Exporter>(ctx: Ctx, err: *mut AbiError) -> i32 {
    // SAFETY: `ctx` is a live backend context of this plugin.
    run::<E>(err, "synchronize", || unsafe { backend(ctx) }?.synchronize())
}

unsafe extern "C" fn backend_compute<E: Exporter>(
    ctx: Ctx,
    graph: *const AbiGraph,
    first: usize,
    last: usize,
    err: *mut AbiError,
) -> i32 {
    run::<E>(err, "compute", || {
        // SAFETY: the host passes a valid graph whose buffer references follow the ABI.
        let g = unsafe { decode_graph(graph, Some(&mut |r: &AbiBufferRef| resolve(r))) }?;
        if first > last || last > g.nodes().len() {
            return Err(Error::InvalidParam {
                op: "COMPUTE",
                message: format!("node range {first}..{last} is outside the {} nodes given", g.nodes().len()),
            });
        }
        // SAFETY: `ctx` is a live backend context of this plugin.
        unsafe { backend(ctx) }?.compute(&g, first..last)
    })
}

/// # Safety
/// `ctx` must be a live event context this plugin handed out.
unsafe fn event<'a>(ctx: Ctx) -> Result<&'a dyn Event> {
    // SAFETY: forwarded from the caller.
    unsafe { obj::<ExportedEvent>(ctx) }.map(|e| &*e.event)
}

unsafe extern "C" fn backend_record_event<E: Exporter>(ctx: Ctx, ev: Ctx, err: *mut AbiError) -> i32 {
    // SAFETY: `ctx` and `ev` are live backend and event contexts of this plugin.
    run::<E>(err, "record_event", || unsafe { backend(ctx)?.record_event(event(ev)?) })
}

unsafe extern "C" fn backend_wait_event<E: Exporter>(ctx: Ctx, ev: Ctx, err: *mut AbiError) -> i32 {
    // SAFETY: `ctx` and `ev` are live backend and event contexts of this plugin.
    run::<E>(err, "wait_event", || unsafe { backend(ctx)?.wait_event(event(ev)?) })
}

unsafe extern "C" fn backend_set_n_threads<E: Exporter>(ctx: Ctx, n: usize, err: *mut AbiError) -> i32 {
    run::<E>(err, "set_n_threads", || {
        let Some(Extension::SetThreads(f)) = E::reg().extension(extension::SET_THREADS) else {
            return Err(Error::Unsupported {
                backend: E::reg().name().into(),
                op: "SET_N_THREADS",
                tensor: String::new(),
            });
        };
        // SAFETY: `ctx` is a live backend context of this plugin.
        f(unsafe { backend(ctx) }?, n)
    })
}

// ---- event --------------------------------------------------------------------------------

unsafe extern "C" fn event_free<E: Exporter>(ctx: Ctx) {
    if ctx.is_null() {
        return;
    }
    // SAFETY: `ctx` came from `Box::into_raw` in `device_new_event`; the host frees each event
    // exactly once.
    let _ = E::catch(|| drop(unsafe { Box::from_raw(ctx.cast::<ExportedEvent>()) }));
}

unsafe extern "C" fn event_synchronize<E: Exporter>(ctx: Ctx, err: *mut AbiError) -> i32 {
    // SAFETY: `ctx` is a live event context of this plugin.
    run::<E>(err, "event_synchronize", || unsafe { event(ctx) }?.synchronize())
}

/// Defines a plugin's entry points for a backend family.
///
/// ```ignore
/// tessera_core::export_backend!(reg: &my_backend::MY_REG, score: my_score);
/// ```
///
/// `reg` is a `&'static dyn BackendReg` expression; `score` (optional) a `fn() -> u32`
/// returning 0 when the plugin cannot run on this machine and otherwise a number that is
/// larger the better suited this build is. The crate must be a `cdylib` with `std`. Defines
/// `tessera_backend_abi_version`, `tessera_backend_init` and, with `score`,
/// `tessera_backend_score`; every call into the plugin catches panics.
#[macro_export]
macro_rules! export_backend {
    (reg: $reg:expr $(, score: $score:expr)? $(,)?) => {
        #[doc(hidden)]
        pub struct __TesseraPluginExport;

        impl $crate::plugin::export::Exporter for __TesseraPluginExport {
            fn reg() -> &'static dyn $crate::registry::BackendReg {
                $reg
            }
            fn catch<R>(f: impl FnOnce() -> R) -> ::core::result::Result<R, ::std::string::String> {
                ::std::panic::catch_unwind(::std::panic::AssertUnwindSafe(f))
                    .map_err(|p| $crate::plugin::export::panic_message(&*p))
            }
        }

        static __TESSERA_REG: ::std::sync::OnceLock<$crate::plugin::export::RegHandle> = ::std::sync::OnceLock::new();

        /// The plugin ABI version this plugin was built for.
        #[unsafe(no_mangle)]
        pub extern "C" fn tessera_backend_abi_version() -> u32 {
            $crate::plugin::abi::ABI_VERSION
        }

        /// The plugin's reg table, or null with `err` filled in.
        ///
        /// # Safety
        /// `host` and `err` must be null or valid, as the plugin ABI describes.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn tessera_backend_init(
            host: *const $crate::plugin::abi::AbiHostInfo,
            err: *mut $crate::plugin::abi::AbiError,
        ) -> *const $crate::plugin::abi::AbiReg {
            // SAFETY: forwarded from the host, which follows the plugin ABI.
            unsafe {
                $crate::plugin::export::init::<__TesseraPluginExport>(host, err, || {
                    *__TESSERA_REG.get_or_init($crate::plugin::export::export_reg::<__TesseraPluginExport>)
                })
            }
        }

        $(
            /// How well this build suits this machine (0: it cannot run here).
            #[unsafe(no_mangle)]
            pub extern "C" fn tessera_backend_score() -> u32 {
                $crate::plugin::export::score::<__TesseraPluginExport>($score)
            }
        )?
    };
}
