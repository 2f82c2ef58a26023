//! A Vulkan backend: submissions to one device's queue, ordered by a timeline semaphore.
//!
//! A prepared split is a recorded command buffer ([`Recorded`]), resubmitted by `run`;
//! `compute` records the nodes it is given and submits them once. Each submission signals
//! the next value of the backend's timeline, which `synchronize` waits for. Transfers are
//! synchronous: they wait for the backend's work, then copy.

use std::any::Any;
use std::ops::Range;
use std::sync::Arc;

use ash::vk;
use tessera_core::tensor::MAX_SRC;
use tessera_core::{
    Backend, Device, Error, Event, Graph, Op, Program, Result, SplitRef, TensorData, TensorId, TensorView,
};

use crate::args::TensorDesc;
use crate::buffer::VulkanBuffer;
use crate::context::Context;
use crate::device::VulkanDevice;
use crate::event::VulkanEvent;
use crate::ops::{self, Dispatch, Operand};
use crate::profile;
use crate::program::{Access, Recorded};

/// A queue of work on one Vulkan device.
pub struct VulkanBackend {
    device: &'static VulkanDevice,
    ctx: Arc<Context>,
    timeline: vk::Semaphore,
    /// The timeline value of the latest submission.
    submitted: u64,
    /// What `compute` submitted, kept until the work is done.
    transient: Vec<Recorded>,
    caps: ops::Caps,
    /// Dispatch times, when `TESSERA_VULKAN_PROFILE` asks for them.
    profile: Option<profile::Shared>,
}

// SAFETY: the semaphore is an identifier any thread may use; the backend is used through
// `&mut`, one thread at a time.
unsafe impl Send for VulkanBackend {}

/// A split recorded into a command buffer.
struct RecordedSplit(Recorded);

impl Program for RecordedSplit {
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

impl VulkanBackend {
    pub(crate) fn new(device: &'static VulkanDevice) -> Result<VulkanBackend> {
        let ctx = device.context().clone();
        let mut kind =
            vk::SemaphoreTypeCreateInfo::default().semaphore_type(vk::SemaphoreType::TIMELINE).initial_value(0);
        let info = vk::SemaphoreCreateInfo::default().push_next(&mut kind);
        // SAFETY: a valid create info for this device.
        let timeline =
            unsafe { ctx.device.create_semaphore(&info, None) }.map_err(|e| ctx.err("creating a semaphore", e))?;
        Ok(VulkanBackend {
            device,
            ctx,
            timeline,
            submitted: 0,
            transient: Vec::new(),
            caps: device.caps(),
            profile: profile::enabled().then(profile::Shared::default),
        })
    }

    /// Submits `cmd` (or nothing, only to signal) and returns the timeline value it signals.
    fn submit(&mut self, cmd: Option<vk::CommandBuffer>, signal: &[(vk::Semaphore, u64)]) -> Result<u64> {
        let value = self.submitted + 1;
        let mut semaphores = vec![self.timeline];
        let mut values = vec![value];
        for &(s, v) in signal {
            semaphores.push(s);
            values.push(v);
        }
        let mut timeline_info = vk::TimelineSemaphoreSubmitInfo::default().signal_semaphore_values(&values);
        let cmds: Vec<vk::CommandBuffer> = cmd.into_iter().collect();
        let submit = [vk::SubmitInfo::default()
            .command_buffers(&cmds)
            .signal_semaphores(&semaphores)
            .push_next(&mut timeline_info)];
        {
            let queue = self.ctx.queue();
            // SAFETY: the queue's lock is held; the command buffer is recorded and not
            // pending (callers wait for its previous submission).
            unsafe { self.ctx.device.queue_submit(*queue, &submit, vk::Fence::null()) }
                .map_err(|e| self.ctx.err("submitting", e))?;
        }
        self.submitted = value;
        Ok(value)
    }

