//! Sentence embeddings with all-MiniLM-L6-v2.
//!
//! ```text
//! cargo run --release --example embed -- [--model FILE] [--backend SPEC] [--params-backend SPEC]
//!     [--threads N] [--json FILE] [--repeat N] [--file sentences.txt] "sentence" ...
//! cargo run --release --example embed -- --convert OUT.gguf --type f32|f16|q8_0
//! ```
//! `--backend embed=cpu,encoder=gpu` places each module (`embed`, `encoder`, `pool`) on a
//! device; `--params-backend` says where its weights live (default: where it runs).

mod runner;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use runner::{convert, tokenize, Embedder};
use tessera::{DType, Device};

const MODEL_DIR: &str = "weights/all-MiniLM-L6-v2";
/// sentence-transformers truncates all-MiniLM-L6-v2 inputs at 256 word pieces.
const MAX_TOKENS: usize = 256;

type BoxError = Box<dyn std::error::Error>;

struct Args {
    model: PathBuf,
    tokenizer: PathBuf,
    backend: String,
    params_backend: String,
    threads: Option<usize>,
    json: Option<PathBuf>,
    sentences: Vec<String>,
    convert: Option<(PathBuf, DType)>,
    /// Timed repetitions after one warm-up (`--repeat N`): the median is reported.
    repeat: usize,
}

fn parse_args() -> Result<Args, BoxError> {
    let mut a = Args {
        model: Path::new(MODEL_DIR).join("model.safetensors"),
        tokenizer: Path::new(MODEL_DIR).join("tokenizer.json"),
        backend: String::new(),
        params_backend: String::new(),
        threads: None,
        json: None,
        sentences: Vec::new(),
        convert: None,
        repeat: 1,
    };
    let mut convert_to: Option<PathBuf> = None;
    let mut convert_type = DType::F32;
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--model" => a.model = value("--model")?.into(),
            "--tokenizer" => a.tokenizer = value("--tokenizer")?.into(),
            "--backend" => a.backend = value("--backend")?,
            "--params-backend" => a.params_backend = value("--params-backend")?,
            "--threads" => a.threads = Some(value("--threads")?.parse().map_err(|e| format!("--threads: {e}"))?),
            "--json" => a.json = Some(value("--json")?.into()),
            "--repeat" => a.repeat = value("--repeat")?.parse().map_err(|e| format!("--repeat: {e}"))?,
            "--file" => {
                let path = value("--file")?;
                let text = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
                a.sentences.extend(text.lines().map(str::trim).filter(|l| !l.is_empty()).map(String::from));
            }
            "--convert" => convert_to = Some(value("--convert")?.into()),
            "--type" => {
                convert_type = match value("--type")?.to_lowercase().as_str() {
                    "f32" => DType::F32,
                    "f16" => DType::F16,
                    "q8_0" => DType::Q8_0,
                    other => return Err(format!("--type: '{other}' is not one of f32, f16, q8_0").into()),
                }
            }
            "-h" | "--help" => {
                println!("usage: embed [--model FILE] [--backend SPEC] [--params-backend SPEC] [--threads N] [--json FILE] [--repeat N] [--file FILE] SENTENCE...\n       embed --convert OUT.gguf --type f32|f16|q8_0");
                std::process::exit(0);
            }
            s if s.starts_with("--") => return Err(format!("unknown option {s} (see --help)").into()),
            _ => a.sentences.push(arg),
        }
    }
    a.convert = convert_to.map(|p| (p, convert_type));
    Ok(a)
}

fn check_model(args: &Args) -> Result<(), BoxError> {
    if !args.model.exists() {
        return Err(format!(
            "model not found at {}; fetch all-MiniLM-L6-v2 with `scripts/fetch_minilm.sh` (or pass --model FILE)",
            args.model.display()
        )
        .into());
    }
    Ok(())
}

fn progress_bar(module: &str, done: usize, total: usize) {
    if total == 0 {
        return;
    }
    let width = 30;
    let filled = done * width / total;
    let mb = |b: usize| b as f64 / 1e6;
    eprint!(
        "\rloading {module:<8} [{}{}] {:6.1}/{:.1} MB",
        "#".repeat(filled),
        " ".repeat(width - filled),
        mb(done),
        mb(total)
    );
    if done == total {
        eprintln!();
    }
    let _ = std::io::stderr().flush();
}

fn run() -> Result<(), BoxError> {
    let args = parse_args()?;
    check_model(&args)?;
    if let Some((out, dtype)) = &args.convert {
        let n = convert(&args.model, out, *dtype)?;
        let mix = if dtype.is_quantized() { " (attention q/k/v and FFN up in f16)" } else { "" };
        let mb = std::fs::metadata(out).map_or(0.0, |m| m.len() as f64 / 1e6);
        println!("wrote {} ({n} tensors, matrices as {dtype}{mix}, {mb:.1} MB)", out.display());
        return Ok(());
    }
    if args.sentences.is_empty() {
        return Err("no sentences: pass them as arguments or with --file FILE".into());
    }
    let devices: Vec<&'static dyn Device> = tessera::registry().devices().collect();
    let start = Instant::now();
    let mut embedder =
        Embedder::load(&args.model, &args.backend, &args.params_backend, &devices, args.threads, &mut progress_bar)?;
    eprintln!(
        "loaded {} in {:.0} ms; {}",
        args.model.display(),
        start.elapsed().as_secs_f64() * 1e3,
        embedder.describe()
    );
    let tokens = tokenize(&args.tokenizer, &args.sentences, MAX_TOKENS)?;
    let n_tokens: usize = tokens.iter().map(Vec::len).sum();
    let mut embeddings = embedder.embed(&tokens)?;
    // Per run: the whole `embed` call, its graph building and allocation, its compute.
    let (mut total, mut prepare, mut compute) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..args.repeat.max(1) {
        let start = Instant::now();
        embeddings = embedder.embed(&tokens)?;
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
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("embed: {e}");
            ExitCode::FAILURE
        }
    }
}
