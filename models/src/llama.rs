//! The graph of a Llama model for one batch of tokens: token embedding, blocks of RMS norm,
//! rotary grouped-query attention over a KV cache and a SwiGLU feed-forward network, then the
//! output norm and head. Tensor names are llama.cpp's (`token_embd.weight`,
//! `blk.N.attn_q.weight`, ...), so its GGUF files load as they are.
//!
//! The KV cache is two leaf tensors per block, bound by the caller to memory that outlives
//! the graph: keys `[head_dim, kv_heads, context]`, and values either transposed,
//! `[context, kv_dim]`, so that both products of attention read them as they lie, or, in a
//! block whose attention is one FLASH_ATTN node (no score matrix), laid out as the keys. The
//! batch's keys and values are written into them in place by SET_ROWS at rows that inputs name,
//! before attention reads a window of the first positions (a multiple of [`WINDOW_STEP`]; the
//! mask hides the positions not yet written). Where the batch goes is data, not shape: decoding token after token
//! builds the same graph until the window grows, so backends replay what they prepared.

use std::ops::Range;

use tessera_core::{DType, Graph, RopeMode, RopeParams, TensorId};

use crate::error::{Error, Result};
use crate::llama_config::LlamaConfig;
use crate::llama_module::LlamaModule;

/// The attention window grows in steps of this many positions.
pub const WINDOW_STEP: usize = 256;

/// Batches of at least this many tokens compute [`Attention::CausalProducts`] in runs.
pub const CHUNKED_FROM: usize = 64;

/// Runs of queries of [`Attention::CausalProducts`].
pub const QUERY_CHUNKS: usize = 4;

/// Which positions of the batch get logits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Logits {
    /// Only the last token's (what generation needs).
    Last,
    /// Every token's.
    All,
}

/// One batch: `tokens` new tokens at positions `past..past + tokens`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Batch {
    pub tokens: usize,
    pub past: usize,
    pub logits: Logits,
}

impl Batch {
    /// The cache positions attention reads: `past + tokens` rounded up to [`WINDOW_STEP`],
    /// at most `context`.
    pub fn window(&self, context: usize) -> usize {
        (self.past + self.tokens).div_ceil(WINDOW_STEP).saturating_mul(WINDOW_STEP).min(context)
    }

    /// What the graph's shape depends on: batches with the same shape run the same graph.
    pub fn shape(&self, context: usize) -> (usize, usize, Logits) {
        (self.tokens, self.window(context), self.logits)
    }
}

/// The shape of the KV cache the graph reads and writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheShape {
    /// Positions it holds.
    pub context: usize,
    /// F32 or F16.
    pub dtype: DType,
}

impl CacheShape {
    /// Bytes of one block's keys (and as many of its values).
    pub fn layer_bytes(&self, c: &LlamaConfig) -> Result<usize> {
        let row = self.dtype.row_bytes(c.kv_dim()).map_err(Error::Engine)?;
        row.checked_mul(self.context).ok_or(Error::Engine(tessera_core::Error::Overflow { what: "KV cache size" }))
    }
}

/// One weight the graph declares.
#[derive(Clone, Debug)]
pub struct Weight {
    /// Its name in a llama.cpp GGUF file.
    pub name: String,
    pub module: LlamaModule,
    pub layer: Option<usize>,
    pub id: TensorId,
}

/// The built graph's handles.
pub struct LlamaGraph {
    /// I32 `[tokens]`.
    pub token_ids: TensorId,
    /// I32 `[tokens]`: each token's position (also the row its keys go to).
    pub positions: TensorId,
    /// I32 `[kv_dim * tokens]`: where each value goes in a transposed value cache
    /// ([`value_rows`]); absent when every block uses FLASH_ATTN.
    pub value_rows: Option<TensorId>,
    /// F32 `[window, tokens]`: 0 where a token may attend to a position, -inf elsewhere
    /// ([`causal_mask`]).
    pub mask: TensorId,
    /// F32 `[vocab, 1 or tokens]`.
    pub logits: TensorId,
    pub weights: Vec<Weight>,
    /// Each block's key and value cache tensors, to bind.
    pub caches: Vec<(TensorId, TensorId)>,
    pub module_tensors: Vec<(LlamaModule, Range<u32>)>,
    pub layer_tensors: Vec<Range<u32>>,
}

