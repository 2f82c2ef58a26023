//! Sentence-embedding throughput at fixed batch shapes: `BATCHxTOKENS` batches of random token
//! ids (seeded, so every run embeds the same batches) through a BERT model, timed end to end
//! (graph, inputs, compute, embeddings read back) after warm-up calls.
//!
//! `cargo run --release --example bert_bench -- [--model FILE] [--backend SPEC]
//!     [--params-backend SPEC] [--shapes 1x16,1x128,32x48,1024x128] [--runs 20] [--warmup 3]
//!     [--each]`
//!
//! Prints one line per shape: the median and the spread (min, max) of the calls in ms, tokens
//! per second at the median, and the medians of the call's two parts (building the graph and
//! setting the inputs; computing and reading the embeddings back).

#[macro_use]
#[path = "common/mod.rs"]
mod common;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use tessera::runtime::placement::Placement;
use tessera_models::{Embedder, LoadOptions, MODULES};

const HELP: &str = "\
usage: bert_bench [--model FILE] [--backend SPEC] [--params-backend SPEC]
                  [--shapes BxT,...] [--runs N] [--warmup N] [--flash-attn M]
                  [--compute-type T] [--each]

  --model FILE           weights [weights/all-MiniLM-L6-v2/model.safetensors]
  --backend SPEC         where modules run (as embed's --backend) [auto]
  --params-backend SPEC  where modules keep their weights [where they run]
  --shapes LIST          batches of B sequences of T tokens [1x16,1x128,32x48,1024x128]
  --runs N               timed calls per shape [20]
  --warmup N             untimed calls first [3]
  --flash-attn M         attention as one FLASH_ATTN node: on, off, or auto (where the
                         layer's device computes it faster) [auto]
  --compute-type T       f32, or f16: layers whose attention is one FLASH_ATTN node compute
                         its products with 10-bit mantissas (sums in f32, as PyTorch's f16
                         attention), keep its keys, values and result and the
                         feed-forward's hidden values in f16, and take GELU's tanh
                         form [f32]
  --each                 also print every timed call's time, in order
";

type BoxError = Box<dyn std::error::Error>;

struct Args {
    model: PathBuf,
    backend: String,
    params_backend: String,
    shapes: Vec<(usize, usize)>,
    runs: usize,
    warmup: usize,
    flash_attn: Option<bool>,
    attention_precision: tessera::Precision,
    each: bool,
}

fn shapes(list: &str) -> Result<Vec<(usize, usize)>, String> {
    list.split(',')
        .map(|s| {
            let parsed = s.split_once('x').and_then(|(b, t)| Some((b.trim().parse().ok()?, t.trim().parse().ok()?)));
            match parsed {
                Some((b, t)) if b > 0 && t > 0 => Ok((b, t)),
                _ => Err(format!("--shapes: '{s}' is not BATCHxTOKENS with both at least 1")),
            }
        })
        .collect()
}

fn parse_args() -> Result<Option<Args>, BoxError> {
    use lexopt::prelude::*;
    let mut a = Args {
        model: "weights/all-MiniLM-L6-v2/model.safetensors".into(),
        backend: String::new(),
        params_backend: String::new(),
        shapes: shapes("1x16,1x128,32x48,1024x128")?,
        runs: 20,
        warmup: 3,
        flash_attn: None,
        attention_precision: tessera::Precision::Full,
        each: false,
    };
    let count = |name: &str, value: String, min: usize| match value.parse::<usize>() {
        Ok(n) if n >= min => Ok(n),
        _ => Err(format!("{name}: '{value}' is not a whole number of at least {min}")),
    };
    let mut parser = lexopt::Parser::from_env();
    while let Some(arg) = parser.next()? {
        match arg {
            Long("model") => a.model = parser.value()?.into(),
            Long("backend") => a.backend = parser.value()?.string()?,
            Long("params-backend") => a.params_backend = parser.value()?.string()?,
            Long("shapes") => a.shapes = shapes(&parser.value()?.string()?)?,
            Long("runs") => a.runs = count("--runs", parser.value()?.string()?, 1)?,
            Long("warmup") => a.warmup = count("--warmup", parser.value()?.string()?, 0)?,
            Long("flash-attn") => {
                a.flash_attn = match parser.value()?.string()?.as_str() {
                    "on" => Some(true),
                    "off" => Some(false),
                    "auto" => None,
                    other => return Err(format!("--flash-attn: '{other}' is not on, off or auto").into()),
                }
            }
            Long("compute-type") => a.attention_precision = common::compute_type(&parser.value()?.string()?)?,
            Long("each") => a.each = true,
            Short('h') | Long("help") => {
                print!("{HELP}");
                return Ok(None);
            }
            _ => return Err(format!("{} (see --help)", arg.unexpected()).into()),
        }
    }
    Ok(Some(a))
}

fn run(args: Args) -> Result<(), BoxError> {
    let placement = Placement::resolve_in(tessera::discover(), &args.backend, &args.params_backend, &MODULES)?;
    let options = LoadOptions {
        flash_attn: args.flash_attn,
        attention_precision: args.attention_precision,
        ..LoadOptions::default()
    };
    let mut embedder = Embedder::load_with(&args.model, placement, options)?;
    println!("{}: {}", args.model.display(), embedder.describe());
    let vocab = embedder.config().vocab;
    for (seed, &(b, t)) in args.shapes.iter().enumerate() {
        let t_max = embedder.config().max_positions;
        if t > t_max {
            return Err(format!("{b}x{t}: the model takes at most {t_max} tokens per sequence").into());
        }
        let sequences = common::random_tokens(b, t, vocab, seed as u64 + 1);
        for _ in 0..args.warmup {
            embedder.embed_tokens(&sequences)?;
        }
        let (mut ms, mut prepare, mut compute) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..args.runs {
            let start = Instant::now();
            embedder.embed_tokens(&sequences)?;
            ms.push(start.elapsed().as_secs_f64() * 1e3);
            prepare.push(embedder.timing().prepare.as_secs_f64() * 1e3);
            compute.push(embedder.timing().compute.as_secs_f64() * 1e3);
        }
        if args.each {
            let each: Vec<String> = ms.iter().map(|t| format!("{t:.3}")).collect();
            println!("  {b:>5} x {t:<4} each call (ms, in order): {}", each.join(" "));
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let (prepare, compute, total) = (median(&mut prepare), median(&mut compute), median(&mut ms));
        println!(
            "  {b:>5} x {t:<4} {total:9.3} ms median  ({:.3} .. {:.3}, {} runs)  {:10.0} tokens/s  \
             (graph and inputs {prepare:.3} ms, compute and read-back {compute:.3} ms)",
            ms[0],
            ms[ms.len() - 1],
            ms.len(),
            (b * t) as f64 / total * 1e3
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    match parse_args().and_then(|args| args.map_or(Ok(()), run)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bert_bench: {e}");
            ExitCode::FAILURE
        }
    }
}
