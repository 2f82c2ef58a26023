//! A backend (stream) of a loaded plugin.

use alloc::boxed::Box;
use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::any::Any;
use core::mem::{offset_of, size_of};
use core::ops::Range;

use tessera_core::buffer::check_range;
use tessera_core::{Backend, Buffer, Device, Error, Event, Graph, NodeByNode, Program, Result, SplitRef, TensorData};

use super::buffer::buffer_ref;
use super::program::SplitBuffers;
use super::{free_handle, PluginDevice, PluginEvent, PluginProgram, PluginShared};
use crate::abi::{AbiError, Ctx};
use crate::desc::{encode_graph, EncodedGraph};
use crate::tables::{AbiBackend, AbiBackendFns, AbiProgram, BackendFns};

/// A stream on a device of a loaded plugin.
pub struct PluginBackend {
    shared: Arc<PluginShared>,
    fns: BackendFns,
    ctx: Ctx,
    name: String,
    device: &'static PluginDevice,
    /// What the programs this backend prepared hold, to recognise it.
    token: Arc<()>,
}

// SAFETY: one backend is used by one thread at a time (`&mut self`), which is what the ABI
// asks of backend handles.
unsafe impl Send for PluginBackend {}

impl PluginBackend {
    /// Wraps a backend handle; on failure the handle is freed.
    ///
    /// # Safety
    /// `handle` must be a backend handle `device`'s plugin just returned.
    pub(super) unsafe fn wrap(
        shared: &Arc<PluginShared>,
        handle: AbiBackend,
        device: &'static PluginDevice,
    ) -> Result<PluginBackend> {
        // SAFETY: the plugin's backend function table.
        let fns = match unsafe { BackendFns::read(handle.fns) } {
            Ok(fns) => fns,
            Err(e) => {
                // SAFETY: the handle's own free function (if readable), exactly once.
                unsafe { free_handle(handle.fns, handle.ctx, offset_of!(AbiBackendFns, free), |t| t.free) };
                return Err(e);
            }
        };
        // SAFETY: a function of the backend's table with its context.
        let mut name = unsafe { crate::desc::abi_string((fns.name)(handle.ctx)) };
        if name.is_empty() {
            name = device.name().into();
        }
        shared.hold();
        Ok(PluginBackend { shared: shared.clone(), fns, ctx: handle.ctx, name, device, token: Arc::new(()) })
    }

    pub(super) fn set_n_threads(&mut self, n: usize) -> Result<()> {
        let f = self.fns.set_n_threads.ok_or_else(|| Error::Unsupported {
            backend: self.name.clone(),
            op: "SET_N_THREADS",
            tensor: String::new(),
        })?;
        // SAFETY: a function of the backend's table with its context.
        self.shared.call(&self.name, |err| unsafe { f(self.ctx, n, err) })
    }

    fn event_call(
        &mut self,
        event: &dyn Event,
        f: Option<unsafe extern "C" fn(Ctx, Ctx, *mut AbiError) -> i32>,
    ) -> Result<()> {
        let Some(f) = f else { return Err(self.no_events()) };
        let ev = match event.as_any().downcast_ref::<PluginEvent>() {
            Some(e) if e.belongs_to(&self.shared) => e.ctx(),
            _ => {
                return Err(Error::Backend {
                    backend: self.name.clone(),
                    message: "the event belongs to another device family".into(),
                })
            }
        };
        // SAFETY: a function of the backend's table with its context and a live event of the
        // same plugin.
        self.shared.call(&self.name, |err| unsafe { f(self.ctx, ev, err) })
    }

