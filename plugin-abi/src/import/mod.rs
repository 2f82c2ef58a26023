//! The host side: a plugin's C tables wrapped back into tessera's traits.
//!
//! [`wrap_reg`] reads and checks a reg table once: names, types and capabilities are copied
//! into host memory, every function table is read through its checked view (a table lacking
//! a required function is refused), and the family, its devices and buffer types become
//! `'static` objects (leaked, like every enumerated device, a few hundred bytes per load).
//! Buffers, backends, programs and events are ordinary owned objects that free their plugin
//! handle when dropped.
//!
//! Unloading: [`PluginReg::shutdown`] refuses while any buffer, backend, program or event of
//! the plugin lives; otherwise it marks the plugin dead, waits for calls in flight on other
//! threads, and calls the plugin's `release`. The `'static` wrappers stay valid after that:
//! a dead plugin's device answers from its copied data, reports no memory, supports nothing
//! and creates nothing, so unmapping the library afterwards is sound.

mod backend;
mod buffer;
mod buffer_type;
mod device;
mod event;
mod program;

use alloc::boxed::Box;
use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::mem::size_of;
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tessera_core::registry::{extension, BackendReg, Extension};
use tessera_core::{Backend, Device, Error, Result};

pub use backend::PluginBackend;
pub use buffer::PluginBuffer;
pub use buffer_type::PluginBufferType;
pub use device::PluginDevice;
pub use event::PluginEvent;
pub use program::PluginProgram;

use crate::abi::*;
use crate::desc::abi_string;
use crate::table::{present, read_table};
use crate::tables::{AbiDevice, AbiReg, RegFns};

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

    /// Makes a fallible call into the plugin (`f` gets the error record to pass) unless it
    /// was unloaded; a failure comes back as the error it reported, on behalf of `who`.
    fn call(&self, who: &str, f: impl FnOnce(*mut AbiError) -> i32) -> Result<()> {
        self.call_for(who, 0, f)
    }

    /// As [`PluginShared::call`], for a call that asked for `requested` bytes of memory.
    fn call_for(&self, who: &str, requested: usize, f: impl FnOnce(*mut AbiError) -> i32) -> Result<()> {
        let _call = self.enter_or_err()?;
        let mut err = AbiError::new();
        let code = f(&mut err);
        if code == STATUS_OK {
            Ok(())
        } else {
            Err(self.call_error(who, code, &err, requested))
        }
    }

    /// Counts an object that holds a handle of the plugin (shutdown waits for it).
    fn hold(&self) {
        self.live_objects.fetch_add(1, Ordering::SeqCst);
    }

    /// Frees an object's handle with its `free` (unless the plugin is gone) and stops
    /// counting it.
    ///
    /// # Safety
    /// `free` and `ctx` must be an object's own free function and context, and this the only
    /// call for the object.
    unsafe fn release(&self, free: unsafe extern "C" fn(Ctx), ctx: Ctx) {
        if let Some(_call) = self.enter() {
            // SAFETY: forwarded from the caller.
            unsafe { free(ctx) };
        }
        self.live_objects.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Frees a handle whose table failed the checks, if its table has a `free` at all.
///
/// # Safety
/// `fns` must be null or a table of type `T` the plugin returned with `ctx`, whose `free`
/// (at `offset`, read by `free`) is the object's own.
unsafe fn free_handle<T: Copy>(
    fns: *const T,
    ctx: Ctx,
    offset: usize,
    free: impl Fn(&T) -> Option<unsafe extern "C" fn(Ctx)>,
) {
    // SAFETY: forwarded from the caller; every table is valid as all-zero bytes.
    if let Ok((table, size)) = unsafe { read_table(fns, "table") } {
        if let Some(f) = present(free(&table), size, offset) {
            // SAFETY: the handle's own free function, called once.
            unsafe { f(ctx) };
        }
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
    let table = unsafe { RegFns::read(reg) }.map_err(|e| fail(plain(e)))?;
    // SAFETY: functions of the plugin's reg table, called with its context.
    let name = unsafe { abi_string((table.name)(table.ctx)) };
    if name.is_empty() {
        return Err(fail("its reg has an empty name".into()));
    }
    // SAFETY: as above.
    let count = unsafe { (table.device_count)(table.ctx) };
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
        let mut handle = AbiDevice::NULL;
        // SAFETY: a function of the reg table, with its context and a writable output.
        if !unsafe { (table.device)(table.ctx, i, &mut handle) } {
            return Err(fail(format!("its reg reports {count} devices but has no device {i}")));
        }
        // SAFETY: a device handle the plugin just returned.
        let device =
            unsafe { PluginDevice::wrap(&shared, handle) }.map_err(|e| fail(format!("device {i}: {}", plain(e))))?;
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
        d.attach(reg);
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

    /// Buffers, backends, programs and events of the plugin that are still alive.
    pub fn live_objects(&self) -> usize {
        self.shared.live_objects.load(Ordering::SeqCst)
    }

    /// Marks the plugin unloaded so its library may be unmapped: refused while any buffer,
    /// backend, program or event of it lives; afterwards every call into it fails cleanly.
    /// Calls `release` once.
    pub fn shutdown(&self) -> Result<()> {
        let busy = |n: usize| {
            self.shared.error(&format!(
                "still has {n} live buffer(s), backend(s), program(s) or event(s); drop them before unloading it"
            ))
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
