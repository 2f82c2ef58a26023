//! One product through cuBLASLt, `C = A^T B`, with a bias epilogue where one is given (the
//! bias a column of `M` values added to every column of `C`, so that a linear layer's ADD
//! of its bias costs no kernel and no pass over its result), optionally followed by a GELU
//! (the library's is the tanh approximation), C in f32 or rounded to f16 as it is written,
//! and with the algorithm chosen once per shape by timing the library's candidates
//! ([`Algorithms`]), or read from the choices an earlier process saved ([`SavedChoices`]).
//!
//! The descriptors live for one call: products are queued when a split is captured into a
//! CUDA graph, where the algorithm is recorded once and replayed.

use std::collections::HashMap;
use std::ffi::c_void;
use std::mem::MaybeUninit;
use std::sync::Arc;

use cudarc::cublas::sys::cublasOperation_t;
use cudarc::cublaslt::result as lt;
use cudarc::cublaslt::sys::{
    self as lt_sys, cublasComputeType_t, cublasLtClusterShape_t, cublasLtEpilogue_t,
    cublasLtMatmulAlgoConfigAttributes_t, cublasLtMatmulAlgo_t, cublasLtMatmulDescAttributes_t,
    cublasLtMatmulPreferenceAttributes_t, cudaDataType,
};
use cudarc::driver::{sys as driver_sys, CudaStream, DevicePtr};
use tessera_core::{Error, Result};

use super::backend_error;
use super::gemm_choices::SavedChoices;

/// A product `C (m x n of type `c_ty`, ldc) = A^T (A: k x m of type `ty`, lda) B (k x n, `ty`,
/// ldb)`, plus `bias` (m packed values of C's type) where given, summed in f32 (a 16-bit C is
/// the f32 sum rounded), then with `gelu` (and a bias) taken through GELU's tanh form.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LtGemm {
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub ty: cudaDataType,
    pub a: (u64, i64),
    pub b: (u64, i64),
    pub c: (u64, i64),
    /// f32, or f16.
    pub c_ty: cudaDataType,
    pub bias: Option<u64>,
    pub gelu: bool,
    /// TF32 tensor cores for f32 operands (the `tf32` mode, and split products' parts).
    pub tf32: bool,
}

/// What an algorithm is chosen for: everything of an [`LtGemm`] but its addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Shape {
    mnk: (u64, u64, u64),
    ty: u32,
    c_ty: u32,
    lds: (i64, i64, i64),
    bias: bool,
    gelu: bool,
    tf32: bool,
}

impl Shape {
    /// The shape with its columns (n) left out: the products of one weight at any batch size.
    fn family(&self) -> Shape {
        Shape { mnk: (self.mnk.0, 0, self.mnk.2), lds: (self.lds.0, 0, self.lds.2), ..*self }
    }

    /// The shape in words, as [`SavedChoices`] keeps it.
    fn key(&self) -> String {
        let Shape { mnk: (m, n, k), ty, c_ty, lds: (lda, ldb, ldc), bias, gelu, tf32 } = *self;
        let flag = u8::from;
        format!(
            "m{m} n{n} k{k} type{ty} c{c_ty} ld{lda},{ldb},{ldc} bias{} gelu{} tf32{}",
            flag(bias),
            flag(gelu),
            flag(tf32)
        )
    }
}

impl LtGemm {
    fn shape(&self) -> Shape {
        Shape {
            mnk: (self.m, self.n, self.k),
            ty: self.ty as u32,
            c_ty: self.c_ty as u32,
            lds: (self.a.1, self.b.1, self.c.1),
            bias: self.bias.is_some(),
            gelu: self.gelu,
            tf32: self.tf32,
        }
    }
}

