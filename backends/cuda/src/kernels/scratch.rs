//! Work memory of the launches on one stream, and that stream's cuBLAS handle.

use std::sync::Arc;

use cudarc::cublas::{sys as cublas_sys, CudaBlas};
use cudarc::cublaslt::sys as lt_sys;
use cudarc::driver::sys::{self as driver_sys, CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT};
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr};
use tessera_core::{DType, Error, Result};

use super::gemm_choices::SavedChoices;
use super::gemm_lt::{self, Algorithms, LtGemm};
use super::{backend_error, TensorArg};

/// Scratch memory grows in steps of this many bytes.
const GRANULE: usize = 1 << 20;

/// Device memory that launches on one stream use for intermediate values (MUL_MAT's operands
/// converted to the GEMM's type, the pointer arrays of batched GEMMs), grown on demand and
/// never shrunk, plus the stream's cuBLAS handle (created on the first GEMM).
///
/// The memory is reused by every launch: work queued by one launch must have read it before
/// the next launch on the same stream writes it, which stream order guarantees. The `Scratch`
/// must outlive the work it was handed to until the stream synchronizes; growing it frees the
/// old memory in stream order (cudarc frees asynchronously on the stream, or synchronizes
/// first), so queued work never sees it freed. While a stream is captured into a CUDA graph
/// the memory must not grow (its address is baked into the graph): size it first with
/// [`Scratch::reserve`] and [`super::scratch_bytes`].
pub struct Scratch {
    stream: Arc<CudaStream>,
    buffer: Option<CudaSlice<u8>>,
    address: u64,
    blas: Option<CudaBlas>,
    /// cuBLAS's own work memory, given to it explicitly: the library must not allocate
    /// while a stream is captured into a CUDA graph, and its default workspace is reset by
    /// every `cublasSetStream`.
    blas_workspace: Option<(CudaSlice<u8>, u64)>,
    /// The stream's cuBLASLt handle (products with epilogues), sharing cuBLAS's work memory:
    /// both only run in this stream's order.
    blas_lt: Option<LtHandle>,
    /// The cuBLASLt algorithm chosen for each product shape on this stream.
    algorithms: Algorithms,
    /// While a run of nodes is queued ([`Scratch::start_run`]): the product operand whose
    /// converted copy lies in the memory, if any, so that the products of one activation (a
    /// layer's query, key and value) convert it once.
    held: Option<Option<Held>>,
}

/// A converted copy of a product's `b` in the scratch: `b`, its layout, and its offset in the
/// memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Held {
    b: TensorArg,
    layout: BLayout,
    offset: usize,
}

/// How a product operand's converted copy is laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BLayout {
    /// `Q8_1` blocks column by column (mul_mat_vec.cuh).
    Blocks,
    /// Each column's quants in q8_0 weight rows' byte layout, zeros at the scales, then the
    /// blocks' scales (`quantize_q8_0_rows` in mul_mat_vec.cu).
    Q8_0Rows,
    /// The 8 columns' blocks interleaved as the tensor-core kernels read them (`MmaB` in
    /// mul_mat_vec_mma.cu).
    Fragments,
    /// The 8 columns rounded to f16 (or bf16) in the B fragments of the 16-bit tensor-core
    /// kernels (`convert_b_mma` in mul_mat_vec_mma.cu).
    Fragments16 { bf16: bool },
    /// Packed rows of `gemm`'s type (f16 or bf16) for a GEMM, of GELU_ERF of the values with
    /// `gelu`.
    Packed { gemm: DType, gelu: bool },
    /// Split into TF32 parts and remainders for a split product (`split_gemm`), of GELU_ERF of
    /// the values with `gelu`.
    Split { gelu: bool },
}

/// A cuBLASLt handle, destroyed when dropped.
struct LtHandle(lt_sys::cublasLtHandle_t);

impl Drop for LtHandle {
    fn drop(&mut self) {
        // SAFETY: the handle was created by `create_handle` and is destroyed once, here.
        let _ = unsafe { cudarc::cublaslt::result::destroy_handle(self.0) };
    }
}