    /// Waits until the timeline reaches `value`.
    fn wait_for(&self, value: u64) -> Result<()> {
        wait_semaphore(&self.ctx, self.timeline, value)
    }

    /// The device address of `data` plus `offset`, if it is this device's memory.
    fn address(&self, data: &TensorData, len: usize) -> Result<u64> {
        tessera_core::buffer::check_range(&*data.buffer, data.offset, len)?;
        match data.buffer.as_any().downcast_ref::<VulkanBuffer>() {
            Some(b) if Arc::ptr_eq(b.context(), &self.ctx) => Ok(b.device_address() + data.offset as u64),
            _ => Err(Error::IncompatibleBuffer {
                tensor: String::new(),
                buffer: data.buffer.buffer_type().name().into(),
                backend: self.device.name().into(),
            }),
        }
    }

    fn operand(&self, view: &TensorView) -> Result<(Operand, (u64, u64))> {
        let len = view.nbytes();
        let data = self.address(&view.data, len).map_err(|e| match e {
            Error::IncompatibleBuffer { buffer, backend, .. } => {
                Error::IncompatibleBuffer { tensor: view.label(), buffer, backend }
            }
            e => e,
        })?;
        let desc = TensorDesc::new(data, view).ok_or_else(|| Error::InvalidParam {
            op: "COMPUTE",
            message: format!("{} is too large for the Vulkan shaders", view.label()),
        })?;
        Ok((Operand { desc, dtype: view.dtype }, (data, data + len as u64)))
    }

    /// The dispatches of `graph.nodes()[nodes]` with the memory each touches.
    /// With the split's consumer counts, a product followed by the ADD of a bias row that
    /// alone reads it becomes one dispatch ([`Self::fused_bias`]).
    fn dispatches(
        &self,
        graph: &Graph,
        nodes: Range<usize>,
        consumers: Option<&[u32]>,
    ) -> Result<Vec<(Dispatch, Access)>> {
        let ids = graph.nodes().get(nodes.clone()).ok_or_else(|| Error::InvalidParam {
            op: "COMPUTE",
            message: format!("node range {nodes:?} is outside the graph's {} nodes", graph.nodes().len()),
        })?;
        let mut out = Vec::with_capacity(ids.len());
        let mut i = 0;
        while i < ids.len() {
            if let (Some(c), Some(&next)) = (consumers, ids.get(i + 1)) {
                if let Some(d) = self.fused_bias(graph, ids[i], next, c)? {
                    out.push(d);
                    i += 2;
                    continue;
                }
            }
            if let Some(d) = self.dispatch(graph, ids[i])? {
                out.push(d);
            }
            i += 1;
        }
        Ok(out)
    }

    /// MUL_MAT `mm` and the ADD `add` of a packed f32 bias row to its result, as one dispatch
    /// of a product shader that adds the row as it stores (the same bits as the two nodes):
    /// `None` where `mm`'s result has other readers or its shader cannot add a bias.
    fn fused_bias(
        &self,
        graph: &Graph,
        mm: TensorId,
        add: TensorId,
        consumers: &[u32],
    ) -> Result<Option<(Dispatch, Access)>> {
        if !adds_bias(graph, mm, add, consumers) {
            return Ok(None);
        }
        let (product, add_node) = (graph.node_view(mm)?, graph.node_view(add)?);
        let (Some(Some(av)), Some(Some(bv)), Some(Some(biasv))) =
            (product.src.first(), product.src.get(1), add_node.src.get(1))
        else {
            return Ok(None);
        };
        let (dst, written) = self.operand(&add_node.dst)?;
        let (a_op, a_read) = self.operand(av)?;
        let (b_op, b_read) = self.operand(bv)?;
        let (bias, bias_read) = self.operand(biasv)?;
        let one_row = bias.dtype == tessera_core::DType::F32
            && bias.desc.ne == [dst.desc.ne[0], 1, 1, 1]
            && bias.desc.nb[0] == 4
            && bias.desc.data % 16 == 0;
        if !one_row || dst.dtype != tessera_core::DType::F32 {
            return Ok(None);
        }
        let mut srcs = [None; MAX_SRC];
        srcs[0] = Some(a_op);
        srcs[1] = Some(b_op);
        let Ok(mut d) = ops::plan(&self.caps, Op::MulMat, dst, &srcs) else { return Ok(None) };
        if !d.shader.adds_bias() {
            return Ok(None);
        }
        d.args.src[2] = bias.desc;
        d.args.i[3] = 1;
        Ok(Some((d, Access { reads: vec![a_read, b_read, bias_read], writes: vec![written] })))
    }

