//! A model split over several devices against the same model on one: agreement and
//! throughput, side by side in one process.
//!
//! `cargo run --release --features cuda --example pipeline_bench -- [--model FILE]
//!     [--single SPEC] [--split SPEC] [--split-layers LIST] [--pipeline N] [--batch BxT]
//!     [--batches K] [--rounds R] [--sentences FILE]`
//!
//! Two embedders are loaded: `--single` (a `--backend` value, all on one device by default)
//! and `--split` / `--split-layers` (modules and encoder layers on several devices, or on
//! several streams of one) with `--pipeline` copies per split input, so that one device
//! works on batch i+1 while the next works on batch i. It prints the split embedder's plan
//! (with how each copy between devices travels), the worst cosine between the two on the
//! sentences of `--sentences` and on the timed batches, and the throughput of `--batches`
//! batches of `--batch` random token ids per round, the two embedders alternating round by
//! round, with the ratio's median and spread.

#[macro_use]
#[path = "common/mod.rs"]
mod common;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use tessera::runtime::placement::Placement;
use tessera_models::{Embedder, LoadOptions, MODULES};

const HELP: &str = "\
usage: pipeline_bench [--model FILE] [--single SPEC] [--split SPEC] [--split-layers LIST]
                      [--pipeline N] [--batch BxT] [--batches K] [--rounds R] [--sentences FILE]

  --model FILE         weights [weights/all-MiniLM-L6-v2/model.safetensors]
  --single SPEC        --backend of the one-device embedder [cuda0]
  --split SPEC         --backend of the split embedder [embed=cuda0,pool=cuda1]
  --split-layers LIST  devices the split embedder's encoder layers are divided over [cuda0,cuda1]
  --pipeline N         copies per split input of the split embedder, 1 to 4 [2]
  --batch BxT          B sequences of T tokens per batch [256x128]
  --batches K          batches per timed round [8]
  --rounds R           timed rounds of each embedder, alternating [5]
  --sentences FILE     sentences compared between the two [examples/embed/bench_sentences.txt]
";

type BoxError = Box<dyn std::error::Error>;

struct Args {
    model: PathBuf,
    single: String,
    split: String,
    split_layers: String,
    pipeline: usize,
    batch: (usize, usize),
    batches: usize,
    rounds: usize,
    sentences: PathBuf,
}

fn parse_args() -> Result<Option<Args>, BoxError> {
    use lexopt::prelude::*;
    let mut a = Args {
        model: "weights/all-MiniLM-L6-v2/model.safetensors".into(),
        single: "cuda0".into(),
        split: "embed=cuda0,pool=cuda1".into(),
        split_layers: "cuda0,cuda1".into(),
        pipeline: 2,
        batch: (256, 128),
        batches: 8,
        rounds: 5,
        sentences: "examples/embed/bench_sentences.txt".into(),
    };
    let count = |name: &str, value: String, min: usize| match value.parse::<usize>() {
        Ok(n) if n >= min => Ok(n),
        _ => Err(format!("{name}: '{value}' is not a whole number of at least {min}")),
    };
    let mut parser = lexopt::Parser::from_env();
    while let Some(arg) = parser.next()? {
        match arg {
            Long("model") => a.model = parser.value()?.into(),
            Long("single") => a.single = parser.value()?.string()?,
            Long("split") => a.split = parser.value()?.string()?,
            Long("split-layers") => a.split_layers = parser.value()?.string()?,
            Long("pipeline") => a.pipeline = count("--pipeline", parser.value()?.string()?, 1)?,
            Long("batch") => {
                let value = parser.value()?.string()?;
                let parsed = value.split_once('x').and_then(|(b, t)| Some((b.parse().ok()?, t.parse().ok()?)));
                a.batch = match parsed {
                    Some((b, t)) if b > 0 && t > 1 => (b, t),
                    _ => return Err(format!("--batch: '{value}' is not BATCHxTOKENS (B >= 1, T >= 2)").into()),
                };
            }
            Long("batches") => a.batches = count("--batches", parser.value()?.string()?, 1)?,
            Long("rounds") => a.rounds = count("--rounds", parser.value()?.string()?, 1)?,
            Long("sentences") => a.sentences = parser.value()?.into(),
            Short('h') | Long("help") => {
                print!("{HELP}");
                return Ok(None);
            }
            _ => return Err(format!("{} (see --help)", arg.unexpected()).into()),
        }
    }
    Ok(Some(a))
}

