//! A CUDA device: one GPU, its memory and its kernels.

use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::{sys, CudaContext};
use tessera_core::registry::BackendReg;
use tessera_core::{
    Backend, BufferType, Device, DeviceCaps, DeviceType, Event, Graph, MemoryInfo, Op, Result, TensorId,
};

use crate::backend::CudaBackend;
use crate::buffer::CudaBufferType;
use crate::driver;
use crate::event::CudaEvent;
use crate::kernels::{self, Kernels};
use crate::pinned::PinnedBufferType;
use crate::split;

/// One GPU, listed as `CUDA<ordinal>`. Devices are made once and live for the process.
pub struct CudaDevice {
    name: String,
    description: String,
    pci_bus_id: Option<String>,
    ctx: Arc<CudaContext>,
    buffer_type: &'static CudaBufferType,
    pinned: &'static PinnedBufferType,
    kernels: OnceLock<std::result::Result<Arc<Kernels>, String>>,
    /// Per other GPU (by ordinal): whether this GPU's context reads its memory directly.
    peers: Mutex<Vec<(usize, bool)>>,
}

impl CudaDevice {
    /// The device behind `ctx`, leaked to be `'static` like every enumerated device.
    pub(crate) fn create(ctx: Arc<CudaContext>) -> &'static CudaDevice {
        let name = format!("CUDA{}", ctx.ordinal());
        let description = ctx.name().unwrap_or_else(|_| "NVIDIA GPU".into());
        let pci_bus_id = pci_bus_id(&ctx);
        let device: &'static CudaDevice = Box::leak(Box::new(CudaDevice {
            buffer_type: Box::leak(Box::new(CudaBufferType::new(name.clone(), ctx.clone()))),
            pinned: Box::leak(Box::new(PinnedBufferType::new(format!("{name}_Host"), ctx.clone()))),
            name,
            description,
            pci_bus_id,
            ctx,
            kernels: OnceLock::new(),
            peers: Mutex::new(Vec::new()),
        }));
        device
    }

    pub(crate) fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The kernels, loaded into the device's context on first use.
    pub(crate) fn kernels(&self) -> Result<Arc<Kernels>> {
        self.kernels
            .get_or_init(|| Kernels::load(&self.ctx).map(Arc::new).map_err(|e| e.to_string()))
            .clone()
            .map_err(|message| tessera_core::Error::Backend { backend: self.name.clone(), message })
    }

    /// Whether this GPU can read `other`'s memory directly (NVLink or PCIe peer to peer):
    /// asked of the driver, and access enabled, the first time; `false` where the driver
    /// says no or enabling fails, and copies then go through host memory.
    pub(crate) fn peer_access(&self, other: &CudaDevice) -> bool {
        let theirs = other.ctx.ordinal();
        let Ok(mut peers) = self.peers.lock() else { return false };
        if let Some(&(_, ok)) = peers.iter().find(|(o, _)| *o == theirs) {
            return ok;
        }
        let ok = self.enable_peer_access(other);
        if !ok {
            log::info!("{}: no peer access to {}: copies between them go through host memory", self.name, other.name);
        }
        peers.push((theirs, ok));
        ok
    }

    fn enable_peer_access(&self, other: &CudaDevice) -> bool {
        let mut can = 0;
        // SAFETY: a query of two valid device handles into a local.
        let asked = unsafe { sys::cuDeviceCanAccessPeer(&mut can, self.ctx.cu_device(), other.ctx.cu_device()) };
        if asked != sys::CUresult::CUDA_SUCCESS || can == 0 || self.ctx.bind_to_thread().is_err() {
            return false;
        }
        // SAFETY: enables, for the current context (this GPU's, bound above), access to the
        // memory of `other`'s context, which lives as long as the process.
        let enabled = unsafe { sys::cuCtxEnablePeerAccess(other.ctx.cu_ctx(), 0) };
        matches!(enabled, sys::CUresult::CUDA_SUCCESS | sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED)
    }

    /// The device's own memory, as its concrete type.
    pub fn cuda_buffer_type(&self) -> &'static CudaBufferType {
        self.buffer_type
    }
}

/// "0000:65:00.0", from the device's PCI attributes.
fn pci_bus_id(ctx: &CudaContext) -> Option<String> {
    let attr = |a| ctx.attribute(a).ok();
    let domain = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID)?;
    let bus = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)?;
    let device = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)?;
    Some(format!("{domain:04x}:{bus:02x}:{device:02x}.0"))
}

/// The fewest columns of a product with weights in host memory that the scheduler's op
/// offload runs on the GPU (as ggml's CUDA backend decides).
pub const OFFLOAD_MIN_BATCH: usize = 32;

/// The batch that [`Device::offload_op`] weighs for node `node`: a product's columns, ROPE's
/// tokens, other ops' rows; 0 for GET_ROWS (a token embedding stays where its table is).
fn offload_batch(graph: &Graph, node: TensorId) -> usize {
    graph.tensor(node).map_or(0, |t| match t.op() {
        Op::MulMat => t.ne()[1],
        Op::Rope(_) => t.ne()[2],
        Op::GetRows => 0,
        _ => t.nrows(),
    })
}