    fn dispatch(&self, graph: &Graph, id: TensorId) -> Result<Option<(Dispatch, Access)>> {
        let op = graph.tensor(id)?.op();
        if op == Op::None || op.is_view() {
            return Ok(None);
        }
        let node = graph.node_view(id)?;
        let (dst, written) = self.operand(&node.dst)?;
        let mut srcs = [None; MAX_SRC];
        let mut access = Access { reads: Vec::new(), writes: vec![written] };
        for (slot, view) in node.src.iter().enumerate() {
            if let Some(view) = view {
                let (operand, read) = self.operand(view)?;
                srcs[slot] = Some(operand);
                access.reads.push(read);
            }
        }
        let dispatch = ops::plan(&self.caps, op, dst, &srcs).map_err(|message| Error::Unsupported {
            backend: format!("{} ({message})", self.device.name()),
            op: op.name(),
            tensor: graph.label(id),
        })?;
        Ok(Some((dispatch, access)))
    }

    fn event<'e>(&self, event: &'e dyn Event) -> Result<&'e VulkanEvent> {
        event.as_any().downcast_ref::<VulkanEvent>().ok_or_else(|| Error::Backend {
            backend: self.device.name().into(),
            message: "the event belongs to another kind of device".into(),
        })
    }
}

/// Waits on the host until timeline `semaphore` reaches `value`.
pub(crate) fn wait_semaphore(ctx: &Context, semaphore: vk::Semaphore, value: u64) -> Result<()> {
    let semaphores = [semaphore];
    let values = [value];
    let info = vk::SemaphoreWaitInfo::default().semaphores(&semaphores).values(&values);
    // SAFETY: a timeline semaphore of this device.
    unsafe { ctx.device.wait_semaphores(&info, u64::MAX) }.map_err(|e| ctx.err("waiting for the device", e))
}