/// The smallest cosine between corresponding embeddings.
fn worst_cosine(a: &[Vec<f32>], b: &[Vec<f32>]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| {
            let dot: f64 = x.iter().zip(y).map(|(p, q)| f64::from(*p) * f64::from(*q)).sum();
            let norm = |v: &[f32]| v.iter().map(|p| f64::from(*p).powi(2)).sum::<f64>().sqrt();
            dot / (norm(x) * norm(y)).max(f64::MIN_POSITIVE)
        })
        .fold(1.0, f64::min)
}

fn median_and_spread(v: &[f64]) -> (f64, f64, f64) {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    (s[s.len() / 2], s[0], s[s.len() - 1])
}

fn run(args: Args) -> Result<(), BoxError> {
    let registry = tessera::discover();
    let devices: Vec<&'static dyn tessera::Device> = registry.requestable_devices().collect();
    let single = Placement::resolve_in(registry, &args.single, "", &MODULES)?;
    let mut one = Embedder::load(&args.model, single)?;
    let split_layers = match args.split_layers.as_str() {
        "" => Vec::new(),
        spec => Placement::resolve_split(spec, &devices).map_err(|e| format!("--split-layers: {e}"))?,
    };
    let placement = Placement::resolve_in(registry, &args.split, "", &MODULES)?;
    let options = LoadOptions { split_layers, pipeline: args.pipeline, ..LoadOptions::default() };
    let mut split = Embedder::load_with(&args.model, placement, options)?;
    println!("single: {}", one.describe());
    println!("split:  {} ({} copies per input)", split.describe(), args.pipeline);

    if let Ok(text) = std::fs::read_to_string(&args.sentences) {
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        let want = one.embed(&lines)?;
        let got = split.embed(&lines)?;
        let bits = want == got;
        println!(
            "{} sentences of {}: worst cosine {:.9}{}",
            lines.len(),
            args.sentences.display(),
            worst_cosine(&want, &got),
            if bits { " (bitwise equal)" } else { "" }
        );
    }

    let (b, t) = args.batch;
    let vocab = one.config().vocab;
    let batches: Vec<Vec<Vec<u32>>> =
        (0..args.batches).map(|i| common::random_tokens(b, t, vocab, i as u64 + 1)).collect();
    let refs: Vec<&[Vec<u32>]> = batches.iter().map(Vec::as_slice).collect();
    // Warm-up: graphs built, buffers sized, programs prepared (one round each).
    let want = one.embed_batches(&refs)?;
    let got = split.embed_batches(&refs)?;
    if let Some(plan) = split.scheduler().plan() {
        print!("{plan}");
    }
    let worst = want.iter().zip(&got).map(|(w, g)| worst_cosine(w, g)).fold(1.0, f64::min);
    println!("{} batches of {b}x{t}: worst cosine {worst:.9}", args.batches);

    let sequences = (args.batches * b) as f64;
    let (mut rate_one, mut rate_split, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..args.rounds {
        let start = Instant::now();
        one.embed_batches(&refs)?;
        let a = sequences / start.elapsed().as_secs_f64();
        let start = Instant::now();
        split.embed_batches(&refs)?;
        let s = sequences / start.elapsed().as_secs_f64();
        println!("  round {round}: single {a:9.1} seq/s, split {s:9.1} seq/s, ratio {:.3}", s / a);
        rate_one.push(a);
        rate_split.push(s);
        ratios.push(s / a);
    }
    let (a, s, (r, lo, hi)) =
        (median_and_spread(&rate_one).0, median_and_spread(&rate_split).0, median_and_spread(&ratios));
    println!(
        "throughput at {b}x{t}: single {a:.1} seq/s, split {s:.1} seq/s (medians of {} rounds); \
         ratio {r:.3} (min {lo:.3}, max {hi:.3})",
        args.rounds
    );
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(Some(a)) => a,
        Ok(None) => return ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pipeline_bench: {e}");
            return ExitCode::from(2);
        }
    };
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pipeline_bench: {e}");
            ExitCode::FAILURE
        }
    }
}