/// The algorithm chosen for each product shape on one stream. cuBLASLt's first suggestion is
/// not always its fastest (on an H200 its third ran 2048^3 f16 products 5% faster, and
/// 2048 x 2048 x 6144 TF32 ones 4%), so the suggestions (and for large products with a bias
/// their variants, [`WIDE_SEARCH_MIN`]) are timed on the shape's first product and the
/// fastest kept. Products queued while the stream is captured into a CUDA graph, where nothing
/// runs, take the first suggestion and are remembered, for [`tune_captured`] to time
/// afterwards. Every choice timed is saved ([`SavedChoices`]), and a shape with a saved choice
/// (that the library accepts) takes it untimed, while captured too. `TESSERA_CUDA_GEMM_TUNE=0`
/// keeps the first suggestion everywhere, saved choices unread: the choice then depends on
/// nothing timed, in this process or an earlier one.
#[derive(Default)]
pub(crate) struct Algorithms {
    chosen: HashMap<Shape, cublasLtMatmulAlgo_t>,
    /// The algorithm a wide search chose, by [`Shape::family`].
    family_best: HashMap<Shape, cublasLtMatmulAlgo_t>,
    captured: Vec<LtGemm>,
    /// The choices of earlier processes on this GPU, and where this one's are saved.
    saved: Option<SavedChoices>,
}

impl Algorithms {
    /// Reads and saves choices in `saved` from now on.
    pub(crate) fn keep_in(&mut self, saved: SavedChoices) {
        self.saved = Some(saved);
    }

    /// The saved choice for `shape`, if tuning is on.
    fn saved(&self, shape: &Shape) -> Option<cublasLtMatmulAlgo_t> {
        let words = self.saved.as_ref().filter(|_| tuning_enabled())?.get(&shape.key())?;
        Some(cublasLtMatmulAlgo_t { data: words })
    }

    fn save(&mut self, shape: &Shape, algo: &cublasLtMatmulAlgo_t) {
        if let Some(saved) = &mut self.saved {
            saved.save(&shape.key(), algo.data);
        }
    }
}

/// Suggestions asked of cuBLASLt per shape.
const CANDIDATES: usize = 8;

/// Candidates timed over several rounds after one product each has screened them.
const FINALISTS: usize = 8;

/// The wide search: the custom options (kernel variants the library does not describe) and
/// cluster shapes each suggestion is also tried with. The suggestions differ in tile and
/// cluster shape but leave most options untried: on an H200 the same tiles with other options
/// ran MiniLM's products 5-20% faster than the best suggestion (1024 x 128 tokens: the
/// query/key/value product 200 against 233 us, the one with GELU 315 against 377). Variants the
/// library rejects for a product or a GPU (clusters before Hopper) are left out.
///
/// The search is slow the first time (each variant's kernel is loaded when first run: MiniLM's
/// first call took 1.1-1.5 s against 0.3-0.4 s), so only products with a bias epilogue (where
/// the suggestions fell short; for plain 4096^3 and 4096 x 512 x 14336 products they were
/// already the fastest) of at least [`WIDE_SEARCH_MIN`] multiply-adds take it, once for each
/// weight ([`Shape::family`]); other batch sizes of that weight time the suggestions and the
/// variant chosen there.
const WIDE_SEARCH_MIN: u64 = 1 << 32;
const CUSTOM_OPTIONS: u32 = 16;
const CLUSTER_SHAPES: [cublasLtClusterShape_t; 3] = [
    cublasLtClusterShape_t::CUBLASLT_CLUSTER_SHAPE_1x1x1,
    cublasLtClusterShape_t::CUBLASLT_CLUSTER_SHAPE_2x1x1,
    cublasLtClusterShape_t::CUBLASLT_CLUSTER_SHAPE_1x2x1,
];

fn tuning_enabled() -> bool {
    std::env::var("TESSERA_CUDA_GEMM_TUNE").map_or(true, |v| v.trim() != "0")
}

fn lt_error(what: &str) -> impl Fn(lt::CublasError) -> Error + '_ {
    move |e| backend_error(&format!("cuBLASLt: {what} failed: {e}"))
}

fn driver_error(what: &str) -> impl Fn(cudarc::driver::DriverError) -> Error + '_ {
    move |e| backend_error(&format!("{what} failed: {e}"))
}

/// Descriptors destroyed when dropped.
struct Descriptors {
    matmul: lt_sys::cublasLtMatmulDesc_t,
    layouts: Vec<lt_sys::cublasLtMatrixLayout_t>,
    preference: Option<lt_sys::cublasLtMatmulPreference_t>,
}

impl Drop for Descriptors {
    fn drop(&mut self) {
        // SAFETY: each descriptor was created by cuBLASLt below and is destroyed once, here.
        unsafe {
            for &layout in &self.layouts {
                let _ = lt::destroy_matrix_layout(layout);
            }
            if let Some(p) = self.preference {
                let _ = lt::destroy_matmul_pref(p);
            }
            let _ = lt::destroy_matmul_desc(self.matmul);
        }
    }
}

