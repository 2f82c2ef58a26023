//! One product through cuBLASLt with a bias epilogue: `C = A^T B + bias` (the bias a column of
//! `M` f32 values added to every column of `C`), so that a linear layer's ADD of its bias costs
//! no kernel and no pass over its result.
//!
//! The descriptors live for one call: products are queued when a split is captured into a
//! CUDA graph, where the heuristic's choice is recorded once and replayed.

use std::ffi::c_void;

use cudarc::cublas::sys::cublasOperation_t;
use cudarc::cublaslt::result as lt;
use cudarc::cublaslt::sys::{
    self as lt_sys, cublasComputeType_t, cublasLtEpilogue_t, cublasLtMatmulDescAttributes_t,
    cublasLtMatmulPreferenceAttributes_t, cudaDataType,
};
use tessera_core::Result;

use super::backend_error;

/// A product `C (m x n, f32, ldc) = A^T (A: k x m of type `ty`, lda) B (k x n, `ty`, ldb) + bias`.
pub(crate) struct BiasGemm {
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub ty: cudaDataType,
    pub a: (u64, i64),
    pub b: (u64, i64),
    pub c: (u64, i64),
    pub bias: u64,
    /// TF32 tensor cores for f32 operands (the `tf32` mode, and split products' parts).
    pub tf32: bool,
}

fn lt_error(what: &str) -> impl Fn(lt::CublasError) -> tessera_core::Error + '_ {
    move |e| backend_error(&format!("cuBLASLt: {what} failed: {e}"))
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

/// Queues `g` on `stream` with `handle`, using `workspace` (device address and bytes).
///
/// # Safety
/// `handle` must be live; A, B, C and the bias must be device memory of the handle's context
/// holding the matrices `g` describes, valid until the work has run; `workspace` must be device
/// memory of that many bytes used by nothing else on other streams.
pub(crate) unsafe fn matmul_bias(
    handle: lt_sys::cublasLtHandle_t,
    workspace: (u64, usize),
    stream: lt_sys::cudaStream_t,
    g: &BiasGemm,
) -> Result<()> {
    let compute = if g.tf32 && g.ty == cudaDataType::CUDA_R_32F {
        cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32
    } else {
        cublasComputeType_t::CUBLAS_COMPUTE_32F
    };
    let matmul = lt::create_matmul_desc(compute, cudaDataType::CUDA_R_32F).map_err(lt_error("creating a product"))?;
    let mut d = Descriptors { matmul, layouts: Vec::new(), preference: None };
    use cublasLtMatmulDescAttributes_t as A;
    // SAFETY: `d.matmul` is live; each value has its attribute's type.
    unsafe {
        set(d.matmul, A::CUBLASLT_MATMUL_DESC_TRANSA, &cublasOperation_t::CUBLAS_OP_T)?;
        set(d.matmul, A::CUBLASLT_MATMUL_DESC_TRANSB, &cublasOperation_t::CUBLAS_OP_N)?;
        set(d.matmul, A::CUBLASLT_MATMUL_DESC_EPILOGUE, &cublasLtEpilogue_t::CUBLASLT_EPILOGUE_BIAS)?;
        set(d.matmul, A::CUBLASLT_MATMUL_DESC_BIAS_POINTER, &(g.bias as *const c_void))?;
        set(d.matmul, A::CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &cudaDataType::CUDA_R_32F)?;
    }
    for (ty, rows, cols, ld) in
        [(g.ty, g.k, g.m, g.a.1), (g.ty, g.k, g.n, g.b.1), (cudaDataType::CUDA_R_32F, g.m, g.n, g.c.1)]
    {
        d.layouts.push(lt::create_matrix_layout(ty, rows, cols, ld).map_err(lt_error("describing a matrix"))?);
    }
    let preference = lt::create_matmul_pref().map_err(lt_error("creating a preference"))?;
    d.preference = Some(preference);
    let bytes = workspace.1;
    // SAFETY: `preference` is live; the attribute is a size_t.
    unsafe {
        lt::set_matmul_pref_attribute(
            preference,
            cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
            (&bytes as *const usize).cast(),
            std::mem::size_of::<usize>(),
        )
    }
    .map_err(lt_error("limiting the work memory"))?;
    let (la, lb, lc) = (d.layouts[0], d.layouts[1], d.layouts[2]);
    // SAFETY: every descriptor is live.
    let heuristic = unsafe { lt::get_matmul_algo_heuristic(handle, d.matmul, la, lb, lc, lc, preference) }
        .map_err(lt_error("choosing an algorithm"))?;
    let (alpha, beta) = (1.0f32, 0.0f32);
    // SAFETY: the caller's promises on the handle, the matrices and the work memory; the
    // descriptors are live; alpha and beta are host f32 values, the scale type.
    unsafe {
        lt::matmul(
            handle,
            d.matmul,
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
            &heuristic.algo,
            workspace.0 as *mut c_void,
            bytes,
            stream,
        )
    }
    .map_err(lt_error("queuing a product"))
}