    /// The nodes `nodes` of `graph` with what they touch, as descriptors, and the buffers
    /// they refer to.
    fn encode<'g>(&self, graph: &'g Graph, nodes: Range<usize>) -> Result<(EncodedGraph<'g>, SplitBuffers)> {
        let ids = graph.nodes().get(nodes.clone()).ok_or_else(|| Error::InvalidParam {
            op: "COMPUTE",
            message: format!("node range {nodes:?} is outside the graph's {} nodes", graph.nodes().len()),
        })?;
        let (shared, name) = (&self.shared, self.name.as_str());
        let mut buffers = SplitBuffers::new();
        let encoded = encode_graph(
            graph,
            ids,
            Some(&mut |b: &Arc<dyn Buffer>| {
                buffers.push(b.clone());
                buffer_ref(shared, &**b, name)
            }),
        )?;
        Ok((encoded, buffers))
    }

    /// The split's descriptors with its consumer counts, for `prepare` and `update`.
    fn encode_split<'g>(&self, split: &SplitRef<'g>) -> Result<(EncodedGraph<'g>, SplitBuffers)> {
        let (mut encoded, buffers) = self.encode(split.graph, split.nodes.clone())?;
        encoded.set_consumers(split.consumers)?;
        Ok((encoded, buffers))
    }

    /// The runs the plugin fuses in `split` (indices into the split's graph), as
    /// [`Backend::fused_runs`] reports them; none where the plugin has no such entry.
    fn runs_of(&self, split: &SplitRef<'_>) -> Result<Vec<Range<usize>>> {
        let Some(fused_runs) = self.fns.fused_runs else { return Ok(Vec::new()) };
        let n = split.nodes.len();
        let ids = split.graph.nodes().get(split.nodes.clone()).ok_or(Error::Cancelled)?;
        // Only the graph's structure crosses: its tensors may have no memory yet.
        let mut encoded = encode_graph(split.graph, ids, None)?;
        encoded.set_consumers(split.consumers)?;
        let abi = encoded.as_abi();
        // A run starts at each node at most, but a plugin may say otherwise: then ask once
        // more with room for what it said.
        let mut cap = n;
        for asked in 0..2 {
            let mut pairs: Vec<usize> = Vec::new();
            let len = cap.checked_mul(2).ok_or(Error::Overflow { what: "fused runs" })?;
            pairs.try_reserve_exact(len).map_err(|_| Error::OutOfMemory {
                what: "fused runs of a plugin".into(),
                requested: len * size_of::<usize>(),
            })?;
            pairs.resize(len, 0);
            let mut count = 0usize;
            // SAFETY: a function of the backend's table with its context; the descriptors
            // live for the call, `pairs` holds `2 * cap` writable values and `count` is
            // writable.
            self.shared.call(&self.name, |err| unsafe {
                fused_runs(self.ctx, &abi, 0, n, pairs.as_mut_ptr(), cap, &mut count, err)
            })?;
            if count > cap && asked == 0 {
                cap = count;
                continue;
            }
            let start = split.nodes.start;
            // Runs outside the split's nodes are the plugin's mistake: dropped.
            return Ok(pairs[..2 * count.min(cap)]
                .chunks_exact(2)
                .filter(|r| r[0] < r[1] && r[1] <= n)
                .map(|r| start + r[0]..start + r[1])
                .collect());
        }
        Ok(Vec::new())
    }

    /// This backend's program, if `program` is one.
    fn own<'p>(&self, program: &'p mut dyn Program) -> Option<&'p mut PluginProgram> {
        program.as_any_mut().downcast_mut::<PluginProgram>().filter(|p| p.belongs_to(&self.token))
    }
}

impl Drop for PluginBackend {
    fn drop(&mut self) {
        // SAFETY: the backend's own free function and context, called exactly once.
        unsafe { self.shared.release(self.fns.free, self.ctx) };
    }
}

