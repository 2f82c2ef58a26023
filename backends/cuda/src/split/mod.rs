//! Tensor parallelism: a weight matrix split by rows across several GPUs.
//!
//! A [`SplitBufferType`] is made for a list of CUDA devices (the first is the main one) and
//! the share of rows each gets. A buffer of it holds one 2-D matrix (`[K, M]`, K values per
//! row, M rows) whose rows are divided into consecutive parts, one per device, each in that
//! device's own memory ([`SplitBuffer`]). MUL_MAT of such a weight with an f32 activation runs
//! on the main device's backend: each GPU multiplies its rows, the activation going out and
//! the result parts coming back through NCCL, pipelined over column chunks so that the
//! transfers hide behind the products ([`mul_mat`]).
//!
//! NCCL is loaded only when a split over two or more devices is first used; a split over one
//! device never touches it (the same code path, with no peers).

mod buffer;
mod memory;
pub(crate) mod mul_mat;
mod nccl;

use std::sync::{Mutex, OnceLock};

use tessera_core::registry::BackendReg;
use tessera_core::{BufferType, DType, Device, Error, Result};

use crate::device::CudaDevice;
use crate::reg::CUDA_REG;

pub use buffer::SplitBuffer;

/// Part boundaries are multiples of this many rows (except the last, at `M`): whole tiles of
/// the GPUs' matrix products, and result parts starting on 512-byte boundaries.
pub const ROW_GRANULARITY: usize = 128;

/// Alignment of the (single) matrix in a split buffer.
const ALIGNMENT: usize = 256;

/// The memory of several GPUs, a matrix's rows divided among them in fixed proportions.
/// Made by [`split_buffer_type`], once per (devices, proportions), and kept for the process.
pub struct SplitBufferType {
    name: String,
    devices: Vec<&'static CudaDevice>,
    /// Cumulative shares: `bounds[d]..bounds[d + 1]` of `[0, 1]` is device `d`'s.
    bounds: Vec<f64>,
    /// Streams, handles, work memory and NCCL communicators, made on first use.
    runtime: Mutex<Option<mul_mat::Runtime>>,
}

/// Every split buffer type made so far: types are compared by identity, so asking twice for
/// the same split gives the same type.
static TYPES: OnceLock<Mutex<Vec<&'static SplitBufferType>>> = OnceLock::new();

/// The split buffer type over the CUDA devices `devices` (indices of the CUDA family's list:
/// 0 is `CUDA0`; the first is the main device, whose backend runs the products) with
/// `proportions` of the rows (one non-negative weight per device; empty = even).
///
/// Errors: an empty list, an index with no device, a device listed twice (NCCL takes one rank
/// per GPU), proportions of another length, negative, not finite or summing to zero.
pub fn split_buffer_type(devices: &[usize], proportions: &[f32]) -> Result<&'static SplitBufferType> {
    let invalid = |message: String| Error::InvalidParam { op: "CUDA split", message };
    if devices.is_empty() {
        return Err(invalid("a split needs at least one CUDA device".into()));
    }
    let mut found: Vec<&'static CudaDevice> = Vec::with_capacity(devices.len());
    for &index in devices {
        let device = crate::reg::cuda_device(index).ok_or_else(|| Error::UnknownDevice {
            name: format!("CUDA device #{index}"),
            available: available_devices(),
        })?;
        if found.iter().any(|d| std::ptr::eq(*d, device)) {
            return Err(invalid(format!(
                "{} is listed twice: each GPU can hold one part of a split (NCCL takes one rank per GPU)",
                device.name()
            )));
        }
        found.push(device);
    }
    let weights: Vec<f64> = if proportions.is_empty() {
        vec![1.0; found.len()]
    } else if proportions.len() != found.len() {
        return Err(invalid(format!(
            "{} proportions for {} devices: give one per device, or none for an even split",
            proportions.len(),
            found.len()
        )));
    } else {
        proportions.iter().map(|&p| f64::from(p)).collect()
    };
    let total: f64 = weights.iter().sum();
    if weights.iter().any(|w| !w.is_finite() || *w < 0.0) || !(total > 0.0 && total.is_finite()) {
        return Err(invalid(format!("proportions {proportions:?} must be finite, non-negative, and not all zero")));
    }
    let mut bounds = Vec::with_capacity(found.len() + 1);
    let mut sum = 0.0;
    bounds.push(0.0);
    for w in &weights {
        sum += w;
        bounds.push(sum / total);
    }

    let types = TYPES.get_or_init(|| Mutex::new(Vec::new()));
    let mut types = types.lock().map_err(|_| crate::kernels::backend_error("the split type list is poisoned"))?;
    if let Some(&t) = types.iter().find(|t| t.bounds == bounds && same_devices(&t.devices, &found)) {
        return Ok(t);
    }
    let names: Vec<&str> = found.iter().map(|d| d.name()).collect();
    let shares: Vec<String> = weights.iter().map(|w| format!("{:.3}", w / total)).collect();
    let name = format!("CUDA_Split[{}; {}]", names.join(","), shares.join(","));
    let t: &'static SplitBufferType =
        Box::leak(Box::new(SplitBufferType { name, devices: found, bounds, runtime: Mutex::new(None) }));
    types.push(t);
    Ok(t)
}

fn same_devices(a: &[&'static CudaDevice], b: &[&'static CudaDevice]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| std::ptr::eq(*x, *y))
}

