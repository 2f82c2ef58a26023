//! The case list: every op with every type it accepts, several shapes each, broadcasting,
//! non-contiguous inputs and odd sizes. Each case builds a small graph whose last node is the
//! op under test.

use std::ops::{Deref, DerefMut};

use tessera::{
    DType, Graph, Im2ColParams, Pool2dParams, PoolKind, Precision, Result, RopeMode, RopeParams, TensorId, UnaryOp,
};

/// How a leaf is filled before the compute.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Init {
    /// Uniform in `[lo, hi)` (I32 leafs: integers in `-1000..1000`).
    Uniform(f32, f32),
    /// Uniform magnitude in `[lo, hi)` with a random sign: never near zero (divisors).
    AwayFromZero(f32, f32),
    /// Integers uniform in `lo..hi` (row indices, positions); float leafs get them as f32.
    Ints(i32, i32),
    /// I32 leafs: each row distinct integers in `0..hi`, in random order (rows to write).
    DistinctInts(i32),
    /// I32 leafs: as `DistinctInts`, in runs of consecutive integers (1 to 8 long) in random
    /// order (a transposed KV cache taking a prompt's values channel by channel).
    IntRuns(i32),
    /// Pairwise distinct values in `[-1, 1]`, exact in f32, f16 and bf16 for up to 512
    /// values (rows without ties for ARGMAX).
    Distinct,
    /// Uniform in `[-1, 1)` with about a quarter of the values `-inf`, never the first of a
    /// row (soft-max masks).
    MaskInf,
    /// As `MaskInf`, and rows 1, 4, 7, ... all `-inf` (rows a soft-max turns into zeros).
    MaskInfRows,
    /// A causal mask after `ne0 / 2` cached positions: row r (of rows of `ne0` keys) sees keys
    /// `0 ..= ne0 / 2 + r`, uniform in `[-1, 1)`; the later ones are `-inf`.
    Causal,
}

impl Init {
    /// The default: uniform in `[-1, 1)`.
    pub const DEFAULT: Init = Init::Uniform(-1.0, 1.0);
}

/// A graph under construction, with the initialisation chosen for each leaf.
pub struct CaseGraph {
    pub graph: Graph,
    inits: Vec<(TensorId, Init)>,
}

impl Default for CaseGraph {
    fn default() -> CaseGraph {
        CaseGraph::new()
    }
}

impl CaseGraph {
    pub fn new() -> CaseGraph {
        CaseGraph { graph: Graph::new(), inits: Vec::new() }
    }

    /// A leaf filled with the default initialisation.
    pub fn leaf(&mut self, dtype: DType, ne: [usize; 4]) -> Result<TensorId> {
        self.leaf_init(dtype, ne, Init::DEFAULT)
    }

    /// A leaf filled with `init`.
    pub fn leaf_init(&mut self, dtype: DType, ne: [usize; 4], init: Init) -> Result<TensorId> {
        let id = self.graph.new_tensor(dtype, &ne)?;
        self.inits.push((id, init));
        Ok(id)
    }

    /// A tensor of shape `ne`: a leaf, or with `perm`, a permuted view of a leaf laid out so
    /// that the view has shape `ne` (axis `i` of the leaf becomes axis `perm[i]`).
    pub fn input(&mut self, dtype: DType, ne: [usize; 4], perm: Option<[usize; 4]>, init: Init) -> Result<TensorId> {
        match perm {
            None => self.leaf_init(dtype, ne, init),
            Some(p) => {
                let leaf_ne = [ne[p[0]], ne[p[1]], ne[p[2]], ne[p[3]]];
                let leaf = self.leaf_init(dtype, leaf_ne, init)?;
                self.graph.permute(leaf, p)
            }
        }
    }

    /// The initialisation chosen for `id`.
    pub fn init_of(&self, id: TensorId) -> Init {
        self.inits.iter().find(|(t, _)| *t == id).map_or(Init::DEFAULT, |(_, i)| *i)
    }

    pub fn into_parts(self) -> (Graph, Vec<(TensorId, Init)>) {
        (self.graph, self.inits)
    }
}

impl Deref for CaseGraph {
    type Target = Graph;
    fn deref(&self) -> &Graph {
        &self.graph
    }
}

impl DerefMut for CaseGraph {
    fn deref_mut(&mut self) -> &mut Graph {
        &mut self.graph
    }
}

type BuildFn = dyn Fn(&mut CaseGraph) -> Result<TensorId> + Send + Sync;

/// One test case: a named graph whose output node is the op under test.
pub struct Case {
    /// ggml-style name: `ADD(type=f32,ne_a=[10,5,4,3],ne_b=[1,5,1,1])`.
    pub name: String,
    /// The op under test ("ADD", "MUL_MAT", ...).
    pub op: &'static str,
    /// Largest normalised mean squared error accepted for float outputs.
    pub max_nmse: f64,
    build: Box<BuildFn>,
}

impl Case {
    pub fn new(
        op: &'static str,
        name: impl Into<String>,
        build: impl Fn(&mut CaseGraph) -> Result<TensorId> + Send + Sync + 'static,
    ) -> Case {
        Case { name: name.into(), op, max_nmse: 1e-7, build: Box::new(build) }
    }

    pub fn with_max_nmse(mut self, max_nmse: f64) -> Case {
        self.max_nmse = max_nmse;
        self
    }

    /// Builds the case's graph: leafs, the op, and the forward order of its output.
    pub fn build(&self) -> Result<(CaseGraph, TensorId)> {
        let mut cg = CaseGraph::new();
        let out = (self.build)(&mut cg)?;
        cg.graph.build_forward(out)?;
        Ok((cg, out))
    }
}

/// `[10,5,4,3]`.
pub fn fmt_ne(ne: &[usize]) -> String {
    let parts: Vec<String> = ne.iter().map(|n| n.to_string()).collect();
    format!("[{}]", parts.join(","))
}

const F32: DType = DType::F32;
const F16: DType = DType::F16;
const BF16: DType = DType::BF16;
const I32: DType = DType::I32;
const Q8_0: DType = DType::Q8_0;
const Q4_0: DType = DType::Q4_0;
const Q4_1: DType = DType::Q4_1;
const Q5_0: DType = DType::Q5_0;
const Q5_1: DType = DType::Q5_1;
const Q2_K: DType = DType::Q2_K;
const Q3_K: DType = DType::Q3_K;
const Q4_K: DType = DType::Q4_K;
const Q5_K: DType = DType::Q5_K;
const Q6_K: DType = DType::Q6_K;
/// The K-quants, whose blocks hold 256 values.
const K_QUANTS: [DType; 5] = [Q2_K, Q3_K, Q4_K, Q5_K, Q6_K];
/// The 32-value block types besides Q8_0 and Q4_0.
const LEGACY_QUANTS: [DType; 3] = [Q4_1, Q5_0, Q5_1];

const FLOATS: [DType; 3] = [F32, F16, BF16];
const SWAP01: [usize; 4] = [1, 0, 2, 3];
const SWAP12: [usize; 4] = [0, 2, 1, 3];

fn perm_suffix(name: &str, perm: Option<[usize; 4]>) -> String {
    perm.map_or(String::new(), |p| format!(",{name}={}", fmt_ne(&p)))
}

