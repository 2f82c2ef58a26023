//! The host side: a plugin's C tables wrapped back into tessera's traits.
//!
//! [`wrap_reg`] reads and checks a reg table once: names, types and capabilities are copied
//! into host memory, every function table is checked for the functions it must have, and
//! the family, its devices and buffer types become `'static` objects (leaked, like every
//! enumerated device, a few hundred bytes per load). Buffers, backends and events are
//! ordinary owned objects that free their plugin handle when dropped.
//!
//! Unloading: [`PluginReg::shutdown`] refuses while any buffer, backend or event of the
//! plugin lives; otherwise it marks the plugin dead, waits for calls in flight on other
//! threads, and calls the plugin's `release`. The `'static` wrappers stay valid after that:
//! a dead plugin's device answers from its copied data, reports no memory, supports nothing
//! and creates nothing, so unmapping the library afterwards is sound.

use alloc::boxed::Box;
use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::any::Any;
use core::mem::size_of;
use core::ops::Range;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};

use super::abi::*;
use super::desc::{abi_string, encode_graph, encode_lone_tensor};
use crate::backend::{Backend, Event};
use crate::buffer::{check_range, same_buffer_type, Buffer, BufferBase, BufferType, BufferUsage, TensorData};
use crate::device::{Device, DeviceCaps, DeviceType, MemoryInfo};
use crate::error::{Error, Result};
use crate::graph::Graph;
use crate::registry::{extension, BackendReg, Extension};
use crate::tensor::{Tensor, TensorId};

/// Most devices and features a reg may report.
const MAX_DEVICES: usize = 1024;
const MAX_FEATURES: usize = 256;

/// The state one loaded plugin's objects share: whether it is still loaded, the calls in
/// flight, and the objects that hold plugin handles.
pub struct PluginShared {
    /// The reg's name, for messages.
    name: String,
    alive: AtomicBool,
    in_flight: AtomicUsize,
    live_objects: AtomicUsize,
}

/// A call into the plugin in progress; shutdown waits until none is left.
struct Call<'a>(&'a PluginShared);

impl Drop for Call<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

impl PluginShared {
    fn enter(&self) -> Option<Call<'_>> {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        if self.alive.load(Ordering::SeqCst) {
            Some(Call(self))
        } else {
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            None
        }
    }

    fn enter_or_err(&self) -> Result<Call<'_>> {
        self.enter().ok_or_else(|| self.error("has been unloaded"))
    }

    fn error(&self, message: &str) -> Error {
        Error::Plugin { plugin: self.name.clone(), message: message.into() }
    }

    /// The error a failed call reported.
    fn call_error(&self, who: &str, code: i32, err: &AbiError, requested: usize) -> Error {
        let mut message = err.message();
        if message.is_empty() {
            message = format!("failed with status {code} and no message");
        }
        match code {
            STATUS_PANIC => Error::Plugin { plugin: self.name.clone(), message },
            STATUS_OUT_OF_MEMORY => Error::OutOfMemory { what: format!("{who}: {message}"), requested },
            _ => Error::Backend { backend: who.into(), message },
        }
    }

    fn status(&self, who: &str, code: i32, err: &AbiError) -> Result<()> {
        if code == STATUS_OK {
            Ok(())
        } else {
            Err(self.call_error(who, code, err, 0))
        }
    }
}

/// Copies a function table of `size` bytes (its first field) into a `T`, the fields past a
/// shorter (older) table left as `None`.
///
/// # Safety
/// `ptr` must be null or point to a table of this kind whose first field is its size, valid
/// for that many bytes.
unsafe fn read_table<T: Copy>(ptr: *const T, what: &str) -> Result<T> {
    if ptr.is_null() || !ptr.is_aligned() {
        return Err(Error::Backend { backend: what.into(), message: "null or misaligned function table".into() });
    }
    // SAFETY: non-null and aligned; every table starts with its size as a usize.
    let size = unsafe { ptr.cast::<usize>().read() };
    if size < size_of::<usize>() {
        return Err(Error::Backend { backend: what.into(), message: format!("table claims {size} bytes") });
    }
    // SAFETY: every table type here is made of integers, raw pointers and `Option`s of
    // function pointers, for all of which all-zero bytes are a valid value (0, null, None).
    let mut table: T = unsafe { core::mem::zeroed() };
    // SAFETY: the source is valid for `size` bytes (the plugin's promise) and we copy at most
    // that many, into a `T` we own.
    unsafe {
        core::ptr::copy_nonoverlapping(ptr.cast::<u8>(), (&mut table as *mut T).cast::<u8>(), size.min(size_of::<T>()));
    }
    Ok(table)
}

/// The function `f` of a table, or an error naming it (an older plugin's table may lack it).
fn required<F>(f: Option<F>, table: &str, field: &str) -> Result<F> {
    f.ok_or_else(|| Error::Backend {
        backend: table.into(),
        message: format!("lacks the required function `{field}` (a plugin built for an older or broken ABI?)"),
    })
}