impl Backend for VulkanBackend {
    fn name(&self) -> &str {
        self.device.name()
    }
    fn device(&self) -> &'static dyn Device {
        self.device
    }
    unsafe fn set_tensor_async(&mut self, dst: &TensorData, offset: usize, src: *const u8, len: usize) -> Result<()> {
        self.synchronize()?;
        // SAFETY: the caller keeps `src` valid for `len` bytes until the next synchronize;
        // the copy is done before this returns.
        let bytes = unsafe { std::slice::from_raw_parts(src, len) };
        dst.buffer.set_bytes(dst.offset + offset, bytes)
    }
    unsafe fn get_tensor_async(&mut self, src: &TensorData, offset: usize, dst: *mut u8, len: usize) -> Result<()> {
        self.synchronize()?;
        // SAFETY: the caller keeps `dst` valid and untouched for `len` bytes until the next
        // synchronize; the copy is done before this returns.
        let out = unsafe { std::slice::from_raw_parts_mut(dst, len) };
        src.buffer.get_bytes(src.offset + offset, out)
    }
    /// Within the same device, once the source backend's work is done.
    fn copy_tensor_async(
        &mut self,
        src_backend: &mut dyn Backend,
        src: &TensorData,
        dst: &TensorData,
        len: usize,
    ) -> Result<bool> {
        let Some(from) = src_backend.as_any_mut().downcast_mut::<VulkanBackend>() else { return Ok(false) };
        if !Arc::ptr_eq(&from.ctx, &self.ctx) {
            return Ok(false);
        }
        from.synchronize()?;
        self.synchronize()?;
        dst.buffer.copy_from(dst.offset, &*src.buffer, src.offset, len)
    }
    fn synchronize(&mut self) -> Result<()> {
        self.wait_for(self.submitted)?;
        self.transient.clear();
        Ok(())
    }
    fn compute(&mut self, graph: &Graph, nodes: Range<usize>) -> Result<()> {
        let dispatches = self.dispatches(graph, nodes, None)?;
        if dispatches.is_empty() {
            return Ok(());
        }
        let mut recorded = Recorded::record(&self.ctx, &dispatches, self.profile.as_ref())?;
        recorded.last_submit = self.submit(Some(recorded.cmd), &[])?;
        self.transient.push(recorded);
        Ok(())
    }
    /// Products followed by the ADD of their bias ([`Self::fused_bias`] may fuse them).
    fn fused_runs(&self, split: &SplitRef<'_>, run: &mut dyn FnMut(Range<usize>)) {
        let Some(ids) = split.graph.nodes().get(split.nodes.clone()) else { return };
        for (i, pair) in ids.windows(2).enumerate() {
            if adds_bias(split.graph, pair[0], pair[1], split.consumers) {
                let start = split.nodes.start + i;
                run(start..start + 2);
            }
        }
    }
    fn prepare(&mut self, split: &SplitRef<'_>) -> Result<Box<dyn Program>> {
        let dispatches = self.dispatches(split.graph, split.nodes.clone(), Some(split.consumers))?;
        Ok(Box::new(RecordedSplit(Recorded::record(&self.ctx, &dispatches, self.profile.as_ref())?)))
    }
    fn run(&mut self, program: &mut dyn Program, _graph: &Graph) -> Result<()> {
        let Some(RecordedSplit(p)) = program.as_any_mut().downcast_mut::<RecordedSplit>() else {
            return Err(Error::Backend {
                backend: self.device.name().into(),
                message: "this program was prepared by another kind of backend".into(),
            });
        };
        if p.dispatches == 0 {
            return Ok(());
        }
        // A profiled command buffer is resubmitted only once its previous submission
        // finished (its timestamps are read first); the others are recorded for
        // simultaneous use.
        if p.waits_for_previous_run() {
            let previous = p.last_submit;
            self.wait_for(previous)?;
            p.collect();
        }
        let cmd = p.cmd;
        p.last_submit = self.submit(Some(cmd), &[])?;
        Ok(())
    }
    fn record_event(&mut self, event: &dyn Event) -> Result<()> {
        let e = self.event(event)?;
        let stamp = e.stamp_commands()?;
        let value = e.next_value();
        self.submit(stamp, &[(e.semaphore, value)])?;
        Ok(())
    }
    fn wait_event(&mut self, event: &dyn Event) -> Result<()> {
        self.event(event)?.synchronize()
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

impl Drop for VulkanBackend {
    fn drop(&mut self) {
        self.synchronize().ok();
        self.transient.clear();
        if let Some(profile) = &self.profile {
            eprint!("{}", profile.lock().unwrap_or_else(|p| p.into_inner()).report(self.device.name()));
        }
        // SAFETY: no submission that signals the semaphore is pending (waited above).
        unsafe { self.ctx.device.destroy_semaphore(self.timeline, None) };
    }
}

/// Whether `add` adds something to the result of the product `mm`, which nothing else reads.
fn adds_bias(graph: &Graph, mm: TensorId, add: TensorId, consumers: &[u32]) -> bool {
    let (Ok(m), Ok(a)) = (graph.tensor(mm), graph.tensor(add)) else { return false };
    m.op() == Op::MulMat
        && a.op() == Op::Binary(tessera_core::BinaryOp::Add)
        && a.src(0) == Some(mm)
        && consumers.get(mm.index()) == Some(&1)
}
