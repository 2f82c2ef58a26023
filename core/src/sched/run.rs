//! Allocating a plan and running it: input copies, splits in order, events between backends.

use alloc::sync::Arc;

use crate::backend::{Backend, SplitRef};
use crate::buffer::{same_buffer_type, Buffer, BufferType};
use crate::error::{Error, Result};
use crate::graph::{copy_tensor, copy_tensor_via, pack_rows, Graph};
use crate::host_buffer::HOST_BUFFER_TYPE;
use crate::op::Op;
use crate::sched::programs::{self, SlotPrograms};
use crate::sched::split::Split;
use crate::sched::{Completion, Prepared, Scheduler};
use crate::tensor::TensorId;

impl<const MAX_BACKENDS: usize, const MAX_COPIES: usize, const MAX_SPLIT_INPUTS: usize>
    Scheduler<MAX_BACKENDS, MAX_COPIES, MAX_SPLIT_INPUTS>
{
    /// Plans `graph` as the worst case and sizes the compute buffers for it. Later graphs
    /// must fit in these buffers: one that needs more is an error, not a reallocation.
    pub fn reserve(&mut self, graph: &Graph) -> Result<&crate::sched::SplitPlan> {
        self.synchronize()?;
        self.split_graph(graph)?;
        let Some(p) = self.prepared.as_mut() else { return Err(not_planned()) };
        self.galloc.set_runs(&p.runs)?;
        self.galloc.reserve(&p.graph, Some(&p.slots))?;
        self.reserved = true;
        self.finish_plan()
    }

    /// Plans `graph` and binds the scheduled graph to the compute buffers (growing them unless
    /// `reserve` fixed them). Advances the pipeline slot when `n_copies > 1`.
    pub fn alloc_graph(&mut self, graph: &Graph) -> Result<&crate::sched::SplitPlan> {
        self.cur_copy = self.next_copy;
        self.next_copy = (self.next_copy + 1) % self.options.n_copies;
        self.split_graph(graph)?;
        let Some(p) = self.prepared.as_mut() else { return Err(not_planned()) };
        self.galloc.set_runs(&p.runs)?;
        if self.reserved {
            self.galloc.alloc_within(&mut p.graph, Some(&p.slots))?;
        } else {
            // Inputs may move to other memory: nothing queued may still use the old places.
            for b in self.backends.iter_mut() {
                b.synchronize()?;
            }
            self.galloc.alloc(&mut p.graph, Some(&p.slots))?;
        }
        self.finish_plan()
    }

    fn finish_plan(&mut self) -> Result<&crate::sched::SplitPlan> {
        let sizes = (0..self.backends.len()).map(|i| self.galloc.buffer_size(i)).collect();
        let Some(p) = self.prepared.as_mut() else { return Err(not_planned()) };
        p.plan.buffer_sizes = sizes;
        #[cfg(feature = "std")]
        match self.debug {
            0 => {}
            1 => std::eprint!("{}", p.plan),
            _ => std::eprint!("{}", p.plan.detailed()),
        }
        Ok(&p.plan)
    }

    /// Waits for every backend.
    pub fn synchronize(&mut self) -> Result<()> {
        for b in self.backends.iter_mut() {
            b.synchronize()?;
        }
        Ok(())
    }

    /// Plans, allocates and runs `graph`, then waits for the result.
    pub fn compute_graph(&mut self, graph: &Graph) -> Result<Completion> {
        self.alloc_graph(graph)?;
        self.compute()
    }

    /// Runs the allocated graph and waits for it.
    pub fn compute(&mut self) -> Result<Completion> {
        // The synchronize also ends the queued reads of user inputs, on an error too.
        let done = self.run(InputReads::Queued);
        let synchronized = self.synchronize();
        let done = done?;
        synchronized?;
        Ok(done)
    }

    /// Runs the allocated graph; backends may still be working when this returns. The user
    /// inputs have been read: the caller may set the next ones.
    pub fn compute_async(&mut self) -> Result<Completion> {
        self.run(InputReads::Done)
    }

    fn run(&mut self, reads: InputReads) -> Result<Completion> {
        let p = self.prepared.take().ok_or_else(not_planned)?;
        let result = self.run_splits(&p, reads);
        self.prepared = Some(p);
        result
    }

    fn run_splits(&mut self, p: &Prepared, reads: InputReads) -> Result<Completion> {
        let (graph, splits) = (&p.graph, &p.plan.splits[..]);
        let c = self.cur_copy;
        let layout = programs::layout_stamp(graph, self.galloc.generation());
        let slot = self.programs.get_mut(c).ok_or_else(not_planned)?;
        SlotPrograms::begin(slot, p.fingerprint, layout, splits.len())?;
        let mut previous: Option<usize> = None;
        for (i, split) in splits.iter().enumerate() {
            let b = split.backend;
            // Memory may be reused across splits: a split with nothing to wait for must still
            // not start while an earlier one on another backend is running.
            if let Some(prev) = previous.filter(|&prev| prev != b && split.inputs.is_empty()) {
                self.backends[prev].synchronize()?;
            }
            self.copy_inputs(graph, split, c, reads)?;
            let finished = match self.callback.as_mut() {
                None => {
                    let split_ref = SplitRef { graph, nodes: split.nodes.clone(), consumers: &p.consumers, layout };
                    let backend = &mut *self.backends[b];
                    let Some(programs) = self.programs.get_mut(c).and_then(Option::as_mut) else {
                        return Err(not_planned());
                    };
                    let program = programs.ready(i, backend, &split_ref, &mut self.program_stats)?;
                    backend.run(program, graph)?;
                    true
                }
                Some(cb) => compute_observed(&mut *self.backends[b], graph, split, &mut **cb)?,
            };
            if let Some(event) = self.events[b][c].as_deref() {
                self.backends[b].record_event(event)?;
            }
            if !finished {
                return Ok(Completion::Stopped);
            }
            previous = Some(b);
        }
        Ok(Completion::Finished)
    }

    /// Queues a read of `len` bytes of `tensor` (of the scheduled graph) into `dst`, on the
    /// backend whose memory holds it, after the work queued there so far: with pipelined
    /// runs, the result of one run is read while the next is queued, and stays what that
    /// run computed.
    ///
    /// # Safety
    /// `dst` must be valid for writes of `len` bytes, and not otherwise accessed, until the
    /// next `synchronize` of the scheduler returns.
    pub unsafe fn get_tensor_async(&mut self, tensor: TensorId, dst: *mut u8, len: usize) -> Result<()> {
        let (b, data) = self.placed(tensor, len, "GET_TENSOR")?;
        // SAFETY: the caller keeps `dst` valid and exclusively ours for `len` bytes until the
        // next synchronize, which waits for this backend.
        unsafe { self.backends[b].get_tensor_async(&data, 0, dst, len) }
    }

    /// Queues a write of `len` bytes from `src` into the first bytes of `tensor` (of the
    /// scheduled graph), on the backend whose memory holds it, before the work queued there
    /// next: a user input set without the host waiting for the copy (from pinned memory a
    /// GPU's copy engine reads it while the host goes on).
    ///
    /// # Safety
    /// `src` must be valid for reads of `len` bytes, and not written, until the next
    /// `synchronize` of the scheduler returns.
    pub unsafe fn set_tensor_async(&mut self, tensor: TensorId, src: *const u8, len: usize) -> Result<()> {
        let (b, data) = self.placed(tensor, len, "SET_TENSOR")?;
        // SAFETY: the caller keeps `src` valid and unwritten for `len` bytes until the next
        // synchronize, which waits for this backend.
        unsafe { self.backends[b].set_tensor_async(&data, 0, src, len) }
    }

    /// The backend whose memory holds `tensor` of the scheduled graph and where its bytes
    /// lie, with `len` of them to be copied (at most its size).
    fn placed(&self, tensor: TensorId, len: usize, op: &'static str) -> Result<(usize, crate::buffer::TensorData)> {
        let p = self.prepared.as_ref().ok_or_else(not_planned)?;
        let data = p.graph.data(tensor).ok_or_else(|| Error::NotAllocated { tensor: p.graph.label(tensor) })?;
        let nbytes = p.graph.tensor(tensor)?.nbytes();
        if len > nbytes {
            return Err(Error::InvalidParam {
                op,
                message: alloc::format!("{len} bytes asked of {}, which has {nbytes}", p.graph.label(tensor)),
            });
        }
        let b = p.slots.get(tensor.index()).copied().filter(|&b| b < self.backends.len()).ok_or_else(|| {
            Error::InvalidParam {
                op,
                message: alloc::format!("{} is not a tensor of the scheduled graph", p.graph.label(tensor)),
            }
        })?;
        Ok((b, data))
    }

    /// The host waits until pipeline slot `c` of backend `b` is free.
    fn wait_host(&mut self, b: usize, c: usize) -> Result<()> {
        match self.events[b][c].as_deref() {
            Some(event) => event.synchronize(),
            None => self.backends[b].synchronize(),
        }
    }

    /// Backend `b` waits (without blocking the host, where it can) until slot `c` is free.
    fn wait_device(&mut self, b: usize, c: usize) -> Result<()> {
        match self.events[b][c].as_deref() {
            Some(event) => self.backends[b].wait_event(event),
            None => self.backends[b].synchronize(),
        }
    }

    /// A host buffer of at least `bytes` for copies from backend `from` to backend `to`
    /// that neither can do itself: pinned memory of either device where one has it (faster
    /// transfers), else ordinary host memory. Kept and reused; replaced only to grow.
    fn staging_for(&mut self, from: usize, to: usize, bytes: usize) -> Result<Arc<dyn Buffer>> {
        let buffer_type: &'static dyn BufferType = self.devices[to]
            .host_buffer_type()
            .or_else(|| self.devices[from].host_buffer_type())
            .unwrap_or(&HOST_BUFFER_TYPE);
        let slot = self.staging.iter().position(|s| same_buffer_type(s.buffer_type(), buffer_type));
        if let Some(s) = slot.map(|i| &self.staging[i]).filter(|s| s.size() >= bytes) {
            return Ok(s.clone());
        }
        let fresh = buffer_type.alloc_buffer(bytes)?;
        match slot {
            Some(i) => self.staging[i] = fresh.clone(),
            None => {
                self.staging.try_reserve(1).map_err(|_| crate::fallible::out_of_memory("staging buffers", 1))?;
                self.staging.push(fresh.clone());
            }
        }
        Ok(fresh)
    }

    /// Copies the rows of `src` (of backend `from`) back to back into `dst` (of backend `to`),
    /// gathered in a staging buffer. Both backends are idle.
    fn copy_packed(&mut self, graph: &Graph, src: TensorId, dst: TensorId, from: usize, to: usize) -> Result<()> {
        let len = graph.tensor(dst)?.nbytes();
        let staging = self.staging_for(from, to, len)?;
        let Some(base) = staging.host_ptr_mut() else {
            return Err(Error::InvalidParam { op: "COPY", message: "a staging buffer is not host memory".into() });
        };
        // SAFETY: the staging buffer is writable host memory of at least `len` bytes, used by
        // this copy alone (copies run one at a time), with no other slice over it.
        let packed = unsafe { core::slice::from_raw_parts_mut(base, len) };
        pack_rows(graph, src, packed)?;
        graph.set_bytes(dst, 0, packed)
    }

    fn copy_inputs(&mut self, graph: &Graph, split: &Split, c: usize, reads: InputReads) -> Result<()> {
        let b = split.backend;
        // Slot `c` of this backend's copies may still be read by its last run.
        if split.inputs.iter().any(|i| i.user_input) {
            self.wait_host(b, c)?;
        }
        for input in &split.inputs {
            let dst = input.copies[c];
            if input.user_input {
                let (Some(src_data), Some(dst_data)) = (graph.data(input.tensor), graph.data(dst)) else {
                    return Err(Error::NotAllocated { tensor: graph.label(input.tensor) });
                };
                match src_data.buffer.host_ptr() {
                    // Queued on the backend's stream, which orders it after the kernels that
                    // used the copy before; the source is left alone until the caller's
                    // synchronize (`compute`).
                    Some(base) if reads == InputReads::Queued => {
                        crate::buffer::check_range(&*src_data.buffer, src_data.offset, input.bytes)?;
                        // SAFETY: the source range lies inside its host buffer (checked
                        // above), which the graph keeps alive and the caller leaves unchanged
                        // until `compute` has synchronized every backend.
                        unsafe {
                            self.backends[b].set_tensor_async(&dst_data, 0, base.add(src_data.offset), input.bytes)
                        }?;
                    }
                    // The caller may overwrite its input once this returns: copy it now.
                    _ => copy_tensor(graph, input.tensor, graph, dst)?,
                }
                continue;
            }
            self.wait_device(b, c)?;
            if input.packed {
                self.backends[input.from].synchronize()?;
                self.backends[b].synchronize()?;
                self.copy_packed(graph, input.tensor, dst, input.from, b)?;
                continue;
            }
            let (Some(src_data), Some(dst_data)) = (graph.data(input.tensor), graph.data(dst)) else {
                return Err(Error::NotAllocated { tensor: graph.label(input.tensor) });
            };
            let copied = match two_mut(&mut self.backends, input.from, b) {
                Some((from, to)) => to.copy_tensor_async(from, &src_data, &dst_data, input.bytes)?,
                None => false,
            };
            if !copied {
                self.backends[input.from].synchronize()?;
                self.backends[b].synchronize()?;
                let from = input.from;
                let mut stage = |bytes: usize| self.staging_for(from, b, bytes);
                copy_tensor_via(graph, input.tensor, graph, dst, Some(&mut stage))?;
            }
        }
        Ok(())
    }
}