fn device_type_of(v: u32) -> DeviceType {
    match v {
        DEVICE_GPU => DeviceType::Gpu,
        DEVICE_IGPU => DeviceType::IGpu,
        DEVICE_ACCEL => DeviceType::Accel,
        _ => DeviceType::Cpu,
    }
}

/// A loaded backend family.
pub struct PluginReg {
    shared: Arc<PluginShared>,
    name: String,
    extensions: u32,
    features: Vec<(String, String)>,
    devices: Vec<&'static PluginDevice>,
    ctx: Ctx,
    release: Option<unsafe extern "C" fn(Ctx)>,
}

// SAFETY: reg functions may be called from any thread (the ABI's contract); the rest is
// immutable data and atomics.
unsafe impl Send for PluginReg {}
// SAFETY: as above.
unsafe impl Sync for PluginReg {}

/// A device of a loaded family.
pub struct PluginDevice {
    shared: Arc<PluginShared>,
    reg: AtomicPtr<PluginReg>,
    fns: AbiDeviceFns,
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

/// A buffer type of a loaded family.
pub struct PluginBufferType {
    shared: Arc<PluginShared>,
    fns: AbiBufferTypeFns,
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

/// Wraps the reg table a plugin's `tessera_backend_init` returned. `origin` names the plugin
/// in errors (its path).
///
/// # Safety
/// `reg` must be null or the table the plugin's init returned, and the plugin must stay
/// loaded until [`PluginReg::shutdown`] has succeeded.
pub unsafe fn wrap_reg(reg: *const AbiReg, origin: &str) -> Result<&'static PluginReg> {
    let fail = |message: String| Error::Plugin { plugin: origin.into(), message };
    if reg.is_null() {
        return Err(fail("tessera_backend_init returned no reg table".into()));
    }
    #[repr(C)]
    struct Header {
        size: usize,
        abi_version: u32,
    }
    // SAFETY: non-null; every version of the reg table starts with this header.
    let header = unsafe { reg.cast::<Header>().read() };
    if header.abi_version != ABI_VERSION {
        return Err(fail(format!(
            "its reg table speaks plugin ABI {}, this host speaks {ABI_VERSION}; rebuild the plugin against this tessera",
            header.abi_version
        )));
    }
    if header.size < size_of::<Header>() {
        return Err(fail(format!("its reg table claims a size of {} bytes", header.size)));
    }
    // SAFETY: the plugin promises the table is valid for its size.
    let table = unsafe { read_table(reg, "reg table") }.map_err(|e| fail(plain(e)))?;
    let at = |e: Error| fail(plain(e));
    let name_fn = required(table.name, "reg table", "name").map_err(at)?;
    let count_fn = required(table.device_count, "reg table", "device_count").map_err(at)?;
    let device_fn = required(table.device, "reg table", "device").map_err(at)?;
    // SAFETY: functions of the plugin's reg table, called with its context.
    let name = unsafe { abi_string(name_fn(table.ctx)) };
    if name.is_empty() {
        return Err(fail("its reg has an empty name".into()));
    }
    // SAFETY: as above.
    let count = unsafe { count_fn(table.ctx) };
    if count > MAX_DEVICES {
        return Err(fail(format!("its reg reports {count} devices (at most {MAX_DEVICES})")));
    }
    let mut features = Vec::new();
    if let Some(feature) = table.feature {
        for i in 0..MAX_FEATURES {
            let (mut n, mut v) = (AbiStr::EMPTY, AbiStr::EMPTY);
            // SAFETY: a function of the reg table, with its context and writable outputs.
            if !unsafe { feature(table.ctx, i, &mut n, &mut v) } {
                break;
            }
            // SAFETY: strings the plugin returned, valid as long as the reg.
            features.push(unsafe { (abi_string(n), abi_string(v)) });
        }
    }
    let shared = Arc::new(PluginShared {
        name: name.clone(),
        alive: AtomicBool::new(true),
        in_flight: AtomicUsize::new(0),
        live_objects: AtomicUsize::new(0),
    });
    let mut devices = Vec::with_capacity(count);
    for i in 0..count {
        let mut handle = AbiDevice { fns: core::ptr::null(), ctx: core::ptr::null_mut() };
        // SAFETY: a function of the reg table, with its context and a writable output.
        if !unsafe { device_fn(table.ctx, i, &mut handle) } {
            return Err(fail(format!("its reg reports {count} devices but has no device {i}")));
        }
        // SAFETY: a device handle the plugin just returned.
        let device = unsafe { wrap_device(&shared, handle) }.map_err(|e| fail(format!("device {i}: {}", plain(e))))?;
        devices.push(&*Box::leak(Box::new(device)));
    }
    let reg: &'static PluginReg = Box::leak(Box::new(PluginReg {
        shared,
        name,
        extensions: table.extensions,
        features,
        devices,
        ctx: table.ctx,
        release: table.release,
    }));
    for d in &reg.devices {
        d.reg.store((reg as *const PluginReg).cast_mut(), Ordering::Release);
    }
    Ok(reg)
}

