//! Sentence embeddings with all-MiniLM-L6-v2: a command line over `tessera-models`.
//! `cargo run --release --example embed -- --help` lists the options.
//!
//! Sentences are embedded in batches of `--batch-size` and each batch's results are written
//! before the next is read, so memory stays bounded whatever the size of `--file`.

#[macro_use]
#[path = "../common/mod.rs"]
mod common;

mod input;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use tessera::runtime::placement::Placement;
use tessera::runtime::threads::parse_threads;
use tessera::DType;
use tessera_models::{Embedder, LoadOptions, Module, Recipe, Tokenizer, MAX_TOKENS, MODULES};

use input::Input;

/// Where `scripts/fetch_minilm.sh` puts the model, relative to the repository.
const MODEL_DIR: &str = "weights/all-MiniLM-L6-v2";
const DEFAULT_BATCH: usize = 64;

const HELP: &str = "\
Sentence embeddings with all-MiniLM-L6-v2 (fetch it once with scripts/fetch_minilm.sh).

usage: embed [OPTIONS] SENTENCE...
       embed --convert OUT.gguf [--type TYPE] [--model FILE]

options:
  --model FILE           weights, safetensors or GGUF [weights/all-MiniLM-L6-v2/model.safetensors,
                         looked for in the current directory, then in the repository this
                         program was built from]
  --tokenizer FILE       the tokenizer.json to use [tokenizer.json beside the model, else the
                         vocabulary in a GGUF model's metadata]
  --backend SPEC         where modules run: DEVICE, or MODULE=DEVICE,... (embed, encoder, pool),
                         encoder layers one by one with encoder.N-M=DEVICE; DEVICE:K is the
                         K-th stream of a device (cuda0:1) [auto]
  --params-backend SPEC  where modules keep their weights, same syntax [where they run]
  --split-layers LIST    divide the encoder's layers over DEVICE,DEVICE,... by free memory
  --threads N            threads of the CPU backend, at most the machine's processors [all]
  --compute-type T       f32, or f16: layers whose attention is one FLASH_ATTN node compute
                         its products with 10-bit mantissas (sums in f32, as PyTorch's f16
                         attention), keep its keys, values and result and the
                         feed-forward's hidden values in f16, and take GELU's tanh
                         form [f32]
  --file FILE            embed the lines of FILE too (blank lines skipped; may be repeated)
  --batch-size N         sentences embedded together; memory grows with it [64]
  --json FILE            write the embeddings to FILE as {\"embeddings\": [[...], ...]}
  --repeat N             time N embedding calls of each batch after a warm-up and report the
                         median call [1]
  --convert OUT.gguf     write the model as GGUF in llama.cpp's layout, with its vocabulary,
                         instead of embedding
  --type TYPE            matrix type for --convert: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0,
                         q5_1, q2_K, q3_K, q4_K, q5_K, q6_K, or the mixes q4_K_M and q5_K_M
                         (q4_K/q5_K with some FFN down projections in q6_K) [f32]
                         (K-quant rows that do not fill 256-value blocks are stored as q8_0)
  -h, --help             print this help

environment: TESSERA_SCHED_DEBUG=1|2 prints the scheduler's plans; the registry's variables
(TESSERA_BACKEND_DIR, TESSERA_DISABLE_<FAMILY>, ...) choose the devices.
";

type BoxError = Box<dyn std::error::Error>;

struct Args {
    model: Option<PathBuf>,
    tokenizer: Option<PathBuf>,
    backend: String,
    params_backend: String,
    split_layers: String,
    threads: Option<usize>,
    json: Option<PathBuf>,
    sentences: Vec<String>,
    files: Vec<PathBuf>,
    /// `--compute-type`.
    attention_precision: tessera::Precision,
    batch_size: usize,
    convert: Option<PathBuf>,
    matrix_type: Option<Recipe>,
    repeat: usize, // timed calls of each batch after one warm-up: the median is reported
}

/// The arguments, or `None` after printing the help.
fn parse_args() -> Result<Option<Args>, BoxError> {
    use lexopt::prelude::*;
    let mut a = Args {
        model: None,
        tokenizer: None,
        backend: String::new(),
        params_backend: String::new(),
        split_layers: String::new(),
        threads: None,
        json: None,
        sentences: Vec::new(),
        files: Vec::new(),
        batch_size: DEFAULT_BATCH,
        convert: None,
        matrix_type: None,
        repeat: 1,
        attention_precision: tessera::Precision::Full,
    };
    let mut parser = lexopt::Parser::from_env();
    let count = |name: &str, value: String, min: usize| match value.parse::<usize>() {
        Ok(n) if n >= min => Ok(n),
        _ => Err(format!("{name}: '{value}' is not a whole number of at least {min}")),
    };
    while let Some(arg) = parser.next()? {
        match arg {
            Long("model") => a.model = Some(parser.value()?.into()),
            Long("tokenizer") => a.tokenizer = Some(parser.value()?.into()),
            Long("backend") => a.backend = parser.value()?.string()?,
            Long("params-backend") => a.params_backend = parser.value()?.string()?,
            Long("split-layers") => a.split_layers = parser.value()?.string()?,
            Long("threads") => {
                let threads = parse_threads(&parser.value()?.string()?)?;
                if let Some(notice) = threads.notice {
                    eprintln!("embed: {notice}");
                }
                a.threads = Some(threads.threads);
            }
            Long("json") => a.json = Some(parser.value()?.into()),
            Long("compute-type") => a.attention_precision = common::compute_type(&parser.value()?.string()?)?,
            Long("repeat") => a.repeat = count("--repeat", parser.value()?.string()?, 1)?,
            Long("batch-size") => a.batch_size = count("--batch-size", parser.value()?.string()?, 1)?,
            Long("file") => a.files.push(parser.value()?.into()),
            Long("convert") => a.convert = Some(parser.value()?.into()),
            Long("type") => {
                let name = parser.value()?.string()?;
                a.matrix_type = Some(Recipe::parse(&name).ok_or_else(|| {
                    format!(
                        "--type: '{name}' is not one of f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_K, q3_K, \
                         q4_K, q5_K, q6_K, q4_K_M, q5_K_M"
                    )
                })?)
            }
            Short('h') | Long("help") => {
                out!("{HELP}");
                return Ok(None);
            }
            Value(sentence) => a.sentences.push(sentence.string()?),
            _ => return Err(format!("{} (see --help)", arg.unexpected()).into()),
        }
    }
    if a.matrix_type.is_some() && a.convert.is_none() {
        return Err("--type only applies with --convert OUT.gguf".into());
    }
    Ok(Some(a))
}

/// The model to load: `--model`, else the default path in the current directory, else in
/// the repository this program was built from. The error says where it looked.
fn model_path(args: &Args) -> Result<PathBuf, BoxError> {
    let hint = "fetch all-MiniLM-L6-v2 with `scripts/fetch_minilm.sh` (or pass --model FILE)";
    if let Some(model) = &args.model {
        if !model.exists() {
            return Err(format!("--model {}: no such file; {hint}", model.display()).into());
        }
        return Ok(model.clone());
    }
    let file = Path::new(MODEL_DIR).join("model.safetensors");
    let places = [file.clone(), Path::new(env!("CARGO_MANIFEST_DIR")).join(&file)];
    if let Some(found) = places.iter().find(|p| p.exists()) {
        return Ok(found.clone());
    }
    let cwd = std::env::current_dir().map_or_else(|_| "the current directory".into(), |d| d.display().to_string());
    Err(format!("model not found; looked for {} in {cwd} and at {}; {hint}", file.display(), places[1].display())
        .into())
}

fn progress_bar(what: &str, done: usize, total: usize, unit: &str) {
    if total == 0 {
        return;
    }
    let filled = done.min(total) * 30 / total;
    let bar = format!("{}{}", "#".repeat(filled), " ".repeat(30 - filled));
    eprint!("\r{what:<16} [{bar}] {done}/{total} {unit}");
    if done >= total {
        eprintln!();
    }
    let _ = std::io::stderr().flush();
}

fn loading_bar(module: Module, done: usize, total: usize) {
    let kb = |b: usize| b / 1000;
    progress_bar(&format!("loading {}", module.name()), kb(done), kb(total), "kB");
}

/// The embeddings file, written as batches come.
struct JsonOut {
    path: PathBuf,
    file: std::io::BufWriter<std::fs::File>,
    rows: usize,
}

impl JsonOut {
    fn create(path: &Path) -> Result<JsonOut, BoxError> {
        let file = std::fs::File::create(path).map_err(|e| format!("--json {}: {e}", path.display()))?;
        let mut out = JsonOut { path: path.to_path_buf(), file: std::io::BufWriter::new(file), rows: 0 };
        out.write(b"{\"embeddings\": [")?;
        Ok(out)
    }

    fn write(&mut self, bytes: &[u8]) -> Result<(), BoxError> {
        self.file.write_all(bytes).map_err(|e| format!("--json {}: {e}", self.path.display()).into())
    }

    fn row(&mut self, e: &[f32]) -> Result<(), BoxError> {
        let values: Vec<String> = e.iter().map(|v| format!("{v:e}")).collect();
        let sep = if self.rows == 0 { "" } else { "," };
        self.rows += 1;
        self.write(format!("{sep}[{}]", values.join(",")).as_bytes())
    }

    fn finish(mut self) -> Result<(), BoxError> {
        self.write(b"]}\n")?;
        self.file.flush().map_err(|e| format!("--json {}: {e}", self.path.display()))?;
        eprintln!("wrote {}", self.path.display());
        Ok(())
    }
}

/// Times of the timed calls (after the warm-up), and the tokens they embedded.
#[derive(Default)]
struct Timings {
    total: Vec<f64>,
    prepare: Vec<f64>,
    compute: Vec<f64>,
    tokens: usize,
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn run(args: Args) -> Result<(), BoxError> {
    let model = model_path(&args)?;
    if let Some(out) = &args.convert {
        let recipe = args.matrix_type.unwrap_or(Recipe::Uniform(DType::F32));
        let n = tessera_models::convert(&model, out, recipe)?;
        let mix = if recipe.is_quantized() { " (attention q/k/v and FFN up in f16)" } else { "" };
        let mb = std::fs::metadata(out).map_or(0.0, |m| m.len() as f64 / 1e6);
        let name = recipe.name();
        outln!("wrote {} ({n} tensors, matrices as {name}{mix}, {mb:.1} MB)", out.display());
        return Ok(());
    }
    let input = Input::open(&args.sentences, &args.files)?;
    if input.len() == 0 {
        return Err("no sentences: pass them as arguments or with --file FILE".into());
    }
    let registry = tessera::discover();
    common::report_plugins(registry);
    let placement = Placement::resolve_in(registry, &args.backend, &args.params_backend, &MODULES)?;
    let tokenizer = args.tokenizer.as_ref().map(|path| Tokenizer::from_file(path, MAX_TOKENS)).transpose()?;
    let start = Instant::now();
    let split_layers = match args.split_layers.as_str() {
        "" => Vec::new(),
        spec => {
            let devices: Vec<&'static dyn tessera::Device> = registry.requestable_devices().collect();
            Placement::resolve_split(spec, &devices).map_err(|e| format!("--split-layers: {e}"))?
        }
    };
    let options = LoadOptions {
        threads: args.threads,
        tokenizer,
        progress: Some(&mut loading_bar),
        split_layers,
        attention_precision: args.attention_precision,
        ..LoadOptions::default()
    };
    let mut embedder = Embedder::load_with(&model, placement, options)?;
    let ms = start.elapsed().as_secs_f64() * 1e3;
    let encoder = embedder.placement().compute[Module::Encoder.index()];
    let from = registry.entry_of(encoder).map_or_else(String::new, |e| e.origin().to_string());
    eprintln!("loaded {} in {ms:.0} ms; {}; {} {from}", model.display(), embedder.describe(), encoder.name());

    let mut json = args.json.as_deref().map(JsonOut::create).transpose()?;
    let (total, mut done, mut truncated, mut warm) = (input.len(), 0, 0, false);
    let mut timings = Timings::default();
    let started = Instant::now();
    let mut batches = input.batches(args.batch_size);
    while let Some(batch) = batches.next_batch()? {
        let texts: Vec<&str> = batch.iter().map(|s| s.text.as_str()).collect();
        let tokenizer = embedder.tokenizer().ok_or_else(|| {
            format!(
                "{} has no tokenizer: no tokenizer.json beside it and no vocabulary in its metadata; \
                 give one with --tokenizer FILE",
                model.display()
            )
        })?;
        let max_tokens = tokenizer.max_tokens();
        let encoded = tokenizer.encode_each(&texts)?;
        for (s, _) in batch.iter().zip(&encoded).filter(|(_, e)| e.truncated) {
            truncated += 1;
            if truncated <= 3 {
                eprintln!(
                    "\rembed: {} has more than {max_tokens} word pieces; only the first {max_tokens} are embedded",
                    s.origin
                );
            }
        }
        let tokens: Vec<&[u32]> = encoded.iter().map(|e| e.ids.as_slice()).collect();
        let n_tokens: usize = tokens.iter().map(|t| t.len()).sum();
        if !warm {
            embedder.embed_tokens(&tokens)?; // warm-up: work memory, threads, page faults
            warm = true;
        }
        let mut embeddings = Vec::new();
        for _ in 0..args.repeat {
            let call = Instant::now();
            embeddings = embedder.embed_tokens(&tokens)?;
            timings.total.push(call.elapsed().as_secs_f64());
            timings.prepare.push(embedder.timing().prepare.as_secs_f64());
            timings.compute.push(embedder.timing().compute.as_secs_f64());
            timings.tokens += n_tokens;
        }
        for (s, e) in batch.iter().zip(&embeddings) {
            let head: Vec<String> = e.iter().take(6).map(|v| format!("{v:+.5}")).collect();
            outln!("[{} ...] ({} dims) {}", head.join(" "), e.len(), s.text);
            if let Some(json) = json.as_mut() {
                json.row(e)?;
            }
        }
        common::out::flush();
        done += batch.len();
        progress_bar("embedding", done, total, "sentences");
    }
    if truncated > 3 {
        eprintln!("embed: {truncated} sentences in all were truncated to {MAX_TOKENS} word pieces");
    }
    let seconds: f64 = timings.total.iter().sum();
    let runs = timings.total.len();
    let splits = embedder.scheduler().plan().map_or(0, |p| p.splits.len());
    eprintln!(
        "embedded {total} sentences in {:.1} s ({} batch(es) of up to {}, {splits} split(s)); a call: median {:.1} ms of \
         {runs} after a warm-up (graph and allocation {:.1} ms, compute {:.1} ms); {:.0} tokens/s",
        started.elapsed().as_secs_f64(),
        total.div_ceil(args.batch_size),
        args.batch_size,
        median(&mut timings.total) * 1e3,
        median(&mut timings.prepare) * 1e3,
        median(&mut timings.compute) * 1e3,
        timings.tokens as f64 / seconds.max(f64::MIN_POSITIVE)
    );
    json.map_or(Ok(()), JsonOut::finish)
}

fn main() -> ExitCode {
    match parse_args().and_then(|args| args.map_or(Ok(()), run)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("embed: {e}");
            ExitCode::FAILURE
        }
    }
}
