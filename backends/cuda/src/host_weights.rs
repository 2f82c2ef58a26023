//! Host memory holding weights, registered with the driver so that this GPU copies from it
//! directly.
//!
//! A prompt's products offloaded from CPU blocks read those blocks' weights from host memory
//! every batch. The weights sit in a memory-mapped model file: pageable memory, which the driver
//! copies through its own staging buffers at about 5 GB/s. Registered (page-locked), the same
//! memory is read by the GPU's copy engine directly and asynchronously, at the bus's speed.
//! Only weights are registered: nothing writes them, so a copy still in flight cannot see them
//! change.
//!
//! A buffer is registered in chunks of [`CHUNK`] bytes, each on the first copy that reads it:
//! page-locking the whole mapping of a model would read and pin the GPU blocks' weights too
//! (a file as large as the host's memory could not be locked at all). Registration is
//! process-wide, so the backends of one process (several GPUs, or several instances on one)
//! share each chunk: [`REGISTERED`] counts its users, and the last backend dropped that used
//! it unregisters it; each keeps the buffer alive until then. A chunk that cannot be registered
//! (no read-only registration on this platform, too little lockable memory, memory registered
//! by something else) is remembered, and copies that read it are left to the scheduler.
//! `TESSERA_CUDA_PIN_WEIGHTS=0` registers nothing.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::{Arc, Mutex, PoisonError};

use cudarc::driver::{sys, CudaContext};
use tessera_core::{Buffer, BufferUsage, TensorData};

/// Bytes registered at a time: chunks start at multiples of this address.
const CHUNK: usize = 64 << 20;

/// The chunks this process registered, by first address, with the number of backends using
/// each.
static REGISTERED: Mutex<BTreeMap<usize, usize>> = Mutex::new(BTreeMap::new());

/// Takes the chunk `whole` into use: registers it unless another backend of the process has;
/// whether it is registered.
fn use_chunk(whole: &Range<usize>) -> bool {
    let mut users = REGISTERED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(count) = users.get_mut(&whole.start) {
        *count += 1;
        return true;
    }
    let flags = sys::CU_MEMHOSTREGISTER_PORTABLE | sys::CU_MEMHOSTREGISTER_READ_ONLY;
    // SAFETY: `whole` lies inside a live buffer's mapped bytes, which stay mapped while the
    // caller holds the buffer; read-only registration never writes them.
    let r = unsafe { sys::cuMemHostRegister_v2(whole.start as *mut _, whole.len(), flags) };
    let ok = r == sys::CUresult::CUDA_SUCCESS;
    if ok {
        users.insert(whole.start, 1);
    }
    ok
}

/// Lets go of the chunk starting at `start`, which this backend took into use; the last user
/// unregisters it (with a context of the process current).
fn release_chunk(start: usize) {
    let mut users = REGISTERED.lock().unwrap_or_else(PoisonError::into_inner);
    let Some(count) = users.get_mut(&start) else { return };
    *count -= 1;
    if *count == 0 {
        users.remove(&start);
        // SAFETY: registered by `use_chunk` at this address, once; its buffer is alive (held
        // by the caller, the last backend using it).
        unsafe { sys::cuMemHostUnregister(start as *mut _) };
    }
}

/// The host weight buffers one backend has copied from.
pub(crate) struct HostWeights {
    ctx: Arc<CudaContext>,
    seen: Vec<Seen>,
}

struct Seen {
    buffer: Arc<dyn Buffer>,
    /// Per chunk of the buffer: `None` not tried yet, else whether it is registered.
    chunks: Vec<Option<bool>>,
}

/// The pieces of the address range `range` that lie in one chunk each, in order, with the
/// number of the chunk (counted from the one holding `first`, the buffer's first address).
fn pieces(first: usize, range: Range<usize>) -> impl Iterator<Item = (usize, Range<usize>)> {
    let origin = first / CHUNK;
    let mut at = range.start;
    std::iter::from_fn(move || {
        (at < range.end).then(|| {
            let end = ((at / CHUNK + 1) * CHUNK).min(range.end);
            let piece = (at / CHUNK - origin, at..end);
            at = end;
            piece
        })
    })
}

impl HostWeights {
    pub(crate) fn new(ctx: Arc<CudaContext>) -> HostWeights {
        HostWeights { ctx, seen: Vec::new() }
    }

    /// The host addresses of `len` bytes of `data`, one range per registered chunk they lie
    /// in, if its buffer is host memory holding weights and every such chunk is registered
    /// (now, on its first use). The caller has made the context current and checked the range.
    pub(crate) fn ranges(&mut self, data: &TensorData, len: usize) -> Option<Vec<Range<usize>>> {
        let base = data.buffer.host_ptr()? as usize;
        if data.buffer.usage() != BufferUsage::Weights || !enabled() {
            return None;
        }
        let size = data.buffer.size();
        let known = self.seen.iter().position(|s| std::ptr::addr_eq(Arc::as_ptr(&s.buffer), Arc::as_ptr(&data.buffer)));
        let seen = match known {
            Some(at) => &mut self.seen[at],
            None => {
                let chunks = pieces(base, base..base + size).count();
                self.seen.push(Seen { buffer: data.buffer.clone(), chunks: vec![None; chunks] });
                self.seen.last_mut()?
            }
        };
        let start = base + data.offset;
        let wanted: Vec<(usize, Range<usize>)> = pieces(base, start..start + len).collect();
        for (chunk, _) in &wanted {
            let state = seen.chunks.get_mut(*chunk)?;
            if state.is_none() {
                // The whole chunk, as far as the buffer reaches into it (held by `seen`).
                let (_, whole) = pieces(base, base..base + size).nth(*chunk)?;
                *state = Some(use_chunk(&whole));
            }
            if *state != Some(true) {
                return None;
            }
        }
        Some(wanted.into_iter().map(|(_, r)| r).collect())
    }
}

fn enabled() -> bool {
    std::env::var("TESSERA_CUDA_PIN_WEIGHTS").map_or(true, |v| v.trim() != "0")
}

impl Drop for HostWeights {
    /// Lets go of the chunks it used (the backend has waited for its stream first).
    fn drop(&mut self) {
        let registered = |s: &Seen| s.chunks.contains(&Some(true));
        if self.seen.iter().any(registered) && self.ctx.bind_to_thread().is_ok() {
            for s in &self.seen {
                let Some(base) = s.buffer.host_ptr() else { continue };
                let base = base as usize;
                for (chunk, whole) in pieces(base, base..base + s.buffer.size()) {
                    if s.chunks.get(chunk) == Some(&Some(true)) {
                        release_chunk(whole.start);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_cut_at_chunk_boundaries_counted_from_the_buffers_first_chunk() {
        let first = 3 * CHUNK + 100;
        assert_eq!(pieces(first, first..first + 10).collect::<Vec<_>>(), [(0, first..first + 10)]);
        let (a, b) = (4 * CHUNK - 8, 6 * CHUNK + 8);
        assert_eq!(
            pieces(first, a..b).collect::<Vec<_>>(),
            [(0, a..4 * CHUNK), (1, 4 * CHUNK..5 * CHUNK), (2, 5 * CHUNK..6 * CHUNK), (3, 6 * CHUNK..b)]
        );
        assert_eq!(pieces(first, a..a).count(), 0);
        // A buffer's chunks: the first and last only as far as the buffer reaches.
        let whole: Vec<_> = pieces(first, first..5 * CHUNK + 1).collect();
        assert_eq!(whole, [(0, first..4 * CHUNK), (1, 4 * CHUNK..5 * CHUNK), (2, 5 * CHUNK..5 * CHUNK + 1)]);
    }
}
