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

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::ops::Range;

use crate::{DType, Graph, Result, TensorId};

/// The shape of a BERT model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BertConfig {
    pub vocab: usize,
    pub max_positions: usize,
    pub type_vocab: usize,
    pub hidden: usize,
    pub heads: usize,
    pub layers: usize,
    pub intermediate: usize,
    pub eps: f32,
}

impl BertConfig {
    /// all-MiniLM-L6-v2: 6 layers, hidden 384, 12 heads, intermediate 1536.
    pub const MINILM_L6: BertConfig = BertConfig {
        vocab: 30522,
        max_positions: 512,
        type_vocab: 2,
        hidden: 384,
        heads: 12,
        layers: 6,
        intermediate: 1536,
        eps: 1e-12,
    };
}

/// The modules of the model, for per-module device placement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Module {
    Embed,
    Encoder,
    Pool,
}

impl Module {
    pub const ALL: [Module; 3] = [Module::Embed, Module::Encoder, Module::Pool];

    pub const fn name(self) -> &'static str {
        match self {
            Module::Embed => "embed",
            Module::Encoder => "encoder",
            Module::Pool => "pool",
        }
    }

    /// Other names users may give the module.
    pub const fn aliases(self) -> &'static [&'static str] {
        match self {
            Module::Embed => &["embeddings", "embedding"],
            Module::Encoder => &["layers", "transformer"],
            Module::Pool => &["pooling", "pooler"],
        }
    }

    pub const fn index(self) -> usize {
        self as usize
    }
}

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
        Layout { tokens: lens.iter().sum(), rows: 1, seqs_per_row: lens.len(), longest }
    }

    /// `batch` sequences of (at most) `tokens` tokens, one per row.
    pub const fn padded(tokens: usize, batch: usize) -> Layout {
        Layout { tokens, rows: batch, seqs_per_row: 1, longest: 0 }
    }

    fn is_packed(&self) -> bool {
        self.longest > 0
    }
}

/// A built encoder graph: its inputs, output and weights.
pub struct BertGraph {
    /// I32 `[tokens * rows]`: token ids, row after row.
    pub token_ids: TensorId,
    /// I32 `[tokens * rows]`: each token's position in its own sequence.
    pub positions: TensorId,
    /// F32 `[keys, queries, 1, blocks]`: 0 where a query may attend to a key, -inf elsewhere.
    /// Padded layout: `[tokens, tokens, 1, rows]`, padding keys masked. Packed layout:
    /// `[longest, longest, 1, sequences]`, one block per sequence, keys past its end masked.
    pub attention_mask: TensorId,
    /// Packed layout only, I32 `[longest * sequences]`: the token at each slot of the
    /// attention blocks (any token for slots past a sequence's end).
    pub attention_gather: Option<TensorId>,
    /// Packed layout only, I32 `[tokens]`: each token's slot in the attention blocks.
    pub attention_scatter: Option<TensorId>,
    /// F32 `[tokens, seqs_per_row, rows]`: `1 / len(s)` where token t belongs to sequence s.
    pub pooling: TensorId,
    /// F32 `[hidden, seqs_per_row * rows]`: L2-normalised sentence embeddings.
    pub embeddings: TensorId,
    /// Every weight leaf with its checkpoint name and module.
    pub weights: Vec<(String, Module, TensorId)>,
    /// The ids of the tensors each module created (contiguous ranges, in graph order).
    pub module_tensors: Vec<(Module, Range<u32>)>,
}

impl BertGraph {
    /// The module that created `id`.
    pub fn module_of(&self, id: TensorId) -> Option<Module> {
        self.module_tensors.iter().find(|(_, r)| r.contains(&id.0)).map(|(m, _)| *m)
    }
}

struct Builder<'g, 'f> {
    g: &'g mut Graph,
    weight_type: &'f dyn Fn(&str) -> DType,
    weights: Vec<(String, Module, TensorId)>,
    module: Module,
}