/// Every case of the suite.
pub fn all() -> Vec<Case> {
    let mut v = Vec::new();
    binary(&mut v);
    scale(&mut v);
    unary(&mut v);
    rows(&mut v);
    argmax(&mut v);
    soft_max(&mut v);
    diag_mask_inf(&mut v);
    mul_mat(&mut v);
    get_rows(&mut v);
    cpy(&mut v);
    set_rows(&mut v);
    flash_attn(&mut v);
    cont(&mut v);
    concat(&mut v);
    rope(&mut v);
    im2col(&mut v);
    pool_2d(&mut v);
    v
}

fn binary(v: &mut Vec<Case>) {
    use tessera::BinaryOp::{Add, Div, Mul, Sub};
    const A: [usize; 4] = [10, 5, 4, 3];
    let shapes: [([usize; 4], [usize; 4]); 10] = [
        (A, A),
        (A, [1, 1, 1, 1]),
        (A, [10, 1, 1, 1]),
        (A, [1, 5, 1, 1]),
        (A, [1, 1, 4, 1]),
        (A, [1, 1, 1, 3]),
        (A, [5, 5, 2, 3]),
        (A, [2, 1, 4, 1]),
        ([33, 7, 3, 2], [33, 7, 1, 2]),
        ([129, 3, 1, 1], [129, 1, 1, 1]),
    ];
    let mut add = |op: tessera::BinaryOp,
                   ta: DType,
                   tb: DType,
                   ne_a: [usize; 4],
                   ne_b: [usize; 4],
                   perm_a: Option<[usize; 4]>,
                   perm_b: Option<[usize; 4]>| {
        let types = if ta == tb { format!("type={ta}") } else { format!("type_a={ta},type_b={tb}") };
        let name = format!(
            "{}({types},ne_a={},ne_b={}{}{})",
            op.name(),
            fmt_ne(&ne_a),
            fmt_ne(&ne_b),
            perm_suffix("perm_a", perm_a),
            perm_suffix("perm_b", perm_b)
        );
        // Divisors stay away from zero so that results stay of moderate size.
        let init_b = if op == Div { Init::AwayFromZero(0.5, 1.5) } else { Init::DEFAULT };
        v.push(Case::new(op.name(), name, move |g| {
            let a = g.input(ta, ne_a, perm_a, Init::DEFAULT)?;
            let b = g.input(tb, ne_b, perm_b, init_b)?;
            g.binary(op, a, b)
        }));
    };
    for op in [Add, Sub, Mul, Div] {
        for t in FLOATS {
            for (ne_a, ne_b) in shapes {
                add(op, t, t, ne_a, ne_b, None, None);
            }
        }
        for (ta, tb) in [(F32, F16), (F32, BF16), (F16, F32)] {
            for (ne_a, ne_b) in [shapes[0], shapes[3], shapes[8]] {
                add(op, ta, tb, ne_a, ne_b, None, None);
            }
        }
        // Non-contiguous operands.
        add(op, F32, F32, A, A, Some([2, 0, 1, 3]), None);
        add(op, F32, F32, A, [10, 5, 1, 3], None, Some(SWAP01));
        add(op, F16, F32, [33, 7, 3, 2], [33, 7, 3, 1], Some(SWAP12), Some(SWAP01));
        // Packed f32 with rows of a multiple of 4 values, b of a's shape or one row: the GPUs'
        // 16-byte kernel, over several blocks with a partial last one.
        add(op, F32, F32, [256, 33, 2, 1], [256, 33, 2, 1], None, None);
        add(op, F32, F32, [1028, 9, 2, 1], [1028, 1, 1, 1], None, None);
        if op == Add || op == Mul {
            add(op, F32, F32, [4, 7, 3, 2], [4, 1, 1, 1], None, None);
        }
    }
}

fn scale(v: &mut Vec<Case>) {
    for t in FLOATS {
        for (ne, s, perm) in
            [([10, 5, 4, 3], 0.25f32, None), ([129, 3, 1, 1], -3.5, None), ([33, 7, 3, 2], 2.0, Some(SWAP01))]
        {
            let name = format!("SCALE(type={t},ne={},scale={s}{})", fmt_ne(&ne), perm_suffix("perm", perm));
            v.push(Case::new("SCALE", name, move |g| {
                let a = g.input(t, ne, perm, Init::DEFAULT)?;
                g.scale(a, s)
            }));
        }
    }
}

fn unary(v: &mut Vec<Case>) {
    for op in UnaryOp::ALL {
        // SQRT is tested on positive inputs only.
        let init = if op == UnaryOp::Sqrt { Init::Uniform(0.01, 1.0) } else { Init::DEFAULT };
        for t in FLOATS {
            // The last: packed rows of a multiple of 8 values (16 bytes a load on GPUs).
            let mut shapes = vec![([7, 5, 3, 2], None), ([129, 3, 1, 1], None), ([64, 6, 2, 1], None)];
            if t != BF16 {
                shapes.push(([33, 7, 3, 2], Some(SWAP01)));
                shapes.push(([10, 5, 4, 3], Some([2, 3, 0, 1])));
            }
            for (ne, perm) in shapes {
                let name = format!("{}(type={t},ne={}{})", op.name(), fmt_ne(&ne), perm_suffix("perm", perm));
                v.push(Case::new(op.name(), name, move |g| {
                    let a = g.input(t, ne, perm, init)?;
                    g.unary(op, a)
                }));
            }
        }
    }
}

/// SUM_ROWS, MEAN, NORM and RMS_NORM.
fn rows(v: &mut Vec<Case>) {
    type RowOp = fn(&mut Graph, TensorId) -> Result<TensorId>;
    let ops: [(&'static str, &'static str, RowOp); 5] = [
        ("SUM_ROWS", "", |g, a| g.sum_rows(a)),
        ("MEAN", "", |g, a| g.mean(a)),
        ("NORM", ",eps=1e-5", |g, a| g.norm(a, 1e-5)),
        ("RMS_NORM", ",eps=1e-6", |g, a| g.rms_norm(a, 1e-6)),
        ("RMS_NORM", ",eps=0.1", |g, a| g.rms_norm(a, 0.1)),
    ];
    for (op, params, f) in ops {
        for t in FLOATS {
            for (ne, perm) in
                [([10, 5, 4, 3], None), ([129, 3, 1, 1], None), ([7, 33, 1, 1], None), ([64, 5, 4, 3], Some(SWAP12))]
            {
                let name = format!("{op}(type={t},ne={}{params}{})", fmt_ne(&ne), perm_suffix("perm", perm));
                v.push(Case::new(op, name, move |g| {
                    let a = g.input(t, ne, perm, Init::DEFAULT)?;
                    f(&mut g.graph, a)
                }));
            }
        }
        // Rows that are not densely packed: a transposed input.
        let name = format!("{op}(type=f32,ne=[33,7,1,1]{params},perm=[1,0,2,3])");
        v.push(Case::new(op, name, move |g| {
            let a = g.input(F32, [33, 7, 1, 1], Some(SWAP01), Init::DEFAULT)?;
            f(&mut g.graph, a)
        }));
    }
    // NORM and RMS_NORM of packed f32 (and f16) rows of a multiple of 4 values: the GPUs'
    // packed-row kernels, a warp per row up to 1024 values (rows that fill a thread's slots or
    // leave some empty), a block per row beyond.
    for (op, params, f) in &ops[2..4] {
        let (op, params, f) = (*op, *params, *f);
        for (t, ne) in PACKED_ROWS.into_iter().flat_map(|ne| [(F32, ne), (F16, ne)]) {
            let name = format!("{op}(type={t},ne={}{params})", fmt_ne(&ne));
            v.push(Case::new(op, name, move |g| {
                let a = g.leaf(t, ne)?;
                f(&mut g.graph, a)
            }));
        }
    }
    // Rows not evenly spaced (a gap after every third row), which the kernels address by
    // their indices rather than by one stride.
    v.push(Case::new("NORM", "NORM(type=f32,ne=[384,3,4,1],view_of=[384,4,4,1],eps=1e-5)", |g| {
        let a = g.leaf(F32, [384, 4, 4, 1])?;
        let nb = g.tensor(a)?.nb();
        let rows = g.view(a, [384, 3, 4, 1], [nb[1], nb[2], nb[3]], 0)?;
        g.norm(rows, 1e-5)
    }));
    // Values far from zero: the variance is taken around the mean.
    v.push(Case::new("NORM", "NORM(type=f32,ne=[384,6,1,1],eps=1e-5,init=[10,12))", |g| {
        let a = g.leaf_init(F32, [384, 6, 1, 1], Init::Uniform(10.0, 12.0))?;
        g.norm(a, 1e-5)
    }));
}

