//! Sentence embeddings with a BERT model (all-MiniLM-L6-v2) on the devices the user places
//! each module on.

use std::path::Path;
use std::time::{Duration, Instant};

use std::sync::Arc;
use tessera_core::registry::{extension, Extension};

use tessera_core::{Backend, Buffer, DType, Device, Graph, Precision, Scheduler, SchedulerOptions, Shape};
use tessera_std::model_file::{place_weights, placeable, ModelFile, WeightSpec, WeightStore};
use tessera_std::placement::{Placement, Target};

use crate::bert::{self, BertGraph, Layout};
use crate::config::BertConfig;
use crate::error::{Error, Result};
use crate::gguf_vocab::Vocab;
use crate::inputs::inputs_for;
use crate::module::Module;
use crate::staged_inputs::StagedInputs;
use crate::tensor_names::TensorNames;
use crate::tokenize::{Tokenizer, MAX_TOKENS};

/// A loaded model, its weights on their devices, the scheduler that runs it, and
/// optionally its tokenizer.
pub struct Embedder {
    config: BertConfig,
    file: ModelFile,
    /// How the file names the graph's weights.
    names: TensorNames,
    placement: Placement,
    /// The scheduler's backends, in its order.
    targets: Vec<Target>,
    /// The weights, one store per module and device that holds some of its weights.
    stores: Vec<WeightStore>,
    sched: Scheduler,
    /// [`LoadOptions::flash_attn`].
    flash_attn: Option<bool>,
    /// [`LoadOptions::attention_precision`].
    attention_precision: Precision,
    tokenizer: Option<Tokenizer>,
    timing: Timing,
    /// The sequence lengths the scheduler's graph was built and allocated for: a batch of the
    /// same lengths runs it again with new inputs.
    built_for: Option<Built>,
    /// Pinned host memory that queued batches' embeddings are read into, one buffer per batch
    /// in flight, kept for the next call: a read into ordinary memory would make the host
    /// wait for the batch, and the next batch could not be queued meanwhile.
    landing: Vec<Arc<dyn Buffer>>,
}

/// The graph of the last batch shape, as given to the scheduler and as built.
struct Built {
    lens: Vec<usize>,
    graph: Graph,
    model: BertGraph,
    /// The inputs staged in pinned host memory, where the token ids' device has some and runs
    /// are not pipelined.
    staged: Option<StagedInputs>,
}

/// Where the time of the last embedding call went.
#[derive(Clone, Copy, Debug, Default)]
pub struct Timing {
    /// Building the graph, binding the weights, planning and allocating it, setting the inputs.
    pub prepare: Duration,
    /// Running the graph and reading the embeddings back.
    pub compute: Duration,
}

/// How [`Embedder::load_with`] loads a model; `Default` is what [`Embedder::load`] does.
#[derive(Default)]
pub struct LoadOptions<'a> {
    /// Threads of each backend that has the `set_n_threads` extension (the CPU's);
    /// `None` keeps the backend's default.
    pub threads: Option<usize>,
    /// The tokenizer to use. `None`: the `tokenizer.json` next to the model, if there is one
    /// (truncating at [`MAX_TOKENS`] or the model's positions, whichever is fewer).
    pub tokenizer: Option<Tokenizer>,
    /// Called as weight bytes are placed: `(module, bytes done, bytes in total)`.
    pub progress: Option<&'a mut dyn FnMut(Module, usize, usize)>,
    /// `--split-layers`: the encoder's layers divided over these backends in proportion to
    /// their devices' free memory (layer items of the placement still win).
    pub split_layers: Vec<Target>,
    /// Attention as one FLASH_ATTN node (`Some(true)`), as products and a soft-max
    /// (`Some(false)`), or, with `None`, as each layer's device computes it faster
    /// ([`DeviceCaps::prompt_flash_attn`](tessera_core::DeviceCaps::prompt_flash_attn)).
    pub flash_attn: Option<bool>,
    /// The precision of the layers whose attention is one FLASH_ATTN node (`--compute-type f16`:
    /// [`Precision::Reduced`], half-precision products with f32 sums, as PyTorch's f16
    /// attention computes them, and attention's keys and values and the feed-forward's hidden
    /// values in f16). Layers whose attention is products and a soft-max are always f32.
    pub attention_precision: Precision,
    /// Copies of every split input (the scheduler's `n_copies`, 1 to 4; 0 means 1): with more
    /// than one, [`Embedder::embed_batches`] overlaps successive batches across devices.
    pub pipeline: usize,
}

/// Which layers of the encoder compute attention as one FLASH_ATTN node, and in which
/// precision: all or none as `flash_attn` says, else those whose device computes it faster
/// ([`LoadOptions::flash_attn`]); in `precision` ([`LoadOptions::attention_precision`]).
fn flash_attn_layers(
    placement: &Placement,
    flash_attn: Option<bool>,
    precision: Precision,
) -> impl Fn(usize) -> Option<Precision> + '_ {
    let encoder = Module::Encoder.index();
    move |layer: usize| {
        let fused =
            flash_attn.unwrap_or_else(|| placement.compute_of(encoder, Some(layer)).device.caps().prompt_flash_attn);
        fused.then_some(precision)
    }
}

/// One backend per device (and instance) the placement names: accelerators in the order the
/// modules and layers name them, then a CPU (the placement's, else the built-in one), which
/// the scheduler needs last. (The Llama generator's too.)
pub(crate) fn backend_targets(placement: &Placement) -> Vec<Target> {
    let mut named: Vec<&'static dyn Device> = Vec::new();
    let layer_devices = placement.layers.iter().flat_map(|r| r.compute.map(|t| t.device).into_iter().chain(r.params));
    for d in placement.compute.iter().chain(&placement.params).copied().chain(layer_devices) {
        if Placement::index_in(&named, d).is_none() {
            named.push(d);
        }
    }
    if !named.iter().any(|d| d.is_host_cpu()) {
        named.push(&tessera_cpu::CPU_DEVICE);
    }
    placement.targets(&named)
}

/// One weight the graph declares: its module and layer, name in the file (for a weight joined
/// from several of the file's, [`bert::weight_parts`], the graph's name mapped as the file
/// names its weights, and those parts), type (as the graph takes it, [`graph_type`]) and shape.
struct ModelWeight {
    module: Module,
    layer: Option<usize>,
    name: String,
    parts: Vec<String>,
    dtype: DType,
    ne: [usize; 4],
}

/// The type of each weight (by checkpoint name) in the graph: the file's, except that the
/// weights the graph adds rather than multiplies (biases, layer norms, the token-type table;
/// `bert::is_quantizable` is false for them) stored in 16 bits are widened to f32 when placed,
/// as converted files hold them: backends fuse those additions only in f32.
/// A weight joined from parts takes their type.
fn graph_type(file: &ModelFile, names: TensorNames) -> impl Fn(&str) -> DType + '_ {
    move |name: &str| match bert::weight_parts(name)
        .first()
        .and_then(|p| file.tensor(&names.file_name(p)))
        .map(|t| t.dtype)
    {
        Some(DType::F16 | DType::BF16) if !bert::is_quantizable(name) => DType::F32,
        stored => stored.unwrap_or(DType::F32),
    }
}