// SAFETY: a cuBLASLt handle may be used from any thread, one at a time; the scratch holding
// it is reached only through `&mut`.
unsafe impl Send for LtHandle {}
// SAFETY: as above: no use through a shared reference.
unsafe impl Sync for LtHandle {}

/// How MUL_MAT multiplies f32 matrices through cuBLAS (`TESSERA_CUDA_F32`; `TESSERA_CUDA_TF32=1`
/// means `tf32` whatever it says).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum F32Products {
    /// `auto` (the default): [`F32Products::Split`] for products that gain from it
    /// (`split_gemm::chosen`), [`F32Products::Exact`] for the others.
    Auto,
    /// `exact`: f32 arithmetic on the CUDA cores.
    Exact,
    /// `split`: operands split into TF32 parts and f32 remainders, multiplied on TF32 tensor
    /// cores near f32 accuracy (`split_gemm`), wherever the product is one GEMM and its
    /// weights' split copy fits.
    Split,
    /// `tf32`: one TF32 pass, 10-bit mantissas in the products.
    Tf32,
}

/// The f32 product mode, read once from the environment (an unknown value is `auto`, with a
/// warning).
pub(crate) fn f32_products() -> F32Products {
    static MODE: std::sync::OnceLock<F32Products> = std::sync::OnceLock::new();
    *MODE.get_or_init(|| {
        if std::env::var("TESSERA_CUDA_TF32").is_ok_and(|v| v.trim() == "1") {
            return F32Products::Tf32;
        }
        match std::env::var("TESSERA_CUDA_F32").as_deref().map(str::trim) {
            Ok("exact") => F32Products::Exact,
            Ok("split") => F32Products::Split,
            Ok("tf32") => F32Products::Tf32,
            Ok("auto") | Err(_) => F32Products::Auto,
            Ok(other) => {
                log::warn!("TESSERA_CUDA_F32={other:?} is not auto, exact, split or tf32: using auto");
                F32Products::Auto
            }
        }
    })
}

/// cuBLAS's math mode: f32 products as their compute type says, except in the `tf32` mode.
fn math_mode() -> cublas_sys::cublasMath_t {
    if f32_products() == F32Products::Tf32 {
        cublas_sys::cublasMath_t::CUBLAS_TF32_TENSOR_OP_MATH
    } else {
        cublas_sys::cublasMath_t::CUBLAS_DEFAULT_MATH
    }
}

/// Bytes of cuBLAS work memory (what cuBLAS asks for on Hopper).
const BLAS_WORKSPACE: usize = 32 << 20;

impl Scratch {
    /// Empty scratch for launches on `stream`; nothing is allocated yet.
    pub fn new(stream: &Arc<CudaStream>) -> Result<Scratch> {
        Ok(Scratch {
            stream: Arc::clone(stream),
            buffer: None,
            address: 0,
            blas: None,
            blas_workspace: None,
            blas_lt: None,
            algorithms: Algorithms::default(),
            held: None,
        })
    }

    /// The stream this scratch serves.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Bytes allocated now.
    pub fn capacity(&self) -> usize {
        self.buffer.as_ref().map_or(0, CudaSlice::len)
    }

    /// Starts a run of nodes queued in stream order, whose memory changes only through their
    /// own results: until [`Scratch::end_run`], a converted product operand is kept and reused
    /// by the next products of the same operand. Every result written meanwhile must be
    /// reported to [`Scratch::written`].
    pub fn start_run(&mut self) {
        self.held = Some(None);
    }

    /// Ends the run: nothing converted is reused any more (the caller may rewrite inputs).
    pub fn end_run(&mut self) {
        self.held = None;
    }

    /// Reports that queued work writes `dst`: a converted copy of memory it overlaps is stale.
    pub fn written(&mut self, dst: (TensorArg, DType)) {
        if let Some(held) = &mut self.held {
            if held.is_some_and(|h| TensorArg::overlap((h.b, DType::F32), dst)) {
                *held = None;
            }
        }
    }