/// Sets attribute `attr` of `desc` to `value`.
///
/// # Safety
/// `desc` must be live and `T` the attribute's type.
unsafe fn set<T>(desc: lt_sys::cublasLtMatmulDesc_t, attr: cublasLtMatmulDescAttributes_t, value: &T) -> Result<()> {
    // SAFETY: forwarded from the caller; `value` is readable for its size.
    unsafe { lt::set_matmul_desc_attribute(desc, attr, (value as *const T).cast(), std::mem::size_of::<T>()) }
        .map_err(lt_error("setting a product attribute"))
}

/// Sets configuration attribute `attr` of `algo` to `value`; false where the library refuses.
///
/// # Safety
/// `T` must be the attribute's type.
unsafe fn set_config<T>(
    algo: &mut cublasLtMatmulAlgo_t,
    attr: cublasLtMatmulAlgoConfigAttributes_t,
    value: &T,
) -> bool {
    // SAFETY: forwarded from the caller; `value` is readable for its size.
    let status = unsafe {
        lt_sys::cublasLtMatmulAlgoConfigSetAttribute(algo, attr, (value as *const T).cast(), std::mem::size_of::<T>())
    };
    status == lt_sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS
}

impl Descriptors {
    /// The descriptors of `g`, allowing `workspace_bytes` of work memory.
    fn new(g: &LtGemm, workspace_bytes: usize) -> Result<Descriptors> {
        let compute = if g.tf32 && g.ty == cudaDataType::CUDA_R_32F {
            cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32
        } else {
            cublasComputeType_t::CUBLAS_COMPUTE_32F
        };
        let matmul =
            lt::create_matmul_desc(compute, cudaDataType::CUDA_R_32F).map_err(lt_error("creating a product"))?;
        let mut d = Descriptors { matmul, layouts: Vec::new(), preference: None };
        use cublasLtMatmulDescAttributes_t as A;
        // SAFETY: `d.matmul` is live; each value has its attribute's type.
        unsafe {
            set(d.matmul, A::CUBLASLT_MATMUL_DESC_TRANSA, &cublasOperation_t::CUBLAS_OP_T)?;
            set(d.matmul, A::CUBLASLT_MATMUL_DESC_TRANSB, &cublasOperation_t::CUBLAS_OP_N)?;
            if let Some(bias) = g.bias {
                let epilogue = if g.gelu {
                    cublasLtEpilogue_t::CUBLASLT_EPILOGUE_GELU_BIAS
                } else {
                    cublasLtEpilogue_t::CUBLASLT_EPILOGUE_BIAS
                };
                set(d.matmul, A::CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue)?;
                set(d.matmul, A::CUBLASLT_MATMUL_DESC_BIAS_POINTER, &(bias as *const c_void))?;
                set(d.matmul, A::CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &g.c_ty)?;
            }
        }
        for (ty, rows, cols, ld) in [(g.ty, g.k, g.m, g.a.1), (g.ty, g.k, g.n, g.b.1), (g.c_ty, g.m, g.n, g.c.1)] {
            d.layouts.push(lt::create_matrix_layout(ty, rows, cols, ld).map_err(lt_error("describing a matrix"))?);
        }
        let preference = lt::create_matmul_pref().map_err(lt_error("creating a preference"))?;
        d.preference = Some(preference);
        // SAFETY: `preference` is live; the attribute is a size_t.
        unsafe {
            lt::set_matmul_pref_attribute(
                preference,
                cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                (&workspace_bytes as *const usize).cast(),
                std::mem::size_of::<usize>(),
            )
        }
        .map_err(lt_error("limiting the work memory"))?;
        Ok(d)
    }

