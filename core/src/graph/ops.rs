//! Op constructors: shape inference and operand checks for every op.
//!
//! Each check failure names the offending tensor and says what was expected.

use alloc::format;
use alloc::string::String;

use crate::dtype::DType;
use crate::error::{Error, Result, Shape};
use crate::graph::Graph;
use crate::op::{BinaryOp, Im2ColParams, Op, Pool2dParams, Precision, RopeParams, UnaryOp};
use crate::tensor::{Tensor, TensorId, MAX_DIMS};

const FLOAT: &str = "f32, f16 or bf16";

impl Graph {
    fn node(&mut self, op: Op, dtype: DType, ne: [usize; MAX_DIMS], srcs: &[TensorId]) -> Result<TensorId> {
        let mut t = Tensor::new(dtype, ne, op)?;
        for (slot, s) in t.src.iter_mut().zip(srcs) {
            *slot = Some(*s);
        }
        self.push(t)
    }

    fn shape_error(&self, op: &'static str, id: TensorId, expected: String) -> Error {
        Error::ShapeMismatch { op, tensor: self.label(id), shape: self.tensors()[id.index()].shape(), expected }
    }

    fn expect_type(
        &self,
        op: &'static str,
        id: TensorId,
        ok: fn(DType) -> bool,
        expected: &'static str,
    ) -> Result<&Tensor> {
        let t = self.tensor(id)?;
        if ok(t.dtype) {
            Ok(t)
        } else {
            Err(Error::TypeMismatch { op, tensor: self.label(id), dtype: t.dtype, expected })
        }
    }

    fn expect_float(&self, op: &'static str, id: TensorId) -> Result<&Tensor> {
        self.expect_type(op, id, DType::is_float, FLOAT)
    }

    fn expect_rows_contiguous(&self, op: &'static str, id: TensorId) -> Result<()> {
        if self.tensor(id)?.rows_contiguous() {
            Ok(())
        } else {
            Err(self.shape_error(op, id, "rows of densely packed values (apply CONT first)".into()))
        }
    }

    /// `a op b` with `b` repeated over `a` (each dimension of `b` divides `a`'s).
    pub fn binary(&mut self, op: BinaryOp, a: TensorId, b: TensorId) -> Result<TensorId> {
        let name = op.name();
        let ta = self.expect_float(name, a)?;
        let tb = self.expect_float(name, b)?;
        let (dtype, ne) = (ta.dtype, ta.ne);
        if (0..MAX_DIMS).any(|i| tb.ne[i] == 0 || ne[i] % tb.ne[i] != 0) {
            return Err(self.shape_error(
                name,
                b,
                format!("a shape that repeats to {} (each dimension dividing it)", Shape(ne)),
            ));
        }
        self.node(Op::Binary(op), dtype, ne, &[a, b])
    }

    pub fn add(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.binary(BinaryOp::Add, a, b)
    }
    pub fn sub(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.binary(BinaryOp::Sub, a, b)
    }
    pub fn mul(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.binary(BinaryOp::Mul, a, b)
    }
    pub fn div(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.binary(BinaryOp::Div, a, b)
    }

    /// `a * s`.
    pub fn scale(&mut self, a: TensorId, s: f32) -> Result<TensorId> {
        let t = self.expect_float("SCALE", a)?;
        let (dtype, ne) = (t.dtype, t.ne);
        self.node(Op::Scale(s), dtype, ne, &[a])
    }

    pub fn unary(&mut self, op: UnaryOp, a: TensorId) -> Result<TensorId> {
        let t = self.expect_float(op.name(), a)?;
        let (dtype, ne) = (t.dtype, t.ne);
        self.node(Op::Unary(op), dtype, ne, &[a])
    }