/// The weights the graph of `config` declares, with their types ([`graph_type`]): an error
/// if the file lacks one, holds it in another shape, or in a type its op cannot take.
/// `flash_attn` says which layers are built with one FLASH_ATTN node and in which precision
/// (the biases of reduced-precision layers are f16 weights).
fn weight_specs(
    file: &ModelFile,
    names: TensorNames,
    config: &BertConfig,
    flash_attn: &dyn Fn(usize) -> Option<Precision>,
) -> Result<Vec<ModelWeight>> {
    let mut probe = Graph::new();
    let dtype_of = graph_type(file, names);
    let shapes = bert::build_with(&mut probe, config, &dtype_of, Layout::packed(&[1]), flash_attn)?;
    let mut specs = Vec::with_capacity(shapes.weights.len());
    for (name, module, id) in &shapes.weights {
        let (module, id) = (*module, *id);
        let t = probe.tensor(id)?;
        let (dtype, ne) = (t.dtype(), t.ne());
        let parts = bert::weight_parts(name);
        let joined = parts.len() > 1;
        // A joined weight's parts: the shape of the whole but for the outermost dimension,
        // which they divide equally.
        let outer = ne.iter().rposition(|&n| n > 1).unwrap_or(0);
        let mut part_ne = ne;
        part_ne[outer] /= parts.len();
        let parts: Vec<String> = parts.iter().map(|p| names.file_name(p).into_owned()).collect();
        for part in &parts {
            match file.tensor(part) {
                Some(f) if f.ne == part_ne => {}
                found => {
                    let path = file.path().display().to_string();
                    let message = match found {
                        // The type the file may hold it in (a widened weight: its own).
                        Some(f) => format!(
                            "tensor '{part}' is {} {} but the model expects {} {}",
                            f.dtype,
                            Shape(f.ne),
                            if placeable(f.dtype, dtype) { f.dtype } else { dtype },
                            Shape(part_ne)
                        ),
                        None => format!("has no tensor '{part}' ({dtype} {})", Shape(part_ne)),
                    };
                    return Err(tessera_core::Error::File { path, message }.into());
                }
            }
        }
        let (name, parts) =
            if joined { (names.file_name(name).into_owned(), parts) } else { (parts[0].clone(), Vec::new()) };
        specs.push(ModelWeight { module, layer: shapes.layer_of(id), name, parts, dtype, ne });
    }
    Ok(specs)
}

/// The tokenizer that comes with the model in `file`: the `tokenizer.json` beside it, else the
/// vocabulary in its GGUF metadata, else none. It truncates at [`MAX_TOKENS`] or the model's
/// positions, whichever is fewer.
fn model_tokenizer(file: &ModelFile, config: &BertConfig) -> Result<Option<Tokenizer>> {
    let max_tokens = MAX_TOKENS.min(config.max_positions);
    let beside = file.path().with_file_name("tokenizer.json");
    if beside.exists() {
        return Tokenizer::from_file(&beside, max_tokens).map(Some);
    }
    let Some(gguf) = file.gguf() else { return Ok(None) };
    let path = file.path().display().to_string();
    let Some(vocab) = Vocab::from_gguf(&gguf, &path)? else { return Ok(None) };
    if vocab.tokens.len() > config.vocab {
        return Err(Error::Tokenizer {
            path,
            message: format!(
                "its vocabulary has {} tokens but the model embeds {}; expected at most {}",
                vocab.tokens.len(),
                config.vocab,
                config.vocab
            ),
        });
    }
    Tokenizer::from_vocab(&vocab, file.path(), max_tokens).map(Some)
}