/// Packed f32 rows for the GPUs' packed-row kernels: lengths on both sides of each kernel's
/// limit (a warp per row up to 1024 values, a block per row up to 8192).
const PACKED_ROWS: [[usize; 4]; 9] = [
    [4, 7, 3, 2],
    [128, 9, 2, 1],
    [260, 4, 3, 1],
    [384, 5, 1, 1],
    [1000, 3, 2, 1],
    [1024, 3, 1, 1],
    [1028, 3, 2, 1],
    [4096, 2, 1, 1],
    [8192, 2, 1, 1],
];

fn argmax(v: &mut Vec<Case>) {
    for t in FLOATS {
        for (n, m, transposed) in [(7, 5, false), (33, 3, false), (129, 3, false), (64, 4, false), (33, 9, true)] {
            let name = format!("ARGMAX(type={t},ne=[{n},{m},1,1]{})", if transposed { ",perm=[1,0,2,3]" } else { "" });
            v.push(Case::new("ARGMAX", name, move |g| {
                let perm = transposed.then_some(SWAP01);
                let a = g.input(t, [n, m, 1, 1], perm, Init::Distinct)?;
                g.argmax(a)
            }));
        }
    }
}

fn soft_max(v: &mut Vec<Case>) {
    struct Sm {
        t: DType,
        ne: [usize; 4],
        mask: Option<(DType, [usize; 4], Init)>,
        scale: f32,
        perm: Option<[usize; 4]>,
    }
    let mut list = Vec::new();
    for t in FLOATS {
        for ne in [[16, 5, 4, 3], [129, 3, 1, 1], [7, 1, 1, 1], [33, 7, 2, 1]] {
            list.push(Sm { t, ne, mask: None, scale: 1.0, perm: None });
        }
        list.push(Sm { t, ne: [16, 5, 4, 3], mask: None, scale: 0.125, perm: None });
    }
    let ne = [16, 5, 4, 3];
    for mt in [F32, F16] {
        // Mask rows repeated over dimension 1 too ([16, 1, ...]: one key mask per matrix).
        for mne in [[16, 5, 1, 1], [16, 5, 4, 1], [16, 5, 1, 3], [16, 5, 4, 3], [16, 8, 2, 3], [16, 1, 1, 3]] {
            list.push(Sm { t: F32, ne, mask: Some((mt, mne, Init::DEFAULT)), scale: 1.0, perm: None });
        }
        list.push(Sm { t: F32, ne, mask: Some((mt, [16, 5, 4, 1], Init::DEFAULT)), scale: 0.5, perm: None });
        list.push(Sm { t: F32, ne, mask: Some((mt, [16, 5, 1, 1], Init::MaskInf)), scale: 0.5, perm: None });
        list.push(Sm {
            t: F32,
            ne: [16, 6, 4, 3],
            mask: Some((mt, [16, 2, 4, 1], Init::MaskInf)),
            scale: 0.5,
            perm: None,
        });
        list.push(Sm {
            t: F16,
            ne: [33, 7, 2, 1],
            mask: Some((mt, [33, 9, 1, 1], Init::DEFAULT)),
            scale: 1.0,
            perm: None,
        });
        list.push(Sm {
            t: BF16,
            ne: [33, 7, 2, 1],
            mask: Some((mt, [33, 7, 2, 1], Init::DEFAULT)),
            scale: 2.0,
            perm: None,
        });
    }
    // Packed f32 rows: the GPUs' packed-row kernels, with masks of both types broadcast over
    // dimensions 2 and 3, and masks that leave whole rows -inf.
    for ne in PACKED_ROWS {
        list.push(Sm { t: F32, ne, mask: None, scale: 1.0, perm: None });
    }
    let masked = |ne, mt, mne, init, scale| Sm { t: F32, ne, mask: Some((mt, mne, init)), scale, perm: None };
    list.push(masked([128, 9, 4, 1], F16, [128, 9, 1, 1], Init::DEFAULT, 0.125));
    list.push(masked([128, 9, 4, 1], F32, [128, 9, 1, 1], Init::DEFAULT, 0.125));
    list.push(masked([384, 5, 2, 3], F32, [384, 5, 1, 3], Init::DEFAULT, 0.5));
    list.push(masked([1000, 3, 2, 1], F16, [1000, 4, 1, 1], Init::DEFAULT, 1.0));
    list.push(masked([1028, 3, 2, 1], F16, [1028, 3, 1, 1], Init::DEFAULT, 0.5));
    list.push(masked([4096, 2, 2, 1], F32, [4096, 2, 1, 1], Init::DEFAULT, 0.25));
    list.push(masked([128, 6, 2, 1], F32, [128, 6, 1, 1], Init::MaskInf, 1.0));
    list.push(masked([4, 6, 2, 1], F32, [4, 6, 1, 1], Init::MaskInfRows, 1.0));
    list.push(masked([128, 6, 2, 1], F16, [128, 6, 1, 1], Init::MaskInfRows, 1.0));
    list.push(masked([2048, 3, 2, 1], F32, [2048, 3, 1, 1], Init::MaskInfRows, 2.0));
    list.push(Sm { t: F32, ne: [16, 5, 4, 3], mask: None, scale: 1.0, perm: Some(SWAP12) });
    list.push(Sm {
        t: F32,
        ne: [16, 5, 4, 3],
        mask: Some((F32, [16, 5, 1, 1], Init::DEFAULT)),
        scale: 1.0,
        perm: Some(SWAP01),
    });
    // A mask whose rows are the first 128 values of rows of 130 (f16: 260 bytes apart, off the
    // 8-byte boundaries the GPUs' packed-row kernels read as vectors).
    for mt in [F32, F16] {
        let name = format!("SOFT_MAX(type=f32,ne=[128,6,2,1],mask={mt},ne_m=[128,6,1,1],rows_of_130,scale=0.5)");
        v.push(Case::new("SOFT_MAX", name, move |g| {
            let a = g.input(F32, [128, 6, 2, 1], None, Init::DEFAULT)?;
            let wide = g.leaf(mt, [130, 6, 1, 1])?;
            let nb = g.tensor(wide)?.nb();
            let m = g.view(wide, [128, 6, 1, 1], [nb[1], nb[2], nb[3]], 0)?;
            g.soft_max(a, Some(m), 0.5)
        }));
    }
    for Sm { t, ne, mask, scale, perm } in list {
        let mask_name = match mask {
            None => String::new(),
            Some((mt, mne, init)) => {
                let inf = match init {
                    Init::MaskInf => ",inf",
                    Init::MaskInfRows => ",inf_rows",
                    _ => "",
                };
                format!(",mask={mt},ne_m={}{inf}", fmt_ne(&mne))
            }
        };
        let name =
            format!("SOFT_MAX(type={t},ne={}{mask_name},scale={scale}{})", fmt_ne(&ne), perm_suffix("perm", perm));
        v.push(Case::new("SOFT_MAX", name, move |g| {
            let a = g.input(t, ne, perm, Init::DEFAULT)?;
            let m = match mask {
                None => None,
                Some((mt, mne, init)) => Some(g.leaf_init(mt, mne, init)?),
            };
            g.soft_max(a, m, scale)
        }));
    }
}

