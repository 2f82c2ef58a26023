//! Sentence embeddings with a BERT model (all-MiniLM-L6-v2) on the devices the user places
//! each module on. Shared by the `embed` example and the MiniLM tests.

use std::path::Path;
use std::time::{Duration, Instant};

use tessera::models::bert::{self, BertConfig, BertGraph, Layout, Module};
use tessera::registry::{extension, Extension};
use tessera::runtime::gguf_writer::GgufWriter;
use tessera::runtime::model_file::{place_weights, ModelFile, WeightSpec, WeightStore};
use tessera::runtime::placement::{ModuleDecl, Placement};
use tessera::{Backend, DType, Device, Error, Graph, Result, Scheduler, SchedulerOptions};

/// The modules of the model, for `--backend` / `--params-backend`.
pub const MODULES: [ModuleDecl; 3] = [
    ModuleDecl { name: Module::Embed.name(), aliases: Module::Embed.aliases() },
    ModuleDecl { name: Module::Encoder.name(), aliases: Module::Encoder.aliases() },
    ModuleDecl { name: Module::Pool.name(), aliases: Module::Pool.aliases() },
];

/// A loaded model, its weights on their devices, and the scheduler that runs it.
pub struct Embedder {
    pub config: BertConfig,
    file: ModelFile,
    placement: Placement,
    /// The scheduler's backends' devices, in its order.
    devices: Vec<&'static dyn Device>,
    /// Weights of each module, where its params live.
    stores: Vec<WeightStore>,
    sched: Scheduler,
    timing: Timing,
}

/// Where the time of the last [`Embedder::embed`] went.
#[derive(Clone, Copy, Debug, Default)]
pub struct Timing {
    /// Building the graph, binding the weights, planning and allocating it, setting the inputs.
    pub prepare: Duration,
    /// Running the graph and reading the embeddings back.
    pub compute: Duration,
}

/// The model's shape, read from the tensor shapes (and the head count from the metadata
/// or the `config.json` beside a safetensors file).
fn config_of(file: &ModelFile) -> Result<BertConfig> {
    let shape = |name: &str| {
        file.tensor(name).map(|t| t.ne).ok_or_else(|| Error::File {
            path: file.path().display().to_string(),
            message: format!("has no tensor '{name}': not a BERT model"),
        })
    };
    let word = shape("embeddings.word_embeddings.weight")?;
    let layers = (0..).take_while(|l| file.tensor(&format!("encoder.layer.{l}.output.dense.weight")).is_some()).count();
    let hidden = word[0];
    let heads = file
        .gguf()
        .and_then(|g| g.get_unsigned("bert.attention.head_count").ok())
        .map(|h| h as usize)
        .or_else(|| {
            let json = std::fs::read_to_string(file.path().with_file_name("config.json")).ok()?;
            let at = json.find("\"num_attention_heads\"")?;
            let rest = json[at..].split(':').nth(1)?;
            rest.trim().split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
        })
        .unwrap_or(hidden / 32);
    Ok(BertConfig {
        vocab: word[1],
        max_positions: shape("embeddings.position_embeddings.weight")?[1],
        type_vocab: shape("embeddings.token_type_embeddings.weight")?[1],
        hidden,
        heads,
        layers,
        intermediate: shape("encoder.layer.0.intermediate.dense.weight")?[1],
        eps: 1e-12,
    })
}

