//! Nodes fused when a split is captured: runs of consecutive nodes whose intermediate results
//! nothing else reads (the split's consumer counts say so) become one kernel. Every fusion
//! gives the values of the nodes one after another: their bits, or within a few roundings of
//! them where a GEMM sums in another order or takes a GELU before rounding its result to f16.
//! Where the kernel does not take the operands, the nodes run one by one. The allocator keeps
//! what a run reads until its last node (`Backend::fused_runs`).

use tessera_core::{BinaryOp, DType, Graph, Op, RopeMode, TensorFlags, TensorId, UnaryOp};

/// A fusable run of nodes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Fusion {
    /// NORM or RMS_NORM, then MUL by a weight row, then (optionally) ADD of a bias row: a
    /// layer norm. `last` is the node whose result the fused kernel writes. With `residual`,
    /// the norm's source is the ADD node `residual` of two tensors of one shape (a residual
    /// connection), fused too, and with `widened` before it a CPY widening f16 values to f32
    /// read only as the ADD's first source (the kernel reads the f16 values). With `half`, a CPY
    /// of the layer norm's result (its only reader) to a new f16 tensor comes last: the kernel
    /// writes f16 rows only (a residual stream kept in f16).
    NormAffine {
        widened: Option<TensorId>,
        residual: Option<TensorId>,
        norm: TensorId,
        weight: TensorId,
        bias: Option<TensorId>,
        half: Option<TensorId>,
        last: TensorId,
        eps: f32,
        rms: bool,
    },
    /// MUL_MAT, then ADD of a bias row to its result: a linear layer. `last` is the ADD, or
    /// `half`, a CPY of the sum (its only reader) to a new f16 tensor: the product then writes
    /// f16 (a layer in reduced precision), and its bias is f16 too (cuBLASLt adds no f32 bias
    /// to an f16 result): an f16 tensor, or `bias_half`, a CPY of an f32 bias to f16 between
    /// the product and the ADD. With `gelu`, a GELU_ERF node whose only reader is the product (as b) comes
    /// first: a feed-forward's activation and second linear layer. With `widened`, the product's
    /// b is a CPY of f16 values to f32 (the GELU's result, or without a GELU any f16 tensor), its
    /// only reader: the GEMM takes the f16 values as they are. With `gelu_after`, a GELU (the
    /// tanh approximation) of the sum (or of its f16 cast) is its only reader and `last`: the
    /// GEMM's epilogue takes it, from the f32 sum before any rounding to f16 (so within a few
    /// f16 steps of the nodes, not their bits).
    MulMatBias {
        gelu: Option<TensorId>,
        widened: Option<TensorId>,
        mul_mat: TensorId,
        bias_half: Option<TensorId>,
        bias: TensorId,
        half: Option<TensorId>,
        gelu_after: Option<TensorId>,
        last: TensorId,
    },
    /// A SwiGLU feed-forward's first half: MUL_MAT (gate), SILU of it, MUL_MAT (up) of the same
    /// activation, then MUL of the two (`last`).
    SwiGlu { gate: TensorId, up: TensorId, last: TensorId },
    /// FLASH_ATTN, then a CPY of its result (its only reader) to a new f16 tensor, which the
    /// kernel writes (a layer in reduced precision).
    FlashAttnHalf { attn: TensorId, cast: TensorId },
    /// Up to three MUL_MATs of one column by weights of one type and row length, each with
    /// the ROPE and the SET_ROWS that store it, if any: an attention block's query, key and
    /// value projections while decoding. `nodes` counts the nodes covered, views between them
    /// included.
    Projections { products: [Option<Projection>; 3], nodes: usize },
    /// An embeddings layer (a BERT graph's first nodes): GET_ROWS of a table (`rows`), the ADD
    /// of a row to each of them (`row_add`), GET_ROWS of a second table (`more_rows`) added to
    /// that sum by the residual ADD of a layer norm, then the norm with its `weight`, `bias`
    /// and optional cast to f16 (`last`), as in `NormAffine`; every intermediate result f32
    /// and read once. `nodes` counts the nodes covered, views between them included.
    Embeddings {
        rows: TensorId,
        row_add: TensorId,
        more_rows: TensorId,
        weight: TensorId,
        bias: Option<TensorId>,
        last: TensorId,
        eps: f32,
        rms: bool,
        nodes: usize,
    },
    /// CONT of f32 values (a transposed view, as a BERT graph's mean pooling makes), read only
    /// as the weights of the one-column MUL_MAT right after it: the product reads the CONT's
    /// source where it lies.
    TransposedProduct { cont: TensorId, mul_mat: TensorId },
}

/// One product of a [`Fusion::Projections`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Projection {
    pub mul_mat: TensorId,
    /// The ROPE (normal mode) of the product's values, if it is their only reader.
    pub rope: Option<TensorId>,
    /// The SET_ROWS that stores the (rotated) values as one row of another tensor, if it is
    /// their only reader.
    pub store: Option<TensorId>,
}