    /// [`Scratch::reserve`], except that where this run holds `b` converted in `layout` at
    /// `offset` and the memory need not grow, it is kept: `(address, true)`. With `false`, the
    /// caller converts `b` and reports it with [`Scratch::set_converted`].
    pub(crate) fn reserve_for(
        &mut self,
        bytes: usize,
        b: &TensorArg,
        layout: BLayout,
        offset: usize,
    ) -> Result<(u64, bool)> {
        let held = self.held.flatten() == Some(Held { b: *b, layout, offset });
        if held && bytes <= self.capacity() && self.buffer.is_some() {
            return Ok((self.address, true));
        }
        Ok((self.reserve(bytes)?, false))
    }

    /// Records that the memory now holds `b` converted in `layout` at `offset` (kept only
    /// inside a run).
    pub(crate) fn set_converted(&mut self, b: TensorArg, layout: BLayout, offset: usize) {
        if let Some(held) = &mut self.held {
            *held = Some(Held { b, layout, offset });
        }
    }

    /// Grows the memory to at least `bytes` and returns its device address (unchanged when it
    /// was large enough already). What the memory held is forgotten: the caller overwrites it.
    pub fn reserve(&mut self, bytes: usize) -> Result<u64> {
        if let Some(held) = &mut self.held {
            *held = None;
        }
        if bytes <= self.capacity() && self.buffer.is_some() {
            return Ok(self.address);
        }
        let size =
            bytes.max(1).checked_next_multiple_of(GRANULE).ok_or(Error::Overflow { what: "CUDA scratch size" })?;
        // Dropping the old memory first lets the allocator reuse it; its free is stream-ordered.
        self.buffer = None;
        self.address = 0;
        let buffer = self
            .stream
            .alloc_zeros::<u8>(size)
            .map_err(|e| Error::OutOfMemory { what: format!("CUDA kernel scratch ({e})"), requested: size })?;
        let address = {
            let (address, _read) = buffer.device_ptr(&self.stream);
            address
        };
        self.address = address;
        self.buffer = Some(buffer);
        Ok(address)
    }

