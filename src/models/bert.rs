//! A BERT encoder (the all-MiniLM-L6-v2 family) as a tessera graph: embeddings, a stack of
//! post-norm transformer layers, and masked mean pooling with L2 normalisation.
//!
//! Weights are leafs named as in the Hugging Face checkpoints ("encoder.layer.0.output.dense.weight")
//! so a loader can bind them by name. Linear weights are `[in, out]` in tessera's order (the
//! checkpoint's `[out, in]` row-major matrix).

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

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

/// The module a weight or node belongs to (for per-module device placement).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Module {
    Embed,
    Encoder,
    Pool,
}

/// A built encoder graph: its inputs, output and weights.
pub struct BertGraph {
    /// I32 `[tokens * batch]`: token ids, sequence after sequence.
    pub token_ids: TensorId,
    /// I32 `[tokens * batch]`: positions 0..tokens for each sequence.
    pub positions: TensorId,
    /// F32 `[tokens, tokens, 1, batch]`: 0 where a key token is real, -inf where it is padding.
    pub attention_mask: TensorId,
    /// F32 `[1, tokens, batch]`: 1 for real tokens, 0 for padding.
    pub token_mask: TensorId,
    /// F32 `[1, 1, batch]`: the number of real tokens of each sequence.
    pub token_count: TensorId,
    /// F32 `[hidden, batch]`: L2-normalised sentence embeddings.
    pub embeddings: TensorId,
    /// Every weight leaf with its checkpoint name and module.
    pub weights: Vec<(String, Module, TensorId)>,
}

struct Builder<'g> {
    g: &'g mut Graph,
    weight_type: DType,
    weights: Vec<(String, Module, TensorId)>,
    module: Module,
}

impl Builder<'_> {
    /// A weight leaf; matrices use `weight_type`, vectors stay F32.
    fn weight(&mut self, name: String, ne: &[usize]) -> Result<TensorId> {
        let dtype = if ne.len() > 1 { self.weight_type } else { DType::F32 };
        let id = self.g.new_tensor(dtype, ne)?;
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
}

/// Builds the encoder for `batch` sequences of `tokens` tokens into `g` and expands the
/// graph to its output. Matrices are created with `weight_type`.
pub fn build(g: &mut Graph, c: &BertConfig, weight_type: DType, tokens: usize, batch: usize) -> Result<BertGraph> {
    let (h, heads) = (c.hidden, c.heads);
    let head_dim = h / heads;
    let n = tokens * batch;
    let token_ids = g.new_tensor(DType::I32, &[n])?;
    let positions = g.new_tensor(DType::I32, &[n])?;
    let attention_mask = g.new_tensor(DType::F32, &[tokens, tokens, 1, batch])?;
    let token_mask = g.new_tensor(DType::F32, &[1, tokens, batch])?;
    let token_count = g.new_tensor(DType::F32, &[1, 1, batch])?;
    for (id, name) in [
        (token_ids, "token_ids"),
        (positions, "positions"),
        (attention_mask, "attention_mask"),
        (token_mask, "token_mask"),
        (token_count, "token_count"),
    ] {
        g.set_name(id, name)?;
        g.set_input(id)?;
    }
    let mut b = Builder { g, weight_type, weights: Vec::new(), module: Module::Embed };

    // Embeddings: word + position + token type 0, then layer norm.
    let word = b.weight("embeddings.word_embeddings.weight".into(), &[h, c.vocab])?;
    let pos = b.weight("embeddings.position_embeddings.weight".into(), &[h, c.max_positions])?;
    let types = b.weight("embeddings.token_type_embeddings.weight".into(), &[h, c.type_vocab])?;
    let x = b.g.get_rows(word, token_ids)?;
    let p = b.g.get_rows(pos, positions)?;
    let x = b.g.add(x, p)?;
    let type0 = b.g.view_1d(types, h, 0)?;
    let x = b.g.add(x, type0)?;
    let x = b.g.reshape(x, &[h, tokens, batch])?;
    let mut x = b.layer_norm("embeddings.LayerNorm", x, h, c.eps)?;

    b.module = Module::Encoder;
    let scale = 1.0 / libm::sqrtf(head_dim as f32);
    for layer in 0..c.layers {
        let pre = format!("encoder.layer.{layer}");
        // Self-attention, heads split as [head_dim, tokens, heads, batch].
        let q = b.linear(&format!("{pre}.attention.self.query"), x, h, h)?;
        let k = b.linear(&format!("{pre}.attention.self.key"), x, h, h)?;
        let v = b.linear(&format!("{pre}.attention.self.value"), x, h, h)?;
        let q = b.g.reshape(q, &[head_dim, heads, tokens, batch])?;
        let q = b.g.permute(q, [0, 2, 1, 3])?;
        let k = b.g.reshape(k, &[head_dim, heads, tokens, batch])?;
        let k = b.g.permute(k, [0, 2, 1, 3])?;
        let v = b.g.reshape(v, &[head_dim, heads, tokens, batch])?;
        let v = b.g.permute(v, [1, 2, 0, 3])?;
        let v = b.g.cont(v)?; // [tokens, head_dim, heads, batch]
        let scores = b.g.mul_mat(k, q)?; // [keys, queries, heads, batch]
        let probs = b.g.soft_max(scores, Some(attention_mask), scale)?;
        let ctx = b.g.mul_mat(v, probs)?; // [head_dim, queries, heads, batch]
        let ctx = b.g.permute(ctx, [0, 2, 1, 3])?;
        let ctx = b.g.cont(ctx)?;
        let ctx = b.g.reshape(ctx, &[h, tokens, batch])?;
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

    // Mean over real tokens, then L2 normalisation (RMS norm scaled by 1/sqrt(hidden)).
    b.module = Module::Pool;
    let masked = b.g.mul(x, token_mask)?;
    let by_token = b.g.permute(masked, [1, 0, 2, 3])?;
    let by_token = b.g.cont(by_token)?; // [tokens, hidden, batch]
    let sum = b.g.sum_rows(by_token)?; // [1, hidden, batch]
    let mean = b.g.div(sum, token_count)?;
    let mean = b.g.reshape(mean, &[h, batch])?;
    let unit = b.g.rms_norm(mean, 1e-12)?;
    let embeddings = b.g.scale(unit, 1.0 / libm::sqrtf(h as f32))?;
    let weights = b.weights;
    g.set_name(embeddings, "embeddings")?;
    g.set_output(embeddings)?;
    g.build_forward(embeddings)?;
    Ok(BertGraph { token_ids, positions, attention_mask, token_mask, token_count, embeddings, weights })
}