impl Fusion {
    /// How profiles name it.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Fusion::NormAffine { widened: Some(_), rms: false, .. } => "CPY+ADD+NORM+MUL(+ADD)(+CPY) (fused)",
            Fusion::NormAffine { widened: Some(_), rms: true, .. } => "CPY+ADD+RMS_NORM+MUL(+ADD)(+CPY) (fused)",
            Fusion::NormAffine { residual: Some(_), rms: false, half: None, .. } => "ADD+NORM+MUL(+ADD) (fused)",
            Fusion::NormAffine { residual: None, rms: false, half: None, .. } => "NORM+MUL(+ADD) (fused)",
            Fusion::NormAffine { residual: Some(_), rms: true, half: None, .. } => "ADD+RMS_NORM+MUL(+ADD) (fused)",
            Fusion::NormAffine { residual: None, rms: true, half: None, .. } => "RMS_NORM+MUL(+ADD) (fused)",
            Fusion::NormAffine { residual: Some(_), rms: false, half: Some(_), .. } => "ADD+NORM+MUL(+ADD)+CPY (fused)",
            Fusion::NormAffine { residual: None, rms: false, half: Some(_), .. } => "NORM+MUL(+ADD)+CPY (fused)",
            Fusion::NormAffine { residual: Some(_), rms: true, half: Some(_), .. } => {
                "ADD+RMS_NORM+MUL(+ADD)+CPY (fused)"
            }
            Fusion::NormAffine { residual: None, rms: true, half: Some(_), .. } => "RMS_NORM+MUL(+ADD)+CPY (fused)",
            Fusion::MulMatBias { gelu_after: Some(_), .. } => "(CPY+)MUL_MAT+ADD(+CPY)+GELU (fused)",
            Fusion::MulMatBias { gelu: None, widened: None, half: None, .. } => "MUL_MAT+ADD (fused)",
            Fusion::MulMatBias { gelu: None, widened: None, half: Some(_), .. } => "MUL_MAT+ADD+CPY (fused)",
            Fusion::MulMatBias { gelu: None, widened: Some(_), .. } => "CPY+MUL_MAT+ADD (fused)",
            Fusion::MulMatBias { gelu: Some(_), widened: None, half: None, .. } => "GELU_ERF+MUL_MAT+ADD (fused)",
            Fusion::MulMatBias { gelu: Some(_), widened: Some(_), half: None, .. } => {
                "GELU_ERF+CPY+MUL_MAT+ADD (fused)"
            }
            Fusion::MulMatBias { gelu: Some(_), half: Some(_), .. } => "GELU_ERF+MUL_MAT+ADD+CPY (fused)",
            Fusion::FlashAttnHalf { .. } => "FLASH_ATTN+CPY (fused)",
            Fusion::SwiGlu { .. } => "MUL_MAT+SILU+MUL_MAT+MUL (fused)",
            Fusion::Projections { .. } => "MUL_MAT(+ROPE)(+SET_ROWS) x N (fused)",
            Fusion::TransposedProduct { .. } => "CONT+MUL_MAT (fused)",
            Fusion::Embeddings { .. } => "GET_ROWS+ADD+GET_ROWS+ADD+NORM+MUL(+ADD)(+CPY) (fused)",
        }
    }

    /// How many nodes it covers.
    pub(crate) fn len(&self) -> usize {
        match self {
            Fusion::NormAffine { widened, residual, bias, half, .. } => {
                let optional = [widened, residual, bias, half];
                2 + optional.iter().filter(|n| n.is_some()).count()
            }
            Fusion::MulMatBias { gelu, widened, bias_half, half, gelu_after, .. } => {
                let optional = [gelu, widened, bias_half, half, gelu_after];
                2 + optional.iter().filter(|n| n.is_some()).count()
            }
            Fusion::FlashAttnHalf { .. } => 2,
            Fusion::SwiGlu { .. } => 4,
            Fusion::TransposedProduct { .. } => 2,
            Fusion::Projections { nodes, .. } | Fusion::Embeddings { nodes, .. } => *nodes,
        }
    }
}

/// Whether `id` is a CPY (of `from`, if given) into a new tensor of `to` values: a cast.
fn is_cast(graph: &Graph, id: TensorId, from: Option<TensorId>, to: DType) -> bool {
    graph.tensor(id).is_ok_and(|c| {
        c.op() == Op::Cpy
            && c.src(1).is_none()
            && c.view_src().is_none()
            && c.dtype() == to
            && from.is_none_or(|f| c.src(0) == Some(f))
    })
}

/// The fusion starting at node `ids[0]`, if any. `consumers` counts each tensor's readers in
/// the whole graph (outputs once more).
pub(crate) fn find(graph: &Graph, ids: &[TensorId], consumers: &[u32]) -> Option<Fusion> {
    let &[first, second, ..] = ids else { return None };
    let read_once = |id: TensorId| consumers.get(id.index()) == Some(&1);
    // A residual ADD of two tensors of one shape that only the norm after it reads.
    let t = graph.tensor(first).ok()?;
    if t.op() == Op::Binary(BinaryOp::Add) && read_once(first) {
        let same_shape = t.srcs().all(|(_, s)| graph.tensor(s).is_ok_and(|s| s.ne() == t.ne()));
        let normed = graph
            .tensor(second)
            .is_ok_and(|n| matches!(n.op(), Op::Norm { .. } | Op::RmsNorm { .. }) && n.src(0) == Some(first));
        if same_shape && normed {
            return match find(graph, &ids[1..], consumers)? {
                Fusion::NormAffine { widened: None, residual: None, norm, weight, bias, half, last, eps, rms } => {
                    let residual = Some(first);
                    Some(Fusion::NormAffine { widened: None, residual, norm, weight, bias, half, last, eps, rms })
                }
                _ => None,
            };
        }
    }
    let (eps, rms) = match graph.tensor(first).ok()?.op() {
        Op::Norm { eps } => (eps, false),
        Op::RmsNorm { eps } => (eps, true),
        Op::MulMat => {
            // The bias rounded to f16 right after the product, read only by the ADD after it.
            let bias_half = Some(second).filter(|&c| is_cast(graph, c, None, DType::F16) && read_once(c));
            let at = 1 + usize::from(bias_half.is_some());
            let add_id = *ids.get(at)?;
            let add = graph.tensor(add_id).ok()?;
            let adds = add.op() == Op::Binary(BinaryOp::Add)
                && add.src(0) == Some(first)
                && read_once(first)
                && (bias_half.is_none() || add.src(1) == bias_half);
            if adds {
                // With an f16 bias (rounded by that cast, or an f16 tensor), a cast of the sum
                // to f16 right after it, its only reader (no fusion takes an f16 bias without it).
                let f16_bias = bias_half.is_some()
                    || add.src(1).and_then(|b| graph.tensor(b).ok()).is_some_and(|b| b.dtype() == DType::F16);
                let half = ids
                    .get(at + 1)
                    .copied()
                    .filter(|&next| f16_bias && is_cast(graph, next, Some(add_id), DType::F16) && read_once(add_id));
                if f16_bias && half.is_none() {
                    return None;
                }
                let sum = half.unwrap_or(add_id);
                // A GELU of the sum right after it, its only reader.
                let gelu_after = ids.get(at + 1 + usize::from(half.is_some())).copied().filter(|&next| {
                    graph.tensor(next).is_ok_and(|t| t.op() == Op::Unary(UnaryOp::Gelu) && t.src(0) == Some(sum))
                        && read_once(sum)
                });
                return Some(Fusion::MulMatBias {
                    gelu: None,
                    widened: None,
                    mul_mat: first,
                    bias_half,
                    bias: add.src(1)?,
                    half,
                    gelu_after,
                    last: gelu_after.unwrap_or(sum),
                });
            }
            return swiglu(graph, ids, consumers).or_else(|| projections(graph, ids, consumers));
        }
        Op::Cpy => {
            // f16 values widened to f32, read only as the b of the product right after it, or
            // as the first source of the residual ADD of a layer norm right after it.
            let of_f16 = t.src(0).and_then(|s| graph.tensor(s).ok()).is_some_and(|s| s.dtype() == DType::F16);
            let widens = of_f16 && is_cast(graph, first, None, DType::F32);
            let reader = graph.tensor(second).ok()?;
            let read = match reader.op() {
                Op::MulMat => reader.src(1) == Some(first),
                Op::Binary(BinaryOp::Add) => reader.src(0) == Some(first),
                _ => false,
            };
            if !widens || !read || !read_once(first) {
                return None;
            }
            let mut f = find(graph, &ids[1..], consumers)?;
            match &mut f {
                Fusion::MulMatBias { gelu: None, widened: widened @ None, .. } => *widened = Some(first),
                Fusion::NormAffine { widened: widened @ None, residual: Some(add), .. } if *add == second => {
                    *widened = Some(first)
                }
                _ => return None,
            }
            return Some(f);
        }
        Op::Cont => {
            // Read only as the weights of the product right after it, which has one column.
            let product = graph.tensor(second).ok()?;
            let b = graph.tensor(product.src(1)?).ok()?;
            let one_column = product.op() == Op::MulMat && product.src(0) == Some(first) && b.ne()[1] == 1;
            return (one_column && read_once(first))
                .then_some(Fusion::TransposedProduct { cont: first, mul_mat: second });
        }
        Op::GetRows => return embeddings(graph, ids, consumers),
        Op::FlashAttn { .. } => {
            // Its result cast to f16 by the node right after it, its only reader.
            let cast = is_cast(graph, second, Some(first), DType::F16) && read_once(first);
            return cast.then_some(Fusion::FlashAttnHalf { attn: first, cast: second });
        }
        Op::Unary(UnaryOp::GeluErf) => {
            // Read only as the b of the product right after it, which adds a bias; or, of f16
            // values, only by a cast to f32 right after it, read only as that product's b.
            let widened = t.dtype() == DType::F16 && is_cast(graph, second, Some(first), DType::F32);
            let (b, at) = if widened { (second, 2) } else { (first, 1) };
            let product = graph.tensor(*ids.get(at)?).ok()?;
            if product.op() != Op::MulMat || product.src(1) != Some(b) || !read_once(first) || !read_once(b) {
                return None;
            }
            let mut f = find(graph, &ids[at..], consumers)?;
            match &mut f {
                Fusion::MulMatBias { gelu: gelu @ None, widened: widen, .. } => {
                    *gelu = Some(first);
                    *widen = widened.then_some(second);
                }
                _ => return None,
            }
            return Some(f);
        }
        _ => return None,
    };
    let mul = graph.tensor(second).ok()?;
    if mul.op() != Op::Binary(BinaryOp::Mul) || mul.src(0) != Some(first) || !read_once(first) {
        return None;
    }
    let weight = mul.src(1)?;
    let bias = ids.get(2).and_then(|&third| {
        let add = graph.tensor(third).ok()?;
        let adds_to_mul = add.op() == Op::Binary(BinaryOp::Add) && add.src(0) == Some(second);
        (adds_to_mul && read_once(second)).then(|| add.src(1)).flatten().map(|b| (third, b))
    });
    let affine = bias.map_or(second, |(third, _)| third);
    // The result cast to f16 by the node right after it, its only reader.
    let half = ids
        .get(2 + usize::from(bias.is_some()))
        .copied()
        .filter(|&next| is_cast(graph, next, Some(affine), DType::F16) && read_once(affine));
    let last = half.unwrap_or(affine);
    let bias = bias.map(|(_, b)| b);
    Some(Fusion::NormAffine { widened: None, residual: None, norm: first, weight, bias, half, last, eps, rms })
}