/// Whether the reads of user inputs may still be queued when a run returns (`compute`
/// synchronizes after it) or must be done (`compute_async`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum InputReads {
    Queued,
    Done,
}

/// Mutable access to two different backends.
fn two_mut(
    backends: &mut [alloc::boxed::Box<dyn Backend>],
    a: usize,
    b: usize,
) -> Option<(&mut dyn Backend, &mut dyn Backend)> {
    if a == b || a >= backends.len() || b >= backends.len() {
        return None;
    }
    let (lo, hi) = backends.split_at_mut(a.max(b));
    let (x, y) = (&mut *lo[a.min(b)], &mut *hi[0]);
    Some(if a < b { (x, y) } else { (y, x) })
}

/// Computes a split node by node as the eval callback asks; false if it asked to stop.
fn compute_observed(
    backend: &mut dyn Backend,
    graph: &Graph,
    split: &Split,
    cb: &mut crate::sched::EvalCallback,
) -> Result<bool> {
    let ids = graph.nodes();
    let mut start = split.nodes.start;
    while start < split.nodes.end {
        // Extend the range until a node the callback wants to see.
        let mut end = start;
        let mut wanted = false;
        while end < split.nodes.end {
            let id = ids[end];
            end += 1;
            let observable = graph.tensor(id).is_ok_and(|t| t.op() != Op::None);
            if observable && cb(graph, id, true) {
                wanted = true;
                break;
            }
        }
        backend.compute(graph, start..end)?;
        backend.synchronize()?;
        if wanted && !cb(graph, ids[end - 1], false) {
            return Ok(false);
        }
        start = end;
    }
    Ok(true)
}

fn not_planned() -> Error {
    Error::InvalidParam { op: "SCHEDULER", message: "no graph has been planned and allocated yet".into() }
}
