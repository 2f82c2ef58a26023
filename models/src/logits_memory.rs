//! Host memory the generator reads logits into, kept from token to token: a decoded token's
//! logits go to pinned memory of the device that computes them, where that device has some,
//! so that the read is one DMA transfer instead of a copy the driver stages through its own
//! buffers (a token's 128 KB of logits); a batch's, or any where no pinned memory exists, go
//! to a vector.

use std::sync::Arc;

use tessera_core::{Buffer, DType, Device, Graph, TensorId};

use crate::error::Result;

pub(crate) struct LogitsMemory {
    /// `vocab` f32 values of pinned memory on 4-byte boundaries, if the device has such memory.
    pinned: Option<Arc<dyn Buffer>>,
    vocab: usize,
    /// Whether the values last read are in `pinned` (else in `values`).
    in_pinned: bool,
    values: Vec<f32>,
}

impl LogitsMemory {
    /// Memory for logits of `vocab` values computed on `device`. Without pinned memory (or
    /// where allocating it fails) every read goes to the vector, as fast as before.
    pub(crate) fn new(device: &dyn Device, vocab: usize) -> LogitsMemory {
        let pinned = device
            .host_buffer_type()
            .filter(|_| cfg!(target_endian = "little"))
            .and_then(|t| t.alloc_buffer(vocab.checked_mul(4)?).ok())
            .filter(|b| b.host_ptr_mut().is_some_and(|p| p as usize % 4 == 0) && b.size() >= vocab * 4);
        LogitsMemory { pinned, vocab, in_pinned: false, values: Vec::new() }
    }

    pub(crate) fn clear(&mut self) {
        self.in_pinned = false;
        self.values.clear();
    }

    /// Replaces what the memory holds with the values of tensor `id` of `graph`, one token's
    /// logits.
    pub(crate) fn read_last(&mut self, graph: &Graph, id: TensorId) -> Result<()> {
        self.clear();
        let t = graph.tensor(id)?;
        let fits = t.dtype() == DType::F32 && t.is_contiguous() && t.nelements() == self.vocab;
        match (&self.pinned, fits) {
            (Some(pinned), true) => {
                let ptr = pinned.host_ptr_mut().ok_or(tessera_core::Error::Cancelled)?;
                // SAFETY: `pinned` holds at least `vocab * 4` bytes at `ptr` (checked in `new`),
                // lives as long as `self`, and no other reference to its memory exists: it is
                // never bound to a graph, and `values()` borrows `self`, which `&mut self`
                // excludes here.
                let out = unsafe { std::slice::from_raw_parts_mut(ptr, self.vocab * 4) };
                graph.get_bytes(id, 0, out)?;
                self.in_pinned = true;
                Ok(())
            }
            _ => self.append(graph, id),
        }
    }

    /// Appends the f32 values of tensor `id` of `graph` to the vector (the logits of a batch's
    /// tokens, chunk after chunk).
    pub(crate) fn append(&mut self, graph: &Graph, id: TensorId) -> Result<()> {
        if self.in_pinned {
            let pinned: Vec<f32> = self.values().to_vec();
            self.in_pinned = false;
            self.values = pinned;
        }
        let t = graph.tensor(id)?;
        if t.dtype() != DType::F32 || !t.is_contiguous() {
            self.values.extend_from_slice(&graph.get_f32(id)?);
            return Ok(());
        }
        let (at, count) = (self.values.len(), t.nelements());
        self.values
            .try_reserve(count)
            .map_err(|_| tessera_core::Error::OutOfMemory { what: "logits".into(), requested: count * 4 })?;
        self.values.resize(at + count, 0.0);
        let values = &mut self.values[at..];
        graph.get_bytes(id, 0, bytemuck::cast_slice_mut(values))?;
        for v in values.iter_mut() {
            *v = f32::from_bits(u32::from_le(v.to_bits())); // tensors hold little-endian values
        }
        Ok(())
    }

    /// The values last read.
    pub(crate) fn values(&self) -> &[f32] {
        match (&self.pinned, self.in_pinned) {
            (Some(pinned), true) => match pinned.host_ptr() {
                // SAFETY: `in_pinned` says a read filled the first `vocab` f32 values at `ptr`
                // (4-byte aligned, checked in `new`); the memory lives as long as `self`, and
                // is only written through `&mut self`, which this borrow excludes. The values
                // are little-endian f32, this target's own order (pinned memory is used only
                // on little-endian targets).
                Some(ptr) => unsafe { std::slice::from_raw_parts(ptr.cast::<f32>(), self.vocab) },
                None => &[],
            },
            _ => &self.values,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use tessera_core::TensorData;
    use tessera_sim::{SimConfig, SimDevice};

    /// A graph with f32 tensors of `sizes` values in a buffer of `device`, the i-th holding
    /// `100 i + j` at place j.
    fn tensors(device: &'static dyn Device, sizes: &[usize]) -> (Graph, Vec<TensorId>) {
        let mut g = Graph::new();
        let mut ids = Vec::new();
        for (i, &n) in sizes.iter().enumerate() {
            let id = g.new_tensor(DType::F32, &[n]).unwrap();
            let buffer = device.buffer_type().alloc_buffer(n * 4).unwrap();
            g.bind(id, TensorData { buffer, offset: 0 }).unwrap();
            let values: Vec<f32> = (0..n).map(|j| (100 * i + j) as f32).collect();
            g.set_f32(id, &values).unwrap();
            ids.push(id);
        }
        (g, ids)
    }

    fn expected(i: usize, n: usize) -> Vec<f32> {
        (0..n).map(|j| (100 * i + j) as f32).collect()
    }

    #[test]
    fn a_tokens_logits_land_in_pinned_memory_and_batches_append_after_them() {
        let device: &'static dyn Device =
            SimDevice::create(SimConfig { pinned_host: true, ..SimConfig::new("SIMLOGITS0") });
        let (g, ids) = tensors(device, &[8, 8, 16]);
        let mut m = LogitsMemory::new(device, 8);
        assert!(m.pinned.is_some());

        m.read_last(&g, ids[0]).unwrap();
        assert!(m.in_pinned);
        assert_eq!(m.values(), expected(0, 8));
        m.read_last(&g, ids[1]).unwrap();
        assert_eq!(m.values(), expected(1, 8));

        // Appending keeps what the pinned memory held, then the new values.
        m.append(&g, ids[0]).unwrap();
        assert!(!m.in_pinned);
        assert_eq!(m.values(), [expected(1, 8), expected(0, 8)].concat());

        // A tensor of another size is read into the vector.
        m.read_last(&g, ids[2]).unwrap();
        assert!(!m.in_pinned);
        assert_eq!(m.values(), expected(2, 16));
        m.clear();
        assert!(m.values().is_empty());
    }

    #[test]
    fn without_pinned_memory_every_read_goes_to_the_vector() {
        let device: &'static dyn Device = SimDevice::create(SimConfig::new("SIMLOGITS1"));
        let (g, ids) = tensors(device, &[8, 8]);
        let mut m = LogitsMemory::new(device, 8);
        assert!(m.pinned.is_none());
        m.read_last(&g, ids[0]).unwrap();
        m.append(&g, ids[1]).unwrap();
        assert_eq!(m.values(), [expected(0, 8), expected(1, 8)].concat());
    }
}