/// An error's message without the variant's prefix, for a one-line reason.
fn plain(e: Error) -> String {
    match e {
        Error::Backend { backend, message } => format!("{backend} {message}"),
        e => format!("{e}"),
    }
}

/// # Safety
/// `handle` must be a device handle the plugin returned.
unsafe fn wrap_device(shared: &Arc<PluginShared>, handle: AbiDevice) -> Result<PluginDevice> {
    // SAFETY: the plugin's device function table.
    let fns = unsafe { read_table(handle.fns, "device table") }?;
    let t = "device table";
    let name_fn = required(fns.name, t, "name")?;
    let description_fn = required(fns.description, t, "description")?;
    required(fns.memory, t, "memory")?;
    let type_fn = required(fns.device_type, t, "device_type")?;
    let caps_fn = required(fns.caps, t, "caps")?;
    required(fns.supports_op, t, "supports_op")?;
    required(fns.supports_buffer_type, t, "supports_buffer_type")?;
    let buft_fn = required(fns.buffer_type, t, "buffer_type")?;
    required(fns.init_backend, t, "init_backend")?;
    let ctx = handle.ctx;
    // SAFETY: the functions of the device's table, with its context; strings are copied.
    let (name, description, device_type, caps_bits) =
        unsafe { (abi_string(name_fn(ctx)), abi_string(description_fn(ctx)), type_fn(ctx), caps_fn(ctx)) };
    if name.is_empty() {
        return Err(Error::Backend { backend: "device".into(), message: "has an empty name".into() });
    }
    // SAFETY: as above.
    let pci_bus_id = fns.pci_bus_id.map(|f| unsafe { abi_string(f(ctx)) }).filter(|s| !s.is_empty());
    let caps = DeviceCaps {
        async_compute: caps_bits & CAP_ASYNC != 0,
        host_buffer: caps_bits & CAP_HOST_BUFFER != 0,
        buffer_from_host_ptr: caps_bits & CAP_BUFFER_FROM_HOST_PTR != 0,
        events: caps_bits & CAP_EVENTS != 0,
    };
    let mut bt = AbiBufferType { fns: core::ptr::null(), ctx: core::ptr::null_mut() };
    // SAFETY: as above, with a writable output.
    if !unsafe { buft_fn(ctx, &mut bt) } {
        return Err(Error::Backend { backend: name, message: "has no buffer type".into() });
    }
    // SAFETY: a buffer type handle the plugin just returned.
    let buffer_type: &'static PluginBufferType = Box::leak(Box::new(unsafe { wrap_buffer_type(shared, bt) }?));
    let mut host_buffer_type = None;
    if let Some(f) = fns.host_buffer_type {
        let mut hbt = AbiBufferType { fns: core::ptr::null(), ctx: core::ptr::null_mut() };
        // SAFETY: as above.
        if unsafe { f(ctx, &mut hbt) } {
            // SAFETY: a buffer type handle the plugin just returned.
            host_buffer_type = Some(&*Box::leak(Box::new(unsafe { wrap_buffer_type(shared, hbt) }?)));
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

/// # Safety
/// `handle` must be a buffer type handle the plugin returned.
unsafe fn wrap_buffer_type(shared: &Arc<PluginShared>, handle: AbiBufferType) -> Result<PluginBufferType> {
    // SAFETY: the plugin's buffer type function table.
    let fns = unsafe { read_table(handle.fns, "buffer type table") }?;
    let t = "buffer type table";
    let name_fn = required(fns.name, t, "name")?;
    let align_fn = required(fns.alignment, t, "alignment")?;
    let max_fn = required(fns.max_size, t, "max_size")?;
    let host_fn = required(fns.is_host, t, "is_host")?;
    required(fns.alloc_buffer, t, "alloc_buffer")?;
    let ctx = handle.ctx;
    // SAFETY: the functions of the buffer type's table, with its context.
    let (name, alignment, max_size, is_host) =
        unsafe { (abi_string(name_fn(ctx)), align_fn(ctx), max_fn(ctx), host_fn(ctx)) };
    if !alignment.is_power_of_two() {
        return Err(Error::Backend {
            backend: format!("buffer type '{name}'"),
            message: format!("has alignment {alignment}, not a power of two"),
        });
    }
    Ok(PluginBufferType { shared: shared.clone(), fns, ctx, name, alignment, max_size, is_host })
}

impl PluginReg {
    /// Features the plugin reports (name, value), e.g. ("AVX2", "1").
    pub fn features(&self) -> &[(String, String)] {
        &self.features
    }

    /// The devices, as their concrete type.
    pub fn plugin_devices(&self) -> &[&'static PluginDevice] {
        &self.devices
    }

    /// Whether the plugin is still loaded.
    pub fn is_loaded(&self) -> bool {
        self.shared.alive.load(Ordering::SeqCst)
    }

    /// Buffers, backends and events of the plugin that are still alive.
    pub fn live_objects(&self) -> usize {
        self.shared.live_objects.load(Ordering::SeqCst)
    }

    /// Marks the plugin unloaded so its library may be unmapped: refused while any buffer,
    /// backend or event of it lives; afterwards every call into it fails cleanly. Calls
    /// `release` once.
    pub fn shutdown(&self) -> Result<()> {
        let busy = |n: usize| {
            self.shared
                .error(&format!("still has {n} live buffer(s), backend(s) or event(s); drop them before unloading it"))
        };
        let live = self.live_objects();
        if live > 0 {
            return Err(busy(live));
        }
        if !self.shared.alive.swap(false, Ordering::SeqCst) {
            return Ok(());
        }
        while self.shared.in_flight.load(Ordering::SeqCst) != 0 {
            core::hint::spin_loop();
        }
        let live = self.live_objects();
        if live > 0 {
            // Another thread made an object between the first check and the swap.
            self.shared.alive.store(true, Ordering::SeqCst);
            return Err(busy(live));
        }
        if let Some(release) = self.release {
            // SAFETY: the reg's own function and context; no object of the plugin lives and no
            // call is in flight, as `release` requires.
            unsafe { release(self.ctx) };
        }
        Ok(())
    }
}

fn set_threads(backend: &mut dyn Backend, n: usize) -> Result<()> {
    match backend.as_any_mut().downcast_mut::<PluginBackend>() {
        Some(b) => b.set_n_threads(n),
        None => Err(Error::Unsupported { backend: "plugin".into(), op: "SET_N_THREADS", tensor: String::new() }),
    }
}

impl BackendReg for PluginReg {
    fn name(&self) -> &str {
        &self.name
    }
    fn device_count(&self) -> usize {
        self.devices.len()
    }
    fn device(&self, index: usize) -> Option<&'static dyn Device> {
        self.devices.get(index).map(|d| *d as &'static dyn Device)
    }
    fn extension(&self, name: &str) -> Option<Extension> {
        match name {
            extension::SET_THREADS if self.extensions & EXT_SET_N_THREADS != 0 => {
                Some(Extension::SetThreads(set_threads))
            }
            _ => None,
        }
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
    fn reg_ref(&self) -> Option<&'static PluginReg> {
        let p = self.reg.load(Ordering::Acquire);
        // SAFETY: the pointer is null or was set from a leaked `&'static PluginReg` in
        // `wrap_reg`; leaked memory is never freed.
        unsafe { p.cast_const().as_ref() }
    }

    /// The plugin's own context for `bt` if it is a buffer type of the same plugin.
    fn own_buffer_type(&self, bt: &dyn BufferType) -> Option<&'static PluginBufferType> {
        let reg = self.reg_ref()?;
        reg.devices
            .iter()
            .flat_map(|d| core::iter::once(d.buffer_type).chain(d.host_buffer_type))
            .find(|own| same_buffer_type(*own, bt))
    }

    fn ask(
        &self,
        graph: &Graph,
        node: TensorId,
        f: Option<unsafe extern "C" fn(Ctx, *const AbiGraph, usize) -> bool>,
    ) -> bool {
        let Some(f) = f else { return false };
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
        let (Some(f), Some(_call)) = (self.fns.memory, self.shared.enter()) else { return MemoryInfo::default() };
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: a function of the device's table with its context and writable outputs.
        unsafe { f(self.ctx, &mut free, &mut total) };
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
        let Some(f) = self.fns.supports_buffer_type else { return false };
        let Some(_call) = self.shared.enter() else { return false };
        let r = AbiBufferTypeRef {
            size: size_of::<AbiBufferTypeRef>(),
            own: self.own_buffer_type(buffer_type).map_or(core::ptr::null_mut(), |b| b.ctx),
            name: AbiStr::new(buffer_type.name()),
            alignment: buffer_type.alignment(),
            max_size: buffer_type.max_size(),
            is_host: buffer_type.is_host(),
        };
        // SAFETY: a function of the device's table with its context; `r` lives for the call.
        unsafe { f(self.ctx, &r) }
    }
    fn offload_op(&self, graph: &Graph, node: TensorId) -> bool {
        self.ask(graph, node, self.fns.offload_op)
    }
    fn buffer_type(&self) -> &'static dyn BufferType {
        self.buffer_type
    }
    fn host_buffer_type(&self) -> Option<&'static dyn BufferType> {
        self.host_buffer_type.map(|b| b as &'static dyn BufferType)
    }
    fn init_backend(&'static self) -> Result<Box<dyn Backend>> {
        let f = required(self.fns.init_backend, "device table", "init_backend")?;
        let _call = self.shared.enter_or_err()?;
        let mut handle = AbiBackend { fns: core::ptr::null(), ctx: core::ptr::null_mut() };
        let mut err = AbiError::new();
        // SAFETY: a function of the device's table with its context and writable outputs.
        let code = unsafe { f(self.ctx, &mut handle, &mut err) };
        self.shared.status(&self.name, code, &err)?;
        // SAFETY: a backend handle the plugin just returned; on failure it is freed below.
        match unsafe { wrap_backend(&self.shared, handle, self) } {
            Ok(b) => Ok(Box::new(b)),
            Err(e) => {
                // SAFETY: the handle's own free function (if readable), exactly once.
                unsafe { free_handle(handle.fns.cast::<usize>(), handle.ctx, |t: &AbiBackendFns| t.free) };
                Err(e)
            }
        }
    }
    fn new_event(&self) -> Result<Option<Box<dyn Event>>> {
        let Some(f) = self.fns.new_event else { return Ok(None) };
        let _call = self.shared.enter_or_err()?;
        let mut handle = AbiEvent { fns: core::ptr::null(), ctx: core::ptr::null_mut() };
        let mut err = AbiError::new();
        // SAFETY: a function of the device's table with its context and writable outputs.
        let code = unsafe { f(self.ctx, &mut handle, &mut err) };
        self.shared.status(&self.name, code, &err)?;
        if handle.fns.is_null() {
            return Ok(None);
        }
        // SAFETY: an event table the plugin just returned.
        let fns = match unsafe { read_table(handle.fns, "event table") }.and_then(|fns| {
            required(fns.free, "event table", "free")?;
            required(fns.synchronize, "event table", "synchronize")?;
            Ok(fns)
        }) {
            Ok(fns) => fns,
            Err(e) => {
                // SAFETY: the handle's own free function (if readable), exactly once.
                unsafe { free_handle(handle.fns.cast::<usize>(), handle.ctx, |t: &AbiEventFns| t.free) };
                return Err(e);
            }
        };
        self.shared.live_objects.fetch_add(1, Ordering::SeqCst);
        Ok(Some(Box::new(PluginEvent { shared: self.shared.clone(), fns, ctx: handle.ctx })))
    }
}

/// Frees a handle whose table failed the checks, if its table has a `free` at all.
///
/// # Safety
/// `fns` must be null or a table of type `T` the plugin returned with `ctx`.
unsafe fn free_handle<T: Copy>(fns: *const usize, ctx: Ctx, free: impl Fn(&T) -> Option<unsafe extern "C" fn(Ctx)>) {
    // SAFETY: forwarded from the caller.
    if let Ok(table) = unsafe { read_table(fns.cast::<T>(), "table") } {
        if let Some(f) = free(&table) {
            // SAFETY: the handle's own free function, called once.
            unsafe { f(ctx) };
        }
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
        let f = required(self.fns.alloc_buffer, "buffer type table", "alloc_buffer")?;
        let _call = self.shared.enter_or_err()?;
        let mut handle = AbiBuffer { fns: core::ptr::null(), ctx: core::ptr::null_mut() };
        let mut err = AbiError::new();
        // SAFETY: a function of the buffer type's table with its context and writable outputs.
        let code = unsafe { f(self.ctx, size, &mut handle, &mut err) };
        if code != STATUS_OK {
            return Err(self.shared.call_error(&self.name, code, &err, size));
        }
        // SAFETY: a buffer handle the plugin just returned; on failure it is freed below.
        match unsafe { wrap_buffer(self, handle, size) } {
            Ok(b) => Ok(Arc::new(b)),
            Err(e) => {
                // SAFETY: the handle's own free function (if readable), exactly once.
                unsafe { free_handle(handle.fns.cast::<usize>(), handle.ctx, |t: &AbiBufferFns| t.free) };
                Err(e)
            }
        }
    }
}

/// A buffer allocated by a plugin.
pub struct PluginBuffer {
    shared: Arc<PluginShared>,
    buffer_type: &'static PluginBufferType,
    fns: AbiBufferFns,
    ctx: Ctx,
    size: usize,
    host_base: *mut u8,
    writable: bool,
}

// SAFETY: buffer functions may be called from several threads on disjoint bytes (the ABI's
// contract, the same as `Buffer`'s); the host pointer is plugin memory that lives as long as
// the buffer.
unsafe impl Send for PluginBuffer {}
// SAFETY: as above.
unsafe impl Sync for PluginBuffer {}

/// # Safety
/// `handle` must be a buffer handle `bt`'s plugin just returned for `requested` bytes.
unsafe fn wrap_buffer(bt: &'static PluginBufferType, handle: AbiBuffer, requested: usize) -> Result<PluginBuffer> {
    // SAFETY: the plugin's buffer function table.
    let fns = unsafe { read_table(handle.fns, "buffer table") }?;
    let t = "buffer table";
    required(fns.free, t, "free")?;
    let size_fn = required(fns.buffer_size, t, "buffer_size")?;
    let base_fn = required(fns.host_base, t, "host_base")?;
    let writable_fn = required(fns.host_writable, t, "host_writable")?;
    required(fns.usage, t, "usage")?;
    required(fns.set_usage, t, "set_usage")?;
    required(fns.set_bytes, t, "set_bytes")?;
    required(fns.get_bytes, t, "get_bytes")?;
    required(fns.fill, t, "fill")?;
    // SAFETY: functions of the buffer's table with its context.
    let (size, host_base, writable) = unsafe { (size_fn(handle.ctx), base_fn(handle.ctx), writable_fn(handle.ctx)) };
    if size < requested {
        return Err(Error::Backend {
            backend: bt.name.clone(),
            message: format!("returned a buffer of {size} bytes for {requested} requested"),
        });
    }
    if bt.is_host && host_base.is_null() {
        return Err(Error::Backend {
            backend: bt.name.clone(),
            message: "is a host buffer type but returned a buffer without a host address".into(),
        });
    }
    bt.shared.live_objects.fetch_add(1, Ordering::SeqCst);
    Ok(PluginBuffer {
        shared: bt.shared.clone(),
        buffer_type: bt,
        fns,
        ctx: handle.ctx,
        size,
        host_base,
        writable: writable && !host_base.is_null(),
    })
}

impl PluginBuffer {
    fn abi_ref(&self) -> AbiBufferRef {
        AbiBufferRef {
            size: size_of::<AbiBufferRef>(),
            own: self.ctx,
            host_base: self.host_base,
            bytes: self.size,
            writable: self.writable,
            name: AbiStr::new(&self.buffer_type.name),
        }
    }
}

/// How `buffer` crosses into the plugin of `shared`: as its own handle, or as host memory.
fn buffer_ref(shared: &Arc<PluginShared>, buffer: &Arc<dyn Buffer>, backend: &str) -> Result<AbiBufferRef> {
    buffer_ref_of(shared, &**buffer, backend)
}

fn buffer_ref_of(shared: &Arc<PluginShared>, buffer: &dyn Buffer, backend: &str) -> Result<AbiBufferRef> {
    if let Some(own) = buffer.as_any().downcast_ref::<PluginBuffer>().filter(|b| Arc::ptr_eq(&b.shared, shared)) {
        return Ok(own.abi_ref());
    }
    let name = AbiStr::new(buffer.buffer_type().name());
    match (buffer.host_ptr_mut(), buffer.host_ptr()) {
        (Some(p), _) => Ok(AbiBufferRef {
            size: size_of::<AbiBufferRef>(),
            own: core::ptr::null_mut(),
            host_base: p,
            bytes: buffer.size(),
            writable: true,
            name,
        }),
        (None, Some(p)) => Ok(AbiBufferRef {
            size: size_of::<AbiBufferRef>(),
            own: core::ptr::null_mut(),
            host_base: p.cast_mut(),
            bytes: buffer.size(),
            writable: false,
            name,
        }),
        (None, None) => Err(Error::IncompatibleBuffer {
            tensor: String::new(),
            buffer: buffer.buffer_type().name().into(),
            backend: backend.into(),
        }),
    }
}

impl Drop for PluginBuffer {
    fn drop(&mut self) {
        if let (Some(free), Some(_call)) = (self.fns.free, self.shared.enter()) {
            // SAFETY: the buffer's own free function and context, called exactly once.
            unsafe { free(self.ctx) };
        }
        self.shared.live_objects.fetch_sub(1, Ordering::SeqCst);
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
        let (Some(f), Some(_call)) = (self.fns.usage, self.shared.enter()) else { return BufferUsage::Any };
        // SAFETY: a function of the buffer's table with its context.
        BufferUsage::from_u8(unsafe { f(self.ctx) })
    }
    fn set_usage(&self, usage: BufferUsage) {
        if let (Some(f), Some(_call)) = (self.fns.set_usage, self.shared.enter()) {
            // SAFETY: a function of the buffer's table with its context.
            unsafe { f(self.ctx, usage as u8) };
        }
    }
    fn base(&self) -> BufferBase {
        match (self.host_base.is_null(), self.writable) {
            (false, true) => BufferBase::Host(self.host_base),
            (false, false) => BufferBase::HostReadOnly(self.host_base.cast_const()),
            // Device memory of a plugin is addressed through its own handle.
            (true, _) => BufferBase::Opaque(self.ctx as usize as u64),
        }
    }
    fn set_bytes(&self, offset: usize, data: &[u8]) -> Result<()> {
        check_range(self, offset, data.len())?;
        let f = required(self.fns.set_bytes, "buffer table", "set_bytes")?;
        let _call = self.shared.enter_or_err()?;
        let mut err = AbiError::new();
        // SAFETY: a function of the buffer's table with its context; `data` is valid for its
        // length during the call.
        let code = unsafe { f(self.ctx, offset, data.as_ptr(), data.len(), &mut err) };
        self.shared.status(&self.buffer_type.name, code, &err)
    }
    fn get_bytes(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        check_range(self, offset, out.len())?;
        let f = required(self.fns.get_bytes, "buffer table", "get_bytes")?;
        let _call = self.shared.enter_or_err()?;
        let mut err = AbiError::new();
        // SAFETY: a function of the buffer's table with its context; `out` is writable for its
        // length and exclusively ours during the call.
        let code = unsafe { f(self.ctx, offset, out.as_mut_ptr(), out.len(), &mut err) };
        self.shared.status(&self.buffer_type.name, code, &err)
    }
    fn fill(&self, offset: usize, len: usize, value: u8) -> Result<()> {
        check_range(self, offset, len)?;
        let f = required(self.fns.fill, "buffer table", "fill")?;
        let _call = self.shared.enter_or_err()?;
        let mut err = AbiError::new();
        // SAFETY: a function of the buffer's table with its context.
        let code = unsafe { f(self.ctx, offset, len, value, &mut err) };
        self.shared.status(&self.buffer_type.name, code, &err)
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
        let Ok(r) = buffer_ref_of(&self.shared, src, &self.buffer_type.name) else { return Ok(false) };
        let _call = self.shared.enter_or_err()?;
        let (mut copied, mut err) = (false, AbiError::new());
        // SAFETY: a function of the buffer's table with its context; `r` describes a live
        // buffer of this plugin or host memory valid for the call.
        let code = unsafe { f(self.ctx, dst_offset, &r, src_offset, len, &mut copied, &mut err) };
        self.shared.status(&self.buffer_type.name, code, &err)?;
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

/// A stream on a device of a loaded plugin.
pub struct PluginBackend {
    shared: Arc<PluginShared>,
    fns: AbiBackendFns,
    ctx: Ctx,
    name: String,
    device: &'static PluginDevice,
}

// SAFETY: one backend is used by one thread at a time (`&mut self`), which is what the ABI
// asks of backend handles.
unsafe impl Send for PluginBackend {}

/// # Safety
/// `handle` must be a backend handle `device`'s plugin just returned.
unsafe fn wrap_backend(
    shared: &Arc<PluginShared>,
    handle: AbiBackend,
    device: &'static PluginDevice,
) -> Result<PluginBackend> {
    // SAFETY: the plugin's backend function table.
    let fns = unsafe { read_table(handle.fns, "backend table") }?;
    let t = "backend table";
    required(fns.free, t, "free")?;
    let name_fn = required(fns.name, t, "name")?;
    required(fns.set_tensor_async, t, "set_tensor_async")?;
    required(fns.get_tensor_async, t, "get_tensor_async")?;
    required(fns.synchronize, t, "synchronize")?;
    required(fns.compute, t, "compute")?;
    // SAFETY: a function of the backend's table with its context.
    let mut name = unsafe { abi_string(name_fn(handle.ctx)) };
    if name.is_empty() {
        name = device.name.clone();
    }
    shared.live_objects.fetch_add(1, Ordering::SeqCst);
    Ok(PluginBackend { shared: shared.clone(), fns, ctx: handle.ctx, name, device })
}

impl PluginBackend {
    fn set_n_threads(&mut self, n: usize) -> Result<()> {
        let f = self.fns.set_n_threads.ok_or_else(|| Error::Unsupported {
            backend: self.name.clone(),
            op: "SET_N_THREADS",
            tensor: String::new(),
        })?;
        let _call = self.shared.enter_or_err()?;
        let mut err = AbiError::new();
        // SAFETY: a function of the backend's table with its context.
        let code = unsafe { f(self.ctx, n, &mut err) };
        self.shared.status(&self.name, code, &err)
    }

    fn event_ctx(&self, event: &dyn Event) -> Result<Ctx> {
        match event.as_any().downcast_ref::<PluginEvent>() {
            Some(e) if Arc::ptr_eq(&e.shared, &self.shared) => Ok(e.ctx),
            _ => Err(Error::Backend {
                backend: self.name.clone(),
                message: "the event belongs to another device family".into(),
            }),
        }
    }

    fn event_call(
        &mut self,
        event: &dyn Event,
        f: Option<unsafe extern "C" fn(Ctx, Ctx, *mut AbiError) -> i32>,
    ) -> Result<()> {
        let Some(f) = f else { return Err(self.no_events()) };
        let ev = self.event_ctx(event)?;
        let _call = self.shared.enter_or_err()?;
        let mut err = AbiError::new();
        // SAFETY: a function of the backend's table with its context and a live event of the
        // same plugin.
        let code = unsafe { f(self.ctx, ev, &mut err) };
        self.shared.status(&self.name, code, &err)
    }
}

impl Drop for PluginBackend {
    fn drop(&mut self) {
        if let (Some(free), Some(_call)) = (self.fns.free, self.shared.enter()) {
            // SAFETY: the backend's own free function and context, called exactly once.
            unsafe { free(self.ctx) };
        }
        self.shared.live_objects.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Backend for PluginBackend {
    fn name(&self) -> &str {
        &self.name
    }
    fn device(&self) -> &'static dyn Device {
        self.device
    }
    unsafe fn set_tensor_async(&mut self, dst: &TensorData, offset: usize, src: *const u8, len: usize) -> Result<()> {
        let f = required(self.fns.set_tensor_async, "backend table", "set_tensor_async")?;
        let r = buffer_ref(&self.shared, &dst.buffer, &self.name)?;
        let at = dst.offset.checked_add(offset).ok_or(Error::Overflow { what: "tensor offset" })?;
        check_range(&*dst.buffer, at, len)?;
        let _call = self.shared.enter_or_err()?;
        let mut err = AbiError::new();
        // SAFETY: a function of the backend's table with its context; the caller keeps `src`
        // valid for `len` bytes until the next synchronize, as the ABI asks.
        let code = unsafe { f(self.ctx, &r, at, src, len, &mut err) };
        self.shared.status(&self.name, code, &err)
    }
    unsafe fn get_tensor_async(&mut self, src: &TensorData, offset: usize, dst: *mut u8, len: usize) -> Result<()> {
        let f = required(self.fns.get_tensor_async, "backend table", "get_tensor_async")?;
        let r = buffer_ref(&self.shared, &src.buffer, &self.name)?;
        let at = src.offset.checked_add(offset).ok_or(Error::Overflow { what: "tensor offset" })?;
        check_range(&*src.buffer, at, len)?;
        let _call = self.shared.enter_or_err()?;
        let mut err = AbiError::new();
        // SAFETY: a function of the backend's table with its context; the caller keeps `dst`
        // valid and untouched for `len` bytes until the next synchronize, as the ABI asks.
        let code = unsafe { f(self.ctx, &r, at, dst, len, &mut err) };
        self.shared.status(&self.name, code, &err)
    }
    fn synchronize(&mut self) -> Result<()> {
        let f = required(self.fns.synchronize, "backend table", "synchronize")?;
        let _call = self.shared.enter_or_err()?;
        let mut err = AbiError::new();
        // SAFETY: a function of the backend's table with its context.
        let code = unsafe { f(self.ctx, &mut err) };
        self.shared.status(&self.name, code, &err)
    }
    fn compute(&mut self, graph: &Graph, nodes: Range<usize>) -> Result<()> {
        let f = required(self.fns.compute, "backend table", "compute")?;
        let ids = graph.nodes().get(nodes.clone()).ok_or_else(|| Error::InvalidParam {
            op: "COMPUTE",
            message: format!("node range {nodes:?} is outside the graph's {} nodes", graph.nodes().len()),
        })?;
        let (shared, name) = (&self.shared, self.name.as_str());
        let encoded = encode_graph(graph, ids, Some(&mut |b: &Arc<dyn Buffer>| buffer_ref(shared, b, name)))?;
        let abi = encoded.as_abi();
        let _call = self.shared.enter_or_err()?;
        let mut err = AbiError::new();
        // SAFETY: a function of the backend's table with its context; the descriptors and the
        // memory they refer to stay valid for the call (and, for queued work, as long as the
        // graph's buffers live, which the caller keeps until synchronize).
        let code = unsafe { f(self.ctx, &abi, 0, ids.len(), &mut err) };
        self.shared.status(&self.name, code, &err)
    }
    fn record_event(&mut self, event: &dyn Event) -> Result<()> {
        self.event_call(event, self.fns.record_event)
    }
    fn wait_event(&mut self, event: &dyn Event) -> Result<()> {
        self.event_call(event, self.fns.wait_event)
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// An event of a loaded plugin.
pub struct PluginEvent {
    shared: Arc<PluginShared>,
    fns: AbiEventFns,
    ctx: Ctx,
}

// SAFETY: event functions may be called from any thread (the ABI's contract).
unsafe impl Send for PluginEvent {}
// SAFETY: as above.
unsafe impl Sync for PluginEvent {}

impl Drop for PluginEvent {
    fn drop(&mut self) {
        if let (Some(free), Some(_call)) = (self.fns.free, self.shared.enter()) {
            // SAFETY: the event's own free function and context, called exactly once.
            unsafe { free(self.ctx) };
        }
        self.shared.live_objects.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Event for PluginEvent {
    fn synchronize(&self) -> Result<()> {
        let f = required(self.fns.synchronize, "event table", "synchronize")?;
        let _call = self.shared.enter_or_err()?;
        let mut err = AbiError::new();
        // SAFETY: a function of the event's table with its context.
        let code = unsafe { f(self.ctx, &mut err) };
        self.shared.status("event", code, &err)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}
