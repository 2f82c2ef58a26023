//! A BERT encoder (the all-MiniLM-L6-v2 family) as a tessera graph: embeddings, a stack of
//! post-norm transformer layers, and masked mean pooling with L2 normalisation.
//!
//! Tokens are laid out in `rows` rows of `tokens` each. A row holds one padded sequence, or
//! several sequences packed one after another (no padding), and the pooling matrix averages
//! each sequence's tokens. Packed sequences share every layer but attention: for it their
//! queries, keys and values are gathered (GET_ROWS) into one padded block per sequence, so
//! that attention costs the sum of the squared lengths rather than the square of their total,
//! and the results are gathered back into the packed order.
//!
//! Weights are leafs named as in the Hugging Face checkpoints ("encoder.layer.0.output.dense.weight")
//! so a loader can bind them by name. Linear weights are `[in, out]` in tessera's order (the
//! checkpoint's `[out, in]` row-major matrix, byte for byte).

use std::ops::Range;

use tessera_core::{DType, Graph, Precision, TensorId};

use crate::config::BertConfig;
use crate::error::{Error, Result};
use crate::module::Module;

/// How tokens are laid out: `rows` rows of `tokens` tokens, each row holding
/// `seqs_per_row` sequences; packed sequences attend in blocks of `longest` tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub tokens: usize,
    pub rows: usize,
    pub seqs_per_row: usize,
    /// The longest packed sequence (0 for the padded layout).
    pub longest: usize,
}

impl Layout {
    /// Sequences of lengths `lens` packed into one row.
    pub fn packed(lens: &[usize]) -> Layout {
        let longest = lens.iter().copied().max().unwrap_or(0);
        Layout { tokens: lens.iter().fold(0, |a, &b| a.saturating_add(b)), rows: 1, seqs_per_row: lens.len(), longest }
    }

    /// `batch` sequences of (at most) `tokens` tokens, one per row.
    pub const fn padded(tokens: usize, batch: usize) -> Layout {
        Layout { tokens, rows: batch, seqs_per_row: 1, longest: 0 }
    }

    /// The layout for one batch of sequences of lengths `lens`: padded rows when every
    /// sequence has the same length (no padding then, and no gathering into attention blocks),
    /// else packed.
    pub fn for_lengths(lens: &[usize]) -> Layout {
        match lens.split_first() {
            Some((&first, rest)) if first > 0 && rest.iter().all(|&l| l == first) => Layout::padded(first, lens.len()),
            _ => Layout::packed(lens),
        }
    }

    pub(crate) fn is_packed(&self) -> bool {
        self.longest > 0
    }
}

/// A built encoder graph: its inputs, output and weights.
pub struct BertGraph {
    /// I32 `[tokens * rows]`: token ids, row after row.
    pub token_ids: TensorId,
    /// I32 `[tokens * rows]`: each token's position in its own sequence.
    pub positions: TensorId,
    /// F32 `[keys, 1, 1, blocks]`: 0 where the queries of a block may attend to a key, -inf
    /// elsewhere (the same for every query of the block). Padded layout: `[tokens, 1, 1, rows]`,
    /// padding keys masked. Packed layout: `[longest, 1, 1, sequences]`, one block per
    /// sequence, keys past its end masked.
    pub attention_mask: TensorId,
    /// Packed layout only, I32 `[longest * sequences]`: the token at each slot of the
    /// attention blocks (any token for slots past a sequence's end).
    pub attention_gather: Option<TensorId>,
    /// Packed layout only, I32 `[tokens]`: each token's slot in the attention blocks.
    pub attention_scatter: Option<TensorId>,
    /// F32 `[slots, 1, blocks]`: `1 / len(s)` at the slots of block s that hold its tokens, 0
    /// at padding slots (slots and blocks as the attention mask's keys and blocks).
    pub pooling: TensorId,
    /// F32 `[hidden, seqs_per_row * rows]`: L2-normalised sentence embeddings.
    pub embeddings: TensorId,
    /// Every weight leaf with its checkpoint name and module.
    pub weights: Vec<(String, Module, TensorId)>,
    /// The ids of the tensors each module created (contiguous ranges, in graph order).
    pub module_tensors: Vec<(Module, Range<u32>)>,
    /// The ids of the tensors each encoder layer created, layer after layer.
    pub layer_tensors: Vec<Range<u32>>,
}