fn diag_mask_inf(v: &mut Vec<Case>) {
    for t in FLOATS {
        for (ne, n_past) in [([10, 10, 3, 1], 0), ([10, 7, 2, 2], 3), ([7, 10, 1, 1], 0), ([33, 5, 1, 1], 28)] {
            let name = format!("DIAG_MASK_INF(type={t},ne={},n_past={n_past})", fmt_ne(&ne));
            v.push(Case::new("DIAG_MASK_INF", name, move |g| {
                let a = g.leaf(t, ne)?;
                g.diag_mask_inf(a, n_past)
            }));
        }
    }
}

fn mul_mat(v: &mut Vec<Case>) {
    /// How the operands are laid out.
    #[derive(Clone, Copy, PartialEq)]
    enum Layout {
        Plain,
        /// `b` is a transposed `[n, k]` leaf.
        TransB,
        /// `b` is a `[k, e2, n, e3]` leaf with dims 1 and 2 swapped.
        PermB,
        /// `a` is a `[k, d2, m, d3]` leaf with dims 1 and 2 swapped (rows stay contiguous).
        PermA,
        /// `a` and `b` are the first `k` values of rows `PAD` values longer.
        Padded,
    }
    /// How much longer the rows of the `Padded` layout's leafs are.
    const PAD: usize = 3;
    for ta in [F32, F16, BF16, Q8_0, Q4_0].into_iter().chain(LEGACY_QUANTS).chain(K_QUANTS) {
        let sizes: &[(usize, usize, usize)] = if K_QUANTS.contains(&ta) {
            &[(7, 1, 256), (17, 9, 512), (5, 3, 256), (33, 1, 768), (16, 16, 256), (67, 33, 512)]
        } else if ta.is_quantized() {
            &[(7, 1, 32), (17, 9, 64), (5, 3, 256), (33, 1, 128), (16, 16, 32), (67, 33, 256)]
        } else {
            &[(7, 1, 33), (17, 9, 33), (5, 3, 129), (1, 1, 7), (16, 8, 64), (33, 1, 9), (67, 33, 257)]
        };
        let k = sizes[1].2;
        // (m, n, k, a's dims 2 and 3, repeats of them in b, layout)
        type MulMatCase = (usize, usize, usize, [usize; 2], [usize; 2], Layout);
        let mut list: Vec<MulMatCase> =
            sizes.iter().map(|&(m, n, k)| (m, n, k, [1, 1], [1, 1], Layout::Plain)).collect();
        list.push((9, 5, k, [2, 1], [2, 2], Layout::Plain));
        list.push((9, 1, k, [1, 3], [2, 1], Layout::Plain));
        list.push((7, 3, k, [1, 1], [2, 3], Layout::Plain));
        list.push((7, 5, k, [2, 3], [1, 1], Layout::Plain));
        if !ta.is_quantized() {
            list.push((7, 5, k, [1, 1], [1, 1], Layout::TransB));
            // Rows on 16-byte boundaries: the GPUs' float matrix-vector kernels.
            list.push((67, 1, 1024, [1, 1], [1, 1], Layout::Plain));
            list.push((33, 7, 256, [2, 1], [2, 2], Layout::Plain));
            list.push((19, 4, 256, [2, 1], [2, 2], Layout::PermA));
            // Rows on 16-byte boundaries (1024 values long) whose last vector is partly past k:
            // the float matrix-vector kernels' last values, one column and several.
            list.push((67, 1, 1024 - PAD, [1, 1], [1, 1], Layout::Padded));
            list.push((9, 3, 1024 - PAD, [2, 1], [1, 2], Layout::Padded));
            // K a multiple of 128 with 4 to 8 columns: the GPUs' tensor-core matrix-vector
            // products of 16-bit weights, with a partial last group of rows.
            list.push((67, 8, 384, [1, 1], [1, 1], Layout::Plain));
            list.push((67, 4, 384, [1, 1], [1, 1], Layout::Plain));
        }
        if ta.is_quantized() {
            // K a multiple of 256 with rows on 16-byte boundaries and 5 to 8 columns: the GPUs'
            // tensor-core matrix-vector products (q8_0, q4_0), with a partial last group of
            // rows, broadcasting and strided rows.
            list.push((67, 8, 2048, [1, 1], [1, 1], Layout::Plain));
            list.push((33, 5, 512, [2, 1], [2, 2], Layout::Plain));
            list.push((19, 6, 256, [2, 1], [2, 2], Layout::PermA));
            // The same with one column and long rows: the GPUs' q8_0 products over rows read
            // as 16-byte pieces (K a multiple of 256, rows of 512 pieces and more).
            list.push((67, 1, 8192, [1, 1], [1, 1], Layout::Plain));
            list.push((33, 1, 8192, [2, 1], [2, 2], Layout::Plain));
            list.push((19, 1, 8448, [2, 1], [2, 2], Layout::PermA));
        }
        list.push((7, 5, k, [2, 3], [1, 1], Layout::PermB));
        list.push((7, 1, k, [1, 1], [2, 3], Layout::PermB));
        list.push((7, 5, k, [2, 1], [2, 2], Layout::PermA));
        // Past one cache block of the fast CPU kernels in every direction (k, rows, columns),
        // and a matrix-vector product over many blocks.
        let k_long = if K_QUANTS.contains(&ta) {
            2304
        } else if ta.is_quantized() {
            2112
        } else {
            1031
        };
        list.push((400, 29, k_long, [1, 1], [1, 1], Layout::Plain));
        list.push((67, 8, k_long, [1, 1], [1, 1], Layout::Plain));
        if !ta.is_quantized() {
            // Aligned rows with k a multiple of 8 and more than 32 columns: the GPUs' tiled and
            // tensor-core products, with partial blocks on every edge, several steps of k and a
            // partial last one, and a repeated over b's dims 2 and 3.
            list.push((67, 33, 256, [1, 1], [1, 1], Layout::Plain));
            list.push((150, 130, 264, [2, 1], [1, 2], Layout::Plain));
            list.push((520, 300, 136, [1, 1], [1, 1], Layout::Plain));
            // 2 x 2 blocks of 256 x 128 over 64 matrices of b repeating one a: enough
            // workgroups for the wide blocks of Vulkan's workgroup-scope shader, partial on both
            // edges.
            list.push((300, 129, 32, [1, 1], [8, 8], Layout::Plain));
        }
        for (m, n, k, bs, nr, layout) in list {
            let e = [bs[0] * nr[0], bs[1] * nr[1]];
            let extra = match layout {
                Layout::Plain => "",
                Layout::TransB => ",trans_b",
                Layout::PermB => ",perm_b=[0,2,1,3]",
                Layout::PermA => ",perm_a=[0,2,1,3]",
                Layout::Padded => ",rows_of_k+3",
            };
            let name = format!(
                "MUL_MAT(type_a={ta},type_b=f32,m={m},n={n},k={k},bs={},nr={}{extra})",
                fmt_ne(&bs),
                fmt_ne(&nr)
            );
            let case = Case::new("MUL_MAT", name, move |g| {
                if layout == Layout::Padded {
                    let a = g.leaf(ta, [k + PAD, m, bs[0], bs[1]])?;
                    let b = g.leaf(F32, [k + PAD, n, e[0], e[1]])?;
                    let (na, nb) = (g.tensor(a)?.nb(), g.tensor(b)?.nb());
                    let a = g.view(a, [k, m, bs[0], bs[1]], [na[1], na[2], na[3]], 0)?;
                    let b = g.view(b, [k, n, e[0], e[1]], [nb[1], nb[2], nb[3]], 0)?;
                    return g.mul_mat(a, b);
                }
                let a_perm = (layout == Layout::PermA).then_some(SWAP12);
                let a = g.input(ta, [k, m, bs[0], bs[1]], a_perm, Init::DEFAULT)?;
                let b_perm = match layout {
                    Layout::TransB => Some(SWAP01),
                    Layout::PermB => Some(SWAP12),
                    _ => None,
                };
                let b = g.input(F32, [k, n, e[0], e[1]], b_perm, Init::DEFAULT)?;
                g.mul_mat(a, b)
            });
            v.push(case.with_max_nmse(5e-4));
        }
    }
}

