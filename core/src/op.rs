//! The operations a graph node can perform, with their parameters.

/// Element-wise functions of one operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    Sqr,
    Sqrt,
    Neg,
    Abs,
    Exp,
    Relu,
    /// GELU, tanh approximation: `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`.
    Gelu,
    /// GELU, exact: `0.5 x (1 + erf(x / sqrt(2)))`.
    GeluErf,
    Silu,
    Sigmoid,
    Tanh,
}

impl UnaryOp {
    pub const ALL: [UnaryOp; 11] = [
        UnaryOp::Sqr,
        UnaryOp::Sqrt,
        UnaryOp::Neg,
        UnaryOp::Abs,
        UnaryOp::Exp,
        UnaryOp::Relu,
        UnaryOp::Gelu,
        UnaryOp::GeluErf,
        UnaryOp::Silu,
        UnaryOp::Sigmoid,
        UnaryOp::Tanh,
    ];

    pub const fn name(self) -> &'static str {
        match self {
            UnaryOp::Sqr => "SQR",
            UnaryOp::Sqrt => "SQRT",
            UnaryOp::Neg => "NEG",
            UnaryOp::Abs => "ABS",
            UnaryOp::Exp => "EXP",
            UnaryOp::Relu => "RELU",
            UnaryOp::Gelu => "GELU",
            UnaryOp::GeluErf => "GELU_ERF",
            UnaryOp::Silu => "SILU",
            UnaryOp::Sigmoid => "SIGMOID",
            UnaryOp::Tanh => "TANH",
        }
    }
}

/// Element-wise functions of two operands; the second broadcasts over the first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
}

impl BinaryOp {
    pub const fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "ADD",
            BinaryOp::Sub => "SUB",
            BinaryOp::Mul => "MUL",
            BinaryOp::Div => "DIV",
        }
    }
}

/// How ROPE pairs up the values it rotates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RopeMode {
    /// Adjacent pairs `(x[2i], x[2i+1])` (ggml mode 0).
    Normal,
    /// Halves `(x[i], x[i + n_dims/2])` (ggml mode 2, GPT-NeoX).
    Neox,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PoolKind {
    Max,
    Avg,
}

/// Parameters of IM2COL: strides, padding and dilation along dims 0 and 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Im2ColParams {
    pub s0: usize,
    pub s1: usize,
    pub p0: usize,
    pub p1: usize,
    pub d0: usize,
    pub d1: usize,
    /// 2-D (input `[W, H, C, N]`) or 1-D (input `[W, C, N]`).
    pub is_2d: bool,
}

/// Parameters of POOL_2D: kernel, stride and padding along dims 0 and 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Pool2dParams {
    pub kind: PoolKind,
    pub k0: usize,
    pub k1: usize,
    pub s0: usize,
    pub s1: usize,
    pub p0: usize,
    pub p1: usize,
}

/// Parameters of ROPE.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RopeParams {
    pub mode: RopeMode,
    /// Number of leading values of each row that are rotated; the rest pass through.
    pub n_dims: usize,
    pub freq_base: f32,
    pub freq_scale: f32,
}

/// How precisely an op's products may be computed (FLASH_ATTN's; ggml's op precision).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Precision {
    /// f32 accuracy (the default).
    #[default]
    Full,
    /// A backend may round the products' operands to 10-bit mantissas (f16 or TF32
    /// arithmetic, as PyTorch's half-precision attention does); sums stay f32. A backend may
    /// also compute such an op in full precision.
    Reduced,
}

/// What a tensor is: a leaf (`None`), a computed op, or a view of another tensor.
///
/// Operands are the tensor's sources, in ggml's order (`src[0]`, `src[1]`, ...).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Op {
    /// A leaf: data supplied from outside (weights, inputs).
    None,
    Binary(BinaryOp),
    /// `x * s`.
    Scale(f32),
    Unary(UnaryOp),
    /// Sum of each row: `[n, a, b, c] -> [1, a, b, c]`.
    SumRows,
    /// Mean of each row.
    Mean,
    /// Index of the largest value of each row of a matrix: `[n, m] -> [m]` (I32).
    Argmax,
    /// `softmax(x * scale + mask)` along rows; the mask (src 1) is optional and repeats as
    /// [`soft_max_mask_fits`] says.
    SoftMax {
        scale: f32,
    },
    /// `(x - mean) / sqrt(var + eps)` along rows.
    Norm {
        eps: f32,
    },
    /// `x / sqrt(mean(x^2) + eps)` along rows.
    RmsNorm {
        eps: f32,
    },
    /// `dst[i, j] = sum_k a[k, i] * b[k, j]`, `a: [K, M, ..]` of any type, `b: [K, N, ..]` F32.
    MulMat,
    /// Rows of src 0 picked by the I32 indices in src 1, as F32.
    GetRows,
    /// Copy src 0 into src 1 (converting the type); the result is a view of src 1.
    Cpy,
    /// Write the rows of src 0 (F32) into src 2 at the rows the I32 indices in src 1 name
    /// (converting the type); the result is a view of src 2.
    SetRows,
    /// Attention in one pass: `softmax(scale * k^T q + mask) v` for every query row, without
    /// the score matrix; src 0 queries, src 1 keys, src 2 values, src 3 an optional mask (see
    /// [`crate::Graph::flash_attn`]).
    FlashAttn {
        scale: f32,
        precision: Precision,
    },
    /// A contiguous copy of a possibly strided tensor.
    Cont,
    /// Join src 0 and src 1 along `dim`.
    Concat {
        dim: usize,
    },
    /// Rotary position embedding; src 1 holds one I32 position per index of dim 2.
    Rope(RopeParams),
    /// Sets `x[j, i] = -inf` where `j > n_past + i`.
    DiagMaskInf {
        n_past: usize,
    },
    /// Unfolds convolution patches: src 0 is the kernel (shape only), src 1 the input.
    Im2Col(Im2ColParams),
    Pool2d(Pool2dParams),
    /// A strided window into src 0.
    View,
    /// Src 0 seen with another shape (src 0 must be contiguous).
    Reshape,
    /// Src 0 with its axes reordered: axis `i` of src 0 becomes axis `axes[i]`.
    Permute([u8; 4]),
    /// Src 0 with axes 0 and 1 swapped.
    Transpose,
}