    pub fn sqr(&mut self, a: TensorId) -> Result<TensorId> {
        self.unary(UnaryOp::Sqr, a)
    }
    pub fn sqrt(&mut self, a: TensorId) -> Result<TensorId> {
        self.unary(UnaryOp::Sqrt, a)
    }
    pub fn neg(&mut self, a: TensorId) -> Result<TensorId> {
        self.unary(UnaryOp::Neg, a)
    }
    pub fn abs(&mut self, a: TensorId) -> Result<TensorId> {
        self.unary(UnaryOp::Abs, a)
    }
    pub fn exp(&mut self, a: TensorId) -> Result<TensorId> {
        self.unary(UnaryOp::Exp, a)
    }
    pub fn relu(&mut self, a: TensorId) -> Result<TensorId> {
        self.unary(UnaryOp::Relu, a)
    }
    /// GELU, tanh approximation.
    pub fn gelu(&mut self, a: TensorId) -> Result<TensorId> {
        self.unary(UnaryOp::Gelu, a)
    }
    /// GELU, exact (erf) form.
    pub fn gelu_erf(&mut self, a: TensorId) -> Result<TensorId> {
        self.unary(UnaryOp::GeluErf, a)
    }
    pub fn silu(&mut self, a: TensorId) -> Result<TensorId> {
        self.unary(UnaryOp::Silu, a)
    }
    pub fn sigmoid(&mut self, a: TensorId) -> Result<TensorId> {
        self.unary(UnaryOp::Sigmoid, a)
    }
    pub fn tanh(&mut self, a: TensorId) -> Result<TensorId> {
        self.unary(UnaryOp::Tanh, a)
    }

    /// Sum of each row: `[n, a, b, c] -> [1, a, b, c]`, same type.
    pub fn sum_rows(&mut self, a: TensorId) -> Result<TensorId> {
        let t = self.expect_float("SUM_ROWS", a)?;
        let (dtype, ne) = (t.dtype, t.ne);
        self.node(Op::SumRows, dtype, [1, ne[1], ne[2], ne[3]], &[a])
    }

    /// Mean of each row: `[n, a, b, c] -> [1, a, b, c]`, F32.
    pub fn mean(&mut self, a: TensorId) -> Result<TensorId> {
        let ne = self.expect_float("MEAN", a)?.ne;
        self.node(Op::Mean, DType::F32, [1, ne[1], ne[2], ne[3]], &[a])
    }

    /// Index of the largest value of each row of a matrix: `[n, m] -> [m]`, I32.
    pub fn argmax(&mut self, a: TensorId) -> Result<TensorId> {
        let ne = self.expect_float("ARGMAX", a)?.ne;
        if ne[2] != 1 || ne[3] != 1 || ne[0] == 0 {
            return Err(self.shape_error("ARGMAX", a, "a matrix [n, m, 1, 1] with n > 0".into()));
        }
        self.node(Op::Argmax, DType::I32, [ne[1], 1, 1, 1], &[a])
    }

    /// `softmax(a * scale + mask)` along rows. The mask (F32 or F16) has `a`'s row length,
    /// at least as many rows, and repeats over dimensions 2 and 3.
    pub fn soft_max(&mut self, a: TensorId, mask: Option<TensorId>, scale: f32) -> Result<TensorId> {
        let t = self.expect_float("SOFT_MAX", a)?;
        let (dtype, ne) = (t.dtype, t.ne);
        let Some(m) = mask else {
            return self.node(Op::SoftMax { scale }, dtype, ne, &[a]);
        };
        let mn = self.expect_type("SOFT_MAX", m, |d| matches!(d, DType::F32 | DType::F16), "f32 or f16")?.ne;
        if !crate::op::soft_max_mask_fits(mn, ne) {
            return Err(self.shape_error(
                "SOFT_MAX",
                m,
                format!(
                    "a mask [{}, d1, d2, d3] with d1 >= {} or dividing it, and d2, d3 dividing {} and {}",
                    ne[0], ne[1], ne[2], ne[3]
                ),
            ));
        }
        self.node(Op::SoftMax { scale }, dtype, ne, &[a, m])
    }