    /// Limits cuBLAS's products on this stream to `sms` SMs (0: all of them), leaving the
    /// rest to transfers that run beside them.
    pub(crate) fn set_sm_target(&mut self, sms: usize) -> Result<()> {
        let handle = self.blas()?;
        let sms = i32::try_from(sms).unwrap_or(0);
        // SAFETY: `handle` is this scratch's live cuBLAS handle.
        let status = unsafe { cublas_sys::cublasSetSmCountTarget(handle, sms) };
        if status != cublas_sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
            return Err(backend_error(&format!("cuBLAS could not target {sms} SMs: {status:?}")));
        }
        Ok(())
    }

    /// The cuBLAS handle, bound to this stream, in its math mode ([`math_mode`]).
    pub(crate) fn blas(&mut self) -> Result<cublas_sys::cublasHandle_t> {
        if self.blas.is_none() {
            // SAFETY: only tries to open the cuBLAS library; dynamic loading would panic later
            // on the first cuBLAS call if it were missing.
            if !unsafe { cublas_sys::is_culib_present() } {
                return Err(backend_error(
                    "cuBLAS (libcublas.so.13) was not found: MUL_MAT of float weights or of more than 8 columns needs it; add its directory to LD_LIBRARY_PATH",
                ));
            }
            let blas = CudaBlas::new(Arc::clone(&self.stream))
                .map_err(|e| backend_error(&format!("creating the cuBLAS handle failed: {e}")))?;
            let workspace = self.stream.alloc_zeros::<u8>(BLAS_WORKSPACE).map_err(|e| Error::OutOfMemory {
                what: format!("cuBLAS work memory ({e})"),
                requested: BLAS_WORKSPACE,
            })?;
            // The address is taken once, here: never while a stream is being captured.
            let address = workspace.device_ptr(&self.stream).0;
            self.blas = Some(blas);
            self.blas_workspace = Some((workspace, address));
        }
        let (handle, workspace) = match (&self.blas, &self.blas_workspace) {
            (Some(blas), Some((_, address))) => (*blas.handle(), *address),
            _ => return Err(backend_error("the cuBLAS handle is missing")),
        };
        // SAFETY: `handle` is the live handle owned by `self.blas`; these calls only set its
        // stream (this scratch's, which outlives the handle), its math mode and its work memory
        // (owned by this scratch, as large as said, and used only on this stream).
        unsafe {
            cublas_sys::cublasSetStream_v2(handle, self.stream.cu_stream() as cublas_sys::cudaStream_t)
                .result()
                .map_err(|e| backend_error(&format!("binding cuBLAS to the stream failed: {e}")))?;
            cublas_sys::cublasSetMathMode(handle, math_mode())
                .result()
                .map_err(|e| backend_error(&format!("setting cuBLAS's math mode failed: {e}")))?;
            // The stream reset the workspace to the library's default: give it ours again.
            cublas_sys::cublasSetWorkspace_v2(handle, workspace as *mut std::ffi::c_void, BLAS_WORKSPACE)
                .result()
                .map_err(|e| backend_error(&format!("giving cuBLAS its work memory failed: {e}")))?;
        }
        Ok(handle)
    }

    /// The cuBLASLt handle and the work memory it may use (device address, bytes), made on
    /// first use; like [`Scratch::blas`], call it before a capture.
    pub(crate) fn blas_lt(&mut self) -> Result<(lt_sys::cublasLtHandle_t, (u64, usize))> {
        self.blas()?; // the work memory
        if self.blas_lt.is_none() {
            // SAFETY: only tries to open the library (a missing one would panic on first use).
            if !unsafe { lt_sys::is_culib_present() } {
                return Err(backend_error(
                    "cuBLASLt (libcublasLt.so.13) was not found; add its directory to LD_LIBRARY_PATH",
                ));
            }
            let handle = cudarc::cublaslt::result::create_handle()
                .map_err(|e| backend_error(&format!("creating the cuBLASLt handle failed: {e}")))?;
            self.blas_lt = Some(LtHandle(handle));
            self.algorithms.keep_in(SavedChoices::open(&self.gpu_and_library()));
        }
        match (&self.blas_lt, &self.blas_workspace) {
            (Some(h), Some((_, address))) => Ok((h.0, (*address, BLAS_WORKSPACE))),
            _ => Err(backend_error("the cuBLASLt handle is missing")),
        }
    }

    /// The GPU, driver and cuBLASLt version that a timed choice of algorithm holds for: the
    /// GPU's name, compute capability and SM count, the driver's CUDA version (a new driver may
    /// time the library's kernels differently) and the library's version.
    fn gpu_and_library(&self) -> String {
        let ctx = self.stream.context();
        let name = ctx.name().unwrap_or_default();
        let (major, minor) = ctx.compute_capability().unwrap_or_default();
        let sms = ctx.attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT).unwrap_or_default();
        let mut driver: std::ffi::c_int = 0;
        // SAFETY: the driver writes one int to a live local; a failure leaves it 0.
        let _ = unsafe { driver_sys::cuDriverGetVersion(&mut driver) };
        // SAFETY: a query of the loaded library, no arguments.
        let version = unsafe { lt_sys::cublasLtGetVersion() };
        format!("{name} sm_{major}{minor} {sms} SMs driver {driver} cuBLASLt {version}")
    }

    /// Queues `g` through cuBLASLt on this stream, with the algorithm chosen for its shape
    /// ([`Algorithms`]).
    ///
    /// # Safety
    /// As [`gemm_lt::matmul`].
    pub(crate) unsafe fn matmul(&mut self, g: &LtGemm) -> Result<()> {
        let (handle, workspace) = self.blas_lt()?;
        // SAFETY: forwarded from the caller; the handle and work memory are this stream's.
        unsafe { gemm_lt::matmul(handle, workspace, &self.stream, g, &mut self.algorithms) }
    }

    /// Chooses algorithms for the products queued while this stream was captured
    /// ([`gemm_lt::tune_captured`]); `Ok(true)` when any was chosen.
    ///
    /// # Safety
    /// As [`gemm_lt::tune_captured`].
    pub(crate) unsafe fn tune_captured(&mut self) -> Result<bool> {
        if self.blas_lt.is_none() {
            return Ok(false);
        }
        let (handle, workspace) = self.blas_lt()?;
        // SAFETY: forwarded from the caller; the handle and work memory are this stream's.
        unsafe { gemm_lt::tune_captured(handle, workspace, &self.stream, &mut self.algorithms) }
    }
}
