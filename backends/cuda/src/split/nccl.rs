//! NCCL, loaded at run time: one communicator per GPU of a split, and point-to-point
//! transfers between them.
//!
//! NVLink multicast (NVLS) stays off: `NCCL_NVLS_ENABLE=0` is set before the first NCCL call
//! unless the user set it. Multicast objects take part of the NVLink fabric's state, and on a
//! shared host a failed or leaked one can put GPUs out of service for every process until
//! they are reset; point-to-point transfers need none of it. tessera never creates multicast
//! objects itself.

use std::ffi::{c_int, c_void};

use cudarc::nccl::sys::{self as nccl_sys, ncclComm_t, ncclDataType_t};
use cudarc::nccl::{result as nccl, result::NcclError};
use tessera_core::{Error, Result};

use crate::device::CudaDevice;

fn error(message: String) -> Error {
    Error::Backend { backend: "CUDA split (NCCL)".into(), message }
}

/// Fails with a clear error unless the NCCL library can be opened.
pub(super) fn check_present() -> Result<()> {
    // SAFETY: only tries to open the library by its names; nothing in it is called.
    if unsafe { nccl_sys::is_culib_present() } {
        return Ok(());
    }
    Err(error(
        "NCCL was not found, and a matrix split over two or more GPUs needs it: libnccl.so must be on the \
         library path (LD_LIBRARY_PATH). The nvidia-nccl pip wheel ships only libnccl.so.2: make a link named \
         libnccl.so to it in a directory of LD_LIBRARY_PATH"
            .into(),
    ))
}

/// Sets `NCCL_NVLS_ENABLE=0` unless the environment says otherwise (see the module's note).
fn keep_multicast_off() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if std::env::var_os("NCCL_NVLS_ENABLE").is_none() {
            // Set once, before NCCL (which reads it) is first called.
            std::env::set_var("NCCL_NVLS_ENABLE", "0");
        }
    });
}

fn describe(what: &str, e: NcclError) -> Error {
    // SAFETY: ncclGetErrorString returns a pointer to a static string for any result code.
    let text = unsafe {
        let p = nccl_sys::ncclGetErrorString(e.0);
        if p.is_null() {
            String::new()
        } else {
            std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    };
    error(format!("{what} failed: {:?} ({text})", e.0))
}

/// One NCCL communicator per device of a split (rank = position in the split's list), made
/// together by `ncclCommInitAll` and driven from one thread.
pub(super) struct Comms {
    comms: Vec<ncclComm_t>,
}

// SAFETY: a communicator may be used from any thread as long as calls on it are not
// concurrent; `Comms` lives inside the split type's runtime, reached only under its mutex.
unsafe impl Send for Comms {}

impl Comms {
    /// Communicators over `devices` (their CUDA ordinals).
    pub(super) fn new(devices: &[&'static CudaDevice]) -> Result<Comms> {
        check_present()?;
        keep_multicast_off();
        let ordinals: Vec<c_int> = devices
            .iter()
            .map(|d| c_int::try_from(d.context().ordinal()).map_err(|_| error("a CUDA ordinal out of range".into())))
            .collect::<Result<_>>()?;
        let count = c_int::try_from(ordinals.len()).map_err(|_| error("too many devices".into()))?;
        let mut comms: Vec<ncclComm_t> = vec![std::ptr::null_mut(); ordinals.len()];
        // SAFETY: `comms` has room for one communicator per ordinal; `ordinals` are devices of
        // this process. NCCL switches devices while it sets up; callers bind their context
        // again before their next driver call.
        unsafe { nccl::comm_init_all(comms.as_mut_ptr(), count, ordinals.as_ptr()) }
            .map_err(|e| describe("creating the NCCL communicators (ncclCommInitAll)", e))?;
        Ok(Comms { comms })
    }

    /// Runs `f` between `ncclGroupStart` and `ncclGroupEnd`: the transfers it queues (for
    /// every rank, from this one thread) start together. The group is ended even when `f`
    /// fails.
    pub(super) fn group(&self, f: impl FnOnce(&Group<'_>) -> Result<()>) -> Result<()> {
        nccl::group_start().map_err(|e| describe("ncclGroupStart", e))?;
        let queued = f(&Group { comms: self });
        let ended = nccl::group_end().map_err(|e| describe("ncclGroupEnd", e));
        queued.and(ended.map(|_| ()))
    }
}

impl Drop for Comms {
    fn drop(&mut self) {
        for &comm in &self.comms {
            // SAFETY: each communicator was made by ncclCommInitAll and is destroyed once.
            let _ = unsafe { nccl::comm_destroy(comm) };
        }
    }
}

/// Transfers queued inside one NCCL group.
pub(super) struct Group<'a> {
    comms: &'a Comms,
}

impl Group<'_> {
    fn comm(&self, rank: usize) -> Result<ncclComm_t> {
        self.comms.comms.get(rank).copied().ok_or_else(|| error(format!("no NCCL rank {rank}")))
    }

    /// Queues on `stream` (of rank `from`'s device) the send of `bytes` bytes at device address
    /// `data` to rank `to`.
    ///
    /// # Safety
    /// `data` must be device memory of rank `from`'s GPU holding `bytes` bytes, unchanged
    /// until the transfer has run in `stream`'s order; `stream` must belong to that GPU.
    pub(super) unsafe fn send(
        &self,
        from: usize,
        to: usize,
        data: u64,
        bytes: usize,
        stream: &cudarc::driver::CudaStream,
    ) -> Result<()> {
        let (comm, peer) = (self.comm(from)?, c_int::try_from(to).map_err(|_| error("rank out of range".into()))?);
        // SAFETY: forwarded from the caller; the communicator is live.
        unsafe {
            nccl::send(data as *const c_void, bytes, ncclDataType_t::ncclUint8, peer, comm, stream.cu_stream() as _)
        }
        .map(|_| ())
        .map_err(|e| describe("ncclSend", e))
    }

    /// Queues on `stream` (of rank `to`'s device) the receipt of `bytes` bytes from rank
    /// `from` into device address `data`.
    ///
    /// # Safety
    /// `data` must be device memory of rank `to`'s GPU with room for `bytes` bytes, used by
    /// nothing else until the transfer has run in `stream`'s order; `stream` must belong to
    /// that GPU.
    pub(super) unsafe fn recv(
        &self,
        to: usize,
        from: usize,
        data: u64,
        bytes: usize,
        stream: &cudarc::driver::CudaStream,
    ) -> Result<()> {
        let (comm, peer) = (self.comm(to)?, c_int::try_from(from).map_err(|_| error("rank out of range".into()))?);
        // SAFETY: forwarded from the caller; the communicator is live.
        unsafe {
            nccl::recv(data as *mut c_void, bytes, ncclDataType_t::ncclUint8, peer, comm, stream.cu_stream() as _)
        }
        .map(|_| ())
        .map_err(|e| describe("ncclRecv", e))
    }
}