impl Backend for PluginBackend {
    fn name(&self) -> &str {
        &self.name
    }
    fn device(&self) -> &'static dyn Device {
        self.device
    }
    unsafe fn set_tensor_async(&mut self, dst: &TensorData, offset: usize, src: *const u8, len: usize) -> Result<()> {
        let r = buffer_ref(&self.shared, &*dst.buffer, &self.name)?;
        let at = dst.offset.checked_add(offset).ok_or(Error::Overflow { what: "tensor offset" })?;
        check_range(&*dst.buffer, at, len)?;
        // SAFETY: a function of the backend's table with its context; the caller keeps `src`
        // valid for `len` bytes until the next synchronize, as the ABI asks.
        self.shared.call(&self.name, |err| unsafe { (self.fns.set_tensor_async)(self.ctx, &r, at, src, len, err) })
    }
    unsafe fn get_tensor_async(&mut self, src: &TensorData, offset: usize, dst: *mut u8, len: usize) -> Result<()> {
        let r = buffer_ref(&self.shared, &*src.buffer, &self.name)?;
        let at = src.offset.checked_add(offset).ok_or(Error::Overflow { what: "tensor offset" })?;
        check_range(&*src.buffer, at, len)?;
        // SAFETY: a function of the backend's table with its context; the caller keeps `dst`
        // valid and untouched for `len` bytes until the next synchronize, as the ABI asks.
        self.shared.call(&self.name, |err| unsafe { (self.fns.get_tensor_async)(self.ctx, &r, at, dst, len, err) })
    }
    fn synchronize(&mut self) -> Result<()> {
        // SAFETY: a function of the backend's table with its context.
        self.shared.call(&self.name, |err| unsafe { (self.fns.synchronize)(self.ctx, err) })
    }
    fn compute(&mut self, graph: &Graph, nodes: Range<usize>) -> Result<()> {
        let n = nodes.len();
        let (encoded, _buffers) = self.encode(graph, nodes)?;
        let abi = encoded.as_abi();
        // SAFETY: a function of the backend's table with its context; the descriptors and the
        // memory they refer to stay valid for the call (and, for queued work, as long as the
        // graph's buffers live, which the caller keeps until synchronize).
        self.shared.call(&self.name, |err| unsafe { (self.fns.compute)(self.ctx, &abi, 0, n, err) })
    }
    /// The plugin prepares the split into a program of its own (a plugin without programs
    /// gets the default one, which computes node by node).
    fn prepare(&mut self, split: &SplitRef<'_>) -> Result<Box<dyn Program>> {
        let (Some(prepare), Some(_)) = (self.fns.prepare, self.fns.run) else {
            return Ok(Box::new(NodeByNode { nodes: split.nodes.clone() }));
        };
        let (encoded, buffers) = self.encode_split(split)?;
        let abi = encoded.as_abi();
        let (n, layout) = (split.nodes.len(), split.layout);
        let _call = self.shared.enter_or_err()?;
        let mut handle = AbiProgram::NULL;
        // SAFETY: a function of the backend's table with its context and a writable output;
        // the descriptors live for the call and the memory they refer to as long as the
        // program, which holds its buffers.
        self.shared.call(&self.name, |err| unsafe { prepare(self.ctx, &abi, 0, n, layout, &mut handle, err) })?;
        // SAFETY: a program handle the plugin just returned.
        let program =
            unsafe { PluginProgram::wrap(&self.shared, handle, self.token.clone(), split.nodes.clone(), buffers) }?;
        Ok(Box::new(program))
    }
    /// The plugin updates its program in place when it can; otherwise it is prepared again.
    fn update(&mut self, program: &mut Box<dyn Program>, split: &SplitRef<'_>) -> Result<()> {
        if let Some(update) = self.fns.update {
            if let Some(p) = self.own(&mut **program) {
                let (encoded, buffers) = self.encode_split(split)?;
                let abi = encoded.as_abi();
                let (n, layout) = (split.nodes.len(), split.layout);
                // SAFETY: a function of the backend's table with its context and a live program
                // of it; the memory the new descriptors refer to is held by the program from now.
                self.shared.call(&self.name, |err| unsafe { update(self.ctx, p.ctx(), &abi, 0, n, layout, err) })?;
                p.updated(split.nodes.clone(), buffers);
                return Ok(());
            }
        }
        if self.fns.prepare.is_none() && program.as_any_mut().downcast_mut::<NodeByNode>().is_some() {
            return Ok(());
        }
        *program = self.prepare(split)?;
        Ok(())
    }
    /// Replays the program over the split the plugin was last given (`prepare`, `update`):
    /// `graph` must be that graph, with the same layout, as `Backend::run` asks.
    fn run(&mut self, program: &mut dyn Program, graph: &Graph) -> Result<()> {
        if let Some(p) = program.as_any_mut().downcast_mut::<NodeByNode>() {
            let nodes = p.nodes.clone();
            return self.compute(graph, nodes);
        }
        let (Some(run), Some(p)) = (self.fns.run, self.own(program)) else {
            return Err(Error::Backend {
                backend: self.name.clone(),
                message: "this program was prepared by another backend".into(),
            });
        };
        p.check_graph(graph)?;
        // SAFETY: a function of the backend's table with its context and a live program of it,
        // whose memory the program holds.
        self.shared.call(&self.name, |err| unsafe { run(self.ctx, p.ctx(), err) })
    }
    /// The plugin's runs, asked across the tables; a failed call reports none (the plugin's
    /// fused kernels then fall back where the allocator shares their operands' memory).
    fn fused_runs(&self, split: &SplitRef<'_>, run: &mut dyn FnMut(Range<usize>)) {
        for r in self.runs_of(split).unwrap_or_default() {
            run(r);
        }
    }
    fn record_event(&mut self, event: &dyn Event) -> Result<()> {
        self.event_call(event, self.fns.record_event)
    }
    fn wait_event(&mut self, event: &dyn Event) -> Result<()> {
        self.event_call(event, self.fns.wait_event)
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}