impl BertGraph {
    /// The module that created `id`.
    pub fn module_of(&self, id: TensorId) -> Option<Module> {
        self.module_tensors.iter().find(|(_, r)| r.contains(&id.0)).map(|(m, _)| *m)
    }

    /// The encoder layer that created `id` (weights included), if one did.
    pub fn layer_of(&self, id: TensorId) -> Option<usize> {
        self.layer_tensors.iter().position(|r| r.contains(&id.0))
    }
}

struct Builder<'g, 'f> {
    g: &'g mut Graph,
    weight_type: &'f dyn Fn(&str) -> DType,
    weights: Vec<(String, Module, TensorId)>,
    module: Module,
}

impl Builder<'_, '_> {
    fn weight(&mut self, name: String, ne: &[usize]) -> tessera_core::Result<TensorId> {
        let dtype = (self.weight_type)(&name);
        self.weight_of(dtype, name, ne)
    }

    /// A weight of type `dtype`, whatever the file holds it in.
    fn weight_of(&mut self, dtype: DType, name: String, ne: &[usize]) -> tessera_core::Result<TensorId> {
        let id = self.g.new_tensor(dtype, ne)?;
        self.g.set_name(id, &name)?;
        self.weights.push((name, self.module, id));
        Ok(id)
    }

    /// `W x + b` for a checkpoint `Linear` called `prefix`.
    fn linear(&mut self, prefix: &str, x: TensorId, n_in: usize, n_out: usize) -> tessera_core::Result<TensorId> {
        let w = self.weight(format!("{prefix}.weight"), &[n_in, n_out])?;
        let b = self.weight(format!("{prefix}.bias"), &[n_out])?;
        let y = self.g.mul_mat(w, x)?;
        self.g.add(y, b)
    }

    /// [`Builder::linear`] in reduced precision: the bias an f16 weight (rounded once, where it
    /// is placed), the sum rounded to f16 (a GPU writes it from the product, as f16, adding
    /// the f16 bias on the way).
    fn linear_half(&mut self, prefix: &str, x: TensorId, n_in: usize, n_out: usize) -> tessera_core::Result<TensorId> {
        let w = self.weight(format!("{prefix}.weight"), &[n_in, n_out])?;
        let b = self.weight_of(DType::F16, format!("{prefix}.bias"), &[n_out])?;
        let y = self.g.mul_mat(w, x)?;
        let y = self.g.add(y, b)?;
        self.g.cast(y, DType::F16)
    }

    /// Layer norm over the hidden dimension with the checkpoint's `LayerNorm` called `prefix`.
    fn layer_norm(&mut self, prefix: &str, x: TensorId, n: usize, eps: f32) -> tessera_core::Result<TensorId> {
        let gamma = self.weight(format!("{prefix}.weight"), &[n])?;
        let beta = self.weight(format!("{prefix}.bias"), &[n])?;
        let y = self.g.norm(x, eps)?;
        let y = self.g.mul(y, gamma)?;
        self.g.add(y, beta)
    }

    /// `x` as an f32 operand (a product's b, a residual ADD's first source): f16 values
    /// widened by a CPY of their own, which a GPU fuses into the node reading it (which then
    /// reads the f16 values as they are); f32 values as they are.
    fn widened(&mut self, x: TensorId) -> tessera_core::Result<TensorId> {
        if self.g.tensor(x)?.dtype() == DType::F16 {
            self.g.cast(x, DType::F32)
        } else {
            Ok(x)
        }
    }