    /// cuBLASLt's suggested algorithms, best first (at least one).
    fn candidates(&self, handle: lt_sys::cublasLtHandle_t) -> Result<Vec<cublasLtMatmulAlgo_t>> {
        let (la, lb, lc) = (self.layouts[0], self.layouts[1], self.layouts[2]);
        let preference = self.preference.ok_or_else(|| backend_error("cuBLASLt: no preference"))?;
        let mut results = [MaybeUninit::<lt_sys::cublasLtMatmulHeuristicResult_t>::uninit(); CANDIDATES];
        let mut count = 0;
        // SAFETY: every descriptor is live; `results` holds CANDIDATES entries, of which the
        // library writes `count`.
        unsafe {
            lt_sys::cublasLtMatmulAlgoGetHeuristic(
                handle,
                self.matmul,
                la,
                lb,
                lc,
                lc,
                preference,
                CANDIDATES as i32,
                results.as_mut_ptr().cast(),
                &mut count,
            )
        }
        .result()
        .map_err(lt_error("choosing an algorithm"))?;
        let written = usize::try_from(count).unwrap_or(0).min(CANDIDATES);
        let algos: Vec<_> = results[..written]
            .iter()
            // SAFETY: the first `count` results were written by the library.
            .map(|r| unsafe { r.assume_init() })
            .filter(|r| r.state == lt_sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS)
            .map(|r| r.algo)
            .collect();
        if algos.is_empty() {
            return Err(backend_error("cuBLASLt has no algorithm for this product"));
        }
        Ok(algos)
    }

    /// `suggested` (first) and their variants in custom option and cluster shape that the
    /// library accepts for this product within `workspace_bytes`, each once.
    fn variants(
        &self,
        handle: lt_sys::cublasLtHandle_t,
        suggested: &[cublasLtMatmulAlgo_t],
        workspace_bytes: usize,
    ) -> Vec<cublasLtMatmulAlgo_t> {
        use cublasLtMatmulAlgoConfigAttributes_t as C;
        let mut all = suggested.to_vec();
        for base in suggested {
            for custom in 0..CUSTOM_OPTIONS {
                for cluster in CLUSTER_SHAPES {
                    let mut algo = *base;
                    // SAFETY: `algo` is an initialised algorithm; each value has its
                    // attribute's type (a u32 option, a u16 cluster shape id).
                    let configured = unsafe {
                        set_config(&mut algo, C::CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &custom)
                            && set_config(&mut algo, C::CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &(cluster as u16))
                    };
                    if configured
                        && !all.iter().any(|a| a.data == algo.data)
                        && self.accepts(handle, &algo, workspace_bytes)
                    {
                        all.push(algo);
                    }
                }
            }
        }
        all
    }

    /// Whether the library runs this product with `algo` within `workspace_bytes`.
    fn accepts(&self, handle: lt_sys::cublasLtHandle_t, algo: &cublasLtMatmulAlgo_t, workspace_bytes: usize) -> bool {
        let (la, lb, lc) = (self.layouts[0], self.layouts[1], self.layouts[2]);
        let mut check = MaybeUninit::<lt_sys::cublasLtMatmulHeuristicResult_t>::uninit();
        // SAFETY: every descriptor is live; the library writes `check` when it accepts the
        // algorithm.
        let status =
            unsafe { lt_sys::cublasLtMatmulAlgoCheck(handle, self.matmul, la, lb, lc, lc, algo, check.as_mut_ptr()) };
        status == lt_sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS
            // SAFETY: written, as the library accepted the algorithm.
            && unsafe { check.assume_init() }.workspaceSize <= workspace_bytes
    }

    /// Queues `g` with `algo`.
    ///
    /// # Safety
    /// As [`matmul`].
    unsafe fn queue(
        &self,
        handle: lt_sys::cublasLtHandle_t,
        algo: &cublasLtMatmulAlgo_t,
        g: &LtGemm,
        workspace: (u64, usize),
        stream: &CudaStream,
    ) -> Result<()> {
        let (la, lb, lc) = (self.layouts[0], self.layouts[1], self.layouts[2]);
        let (alpha, beta) = (1.0f32, 0.0f32);
        // SAFETY: the caller's promises on the handle, the matrices and the work memory; the
        // descriptors are live; alpha and beta are host f32 values, the scale type.
        unsafe {
            lt::matmul(
                handle,
                self.matmul,
                (&alpha as *const f32).cast(),
                (&beta as *const f32).cast(),
                g.a.0 as *const c_void,
                la,
                g.b.0 as *const c_void,
                lb,
                g.c.0 as *const c_void,
                lc,
                g.c.0 as *mut c_void,
                lc,
                algo,
                workspace.0 as *mut c_void,
                workspace.1,
                stream.cu_stream() as _,
            )
        }
        .map_err(lt_error("queuing a product"))
    }
}