    /// Attention in one pass, as ggml's FLASH_ATTN_EXT: for queries `q` (F32 or F16
    /// `[d, n, hq, b]`), keys `k` (`[d, kv, hk, bk]`) and values `v` (`[dv, kv, hk, bk]`), both
    /// F32, F16 or BF16, all with densely packed rows, query head `h` reads key/value head
    /// `h / (hq / hk)` (grouped-query attention: `hk` divides `hq`) and batch `i3` reads
    /// `i3 % bk`. The result is F32 `[dv, hq, n, b]` (heads before queries, so that a query's
    /// heads are one row of `dv * hq` values):
    /// `out[:, h, i, i3] = sum_p softmax_p(scale * q[:, i, h, i3] . k[:, p] + mask[p, i]) v[:, p]`.
    /// The optional `mask` (F32 or F16) is laid over the `[kv, n, hq, b]` scores as SOFT_MAX's
    /// mask is; a query whose scores are all `-inf` gets zeros.
    pub fn flash_attn(
        &mut self,
        q: TensorId,
        k: TensorId,
        v: TensorId,
        mask: Option<TensorId>,
        scale: f32,
    ) -> Result<TensorId> {
        const OP: &str = "FLASH_ATTN";
        let nq = self.expect_type(OP, q, |d| matches!(d, DType::F32 | DType::F16), "f32 or f16")?.ne;
        let nk = self.expect_float(OP, k)?.ne;
        let nv = self.expect_float(OP, v)?.ne;
        for t in [q, k, v] {
            self.expect_rows_contiguous(OP, t)?;
        }
        let [d, n, hq, b] = nq;
        let [dk, kv, hk, bk] = nk;
        if dk != d || hk == 0 || bk == 0 || hq % hk != 0 || b % bk != 0 {
            return Err(self.shape_error(
                OP,
                k,
                format!("[{d}, kv, hk, bk] keys with hk dividing {hq} and bk dividing {b}"),
            ));
        }
        if nv[1..] != nk[1..] {
            return Err(self.shape_error(OP, v, format!("[dv, {kv}, {hk}, {bk}] values, one per key")));
        }
        let scores = [kv, n, hq, b];
        if let Some(m) = mask {
            let mn = self.expect_type(OP, m, |d| matches!(d, DType::F32 | DType::F16), "f32 or f16")?.ne;
            if !crate::op::soft_max_mask_fits(mn, scores) {
                return Err(self.shape_error(
                    OP,
                    m,
                    format!(
                        "a mask [{kv}, d1, d2, d3] with d1 >= {n} or dividing it, and d2, d3 dividing {hq} and {b}"
                    ),
                ));
            }
        }
        let out = [nv[0], hq, n, b];
        let op = Op::FlashAttn { scale, precision: Precision::Full };
        match mask {
            Some(m) => self.node(op, DType::F32, out, &[q, k, v, m]),
            None => self.node(op, DType::F32, out, &[q, k, v]),
        }
    }

    /// Lets FLASH_ATTN node `id` compute its products in `precision` (see [`Precision`]). Set it
    /// before the graph is scheduled: programs prepared earlier keep the kernels they chose.
    pub fn set_flash_attn_precision(&mut self, id: TensorId, precision: Precision) -> Result<()> {
        let t = self.tensor_mut(id)?;
        match t.op {
            Op::FlashAttn { scale, .. } => {
                t.op = Op::FlashAttn { scale, precision };
                Ok(())
            }
            other => Err(Error::InvalidParam {
                op: "FLASH_ATTN",
                message: format!("tensor {} is a {} node, not FLASH_ATTN", id.0, other.name()),
            }),
        }
    }

    /// `(a - mean) / sqrt(variance + eps)` along rows.
    pub fn norm(&mut self, a: TensorId, eps: f32) -> Result<TensorId> {
        let t = self.expect_float("NORM", a)?;
        let (dtype, ne) = (t.dtype, t.ne);
        self.node(Op::Norm { eps }, dtype, ne, &[a])
    }

    /// `a / sqrt(mean(a^2) + eps)` along rows.
    pub fn rms_norm(&mut self, a: TensorId, eps: f32) -> Result<TensorId> {
        let t = self.expect_float("RMS_NORM", a)?;
        let (dtype, ne) = (t.dtype, t.ne);
        self.node(Op::RmsNorm { eps }, dtype, ne, &[a])
    }

    /// Matrix product `dst[i, j] = sum_k a[k, i] * b[k, j]`: `a: [K, M, d2, d3]` of any
    /// non-integer type (the weights), `b: [K, N, e2, e3]` F32 with `d2 | e2`, `d3 | e3`;
    /// the result is `[M, N, e2, e3]` F32.
    pub fn mul_mat(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        let na = self.expect_type("MUL_MAT", a, |d| d != DType::I32, "a float or quantized type")?.ne;
        let nb = self.expect_type("MUL_MAT", b, |d| d == DType::F32, "f32")?.ne;
        self.expect_rows_contiguous("MUL_MAT", a)?;
        if na[0] != nb[0] || na[2] == 0 || na[3] == 0 || nb[2] % na[2] != 0 || nb[3] % na[3] != 0 {
            return Err(self.shape_error(
                "MUL_MAT",
                b,
                format!(
                    "[{}, n, e2, e3] with e2, e3 multiples of {} and {} to multiply by {}",
                    na[0],
                    na[2],
                    na[3],
                    Shape(na)
                ),
            ));
        }
        self.node(Op::MulMat, DType::F32, [na[1], nb[1], nb[2], nb[3]], &[a, b])
    }

