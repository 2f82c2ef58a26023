//! Text generation with a Llama model on the devices the user places each block on: prompt
//! processing in batches, then token-by-token decoding into a KV cache kept on each block's
//! device.

use std::path::Path;
use std::time::{Duration, Instant};

use tessera_core::registry::{extension, Extension};
use tessera_core::{Backend, DType, Device, Graph, Op, Scheduler, SchedulerOptions, Shape, TensorId};
use tessera_std::model_file::{place_weights, ModelFile, WeightSpec, WeightStore};
use tessera_std::placement::{Placement, Target};

use crate::embedder::backend_targets;
use crate::error::{Error, Result};
use crate::kv_cache::KvCache;
use crate::llama::{self, Attention, Batch, CacheShape, LlamaGraph, Logits};
use crate::llama_config::LlamaConfig;
use crate::llama_module::LlamaModule;
use crate::llama_vocab::LlamaVocab;
use crate::logits_memory::LogitsMemory;
use crate::sampler::Sampler;

const NOT_GGUF: &str = "is not a GGUF file; Llama models are read from GGUF";

/// How [`Generator::load`] sets a model up.
#[derive(Clone, Copy, Debug)]
pub struct GeneratorOptions {
    /// Threads of each backend that has the `set_n_threads` extension (the CPU's).
    pub threads: Option<usize>,
    /// Positions the KV cache holds (0: the model's own context length).
    pub context: usize,
    /// Tokens per batch while processing a prompt (`--ubatch`).
    pub ubatch: usize,
    /// F16 (llama.cpp's default) or F32.
    pub cache_type: DType,
    /// Plan the compute buffers for logits at every position of a batch, not just the last
    /// (what [`Generator::eval`] with [`Logits::All`] needs).
    pub all_logits: bool,
    /// Attention as one FLASH_ATTN node per block: `Some(true)` in every block and batch (no
    /// score matrix in memory: at a 4096-token context, 42 instead of 277 MiB of CUDA compute
    /// buffers for a 1B model), `Some(false)` in none. `None` (the default): for decoding, in
    /// the blocks that run on a device with a FLASH_ATTN kernel for the model's heads other
    /// than the host CPU, with prompts computed as products ([`llama::Attention::FlashDecoding`]),
    /// which is the fastest on CUDA.
    pub flash_attn: Option<bool>,
}

impl Default for GeneratorOptions {
    fn default() -> Self {
        GeneratorOptions {
            threads: None,
            context: 0,
            ubatch: 512,
            cache_type: DType::F16,
            all_logits: false,
            flash_attn: None,
        }
    }
}

/// Where the time of the last [`generate`](Generator::generate) went.
#[derive(Clone, Copy, Debug, Default)]
pub struct GenerationTiming {
    pub prompt_tokens: usize,
    pub prompt: Duration,
    pub generated_tokens: usize,
    pub generation: Duration,
}

impl GenerationTiming {
    fn rate(tokens: usize, d: Duration) -> f64 {
        tokens as f64 / d.as_secs_f64().max(1e-9)
    }

    /// "prompt: 64 tokens, 1234.5 tokens/s | generation: 32 tokens, 45.6 tokens/s".
    pub fn line(&self) -> String {
        format!(
            "prompt: {} tokens in {:.1} ms, {:.1} tokens/s | generation: {} tokens in {:.1} ms, {:.1} tokens/s",
            self.prompt_tokens,
            self.prompt.as_secs_f64() * 1e3,
            Self::rate(self.prompt_tokens, self.prompt),
            self.generated_tokens,
            self.generation.as_secs_f64() * 1e3,
            Self::rate(self.generated_tokens, self.generation)
        )
    }
}