impl Builder<'_, '_> {
    fn weight(&mut self, name: String, ne: &[usize]) -> Result<TensorId> {
        let id = self.g.new_tensor((self.weight_type)(&name), ne)?;
        self.g.set_name(id, &name)?;
        self.weights.push((name, self.module, id));
        Ok(id)
    }

    /// `W x + b` for a checkpoint `Linear` called `prefix`.
    fn linear(&mut self, prefix: &str, x: TensorId, n_in: usize, n_out: usize) -> Result<TensorId> {
        let w = self.weight(format!("{prefix}.weight"), &[n_in, n_out])?;
        let b = self.weight(format!("{prefix}.bias"), &[n_out])?;
        let y = self.g.mul_mat(w, x)?;
        self.g.add(y, b)
    }

    /// Layer norm over the hidden dimension with the checkpoint's `LayerNorm` called `prefix`.
    fn layer_norm(&mut self, prefix: &str, x: TensorId, n: usize, eps: f32) -> Result<TensorId> {
        let gamma = self.weight(format!("{prefix}.weight"), &[n])?;
        let beta = self.weight(format!("{prefix}.bias"), &[n])?;
        let y = self.g.norm(x, eps)?;
        let y = self.g.mul(y, gamma)?;
        self.g.add(y, beta)
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

/// The type of weight `name` in a model converted with its matrices in `matrix_type`:
/// `matrix_type` for the quantizable matrices, F32 for everything else, except that with a
/// quantized `matrix_type` the query, key and value projections and the FFN up projection
/// (the products that read a layer norm's output) stay in F16.
///
/// Why: products with quantized weights also quantize their activations to 8-bit blocks (the
/// CPU kernels' integer dot products, as in ggml), and the two roundings together cost about
/// four times what the weights' rounding alone does. all-MiniLM-L6-v2 entirely in Q8_0
/// reaches a worst cosine similarity of 0.9982 against the float64 reference (0.9996 with
/// f32 activations). Keeping one kind of matrix at a time in f32 showed the value and FFN up
/// projections to matter most and the embedding tables not at all; with these four kinds in
/// F16 (float products, f32 activations) the worst cosine is 0.9996 and the file 29.9 MB
/// (24.1 MB all Q8_0, 45 MB F16): the word embeddings, attention output and FFN down
/// projections, 72% of the matrix values, stay quantized. llama.cpp's quantization mixes
/// likewise keep a few sensitive tensors in a wider type.
pub fn converted_type(name: &str, matrix_type: DType) -> DType {
    if !is_quantizable(name) {
        return DType::F32;
    }
    let reads_layer_norm = name.contains(".attention.self.") || name.contains(".intermediate.dense.");
    if matrix_type.is_quantized() && reads_layer_norm {
        DType::F16
    } else {
        matrix_type
    }
}

/// Weight types for a model stored with its quantizable matrices in `matrix_type` and
/// everything else in F32.
pub fn uniform_weight_type(matrix_type: DType) -> impl Fn(&str) -> DType {
    move |name: &str| if is_quantizable(name) { matrix_type } else { DType::F32 }
}

/// Builds the encoder for `layout` into `g` and expands the graph to its output.
/// `weight_type` gives each weight's type by name.
pub fn build(g: &mut Graph, c: &BertConfig, weight_type: &dyn Fn(&str) -> DType, layout: Layout) -> Result<BertGraph> {
    let (h, heads) = (c.hidden, c.heads);
    let head_dim = h / heads;
    let (t, rows) = (layout.tokens, layout.rows);
    let inputs_start = g.tensors().len() as u32;
    let token_ids = g.new_tensor(DType::I32, &[t * rows])?;
    let positions = g.new_tensor(DType::I32, &[t * rows])?;
    // Attention blocks: `a` keys and queries each, `blocks` of them.
    let (a, blocks) = if layout.is_packed() { (layout.longest, layout.seqs_per_row) } else { (t, rows) };
    let attention_mask = g.new_tensor(DType::F32, &[a, a, 1, blocks])?;
    let pooling = g.new_tensor(DType::F32, &[t, layout.seqs_per_row, rows])?;
    let mut inputs = alloc::vec![
        (token_ids, "token_ids"),
        (positions, "positions"),
        (attention_mask, "attention_mask"),
        (pooling, "pooling")
    ];
    let (attention_gather, attention_scatter) = if layout.is_packed() {
        let gather = g.new_tensor(DType::I32, &[a * blocks])?;
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

    // Embeddings: word + position + token type 0, then layer norm.
    let start = inputs_start;
    let word = b.weight("embeddings.word_embeddings.weight".into(), &[h, c.vocab])?;
    let pos = b.weight("embeddings.position_embeddings.weight".into(), &[h, c.max_positions])?;
    let types = b.weight("embeddings.token_type_embeddings.weight".into(), &[h, c.type_vocab])?;
    let x = b.g.get_rows(word, token_ids)?;
    let p = b.g.get_rows(pos, positions)?;
    let x = b.g.add(x, p)?;
    let type0 = b.g.view_1d(types, h, 0)?;
    let x = b.g.add(x, type0)?;
    let x = b.g.reshape(x, &[h, t, rows])?;
    let mut x = b.layer_norm("embeddings.LayerNorm", x, h, c.eps)?;
    module_tensors.push((Module::Embed, start..b.next_id()));

    b.module = Module::Encoder;
    let start = b.next_id();
    let scale = 1.0 / libm::sqrtf(head_dim as f32);
    for layer in 0..c.layers {
        let pre = format!("encoder.layer.{layer}");
        // Self-attention in blocks of `a` tokens (rows, or packed sequences gathered into
        // padded blocks), heads split as [head_dim, tokens, heads, blocks].
        let q = b.linear(&format!("{pre}.attention.self.query"), x, h, h)?;
        let k = b.linear(&format!("{pre}.attention.self.key"), x, h, h)?;
        let v = b.linear(&format!("{pre}.attention.self.value"), x, h, h)?;
        let [q, k, v] = match attention_gather {
            Some(gather) => {
                let mut gathered = [q, k, v];
                for y in &mut gathered {
                    let flat = b.g.reshape(*y, &[h, t])?;
                    *y = b.g.get_rows(flat, gather)?; // [h, a * blocks]
                }
                gathered
            }
            None => [q, k, v],
        };
        let q = b.g.reshape(q, &[head_dim, heads, a, blocks])?;
        let q = b.g.permute(q, [0, 2, 1, 3])?;
        let k = b.g.reshape(k, &[head_dim, heads, a, blocks])?;
        let k = b.g.permute(k, [0, 2, 1, 3])?;
        let v = b.g.reshape(v, &[head_dim, heads, a, blocks])?;
        let v = b.g.permute(v, [1, 2, 0, 3])?;
        let v = b.g.cont(v)?; // [tokens, head_dim, heads, blocks]
        let scores = b.g.mul_mat(k, q)?; // [keys, queries, heads, blocks]
        let probs = b.g.soft_max(scores, Some(attention_mask), scale)?;
        let ctx = b.g.mul_mat(v, probs)?; // [head_dim, queries, heads, blocks]
        let ctx = b.g.permute(ctx, [0, 2, 1, 3])?;
        let ctx = b.g.cont(ctx)?;
        let ctx = match attention_scatter {
            Some(scatter) => {
                let flat = b.g.reshape(ctx, &[h, a * blocks])?;
                b.g.get_rows(flat, scatter)? // [h, t]
            }
            None => ctx,
        };
        let ctx = b.g.reshape(ctx, &[h, t, rows])?;
        let attn = b.linear(&format!("{pre}.attention.output.dense"), ctx, h, h)?;
        let attn = b.g.add(attn, x)?;
        let attn = b.layer_norm(&format!("{pre}.attention.output.LayerNorm"), attn, h, c.eps)?;
        // Feed-forward.
        let up = b.linear(&format!("{pre}.intermediate.dense"), attn, h, c.intermediate)?;
        let up = b.g.gelu_erf(up)?;
        let down = b.linear(&format!("{pre}.output.dense"), up, c.intermediate, h)?;
        let down = b.g.add(down, attn)?;
        x = b.layer_norm(&format!("{pre}.output.LayerNorm"), down, h, c.eps)?;
    }
    module_tensors.push((Module::Encoder, start..b.next_id()));

    // Mean over each sequence's tokens, then L2 normalisation (RMS norm scaled by 1/sqrt(h)).
    b.module = Module::Pool;
    let start = b.next_id();
    let by_token = b.g.transpose(x)?;
    let by_token = b.g.cont(by_token)?; // [tokens, hidden, rows]
    let mean = b.g.mul_mat(by_token, pooling)?; // [hidden, seqs_per_row, rows]
    let mean = b.g.reshape(mean, &[h, layout.seqs_per_row * rows])?;
    let unit = b.g.rms_norm(mean, 1e-12)?;
    let embeddings = b.g.scale(unit, 1.0 / libm::sqrtf(h as f32))?;
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
    })
}

/// The values of the inputs for sequences of the given lengths.
pub struct PackedInputs {
    pub positions: Vec<i32>,
    pub attention_mask: Vec<f32>,
    pub pooling: Vec<f32>,
    /// Packed layout only (empty otherwise): see [`BertGraph::attention_gather`].
    pub attention_gather: Vec<i32>,
    /// Packed layout only (empty otherwise): see [`BertGraph::attention_scatter`].
    pub attention_scatter: Vec<i32>,
}

/// Positions, the attention blocks' gather and scatter indices and mask, and the pooling
/// matrix for sequences of lengths `lens` packed one after another into one row
/// ([`Layout::packed`]).
pub fn packed_inputs(lens: &[usize]) -> PackedInputs {
    let t: usize = lens.iter().sum();
    let a = lens.iter().copied().max().unwrap_or(0);
    let mut positions = Vec::with_capacity(t);
    let mut attention_gather = alloc::vec![0i32; a * lens.len()];
    let mut attention_scatter = Vec::with_capacity(t);
    let mut attention_mask = alloc::vec![f32::NEG_INFINITY; a * a * lens.len()];
    let mut pooling = alloc::vec![0.0f32; t * lens.len()];
    let mut start = 0;
    for (s, &len) in lens.iter().enumerate() {
        positions.extend((0..len).map(|p| p as i32));
        for p in 0..len {
            attention_gather[s * a + p] = (start + p) as i32;
            attention_scatter.push((s * a + p) as i32);
            pooling[s * t + start + p] = 1.0 / len as f32;
        }
        // Every query slot (padding ones too, whose results are dropped) sees the keys of
        // its own sequence.
        for q in 0..a {
            attention_mask[(s * a + q) * a..][..len].fill(0.0);
        }
        start += len;
    }
    PackedInputs { positions, attention_mask, pooling, attention_gather, attention_scatter }
}

/// The same for sequences padded to `tokens` each, one per row ([`Layout::padded`]):
/// padding keys are masked out and padding tokens left out of the mean.
pub fn padded_inputs(lens: &[usize], tokens: usize) -> PackedInputs {
    let rows = lens.len();
    let mut positions = Vec::with_capacity(tokens * rows);
    let mut attention_mask = alloc::vec![f32::NEG_INFINITY; tokens * tokens * rows];
    let mut pooling = alloc::vec![0.0f32; tokens * rows];
    for (r, &len) in lens.iter().enumerate() {
        let len = len.min(tokens);
        positions.extend((0..tokens).map(|p| p as i32));
        for q in 0..tokens {
            for k in 0..len {
                attention_mask[(r * tokens + q) * tokens + k] = 0.0;
            }
        }
        for tok in 0..len {
            pooling[r * tokens + tok] = 1.0 / len as f32;
        }
    }
    PackedInputs { positions, attention_mask, pooling, attention_gather: Vec::new(), attention_scatter: Vec::new() }
}