impl Op {
    /// ggml's name of the op ("ADD", "MUL_MAT", "GELU", ...).
    pub const fn name(&self) -> &'static str {
        match self {
            Op::None => "NONE",
            Op::Binary(b) => b.name(),
            Op::Scale(_) => "SCALE",
            Op::Unary(u) => u.name(),
            Op::SumRows => "SUM_ROWS",
            Op::Mean => "MEAN",
            Op::Argmax => "ARGMAX",
            Op::SoftMax { .. } => "SOFT_MAX",
            Op::Norm { .. } => "NORM",
            Op::RmsNorm { .. } => "RMS_NORM",
            Op::MulMat => "MUL_MAT",
            Op::GetRows => "GET_ROWS",
            Op::Cpy => "CPY",
            Op::SetRows => "SET_ROWS",
            Op::FlashAttn { .. } => "FLASH_ATTN",
            Op::Cont => "CONT",
            Op::Concat { .. } => "CONCAT",
            Op::Rope(_) => "ROPE",
            Op::DiagMaskInf { .. } => "DIAG_MASK_INF",
            Op::Im2Col(_) => "IM2COL",
            Op::Pool2d(_) => "POOL_2D",
            Op::View => "VIEW",
            Op::Reshape => "RESHAPE",
            Op::Permute(_) => "PERMUTE",
            Op::Transpose => "TRANSPOSE",
        }
    }

    /// Ops whose kernels tolerate writing over their first operand, so a graph allocator may
    /// give the result the memory of an operand that has no other use.
    pub const fn can_inplace(&self) -> bool {
        matches!(
            self,
            Op::Binary(_)
                | Op::Scale(_)
                | Op::Unary(_)
                | Op::Rope(_)
                | Op::RmsNorm { .. }
                | Op::Norm { .. }
                | Op::SoftMax { .. }
                | Op::DiagMaskInf { .. }
        )
    }

    /// View ops only reinterpret their source's memory; they have no kernel.
    pub const fn is_view(&self) -> bool {
        matches!(self, Op::View | Op::Reshape | Op::Permute(_) | Op::Transpose)
    }
}

/// Whether a SOFT_MAX mask of shape `mask` fits a source of shape `src`: rows of the same
/// length, repeated over dimensions 1 to 3. Along each of them the mask's size divides the
/// source's, or (dimension 1 only) the mask has at least as many rows, of which the first are
/// used. Source row `(i1, i2, i3)` reads mask row [`soft_max_mask_row`].
pub fn soft_max_mask_fits(mask: [usize; 4], src: [usize; 4]) -> bool {
    let divides = |d: usize| mask[d] != 0 && src[d] % mask[d] == 0;
    mask[0] == src[0] && (mask[1] >= src[1] || divides(1)) && divides(2) && divides(3)
}

/// Whether FLASH_ATTN operands of shapes `q` `[d, n, hq, b]`, `k` `[d, kv, hk, bk]`, `v`
/// `[dv, kv, hk, bk]`, result `dst` `[dv, hq, n, b]` and optional `mask` fit one another:
/// query heads a multiple of key heads, sequences of keys repeated over the queries', and a
/// mask that fits the `[kv, n, hq, b]` scores as SOFT_MAX's does.
pub fn flash_attn_fits(q: [usize; 4], k: [usize; 4], v: [usize; 4], dst: [usize; 4], mask: Option<[usize; 4]>) -> bool {
    let [d, n, hq, b] = q;
    let [dk, kv, hk, bk] = k;
    dk == d
        && hk > 0
        && bk > 0
        && hq % hk == 0
        && b % bk == 0
        && v[1..] == k[1..]
        && dst == [v[0], hq, n, b]
        && mask.is_none_or(|m| soft_max_mask_fits(m, [kv, n, hq, b]))
}

/// The mask row that source row `(i1, i2, i3)` of a SOFT_MAX reads.
pub fn soft_max_mask_row(mask: [usize; 4], i1: usize, i2: usize, i3: usize) -> (usize, usize, usize) {
    (i1 % mask[1], i2 % mask[2], i3 % mask[3])
}
