//! tessera-cuda: NVIDIA GPUs through cudarc, found at run time (no CUDA toolkit needed to
//! build).
//!
//! The driver, cuBLAS and the kernels are loaded when the family is first asked for its
//! devices: a build with this crate runs on a machine without an NVIDIA driver and lists 0
//! CUDA devices, with one log line saying why. Devices are `CUDA0`, `CUDA1`, ...; each has a
//! device-memory buffer type (buffers whose base is a device address) and a pinned host buffer
//! type the CPU backend computes on directly. A backend is one stream. The kernels are CUDA C
//! under `kernels/`, compiled ahead of time by `scripts/build-cuda-kernels.sh` into the
//! committed fatbins this crate embeds.
#![forbid(unsafe_op_in_unsafe_fn)]

mod backend;
mod buffer;
mod device;
mod driver;
mod event;
mod fusion;
mod host_weights;
pub mod kernels;
mod pinned;
mod profile;
mod reg;
mod split;

pub use backend::CudaBackend;
pub use buffer::{CudaBuffer, CudaBufferType};
pub use device::CudaDevice;
pub use event::CudaEvent;
pub use pinned::PinnedBufferType;
pub use reg::{CudaReg, CUDA_REG};
pub use split::{split_buffer_type, SplitBuffer, SplitBufferType, ROW_GRANULARITY};