impl Embedder {
    /// Loads the model at `path` (safetensors or GGUF; its `config.json` is read from the same
    /// folder, see [`BertConfig::of_file`]) and places each module as `placement` says, a
    /// placement resolved for [`MODULES`](crate::MODULES) (`--backend` / `--params-backend`):
    ///
    /// ```no_run
    /// # use tessera_models::{Embedder, MODULES};
    /// # use tessera_std::placement::Placement;
    /// # let devices = [&tessera_cpu::CPU_DEVICE as &'static dyn tessera_core::Device];
    /// let placement = Placement::resolve("encoder=gpu", "cpu", &MODULES, &devices)?;
    /// let embedder = Embedder::load("model.safetensors", placement)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn load(path: impl AsRef<Path>, placement: Placement) -> Result<Embedder> {
        Embedder::load_with(path, placement, LoadOptions::default())
    }

    /// Checks the model at `path` as [`load`](Self::load) does before placing its weights
    /// (readable, a valid config, every weight present with the shape and a type the graph
    /// takes) and returns its config.
    pub fn check(path: impl AsRef<Path>) -> Result<BertConfig> {
        let file = ModelFile::open(path.as_ref())?;
        let config = BertConfig::of_file(&file)?;
        weight_specs(&file, TensorNames::of_file(&file), &config, &|_| None)?;
        Ok(config)
    }

    /// [`load`](Self::load) with threads, a tokenizer and a progress callback.
    pub fn load_with(path: impl AsRef<Path>, mut placement: Placement, options: LoadOptions<'_>) -> Result<Embedder> {
        let LoadOptions { threads, tokenizer, mut progress, split_layers, pipeline, flash_attn, attention_precision } =
            options;
        let file = ModelFile::open(path.as_ref())?;
        let config = BertConfig::of_file(&file)?;
        let n = Module::ALL.len();
        if [placement.compute.len(), placement.instances.len(), placement.params.len(), placement.params_given.len()]
            .iter()
            .any(|&len| len != n)
        {
            return Err(Error::InvalidConfig {
                message: format!(
                    "the placement has {} compute and {} params devices; expected one per module ({}): \
                     resolve it with tessera_models::MODULES",
                    placement.compute.len(),
                    placement.params.len(),
                    Module::ALL.map(Module::name).join(", ")
                ),
            });
        }
        let encoder = Module::Encoder.index();
        if !split_layers.is_empty() {
            placement.split_layers(encoder, config.layers, &split_layers);
        }
        placement
            .check_layers(encoder, Module::Encoder.name(), config.layers)
            .map_err(|e| Error::InvalidConfig { message: e.to_string() })?;
        let tokenizer = match tokenizer {
            Some(t) => Some(t),
            None => model_tokenizer(&file, &config)?,
        };
        let targets = backend_targets(&placement);

        // The weights each module declares, placed where its params (of each layer) live.
        let names = TensorNames::of_file(&file);
        let specs =
            weight_specs(&file, names, &config, &flash_attn_layers(&placement, flash_attn, attention_precision))?;
        let mut stores = Vec::new();
        for m in Module::ALL {
            let on = |w: &ModelWeight| placement.params_of(m.index(), w.layer);
            let mine: Vec<&ModelWeight> = specs.iter().filter(|w| w.module == m).collect();
            let total: usize = mine
                .iter()
                .map(|w| w.dtype.row_bytes(w.ne[0]).unwrap_or(0) * w.ne[1..].iter().product::<usize>())
                .sum();
            let mut devices: Vec<&'static dyn Device> = Vec::new();
            for w in &mine {
                if Placement::index_in(&devices, on(w)).is_none() {
                    devices.push(on(w));
                }
            }
            let mut before = 0;
            for device in devices {
                let group: Vec<WeightSpec> = mine
                    .iter()
                    .filter(|w| std::ptr::addr_eq(on(w), device))
                    .map(|w| WeightSpec { name: &w.name, parts: &w.parts, dtype: w.dtype, ne: w.ne })
                    .collect();
                let mut report = |done: usize, _: usize| {
                    if let Some(p) = progress.as_mut() {
                        p(m, (before + done).min(total), total);
                    }
                };
                let store = place_weights(&file, &group, device, &mut report)?;
                before += store.bytes;
                stores.push(store);
            }
        }

        let mut backends: Vec<Box<dyn Backend>> = Vec::new();
        for t in &targets {
            let mut b = t.device.init_backend()?;
            if let (Some(n), Some(Extension::SetThreads(set_threads))) =
                (threads, t.device.reg().extension(extension::SET_THREADS))
            {
                set_threads(&mut *b, n)?;
            }
            backends.push(b);
        }
        let options = SchedulerOptions { n_copies: pipeline.max(1), ..SchedulerOptions::default() };
        let sched = tessera_std::sched_debug::scheduler(backends, &[], options)?;
        Ok(Embedder {
            config,
            file,
            names,
            placement,
            targets,
            stores,
            sched,
            tokenizer,
            flash_attn,
            attention_precision,
            timing: Timing::default(),
            built_for: None,
            landing: Vec::new(),
        })
    }

    /// The model's shape.
    pub fn config(&self) -> &BertConfig {
        &self.config
    }

    /// Where each module runs and keeps its weights.
    pub fn placement(&self) -> &Placement {
        &self.placement
    }

    /// "embed: CPU (params CPU), encoder: ..." for the user; a module whose layers run
    /// in different places lists them in runs ("encoder.0-2: CUDA0 (params CUDA0), ...").
    pub fn describe(&self) -> String {
        let p = &self.placement;
        let mut parts = Vec::new();
        for m in Module::ALL {
            let i = m.index();
            let layers = if m == Module::Encoder { self.config.layers } else { 0 };
            let at = |l: Option<usize>| (p.compute_of(i, l), p.params_of(i, l).name());
            if (0..layers).all(|l| at(Some(l)) == at(Some(0))) {
                let (c, params) = at(if layers > 0 { Some(0) } else { None });
                parts.push(format!("{}: {c} (params {params})", m.name()));
                continue;
            }
            let mut first = 0;
            for l in 1..=layers {
                if l == layers || at(Some(l)) != at(Some(first)) {
                    let (c, params) = at(Some(first));
                    let range = if l - 1 == first { format!("{first}") } else { format!("{first}-{}", l - 1) };
                    parts.push(format!("{}.{range}: {c} (params {params})", m.name()));
                    first = l;
                }
            }
        }
        parts.join(", ")
    }

    /// The scheduler's backends, in its order (`CUDA0`, `CUDA0:1`, ..., the CPU last).
    pub fn targets(&self) -> &[Target] {
        &self.targets
    }

    /// The tokenizer, if it has one.
    pub fn tokenizer(&self) -> Option<&Tokenizer> {
        self.tokenizer.as_ref()
    }

    /// Uses `tokenizer` for the texts given to [`embed`](Self::embed) and
    /// [`tokenize`](Self::tokenize).
    pub fn set_tokenizer(&mut self, tokenizer: Tokenizer) {
        self.tokenizer = Some(tokenizer);
    }

    /// The token ids of `texts` with the model's tokenizer.
    pub fn tokenize(&self, texts: &[&str]) -> Result<Vec<Vec<u32>>> {
        let tokenizer = self
            .tokenizer
            .as_ref()
            .ok_or_else(|| Error::NoTokenizer { model: self.file.path().display().to_string() })?;
        tokenizer.encode(texts)
    }

    /// Embeddings (L2-normalised, `hidden` values each) of `texts`, tokenized and computed in
    /// one packed batch.
    pub fn embed(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        let tokens = self.tokenize(texts)?;
        self.embed_tokens(&tokens)
    }

    /// Embeddings of token-id sequences (1 to `max_positions` ids each), computed in one
    /// batch (packed, or padded rows when all have the same length); [`timing`](Self::timing)
    /// then says where the time went.
    pub fn embed_tokens<S: AsRef<[u32]>>(&mut self, sequences: &[S]) -> Result<Vec<Vec<f32>>> {
        if sequences.is_empty() {
            return Ok(Vec::new());
        }
        let start = Instant::now();
        let lens = self.check_lengths(sequences)?;
        let pipelined = self.sched.n_copies() > 1;
        let same = self.built_for.as_ref().is_some_and(|b| b.lens == lens) && self.sched.graph().is_some();
        self.ready_for(&lens)?;
        if pipelined || !same {
            let built = self.built_for.as_ref().ok_or(tessera_core::Error::Cancelled)?;
            self.sched.alloc_graph(&built.graph)?;
        }
        let staged = self.built_for.as_ref().and_then(|b| b.staged.as_ref());
        match staged {
            Some(staged) => staged.write_ids(sequences)?,
            None => self.set_inputs(sequences, &lens)?,
        }
        let prepared = Instant::now();
        let out = if staged.is_some() {
            self.compute_staged(lens.len())?
        } else {
            self.sched.compute()?;
            let out = self.sched.graph().ok_or(tessera_core::Error::Cancelled)?.get_f32(self.output()?)?;
            out.chunks(self.config.hidden).map(<[f32]>::to_vec).collect()
        };
        self.timing = Timing { prepare: prepared - start, compute: prepared.elapsed() };
        Ok(out)
    }

    /// Runs the scheduler's graph on the staged inputs (their copies queued, not waited for)
    /// and reads the `n` embeddings back, through pinned memory where the output's device
    /// has some (each embedding copied from there into its own vector once).
    fn compute_staged(&mut self, n: usize) -> Result<Vec<Vec<f32>>> {
        let built = self.built_for.as_ref().ok_or(tessera_core::Error::Cancelled)?;
        let staged = built.staged.as_ref().ok_or(tessera_core::Error::Cancelled)?;
        let output = built.model.embeddings;
        let hidden = self.config.hidden;
        let len = n * hidden * std::mem::size_of::<f32>();
        let pinned = self.placement.compute_of(Module::Pool.index(), None).device.host_buffer_type();
        let landing = match (pinned, self.landing.first()) {
            (None, _) => None,
            (Some(_), Some(b)) if b.size() >= len => Some(b.clone()),
            (Some(buffer_type), _) => {
                let fresh = buffer_type.alloc_buffer(len)?;
                self.landing.truncate(0);
                self.landing.push(fresh.clone());
                Some(fresh)
            }
        };
        let sched = &mut self.sched;
        let mut queue = || -> Result<()> {
            // SAFETY: the staged inputs are not written before the synchronize below.
            unsafe { staged.queue(sched)? };
            sched.compute_async()?;
            if let Some(landing) = &landing {
                let dst = landing.base().host_ptr_mut().ok_or(tessera_core::Error::Cancelled)?;
                // SAFETY: `landing` holds at least `len` bytes of host memory that nothing
                // else reads or writes before the synchronize below.
                unsafe { sched.get_tensor_async(output, dst, len)? };
            }
            Ok(())
        };
        // Whatever happened, nothing may still be reading the staged inputs or writing the
        // landing buffer when this returns.
        let queued = queue();
        let waited = self.sched.synchronize();
        queued?;
        waited?;
        let graph = self.sched.graph().ok_or(tessera_core::Error::Cancelled)?;
        let mut out = Vec::with_capacity(n);
        for at in (0..len).step_by(hidden * std::mem::size_of::<f32>()) {
            let mut e = vec![0f32; hidden];
            let bytes = bytemuck::cast_slice_mut(&mut e);
            match &landing {
                Some(landing) => landing.get_bytes(at, bytes)?,
                None => graph.get_bytes(output, at, bytes)?,
            }
            out.push(e);
        }
        Ok(out)
    }

    /// Embeddings of several batches (each as [`embed_tokens`](Self::embed_tokens) takes it),
    /// queued one after another and waited for once: with a pipeline
    /// ([`LoadOptions::pipeline`]) and modules or layers on several devices, a device works
    /// on the next batch while the next device works on this one.
    pub fn embed_batches<S: AsRef<[u32]>>(&mut self, batches: &[&[S]]) -> Result<Vec<Vec<Vec<f32>>>> {
        let start = Instant::now();
        let mut outs: Vec<Vec<f32>> = Vec::with_capacity(batches.len());
        let queued = self.queue_batches(batches, &mut outs);
        // Whatever happened, nothing may still be writing into `outs` when it is dropped.
        let waited = self.sched.synchronize();
        let landed = queued?;
        waited?;
        for (k, out) in outs.iter_mut().enumerate().filter(|&(k, _)| landed[k]) {
            let mut raw = vec![0u8; std::mem::size_of_val(out.as_slice())];
            self.landing[k].get_bytes(0, &mut raw)?;
            for (v, b) in out.iter_mut().zip(raw.chunks_exact(4)) {
                *v = f32::from_ne_bytes([b[0], b[1], b[2], b[3]]);
            }
        }
        self.timing = Timing { prepare: Duration::ZERO, compute: start.elapsed() };
        Ok(outs.iter().map(|out| out.chunks(self.config.hidden).map(<[f32]>::to_vec).collect()).collect())
    }

    /// Queues every batch of [`embed_batches`](Self::embed_batches), each one's embeddings
    /// read as soon as they are computed: into `landing[k]` for batch `k` where the output's
    /// device has pinned host memory (then `true` for it), else straight into `outs[k]`.
    fn queue_batches<S: AsRef<[u32]>>(&mut self, batches: &[&[S]], outs: &mut Vec<Vec<f32>>) -> Result<Vec<bool>> {
        let pinned = self.placement.compute_of(Module::Pool.index(), None).device.host_buffer_type();
        let mut landed = Vec::with_capacity(batches.len());
        for sequences in batches {
            if sequences.is_empty() {
                outs.push(Vec::new());
                landed.push(false);
                continue;
            }
            let lens = self.check_lengths(sequences)?;
            self.ready_for(&lens)?;
            let built = self.built_for.as_ref().ok_or(tessera_core::Error::Cancelled)?;
            self.sched.alloc_graph(&built.graph)?;
            self.set_inputs(sequences, &lens)?;
            self.sched.compute_async()?;
            let mut out = vec![0f32; lens.len() * self.config.hidden];
            let (mut dst, len) = (out.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(out.as_slice()));
            outs.push(out);
            let k = landed.len();
            match pinned {
                Some(buffer_type) => {
                    if self.landing.get(k).is_none_or(|b| b.size() < len) {
                        let fresh = buffer_type.alloc_buffer(len)?;
                        match self.landing.get_mut(k) {
                            Some(b) => *b = fresh,
                            None => self.landing.push(fresh),
                        }
                    }
                    dst = self.landing[k].base().host_ptr_mut().ok_or(tessera_core::Error::Cancelled)?;
                    landed.push(true);
                }
                None => landed.push(false),
            }
            // SAFETY: `dst` is `landing[k]` or the buffer just pushed to `outs` (whose heap
            // memory does not move with the Vec), `len` bytes either way; neither is read,
            // replaced or freed until `embed_batches` has synchronised the scheduler.
            unsafe { self.sched.get_tensor_async(self.output()?, dst, len)? };
        }
        Ok(landed)
    }

    /// The lengths of `sequences`, each 1 to `max_positions` tokens.
    fn check_lengths<S: AsRef<[u32]>>(&self, sequences: &[S]) -> Result<Vec<usize>> {
        let lens: Vec<usize> = sequences.iter().map(|s| s.as_ref().len()).collect();
        let max = self.config.max_positions;
        if let Some((index, &tokens)) = lens.iter().enumerate().find(|(_, &l)| l == 0 || l > max) {
            return Err(Error::SequenceLength { index, tokens, max });
        }
        Ok(lens)
    }

    /// Makes the graph for sequences of `lens` tokens the scheduler's, building it and sizing
    /// the compute buffers for it when the last batch had other lengths.
    fn ready_for(&mut self, lens: &[usize]) -> Result<()> {
        if self.built_for.as_ref().is_some_and(|b| b.lens == lens) {
            return Ok(());
        }
        self.built_for = None;
        let (graph, model) = self.graph(lens)?;
        self.sched.reserve(&graph)?;
        // Pipelined runs keep their inputs in host memory, which the scheduler copies into each
        // run's slot: nothing is staged for them.
        let ids_device = self.placement.compute_of(Module::Embed.index(), None).device;
        let staged = match ids_device.host_buffer_type().filter(|_| self.sched.n_copies() == 1) {
            Some(buffer_type) => Some(StagedInputs::new(buffer_type, &model, lens)?),
            None => None,
        };
        self.built_for = Some(Built { lens: lens.to_vec(), graph, model, staged });
        Ok(())
    }

    /// Writes the inputs of `sequences` into the scheduler's graph.
    fn set_inputs<S: AsRef<[u32]>>(&self, sequences: &[S], lens: &[usize]) -> Result<()> {
        let model = &self.built_for.as_ref().ok_or(tessera_core::Error::Cancelled)?.model;
        let inputs = inputs_for(&Layout::for_lengths(lens), lens)?;
        // Sequence by sequence: a flattening iterator would push id by id.
        let mut ids: Vec<i32> = Vec::with_capacity(lens.iter().sum());
        for s in sequences {
            ids.extend(s.as_ref().iter().map(|&t| t as i32));
        }
        let sg = self.sched.graph().ok_or(tessera_core::Error::Cancelled)?;
        sg.set_i32(model.token_ids, &ids)?;
        sg.set_i32(model.positions, &inputs.positions)?;
        sg.set_f32(model.attention_mask, &inputs.attention_mask)?;
        if let (Some(gather), Some(scatter)) = (model.attention_gather, model.attention_scatter) {
            sg.set_i32(gather, &inputs.attention_gather)?;
            sg.set_i32(scatter, &inputs.attention_scatter)?;
        }
        sg.set_f32(model.pooling, &inputs.pooling)?;
        Ok(())
    }

    /// The embeddings tensor of the graph built last.
    fn output(&self) -> Result<tessera_core::TensorId> {
        Ok(self.built_for.as_ref().ok_or(tessera_core::Error::Cancelled)?.model.embeddings)
    }

    /// Where the time of the last [`embed`](Self::embed) or
    /// [`embed_tokens`](Self::embed_tokens) went (tokenizing excluded).
    pub fn timing(&self) -> Timing {
        self.timing
    }

    /// The scheduler (for its plan and buffers).
    pub fn scheduler(&self) -> &Scheduler {
        &self.sched
    }

    /// Builds the graph for sequences of `lens` tokens (`Layout::for_lengths`), weights bound and
    /// every node pinned to its module's device.
    fn graph(&mut self, lens: &[usize]) -> Result<(Graph, BertGraph)> {
        let mut g = Graph::new();
        let (file, names) = (&self.file, self.names);
        let dtype_of = graph_type(file, names);
        let flash_attn = flash_attn_layers(&self.placement, self.flash_attn, self.attention_precision);
        let model = bert::build_with(&mut g, &self.config, &dtype_of, Layout::for_lengths(lens), &flash_attn)?;
        for (name, _, id) in &model.weights {
            let name = names.file_name(name);
            let data = self.stores.iter().find_map(|s| s.get(&name)).ok_or_else(|| tessera_core::Error::File {
                path: self.file.path().display().to_string(),
                message: format!("weight '{name}' was not loaded"),
            })?;
            g.bind(*id, data.clone())?;
        }
        self.sched.clear_pins();
        for &id in g.nodes() {
            if let Some(m) = model.module_of(id) {
                let target = self.placement.compute_of(m.index(), model.layer_of(id));
                if let Some(b) = target.index_in(&self.targets) {
                    self.sched.set_tensor_backend(id, b)?;
                }
            }
        }
        // Each input lives where its first reader runs: set there from the host directly,
        // not copied there from the CPU's memory as a split input on every run. (Pipelined,
        // inputs stay in host memory, which the scheduler copies to each run's slot.)
        let pipelined = self.sched.n_copies() > 1;
        let inputs = [
            (Some(model.token_ids), Module::Embed, None),
            (Some(model.positions), Module::Embed, None),
            (Some(model.attention_mask), Module::Encoder, Some(0)),
            (model.attention_gather, Module::Encoder, Some(0)),
            (model.attention_scatter, Module::Encoder, Some(0)),
            (Some(model.pooling), Module::Pool, None),
        ];
        for (id, m, layer) in inputs {
            let target = self.placement.compute_of(m.index(), layer);
            if let (Some(id), Some(b), false) = (id, target.index_in(&self.targets), pipelined) {
                self.sched.set_tensor_backend(id, b)?;
            }
        }
        Ok((g, model))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use tessera_sim::{SimConfig, SimDevice};
    use tessera_std::gguf_writer::MetaValue;

    /// A GGUF file's metadata entries, to edit.
    type Metadata = Vec<(String, MetaValue)>;

    use super::*;
    use crate::module::MODULES;
    use crate::test_model::{self, cosine, TINY};

    fn cpu() -> Vec<&'static dyn Device> {
        vec![&tessera_cpu::CPU_DEVICE]
    }

    fn on(devices: &[&'static dyn Device], backend: &str, params: &str) -> Placement {
        Placement::resolve(backend, params, &MODULES, devices).unwrap()
    }

    /// The tiny model as GGUF with `matrix_type` matrices, in a fresh directory.
    fn tiny_gguf(matrix_type: DType) -> std::path::PathBuf {
        let path = test_model::temp_dir("embedder").join("tiny.gguf");
        std::fs::write(&path, test_model::gguf_bytes(&TINY, matrix_type)).unwrap();
        path
    }

    const SEQUENCES: [&[u32]; 3] = [&[2, 17, 5, 3], &[2, 9, 33, 12, 39, 7, 3], &[2, 3]];

    #[test]
    fn embeddings_match_a_float64_bert() {
        let path = tiny_gguf(DType::F32);
        let mut e = Embedder::load(&path, on(&cpu(), "", "")).unwrap();
        assert_eq!(*e.config(), TINY);
        let got = e.embed_tokens(&SEQUENCES).unwrap();
        assert_eq!(got.len(), SEQUENCES.len());
        for (ids, g) in SEQUENCES.iter().zip(&got) {
            let want = test_model::reference_embedding(&TINY, ids);
            assert_eq!(g.len(), TINY.hidden);
            let norm: f32 = g.iter().map(|v| v * v).sum::<f32>().sqrt();
            assert!((norm - 1.0).abs() < 1e-5, "norm {norm}");
            let max_diff = g.iter().zip(&want).map(|(a, b)| (f64::from(*a) - b).abs()).fold(0.0, f64::max);
            assert!(max_diff < 1e-5, "{ids:?}: max difference {max_diff} from the float64 reference");
        }
        assert!(e.timing().compute > Duration::ZERO);
        std::fs::remove_dir_all(path.parent().unwrap()).ok();
    }

    /// Also in reduced precision, which the CPU computes in full over keys and values rounded to
    /// f16.
    #[test]
    fn attention_as_one_flash_attn_node_embeds_like_products() {
        let path = tiny_gguf(DType::F32);
        let load = |flash_attn, attention_precision| {
            let options = LoadOptions { flash_attn, attention_precision, ..LoadOptions::default() };
            Embedder::load_with(&path, on(&cpu(), "", ""), options).unwrap()
        };
        let (fused, reduced) = (load(Some(true), Precision::Full), load(Some(true), Precision::Reduced));
        let mut products = load(None, Precision::Reduced);
        for (mut fused, precision) in [(fused, Precision::Full), (reduced, Precision::Reduced)] {
            // Packed sequences of several lengths, and rows of one length (the padded layout).
            for batch in [&SEQUENCES[..], &[&[2, 17, 5, 3], &[2, 9, 33, 3]]] {
                let (got, want) = (fused.embed_tokens(batch).unwrap(), products.embed_tokens(batch).unwrap());
                let worst =
                    got.iter().zip(&want).map(|(g, w)| cosine(g, &w.iter().map(|&v| f64::from(v)).collect::<Vec<_>>()));
                let worst = worst.fold(1.0, f64::min);
                assert!(worst > 0.999999, "worst cosine {worst}");
                let flash_nodes = |e: &Embedder| {
                    let g = &e.built_for.as_ref().unwrap().graph;
                    let of = |id: &tessera_core::TensorId| g.tensor(*id).unwrap().op();
                    g.nodes()
                        .iter()
                        .filter(
                            |id| matches!(of(id), tessera_core::Op::FlashAttn { precision: p, .. } if p == precision),
                        )
                        .count()
                };
                assert_eq!((flash_nodes(&fused), flash_nodes(&products)), (TINY.layers, 0));
                let g = &fused.built_for.as_ref().unwrap().graph;
                // Each FLASH_ATTN node's queries, keys and values.
                let sources: Vec<[&tessera_core::Tensor; 3]> = g
                    .nodes()
                    .iter()
                    .map(|id| g.tensor(*id).unwrap())
                    .filter(|t| matches!(t.op(), tessera_core::Op::FlashAttn { .. }))
                    .map(|t| [0, 1, 2].map(|slot| g.tensor(t.src(slot).unwrap()).unwrap()))
                    .collect();
                let half = if precision == Precision::Reduced { DType::F16 } else { DType::F32 };
                let qkv_types: Vec<_> = sources.iter().flatten().map(|t| t.dtype()).collect();
                assert!(qkv_types.iter().all(|&t| t == half), "{precision:?}: queries, keys and values {qkv_types:?}");
                // They are views of one product's result.
                let roots: Vec<_> = sources.iter().map(|s| s.map(|t| t.view_src())).collect();
                assert!(roots.iter().all(|[q, k, v]| q.is_some() && q == k && k == v), "{roots:?}");
            }
        }
        std::fs::remove_dir_all(path.parent().unwrap()).ok();
    }

    #[test]
    fn a_packed_batch_equals_its_sequences_one_by_one() {
        let path = tiny_gguf(DType::F32);
        let mut e = Embedder::load(&path, on(&cpu(), "", "")).unwrap();
        let batch = e.embed_tokens(&SEQUENCES).unwrap();
        for (ids, b) in SEQUENCES.iter().zip(&batch) {
            let alone = e.embed_tokens(&[ids]).unwrap();
            let diff = alone[0].iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max);
            assert!(diff < 1e-6, "{ids:?}: packed and alone differ by {diff}");
        }
        assert!(e.embed_tokens::<&[u32]>(&[]).unwrap().is_empty());
        std::fs::remove_dir_all(path.parent().unwrap()).ok();
    }

    #[test]
    fn batches_of_the_lengths_of_the_last_reuse_its_graph_with_their_own_tokens() {
        let path = tiny_gguf(DType::F32);
        let mut e = Embedder::load(&path, on(&cpu(), "", "")).unwrap();
        let (first, second): ([&[u32]; 2], [&[u32]; 2]) = ([&[2, 17, 5, 3], &[2, 9]], [&[2, 30, 31, 3], &[2, 3]]);
        e.embed_tokens(&first).unwrap();
        let prepared = e.scheduler().program_stats();
        let again = e.embed_tokens(&second).unwrap();
        assert_eq!(e.scheduler().program_stats(), prepared, "nothing prepared anew");
        let fresh = Embedder::load(&path, on(&cpu(), "", "")).unwrap().embed_tokens(&second).unwrap();
        assert_eq!(again, fresh);
        std::fs::remove_dir_all(path.parent().unwrap()).ok();
    }

    #[test]
    fn sequences_of_no_or_too_many_tokens_are_an_error() {
        let path = tiny_gguf(DType::F32);
        let mut e = Embedder::load(&path, on(&cpu(), "", "")).unwrap();
        let err = e.embed_tokens(&[vec![2, 3], vec![]]).unwrap_err();
        assert!(matches!(err, Error::SequenceLength { index: 1, tokens: 0, max: 16 }), "{err:?}");
        let err = e.embed_tokens(&[vec![1; 17]]).unwrap_err();
        assert_eq!(err.to_string(), "sequence 0 has 17 tokens; 1 to 16 are allowed");
        std::fs::remove_dir_all(path.parent().unwrap()).ok();
    }

    #[test]
    fn text_needs_a_tokenizer() {
        let path = tiny_gguf(DType::F32);
        let mut e = Embedder::load(&path, on(&cpu(), "", "")).unwrap();
        assert!(e.tokenizer().is_none());
        let err = e.embed(&["A sentence."]).unwrap_err();
        assert!(matches!(err, Error::NoTokenizer { .. }), "{err:?}");
        assert!(err.to_string().contains("put its tokenizer.json next to it"), "{err}");
        std::fs::remove_dir_all(path.parent().unwrap()).ok();
    }

    #[test]
    fn the_tokenizer_next_to_the_model_turns_text_into_the_same_tokens() {
        let path = tiny_gguf(DType::F32);
        std::fs::write(path.with_file_name("tokenizer.json"), test_model::TOKENIZER_JSON).unwrap();
        let mut e = Embedder::load(&path, on(&cpu(), "", "")).unwrap();
        assert_eq!(e.tokenizer().unwrap().max_tokens(), TINY.max_positions, "capped at the positions");
        let texts = ["A sentence.", "Another one."];
        assert_eq!(e.tokenize(&texts).unwrap(), [vec![2, 4, 5, 6, 3], vec![2, 7, 8, 9, 6, 3]]);
        let from_text = e.embed(&texts).unwrap();
        assert_eq!(from_text, e.embed_tokens(&e.tokenize(&texts).unwrap()).unwrap());
        std::fs::remove_dir_all(path.parent().unwrap()).ok();
    }

    /// The simulated accelerator computes with the reference kernels, the CPU with its fast
    /// ones: the same embeddings up to rounding.
    fn assert_close(got: &[Vec<f32>], want: &[Vec<f32>]) {
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(want) {
            let worst = g.iter().zip(w).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
            assert!(g.len() == w.len() && worst < 1e-5, "differ by {worst}: {g:?} vs {w:?}");
        }
    }

    #[test]
    fn modules_on_an_accelerator_with_weights_on_the_cpu_give_the_same_embeddings() {
        let path = tiny_gguf(DType::F32);
        let sim: &'static dyn Device = SimDevice::create(SimConfig::new("SIM0"));
        let devices = vec![sim, &tessera_cpu::CPU_DEVICE];
        let on_cpu = Embedder::load(&path, on(&devices, "cpu", "")).unwrap().embed_tokens(&SEQUENCES).unwrap();
        let mut split = Embedder::load(&path, on(&devices, "encoder=sim0,pool=sim0,embed=cpu", "cpu")).unwrap();
        assert_eq!(split.describe(), "embed: CPU (params CPU), encoder: SIM0 (params CPU), pool: SIM0 (params CPU)");
        assert_close(&split.embed_tokens(&SEQUENCES).unwrap(), &on_cpu);
        let plan = split.scheduler().plan().unwrap();
        assert!(plan.splits.len() >= 2, "{plan}");
        assert!(plan.splits.iter().any(|s| s.inputs.iter().any(|i| i.name.ends_with(".weight"))), "{plan}");
        // Everything on the accelerator: the scheduler still gets a CPU, last.
        let mut resident = Embedder::load(&path, on(&devices, "sim0", "")).unwrap();
        assert_close(&resident.embed_tokens(&SEQUENCES).unwrap(), &on_cpu);
        assert_eq!(resident.targets().iter().map(|t| t.to_string()).collect::<Vec<_>>(), ["SIM0", "CPU"]);
        std::fs::remove_dir_all(path.parent().unwrap()).ok();
    }

    #[test]
    fn layers_on_two_streams_of_a_device_and_pipelined_batches_give_the_bits_of_one_stream() {
        let path = tiny_gguf(DType::F32);
        // With pinned host memory, which queued batches' embeddings are read into.
        let mut config = SimConfig::new("SIM_LAYERS");
        config.pinned_host = true;
        let sim: &'static dyn Device = SimDevice::create(config);
        assert!(sim.host_buffer_type().is_some());
        let devices = vec![sim, &tessera_cpu::CPU_DEVICE];
        let mut one = Embedder::load(&path, on(&devices, "sim_layers", "")).unwrap();
        let spec = "embed=sim_layers,encoder.0=sim_layers,encoder.1=sim_layers:1,pool=sim_layers:1";
        let options = LoadOptions { pipeline: 2, ..LoadOptions::default() };
        let mut two = Embedder::load_with(&path, on(&devices, spec, ""), options).unwrap();
        assert_eq!(
            two.describe(),
            "embed: SIM_LAYERS (params SIM_LAYERS), encoder.0: SIM_LAYERS (params SIM_LAYERS), \
             encoder.1: SIM_LAYERS:1 (params SIM_LAYERS), pool: SIM_LAYERS:1 (params SIM_LAYERS)"
        );
        let names: Vec<String> = two.targets().iter().map(|t| t.to_string()).collect();
        assert_eq!(names, ["SIM_LAYERS", "SIM_LAYERS:1", "CPU"]);
        let batches: [&[&[u32]]; 3] = [&SEQUENCES, &[&[2, 30, 31, 3], &[2, 3]], &SEQUENCES];
        let want: Vec<Vec<Vec<f32>>> = batches.iter().map(|b| one.embed_tokens(b).unwrap()).collect();
        // One stream: the inputs live on the device, set from their staged copies in pinned
        // memory (`want`), not copied from the CPU's memory as split inputs.
        let plan = one.scheduler().plan().unwrap();
        let inputs = ["token_ids", "positions", "attention_mask", "pooling"];
        assert!(plan.splits.iter().all(|s| s.inputs.iter().all(|i| !inputs.contains(&i.name.as_str()))), "{plan}");
        // Staged inputs with the embeddings read from a device without pinned memory.
        let mut pooled_on_cpu = Embedder::load(&path, on(&devices, "sim_layers,pool=cpu", "")).unwrap();
        assert_close(&pooled_on_cpu.embed_tokens(&SEQUENCES).unwrap(), &want[0]);
        assert_eq!(one.embed_batches(&batches).unwrap(), want, "one stream, batches queued");
        assert_eq!(two.embed_batches(&batches).unwrap(), want, "two streams, pipelined");
        assert_eq!(two.embed_tokens(&SEQUENCES).unwrap(), want[0]);
        let staged = |e: &Embedder| e.built_for.as_ref().unwrap().staged.is_some();
        assert_eq!((staged(&one), staged(&two)), (true, false), "inputs staged for one stream only");
        let plan = two.scheduler().plan().unwrap().to_string();
        assert!(plan.contains("(same device)"), "results cross between the streams as copies: {plan}");
        std::fs::remove_dir_all(path.parent().unwrap()).ok();
    }

    #[test]
    fn split_layers_divide_the_encoder_and_layer_items_still_win() {
        let path = tiny_gguf(DType::F32);
        let s0: &'static dyn Device = SimDevice::create(SimConfig::new("SIM_A"));
        let s1: &'static dyn Device = SimDevice::create(SimConfig::new("SIM_B"));
        let devices = vec![s0, s1, &tessera_cpu::CPU_DEVICE];
        let reference = Embedder::load(&path, on(&devices, "cpu", "")).unwrap().embed_tokens(&SEQUENCES).unwrap();
        let split = Placement::resolve_split("sim_a,sim_b", &devices).unwrap();
        let options = LoadOptions { split_layers: split.clone(), ..LoadOptions::default() };
        let mut e = Embedder::load_with(&path, on(&devices, "sim_a", ""), options).unwrap();
        assert!(
            e.describe().contains("encoder.0: SIM_A (params SIM_A), encoder.1: SIM_B (params SIM_B)"),
            "{}",
            e.describe()
        );
        assert_close(&e.embed_tokens(&SEQUENCES).unwrap(), &reference);
        let options = LoadOptions { split_layers: split, ..LoadOptions::default() };
        let e = Embedder::load_with(&path, on(&devices, "sim_a,encoder.1=cpu", ""), options).unwrap();
        assert!(e.describe().contains("encoder.1: CPU (params CPU)"), "{}", e.describe());
        let err = Embedder::load(&path, on(&devices, "encoder.1-2=cpu", "")).err().unwrap();
        assert!(err.to_string().contains("layers 1-2 of 'encoder' do not exist: the model has 2 (0-1)"), "{err}");
        std::fs::remove_dir_all(path.parent().unwrap()).ok();
    }

    #[test]
    fn a_placement_for_another_model_is_an_error() {
        let path = tiny_gguf(DType::F32);
        let cpu: &'static dyn Device = &tessera_cpu::CPU_DEVICE;
        let err = Embedder::load(
            &path,
            Placement {
                compute: vec![cpu],
                instances: vec![0],
                params: vec![cpu],
                params_given: vec![false],
                layers: Vec::new(),
            },
        )
        .err()
        .unwrap();
        assert!(matches!(err, Error::InvalidConfig { .. }), "{err:?}");
        assert!(err.to_string().contains("expected one per module (embed, encoder, pool)"), "{err}");
        std::fs::remove_dir_all(path.parent().unwrap()).ok();
    }

    #[test]
    fn loading_reports_progress_per_module_and_sets_threads() {
        let path = tiny_gguf(DType::F32);
        let mut seen = Vec::new();
        let mut progress = |m: Module, done: usize, total: usize| seen.push((m, done, total));
        let options = LoadOptions { threads: Some(2), progress: Some(&mut progress), ..LoadOptions::default() };
        Embedder::load_with(&path, on(&cpu(), "", ""), options).unwrap();
        for m in [Module::Embed, Module::Encoder] {
            let last = seen.iter().rev().find(|s| s.0 == m).unwrap();
            assert!(last.1 == last.2 && last.2 > 0, "{seen:?}");
        }
        std::fs::remove_dir_all(path.parent().unwrap()).ok();
    }

    /// A model converted beside its tokenizer.json, then moved away from it.
    fn converted_alone(dtype: DType) -> std::path::PathBuf {
        let dir = test_model::temp_dir("convert-alone");
        let model = test_model::write_safetensors(&dir, &TINY);
        std::fs::write(dir.join("config.json"), test_model::config_json(&TINY)).unwrap();
        std::fs::write(dir.join("tokenizer.json"), test_model::TOKENIZER_JSON).unwrap();
        let alone = dir.join("alone");
        std::fs::create_dir(&alone).unwrap();
        crate::convert(&model, &alone.join("tiny.gguf"), dtype).unwrap();
        alone.join("tiny.gguf")
    }

    #[test]
    fn a_converted_file_alone_tokenizes_with_its_own_vocabulary() {
        let path = converted_alone(DType::F32);
        let dir = path.parent().unwrap().parent().unwrap().to_path_buf();
        let mut e = Embedder::load(&path, on(&cpu(), "", "")).unwrap();
        let tokenizer = e.tokenizer().expect("the vocabulary in the file's metadata");
        assert_eq!(tokenizer.path(), path);
        assert_eq!(tokenizer.max_tokens(), TINY.max_positions);
        let texts = ["A sentence.", "Another one!", "an unknown word", "[CLS] a [SEP]"];
        let want =
            Tokenizer::from_file(dir.join("tokenizer.json"), TINY.max_positions).unwrap().encode(&texts).unwrap();
        assert_eq!(e.tokenize(&texts).unwrap(), want);
        assert_eq!(e.embed(&texts[..1]).unwrap(), e.embed_tokens(&[&want[0]]).unwrap());
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn llama_cpp_files_without_a_key_or_of_another_architecture_are_errors_naming_them() {
        let path = converted_alone(DType::F32);
        let dir = path.parent().unwrap().parent().unwrap().to_path_buf();
        let bytes = std::fs::read(&path).unwrap();
        let check = |edit: &dyn Fn(&mut Metadata), expected: &str| {
            std::fs::write(&path, test_model::edit_gguf(&bytes, edit)).unwrap();
            let err = Embedder::load(&path, on(&cpu(), "", "")).err().unwrap();
            let message = err.to_string();
            assert!(message.starts_with(&path.display().to_string()) || message.contains(&*path.to_string_lossy()));
            assert!(message.contains(expected), "{message}");
        };
        for key in ["bert.context_length", "bert.attention.head_count", "general.architecture"] {
            check(&|m| m.retain(|(k, _)| k != key), &format!("metadata '{key}' is missing"));
        }
        check(
            &|m| {
                m.iter_mut()
                    .filter(|(k, _)| k == "general.architecture")
                    .for_each(|(_, v)| *v = MetaValue::String("llama".into()))
            },
            "metadata 'general.architecture' is \"llama\"; tessera reads \"bert\" models",
        );
        check(
            &|m| m.retain(|(k, _)| k != "tokenizer.ggml.seperator_token_id"),
            "metadata 'tokenizer.ggml.seperator_token_id' is missing",
        );
        check(
            &|m| m.iter_mut().filter(|(k, _)| k == "bert.context_length").for_each(|(_, v)| *v = MetaValue::U32(8)),
            "metadata 'bert.context_length' is 8 but the weights",
        );
        std::fs::remove_dir_all(&dir).ok();
    }

    /// GGUF files with K-quant matrices load and embed close to the float64 BERT.
    #[test]
    fn k_quant_models_embed_close_to_a_float64_bert() {
        // Rows of whole 256-value super-blocks.
        let c = BertConfig { hidden: 256, intermediate: 512, ..TINY };
        let dir = test_model::temp_dir("k-quants");
        for (dtype, bound) in [(DType::Q4_K, 0.995), (DType::Q5_K, 0.999), (DType::Q6_K, 0.9995)] {
            let path = dir.join(format!("{dtype}.gguf"));
            std::fs::write(&path, test_model::gguf_bytes(&c, dtype)).unwrap();
            let file = ModelFile::open(&path).unwrap();
            assert_eq!(file.tensor("encoder.layer.1.output.dense.weight").unwrap().dtype, dtype);
            let mut e = Embedder::load(&path, on(&cpu(), "", "")).unwrap();
            let got = e.embed_tokens(&SEQUENCES).unwrap();
            let worst = SEQUENCES
                .iter()
                .zip(&got)
                .map(|(ids, g)| cosine(g, &test_model::reference_embedding(&c, ids)))
                .fold(1.0, f64::min);
            assert!(worst >= bound, "{dtype}: worst cosine {worst} < {bound}");
        }
        std::fs::remove_dir_all(&dir).ok();
    }

    /// A checkpoint saved in f16 or bf16 (vectors too) keeps its matrices in 16 bits and has
    /// its biases, layer norms and token-type table widened to f32, then embeds close to the
    /// float64 model.
    #[test]
    fn half_precision_checkpoints_embed_with_their_vectors_in_f32() {
        for (dtype, bound) in [(DType::F16, 0.9999), (DType::BF16, 0.999)] {
            let dir = test_model::temp_dir(&format!("checkpoint-{dtype}"));
            let path = test_model::write_safetensors_in(&dir, &TINY, dtype);
            std::fs::write(dir.join("config.json"), test_model::config_json(&TINY)).unwrap();
            let file = ModelFile::open(&path).unwrap();
            let specs = weight_specs(&file, TensorNames::of_file(&file), &TINY, &|_| None).unwrap();
            for w in &specs {
                let want = if bert::is_quantizable(&w.name) { dtype } else { DType::F32 };
                assert_eq!(w.dtype, want, "{}", w.name);
            }
            assert!(specs.iter().any(|w| w.dtype == dtype) && specs.iter().any(|w| w.dtype == DType::F32));
            // Layers in reduced precision take their linear layers' biases as f16 weights, and
            // their query, key and value weights and biases joined from the file's three.
            let reduced =
                weight_specs(&file, TensorNames::of_file(&file), &TINY, &|_| Some(Precision::Reduced)).unwrap();
            for r in &reduced {
                let linear_bias = r.layer.is_some() && r.name.ends_with(".bias") && !r.name.contains("LayerNorm");
                let want = specs.iter().find(|w| w.name == r.name).map_or(r.dtype, |w| w.dtype);
                assert_eq!(r.dtype, if linear_bias { DType::F16 } else { want }, "{}", r.name);
                assert!(!r.name.contains(".query."), "{}", r.name);
            }
            for kind in ["weight", "bias"] {
                let qkv =
                    reduced.iter().find(|r| r.name == format!("encoder.layer.1.attention.self.qkv.{kind}")).unwrap();
                let parts = ["query", "key", "value"].map(|p| format!("encoder.layer.1.attention.self.{p}.{kind}"));
                let h = TINY.hidden;
                let ne = if kind == "weight" { [h, 3 * h, 1, 1] } else { [3 * h, 1, 1, 1] };
                assert_eq!((&qkv.parts[..], qkv.ne), (&parts[..], ne));
                assert_eq!(qkv.dtype, if kind == "weight" { dtype } else { DType::F16 });
            }
            let mut e = Embedder::load(&path, on(&cpu(), "", "")).unwrap();
            let got = e.embed_tokens(&SEQUENCES).unwrap();
            let worst = SEQUENCES
                .iter()
                .zip(&got)
                .map(|(ids, g)| cosine(g, &test_model::reference_embedding(&TINY, ids)))
                .fold(1.0, f64::min);
            assert!(worst >= bound, "{dtype}: worst cosine {worst} < {bound}");
            std::fs::remove_dir_all(&dir).ok();
        }
    }

    #[test]
    fn converted_models_embed_like_the_original() {
        let dir = test_model::temp_dir("convert");
        let model = test_model::write_safetensors(&dir, &TINY);
        std::fs::write(dir.join("config.json"), test_model::config_json(&TINY)).unwrap();
        let mut original = Embedder::load(&model, on(&cpu(), "", "")).unwrap();
        assert_eq!(*original.config(), TINY);
        let want = original.embed_tokens(&SEQUENCES).unwrap();
        for (dtype, bound) in [(DType::F32, 0.999_999), (DType::F16, 0.9999), (DType::Q8_0, 0.999)] {
            let out = dir.join(format!("tiny-{dtype}.gguf"));
            let n = crate::convert(&model, &out, dtype).unwrap();
            assert_eq!(n, 5 + 16 * TINY.layers);
            let mut converted = Embedder::load(&out, on(&cpu(), "", "")).unwrap();
            assert_eq!(*converted.config(), TINY);
            let got = converted.embed_tokens(&SEQUENCES).unwrap();
            if dtype == DType::F32 {
                assert_eq!(got, want, "f32 in llama.cpp's layout computes the same bits");
            }
            for (g, w) in got.iter().zip(&want) {
                let w: Vec<f64> = w.iter().map(|v| f64::from(*v)).collect();
                let c = cosine(g, &w);
                assert!(c >= bound, "{dtype}: cosine {c} < {bound}");
            }
        }
        let err = crate::convert(&model, &dir.join("no/such/dir/out.gguf"), DType::F16).unwrap_err();
        assert!(matches!(err, Error::Io { .. }), "{err:?}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