    fn next_id(&self) -> u32 {
        self.g.tensors().len() as u32
    }
}

/// Whether a weight may be stored in any type: the matrices that matrix products and row
/// lookups read. Biases, layer norms and the token-type table are added element-wise and
/// stay in a float type.
pub fn is_quantizable(name: &str) -> bool {
    name.ends_with(".weight") && !name.contains("LayerNorm") && !name.contains("token_type_embeddings")
}

/// The stem of the weight and bias that join a layer's query, key and value projections
/// (`encoder.layer.N.attention.self.qkv.weight`): one product for the three.
const QKV: &str = ".attention.self.qkv";

/// The checkpoint's weights that make the graph's weight `name`, in order: a joined query, key
/// and value weight (or bias) is their three, joined along the output rows; any other weight
/// is itself.
pub fn weight_parts(name: &str) -> Vec<String> {
    match name.rsplit_once('.') {
        Some((stem, kind)) if stem.ends_with(QKV) => {
            let prefix = &stem[..stem.len() - "qkv".len()];
            ["query", "key", "value"].iter().map(|p| format!("{prefix}{p}.{kind}")).collect()
        }
        _ => vec![name.to_string()],
    }
}

/// Weight types for a model stored with its quantizable matrices in `matrix_type` and
/// everything else in F32.
pub fn uniform_weight_type(matrix_type: DType) -> impl Fn(&str) -> DType {
    move |name: &str| if is_quantizable(name) { matrix_type } else { DType::F32 }
}

/// Builds the encoder for `layout` into `g` and expands the graph to its output.
/// `weight_type` gives each weight's type by name. Attention is products and a soft-max
/// (see [`build_with`]).
pub fn build(g: &mut Graph, c: &BertConfig, weight_type: &dyn Fn(&str) -> DType, layout: Layout) -> Result<BertGraph> {
    build_with(g, c, weight_type, layout, &|_| None)
}