fn available_devices() -> String {
    let names: Vec<String> =
        (0..CUDA_REG.device_count()).filter_map(|i| CUDA_REG.device(i)).map(|d| d.name().to_string()).collect();
    if names.is_empty() {
        "none (no CUDA device on this machine)".into()
    } else {
        names.join(", ")
    }
}

/// The split buffer type `buffer_type` is, if it is one whose main device is `device`.
pub(crate) fn main_split_type(buffer_type: &dyn BufferType, device: &CudaDevice) -> Option<&'static SplitBufferType> {
    let types = TYPES.get()?.lock().ok()?;
    types
        .iter()
        .copied()
        .find(|t| tessera_core::buffer::same_buffer_type(buffer_type, *t) && std::ptr::eq(t.devices[0], device))
}

impl SplitBufferType {
    /// The devices, the main one first.
    pub fn devices(&self) -> &[&'static CudaDevice] {
        &self.devices
    }

    /// The main device: its backend runs products with weights of this type.
    pub fn main_device(&self) -> &'static CudaDevice {
        self.devices[0]
    }

    /// The rows `[start, end)` of an `m`-row matrix each device holds, in device order: the
    /// proportions' boundaries rounded down to multiples of [`ROW_GRANULARITY`] (the last part
    /// ends at `m`; a part may be empty).
    pub fn row_ranges(&self, m: usize) -> Vec<std::ops::Range<usize>> {
        row_ranges(&self.bounds, m)
    }
}

fn row_ranges(bounds: &[f64], m: usize) -> Vec<std::ops::Range<usize>> {
    let n = bounds.len().saturating_sub(1);
    let mut edges: Vec<usize> = bounds
        .iter()
        .map(|&b| {
            // The devices after the last with a share get nothing.
            if b >= 1.0 {
                return m;
            }
            let row = (b * m as f64).floor() as usize;
            (row / ROW_GRANULARITY * ROW_GRANULARITY).min(m)
        })
        .collect();
    if let Some(last) = edges.last_mut() {
        *last = m;
    }
    for i in 1..edges.len() {
        edges[i] = edges[i].max(edges[i - 1]);
    }
    (0..n).map(|d| edges[d]..edges[d + 1]).collect()
}

impl BufferType for SplitBufferType {
    fn name(&self) -> &str {
        &self.name
    }
    fn alignment(&self) -> usize {
        ALIGNMENT
    }
    fn is_host(&self) -> bool {
        false
    }
    /// A split buffer must know its matrix's rows: a plain byte count is refused.
    fn alloc_buffer(&'static self, size: usize) -> Result<std::sync::Arc<dyn tessera_core::Buffer>> {
        Err(Error::InvalidParam {
            op: "ALLOC",
            message: format!(
                "{}: a split buffer holds one matrix whose rows it divides among the GPUs, so it cannot be made from \
                 a byte count ({size}); use SplitBufferType::alloc_matrix or bind_matrix",
                self.name
            ),
        })
    }
}

impl SplitBufferType {
    /// A buffer holding one contiguous `dtype` matrix of `ne = [K, M]` (K values per row, M
    /// rows), its rows divided among the devices. With two or more devices holding rows, NCCL
    /// must be loadable (checked here, so the error comes early).
    pub fn alloc_matrix(&'static self, dtype: DType, ne: [usize; 2]) -> Result<std::sync::Arc<SplitBuffer>> {
        SplitBuffer::new(self, dtype, ne)
    }

    /// Allocates a split buffer for 2-D tensor `id` of `graph` and binds the tensor to it.
    pub fn bind_matrix(
        &'static self,
        graph: &mut tessera_core::Graph,
        id: tessera_core::TensorId,
    ) -> Result<std::sync::Arc<SplitBuffer>> {
        let t = graph.tensor(id)?;
        let [k, m, n2, n3] = t.ne();
        if n2 != 1 || n3 != 1 || !t.is_contiguous() || t.view_src().is_some() {
            return Err(Error::ShapeMismatch {
                op: "CUDA split",
                tensor: graph.label(id),
                shape: t.shape(),
                expected: "a contiguous 2-D matrix [K, M] that is no view".into(),
            });
        }
        let buffer = self.alloc_matrix(t.dtype(), [k, m])?;
        graph.bind(id, tessera_core::TensorData { buffer: buffer.clone(), offset: 0 })?;
        Ok(buffer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn even(n: usize) -> Vec<f64> {
        (0..=n).map(|i| i as f64 / n as f64).collect()
    }

    #[test]
    fn rows_are_divided_in_whole_granules_and_the_last_part_takes_the_rest() {
        assert_eq!(row_ranges(&even(2), 16384), vec![0..8192, 8192..16384]);
        assert_eq!(row_ranges(&even(1), 300), vec![0..300]);
        assert_eq!(row_ranges(&even(2), 300), vec![0..128, 128..300]);
        assert_eq!(row_ranges(&even(2), 100), vec![0..0, 0..100]);
        assert_eq!(row_ranges(&even(3), 1000), vec![0..256, 256..640, 640..1000]);
        assert_eq!(row_ranges(&[0.0, 0.0, 1.0], 1000), vec![0..0, 0..1000]);
        assert_eq!(row_ranges(&[0.0, 1.0, 1.0], 1000), vec![0..1000, 1000..1000]);
        assert_eq!(row_ranges(&even(2), 0), vec![0..0, 0..0]);
    }

    #[test]
    fn bad_lists_are_errors_naming_the_problem() {
        // No GPU is needed: index 999 is never a device.
        let e = split_buffer_type(&[999], &[]).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("#999"), "{e}");
        let e = split_buffer_type(&[], &[]).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("at least one"), "{e}");
    }
}