    /// Rows of `a: [n, r, d2, d3]` picked by the I32 indices `b: [m, d2, d3]`; the result is
    /// `[n, m, d2, d3]`, F32 (I32 for an I32 `a`).
    pub fn get_rows(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        let ta = self.tensor(a)?;
        let (adt, na) = (ta.dtype, ta.ne);
        let nb = self.expect_type("GET_ROWS", b, |d| d == DType::I32, "i32 row indices")?.ne;
        self.expect_rows_contiguous("GET_ROWS", a)?;
        if nb[1] != na[2] || nb[2] != na[3] || nb[3] != 1 {
            return Err(self.shape_error(
                "GET_ROWS",
                b,
                format!("indices [m, {}, {}, 1] for rows of {}", na[2], na[3], Shape(na)),
            ));
        }
        let dtype = if adt == DType::I32 { DType::I32 } else { DType::F32 };
        self.node(Op::GetRows, dtype, [na[0], nb[0], nb[1], nb[2]], &[a, b])
    }

    /// Copies `a` into `b` (same number of values, in row-major order), converting to `b`'s
    /// type, quantizing if needed. The result is a view of `b`: computing it writes `b`.
    pub fn cpy(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        let ta = self.tensor(a)?;
        let tb = self.tensor(b)?;
        let (na, nelem) = (ta.ne, ta.nelements());
        if tb.nelements() != nelem {
            return Err(self.shape_error(
                "CPY",
                b,
                format!("{nelem} values, as many as {} has ({})", self.label(a), Shape(na)),
            ));
        }
        self.check_cpy_types(a, b)?;
        let tb = self.tensor(b)?;
        let (dtype, ne, nb) = (tb.dtype, tb.ne, tb.nb);
        let (root, offset) = match tb.view_src {
            Some(r) => (r, tb.view_offset),
            None => (b, 0),
        };
        let mut t = Tensor::new(dtype, ne, Op::Cpy)?;
        t.nb = nb;
        t.src[0] = Some(a);
        t.src[1] = Some(b);
        t.view_src = Some(root);
        t.view_offset = offset;
        self.push(t)
    }

    /// Writes the rows of `values` (F32 `[n, m, d2, d3]`) into `dst` (`[n, r, d2, d3]`, F32,
    /// F16 or BF16) at the rows that `indices` (I32 `[m, d2, d3]`) name:
    /// `dst[:, indices[j, i2, i3], i2, i3] = values[:, j, i2, i3]`, converting to `dst`'s type.
    /// The result is a view of `dst`: computing it writes `dst`. Where the rows go is data, so
    /// a graph that writes a KV cache at a new position each step keeps its shape.
    pub fn set_rows(&mut self, dst: TensorId, values: TensorId, indices: TensorId) -> Result<TensorId> {
        let nv = self.expect_type("SET_ROWS", values, |d| d == DType::F32, "f32")?.ne;
        let ni = self.expect_type("SET_ROWS", indices, |d| d == DType::I32, "i32")?.ne;
        let td = self.expect_float("SET_ROWS", dst)?;
        let (dtype, nd, nb, view_src, view_offset) = (td.dtype, td.ne, td.nb, td.view_src, td.view_offset);
        if nv[0] != nd[0] || nv[2] != nd[2] || nv[3] != nd[3] {
            return Err(self.shape_error(
                "SET_ROWS",
                values,
                format!("[{}, m, {}, {}], rows as long as the destination's, as many planes", nd[0], nd[2], nd[3]),
            ));
        }
        if ni != [nv[1], nv[2], nv[3], 1] {
            return Err(self.shape_error(
                "SET_ROWS",
                indices,
                format!("[{}, {}, {}]: one index per row of the values", nv[1], nv[2], nv[3]),
            ));
        }
        self.expect_rows_contiguous("SET_ROWS", dst)?;
        let (root, offset) = match view_src {
            Some(r) => (r, view_offset),
            None => (dst, 0),
        };
        let mut t = Tensor::new(dtype, nd, Op::SetRows)?;
        t.nb = nb;
        t.src[0] = Some(values);
        t.src[1] = Some(indices);
        t.src[2] = Some(dst);
        t.view_src = Some(root);
        t.view_offset = offset;
        self.push(t)
    }

