//! A batch's inputs staged in pinned host memory: written there by the host, then copied by
//! the device's copy engine while the host goes on. From ordinary memory every input is a
//! synchronous copy that the driver stages in small pieces; for 1024 sequences of 128 tokens
//! (2 MiB of inputs) those copies took longer than several of the graph's kernels.

use std::sync::Arc;

use tessera_core::{Buffer, BufferType, Scheduler, TensorId};

use crate::bert::BertGraph;
use crate::error::Result;
use crate::inputs::inputs_for;
use crate::Layout;

/// Offsets of the inputs in the staging buffer are multiples of this.
const ALIGN: usize = 64;

/// The inputs of one batch shape: everything but the token ids written once (they depend on
/// the sequences' lengths alone), the ids written per batch by [`StagedInputs::write_ids`].
pub(crate) struct StagedInputs {
    buffer: Arc<dyn Buffer>,
    /// Each input tensor with the offset and length of its bytes in `buffer`; the token ids
    /// first.
    parts: Vec<(TensorId, usize, usize)>,
}

impl StagedInputs {
    /// The inputs of `model` (built for sequences of `lens` tokens) staged in a buffer of
    /// `buffer_type`, host memory.
    pub(crate) fn new(buffer_type: &'static dyn BufferType, model: &BertGraph, lens: &[usize]) -> Result<StagedInputs> {
        let inputs = inputs_for(&Layout::for_lengths(lens), lens)?;
        let ids_bytes = 4 * lens.iter().sum::<usize>();
        let mut values: Vec<(TensorId, &[u8])> = vec![
            (model.positions, bytemuck::cast_slice(&inputs.positions)),
            (model.attention_mask, bytemuck::cast_slice(&inputs.attention_mask)),
            (model.pooling, bytemuck::cast_slice(&inputs.pooling)),
        ];
        if let (Some(gather), Some(scatter)) = (model.attention_gather, model.attention_scatter) {
            values.push((gather, bytemuck::cast_slice(&inputs.attention_gather)));
            values.push((scatter, bytemuck::cast_slice(&inputs.attention_scatter)));
        }
        let mut parts = vec![(model.token_ids, 0, ids_bytes)];
        let mut end = ids_bytes;
        for (id, bytes) in &values {
            let at = end.next_multiple_of(ALIGN);
            parts.push((*id, at, bytes.len()));
            end = at + bytes.len();
        }
        let buffer = buffer_type.alloc_buffer(end)?;
        for ((_, at, _), (_, bytes)) in parts[1..].iter().zip(&values) {
            buffer.set_bytes(*at, bytes)?;
        }
        Ok(StagedInputs { buffer, parts })
    }

    /// Writes the token ids of `sequences` (of the lengths the inputs were staged for).
    pub(crate) fn write_ids<S: AsRef<[u32]>>(&self, sequences: &[S]) -> Result<()> {
        // The ids' bytes are those of the i32 values the graph takes (what `as i32` gives).
        let mut at = 0;
        for s in sequences {
            let bytes: &[u8] = bytemuck::cast_slice(s.as_ref());
            self.buffer.set_bytes(at, bytes)?;
            at += bytes.len();
        }
        Ok(())
    }

    /// Queues the copies of every input into the scheduler's graph.
    ///
    /// # Safety
    /// The staged bytes must not be written (no [`StagedInputs::write_ids`], no drop) until the
    /// scheduler's next `synchronize` has returned.
    pub(crate) unsafe fn queue(&self, sched: &mut Scheduler) -> Result<()> {
        let base = self.buffer.host_ptr().ok_or(tessera_core::Error::Cancelled)?;
        for &(id, at, len) in &self.parts {
            // SAFETY: `at..at + len` lies in the buffer (laid out by `new`), host memory that the
            // caller leaves unwritten until the copies are done.
            unsafe { sched.set_tensor_async(id, base.add(at), len)? };
        }
        Ok(())
    }
}