/// The [`Fusion::Embeddings`] starting at GET_ROWS `ids[0]`: its rows read (through views) only
/// by an ADD of a row to each, the next node (views aside) a GET_ROWS whose rows only the next
/// (a residual ADD to that sum) reads, which a layer norm's fusion starts with.
fn embeddings(graph: &Graph, ids: &[TensorId], consumers: &[u32]) -> Option<Fusion> {
    let node = |id: TensorId| graph.tensor(id).ok();
    let read_once = |id: TensorId| consumers.get(id.index()) == Some(&1);
    let f32_node = |id: TensorId| node(id).is_some_and(|t| t.dtype() == DType::F32);
    // The position in `ids` of the first node from `from` on that is not a view.
    let next = |from: usize| (from..ids.len()).find(|&i| node(ids[i]).is_some_and(|t| !t.op().is_view()));
    let rows = *ids.first()?;
    let at_add = next(1)?;
    let (row_add, add) = (ids[at_add], node(ids[at_add])?);
    let e = node(add.src(1)?)?;
    let adds_row = add.op() == Op::Binary(BinaryOp::Add)
        && whole(graph, add.src(0), rows)
        && read_once_through_views(graph, consumers, rows)
        && e.ne() == [add.ne()[0], 1, 1, 1]
        && read_once(row_add);
    let at_more = next(at_add + 1)?;
    let more_rows = ids[at_more];
    let at_residual = next(at_more + 1)?;
    let (residual, sum) = (ids[at_residual], node(ids[at_residual])?);
    let adds_rows = node(more_rows)?.op() == Op::GetRows
        && sum.src(0) == Some(row_add)
        && whole(graph, sum.src(1), more_rows)
        && read_once_through_views(graph, consumers, more_rows);
    if !adds_row || !adds_rows || ![rows, row_add, more_rows, residual].into_iter().all(f32_node) {
        return None;
    }
    match find(graph, &ids[at_residual..], consumers)? {
        norm @ Fusion::NormAffine { widened: None, residual: Some(r), weight, bias, last, eps, rms, .. }
            if r == residual =>
        {
            let nodes = at_residual + norm.len();
            Some(Fusion::Embeddings { rows, row_add, more_rows, weight, bias, last, eps, rms, nodes })
        }
        _ => None,
    }
}

/// MUL_MAT (gate), SILU of it, MUL_MAT (up) of the same activation by weights of the gate's
/// type and shape, MUL of the SILU and the up product in either order: `ids[0..4]`, the up
/// product first or third, with the intermediate results read by the next of these nodes only.
fn swiglu(graph: &Graph, ids: &[TensorId], consumers: &[u32]) -> Option<Fusion> {
    let &[n0, n1, n2, mul, ..] = ids else { return None };
    let node = |id: TensorId| graph.tensor(id).ok();
    let is_silu = |id: TensorId| node(id).is_some_and(|t| t.op() == Op::Unary(UnaryOp::Silu));
    let (gate, silu, up) = if is_silu(n1) { (n0, n1, n2) } else { (n1, n2, n0) };
    let read_once = |id: TensorId| consumers.get(id.index()) == Some(&1);
    let (g, s, u, m) = (node(gate)?, node(silu)?, node(up)?, node(mul)?);
    let weights_alike = |a: Option<TensorId>, b: Option<TensorId>| -> Option<bool> {
        let (a, b) = (node(a?)?, node(b?)?);
        Some(a.dtype() == b.dtype() && a.ne() == b.ne())
    };
    let fused = g.op() == Op::MulMat
        && s.op() == Op::Unary(UnaryOp::Silu)
        && s.src(0) == Some(gate)
        && u.op() == Op::MulMat
        && u.src(1) == g.src(1)
        && weights_alike(g.src(0), u.src(0))?
        && m.op() == Op::Binary(BinaryOp::Mul)
        && matches!((m.src(0), m.src(1)), (Some(a), Some(b)) if (a, b) == (silu, up) || (a, b) == (up, silu))
        && [gate, silu, up].into_iter().all(read_once);
    fused.then_some(Fusion::SwiGlu { gate, up, last: mul })
}