fn get_rows(v: &mut Vec<Case>) {
    for t in [F32, F16, BF16, I32, Q8_0, Q4_0].into_iter().chain(LEGACY_QUANTS).chain(K_QUANTS) {
        let n = if t.is_quantized() { 2 * t.block_len() } else { 33 };
        let one_block = t.block_len().max(32);
        for (n, r, m, d2, d3) in [(n, 5, 3, 1, 1), (n, 7, 9, 3, 1), (n, 4, 2, 2, 3), (one_block, 1, 5, 1, 1)] {
            let name = format!("GET_ROWS(type={t},n={n},r={r},m={m},ne_b=[{m},{d2},{d3},1])");
            v.push(Case::new("GET_ROWS", name, move |g| {
                let a = g.leaf(t, [n, r, d2, d3])?;
                let b = g.leaf_init(I32, [m, d2, d3, 1], Init::Ints(0, r as i32))?;
                g.get_rows(a, b)
            }));
        }
    }
    // Packed float rows of a multiple of 8 values (8 values a thread on GPUs), across planes.
    for t in FLOATS {
        for (n, r, m, d2, d3) in [(64, 9, 40, 2, 3), (8, 5, 7, 1, 1)] {
            let name = format!("GET_ROWS(type={t},n={n},r={r},m={m},ne_b=[{m},{d2},{d3},1],x8)");
            v.push(Case::new("GET_ROWS", name, move |g| {
                let a = g.leaf(t, [n, r, d2, d3])?;
                let b = g.leaf_init(I32, [m, d2, d3, 1], Init::Ints(0, r as i32))?;
                g.get_rows(a, b)
            }));
        }
    }
    // Rows of a tensor whose rows are strided (a permuted view keeping dim 0).
    v.push(Case::new("GET_ROWS", "GET_ROWS(type=f32,n=10,r=5,m=4,ne_b=[4,3,1,1],perm_a=[0,2,1,3])", |g| {
        let a = g.input(F32, [10, 5, 3, 1], Some(SWAP12), Init::DEFAULT)?;
        let b = g.leaf_init(I32, [4, 3, 1, 1], Init::Ints(0, 5))?;
        g.get_rows(a, b)
    }));
}

fn set_rows(v: &mut Vec<Case>) {
    for t in FLOATS {
        // (n, r, m, d2, d3): some rows of a matrix, all rows of planes, and one-value rows (how
        // a transposed KV cache takes one column per token).
        // Rows named in runs of consecutive rows as well (how a prompt's values fill the
        // columns of a transposed cache).
        let shapes = [(64, 10, 4, 1, 1), (33, 7, 7, 3, 2), (1, 96, 40, 1, 1), (256, 300, 3, 1, 1)];
        let runs = [(1, 96, 60, 1, 1, true), (8, 40, 30, 2, 1, true)];
        for (n, r, m, d2, d3, in_runs) in
            shapes.into_iter().map(|(n, r, m, d2, d3)| (n, r, m, d2, d3, false)).chain(runs)
        {
            let (init, order) =
                if in_runs { (Init::IntRuns(r as i32), ",runs") } else { (Init::DistinctInts(r as i32), "") };
            let name = format!("SET_ROWS(type={t},n={n},r={r},m={m},ne_b=[{m},{d2},{d3},1]{order})");
            v.push(Case::new("SET_ROWS", name, move |g| {
                let dst = g.leaf(t, [n, r, d2, d3])?;
                let values = g.leaf(F32, [n, m, d2, d3])?;
                let rows = g.leaf_init(I32, [m, d2, d3, 1], init)?;
                g.set_rows(dst, values, rows)
            }));
        }
        // Into a view (every other row of a larger tensor), from permuted values.
        let name = format!("SET_ROWS(type={t},n=16,r=6,m=3,dst=rows_of_[16,12,2,1],perm_b=[0,2,1,3])");
        v.push(Case::new("SET_ROWS", name, move |g| {
            let big = g.leaf(t, [16, 12, 2, 1])?;
            let nb = g.tensor(big)?.nb();
            let dst = g.view(big, [16, 6, 2, 1], [2 * nb[1], nb[2], nb[3]], nb[1])?;
            let values = g.input(F32, [16, 3, 2, 1], Some(SWAP12), Init::DEFAULT)?;
            let rows = g.leaf_init(I32, [3, 2, 1, 1], Init::DistinctInts(6))?;
            g.set_rows(dst, values, rows)
        }));
    }
}