impl LlamaGraph {
    pub fn module_of(&self, id: TensorId) -> Option<LlamaModule> {
        self.module_tensors.iter().find(|(_, r)| r.contains(&id.0)).map(|(m, _)| *m)
    }

    pub fn layer_of(&self, id: TensorId) -> Option<usize> {
        self.layer_tensors.iter().position(|r| r.contains(&id.0))
    }
}

struct Builder<'g, 'f> {
    g: &'g mut Graph,
    weight_type: &'f dyn Fn(&str) -> DType,
    weights: Vec<Weight>,
    module: LlamaModule,
    layer: Option<usize>,
}

impl Builder<'_, '_> {
    fn weight(&mut self, name: String, ne: &[usize]) -> tessera_core::Result<TensorId> {
        let id = self.g.new_tensor((self.weight_type)(&name), ne)?;
        self.g.set_name(id, &name)?;
        self.weights.push(Weight { name, module: self.module, layer: self.layer, id });
        Ok(id)
    }

    fn rms_norm(&mut self, name: String, x: TensorId, n: usize, eps: f32) -> tessera_core::Result<TensorId> {
        let gamma = self.weight(name, &[n])?;
        let y = self.g.rms_norm(x, eps)?;
        self.g.mul(y, gamma)
    }

    fn next_id(&self) -> u32 {
        self.g.tensors().len() as u32
    }
}

/// The sizes [`causal_products`] works with.
#[derive(Clone, Copy)]
struct AttentionShape {
    hd: usize,
    heads: usize,
    kv_heads: usize,
    /// Tokens of the batch.
    n: usize,
    /// Cache positions the batch's attention reads.
    kv_len: usize,
    /// Positions the cache holds.
    context: usize,
    /// Bytes of a cache value.
    es: usize,
}

/// Attention of the batch's queries `q` (`[hd, heads, n]`, packed) over the key cache (rows)
/// and the transposed value cache, in [`QUERY_CHUNKS`] runs of queries, each against the
/// first keys it can see: those of run `q0..q1` end at `kv_len - (n - q1)`, since the batch's
/// last token sits at `kv_len - 1` at most. The bound depends on the batch's shape alone, as
/// the graph must. Gives `[hd, heads, n]`.
fn causal_products(
    g: &mut Graph,
    s: AttentionShape,
    q: TensorId,
    k_cache: TensorId,
    v_cache: TensorId,
    mask: TensorId,
    scale: f32,
) -> Result<TensorId> {
    let AttentionShape { hd, heads, kv_heads, n, kv_len, context, es } = s;
    let kv_dim = hd * kv_heads;
    let run = n.div_ceil(QUERY_CHUNKS);
    // The attention of queries q0 .. q0 + run (fewer at the end): [hd, heads, rows].
    let part = |g: &mut Graph, q0: usize| -> Result<TensorId> {
        let q1 = (q0 + run).min(n);
        let (rows, seen) = (q1 - q0, kv_len - (n - q1));
        let qc =
            g.view(q, [hd, heads, rows, 1], [hd * 4, hd * heads * 4, hd * heads * rows * 4], q0 * hd * heads * 4)?;
        let qc = g.permute(qc, [0, 2, 1, 3])?; // [hd, rows, heads]
        let keys = g.view(k_cache, [hd, seen, kv_heads, 1], [kv_dim * es, hd * es, kv_dim * seen * es], 0)?;
        let values =
            g.view(v_cache, [seen, hd, kv_heads, 1], [context * es, hd * context * es, kv_dim * context * es], 0)?;
        let maskc =
            g.view(mask, [seen, rows, 1, 1], [kv_len * 4, kv_len * rows * 4, kv_len * rows * 4], q0 * kv_len * 4)?;
        let scores = g.mul_mat(keys, qc)?; // [seen, rows, heads]
        let probs = g.soft_max(scores, Some(maskc), scale)?;
        let part = g.mul_mat(values, probs)?; // [hd, rows, heads]
        let part = g.permute(part, [0, 2, 1, 3])?;
        Ok(g.cont(part)?)
    };
    let mut ctx = part(g, 0)?;
    for q0 in (run..n).step_by(run) {
        let next = part(g, q0)?;
        ctx = g.concat(ctx, next, 2)?;
    }
    Ok(ctx)
}