    /// `a` converted to `dtype` (a new tensor of `a`'s shape).
    pub fn cast(&mut self, a: TensorId, dtype: DType) -> Result<TensorId> {
        let ne = self.tensor(a)?.ne;
        dtype.row_bytes(ne[0])?;
        let id = self.node(Op::Cpy, dtype, ne, &[a])?;
        self.check_cpy_types(a, id)?;
        Ok(id)
    }

    fn check_cpy_types(&self, a: TensorId, b: TensorId) -> Result<()> {
        let ta = self.tensor(a)?;
        let tb = self.tensor(b)?;
        if ta.dtype.is_quantized() {
            self.expect_rows_contiguous("CPY", a)?;
        }
        if tb.dtype.is_quantized() {
            self.expect_rows_contiguous("CPY", b)?;
        }
        if (ta.dtype == DType::I32) != (tb.dtype == DType::I32) {
            return Err(Error::TypeMismatch {
                op: "CPY",
                tensor: self.label(b),
                dtype: tb.dtype,
                expected: if ta.dtype == DType::I32 {
                    "i32, as the source is"
                } else {
                    "a float or quantized type, as the source is"
                },
            });
        }
        Ok(())
    }

    /// A contiguous copy of `a`.
    pub fn cont(&mut self, a: TensorId) -> Result<TensorId> {
        let (dtype, ne) = (self.tensor(a)?.dtype, self.tensor(a)?.ne);
        if dtype.is_quantized() {
            self.expect_rows_contiguous("CONT", a)?;
        }
        self.node(Op::Cont, dtype, ne, &[a])
    }

    /// `a` and `b` joined along `dim`; all other dimensions must match.
    pub fn concat(&mut self, a: TensorId, b: TensorId, dim: usize) -> Result<TensorId> {
        let ta = self.expect_type("CONCAT", a, |d| d.is_float() || d == DType::I32, "f32, f16, bf16 or i32")?;
        let (dtype, na) = (ta.dtype, ta.ne);
        if dim >= MAX_DIMS {
            return Err(Error::InvalidParam { op: "CONCAT", message: format!("dimension {dim} is not below 4") });
        }
        let tb = self.tensor(b)?;
        if tb.dtype != dtype {
            return Err(Error::TypeMismatch {
                op: "CONCAT",
                tensor: self.label(b),
                dtype: tb.dtype,
                expected: dtype.name(),
            });
        }
        let nb = tb.ne;
        if (0..MAX_DIMS).any(|i| i != dim && na[i] != nb[i]) {
            return Err(self.shape_error(
                "CONCAT",
                b,
                format!("the shape of {} except along dimension {dim}", Shape(na)),
            ));
        }
        let mut ne = na;
        ne[dim] = na[dim].checked_add(nb[dim]).ok_or(Error::Overflow { what: "CONCAT shape" })?;
        self.node(Op::Concat { dim }, dtype, ne, &[a, b])
    }

    /// Rotary position embedding of `a: [head_dim, heads, tokens, d3]`; `pos` holds one I32
    /// position per token.
    pub fn rope(&mut self, a: TensorId, pos: TensorId, params: RopeParams) -> Result<TensorId> {
        let t = self.expect_float("ROPE", a)?;
        let (dtype, ne) = (t.dtype, t.ne);
        let np = self.expect_type("ROPE", pos, |d| d == DType::I32, "i32 positions")?.ne;
        if np != [ne[2], 1, 1, 1] {
            return Err(self.shape_error(
                "ROPE",
                pos,
                format!("[{}, 1, 1, 1], one position per index of dimension 2", ne[2]),
            ));
        }
        if params.n_dims == 0 || params.n_dims % 2 != 0 || params.n_dims > ne[0] {
            return Err(Error::InvalidParam {
                op: "ROPE",
                message: format!(
                    "n_dims must be even, positive and at most the row length {}, got {}",
                    ne[0], params.n_dims
                ),
            });
        }
        self.node(Op::Rope(params), dtype, ne, &[a, pos])
    }

    /// Sets `a[j, i] = -inf` where `j > n_past + i`.
    pub fn diag_mask_inf(&mut self, a: TensorId, n_past: usize) -> Result<TensorId> {
        let t = self.expect_float("DIAG_MASK_INF", a)?;
        let (dtype, ne) = (t.dtype, t.ne);
        self.node(Op::DiagMaskInf { n_past }, dtype, ne, &[a])
    }