impl Embedder {
    /// Loads `model` and places it: `backend` / `params_backend` as on the command line,
    /// resolved among `devices` (priority order). `progress(module, done, total)` reports
    /// weight bytes placed.
    pub fn load(
        model: &Path,
        backend: &str,
        params_backend: &str,
        devices: &[&'static dyn Device],
        threads: Option<usize>,
        progress: &mut dyn FnMut(&str, usize, usize),
    ) -> std::result::Result<Embedder, Box<dyn std::error::Error>> {
        let file = ModelFile::open(model)?;
        let config = config_of(&file)?;
        let placement = Placement::resolve(backend, params_backend, &MODULES, devices)?;
        let set = placement.devices(devices);

        // The weights each module declares, placed where its params live.
        let mut probe = Graph::new();
        let dtype_of = |name: &str| file.tensor(name).map_or(DType::F32, |t| t.dtype);
        let shapes = bert::build(&mut probe, &config, &dtype_of, Layout::packed(&[1]))?;
        let mut stores = Vec::new();
        for m in Module::ALL {
            let specs: Vec<WeightSpec> = shapes
                .weights
                .iter()
                .filter(|(_, module, _)| *module == m)
                .filter_map(|(name, _, id)| {
                    let t = probe.tensor(*id).ok()?;
                    Some(WeightSpec { name, dtype: t.dtype(), ne: t.ne() })
                })
                .collect();
            let device = placement.params[m.index()];
            stores.push(place_weights(&file, &specs, device, &mut |d, t| progress(m.name(), d, t))?);
        }

        let mut backends: Vec<Box<dyn Backend>> = Vec::new();
        for d in &set {
            let mut b = d.init_backend()?;
            if let (Some(n), Some(Extension::SetThreads(set_threads))) =
                (threads, d.reg().extension(extension::SET_THREADS))
            {
                set_threads(&mut *b, n)?;
            }
            backends.push(b);
        }
        let sched = Scheduler::new(backends, SchedulerOptions::default())?;
        Ok(Embedder { config, file, placement, devices: set, stores, sched, timing: Timing::default() })
    }

    /// "embed: CPU (params CPU), encoder: ..." for the user.
    pub fn describe(&self) -> String {
        Module::ALL
            .iter()
            .map(|m| {
                let (c, p) = (self.placement.compute[m.index()], self.placement.params[m.index()]);
                format!("{}: {} (params {})", m.name(), c.name(), p.name())
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Builds the graph for sequences of `lens` tokens packed in one row, weights bound and
    /// every node pinned to its module's device.
    fn graph(&mut self, lens: &[usize]) -> Result<(Graph, BertGraph)> {
        let mut g = Graph::new();
        let file = &self.file;
        let dtype_of = |name: &str| file.tensor(name).map_or(DType::F32, |t| t.dtype);
        let model = bert::build(&mut g, &self.config, &dtype_of, Layout::packed(lens))?;
        for (name, module, id) in &model.weights {
            let data = self.stores[module.index()].get(name).ok_or_else(|| Error::File {
                path: self.file.path().display().to_string(),
                message: format!("weight '{name}' was not loaded"),
            })?;
            g.bind(*id, data.clone())?;
        }
        self.sched.clear_pins();
        for &id in g.nodes() {
            if let Some(m) = model.module_of(id) {
                let device = self.placement.compute[m.index()];
                if let Some(b) = Placement::index_in(&self.devices, device) {
                    self.sched.set_tensor_backend(id, b)?;
                }
            }
        }
        Ok((g, model))
    }

    /// Embeddings (L2-normalised, `hidden` values each) of token-id sequences, computed in
    /// one packed batch.
    pub fn embed(&mut self, sequences: &[Vec<u32>]) -> Result<Vec<Vec<f32>>> {
        if sequences.is_empty() {
            return Ok(Vec::new());
        }
        let lens: Vec<usize> = sequences.iter().map(Vec::len).collect();
        if let Some(i) = lens.iter().position(|&l| l == 0 || l > self.config.max_positions) {
            return Err(Error::InvalidParam {
                op: "EMBED",
                message: format!("sequence {i} has {} tokens; 1 to {} are allowed", lens[i], self.config.max_positions),
            });
        }
        let start = Instant::now();
        let (g, model) = self.graph(&lens)?;
        self.sched.alloc_graph(&g)?;
        let inputs = bert::packed_inputs(&lens);
        let ids: Vec<i32> = sequences.iter().flatten().map(|&t| t as i32).collect();
        let sg = self.sched.graph().ok_or(Error::Cancelled)?;
        sg.set_i32(model.token_ids, &ids)?;
        sg.set_i32(model.positions, &inputs.positions)?;
        sg.set_f32(model.attention_mask, &inputs.attention_mask)?;
        if let (Some(gather), Some(scatter)) = (model.attention_gather, model.attention_scatter) {
            sg.set_i32(gather, &inputs.attention_gather)?;
            sg.set_i32(scatter, &inputs.attention_scatter)?;
        }
        sg.set_f32(model.pooling, &inputs.pooling)?;
        let prepared = Instant::now();
        self.sched.compute()?;
        let out = self.sched.graph().ok_or(Error::Cancelled)?.get_f32(model.embeddings)?;
        self.timing = Timing { prepare: prepared - start, compute: prepared.elapsed() };
        Ok(out.chunks(self.config.hidden).map(<[f32]>::to_vec).collect())
    }

    /// Where the time of the last [`Embedder::embed`] went.
    pub fn timing(&self) -> Timing {
        self.timing
    }

    /// The scheduler (for its plan and buffers).
    pub fn scheduler(&self) -> &Scheduler {
        &self.sched
    }
}

/// Token ids of `sentences` with the model's tokenizer (special tokens added, at most
/// `max_tokens` each).
pub fn tokenize(
    tokenizer: &Path,
    sentences: &[String],
    max_tokens: usize,
) -> std::result::Result<Vec<Vec<u32>>, Box<dyn std::error::Error>> {
    let mut tok = tokenizers::Tokenizer::from_file(tokenizer).map_err(|e| format!("{}: {e}", tokenizer.display()))?;
    tok.with_padding(None);
    tok.with_truncation(Some(tokenizers::TruncationParams { max_length: max_tokens, ..Default::default() }))
        .map_err(|e| e.to_string())?;
    let mut out = Vec::with_capacity(sentences.len());
    for s in sentences {
        let enc = tok.encode(s.as_str(), true).map_err(|e| e.to_string())?;
        out.push(enc.get_ids().to_vec());
    }
    Ok(out)
}

/// Writes `model`'s weights to `out` as GGUF: the matrices that matrix products and row
/// lookups read in `dtype` (where rows fit its blocks; with a quantized `dtype`, a few
/// sensitive ones in f16, see [`bert::converted_type`]), everything else in f32. Returns the
/// number of tensors written.
pub fn convert(model: &Path, out: &Path, dtype: DType) -> std::result::Result<usize, Box<dyn std::error::Error>> {
    let file = ModelFile::open(model)?;
    let config = config_of(&file)?;
    let mut probe = Graph::new();
    let shapes = bert::build(&mut probe, &config, &|_: &str| DType::F32, Layout::packed(&[1]))?;
    let mut w = GgufWriter::new();
    w.add_string("general.architecture", "bert");
    w.add_u32("bert.block_count", config.layers as u32);
    w.add_u32("bert.embedding_length", config.hidden as u32);
    w.add_u32("bert.feed_forward_length", config.intermediate as u32);
    w.add_u32("bert.attention.head_count", config.heads as u32);
    w.add_f32("bert.attention.layer_norm_epsilon", config.eps);
    for (name, _, _) in &shapes.weights {
        let t = file.tensor(name).ok_or_else(|| format!("{} has no tensor '{name}'", model.display()))?;
        let values = tessera::convert::to_f32_vec(t.dtype, file.data(t));
        let target = match bert::converted_type(name, dtype) {
            q if t.ne[0] % q.block_len() != 0 => DType::F32,
            q => q,
        };
        let bytes = tessera::convert::to_bytes(target, &values)?;
        let dims: Vec<usize> = if t.ne[1] > 1 { vec![t.ne[0], t.ne[1]] } else { vec![t.ne[0]] };
        w.add_tensor(name, target, &dims, &bytes)?;
    }
    w.write_to(out)?;
    Ok(shapes.weights.len())
}
