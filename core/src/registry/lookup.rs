//! Finding devices in a list: by name, by family, by type, the best one, and the resolver of a
//! user's device request (`auto`, `gpu`, `cuda`, `CUDA1`).
//!
//! Written once over any list of devices in priority order (an iterator that can be cloned:
//! the const [`super::Registry`], the runtime registry, a slice) and used by every registry,
//! by device selection and by module placement. Finding allocates nothing; only the errors
//! do, to list the devices that exist.

use alloc::string::String;

use crate::device::{Device, DeviceType};
use crate::error::{Error, Result};

/// The device called `name` (case-insensitive); the error lists the devices there are.
pub fn device_by_name<I>(devices: I, name: &str) -> Result<&'static dyn Device>
where
    I: IntoIterator<Item = &'static dyn Device>,
    I::IntoIter: Clone,
{
    let devices = devices.into_iter();
    devices
        .clone()
        .find(|d| d.name().eq_ignore_ascii_case(name))
        .ok_or_else(|| Error::UnknownDevice { name: name.into(), available: device_names(devices) })
}

/// The first device of the family (reg) called `family` (case-insensitive): `cuda` is the
/// first CUDA device.
pub fn device_by_family<I>(devices: I, family: &str) -> Option<&'static dyn Device>
where
    I: IntoIterator<Item = &'static dyn Device>,
{
    devices.into_iter().find(|d| d.reg().name().eq_ignore_ascii_case(family))
}

/// The first device of `device_type`.
pub fn device_by_type<I>(devices: I, device_type: DeviceType) -> Option<&'static dyn Device>
where
    I: IntoIterator<Item = &'static dyn Device>,
{
    devices.into_iter().find(|d| d.device_type() == device_type)
}

/// The first GPU, else the first integrated GPU, else the first CPU that computes in host
/// memory (the CPU backend, not a CPU implementation of a GPU API such as Mesa's lavapipe,
/// which is listed but is only chosen when nothing else is there).
pub fn best_device<I>(devices: I) -> Option<&'static dyn Device>
where
    I: IntoIterator<Item = &'static dyn Device>,
    I::IntoIter: Clone,
{
    let devices = devices.into_iter();
    first_by_preference(devices.clone(), &[DeviceType::Gpu, DeviceType::IGpu])
        .or_else(|| devices.clone().find(|d| d.is_host_cpu()))
        .or_else(|| device_by_type(devices, DeviceType::Cpu))
}

/// The first GPU, else the first integrated GPU.
pub fn first_gpu<I>(devices: I) -> Option<&'static dyn Device>
where
    I: IntoIterator<Item = &'static dyn Device>,
{
    first_by_preference(devices, &[DeviceType::Gpu, DeviceType::IGpu])
}

/// The first device of the earliest type in `preference`, in one pass.
fn first_by_preference<I>(devices: I, preference: &[DeviceType]) -> Option<&'static dyn Device>
where
    I: IntoIterator<Item = &'static dyn Device>,
{
    let mut found: Option<(usize, &'static dyn Device)> = None;
    for d in devices {
        let Some(rank) = preference.iter().position(|&t| t == d.device_type()) else { continue };
        if rank == 0 {
            return Some(d);
        }
        if found.is_none_or(|(r, _)| rank < r) {
            found = Some((rank, d));
        }
    }
    found.map(|(_, d)| d)
}

/// Resolves what a user asked for, case-insensitively and ignoring surrounding spaces:
/// `""`, `auto` or `default`: the best device ([`best_device`]); `gpu`: the first GPU, else
/// integrated GPU; a family name (`cpu`, `cuda`): its first device; an exact device name
/// (`cuda1`). The errors say what was asked for and list the devices there are:
/// `unknown device 'cuda9'; devices: CPU, CUDA0`, `no GPU found for 'gpu'; devices: CPU`.
pub fn resolve_device<I>(devices: I, request: &str) -> Result<&'static dyn Device>
where
    I: IntoIterator<Item = &'static dyn Device>,
    I::IntoIter: Clone,
{
    let devices = devices.into_iter();
    let request = request.trim();
    let is = |word: &str| request.eq_ignore_ascii_case(word);
    let none = |wanted: &'static str, request: &str| Error::NoDevice {
        wanted,
        request: request.into(),
        available: device_names(devices.clone()),
    };
    if request.is_empty() || is("auto") || is("default") {
        let request = if request.is_empty() { "auto" } else { request };
        return best_device(devices.clone()).ok_or_else(|| none("device", request));
    }
    if is("gpu") {
        return first_gpu(devices.clone()).ok_or_else(|| none("GPU", request));
    }
    match device_by_family(devices.clone(), request) {
        Some(d) => Ok(d),
        None => device_by_name(devices, request),
    }
}

/// `CPU, CUDA0, ...`, or `none`.
pub fn device_names<I>(devices: I) -> String
where
    I: IntoIterator<Item = &'static dyn Device>,
{
    let mut names = String::new();
    for d in devices {
        if !names.is_empty() {
            names.push_str(", ");
        }
        names.push_str(d.name());
    }
    if names.is_empty() {
        names.push_str("none");
    }
    names
}