/// Queues `g` on `stream` with `handle`, using `workspace` (device address and bytes) and the
/// algorithm `algorithms` holds for its shape, choosing one first if none is held.
///
/// # Safety
/// `handle` must be live; A, B, C and the bias must be device memory of the handle's context
/// holding the matrices `g` describes, valid until the work has run; `workspace` must be device
/// memory of that many bytes used by nothing else on other streams. C must not overlap A, B or
/// the bias: choosing an algorithm may compute the product several times.
pub(crate) unsafe fn matmul(
    handle: lt_sys::cublasLtHandle_t,
    workspace: (u64, usize),
    stream: &CudaStream,
    g: &LtGemm,
    algorithms: &mut Algorithms,
) -> Result<()> {
    let d = Descriptors::new(g, workspace.1)?;
    let saved = || algorithms.saved(&g.shape()).filter(|algo| d.accepts(handle, algo, workspace.1));
    let algo = match algorithms.chosen.get(&g.shape()).copied().or_else(saved) {
        Some(algo) => {
            algorithms.chosen.insert(g.shape(), algo);
            algo
        }
        None => {
            let candidates = d.candidates(handle)?;
            let capturing = stream.capture_status().map_err(driver_error("reading the stream's capture status"))?;
            if capturing == driver_sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE {
                // SAFETY: forwarded from the caller.
                let best = unsafe { choose(handle, &d, &candidates, g, workspace, stream, algorithms) }?;
                algorithms.chosen.insert(g.shape(), best);
                best
            } else {
                algorithms.captured.push(*g);
                candidates[0]
            }
        }
    };
    // SAFETY: forwarded from the caller.
    unsafe { d.queue(handle, &algo, g, workspace, stream) }
}

/// Chooses the algorithms of the products queued while `stream` was captured that have none
/// yet, timing them into scratch memory of their results' size (A, B and the bias are only
/// read). `Ok(true)` when any was chosen: a graph captured with them should be captured again.
///
/// # Safety
/// As [`matmul`], for every product queued while capturing: their A, B and bias still hold
/// (the memory of) those matrices.
pub(crate) unsafe fn tune_captured(
    handle: lt_sys::cublasLtHandle_t,
    workspace: (u64, usize),
    stream: &Arc<CudaStream>,
    algorithms: &mut Algorithms,
) -> Result<bool> {
    let captured = std::mem::take(&mut algorithms.captured);
    let mut tuned = false;
    for g in captured {
        if algorithms.chosen.contains_key(&g.shape()) {
            continue;
        }
        let d = Descriptors::new(&g, workspace.1)?;
        let candidates = d.candidates(handle)?;
        let values = (g.c.1.max(0) as u64).saturating_mul(g.n.max(1) - 1).saturating_add(g.m);
        let size = if g.c_ty == cudaDataType::CUDA_R_32F { 4 } else { 2 };
        let bytes = usize::try_from(values.saturating_mul(size)).unwrap_or(usize::MAX);
        // Without memory for a scratch result the first suggestion stays.
        let best = match stream.alloc_zeros::<u8>(bytes) {
            Ok(scratch) => {
                let (c, _read) = scratch.device_ptr(stream);
                let into_scratch = LtGemm { c: (c, g.c.1), ..g };
                // SAFETY: the caller's promises for A, B and the bias; C is the scratch, of
                // the result's bytes, freed in stream order after the timed products.
                unsafe { choose(handle, &d, &candidates, &into_scratch, workspace, stream, algorithms) }?
            }
            Err(_) => candidates[0],
        };
        algorithms.chosen.insert(g.shape(), best);
        tuned = true;
    }
    Ok(tuned)
}