fn flash_attn(v: &mut Vec<Case>) {
    struct Fa {
        /// Head sizes of keys and values, queries, key positions, query and key heads, batches.
        d: usize,
        dv: usize,
        n: usize,
        kv: usize,
        hq: usize,
        hk: usize,
        b: usize,
        mask: Option<(DType, [usize; 4], Init)>,
    }
    let list = || {
        let fa = |d, dv, n, kv, hq, hk, b, mask| Fa { d, dv, n, kv, hq, hk, b, mask };
        [
            // One decoded token over a window of a cache, 4 query heads per key head.
            fa(64, 64, 1, 256, 8, 2, 1, Some((F32, [256, 1, 1, 1], Init::MaskInf))),
            // A token over a long window (keys split over several blocks), one head seeing nothing.
            fa(64, 64, 1, 700, 2, 1, 1, Some((F32, [700, 1, 2, 1], Init::MaskInfRows))),
            // A prompt with fully masked queries, an odd number of keys.
            fa(64, 64, 7, 300, 4, 4, 1, Some((F32, [300, 7, 1, 1], Init::MaskInfRows))),
            // Sequences of 32-value heads with one key mask per sequence (MiniLM's shape).
            fa(32, 32, 33, 48, 3, 1, 2, Some((F16, [48, 1, 1, 2], Init::MaskInf))),
            fa(128, 128, 5, 64, 2, 1, 1, None),
            // Odd sizes, values shorter than keys, a mask per head.
            fa(40, 24, 3, 17, 2, 2, 1, Some((F16, [17, 3, 2, 1], Init::DEFAULT))),
            // Decoded tokens with heads of 32, 128 and odd sizes (the one-row kernels).
            fa(32, 32, 1, 48, 3, 1, 2, Some((F16, [48, 1, 1, 2], Init::MaskInf))),
            fa(128, 128, 1, 300, 4, 2, 1, None),
            fa(40, 24, 1, 17, 2, 2, 1, Some((F16, [17, 1, 2, 1], Init::DEFAULT))),
            // A decoded token before any key: zeros.
            fa(64, 64, 1, 0, 2, 1, 1, None),
            // Prompts of heads of 32, 64 and 128 (the tensor-core kernels): several blocks of
            // query rows, key tiles cut short, fully masked rows, no mask, a causal mask whose
            // last tiles no query of a block sees.
            fa(64, 64, 40, 300, 4, 2, 1, Some((F32, [300, 40, 1, 1], Init::MaskInfRows))),
            fa(128, 128, 150, 100, 2, 1, 1, Some((F16, [100, 150, 1, 1], Init::MaskInf))),
            fa(32, 32, 20, 70, 2, 2, 3, None),
            fa(64, 64, 150, 400, 2, 1, 1, Some((F32, [400, 150, 1, 1], Init::Causal))),
            fa(32, 32, 128, 128, 4, 4, 3, Some((F32, [128, 1, 1, 3], Init::MaskInf))),
            // Short sequences of 32-value heads (all their keys held at once) with a mask row
            // per query: causal, and with fully masked rows.
            fa(32, 32, 70, 100, 2, 1, 1, Some((F16, [100, 70, 1, 1], Init::Causal))),
            fa(32, 32, 40, 128, 2, 2, 1, Some((F32, [128, 40, 1, 1], Init::MaskInfRows))),
            // Prompts with no mask over whole key tiles and one cut short, streamed: tiles of
            // biases that are all 0, which the f16 kernels scale inside the exponent.
            fa(32, 32, 20, 200, 2, 1, 1, None),
            fa(64, 64, 40, 200, 2, 1, 1, None),
            fa(128, 128, 24, 100, 2, 2, 1, None),
        ]
    };
    // Queries of f32, and of f16 (as an encoder's projections write them in reduced precision).
    for (t, qt) in FLOATS.into_iter().flat_map(|t| [(t, F32), (t, F16)]) {
        let tq = if qt == F16 { "type_q=f16," } else { "" };
        for f in list() {
            let Fa { d, dv, n, kv, hq, hk, b, mask } = f;
            let m = mask.map_or(String::new(), |(mt, ne, _)| format!(",mask={mt}{}", fmt_ne(&ne)));
            let params = format!("{tq}type_kv={t},d={d},dv={dv},n={n},kv={kv},hq={hq},hk={hk},b={b}{m}");
            let build = move |g: &mut CaseGraph, precision: Precision| -> Result<TensorId> {
                // Queries as the models make them: `[d, hq, n]` seen as `[d, n, hq]`.
                let q = g.input(qt, [d, n, hq, b], Some(SWAP12), Init::DEFAULT)?;
                let k = g.leaf(t, [d, kv, hk, b])?;
                let vv = g.leaf(t, [dv, kv, hk, b])?;
                let m = mask.map(|(mt, ne, init)| g.leaf_init(mt, ne, init)).transpose()?;
                let out = g.flash_attn(q, k, vv, m, 1.0 / (d as f32).sqrt())?;
                g.set_flash_attn_precision(out, precision)?;
                Ok(out)
            };
            v.push(Case::new("FLASH_ATTN", format!("FLASH_ATTN({params})"), move |g| build(g, Precision::Full)));
            // Prompts again in reduced precision (half-precision products), within
            // test-backend-ops' bound for half-precision attention.
            if n >= 16 {
                let name = format!("FLASH_ATTN({params},prec=reduced)");
                v.push(Case::new("FLASH_ATTN", name, move |g| build(g, Precision::Reduced)).with_max_nmse(5e-4));
            }
        }
        // Queries, keys and values as an encoder's projections hold them, `[d, heads, tokens]`
        // seen as `[d, tokens, heads]` (the BERT graph's layout), in both precisions.
        for precision in [Precision::Full, Precision::Reduced] {
            let prec = if precision == Precision::Reduced { ",prec=reduced" } else { "" };
            let name = format!("FLASH_ATTN({tq}type_kv={t},d=32,n=96,kv=96,hq=4,hk=4,b=2,heads_view{prec})");
            v.push(
                Case::new("FLASH_ATTN", name, move |g| {
                    let q = g.input(qt, [32, 96, 4, 2], Some(SWAP12), Init::DEFAULT)?;
                    let k = g.input(t, [32, 96, 4, 2], Some(SWAP12), Init::DEFAULT)?;
                    let vv = g.input(t, [32, 96, 4, 2], Some(SWAP12), Init::DEFAULT)?;
                    let m = g.leaf_init(F32, [96, 1, 1, 2], Init::MaskInf)?;
                    let out = g.flash_attn(q, k, vv, Some(m), 1.0 / 32f32.sqrt())?;
                    g.set_flash_attn_precision(out, precision)?;
                    Ok(out)
                })
                .with_max_nmse(if precision == Precision::Reduced { 5e-4 } else { 1e-7 }),
            );
        }
        // A negative scale (each row's soft-max of its negated scores, so that its largest
        // weight goes to its smallest score), without a mask, over keys held at once and
        // streamed: the scaled scores of a tile span tens of powers of two, so that weights
        // taken against the largest score instead of the largest scaled one overflow f16.
        for (kv, precision) in [100, 200].into_iter().flat_map(|kv| [(kv, Precision::Full), (kv, Precision::Reduced)]) {
            let prec = if precision == Precision::Reduced { ",prec=reduced" } else { "" };
            let name = format!("FLASH_ATTN({tq}type_kv={t},d=32,n=40,kv={kv},hq=2,hk=1,b=2,scale=-4{prec})");
            v.push(
                Case::new("FLASH_ATTN", name, move |g| {
                    let q = g.input(qt, [32, 40, 2, 2], Some(SWAP12), Init::DEFAULT)?;
                    let k = g.leaf(t, [32, kv, 1, 2])?;
                    let vv = g.leaf(t, [32, kv, 1, 2])?;
                    let out = g.flash_attn(q, k, vv, None, -4.0)?;
                    g.set_flash_attn_precision(out, precision)?;
                    Ok(out)
                })
                .with_max_nmse(if precision == Precision::Reduced { 5e-4 } else { 1e-7 }),
            );
        }
        if qt == F16 {
            continue;
        }
        // Keys and values whose rows start off 16-byte boundaries (68-byte rows from the second
        // value of each): the f16 kernel, which copies 16 bytes at a time, leaves them to the
        // TF32 one.
        if t == F16 {
            let name = "FLASH_ATTN(type_kv=f16,d=32,n=64,kv=80,hq=2,hk=2,b=1,rows_off_16_bytes,prec=reduced)";
            v.push(
                Case::new("FLASH_ATTN", name, move |g| {
                    let q = g.input(F32, [32, 64, 2, 1], Some(SWAP12), Init::DEFAULT)?;
                    let unaligned = |g: &mut CaseGraph| -> Result<TensorId> {
                        let wide = g.leaf(t, [34, 80, 2, 1])?;
                        let nb = g.tensor(wide)?.nb();
                        g.view(wide, [32, 80, 2, 1], [nb[1], nb[2], nb[3]], nb[0])
                    };
                    let (k, vv) = (unaligned(g)?, unaligned(g)?);
                    let out = g.flash_attn(q, k, vv, None, 1.0 / 32f32.sqrt())?;
                    g.set_flash_attn_precision(out, Precision::Reduced)?;
                    Ok(out)
                })
                .with_max_nmse(5e-4),
            );
        }
        // Keys and values read as a window of a cache `[d, heads, context]`.
        let name = format!("FLASH_ATTN(type_kv={t},d=64,n=2,kv=96,hq=4,hk=2,cache_window=[64,2,200])");
        v.push(Case::new("FLASH_ATTN", name, move |g| {
            let q = g.input(F32, [64, 2, 4, 1], Some(SWAP12), Init::DEFAULT)?;
            let window = |g: &mut CaseGraph| -> Result<TensorId> {
                let cache = g.leaf(t, [64, 2, 200, 1])?;
                let nb = g.tensor(cache)?.nb();
                g.view(cache, [64, 96, 2, 1], [nb[2], nb[1], nb[3]], 0)
            };
            let (k, vv) = (window(g)?, window(g)?);
            let m = g.leaf_init(F32, [96, 2, 1, 1], Init::MaskInf)?;
            g.flash_attn(q, k, vv, Some(m), 0.125)
        }));
    }
}

