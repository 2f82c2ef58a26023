//! Sentence embeddings with all-MiniLM-L6-v2: a command line over `tessera-models`.
//! `cargo run --release --example embed -- --help` lists the options.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use tessera::runtime::placement::Placement;
use tessera::DType;
use tessera_models::{Embedder, LoadOptions, Module, Tokenizer, MAX_TOKENS, MODULES};

const MODEL_DIR: &str = "weights/all-MiniLM-L6-v2";

const HELP: &str = "\
Sentence embeddings with all-MiniLM-L6-v2 (fetch it once with scripts/fetch_minilm.sh).

usage: embed [OPTIONS] SENTENCE...
       embed --convert OUT.gguf [--type f32|f16|q8_0] [--model FILE]

options:
  --model FILE           weights, safetensors or GGUF [weights/all-MiniLM-L6-v2/model.safetensors]
  --tokenizer FILE       the tokenizer.json to use [weights/all-MiniLM-L6-v2/tokenizer.json]
  --backend SPEC         where modules run: DEVICE, or MODULE=DEVICE,... (embed, encoder, pool) [auto]
  --params-backend SPEC  where modules keep their weights, same syntax [where they run]
  --threads N            threads of the CPU backend [all cores]
  --file FILE            embed the lines of FILE too (blank lines skipped)
  --json FILE            write the embeddings to FILE as {\"embeddings\": [[...], ...]}
  --repeat N             time N embedding calls after a warm-up and report the median [1]
  --convert OUT.gguf     write the model as GGUF instead of embedding
  --type TYPE            matrix type for --convert: f32, f16 or q8_0 [f32]
  -h, --help             print this help
";

type BoxError = Box<dyn std::error::Error>;

struct Args {
    model: PathBuf,
    tokenizer: PathBuf,
    backend: String,
    params_backend: String,
    threads: Option<usize>,
    json: Option<PathBuf>,
    sentences: Vec<String>,
    convert: Option<PathBuf>,
    matrix_type: Option<DType>,
    repeat: usize, // timed calls after one warm-up: the median is reported
}

/// The arguments, or `None` after printing the help.
fn parse_args() -> Result<Option<Args>, BoxError> {
    use lexopt::prelude::*;
    let mut a = Args {
        model: Path::new(MODEL_DIR).join("model.safetensors"),
        tokenizer: Path::new(MODEL_DIR).join("tokenizer.json"),
        backend: String::new(),
        params_backend: String::new(),
        threads: None,
        json: None,
        sentences: Vec::new(),
        convert: None,
        matrix_type: None,
        repeat: 1,
    };
    let mut parser = lexopt::Parser::from_env();
    let count = |name: &str, value: String, min: usize| match value.parse::<usize>() {
        Ok(n) if n >= min => Ok(n),
        _ => Err(format!("{name}: '{value}' is not a whole number of at least {min}")),
    };
    while let Some(arg) = parser.next()? {
        match arg {
            Long("model") => a.model = parser.value()?.into(),
            Long("tokenizer") => a.tokenizer = parser.value()?.into(),
            Long("backend") => a.backend = parser.value()?.string()?,
            Long("params-backend") => a.params_backend = parser.value()?.string()?,
            Long("threads") => a.threads = Some(count("--threads", parser.value()?.string()?, 1)?),
            Long("json") => a.json = Some(parser.value()?.into()),
            Long("repeat") => a.repeat = count("--repeat", parser.value()?.string()?, 1)?,
            Long("file") => {
                let path = PathBuf::from(parser.value()?);
                let text = std::fs::read_to_string(&path).map_err(|e| format!("--file {}: {e}", path.display()))?;
                a.sentences.extend(text.lines().map(str::trim).filter(|l| !l.is_empty()).map(String::from));
            }
            Long("convert") => a.convert = Some(parser.value()?.into()),
            Long("type") => {
                a.matrix_type = Some(match parser.value()?.string()?.to_lowercase().as_str() {
                    "f32" => DType::F32,
                    "f16" => DType::F16,
                    "q8_0" => DType::Q8_0,
                    other => return Err(format!("--type: '{other}' is not one of f32, f16, q8_0").into()),
                })
            }
            Short('h') | Long("help") => {
                print!("{HELP}");
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

fn progress_bar(module: Module, done: usize, total: usize) {
    if total == 0 {
        return;
    }
    let (filled, mb) = (done * 30 / total, |b: usize| b as f64 / 1e6);
    let bar = format!("{}{}", "#".repeat(filled), " ".repeat(30 - filled));
    eprint!("\rloading {:<8} [{bar}] {:6.1}/{:.1} MB", module.name(), mb(done), mb(total));
    if done == total {
        eprintln!();
    }
    let _ = std::io::stderr().flush();
}

fn run(args: Args) -> Result<(), BoxError> {
    if !args.model.exists() {
        let hint = "fetch all-MiniLM-L6-v2 with `scripts/fetch_minilm.sh` (or pass --model FILE)";
        return Err(format!("model not found at {}; {hint}", args.model.display()).into());
    }
    if let Some(out) = &args.convert {
        let dtype = args.matrix_type.unwrap_or(DType::F32);
        let n = tessera_models::convert(&args.model, out, dtype)?;
        let mix = if dtype.is_quantized() { " (attention q/k/v and FFN up in f16)" } else { "" };
        let mb = std::fs::metadata(out).map_or(0.0, |m| m.len() as f64 / 1e6);
        println!("wrote {} ({n} tensors, matrices as {dtype}{mix}, {mb:.1} MB)", out.display());
        return Ok(());
    }
    if args.sentences.is_empty() {
        return Err("no sentences: pass them as arguments or with --file FILE".into());
    }
    let placement = Placement::resolve_in(tessera::discover(), &args.backend, &args.params_backend, &MODULES)?;
    let tokenizer = Tokenizer::from_file(&args.tokenizer, MAX_TOKENS)?;
    let start = Instant::now();
    let options = LoadOptions { threads: args.threads, tokenizer: Some(tokenizer), progress: Some(&mut progress_bar) };
    let mut embedder = Embedder::load_with(&args.model, placement, options)?;
    let ms = start.elapsed().as_secs_f64() * 1e3;
    let encoder = embedder.placement().compute[Module::Encoder.index()];
    let from = tessera::discover().entry_of(encoder).map_or_else(String::new, |e| e.origin().to_string());
    eprintln!("loaded {} in {ms:.0} ms; {}; {} {from}", args.model.display(), embedder.describe(), encoder.name());
    let texts: Vec<&str> = args.sentences.iter().map(String::as_str).collect();
    let tokens = embedder.tokenize(&texts)?;
    let n_tokens: usize = tokens.iter().map(Vec::len).sum();
    let mut embeddings = embedder.embed_tokens(&tokens)?;
    // Per run: the whole call, its graph building and allocation, its compute.
    let (mut total, mut prepare, mut compute) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..args.repeat {
        let start = Instant::now();
        embeddings = embedder.embed_tokens(&tokens)?;
        total.push(start.elapsed().as_secs_f64());
        prepare.push(embedder.timing().prepare.as_secs_f64());
        compute.push(embedder.timing().compute.as_secs_f64());
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let runs = total.len();
    let (total, prepare, compute) = (median(&mut total), median(&mut prepare), median(&mut compute));
    let splits = embedder.scheduler().plan().map_or(0, |p| p.splits.len());
    eprintln!(
        "embedded {} sentences ({n_tokens} tokens, {splits} split(s)) in {:.1} ms (median of {runs} after a warm-up; \
         graph and allocation {:.1} ms, compute {:.1} ms), {:.0} tokens/s",
        embeddings.len(),
        total * 1e3,
        prepare * 1e3,
        compute * 1e3,
        n_tokens as f64 / total
    );
    for (s, e) in args.sentences.iter().zip(&embeddings) {
        let head: Vec<String> = e.iter().take(6).map(|v| format!("{v:+.5}")).collect();
        println!("[{} ...] ({} dims) {s}", head.join(" "), e.len());
    }
    if let Some(path) = &args.json {
        let rows: Vec<String> = embeddings
            .iter()
            .map(|e| format!("[{}]", e.iter().map(|v| format!("{v:e}")).collect::<Vec<_>>().join(",")))
            .collect();
        std::fs::write(path, format!("{{\"embeddings\": [{}]}}\n", rows.join(",")))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
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
