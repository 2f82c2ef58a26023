//! tessera-cuda: NVIDIA GPUs through cudarc, loaded at run time (no CUDA toolkit needed to
//! build). The kernels are CUDA C under `kernels/`, compiled ahead of time by
//! `scripts/build-cuda-kernels.sh` into the committed fatbins this crate embeds.
#![forbid(unsafe_op_in_unsafe_fn)]

pub mod kernels;