    /// Convolution patches. 2-D: `input: [W, H, C, N]`, `kernel: [KW, KH, C, OC]` ->
    /// `[C*KH*KW, OW, OH, N]`. 1-D: `input: [W, C, N]`, `kernel: [KW, C, OC]` -> `[C*KW, OW, N]`.
    pub fn im2col(&mut self, kernel: TensorId, input: TensorId, p: Im2ColParams, dtype: DType) -> Result<TensorId> {
        if !matches!(dtype, DType::F32 | DType::F16) {
            return Err(Error::InvalidParam {
                op: "IM2COL",
                message: format!("the result type must be f32 or f16, got {dtype}"),
            });
        }
        let ni = self.expect_float("IM2COL", input)?.ne;
        let nk = self.tensor(kernel)?.ne;
        if p.s0 == 0 || p.s1 == 0 || p.d0 == 0 || p.d1 == 0 {
            return Err(Error::InvalidParam { op: "IM2COL", message: "strides and dilations must be positive".into() });
        }
        let bad = |g: &Graph, what: &str| g.shape_error("IM2COL", input, String::from(what));
        if p.is_2d {
            if nk[2] != ni[2] {
                return Err(self.shape_error(
                    "IM2COL",
                    kernel,
                    format!("[KW, KH, {}, OC], as many channels as the input", ni[2]),
                ));
            }
            let ow = conv_out_len(ni[0], nk[0], p.s0, p.p0, p.d0)
                .ok_or_else(|| bad(self, "an input at least as wide as the dilated kernel"))?;
            let oh = conv_out_len(ni[1], nk[1], p.s1, p.p1, p.d1)
                .ok_or_else(|| bad(self, "an input at least as high as the dilated kernel"))?;
            let rows = nk[0]
                .checked_mul(nk[1])
                .and_then(|n| n.checked_mul(ni[2]))
                .ok_or(Error::Overflow { what: "IM2COL shape" })?;
            self.node(Op::Im2Col(p), dtype, [rows, ow, oh, ni[3]], &[kernel, input])
        } else {
            if nk[1] != ni[1] || ni[3] != 1 {
                return Err(self.shape_error(
                    "IM2COL",
                    kernel,
                    format!("[KW, {}, OC], as many channels as the input [W, C, N]", ni[1]),
                ));
            }
            let ow = conv_out_len(ni[0], nk[0], p.s0, p.p0, p.d0)
                .ok_or_else(|| bad(self, "an input at least as wide as the dilated kernel"))?;
            let rows = nk[0].checked_mul(ni[1]).ok_or(Error::Overflow { what: "IM2COL shape" })?;
            self.node(Op::Im2Col(p), dtype, [rows, ow, ni[2], 1], &[kernel, input])
        }
    }

    /// 2-D pooling of `a: [W, H, C, N]` into F32 `[OW, OH, C, N]`,
    /// `OW = (W + 2 p0 - k0) / s0 + 1`. Padding is skipped by max and counted as zeros by avg.
    pub fn pool_2d(&mut self, a: TensorId, p: Pool2dParams) -> Result<TensorId> {
        let ne = self.expect_float("POOL_2D", a)?.ne;
        if p.k0 == 0 || p.k1 == 0 || p.s0 == 0 || p.s1 == 0 || p.p0 >= p.k0 || p.p1 >= p.k1 {
            return Err(Error::InvalidParam {
                op: "POOL_2D",
                message: "kernel and stride must be positive and padding smaller than the kernel".into(),
            });
        }
        let out = |size, k, s, pad| conv_out_len(size, k, s, pad, 1);
        let (Some(ow), Some(oh)) = (out(ne[0], p.k0, p.s0, p.p0), out(ne[1], p.k1, p.s1, p.p1)) else {
            return Err(self.shape_error(
                "POOL_2D",
                a,
                format!("an input of at least {} x {} with padding, and padding that fits a size", p.k0, p.k1),
            ));
        };
        self.node(Op::Pool2d(p), DType::F32, [ow, oh, ne[2], ne[3]], &[a])
    }
}

/// Output length of a convolution or pooling window along one dimension:
/// `(size + 2 pad - (d (k - 1) + 1)) / s + 1`, or `None` where the padded input is shorter
/// than the dilated kernel or a step overflows (huge padding must not wrap to a small shape).
fn conv_out_len(size: usize, k: usize, s: usize, pad: usize, d: usize) -> Option<usize> {
    let span = d.checked_mul(k.checked_sub(1)?)?.checked_add(1)?;
    let padded = size.checked_add(pad.checked_mul(2)?)?;
    Some(padded.checked_sub(span)? / s + 1)
}
