//! A split buffer: one matrix whose row parts live in several GPUs' memory.

use std::any::Any;
use std::ops::Range;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use tessera_core::buffer::check_range;
use tessera_core::tensor::contiguous_strides;
use tessera_core::{Buffer, BufferBase, BufferType, BufferUsage, DType, Device, Error, Result, Tensor};

use super::SplitBufferType;
use crate::buffer::CudaBuffer;
use crate::device::CudaDevice;

/// One device's rows of the matrix.
pub(crate) struct Part {
    pub device: &'static CudaDevice,
    pub rows: Range<usize>,
    /// The rows' memory on the device (`None` for an empty part).
    memory: Option<Arc<dyn Buffer>>,
    /// Its device address (0 for an empty part).
    pub address: u64,
}

/// A matrix of `dtype` and shape `[K, M]` whose rows are divided among the devices of its
/// [`SplitBufferType`]. Seen as bytes it is the matrix in its usual packed layout: byte range
/// `r0 * row_bytes .. r1 * row_bytes` is the part of the device holding rows `r0..r1`, which
/// `set_bytes`, `get_bytes` and `fill` route there. Its [`BufferBase`] is opaque: no single
/// device address holds it.
pub struct SplitBuffer {
    buffer_type: &'static SplitBufferType,
    dtype: DType,
    ne: [usize; 2],
    row_bytes: usize,
    parts: Vec<Part>,
    usage: AtomicU8,
}

impl SplitBuffer {
    pub(super) fn new(buffer_type: &'static SplitBufferType, dtype: DType, ne: [usize; 2]) -> Result<Arc<SplitBuffer>> {
        let [k, m] = ne;
        let nb = contiguous_strides(dtype, [k, m, 1, 1])?;
        let row_bytes = nb[1];
        let ranges = buffer_type.row_ranges(m);
        if ranges.iter().filter(|r| !r.is_empty()).count() > 1 {
            super::nccl::check_present()?;
        }
        let mut parts = Vec::with_capacity(ranges.len());
        for (&device, rows) in buffer_type.devices.iter().zip(ranges) {
            let bytes = rows.len().checked_mul(row_bytes).ok_or(Error::Overflow { what: "split part size" })?;
            let (memory, address) = if bytes == 0 {
                (None, 0)
            } else {
                let memory = device.cuda_buffer_type().alloc_buffer(bytes)?;
                let address = memory
                    .as_any()
                    .downcast_ref::<CudaBuffer>()
                    .map(CudaBuffer::device_ptr)
                    .ok_or_else(|| crate::kernels::backend_error("a CUDA device gave a buffer of another kind"))?;
                (Some(memory), address)
            };
            parts.push(Part { device, rows, memory, address });
        }
        Ok(Arc::new(SplitBuffer {
            buffer_type,
            dtype,
            ne,
            row_bytes,
            parts,
            usage: AtomicU8::new(BufferUsage::Weights as u8),
        }))
    }

    /// The matrix's type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The matrix's shape `[K, M]`.
    pub fn shape(&self) -> [usize; 2] {
        self.ne
    }

    /// The rows each device holds, in the type's device order.
    pub fn row_ranges(&self) -> Vec<Range<usize>> {
        self.parts.iter().map(|p| p.rows.clone()).collect()
    }

    /// The split's type, with its devices.
    pub fn split_type(&self) -> &'static SplitBufferType {
        self.buffer_type
    }

    pub(crate) fn parts(&self) -> &[Part] {
        &self.parts
    }

    /// Calls `f(part memory, offset in the part, range of the caller's bytes)` for every part
    /// that bytes `offset..offset + len` of the matrix touch.
    fn each_piece(
        &self,
        offset: usize,
        len: usize,
        mut f: impl FnMut(&dyn Buffer, usize, Range<usize>) -> Result<()>,
    ) -> Result<()> {
        check_range(self, offset, len)?;
        let end = offset + len;
        for part in &self.parts {
            let (start, stop) = (part.rows.start * self.row_bytes, part.rows.end * self.row_bytes);
            let (lo, hi) = (offset.max(start), end.min(stop));
            if let (true, Some(memory)) = (lo < hi, &part.memory) {
                f(&**memory, lo - start, lo - offset..hi - offset)?;
            }
        }
        Ok(())
    }
}

impl Buffer for SplitBuffer {
    fn buffer_type(&self) -> &'static dyn BufferType {
        self.buffer_type
    }
    fn size(&self) -> usize {
        self.ne[1] * self.row_bytes
    }
    fn usage(&self) -> BufferUsage {
        BufferUsage::from_u8(self.usage.load(Ordering::Relaxed))
    }
    fn set_usage(&self, usage: BufferUsage) {
        self.usage.store(usage as u8, Ordering::Relaxed);
    }
    /// No device address holds the whole matrix: an opaque handle (this buffer's address),
    /// which only the split's own MUL_MAT understands.
    fn base(&self) -> BufferBase {
        BufferBase::Opaque(self as *const SplitBuffer as u64)
    }
    /// Only the matrix itself may be placed here: at offset 0, of the buffer's type and shape,
    /// packed.
    fn init_tensor(&self, tensor: &Tensor, offset: usize) -> Result<()> {
        let [k, m] = self.ne;
        let fits = offset == 0 && tensor.dtype() == self.dtype && tensor.ne() == [k, m, 1, 1] && tensor.is_contiguous();
        if fits {
            return Ok(());
        }
        Err(Error::ShapeMismatch {
            op: "CUDA split",
            tensor: tensor.name().into(),
            shape: tensor.shape(),
            expected: format!(
                "the split buffer's one matrix: {} [{k}, {m}], packed, at offset 0 (not {offset})",
                self.dtype
            ),
        })
    }
    fn set_bytes(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.each_piece(offset, data.len(), |memory, at, range| memory.set_bytes(at, &data[range]))
    }
    fn get_bytes(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.each_piece(offset, out.len(), |memory, at, range| memory.get_bytes(at, &mut out[range]))
    }
    fn fill(&self, offset: usize, len: usize, value: u8) -> Result<()> {
        self.each_piece(offset, len, |memory, at, range| memory.fill(at, range.len(), value))
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl std::fmt::Debug for SplitBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self.parts.iter().map(|p| format!("{} rows {:?}", p.device.name(), p.rows)).collect();
        write!(f, "{} {} {:?}: {}", self.buffer_type.name(), self.dtype, self.ne, parts.join(", "))
    }
}