/// [`build`], with the layers for which `flash_attn(layer)` gives a precision computing
/// attention as one FLASH_ATTN node of that precision (no score matrix in memory) instead of
/// products and a soft-max. Those layers take their queries, keys and values from one product
/// (a weight and a bias joined from the checkpoint's three, [`weight_parts`]) where the three
/// weights share a type. Those layers in reduced precision keep attention's queries, keys,
/// values and result, the feed-forward's hidden values, the output projections' results and
/// the residual stream (the layer norms' results) in f16, declare their linear layers' biases
/// as f16 weights (rounded once where they are placed), and take those hidden values through
/// GELU's tanh approximation instead of its erf form.
pub fn build_with(
    g: &mut Graph,
    c: &BertConfig,
    weight_type: &dyn Fn(&str) -> DType,
    layout: Layout,
    flash_attn: &dyn Fn(usize) -> Option<Precision>,
) -> Result<BertGraph> {
    c.validate().map_err(|e| Error::InvalidConfig { message: e.message })?;
    let (h, heads) = (c.hidden, c.heads);
    let head_dim = h / heads;
    let (t, rows) = (layout.tokens, layout.rows);
    let inputs_start = g.tensors().len() as u32;
    let product = |a: usize, b: usize| a.checked_mul(b).ok_or(tessera_core::Error::Overflow { what: "BERT layout" });
    let token_ids = g.new_tensor(DType::I32, &[product(t, rows)?])?;
    let positions = g.new_tensor(DType::I32, &[product(t, rows)?])?;
    // Attention blocks: `a` keys and queries each, `blocks` of them.
    let (a, blocks) = if layout.is_packed() { (layout.longest, layout.seqs_per_row) } else { (t, rows) };
    let attention_mask = g.new_tensor(DType::F32, &[a, 1, 1, blocks])?;
    let pooling = g.new_tensor(DType::F32, &[a, 1, blocks])?;
    let mut inputs = vec![
        (token_ids, "token_ids"),
        (positions, "positions"),
        (attention_mask, "attention_mask"),
        (pooling, "pooling"),
    ];
    let (attention_gather, attention_scatter) = if layout.is_packed() {
        let gather = g.new_tensor(DType::I32, &[product(a, blocks)?])?;
        let scatter = g.new_tensor(DType::I32, &[t])?;
        inputs.extend([(gather, "attention_gather"), (scatter, "attention_scatter")]);
        (Some(gather), Some(scatter))
    } else {
        (None, None)
    };
    for (id, name) in inputs {
        g.set_name(id, name)?;
        g.set_input(id)?;
    }
    let mut b = Builder { g, weight_type, weights: Vec::new(), module: Module::Embed };
    let mut module_tensors = Vec::new();

    // Embeddings: word + token type 0 + position, then layer norm (the last ADD right before
    // the norm, which a GPU fuses into it as a residual connection).
    let start = inputs_start;
    let word = b.weight("embeddings.word_embeddings.weight".into(), &[h, c.vocab])?;
    let pos = b.weight("embeddings.position_embeddings.weight".into(), &[h, c.max_positions])?;
    let types = b.weight("embeddings.token_type_embeddings.weight".into(), &[h, c.type_vocab])?;
    let x = b.g.get_rows(word, token_ids)?;
    let x = b.g.reshape(x, &[h, t, rows])?;
    let type0 = b.g.view_1d(types, h, 0)?;
    let x = b.g.add(x, type0)?;
    let p = b.g.get_rows(pos, positions)?;
    let p = b.g.reshape(p, &[h, t, rows])?;
    let x = b.g.add(x, p)?;
    let mut x = b.layer_norm("embeddings.LayerNorm", x, h, c.eps)?;
    // The residual stream is f16 where the layer reading it is in reduced precision (its
    // products and residual ADDs read it so); the rounding is the CPY's, which a GPU fuses into
    // the norm.
    let reduced_at = |layer: usize| layer < c.layers && flash_attn(layer) == Some(Precision::Reduced);
    if reduced_at(0) {
        x = b.g.cast(x, DType::F16)?;
    }
    module_tensors.push((Module::Embed, start..b.next_id()));

    b.module = Module::Encoder;
    let start = b.next_id();
    let scale = 1.0 / (head_dim as f32).sqrt();
    let mut layer_tensors = Vec::with_capacity(c.layers);
    for layer in 0..c.layers {
        let layer_start = b.next_id();
        let pre = format!("encoder.layer.{layer}");
        let flash = flash_attn(layer);
        let reduced = reduced_at(layer);
        // Self-attention in blocks of `a` tokens (rows, or packed sequences gathered into
        // padded blocks), heads split as [head_dim, tokens, heads, blocks].
        // With attention as one FLASH_ATTN node and the three weights of one type, one product
        // gives the queries, keys and values (their weights and biases joined when placed; in
        // f16 in reduced precision), and the heads are views of its rows; else three products,
        // each gathered and reshaped.
        let projections = ["query", "key", "value"].map(|p| format!("{pre}.attention.self.{p}"));
        let types = projections.each_ref().map(|p| (b.weight_type)(&format!("{p}.weight")));
        let [q, k, v] = if flash.is_some() && types.iter().all(|&t| t == types[0]) {
            let input = b.widened(x)?;
            let name = format!("{pre}{QKV}");
            let qkv = if reduced { b.linear_half(&name, input, h, 3 * h)? } else { b.linear(&name, input, h, 3 * h)? };
            let qkv = match attention_gather {
                Some(gather) => {
                    let flat = b.g.reshape(qkv, &[3 * h, t])?;
                    // [3h, a * blocks] in f32: f16 values are taken back to f16, exactly.
                    let gathered = b.g.get_rows(flat, gather)?;
                    if reduced {
                        b.g.cast(gathered, DType::F16)?
                    } else {
                        gathered
                    }
                }
                None => qkv, // [3h, t, rows]
            };
            let es = b.g.tensor(qkv)?.dtype().block_bytes();
            let mut heads_of = |j: usize| {
                let nb = [head_dim * es, 3 * h * es, 3 * h * es * a];
                b.g.view(qkv, [head_dim, heads, a, blocks], nb, j * h * es)
            };
            [heads_of(0)?, heads_of(1)?, heads_of(2)?]
        } else {
            let mut projected = Vec::with_capacity(3);
            for prefix in &projections {
                let input = b.widened(x)?;
                let mut y = if reduced { b.linear_half(prefix, input, h, h)? } else { b.linear(prefix, input, h, h)? };
                if let Some(gather) = attention_gather {
                    let flat = b.g.reshape(y, &[h, t])?;
                    y = b.g.get_rows(flat, gather)?; // [h, a * blocks]
                    if reduced {
                        // Gathering gives f32: f16 values are taken back to f16, exactly.
                        y = b.g.cast(y, DType::F16)?;
                    }
                }
                projected.push(b.g.reshape(y, &[head_dim, heads, a, blocks])?);
            }
            [projected[0], projected[1], projected[2]]
        };
        let q = b.g.permute(q, [0, 2, 1, 3])?;
        let k = b.g.permute(k, [0, 2, 1, 3])?;
        let ctx = if let Some(precision) = flash {
            let v = b.g.permute(v, [0, 2, 1, 3])?;
            let ctx = b.g.flash_attn(q, k, v, Some(attention_mask), scale)?; // [head_dim, heads, queries, blocks]
            b.g.set_flash_attn_precision(ctx, precision)?;
            // In reduced precision attention's result is f16 too (a GPU writes it so).
            if reduced {
                b.g.cast(ctx, DType::F16)?
            } else {
                ctx
            }
        } else {
            let v = b.g.permute(v, [1, 2, 0, 3])?;
            let v = b.g.cont(v)?; // [tokens, head_dim, heads, blocks]
            let scores = b.g.mul_mat(k, q)?; // [keys, queries, heads, blocks]
            let probs = b.g.soft_max(scores, Some(attention_mask), scale)?;
            let ctx = b.g.mul_mat(v, probs)?; // [head_dim, queries, heads, blocks]
            let ctx = b.g.permute(ctx, [0, 2, 1, 3])?;
            b.g.cont(ctx)?
        };
        let ctx = match attention_scatter {
            Some(scatter) => {
                let flat = b.g.reshape(ctx, &[h, product(a, blocks)?])?;
                b.g.get_rows(flat, scatter)? // [h, t]
            }
            None => ctx,
        };
        let ctx = b.g.reshape(ctx, &[h, t, rows])?;
        let ctx = b.widened(ctx)?;
        // In reduced precision the projection's result is f16, widened for the residual ADD
        // (which a GPU fuses into the layer norm after it).
        let attn = if reduced {
            let attn = b.linear_half(&format!("{pre}.attention.output.dense"), ctx, h, h)?;
            b.widened(attn)?
        } else {
            b.linear(&format!("{pre}.attention.output.dense"), ctx, h, h)?
        };
        let attn = b.g.add(attn, x)?;
        let attn = b.layer_norm(&format!("{pre}.attention.output.LayerNorm"), attn, h, c.eps)?;
        let attn = if reduced { b.g.cast(attn, DType::F16)? } else { attn };
        // Feed-forward.
        // In reduced precision the feed-forward's hidden values are f16, taken through GELU's
        // tanh form (at most 4.8e-4 from the erf form, about one f16 step of the values where
        // they differ most), which a GPU applies as the first product writes them, and widened
        // for the second product (which a GPU fuses into reading them).
        let up = if reduced {
            let input = b.widened(attn)?;
            let up = b.linear_half(&format!("{pre}.intermediate.dense"), input, h, c.intermediate)?;
            let up = b.g.gelu(up)?;
            b.g.cast(up, DType::F32)?
        } else {
            let up = b.linear(&format!("{pre}.intermediate.dense"), attn, h, c.intermediate)?;
            b.g.gelu_erf(up)?
        };
        let down = if reduced {
            let down = b.linear_half(&format!("{pre}.output.dense"), up, c.intermediate, h)?;
            b.widened(down)?
        } else {
            b.linear(&format!("{pre}.output.dense"), up, c.intermediate, h)?
        };
        let down = b.g.add(down, attn)?;
        x = b.layer_norm(&format!("{pre}.output.LayerNorm"), down, h, c.eps)?;
        // The residual stream stays f16 into the next reduced layer, and after a last reduced
        // layer into the pooling, whose mean sums in f32 (a GPU reads half the bytes there).
        if reduced_at(layer + 1) || (reduced && layer + 1 == c.layers) {
            x = b.g.cast(x, DType::F16)?;
        }
        layer_tensors.push(layer_start..b.next_id());
    }
    module_tensors.push((Module::Encoder, start..b.next_id()));

    // Mean over each sequence's tokens, taken in the attention blocks (one sequence each, so
    // the pooling weights grow with the tokens, not with tokens times sequences), then L2
    // normalisation (RMS norm scaled by 1/sqrt(h)).
    b.module = Module::Pool;
    let start = b.next_id();
    let x = match attention_gather {
        Some(gather) => {
            let flat = b.g.reshape(x, &[h, t])?;
            b.g.get_rows(flat, gather)? // [h, a * blocks]
        }
        None => x,
    };
    let x = b.g.reshape(x, &[h, a, blocks])?;
    let by_slot = b.g.transpose(x)?;
    let by_slot = b.g.cont(by_slot)?; // [slots, hidden, blocks]
    let mean = b.g.mul_mat(by_slot, pooling)?; // [hidden, 1, blocks]
    let mean = b.g.reshape(mean, &[h, blocks])?;
    let unit = b.g.rms_norm(mean, 1e-12)?;
    let embeddings = b.g.scale(unit, 1.0 / (h as f32).sqrt())?;
    module_tensors.push((Module::Pool, start..b.next_id()));
    let weights = b.weights;
    g.set_name(embeddings, "embeddings")?;
    g.set_output(embeddings)?;
    g.build_forward(embeddings)?;
    Ok(BertGraph {
        token_ids,
        positions,
        attention_mask,
        attention_gather,
        attention_scatter,
        pooling,
        embeddings,
        weights,
        module_tensors,
        layer_tensors,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::test_model::TINY;

    fn ne(g: &Graph, id: TensorId) -> [usize; 4] {
        g.tensor(id).unwrap().ne()
    }

    #[test]
    fn padded_layout_shapes() {
        let mut g = Graph::new();
        let m = build(&mut g, &TINY, &uniform_weight_type(DType::F32), Layout::padded(8, 3)).unwrap();
        assert_eq!(ne(&g, m.token_ids), [24, 1, 1, 1]);
        assert_eq!(ne(&g, m.positions), [24, 1, 1, 1]);
        assert_eq!(ne(&g, m.attention_mask), [8, 1, 1, 3]);
        assert_eq!(ne(&g, m.pooling), [8, 1, 3, 1]);
        assert_eq!(ne(&g, m.embeddings), [TINY.hidden, 3, 1, 1]);
        assert!(m.attention_gather.is_none() && m.attention_scatter.is_none());
        assert_eq!(g.tensor(m.embeddings).unwrap().dtype(), DType::F32);
    }

    #[test]
    fn equal_lengths_take_the_padded_layout() {
        assert_eq!(Layout::for_lengths(&[4, 4, 4]), Layout::padded(4, 3));
        assert_eq!(Layout::for_lengths(&[4, 3]), Layout::packed(&[4, 3]));
        assert_eq!(Layout::for_lengths(&[5]), Layout::padded(5, 1));
    }

    #[test]
    fn packed_layout_shapes() {
        let mut g = Graph::new();
        let m = build(&mut g, &TINY, &uniform_weight_type(DType::F32), Layout::packed(&[3, 5, 2])).unwrap();
        assert_eq!(ne(&g, m.token_ids), [10, 1, 1, 1]);
        assert_eq!(ne(&g, m.attention_mask), [5, 1, 1, 3]);
        assert_eq!(ne(&g, m.attention_gather.unwrap()), [15, 1, 1, 1]);
        assert_eq!(ne(&g, m.attention_scatter.unwrap()), [10, 1, 1, 1]);
        assert_eq!(ne(&g, m.pooling), [5, 1, 3, 1]);
        assert_eq!(ne(&g, m.embeddings), [TINY.hidden, 3, 1, 1]);
    }

    /// The mean pooling reads the last layer's states in f16 when that layer is in reduced
    /// precision and the rows hold one sequence each (a GPU reads half the bytes), and in f32
    /// otherwise: packed sequences are gathered into blocks first, and GET_ROWS gives f32.
    #[test]
    fn the_pooling_reads_the_last_layers_states_in_its_precision() {
        for flash in [Some(Precision::Reduced), Some(Precision::Full), None] {
            for (layout, padded) in [(Layout::padded(8, 2), true), (Layout::packed(&[5, 3]), false)] {
                let mut g = Graph::new();
                let m = build_with(&mut g, &TINY, &uniform_weight_type(DType::F16), layout, &|_| flash).unwrap();
                let mean = g
                    .nodes()
                    .iter()
                    .map(|&id| g.tensor(id).unwrap())
                    .find(|t| t.op() == tessera_core::Op::MulMat && t.src(1) == Some(m.pooling));
                let states = g.tensor(mean.unwrap().src(0).unwrap()).unwrap();
                let want = if flash == Some(Precision::Reduced) && padded { DType::F16 } else { DType::F32 };
                assert_eq!(states.dtype(), want, "{flash:?} {layout:?}");
            }
        }
    }

    /// Layers with attention as one FLASH_ATTN node join their query, key and value projections
    /// into one weight of their parts' type (and one bias, f16 in reduced precision), unless the
    /// parts' types differ (a mixed quantization); layers with attention as products do not.
    #[test]
    fn flash_attention_layers_join_their_projections_when_the_weights_share_a_type() {
        let cases = [
            (Some(Precision::Reduced), false, DType::F16),
            (Some(Precision::Reduced), true, DType::F16),
            (Some(Precision::Full), false, DType::F32),
            (None, false, DType::F32),
        ];
        for (flash, mixed, bias_type) in cases {
            let mut g = Graph::new();
            let weight_type = move |name: &str| match name {
                _ if mixed && name.ends_with("key.weight") => DType::BF16,
                _ if is_quantizable(name) => DType::F16,
                _ => DType::F32,
            };
            let m = build_with(&mut g, &TINY, &weight_type, Layout::padded(8, 2), &|_| flash).unwrap();
            let find = |name: &str| m.weights.iter().find(|(n, _, _)| n == name).map(|(_, _, id)| *id);
            let qkv = find("encoder.layer.0.attention.self.qkv.weight");
            let joined = flash.is_some() && !mixed;
            assert_eq!(qkv.is_some(), joined, "{flash:?} {mixed}");
            assert_eq!(find("encoder.layer.0.attention.self.key.weight").is_some(), !joined);
            if let Some(qkv) = qkv {
                let t = g.tensor(qkv).unwrap();
                assert_eq!((t.dtype(), t.ne()), (DType::F16, [TINY.hidden, 3 * TINY.hidden, 1, 1]));
                let bias = g.tensor(find("encoder.layer.0.attention.self.qkv.bias").unwrap()).unwrap();
                assert_eq!((bias.dtype(), bias.ne()), (bias_type, [3 * TINY.hidden, 1, 1, 1]));
            }
        }
        let parts = weight_parts("encoder.layer.3.attention.self.qkv.bias");
        assert_eq!(parts, ["query", "key", "value"].map(|p| format!("encoder.layer.3.attention.self.{p}.bias")));
        assert_eq!(weight_parts("encoder.layer.3.output.dense.weight"), ["encoder.layer.3.output.dense.weight"]);
    }

    #[test]
    fn weights_are_named_shaped_and_typed_as_in_the_checkpoint() {
        let mut g = Graph::new();
        let m = build(&mut g, &TINY, &uniform_weight_type(DType::Q8_0), Layout::packed(&[4])).unwrap();
        assert_eq!(m.weights.len(), 5 + 16 * TINY.layers);
        let find = |name: &str| m.weights.iter().find(|w| w.0 == name).unwrap();
        let (h, i) = (TINY.hidden, TINY.intermediate);
        let word = find("embeddings.word_embeddings.weight");
        assert_eq!((word.1, ne(&g, word.2)), (Module::Embed, [h, TINY.vocab, 1, 1]));
        assert_eq!(g.tensor(word.2).unwrap().dtype(), DType::Q8_0);
        assert_eq!(g.tensor(word.2).unwrap().name(), "embeddings.word_embeddings.weight");
        let up = find("encoder.layer.1.intermediate.dense.weight");
        assert_eq!((up.1, ne(&g, up.2)), (Module::Encoder, [h, i, 1, 1]));
        let down = find("encoder.layer.1.output.dense.weight");
        assert_eq!(ne(&g, down.2), [i, h, 1, 1]);
        let norm = find("encoder.layer.0.output.LayerNorm.weight");
        assert_eq!((ne(&g, norm.2), g.tensor(norm.2).unwrap().dtype()), ([h, 1, 1, 1], DType::F32));
        let types = find("embeddings.token_type_embeddings.weight");
        assert_eq!(g.tensor(types.2).unwrap().dtype(), DType::F32);
        assert!(m.weights.iter().all(|w| w.1 != Module::Pool), "pooling has no weights");
    }

    #[test]
    fn every_node_belongs_to_one_module_in_order() {
        let mut g = Graph::new();
        let m = build(&mut g, &TINY, &uniform_weight_type(DType::F32), Layout::packed(&[2, 3])).unwrap();
        assert_eq!(m.module_tensors.iter().map(|(m, _)| *m).collect::<Vec<_>>(), Module::ALL);
        for &id in g.nodes() {
            assert!(m.module_of(id).is_some(), "node {id:?} has no module");
        }
        assert_eq!(m.module_of(m.token_ids), Some(Module::Embed));
        assert_eq!(m.module_of(m.embeddings), Some(Module::Pool));
        let ranges: Vec<_> = m.module_tensors.iter().map(|(_, r)| r.clone()).collect();
        assert!(ranges.windows(2).all(|w| w[0].end == w[1].start), "{ranges:?}");
    }

    #[test]
    fn layouts_whose_sizes_overflow_are_errors() {
        let layout = Layout { tokens: usize::MAX / 2, rows: 3, seqs_per_row: 1, longest: 0 };
        let err = build(&mut Graph::new(), &TINY, &uniform_weight_type(DType::F32), layout).err().unwrap();
        assert!(matches!(err, Error::Engine(tessera_core::Error::Overflow { .. })), "{err:?}");
    }

    #[test]
    fn heads_that_do_not_divide_the_hidden_size_are_an_error() {
        for heads in [0, 5, usize::MAX] {
            let c = BertConfig { heads, ..TINY };
            let err =
                build(&mut Graph::new(), &c, &uniform_weight_type(DType::F32), Layout::packed(&[1])).err().unwrap();
            assert!(matches!(err, Error::InvalidConfig { .. }), "{err:?}");
            assert!(
                err.to_string().starts_with(&format!("invalid model config: num_attention_heads is {heads}")),
                "{err}"
            );
        }
    }
}