impl Device for CudaDevice {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> &str {
        &self.description
    }
    fn memory(&self) -> MemoryInfo {
        let (free, total) = self
            .ctx
            .bind_to_thread()
            .and_then(|_| self.ctx.mem_get_info())
            .unwrap_or((0, self.ctx.total_mem().unwrap_or(0)));
        MemoryInfo { free, total }
    }
    fn device_type(&self) -> DeviceType {
        DeviceType::Gpu
    }
    fn caps(&self) -> DeviceCaps {
        // FLASH_ATTN over many rows runs on tensor cores (flash_attn_mma.cu).
        DeviceCaps {
            async_compute: true,
            host_buffer: true,
            buffer_from_host_ptr: false,
            events: true,
            prompt_flash_attn: true,
        }
    }
    fn pci_bus_id(&self) -> Option<&str> {
        self.pci_bus_id.as_deref()
    }
    fn reg(&self) -> &'static dyn BackendReg {
        &crate::reg::CUDA_REG
    }
    fn supports_op(&self, graph: &Graph, node: TensorId) -> bool {
        match graph.tensor(node) {
            Ok(t) if t.op() == Op::None || t.op().is_view() => true,
            // Weights split across GPUs: only their products, on the split's main device.
            Ok(_) if split::mul_mat::reads_split(graph, node) => split::mul_mat::supports(self, graph, node),
            Ok(_) => kernels::supports(graph, node),
            Err(_) => false,
        }
    }
    fn supports_buffer_type(&self, buffer_type: &dyn BufferType) -> bool {
        tessera_core::buffer::same_buffer_type(buffer_type, self.buffer_type)
            || split::main_split_type(buffer_type, self).is_some()
    }
    /// Nodes of a batch of at least [`OFFLOAD_MIN_BATCH`] (a product's columns, ROPE's
    /// tokens, other ops' rows; never GET_ROWS): copying their host-memory weights over is then
    /// cheaper than the CPU computing them (a prompt, not a decoded token). The small ops with
    /// weights (a norm's MUL by its weight row) go with the products, so that a CPU block's
    /// prompt is not cut into a split per op.
    fn offload_op(&self, graph: &Graph, node: TensorId) -> bool {
        offload_batch(graph, node) >= OFFLOAD_MIN_BATCH && self.supports_op(graph, node)
    }
    fn buffer_type(&self) -> &'static dyn BufferType {
        self.buffer_type
    }
    fn host_buffer_type(&self) -> Option<&'static dyn BufferType> {
        Some(self.pinned)
    }
    fn copies_peer_to_peer(&self, from: &dyn Device) -> bool {
        let same_family = std::ptr::addr_eq(from.reg(), self.reg());
        let other = if same_family { crate::reg::CUDA_REG.find(from.name()) } else { None };
        other.is_some_and(|o| !std::ptr::eq(o, self) && self.peer_access(o))
    }
    fn init_backend(&'static self) -> Result<Box<dyn Backend>> {
        Ok(Box::new(CudaBackend::new(self)?))
    }
    fn new_event(&self) -> Result<Option<Box<dyn Event>>> {
        let event = CudaEvent::new(&self.ctx, false).map_err(|e| driver::error(&self.name, "creating an event", e))?;
        Ok(Some(Box::new(event)))
    }
    fn new_timing_event(&self) -> Result<Option<Box<dyn Event>>> {
        let event =
            CudaEvent::new(&self.ctx, true).map_err(|e| driver::error(&self.name, "creating a timing event", e))?;
        Ok(Some(Box::new(event)))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use tessera_core::{DType, RopeMode, RopeParams};

    use super::*;

    /// A prompt of 32 tokens through a block's first nodes: its norm weight, products and ROPE
    /// weigh the batch; a token embedding's GET_ROWS never does.
    #[test]
    fn a_prompts_nodes_weigh_its_tokens_and_get_rows_none() {
        let (hidden, tokens) = (64, OFFLOAD_MIN_BATCH);
        let mut g = Graph::new();
        let table = g.new_tensor(DType::F32, &[hidden, 100]).unwrap();
        let ids = g.new_tensor(DType::I32, &[tokens]).unwrap();
        let pos = g.new_tensor(DType::I32, &[tokens]).unwrap();
        let norm_weight = g.new_tensor(DType::F32, &[hidden]).unwrap();
        let wq = g.new_tensor(DType::Q4_0, &[hidden, hidden]).unwrap();
        let x = g.get_rows(table, ids).unwrap();
        let xn = g.rms_norm(x, 1e-5).unwrap();
        let xn = g.mul(xn, norm_weight).unwrap();
        let q = g.mul_mat(wq, xn).unwrap();
        let q = g.reshape(q, &[16, 4, tokens]).unwrap();
        let rope = RopeParams { mode: RopeMode::Normal, n_dims: 16, freq_base: 10000.0, freq_scale: 1.0 };
        let q = g.rope(q, pos, rope).unwrap();
        let q_mat = g.tensor(q).unwrap().src(0).and_then(|r| g.tensor(r).ok()?.view_src()).unwrap();
        assert_eq!(offload_batch(&g, x), 0);
        for node in [xn, q_mat, q] {
            assert_eq!(offload_batch(&g, node), tokens, "{}", g.label(node));
        }
        // A decoded token weighs 1 everywhere.
        let mut g = Graph::new();
        let one = g.new_tensor(DType::F32, &[hidden, 1]).unwrap();
        let w = g.new_tensor(DType::F32, &[hidden]).unwrap();
        let m = g.mul(one, w).unwrap();
        assert_eq!(offload_batch(&g, m), 1);
    }
}