fn cpy(v: &mut Vec<Case>) {
    let types = [F32, F16, BF16, Q8_0, Q4_0];
    for ts in types {
        for td in types {
            let name = format!("CPY(type_src={ts},type_dst={td},ne=[64,3,2,1])");
            v.push(Case::new("CPY", name, move |g| {
                let a = g.leaf(ts, [64, 3, 2, 1])?;
                let b = g.leaf(td, [64, 3, 2, 1])?;
                g.cpy(a, b)
            }));
            // A destination of another shape: values are copied in row-major order.
            let name = format!("CPY(type_src={ts},type_dst={td},ne_src=[32,4,3,1],ne_dst=[64,6,1,1])");
            v.push(Case::new("CPY", name, move |g| {
                let a = g.leaf(ts, [32, 4, 3, 1])?;
                let b = g.leaf(td, [64, 6, 1, 1])?;
                g.cpy(a, b)
            }));
        }
        // Into a non-contiguous view: every other row of a larger tensor.
        let name = format!("CPY(type_src={ts},type_dst={ts},ne=[64,3,2,1],dst=rows_of_[64,6,2,1])");
        v.push(Case::new("CPY", name, move |g| {
            let a = g.leaf(ts, [64, 3, 2, 1])?;
            let big = g.leaf(ts, [64, 6, 2, 1])?;
            let nb = g.tensor(big)?.nb();
            let b = g.view(big, [64, 3, 2, 1], [2 * nb[1], nb[2], nb[3]], nb[1])?;
            g.cpy(a, b)
        }));
    }
    // Into a transposed view, and from transposed or permuted sources.
    for (ts, td) in [(F32, F32), (F32, F16), (F16, BF16), (BF16, F32)] {
        let name = format!("CPY(type_src={ts},type_dst={td},ne=[33,7,3,1],perm_dst=[1,0,2,3])");
        v.push(Case::new("CPY", name, move |g| {
            let a = g.leaf(ts, [33, 7, 3, 1])?;
            let b = g.input(td, [33, 7, 3, 1], Some(SWAP01), Init::DEFAULT)?;
            g.cpy(a, b)
        }));
        let name = format!("CPY(type_src={ts},type_dst={td},ne=[33,7,3,2],perm_src=[2,0,1,3])");
        v.push(Case::new("CPY", name, move |g| {
            let a = g.input(ts, [33, 7, 3, 2], Some([2, 0, 1, 3]), Init::DEFAULT)?;
            let b = g.leaf(td, [33, 7, 3, 2])?;
            g.cpy(a, b)
        }));
    }
    for td in [Q8_0, Q4_0] {
        let name = format!("CPY(type_src=f32,type_dst={td},ne=[64,3,2,1],perm_src=[0,2,1,3])");
        v.push(Case::new("CPY", name, move |g| {
            let a = g.input(F32, [64, 3, 2, 1], Some(SWAP12), Init::DEFAULT)?;
            let b = g.leaf(td, [64, 3, 2, 1])?;
            g.cpy(a, b)
        }));
    }
    // I32 to I32.
    v.push(Case::new("CPY", "CPY(type_src=i32,type_dst=i32,ne=[10,5,4,3])", |g| {
        let a = g.leaf(I32, [10, 5, 4, 3])?;
        let b = g.leaf(I32, [10, 5, 4, 3])?;
        g.cpy(a, b)
    }));
    v.push(Case::new("CPY", "CPY(type_src=i32,type_dst=i32,ne=[10,5,4,3],perm_src=[1,0,2,3])", |g| {
        let a = g.input(I32, [10, 5, 4, 3], Some(SWAP01), Init::DEFAULT)?;
        let b = g.leaf(I32, [10, 5, 4, 3])?;
        g.cpy(a, b)
    }));
    // The K-quants and the other 4- and 5-bit types from and to f32, and as casts. (Not into
    // their own type: the reference requantizes what it dequantized, which their quantizers do
    // not reproduce exactly, where a copy keeps the bytes.)
    for t in K_QUANTS.into_iter().chain(LEGACY_QUANTS) {
        for (ts, td) in [(F32, t), (t, F32)] {
            let name = format!("CPY(type_src={ts},type_dst={td},ne=[512,3,2,1])");
            v.push(Case::new("CPY", name, move |g| {
                let a = g.leaf(ts, [512, 3, 2, 1])?;
                let b = g.leaf(td, [512, 3, 2, 1])?;
                g.cpy(a, b)
            }));
        }
        let name = format!("CPY(type_src=f32,type_dst={t},ne=[256,5,3,1],cast)");
        v.push(Case::new("CPY", name, move |g| {
            let a = g.leaf(F32, [256, 5, 3, 1])?;
            g.cast(a, t)
        }));
    }
    // Casts: CPY into a new tensor.
    for (ts, td) in [(F32, F16), (F16, F32), (F32, BF16), (F32, Q8_0), (Q4_0, F32)] {
        let name = format!("CPY(type_src={ts},type_dst={td},ne=[64,5,3,1],cast)");
        v.push(Case::new("CPY", name, move |g| {
            let a = g.leaf(ts, [64, 5, 3, 1])?;
            g.cast(a, td)
        }));
    }
}

fn cont(v: &mut Vec<Case>) {
    for t in [F32, F16, BF16, I32] {
        for (ne, perm) in [
            ([7, 5, 3, 2], SWAP01),
            ([33, 3, 4, 1], [2, 0, 1, 3]),
            ([10, 5, 4, 3], SWAP12),
            ([6, 5, 4, 3], [3, 2, 1, 0]),
            // Transposed, several tiles of 32 x 32 with partial ones at both edges.
            ([100, 70, 3, 1], SWAP01),
        ] {
            let name = format!("CONT(type={t},ne={},perm={})", fmt_ne(&ne), fmt_ne(&perm));
            v.push(Case::new("CONT", name, move |g| {
                let a = g.input(t, ne, Some(perm), Init::DEFAULT)?;
                g.cont(a)
            }));
        }
    }
    for t in [Q8_0, Q4_0] {
        let name = format!("CONT(type={t},ne=[64,3,4,1],perm=[0,2,1,3])");
        v.push(Case::new("CONT", name, move |g| {
            let a = g.input(t, [64, 3, 4, 1], Some(SWAP12), Init::DEFAULT)?;
            g.cont(a)
        }));
    }
    v.push(Case::new("CONT", "CONT(type=f32,ne=[10,5,4,3])", |g| {
        let a = g.leaf(F32, [10, 5, 4, 3])?;
        g.cont(a)
    }));
}