/// The algorithm for `g` among cuBLASLt's `suggestions` (the first, untimed, when tuning is
/// off), with the wide search's variants for a large product with a bias whose weight has none
/// chosen yet (the winner then kept for the weight's other batch sizes), or with the variant
/// chosen for its weight.
///
/// # Safety
/// As [`matmul`].
unsafe fn choose(
    handle: lt_sys::cublasLtHandle_t,
    d: &Descriptors,
    suggestions: &[cublasLtMatmulAlgo_t],
    g: &LtGemm,
    workspace: (u64, usize),
    stream: &CudaStream,
    algorithms: &mut Algorithms,
) -> Result<cublasLtMatmulAlgo_t> {
    if !tuning_enabled() {
        return Ok(suggestions[0]);
    }
    let family = g.shape().family();
    let known = algorithms.family_best.get(&family).copied().or_else(|| algorithms.saved(&family));
    let wide = g.bias.is_some() && known.is_none() && g.m.saturating_mul(g.n).saturating_mul(g.k) >= WIDE_SEARCH_MIN;
    let candidates = match known {
        Some(known) if !suggestions.iter().any(|a| a.data == known.data) && d.accepts(handle, &known, workspace.1) => {
            suggestions.iter().copied().chain([known]).collect()
        }
        _ if wide => d.variants(handle, suggestions, workspace.1),
        _ => suggestions.to_vec(),
    };
    // SAFETY: forwarded from the caller.
    let best = unsafe { fastest(handle, d, &candidates, g, workspace, stream) }?;
    if wide {
        algorithms.family_best.insert(family, best);
        algorithms.save(&family, &best);
    } else if let Some(known) = known {
        algorithms.family_best.insert(family, known);
    }
    algorithms.save(&g.shape(), &best);
    Ok(best)
}

/// The fastest of `candidates` for `g` (the first, untimed, when there is one). Each is run
/// once (those that fail to queue are left out) and, when there are more than [`FINALISTS`],
/// screened by one timed product in each of two passes, the second in reverse order; the
/// [`FINALISTS`] quickest are then timed over 3 rounds of 2 products, alternating so that the
/// GPU's clock changes fall on all alike, and the lowest median wins.
///
/// # Safety
/// As [`matmul`].
unsafe fn fastest(
    handle: lt_sys::cublasLtHandle_t,
    d: &Descriptors,
    candidates: &[cublasLtMatmulAlgo_t],
    g: &LtGemm,
    workspace: (u64, usize),
    stream: &CudaStream,
) -> Result<cublasLtMatmulAlgo_t> {
    if candidates.len() == 1 {
        return Ok(candidates[0]);
    }
    let usable: Vec<_> = candidates
        .iter()
        .copied()
        // SAFETY: forwarded from the caller.
        .filter(|algo| unsafe { d.queue(handle, algo, g, workspace, stream) }.is_ok())
        .collect();
    let event = || stream.context().new_event(Some(driver_sys::CUevent_flags::CU_EVENT_DEFAULT));
    let (start, end) =
        (event().map_err(driver_error("creating an event"))?, event().map_err(driver_error("creating an event"))?);
    let time = |algo: &cublasLtMatmulAlgo_t, products: usize| -> Result<f32> {
        start.record(stream).map_err(driver_error("recording an event"))?;
        for _ in 0..products {
            // SAFETY: forwarded from the caller.
            unsafe { d.queue(handle, algo, g, workspace, stream) }?;
        }
        end.record(stream).map_err(driver_error("recording an event"))?;
        start.elapsed_ms(&end).map_err(driver_error("timing a product"))
    };
    let finalists = if usable.len() > FINALISTS {
        let mut screened = vec![f32::INFINITY; usable.len()];
        for pass in 0..2 {
            for i in 0..usable.len() {
                let i = if pass == 0 { i } else { usable.len() - 1 - i };
                screened[i] = screened[i].min(time(&usable[i], 1)?);
            }
        }
        let mut order: Vec<usize> = (0..usable.len()).collect();
        order.sort_by(|&a, &b| screened[a].total_cmp(&screened[b]));
        order.into_iter().take(FINALISTS).map(|i| usable[i]).collect()
    } else {
        usable
    };
    let mut times = vec![Vec::new(); finalists.len()];
    for _round in 0..3 {
        for (algo, t) in finalists.iter().zip(&mut times) {
            t.push(time(algo, 2)?);
        }
    }
    let median = |t: &mut Vec<f32>| {
        t.sort_by(f32::total_cmp);
        t[t.len() / 2]
    };
    let best = finalists.iter().zip(&mut times).map(|(a, t)| (median(t), *a)).min_by(|x, y| x.0.total_cmp(&y.0));
    Ok(best.map_or(candidates[0], |(_, algo)| algo))
}