/// A loaded model: weights on their devices, the KV cache, the scheduler and the tokenizer.
pub struct Generator {
    config: LlamaConfig,
    file: ModelFile,
    vocab: LlamaVocab,
    placement: Placement,
    targets: Vec<Target>,
    /// Weights per device that holds some.
    stores: Vec<(&'static dyn Device, WeightStore)>,
    has_output: bool,
    cache: KvCache,
    sched: Scheduler,
    /// Positions of the cache already filled.
    past: usize,
    /// How each block computes attention.
    attention: Vec<Attention>,
    options: GeneratorOptions,
    /// Compute buffer bytes planned up front, per backend.
    planned: Vec<(String, usize)>,
    /// The graph the scheduler holds, and the batch shape it was built for: a batch of the
    /// same shape only sets new inputs.
    built: Option<((usize, usize, Logits), LlamaGraph)>,
    /// What the last [`eval`](Self::eval) returned, kept so that decoding reuses its memory.
    logits: LogitsMemory,
    timing: GenerationTiming,
}

/// Whether node `id` is an attention product (MUL_MAT or FLASH_ATTN) reading the key or value
/// cache of its block, `cache`, directly or through a view.
fn reads_cache(g: &Graph, id: TensorId, (k, v): (TensorId, TensorId)) -> Result<bool> {
    let t = g.tensor(id)?;
    if !matches!(t.op(), Op::MulMat | Op::FlashAttn { .. }) {
        return Ok(false);
    }
    for (_, s) in t.srcs() {
        let root = g.tensor(s)?.view_src().unwrap_or(s);
        if root == k || root == v {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The fewest tokens of a batch whose nodes of CPU blocks the scheduler may move to a GPU
/// (GPU backends offload products with weights in host memory from this many columns on).
const OFFLOAD_MIN_BATCH: usize = 32;

/// Whether `device` has a FLASH_ATTN kernel for the attention of `config` over a cache of
/// `cache`'s type (asked of a one-node graph of the model's shapes).
fn flash_attn_runs_on(device: &dyn Device, config: &LlamaConfig, cache: CacheShape) -> bool {
    let mut g = Graph::new();
    let (hd, window) = (config.head_dim(), llama::WINDOW_STEP);
    let node = (|| {
        let q = g.new_tensor(DType::F32, &[hd, 1, config.heads])?;
        let k = g.new_tensor(cache.dtype, &[hd, window, config.kv_heads])?;
        let v = g.new_tensor(cache.dtype, &[hd, window, config.kv_heads])?;
        let mask = g.new_tensor(DType::F32, &[window, 1])?;
        g.flash_attn(q, k, v, Some(mask), 1.0)
    })();
    node.is_ok_and(|n| device.supports_op(&g, n))
}

/// A weight the graph declares, as the file must hold it.
struct WeightShape {
    name: String,
    dtype: DType,
    ne: [usize; 4],
}

/// Bytes planned up front, per device (or backend) name.
#[derive(Clone, Debug, Default)]
pub struct MemoryPlan {
    pub weights: Vec<(String, usize)>,
    pub kv_cache: Vec<(String, usize)>,
    /// Compute buffers, per backend, for the largest batch at the end of the context.
    pub compute: Vec<(String, usize)>,
}

impl Generator {
    /// Loads the Llama GGUF at `path` with each module (and block) placed as `placement` says,
    /// a placement resolved for [`LLAMA_MODULES`](crate::LLAMA_MODULES).
    pub fn load(path: impl AsRef<Path>, placement: Placement, options: GeneratorOptions) -> Result<Generator> {
        let file = ModelFile::open(path.as_ref())?;
        let name = file.path().display().to_string();
        let gguf = file.gguf().ok_or_else(|| Error::Config { path: name.clone(), message: NOT_GGUF.into() })?;
        let config = LlamaConfig::from_gguf(&gguf, &name)?;
        let vocab = LlamaVocab::from_gguf(&gguf, &name)?;
        if vocab.len() > config.vocab {
            return Err(Error::Tokenizer {
                path: name,
                message: format!("its vocabulary has {} tokens but the model has {} logits", vocab.len(), config.vocab),
            });
        }
        let n = LlamaModule::ALL.len();
        if placement.compute.len() != n || placement.params.len() != n {
            return Err(Error::InvalidConfig {
                message: "the placement was not resolved for tessera_models::LLAMA_MODULES".into(),
            });
        }
        let blocks = LlamaModule::Blocks.index();
        placement
            .check_layers(blocks, LlamaModule::Blocks.name(), config.layers)
            .map_err(|e| Error::InvalidConfig { message: e.to_string() })?;
        let has_output = file.tensor("output.weight").is_some();
        let context = if options.context == 0 { config.context } else { options.context };
        if !matches!(options.cache_type, DType::F32 | DType::F16) {
            return Err(Error::Generation {
                message: format!("a KV cache of {} is not supported; use f16 or f32", options.cache_type),
            });
        }
        let ubatch = options.ubatch.clamp(1, context);
        let cache_shape = CacheShape { context, dtype: options.cache_type };
        let targets = backend_targets(&placement);
        let attention: Vec<Attention> = (0..config.layers)
            .map(|l| {
                let device = placement.compute_of(blocks, Some(l)).device;
                match options.flash_attn {
                    Some(true) => Attention::Flash,
                    None if !device.is_host_cpu() && flash_attn_runs_on(device, &config, cache_shape) => {
                        Attention::FlashDecoding
                    }
                    _ if device.is_host_cpu() => Attention::CausalProducts,
                    _ => Attention::Products,
                }
            })
            .collect();

        // The weights, grouped by the device that keeps them (a tied head may need the token
        // embedding on two devices).
        let mut probe = Graph::new();
        let dtype_of = |name: &str| file.tensor(name).map_or(DType::F32, |t| t.dtype);
        let shapes = llama::build(
            &mut probe,
            &config,
            &dtype_of,
            has_output,
            cache_shape,
            Batch { tokens: 1, past: 0, logits: Logits::Last },
            &attention,
        )?;
        let mut groups: Vec<(&'static dyn Device, Vec<WeightShape>)> = Vec::new();
        for w in &shapes.weights {
            let t = probe.tensor(w.id)?;
            let (dtype, ne) = (t.dtype(), t.ne());
            match file.tensor(&w.name) {
                Some(f) if f.ne == ne => {}
                Some(f) => {
                    return Err(tessera_core::Error::File {
                        path: name,
                        message: format!(
                            "tensor '{}' is {} {} but the model expects {}",
                            w.name,
                            f.dtype,
                            Shape(f.ne),
                            Shape(ne)
                        ),
                    }
                    .into())
                }
                None => {
                    return Err(tessera_core::Error::File {
                        path: name,
                        message: format!("has no tensor '{}' ({dtype} {})", w.name, Shape(ne)),
                    }
                    .into())
                }
            }
            let device = placement.params_of(w.module.index(), w.layer);
            let at = match groups.iter().position(|(d, _)| std::ptr::addr_eq(*d, device)) {
                Some(i) => i,
                None => {
                    groups.push((device, Vec::new()));
                    groups.len() - 1
                }
            };
            if !groups[at].1.iter().any(|s| s.name == w.name) {
                groups[at].1.push(WeightShape { name: w.name.clone(), dtype, ne });
            }
        }
        let mut stores = Vec::with_capacity(groups.len());
        for (device, group) in &groups {
            let specs: Vec<WeightSpec> =
                group.iter().map(|s| WeightSpec { name: &s.name, parts: &[], dtype: s.dtype, ne: s.ne }).collect();
            stores.push((*device, place_weights(&file, &specs, *device, &mut |_, _| {})?));
        }

        let cache_devices: Vec<&'static dyn Device> =
            (0..config.layers).map(|l| placement.compute_of(blocks, Some(l)).device).collect();

        let cache = KvCache::new(&config, cache_shape, &cache_devices)?;

        let mut backends: Vec<Box<dyn Backend>> = Vec::new();
        for t in &targets {
            let mut b = t.device.init_backend()?;
            if let (Some(n), Some(Extension::SetThreads(set_threads))) =
                (options.threads, t.device.reg().extension(extension::SET_THREADS))
            {
                set_threads(&mut *b, n)?;
            }
            backends.push(b);
        }
        // Op offload: a prompt's products with weights of CPU blocks may run on a GPU that asks
        // for them (see `graph`).
        let options_sched = SchedulerOptions { op_offload: true, ..SchedulerOptions::default() };
        let sched = tessera_std::sched_debug::scheduler(backends, &[], options_sched)?;
        let options = GeneratorOptions { context, ubatch, ..options };
        let logits = LogitsMemory::new(placement.compute_of(LlamaModule::Head.index(), None).device, config.vocab);
        let mut g = Generator {
            config,
            file,
            vocab,
            placement,
            targets,
            stores,
            has_output,
            cache,
            sched,
            past: 0,
            attention,
            options,
            planned: Vec::new(),
            built: None,
            logits,
            timing: GenerationTiming::default(),
        };
        g.reserve()?;
        Ok(g)
    }

    /// The config of the Llama GGUF at `path`, as [`load`](Self::load) reads it.
    pub fn read_config(path: impl AsRef<Path>) -> Result<LlamaConfig> {
        let file = ModelFile::open(path.as_ref())?;
        let name = file.path().display().to_string();
        let gguf = file.gguf().ok_or_else(|| Error::Config { path: name.clone(), message: NOT_GGUF.into() })?;
        LlamaConfig::from_gguf(&gguf, &name)
    }

    /// Plans the compute buffers for the largest batch at the end of the context, so that
    /// every later batch fits them.
    fn reserve(&mut self) -> Result<()> {
        let (ubatch, context) = (self.options.ubatch, self.options.context);
        let logits = if self.options.all_logits { Logits::All } else { Logits::Last };
        let (graph, _) = self.graph(Batch { tokens: ubatch, past: context - ubatch, logits })?;
        self.sched.reserve(&graph)?;
        self.built = None;
        self.planned =
            self.targets.iter().enumerate().map(|(i, t)| (t.to_string(), self.sched.buffer_size(i))).collect();
        Ok(())
    }

    pub fn config(&self) -> &LlamaConfig {
        &self.config
    }

    pub fn vocab(&self) -> &LlamaVocab {
        &self.vocab
    }

    pub fn placement(&self) -> &Placement {
        &self.placement
    }

    pub fn scheduler(&self) -> &Scheduler {
        &self.sched
    }

    /// Positions of the KV cache in use.
    pub fn past(&self) -> usize {
        self.past
    }

    /// Positions the KV cache holds.
    pub fn context(&self) -> usize {
        self.options.context
    }

    /// Forgets the cached tokens: the next batch starts at position 0.
    pub fn reset(&mut self) {
        self.past = 0;
    }

    /// The timing of the last [`generate`](Self::generate).
    pub fn timing(&self) -> GenerationTiming {
        self.timing
    }

    /// Which blocks compute attention as one FLASH_ATTN node (in decoding at least).
    pub fn flash_attn(&self) -> Vec<bool> {
        self.attention.iter().map(|a| a.fused()).collect()
    }

    /// How each block computes attention.
    pub fn attention(&self) -> &[Attention] {
        &self.attention
    }

    /// Bytes planned up front: weights and KV cache per device, compute buffers per backend.
    pub fn memory(&self) -> MemoryPlan {
        MemoryPlan {
            weights: self.stores.iter().map(|(d, s)| (d.name().to_string(), s.bytes)).collect(),
            kv_cache: self.cache.bytes_per_device().to_vec(),
            compute: self.planned.clone(),
        }
    }

    /// Runs `tokens` at the next positions of the cache (in batches of at most `ubatch`) and
    /// returns the logits of the last token (or, with [`Logits::All`], of every token, `vocab`
    /// values each).
    pub fn eval(&mut self, tokens: &[u32], logits: Logits) -> Result<&[f32]> {
        if tokens.is_empty() {
            return Err(Error::Generation { message: "no tokens to evaluate".into() });
        }
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= self.config.vocab) {
            return Err(Error::Generation {
                message: format!("token id {bad} is not below the vocabulary size {}", self.config.vocab),
            });
        }
        let needed = self.past + tokens.len();
        if needed > self.options.context {
            return Err(Error::ContextFull { tokens: needed, context: self.options.context });
        }
        self.logits.clear();
        let (context, kv_dim) = (self.options.context, self.config.kv_dim());
        for chunk in tokens.chunks(self.options.ubatch) {
            let batch = Batch { tokens: chunk.len(), past: self.past, logits };
            let shape = batch.shape(context);
            if self.built.as_ref().is_none_or(|(s, _)| *s != shape) {
                self.built = None;
                let (graph, model) = self.graph(batch)?;
                self.sched.alloc_graph(&graph)?;
                self.built = Some((shape, model));
            }
            let model = &self.built.as_ref().ok_or(tessera_core::Error::Cancelled)?.1;
            let sg = self.sched.graph().ok_or(tessera_core::Error::Cancelled)?;
            let ids: Vec<i32> = chunk.iter().map(|&t| t as i32).collect();
            let positions: Vec<i32> = (self.past..self.past + chunk.len()).map(|p| p as i32).collect();
            sg.set_i32(model.token_ids, &ids)?;
            sg.set_i32(model.positions, &positions)?;
            if let Some(rows) = model.value_rows {
                sg.set_i32(rows, &llama::value_rows(batch, kv_dim, context))?;
            }
            sg.set_f32(model.mask, &llama::causal_mask(batch, context))?;
            let out_id = model.logits;
            self.sched.compute()?;
            let graph = self.sched.graph().ok_or(tessera_core::Error::Cancelled)?;
            match logits {
                Logits::Last => self.logits.read_last(graph, out_id)?,
                Logits::All => self.logits.append(graph, out_id)?,
            }
            self.past += chunk.len();
        }
        Ok(self.logits.values())
    }

    /// Generates up to `max_tokens` tokens after `prompt` (token ids, processed from the start
    /// of the cache). `on_token` sees each token as it comes and returns `false` to stop there
    /// (at the end-of-sequence token, [`LlamaVocab::eos`], unless told to ignore it). Returns
    /// the generated ids, the one that stopped it included.
    pub fn generate(
        &mut self,
        prompt: &[u32],
        max_tokens: usize,
        sampler: &mut Sampler,
        on_token: &mut dyn FnMut(u32) -> bool,
    ) -> Result<Vec<u32>> {
        self.reset();
        let start = Instant::now();
        let mut next = sampler.pick(self.eval(prompt, Logits::Last)?);
        let prompt_time = start.elapsed();
        let start = Instant::now();
        let mut out = Vec::new();
        while out.len() < max_tokens {
            out.push(next);
            if !on_token(next) || out.len() == max_tokens {
                break;
            }
            next = sampler.pick(self.eval(&[next], Logits::Last)?);
        }
        self.timing = GenerationTiming {
            prompt_tokens: prompt.len(),
            prompt: prompt_time,
            generated_tokens: out.len(),
            generation: start.elapsed(),
        };
        Ok(out)
    }

    /// Builds the graph of `batch`, weights and cache bound, every node pinned to the device
    /// its module (and block) runs on, except a prompt's nodes of CPU blocks (see below).
    fn graph(&mut self, batch: Batch) -> Result<(Graph, LlamaGraph)> {
        let mut g = Graph::new();
        let file = &self.file;
        let dtype_of = |name: &str| file.tensor(name).map_or(DType::F32, |t| t.dtype);
        let model =
            llama::build(&mut g, &self.config, &dtype_of, self.has_output, self.cache.shape(), batch, &self.attention)?;
        for w in &model.weights {
            let device = self.placement.params_of(w.module.index(), w.layer);
            let data = self
                .stores
                .iter()
                .find(|(d, _)| std::ptr::addr_eq(*d, device))
                .and_then(|(_, s)| s.get(&w.name))
                .ok_or_else(|| tessera_core::Error::File {
                    path: self.file.path().display().to_string(),
                    message: format!("weight '{}' was not loaded", w.name),
                })?;
            g.bind(w.id, data.clone())?;
        }
        for (l, &(k, v)) in model.caches.iter().enumerate() {
            let (kd, vd) = self.cache.layer(l).ok_or(tessera_core::Error::Cancelled)?;
            g.bind(k, kd.clone())?;
            g.bind(v, vd.clone())?;
        }
        self.sched.clear_pins();
        let gpu = self.targets.iter().position(|t| !t.device.is_host_cpu());
        for &id in g.nodes() {
            if let Some(m) = model.module_of(id) {
                let (module, layer) = (m.index(), model.layer_of(id));
                let target = self.placement.compute_of(module, layer);
                // A prompt's nodes of CPU blocks are left to the scheduler, as ggml's are: it
                // runs the products with their weights on a GPU that asks for them (op offload)
                // and the nodes around them there too. Their attention goes to a GPU that asks
                // for it as well:
                // the cache window it reads crosses once (a megabyte a block at 512 positions),
                // where the CPU would compute every score of the batch (most of such a batch's
                // time at half the blocks on the CPU). The cache writes stay with the cache.
                let on_cpu = target.device.is_host_cpu() && self.placement.params_of(module, layer).is_host_cpu();
                if on_cpu && batch.tokens >= OFFLOAD_MIN_BATCH {
                    let cache = layer.and_then(|l| model.caches.get(l)).copied();
                    if let (Some(b), Some(cache)) = (gpu, cache) {
                        let device = self.targets[b].device;
                        if reads_cache(&g, id, cache)? && device.offload_op(&g, id) && device.supports_op(&g, id) {
                            self.sched.set_tensor_backend(id, b)?;
                        }
                    }
                    continue;
                }
                if let Some(b) = target.index_in(&self.targets) {
                    self.sched.set_tensor_backend(id, b)?;
                }
            }
        }
        Ok((g, model))
    }
}