/// How a block computes attention.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attention {
    /// Two products and a soft-max; the cache holds the values transposed.
    Products,
    /// As [`Attention::Products`], with batches of [`CHUNKED_FROM`] tokens or more split into
    /// [`QUERY_CHUNKS`] runs of queries, each against only the keys it can see: a prompt's
    /// products and soft-max skip most of the causal mask's masked half (for a prompt from an
    /// empty cache, 4 runs do 5/8 of the work). For the host CPU, where the products are the
    /// cost; a GPU's one large product is the faster there.
    CausalProducts,
    /// One FLASH_ATTN node for batches of one token (decoding), products for longer batches
    /// (a prompt's scores are one large product, which the GPUs' GEMMs do faster); the cache
    /// holds the values as rows, read through a transposed copy by the products.
    FlashDecoding,
    /// One FLASH_ATTN node for every batch: no score matrix in memory.
    Flash,
}

impl Attention {
    /// Whether the block computes attention as one FLASH_ATTN node (in decoding at least), its
    /// cache holding the values as rows.
    pub fn fused(self) -> bool {
        matches!(self, Attention::Flash | Attention::FlashDecoding)
    }
}

/// The weight types `weight_type` gives by file name; `has_output` says whether the file has
/// its own `output.weight` (else the head reads the token embedding, as llama.cpp does).
/// Each block computes attention as its entry in `attention` says (products where missing).
pub fn build(
    g: &mut Graph,
    c: &LlamaConfig,
    weight_type: &dyn Fn(&str) -> DType,
    has_output: bool,
    cache: CacheShape,
    batch: Batch,
    attention: &[Attention],
) -> Result<LlamaGraph> {
    c.validate().map_err(|message| Error::InvalidConfig { message })?;
    let Batch { tokens: n, past, logits } = batch;
    if n == 0 || past + n > cache.context {
        return Err(Error::ContextFull { tokens: past + n, context: cache.context });
    }
    let kv_len = batch.window(cache.context);
    let (h, hd, kv_dim) = (c.hidden, c.head_dim(), c.kv_dim());
    if cache.context.checked_mul(kv_dim).is_none_or(|cells| cells > i32::MAX as usize) {
        return Err(Error::ContextFull { tokens: cache.context, context: i32::MAX as usize / kv_dim });
    }
    let es = cache.dtype.row_bytes(1).map_err(Error::Engine)?;
    let inputs_start = g.tensors().len() as u32;
    let token_ids = g.new_tensor(DType::I32, &[n])?;
    let positions = g.new_tensor(DType::I32, &[n])?;
    // Whether the block's cache holds the values as rows (the layout FLASH_ATTN reads).
    let flash_at = |layer: usize| attention.get(layer).is_some_and(|a| a.fused());
    let value_rows = if (0..c.layers).all(flash_at) { None } else { Some(g.new_tensor(DType::I32, &[kv_dim * n])?) };
    let mask = g.new_tensor(DType::F32, &[kv_len, n])?;
    let inputs = [
        (Some(token_ids), "token_ids"),
        (Some(positions), "positions"),
        (value_rows, "value_rows"),
        (Some(mask), "kq_mask"),
    ];
    for (id, name) in inputs {
        if let Some(id) = id {
            g.set_name(id, name)?;
            g.set_input(id)?;
        }
    }
    let mut b = Builder { g, weight_type, weights: Vec::new(), module: LlamaModule::Embed, layer: None };
    let mut module_tensors = Vec::new();
    let embd = b.weight("token_embd.weight".into(), &[h, c.vocab])?;
    let mut x = b.g.get_rows(embd, token_ids)?; // [h, n]
    module_tensors.push((LlamaModule::Embed, inputs_start..b.next_id()));

    b.module = LlamaModule::Blocks;
    let start = b.next_id();
    let rope = RopeParams { mode: RopeMode::Normal, n_dims: c.rope_dims, freq_base: c.rope_base, freq_scale: 1.0 };
    let scale = 1.0 / (hd as f32).sqrt();
    let mut caches = Vec::with_capacity(c.layers);
    let mut layer_tensors = Vec::with_capacity(c.layers);
    for layer in 0..c.layers {
        let layer_start = b.next_id();
        b.layer = Some(layer);
        let p = format!("blk.{layer}");
        let flash = flash_at(layer);
        let k_cache = b.g.new_tensor(cache.dtype, &[hd, c.kv_heads, cache.context])?;
        b.g.set_name(k_cache, &format!("cache_k.{layer}"))?;
        let v_shape: &[usize] = if flash { &[hd, c.kv_heads, cache.context] } else { &[cache.context, kv_dim] };
        let v_cache = b.g.new_tensor(cache.dtype, v_shape)?;
        b.g.set_name(v_cache, &format!("cache_v.{layer}"))?;
        caches.push((k_cache, v_cache));

        let xn = b.rms_norm(format!("{p}.attn_norm.weight"), x, h, c.eps)?;
        let wq = b.weight(format!("{p}.attn_q.weight"), &[h, h])?;
        let wk = b.weight(format!("{p}.attn_k.weight"), &[h, kv_dim])?;
        let wv = b.weight(format!("{p}.attn_v.weight"), &[h, kv_dim])?;
        let q = b.g.mul_mat(wq, xn)?;
        let q = b.g.reshape(q, &[hd, c.heads, n])?;
        let q = b.g.rope(q, positions, rope)?;
        let k = b.g.mul_mat(wk, xn)?;
        let k = b.g.reshape(k, &[hd, c.kv_heads, n])?;
        let k = b.g.rope(k, positions, rope)?;
        let v = b.g.mul_mat(wv, xn)?; // [kv_dim, n]

        // Store this batch's keys and values at their positions: keys as rows of the key
        // cache, values as rows too or one by one into the columns of the transposed cache.
        let key_rows = b.g.reshape(k_cache, &[kv_dim, cache.context])?;
        let k = b.g.reshape(k, &[kv_dim, n])?;
        let stored_k = b.g.set_rows(key_rows, k, positions)?;
        let stored_v = match value_rows {
            Some(rows) if !flash => {
                let value_cells = b.g.reshape(v_cache, &[1, cache.context * kv_dim])?;
                // Channel by channel ([`value_rows`]): a prompt's values of one channel land
                // side by side; token by token, each would go to another row of the cache.
                let v = if n > 1 {
                    let channels = b.g.transpose(v)?;
                    b.g.cont(channels)?
                } else {
                    v
                };
                let v = b.g.reshape(v, &[1, kv_dim * n])?;
                b.g.set_rows(value_cells, v, rows)?
            }
            _ => {
                let value_rows = b.g.reshape(v_cache, &[kv_dim, cache.context])?;
                b.g.set_rows(value_rows, v, positions)?
            }
        };
        // Listed now, so that they run before the products below read the cache.
        b.g.build_forward(stored_k)?;
        b.g.build_forward(stored_v)?;

        let window = |g: &mut Graph, cache: TensorId| {
            g.view(cache, [hd, kv_len, c.kv_heads, 1], [kv_dim * es, hd * es, kv_dim * kv_len * es], 0)
        };
        let keys = window(b.g, k_cache)?;
        let q_rows = q; // [hd, heads, n]
        let q = b.g.permute(q, [0, 2, 1, 3])?; // [hd, n, heads]
        let fused = match attention.get(layer) {
            Some(Attention::Flash) => true,
            Some(Attention::FlashDecoding) => n == 1,
            _ => false,
        };
        let chunked = attention.get(layer) == Some(&Attention::CausalProducts) && n >= CHUNKED_FROM;
        let ctx = if fused {
            let values = window(b.g, v_cache)?;
            b.g.flash_attn(q, keys, values, Some(mask), scale)? // [hd, heads, n]
        } else if chunked {
            let shape =
                AttentionShape { hd, heads: c.heads, kv_heads: c.kv_heads, n, kv_len, context: cache.context, es };
            causal_products(b.g, shape, q_rows, k_cache, v_cache, mask, scale)?
        } else {
            let values = if flash {
                let rows = window(b.g, v_cache)?; // [hd, kv_len, kv_heads]
                let columns = b.g.permute(rows, [1, 0, 2, 3])?;
                b.g.cont(columns)?
            } else {
                b.g.view(
                    v_cache,
                    [kv_len, hd, c.kv_heads, 1],
                    [cache.context * es, hd * cache.context * es, kv_dim * cache.context * es],
                    0,
                )?
            };
            let scores = b.g.mul_mat(keys, q)?; // [kv_len, n, heads]
            let probs = b.g.soft_max(scores, Some(mask), scale)?;
            let ctx = b.g.mul_mat(values, probs)?; // [hd, n, heads]
            let ctx = b.g.permute(ctx, [0, 2, 1, 3])?;
            b.g.cont(ctx)?
        };
        let ctx = b.g.reshape(ctx, &[h, n])?;
        let wo = b.weight(format!("{p}.attn_output.weight"), &[h, h])?;
        let attn = b.g.mul_mat(wo, ctx)?;
        let x1 = b.g.add(attn, x)?;

        let xn = b.rms_norm(format!("{p}.ffn_norm.weight"), x1, h, c.eps)?;
        let w_gate = b.weight(format!("{p}.ffn_gate.weight"), &[h, c.ff])?;
        let w_up = b.weight(format!("{p}.ffn_up.weight"), &[h, c.ff])?;
        let w_down = b.weight(format!("{p}.ffn_down.weight"), &[c.ff, h])?;
        let gate = b.g.mul_mat(w_gate, xn)?;
        let gate = b.g.silu(gate)?;
        let up = b.g.mul_mat(w_up, xn)?;
        let ff = b.g.mul(gate, up)?;
        let down = b.g.mul_mat(w_down, ff)?;
        x = b.g.add(down, x1)?;
        layer_tensors.push(layer_start..b.next_id());
    }
    module_tensors.push((LlamaModule::Blocks, start..b.next_id()));

    b.module = LlamaModule::Head;
    b.layer = None;
    let start = b.next_id();
    let (x, rows) = match logits {
        Logits::All => (x, n),
        Logits::Last => (b.g.view_2d(x, h, 1, h * 4, (n - 1) * h * 4)?, 1),
    };
    let xn = b.rms_norm("output_norm.weight".into(), x, h, c.eps)?;
    let head_name = if has_output { "output.weight" } else { "token_embd.weight" };
    let head = b.weight(head_name.into(), &[h, c.vocab])?;
    let out = b.g.mul_mat(head, xn)?;
    let out = b.g.reshape(out, &[c.vocab, rows])?;
    module_tensors.push((LlamaModule::Head, start..b.next_id()));
    let weights = b.weights;
    g.set_name(out, "logits")?;
    g.set_output(out)?;
    g.build_forward(out)?;
    Ok(LlamaGraph {
        token_ids,
        positions,
        value_rows,
        mask,
        logits: out,
        weights,
        caches,
        module_tensors,
        layer_tensors,
    })
}

/// The attention mask of `batch`: row `i` (token at `past + i`) sees positions `0..=past + i`
/// of the window.
pub fn causal_mask(batch: Batch, context: usize) -> Vec<f32> {
    let window = batch.window(context);
    let mut mask = vec![f32::NEG_INFINITY; window * batch.tokens];
    for (i, row) in mask.chunks_mut(window).enumerate() {
        row[..=batch.past + i].fill(0.0);
    }
    mask
}

/// Where value `c` of token `t` of `batch` goes in a transposed value cache of `context`
/// positions seen as one row of single values: `c * context + past + t`, for `c` then `t`
/// (the order of the batch's values transposed, so that the writes run along the cache).
pub fn value_rows(batch: Batch, kv_dim: usize, context: usize) -> Vec<i32> {
    (0..kv_dim).flat_map(|c| (0..batch.tokens).map(move |t| (c * context + batch.past + t) as i32)).collect()
}