fn concat(v: &mut Vec<Case>) {
    for t in [F32, I32, F16, BF16] {
        let dims: &[usize] = if matches!(t, F32 | I32) { &[0, 1, 2, 3] } else { &[0, 2] };
        for &dim in dims {
            let ne_a = [10, 5, 4, 3];
            let mut ne_b = ne_a;
            ne_b[dim] = [7, 3, 1, 2][dim];
            let name = format!("CONCAT(type={t},ne_a={},ne_b={},dim={dim})", fmt_ne(&ne_a), fmt_ne(&ne_b));
            v.push(Case::new("CONCAT", name, move |g| {
                let a = g.leaf(t, ne_a)?;
                let b = g.leaf(t, ne_b)?;
                g.concat(a, b, dim)
            }));
        }
    }
    // Non-contiguous operands.
    for dim in [0, 2] {
        let ne_a = [10, 5, 4, 3];
        let mut ne_b = ne_a;
        ne_b[dim] = 3;
        let name = format!(
            "CONCAT(type=f32,ne_a={},ne_b={},dim={dim},perm_a=[1,0,2,3],perm_b=[0,2,1,3])",
            fmt_ne(&ne_a),
            fmt_ne(&ne_b)
        );
        v.push(Case::new("CONCAT", name, move |g| {
            let a = g.input(F32, ne_a, Some(SWAP01), Init::DEFAULT)?;
            let b = g.input(F32, ne_b, Some(SWAP12), Init::DEFAULT)?;
            g.concat(a, b, dim)
        }));
    }
}

fn rope(v: &mut Vec<Case>) {
    for mode in [RopeMode::Normal, RopeMode::Neox] {
        let mode_name = match mode {
            RopeMode::Normal => 0,
            RopeMode::Neox => 2,
        };
        let mut list = Vec::new();
        for t in FLOATS {
            list.push((t, [64, 4, 7, 1], 64, 1.0f32, None));
            list.push((t, [64, 4, 7, 1], 32, 1.0, None));
            list.push((t, [10, 3, 5, 2], 6, 1.0, None));
        }
        list.push((F32, [128, 2, 9, 1], 128, 0.5, None));
        list.push((F16, [32, 3, 4, 2], 20, 0.25, None));
        list.push((F32, [64, 4, 7, 1], 64, 1.0, Some(SWAP12)));
        list.push((F32, [32, 3, 5, 1], 16, 1.0, Some(SWAP12)));
        for (t, ne, n_dims, freq_scale, perm) in list {
            let name = format!(
                "ROPE(type={t},ne={},n_dims={n_dims},mode={mode_name},freq_base=10000,freq_scale={freq_scale}{})",
                fmt_ne(&ne),
                perm_suffix("perm", perm)
            );
            v.push(Case::new("ROPE", name, move |g| {
                let a = g.input(t, ne, perm, Init::DEFAULT)?;
                let pos = g.leaf_init(I32, [ne[2], 1, 1, 1], Init::Ints(0, 512))?;
                g.rope(a, pos, RopeParams { mode, n_dims, freq_base: 10000.0, freq_scale })
            }));
        }
    }
}

fn im2col(v: &mut Vec<Case>) {
    // (kernel w, kernel h, s0, s1, p0, p1, d0, d1)
    let params_2d =
        [(3, 3, 1, 1, 0, 0, 1, 1), (3, 3, 2, 2, 1, 1, 1, 1), (3, 2, 1, 2, 1, 0, 2, 1), (1, 1, 1, 1, 0, 0, 1, 1)];
    for tin in [F32, F16] {
        for tout in [F32, F16] {
            for (kw, kh, s0, s1, p0, p1, d0, d1) in params_2d {
                let ne_in = [10, 9, 3, 2];
                let ne_k = [kw, kh, 3, 4];
                let name = format!(
                    "IM2COL(type_input={tin},type_kernel=f16,dst_type={tout},ne_input={},ne_kernel={},s0={s0},s1={s1},p0={p0},p1={p1},d0={d0},d1={d1},is_2D=1)",
                    fmt_ne(&ne_in),
                    fmt_ne(&ne_k)
                );
                v.push(Case::new("IM2COL", name, move |g| {
                    let k = g.leaf(F16, ne_k)?;
                    let x = g.leaf(tin, ne_in)?;
                    g.im2col(k, x, Im2ColParams { s0, s1, p0, p1, d0, d1, is_2d: true }, tout)
                }));
            }
            for (kw, s0, p0, d0) in [(5, 1, 0, 1), (5, 2, 2, 1), (3, 1, 1, 2), (3, 3, 0, 1)] {
                let ne_in = [20, 3, 2, 1];
                let ne_k = [kw, 3, 4, 1];
                let name = format!(
                    "IM2COL(type_input={tin},type_kernel=f16,dst_type={tout},ne_input={},ne_kernel={},s0={s0},p0={p0},d0={d0},is_2D=0)",
                    fmt_ne(&ne_in),
                    fmt_ne(&ne_k)
                );
                v.push(Case::new("IM2COL", name, move |g| {
                    let k = g.leaf(F16, ne_k)?;
                    let x = g.leaf(tin, ne_in)?;
                    g.im2col(k, x, Im2ColParams { s0, s1: 1, p0, p1: 0, d0, d1: 1, is_2d: false }, tout)
                }));
            }
        }
    }
    v.push(Case::new(
        "IM2COL",
        "IM2COL(type_input=bf16,type_kernel=f32,dst_type=f32,ne_input=[7,7,2,1],ne_kernel=[3,3,2,1],s0=1,s1=1,p0=1,p1=1,d0=1,d1=1,is_2D=1)",
        |g| {
            let k = g.leaf(F32, [3, 3, 2, 1])?;
            let x = g.leaf(BF16, [7, 7, 2, 1])?;
            g.im2col(k, x, Im2ColParams { s0: 1, s1: 1, p0: 1, p1: 1, d0: 1, d1: 1, is_2d: true }, F32)
        },
    ));
}

fn pool_2d(v: &mut Vec<Case>) {
    for kind in [PoolKind::Max, PoolKind::Avg] {
        let kind_name = match kind {
            PoolKind::Max => "max",
            PoolKind::Avg => "avg",
        };
        for t in FLOATS {
            // (k0, k1, s0, s1, p0, p1)
            let mut params = vec![(2, 2, 2, 2, 0, 0), (3, 3, 2, 2, 1, 1), (3, 2, 1, 2, 1, 0)];
            if t == F32 {
                params.push((3, 3, 1, 1, 2, 2));
                params.push((1, 1, 1, 1, 0, 0));
            }
            for (k0, k1, s0, s1, p0, p1) in params {
                let ne = [10, 9, 3, 2];
                let name = format!(
                    "POOL_2D(pool_type={kind_name},type_input={t},ne_input={},k0={k0},k1={k1},s0={s0},s1={s1},p0={p0},p1={p1})",
                    fmt_ne(&ne)
                );
                v.push(Case::new("POOL_2D", name, move |g| {
                    let a = g.leaf(t, ne)?;
                    g.pool_2d(a, Pool2dParams { kind, k0, k1, s0, s1, p0, p1 })
                }));
            }
        }
    }
}