/// Whether `x`'s values have exactly one reader that is not a view of them, and no view of them
/// is an output. `consumers` (as `consumer_counts` gives them) counts for `x` every node that
/// reads `x` or a view of it, views included, and an output once more.
fn read_once_through_views(graph: &Graph, consumers: &[u32], x: TensorId) -> bool {
    let mut views = 0u32;
    for &id in graph.nodes() {
        let Ok(t) = graph.tensor(id) else { return false };
        if t.op().is_view() && t.view_src() == Some(x) {
            if t.flags().contains(TensorFlags::OUTPUT) {
                return false;
            }
            views += 1;
        }
    }
    consumers.get(x.index()) == Some(&(views + 1))
}

/// Whether `src` is `x` or a packed view of all of `x`'s values from its start.
fn whole(graph: &Graph, src: Option<TensorId>, x: TensorId) -> bool {
    let (Some(src), Ok(xt)) = (src, graph.tensor(x)) else { return false };
    src == x
        || graph.tensor(src).is_ok_and(|t| {
            t.view_src() == Some(x) && t.view_offset() == 0 && t.is_contiguous() && t.nelements() == xt.nelements()
        })
}

/// Consecutive MUL_MATs (views between them aside) of one column `b` by weights of the first's
/// type and row length, each followed by the ROPE and SET_ROWS that store its values, if any.
/// A fusion when it covers two products or more, or one with its ROPE or SET_ROWS.
fn projections(graph: &Graph, ids: &[TensorId], consumers: &[u32]) -> Option<Fusion> {
    let node = |id: TensorId| graph.tensor(id).ok();
    let first = node(*ids.first()?)?;
    let (b, w0) = (first.src(1)?, node(first.src(0)?)?);
    if node(b)?.ne()[1..] != [1, 1, 1] {
        return None;
    }
    // The position in `ids` of the first node from `from` on that is not a view.
    let next = |from: usize| (from..ids.len()).find(|&i| node(ids[i]).is_some_and(|t| !t.op().is_view()));
    let mut products = [None; 3];
    let (mut count, mut end, mut at) = (0, 0, 0);
    let mut shared_rope = None;
    while count < products.len() {
        let Some(&id) = ids.get(at) else { break };
        let t = node(id)?;
        let alike = t.src(0).and_then(node).is_some_and(|w| w.dtype() == w0.dtype() && w.ne()[0] == w0.ne()[0]);
        if t.op() != Op::MulMat || t.src(1) != Some(b) || !alike {
            break;
        }
        let (mut value, mut last) = (id, at);
        let mut rope = None;
        if let Some(i) = next(at + 1) {
            let r = node(ids[i])?;
            if let Op::Rope(p) = r.op() {
                // One set of parameters, positions and row length for all rotated products.
                let key = (p, r.src(1), r.src(0).and_then(node).map(|s| s.ne()[0]));
                let shared = shared_rope.is_none_or(|s| s == key);
                let reads = whole(graph, r.src(0), value) && read_once_through_views(graph, consumers, value);
                if p.mode == RopeMode::Normal && shared && reads {
                    shared_rope = Some(key);
                    (rope, value, last) = (Some(ids[i]), ids[i], i);
                }
            }
        }
        let mut store = None;
        if let Some(i) = next(last + 1) {
            let s = node(ids[i])?;
            let one_row = s.ne()[0] == t.ne()[0];
            let reads = whole(graph, s.src(0), value) && read_once_through_views(graph, consumers, value);
            if s.op() == Op::SetRows && one_row && reads {
                (store, last) = (Some(ids[i]), i);
            }
        }
        products[count] = Some(Projection { mul_mat: id, rope, store });
        count += 1;
        end = last + 1;
        match next(end) {
            Some(i) => at = i,
            None => break,
        }
    }
    let epilogues = products.iter().flatten().any(|p| p.rope.is_some() || p.store.is_some());
    (count >= 2 || epilogues).then_some(Fusion::Projections { products, nodes: end })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use tessera_core::DType;

    use super::*;

    /// A layer norm as the models build it, its result read by `readers` more nodes.
    fn layer_norm(with_bias: bool) -> (Graph, Vec<TensorId>) {
        let mut g = Graph::new();
        let x = g.new_tensor(DType::F32, &[8, 3]).unwrap();
        let w = g.new_tensor(DType::F32, &[8]).unwrap();
        let b = g.new_tensor(DType::F32, &[8]).unwrap();
        let n = g.norm(x, 1e-5).unwrap();
        let m = g.mul(n, w).unwrap();
        let out = if with_bias { g.add(m, b).unwrap() } else { m };
        let s = g.scale(out, 2.0).unwrap();
        g.build_forward(s).unwrap();
        let ids = g.nodes().to_vec();
        (g, ids)
    }

    fn counts(g: &Graph) -> Vec<u32> {
        tessera_core::consumer_counts(g).unwrap()
    }

    #[test]
    fn a_layer_norm_fuses_with_its_weight_and_bias() {
        let (g, ids) = layer_norm(true);
        let f = find(&g, &ids, &counts(&g)).unwrap();
        let Fusion::NormAffine { residual: None, norm, bias, last, rms, .. } = f else { panic!("{f:?}") };
        assert_eq!((norm, last, bias.is_some(), rms, f.len()), (ids[0], ids[2], true, false, 3));
        // Without a bias: the norm and the product.
        let (g, ids) = layer_norm(false);
        let f = find(&g, &ids, &counts(&g)).unwrap();
        assert_eq!((f.len(), matches!(f, Fusion::NormAffine { bias: None, .. })), (2, true));
        // Nothing starts elsewhere.
        assert_eq!(find(&g, &ids[1..], &counts(&g)), None);
    }

    #[test]
    fn a_residual_add_before_a_layer_norm_fuses_with_it() {
        let mut g = Graph::new();
        let x = g.new_tensor(DType::F32, &[8, 3]).unwrap();
        let y = g.new_tensor(DType::F32, &[8, 3]).unwrap();
        let w = g.new_tensor(DType::F32, &[8]).unwrap();
        let b = g.new_tensor(DType::F32, &[8]).unwrap();
        let sum = g.add(x, y).unwrap();
        let n = g.norm(sum, 1e-5).unwrap();
        let m = g.mul(n, w).unwrap();
        let out = g.add(m, b).unwrap();
        g.build_forward(out).unwrap();
        let ids = g.nodes().to_vec();
        let f = find(&g, &ids, &counts(&g)).unwrap();
        assert_eq!((f.len(), matches!(f, Fusion::NormAffine { residual: Some(r), .. } if r == ids[0])), (4, true));
        // A broadcast ADD is not a residual connection.
        let mut g = Graph::new();
        let x = g.new_tensor(DType::F32, &[8, 3]).unwrap();
        let row = g.new_tensor(DType::F32, &[8]).unwrap();
        let sum = g.add(x, row).unwrap();
        let n = g.norm(sum, 1e-5).unwrap();
        let m = g.mul(n, row).unwrap();
        g.build_forward(m).unwrap();
        let ids = g.nodes().to_vec();
        assert_eq!(find(&g, &ids, &counts(&g)), None);
    }

    #[test]
    fn a_copied_transpose_read_as_the_weights_of_one_column_fuses_with_its_product() {
        // Mean pooling's shape: hidden states [8, 5, 3] transposed, copied, times one column
        // per sequence; the copy also an output, or a product of two columns.
        let build = |columns: usize, copy_is_output: bool| {
            let mut g = Graph::new();
            let x = g.new_tensor(DType::F32, &[8, 5, 3]).unwrap();
            let p = g.new_tensor(DType::F32, &[5, columns, 3]).unwrap();
            let t = g.transpose(x).unwrap();
            let copy = g.cont(t).unwrap();
            let out = g.mul_mat(copy, p).unwrap();
            if copy_is_output {
                g.set_output(copy).unwrap();
            }
            g.build_forward(out).unwrap();
            let ids = g.nodes().to_vec();
            (g, ids, copy, out)
        };
        let (g, ids, copy, out) = build(1, false);
        let at = ids.iter().position(|&id| id == copy).unwrap();
        let f = find(&g, &ids[at..], &counts(&g)).unwrap();
        assert_eq!(f, Fusion::TransposedProduct { cont: copy, mul_mat: out });
        assert_eq!((f.len(), f.name()), (2, "CONT+MUL_MAT (fused)"));
        for (columns, copy_is_output) in [(2, false), (1, true)] {
            let (g, ids, copy, _) = build(columns, copy_is_output);
            let at = ids.iter().position(|&id| id == copy).unwrap();
            assert_eq!(find(&g, &ids[at..], &counts(&g)), None, "{columns} columns, output {copy_is_output}");
        }
    }

    #[test]
    fn an_embeddings_layer_fuses_its_gathers_and_adds_into_the_norm() {
        // A BERT graph's embeddings: word rows + the type row + position rows, the layer norm,
        // its cast to f16; the word rows or the position rows also an output.
        let build = |rows_are_output: bool, positions_are_output: bool| {
            let mut g = Graph::new();
            let (h, t, seqs) = (8, 4, 3);
            let word = g.new_tensor(DType::F16, &[h, 50]).unwrap();
            let pos = g.new_tensor(DType::F16, &[h, 16]).unwrap();
            let types = g.new_tensor(DType::F16, &[h, 2]).unwrap();
            let ids = g.new_tensor(DType::I32, &[t * seqs]).unwrap();
            let positions = g.new_tensor(DType::I32, &[t * seqs]).unwrap();
            let w = g.new_tensor(DType::F32, &[h]).unwrap();
            let b = g.new_tensor(DType::F32, &[h]).unwrap();
            let rows = g.get_rows(word, ids).unwrap();
            let x = g.reshape(rows, &[h, t, seqs]).unwrap();
            let type0 = g.view_1d(types, h, 0).unwrap();
            let x = g.add(x, type0).unwrap();
            let position_rows = g.get_rows(pos, positions).unwrap();
            let p = g.reshape(position_rows, &[h, t, seqs]).unwrap();
            let x = g.add(x, p).unwrap();
            let n = g.norm(x, 1e-12).unwrap();
            let m = g.mul(n, w).unwrap();
            let affine = g.add(m, b).unwrap();
            let out = g.cast(affine, DType::F16).unwrap();
            if rows_are_output {
                g.set_output(rows).unwrap();
            }
            if positions_are_output {
                g.set_output(position_rows).unwrap();
            }
            g.build_forward(out).unwrap();
            let ids = g.nodes().to_vec();
            (g, ids, out)
        };
        let (g, ids, out) = build(false, false);
        let f = find(&g, &ids, &counts(&g)).unwrap();
        assert!(matches!(f, Fusion::Embeddings { last, bias: Some(_), rms: false, .. } if last == out), "{f:?}");
        assert_eq!(f.len(), ids.iter().position(|&id| id == out).unwrap() + 1);
        assert_eq!(f.name(), "GET_ROWS+ADD+GET_ROWS+ADD+NORM+MUL(+ADD)(+CPY) (fused)");
        for (rows, positions) in [(true, false), (false, true)] {
            let (g, ids, _) = build(rows, positions);
            assert_eq!(find(&g, &ids, &counts(&g)), None, "word rows output {rows}, position rows output {positions}");
        }
    }

    #[test]
    fn a_layer_norm_cast_to_f16_fuses_with_the_cast() {
        // A residual ADD of f32 and f16 rows, the norm, its weight and bias, a cast to `to`
        // read by `readers` casts back to f32.
        let build = |to: DType, readers: usize| {
            let mut g = Graph::new();
            let x = g.new_tensor(DType::F32, &[8, 3]).unwrap();
            let y = g.new_tensor(DType::F16, &[8, 3]).unwrap();
            let w = g.new_tensor(DType::F32, &[8]).unwrap();
            let b = g.new_tensor(DType::F32, &[8]).unwrap();
            let sum = g.add(x, y).unwrap();
            let n = g.norm(sum, 1e-5).unwrap();
            let m = g.mul(n, w).unwrap();
            let out = g.add(m, b).unwrap();
            let half = g.cast(out, to).unwrap();
            let mut last = half;
            for _ in 0..readers {
                let wide = g.cast(half, DType::F32).unwrap();
                last = g.scale(wide, 2.0).unwrap();
            }
            g.build_forward(last).unwrap();
            let ids = g.nodes().to_vec();
            (g, ids)
        };
        let (g, ids) = build(DType::F16, 2);
        let f = find(&g, &ids, &counts(&g)).unwrap();
        let Fusion::NormAffine { residual, half, last, .. } = f else { panic!("{f:?}") };
        assert_eq!((residual, half, last, f.len()), (Some(ids[0]), Some(ids[4]), ids[4], 5));
        assert_eq!(f.name(), "ADD+NORM+MUL(+ADD)+CPY (fused)");
        // A cast to bf16 is not taken: the norm ends at its bias.
        let (g, ids) = build(DType::BF16, 1);
        let f = find(&g, &ids, &counts(&g)).unwrap();
        assert_eq!((f.len(), matches!(f, Fusion::NormAffine { half: None, last, .. } if last == ids[3])), (4, true));
    }

    #[test]
    fn f16_rows_widened_for_the_residual_add_of_a_layer_norm_fuse_with_it() {
        let mut g = Graph::new();
        let x = g.new_tensor(DType::F16, &[8, 3]).unwrap();
        let y = g.new_tensor(DType::F16, &[8, 3]).unwrap();
        let w = g.new_tensor(DType::F32, &[8]).unwrap();
        let wide = g.cast(x, DType::F32).unwrap();
        let sum = g.add(wide, y).unwrap();
        let n = g.norm(sum, 1e-5).unwrap();
        let m = g.mul(n, w).unwrap();
        let out = g.cast(m, DType::F16).unwrap();
        g.build_forward(out).unwrap();
        let ids = g.nodes().to_vec();
        let f = find(&g, &ids, &counts(&g)).unwrap();
        let Fusion::NormAffine { widened, residual, half, .. } = f else { panic!("{f:?}") };
        assert_eq!((widened, residual, half, f.len()), (Some(ids[0]), Some(ids[1]), Some(ids[4]), 5));
        assert_eq!(f.name(), "CPY+ADD+NORM+MUL(+ADD)(+CPY) (fused)");
        // The widened values read elsewhere too: the CPY runs on its own.
        let mut c = counts(&g);
        c[ids[0].index()] += 1;
        assert_eq!(find(&g, &ids, &c), None);
        assert!(matches!(find(&g, &ids[1..], &c), Some(Fusion::NormAffine { widened: None, .. })));
    }

    /// A linear layer fused without a GELU or a widened b.
    fn linear(
        mul_mat: TensorId,
        bias_half: Option<TensorId>,
        bias: TensorId,
        half: Option<TensorId>,
        last: TensorId,
    ) -> Fusion {
        Fusion::MulMatBias { gelu: None, widened: None, mul_mat, bias_half, bias, half, gelu_after: None, last }
    }

    #[test]
    fn a_product_fuses_with_the_bias_added_to_it() {
        let mut g = Graph::new();
        let w = g.new_tensor(DType::F32, &[8, 5]).unwrap();
        let x = g.new_tensor(DType::F32, &[8, 3]).unwrap();
        let b = g.new_tensor(DType::F32, &[5]).unwrap();
        let y = g.mul_mat(w, x).unwrap();
        let out = g.add(y, b).unwrap();
        g.build_forward(out).unwrap();
        let ids = g.nodes().to_vec();
        let mut c = counts(&g);
        let fused = linear(ids[0], None, b, None, ids[1]);
        assert_eq!(find(&g, &ids, &c), Some(fused));
        c[ids[0].index()] += 1; // the product is read elsewhere too
        assert_eq!(find(&g, &ids, &c), None);
    }

    #[test]
    fn a_linear_layer_in_f16_fuses_with_its_bias_rounded_to_f16() {
        // The bias rounded to `bias_to` (or not), the sum cast to `to`.
        let build = |bias_to: Option<DType>, to: DType| {
            let mut g = Graph::new();
            let w = g.new_tensor(DType::F16, &[8, 5]).unwrap();
            let x = g.new_tensor(DType::F32, &[8, 3]).unwrap();
            let b = g.new_tensor(DType::F32, &[5]).unwrap();
            let y = g.mul_mat(w, x).unwrap();
            let b = bias_to.map_or(b, |t| g.cast(b, t).unwrap());
            let sum = g.add(y, b).unwrap();
            let out = g.cast(sum, to).unwrap();
            g.build_forward(out).unwrap();
            let ids = g.nodes().to_vec();
            (g, ids, b)
        };
        let (g, ids, b) = build(Some(DType::F16), DType::F16);
        assert_eq!(b, ids[1], "the bias's cast comes between the product and the ADD");
        let mut c = counts(&g);
        let fused = linear(ids[0], Some(ids[1]), b, Some(ids[3]), ids[3]);
        assert_eq!((find(&g, &ids, &c), fused.len()), (Some(fused), 4));
        // The sum read elsewhere too: no product takes an f16 bias into an f32 result.
        c[ids[2].index()] += 1;
        assert_eq!(find(&g, &ids, &c), None);
        // An f32 bias with an f16 result, and a bf16 result: the product and its ADD only.
        for (bias_to, to) in [(None, DType::F16), (Some(DType::F16), DType::BF16)] {
            let (g, ids, b) = build(bias_to, to);
            let at = 1 + usize::from(bias_to.is_some());
            let plain = linear(ids[0], None, b, None, ids[at]);
            let want = if bias_to.is_some() { None } else { Some(plain) };
            assert_eq!(find(&g, &ids, &counts(&g)), want, "{bias_to:?} {to}");
        }
        // An f16 bias tensor (a weight placed in f16): the same fusion without a cast of it;
        // with the sum kept in f32, none.
        for to in [DType::F16, DType::F32] {
            let mut g = Graph::new();
            let w = g.new_tensor(DType::F16, &[8, 5]).unwrap();
            let x = g.new_tensor(DType::F32, &[8, 3]).unwrap();
            let b = g.new_tensor(DType::F16, &[5]).unwrap();
            let y = g.mul_mat(w, x).unwrap();
            let sum = g.add(y, b).unwrap();
            let out = if to == DType::F16 { g.cast(sum, to).unwrap() } else { sum };
            g.build_forward(out).unwrap();
            let ids = g.nodes().to_vec();
            let fused = linear(ids[0], None, b, Some(out), out);
            let want = (to == DType::F16).then_some(fused);
            assert_eq!(find(&g, &ids, &counts(&g)), want, "{to}");
        }
    }

    #[test]
    fn a_gelu_of_a_linear_layer_fuses_into_its_epilogue() {
        // A linear layer (in f16 or f32), then a GELU of its result: the tanh form, or erf.
        let build = |half: bool, tanh: bool| {
            let mut g = Graph::new();
            let w = g.new_tensor(DType::F16, &[8, 5]).unwrap();
            let x = g.new_tensor(DType::F32, &[8, 3]).unwrap();
            let b = g.new_tensor(DType::F32, &[5]).unwrap();
            let y = g.mul_mat(w, x).unwrap();
            let b = if half { g.cast(b, DType::F16).unwrap() } else { b };
            let sum = g.add(y, b).unwrap();
            let sum = if half { g.cast(sum, DType::F16).unwrap() } else { sum };
            let out = if tanh { g.gelu(sum).unwrap() } else { g.gelu_erf(sum).unwrap() };
            g.build_forward(out).unwrap();
            let ids = g.nodes().to_vec();
            (g, ids, b)
        };
        for half in [false, true] {
            let (g, ids, b) = build(half, true);
            let last = *ids.last().unwrap();
            let fused = Fusion::MulMatBias {
                gelu: None,
                widened: None,
                mul_mat: ids[0],
                bias_half: half.then(|| ids[1]),
                bias: b,
                half: half.then(|| ids[3]),
                gelu_after: Some(last),
                last,
            };
            let mut c = counts(&g);
            assert_eq!((find(&g, &ids, &c), fused.len()), (Some(fused), ids.len()), "half {half}");
            // The sum read elsewhere too: the GELU runs apart.
            let sum = ids[ids.len() - 2];
            c[sum.index()] += 1;
            let f = find(&g, &ids, &c);
            assert!(matches!(f, Some(Fusion::MulMatBias { gelu_after: None, last, .. }) if last == sum), "{f:?}");
            // No epilogue takes the erf form.
            let (g, ids, _) = build(half, false);
            let f = find(&g, &ids, &counts(&g));
            assert!(matches!(f, Some(Fusion::MulMatBias { gelu_after: None, .. })), "{f:?}");
        }
    }

    #[test]
    fn a_gelu_read_only_by_the_product_after_it_fuses_into_its_b() {
        let build = |weights_first: bool| {
            let mut g = Graph::new();
            let w = g.new_tensor(DType::F16, &[8, 5]).unwrap();
            let x = g.new_tensor(DType::F32, &[8, 3]).unwrap();
            let b = g.new_tensor(DType::F32, &[if weights_first { 5 } else { 3 }]).unwrap();
            let act = g.gelu_erf(x).unwrap();
            // The activation as b (the product's columns), or as the weights.
            let y = if weights_first { g.mul_mat(w, act).unwrap() } else { g.mul_mat(act, x).unwrap() };
            let out = g.add(y, b).unwrap();
            g.build_forward(out).unwrap();
            let ids = g.nodes().to_vec();
            (g, ids, b)
        };
        let (g, ids, b) = build(true);
        let mut c = counts(&g);
        let fused = Fusion::MulMatBias {
            gelu: Some(ids[0]),
            widened: None,
            mul_mat: ids[1],
            bias_half: None,
            bias: b,
            half: None,
            gelu_after: None,
            last: ids[2],
        };
        assert_eq!((find(&g, &ids, &c), fused.len()), (Some(fused), 3));
        c[ids[0].index()] += 1; // the activation is read elsewhere too
        assert_eq!(find(&g, &ids, &c), None);
        let (g, ids, _) = build(false);
        assert_eq!(find(&g, &ids, &counts(&g)), None);
    }

    #[test]
    fn a_gelu_of_f16_values_widened_for_the_product_after_it_fuses_into_its_b() {
        let build = |gelu_type: DType| {
            let mut g = Graph::new();
            let w = g.new_tensor(DType::F16, &[8, 5]).unwrap();
            let x = g.new_tensor(gelu_type, &[8, 3]).unwrap();
            let b = g.new_tensor(DType::F32, &[5]).unwrap();
            let act = g.gelu_erf(x).unwrap();
            let wide = g.cast(act, DType::F32).unwrap();
            let y = g.mul_mat(w, wide).unwrap();
            let out = g.add(y, b).unwrap();
            g.build_forward(out).unwrap();
            let ids = g.nodes().to_vec();
            (g, ids, b)
        };
        let (g, ids, b) = build(DType::F16);
        let mut c = counts(&g);
        let fused = Fusion::MulMatBias {
            gelu: Some(ids[0]),
            widened: Some(ids[1]),
            mul_mat: ids[2],
            bias_half: None,
            bias: b,
            half: None,
            gelu_after: None,
            last: ids[3],
        };
        assert_eq!((find(&g, &ids, &c), fused.len()), (Some(fused), 4));
        c[ids[1].index()] += 1; // the widened values are read elsewhere too
        assert_eq!(find(&g, &ids, &c), None);
        // A cast of f32 values (the same type) is no widening.
        let (g, ids, _) = build(DType::F32);
        assert_eq!(find(&g, &ids, &counts(&g)), None);
    }

    #[test]
    fn f16_values_widened_for_a_product_fuse_into_it() {
        let build = |from: DType| {
            let mut g = Graph::new();
            let w = g.new_tensor(DType::F16, &[8, 5]).unwrap();
            let x = g.new_tensor(from, &[8, 3]).unwrap();
            let b = g.new_tensor(DType::F32, &[5]).unwrap();
            let wide = g.cast(x, DType::F32).unwrap();
            let y = g.mul_mat(w, wide).unwrap();
            let out = g.add(y, b).unwrap();
            g.build_forward(out).unwrap();
            let ids = g.nodes().to_vec();
            (g, ids, b)
        };
        let (g, ids, b) = build(DType::F16);
        let fused = Fusion::MulMatBias {
            gelu: None,
            widened: Some(ids[0]),
            mul_mat: ids[1],
            bias_half: None,
            bias: b,
            half: None,
            gelu_after: None,
            last: ids[2],
        };
        assert_eq!((find(&g, &ids, &counts(&g)), fused.len()), (Some(fused), 3));
        // bf16 values widened are no f16 the GEMM takes.
        let (g, ids, _) = build(DType::BF16);
        assert_eq!(find(&g, &ids, &counts(&g)), None);
    }

    #[test]
    fn attention_cast_to_f16_fuses_into_it() {
        let build = |to: DType| {
            let mut g = Graph::new();
            let q = g.new_tensor(DType::F32, &[32, 16, 2]).unwrap();
            let k = g.new_tensor(DType::F16, &[32, 16, 2]).unwrap();
            let v = g.new_tensor(DType::F16, &[32, 16, 2]).unwrap();
            let attn = g.flash_attn(q, k, v, None, 0.25).unwrap();
            let out = g.cast(attn, to).unwrap();
            g.build_forward(out).unwrap();
            let ids = g.nodes().to_vec();
            (g, ids)
        };
        let (g, ids) = build(DType::F16);
        let mut c = counts(&g);
        let fused = Fusion::FlashAttnHalf { attn: ids[0], cast: ids[1] };
        assert_eq!((find(&g, &ids, &c), fused.len()), (Some(fused), 2));
        c[ids[0].index()] += 1; // the result is read elsewhere too
        assert_eq!(find(&g, &ids, &c), None);
        let (g, ids) = build(DType::BF16);
        assert_eq!(find(&g, &ids, &counts(&g)), None);
    }

    #[test]
    fn a_swiglu_feed_forward_fuses_its_two_products() {
        let build = |up_type: DType, swap: bool| {
            let mut g = Graph::new();
            let wg = g.new_tensor(DType::Q4_0, &[64, 16]).unwrap();
            let wu = g.new_tensor(up_type, &[64, 16]).unwrap();
            let x = g.new_tensor(DType::F32, &[64, 1]).unwrap();
            let gate = g.mul_mat(wg, x).unwrap();
            let silu = g.silu(gate).unwrap();
            let up = g.mul_mat(wu, x).unwrap();
            let out = if swap { g.mul(up, silu).unwrap() } else { g.mul(silu, up).unwrap() };
            g.build_forward(out).unwrap();
            let ids = g.nodes().to_vec();
            (g, ids)
        };
        for swap in [false, true] {
            let (g, ids) = build(DType::Q4_0, swap);
            // Built from the MUL's sources in order: the up product is the first node or the third.
            let (gate, silu, up) = if swap { (ids[1], ids[2], ids[0]) } else { (ids[0], ids[1], ids[2]) };
            let f = find(&g, &ids, &counts(&g)).unwrap();
            assert_eq!((f, f.len()), (Fusion::SwiGlu { gate, up, last: ids[3] }, 4));
            // The SILU read elsewhere too: no SwiGLU (at most the two products in one launch).
            let mut c = counts(&g);
            c[silu.index()] += 1;
            assert!(!matches!(find(&g, &ids, &c), Some(Fusion::SwiGlu { .. })));
        }
        // Weights of two types: nothing.
        let (g, ids) = build(DType::Q8_0, false);
        assert_eq!(find(&g, &ids, &counts(&g)), None);
    }

    /// A decoded token's attention projections as the Llama graph builds them: keys rotated and
    /// stored into a cache, values stored, queries rotated. `extra` reads the key product too.
    fn projections_graph(extra: bool) -> (Graph, Vec<TensorId>, [TensorId; 8]) {
        use tessera_core::{RopeMode, RopeParams};
        let rope = RopeParams { mode: RopeMode::Normal, n_dims: 8, freq_base: 10000.0, freq_scale: 1.0 };
        let mut g = Graph::new();
        let x = g.new_tensor(DType::F32, &[32, 1]).unwrap();
        let [wq, wk, wv] = [32, 16, 16].map(|m| g.new_tensor(DType::Q4_0, &[32, m]).unwrap());
        let [kc, vc] = [(); 2].map(|()| g.new_tensor(DType::F16, &[16, 4]).unwrap());
        let pos = g.new_tensor(DType::I32, &[1]).unwrap();
        let k = g.mul_mat(wk, x).unwrap();
        let k3 = g.reshape(k, &[8, 2, 1]).unwrap();
        let k_rope = g.rope(k3, pos, rope).unwrap();
        let k2 = g.reshape(k_rope, &[16, 1]).unwrap();
        let key_rows = g.reshape(kc, &[16, 4]).unwrap();
        let k_store = g.set_rows(key_rows, k2, pos).unwrap();
        let v = g.mul_mat(wv, x).unwrap();
        let v_store = g.set_rows(vc, v, pos).unwrap();
        let q = g.mul_mat(wq, x).unwrap();
        let q3 = g.reshape(q, &[8, 4, 1]).unwrap();
        let q_rope = g.rope(q3, pos, rope).unwrap();
        let out = g.scale(q_rope, 2.0).unwrap();
        g.build_forward(k_store).unwrap();
        g.build_forward(v_store).unwrap();
        if extra {
            let s = g.scale(k, 2.0).unwrap();
            g.build_forward(s).unwrap();
        }
        g.build_forward(out).unwrap();
        let ids = g.nodes().to_vec();
        (g, ids, [k, k_rope, k_store, v, v_store, q, q_rope, out])
    }

    #[test]
    fn attention_projections_fuse_with_their_ropes_and_stores() {
        let (g, ids, [k, k_rope, k_store, v, v_store, q, q_rope, out]) = projections_graph(false);
        let f = find(&g, &ids, &counts(&g)).unwrap();
        let Fusion::Projections { products, nodes } = f else { panic!("{f:?}") };
        assert_eq!(
            products,
            [
                Some(Projection { mul_mat: k, rope: Some(k_rope), store: Some(k_store) }),
                Some(Projection { mul_mat: v, rope: None, store: Some(v_store) }),
                Some(Projection { mul_mat: q, rope: Some(q_rope), store: None }),
            ]
        );
        // Every node up to the query ROPE, the views between included; the SCALE is not.
        assert_eq!(ids[nodes - 1], q_rope);
        assert_eq!(ids[nodes], out);
        // The query product read elsewhere too: it is stored as it is.
        let mut c = counts(&g);
        c[q.index()] += 1;
        let Some(Fusion::Projections { products, nodes }) = find(&g, &ids, &c) else { panic!() };
        assert_eq!(products[2], Some(Projection { mul_mat: q, rope: None, store: None }));
        assert_eq!(ids[nodes - 1], q);
    }

    #[test]
    fn a_product_read_elsewhere_is_stored_as_it_is() {
        let (g, ids, [k, _, _, v, v_store, ..]) = projections_graph(true);
        // The key product is also scaled elsewhere: its ROPE and SET_ROWS run on their own, and
        // a product alone is no fusion.
        assert_eq!(ids[0], k);
        assert_eq!(find(&g, &ids, &counts(&g)), None);
        let at = ids.iter().position(|&id| id == v).unwrap();
        let Some(Fusion::Projections { products, .. }) = find(&g, &ids[at..], &counts(&g)) else { panic!() };
        assert_eq!(products[0], Some(Projection { mul_mat: v, rope: None, store: Some(v_store) }));
    }

    #[test]
    fn results_read_elsewhere_are_not_fused_away() {
        let (g, ids) = layer_norm(true);
        let mut c = counts(&g);
        c[ids[1].index()] += 1; // the product is read by another node too: stop before the ADD
        assert_eq!(find(&g, &ids, &c).map(|f| f.len()), Some(2));
        c[ids[0].index()] += 1; // the norm too: nothing
        assert_eq!(find(&g, &ids, &c), None);
    }
}
