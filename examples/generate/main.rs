//! Text generation with a Llama-architecture GGUF model: a command line over `tessera-models`.
//! `cargo run --release --example generate -- --help` lists the options.

#[macro_use]
#[path = "../common/mod.rs"]
mod common;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use tessera::runtime::placement::Placement;
use tessera::runtime::threads::parse_threads;
use tessera::DType;
use tessera_models::llama::{Attention, Logits};
use tessera_models::llama_module::gpu_layers_spec;
use tessera_models::random_llama;
use tessera_models::sampler::{Sampler, Sampling};
use tessera_models::{Generator, GeneratorOptions, LLAMA_MODULES};

const HELP: &str = "\
Text generation with a Llama-architecture GGUF model.

usage: generate --model FILE --prompt TEXT [-n 128] [OPTIONS]
       generate --model FILE --bench [-p 512] [-n 128] [-r 5] [OPTIONS]
       generate --write-random OUT.gguf [--shape tiny|1b|7b] [--type TYPE] [--seed N]

options:
  --model FILE           the model, GGUF with general.architecture = llama
  --prompt TEXT          the text to continue (tokenized with the model's own vocabulary)
  --prompt-ids LIST      or the prompt as token ids: 1,15,27,...
  -n, --n-predict N      tokens to generate at most (stops early at end-of-sequence) [128]
  --ignore-eos           do not stop at end-of-sequence
  --temp T               sampling temperature; 0 picks the most likely token [0]
  --top-k N              sample among the N most likely tokens, 0 = all [40]
  --top-p P              ... whose probabilities sum to P [0.95]
  --seed N               seed of the sampler and of --bench's tokens [0]
  -ngl, --n-gpu-layers N the last N blocks and the output head on the best GPU, the rest on
                         the CPU [0]
  --backend SPEC         where modules run: DEVICE, or MODULE=DEVICE,... (embed, blk, head),
                         blocks one by one with blk.N-M=DEVICE (instead of --n-gpu-layers)
  --params-backend SPEC  where modules keep their weights, same syntax [where they run]
  --threads N            threads of the CPU backend [all]
  -c, --ctx-size N       positions the KV cache holds [the model's, at most 4096]
  -ub, --ubatch N        prompt tokens per batch [512]
  --cache-type T         f16 or f32 [f16]
  -fa, --flash-attn M    attention as one FLASH_ATTN node per block: on (every batch, no
                         score matrix in memory), off, or auto (for decoding, in the blocks
                         that run on a GPU with a kernel for it; prompts as products) [auto]
  --bench                time prompt processing (-p tokens) and generation (-n tokens) from an
                         empty cache, -r repetitions after one warm-up, as llama-bench does
  -p, --n-prompt N       prompt tokens of --bench [512]
  -r, --repetitions N    timed repetitions of --bench [5]
  --write-random FILE    write a Llama-shaped model with random weights and a made-up
                         vocabulary, in llama.cpp's layout, then stop
  --shape NAME           its shape: tiny (2 blocks, 8 heads, 2 KV heads), 1b (16 blocks of
                         2048, 32 heads, 8 KV heads, FFN 5632, 32000 tokens) or 7b (32
                         blocks of 4096, 32 heads, 8 KV heads, FFN 14336, 32000 tokens) [tiny]
  --type TYPE            its matrix type (f32, f16, q8_0, q4_0, q4_K, ...) [f32]
  -h, --help             print this help

environment: TESSERA_SCHED_DEBUG=1|2 prints the scheduler's plans.
";

type BoxError = Box<dyn std::error::Error>;

struct Args {
    model: Option<PathBuf>,
    prompt: Option<String>,
    prompt_ids: Option<Vec<u32>>,
    n_predict: usize,
    ignore_eos: bool,
    sampling: Sampling,
    gpu_layers: Option<usize>,
    backend: String,
    params_backend: String,
    threads: Option<usize>,
    context: usize,
    ubatch: usize,
    cache_type: DType,
    flash_attn: Option<bool>,
    bench: bool,
    n_prompt: usize,
    repetitions: usize,
    write_random: Option<PathBuf>,
    shape: String,
    matrix_type: DType,
}

fn parse_args() -> Result<Option<Args>, BoxError> {
    use lexopt::prelude::*;
    let mut a = Args {
        model: None,
        prompt: None,
        prompt_ids: None,
        n_predict: 128,
        ignore_eos: false,
        sampling: Sampling { temperature: 0.0, top_k: 40, top_p: 0.95, seed: 0 },
        gpu_layers: None,
        backend: String::new(),
        params_backend: String::new(),
        threads: None,
        context: 0,
        ubatch: 512,
        cache_type: DType::F16,
        flash_attn: None,
        bench: false,
        n_prompt: 512,
        repetitions: 5,
        write_random: None,
        shape: "tiny".into(),
        matrix_type: DType::F32,
    };
    let count = |name: &str, value: String, min: usize| match value.parse::<usize>() {
        Ok(n) if n >= min => Ok(n),
        _ => Err(format!("{name}: '{value}' is not a whole number of at least {min}")),
    };
    let number =
        |name: &str, value: String| value.parse::<f32>().map_err(|_| format!("{name}: '{value}' is not a number"));
    let dtype = |name: &str, value: String| {
        DType::ALL
            .into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(&value))
            .ok_or_else(|| format!("{name}: unknown type '{value}'"))
    };
    // llama.cpp's short options with two letters (-ngl, -ub, -fa) arrive as one argument each.
    let args = std::env::args_os().skip(1).map(|a| match a.to_str() {
        Some("-ngl") => "--n-gpu-layers".into(),
        Some("-ub") => "--ubatch".into(),
        Some("-fa") => "--flash-attn".into(),
        _ => a,
    });
    let mut parser = lexopt::Parser::from_args(args);
    while let Some(arg) = parser.next()? {
        match arg {
            Long("model") | Short('m') => a.model = Some(parser.value()?.into()),
            Long("prompt") => a.prompt = Some(parser.value()?.string()?),
            Long("prompt-ids") => {
                let list = parser.value()?.string()?;
                let ids = list
                    .split(|c: char| c == ',' || c.is_whitespace())
                    .filter(|s| !s.is_empty())
                    .map(|s| s.parse::<u32>().map_err(|_| format!("--prompt-ids: '{s}' is not a token id")))
                    .collect::<Result<Vec<_>, _>>()?;
                a.prompt_ids = Some(ids);
            }
            Long("n-predict") | Short('n') => a.n_predict = count("--n-predict", parser.value()?.string()?, 1)?,
            Long("ignore-eos") => a.ignore_eos = true,
            Long("temp") => a.sampling.temperature = number("--temp", parser.value()?.string()?)?,
            Long("top-k") => a.sampling.top_k = count("--top-k", parser.value()?.string()?, 0)?,
            Long("top-p") => a.sampling.top_p = number("--top-p", parser.value()?.string()?)?,
            Long("seed") => {
                let v = parser.value()?.string()?;
                a.sampling.seed = v.parse().map_err(|_| format!("--seed: '{v}' is not a whole number"))?;
            }
            Long("n-gpu-layers") => a.gpu_layers = Some(count("--n-gpu-layers", parser.value()?.string()?, 0)?),
            Long("backend") => a.backend = parser.value()?.string()?,
            Long("params-backend") => a.params_backend = parser.value()?.string()?,
            Long("threads") | Short('t') => {
                let threads = parse_threads(&parser.value()?.string()?)?;
                if let Some(notice) = threads.notice {
                    eprintln!("generate: {notice}");
                }
                a.threads = Some(threads.threads);
            }
            Long("ctx-size") | Short('c') => a.context = count("--ctx-size", parser.value()?.string()?, 1)?,
            Long("ubatch") => a.ubatch = count("--ubatch", parser.value()?.string()?, 1)?,
            Long("cache-type") => {
                a.cache_type = dtype("--cache-type", parser.value()?.string()?)?;
            }
            Long("flash-attn") => {
                a.flash_attn = match parser.value()?.string()?.as_str() {
                    "on" | "1" => Some(true),
                    "off" | "0" => Some(false),
                    "auto" => None,
                    other => return Err(format!("--flash-attn: '{other}' is not on, off or auto").into()),
                }
            }
            Long("bench") => a.bench = true,
            Long("n-prompt") | Short('p') => a.n_prompt = count("--n-prompt", parser.value()?.string()?, 0)?,
            Long("repetitions") | Short('r') => a.repetitions = count("--repetitions", parser.value()?.string()?, 1)?,
            Long("write-random") => a.write_random = Some(parser.value()?.into()),
            Long("shape") => a.shape = parser.value()?.string()?,
            Long("type") => a.matrix_type = dtype("--type", parser.value()?.string()?)?,
            Long("help") | Short('h') => {
                out!("{HELP}");
                return Ok(None);
            }
            Value(v) => {
                return Err(
                    format!("unexpected argument '{}'; the prompt goes after --prompt", v.to_string_lossy()).into()
                )
            }
            _ => return Err(arg.unexpected().into()),
        }
    }
    Ok(Some(a))
}

/// Bytes as "12.3 MiB".
fn mib(bytes: usize) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

fn load(a: &Args) -> Result<Generator, BoxError> {
    let model = a.model.as_ref().ok_or("--model FILE is needed (or --write-random FILE to make one)")?;
    let registry = tessera::discover();
    let layers = Generator::read_config(model)?.layers;
    let backend = match a.gpu_layers {
        Some(_) if !a.backend.is_empty() => return Err("give --n-gpu-layers or --backend, not both".into()),
        Some(n) => gpu_layers_spec(n, layers, "gpu"),
        None if a.backend.is_empty() => "cpu".into(),
        None => a.backend.clone(),
    };
    let placement = Placement::resolve_in(registry, &backend, &a.params_backend, &LLAMA_MODULES)?;
    let options = GeneratorOptions {
        threads: a.threads,
        context: a.context,
        ubatch: a.ubatch,
        cache_type: a.cache_type,
        all_logits: false,
        flash_attn: a.flash_attn,
    };
    let start = Instant::now();
    let g = Generator::load(model, placement, options)?;
    let c = g.config();
    eprintln!(
        "generate: {} blocks of {}, {} heads ({} KV), FFN {}, {} tokens; loaded in {:.2} s",
        c.layers,
        c.hidden,
        c.heads,
        c.kv_heads,
        c.ff,
        c.vocab,
        start.elapsed().as_secs_f64()
    );
    let memory = g.memory();
    let list = |items: &[(String, usize)]| -> String {
        let shown: Vec<String> =
            items.iter().filter(|(_, b)| *b > 0).map(|(d, b)| format!("{d} {}", mib(*b))).collect();
        shown.join(", ")
    };
    let (weights, cache, compute) = (list(&memory.weights), list(&memory.kv_cache), list(&memory.compute));
    eprintln!("generate: weights: {weights}");
    let count = |kind: Attention| g.attention().iter().filter(|&&a| a == kind).count();
    eprintln!(
        "generate: attention as FLASH_ATTN in {} of {} blocks, in {} more for decoding only",
        count(Attention::Flash),
        g.config().layers,
        count(Attention::FlashDecoding)
    );
    eprintln!(
        "generate: planned for a context of {} ({} KV cache): KV cache {cache}; compute buffers {compute}",
        g.context(),
        a.cache_type
    );
    Ok(g)
}

fn run(a: &Args) -> Result<(), BoxError> {
    if let Some(path) = &a.write_random {
        let shape = random_llama::shape(&a.shape)
            .ok_or_else(|| format!("--shape: unknown shape '{}'; tiny, 1b or 7b", a.shape))?;
        let start = Instant::now();
        random_llama::write(path, &shape, a.matrix_type, a.sampling.seed)?;
        eprintln!(
            "generate: wrote {} ({}, {}) in {:.1} s",
            path.display(),
            a.shape,
            a.matrix_type,
            start.elapsed().as_secs_f64()
        );
        return Ok(());
    }
    let mut g = load(a)?;
    if a.bench {
        return bench(&mut g, a);
    }
    let prompt = match (&a.prompt_ids, &a.prompt) {
        (Some(ids), _) => ids.clone(),
        (None, Some(text)) => g.vocab().encode(text)?,
        (None, None) => return Err("give a --prompt TEXT (or --prompt-ids, or --bench)".into()),
    };
    for &id in &prompt {
        common::out::bytes(&g.vocab().piece(id));
    }
    let mut sampler = Sampler::new(a.sampling)?;
    let ignore_eos = a.ignore_eos;
    let eos = g.vocab().eos();
    let vocab = g.vocab().clone();
    let mut on_token = |id: u32| {
        if Some(id) == eos && !ignore_eos {
            return false;
        }
        common::out::bytes(&vocab.piece(id));
        true
    };
    let ids = g.generate(&prompt, a.n_predict, &mut sampler, &mut on_token)?;
    outln!();
    eprintln!("generate: ids: {}", ids.iter().map(u32::to_string).collect::<Vec<_>>().join(","));
    eprintln!("generate: {}", g.timing().line());
    Ok(())
}

/// pp and tg tokens/s, as llama-bench measures them: from an empty cache, mean and standard
/// deviation over the repetitions after one warm-up.
fn bench(g: &mut Generator, a: &Args) -> Result<(), BoxError> {
    let vocab = g.config().vocab as u64;
    let mut rng = a.sampling.seed.wrapping_add(0x5EED);
    let mut token = || {
        rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((rng >> 33) % vocab) as u32
    };
    let stats = |rates: &[f64]| {
        let mean = rates.iter().sum::<f64>() / rates.len() as f64;
        let var = rates.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / (rates.len().max(2) - 1) as f64;
        (mean, var.sqrt())
    };
    outln!("| test   |              t/s |");
    outln!("| ------ | ---------------: |");
    if a.n_prompt > 0 {
        let prompt: Vec<u32> = (0..a.n_prompt).map(|_| token()).collect();
        let mut rates = Vec::new();
        for rep in 0..=a.repetitions {
            g.reset();
            let start = Instant::now();
            g.eval(&prompt, Logits::Last)?;
            if rep > 0 {
                rates.push(a.n_prompt as f64 / start.elapsed().as_secs_f64());
            }
        }
        let (mean, sd) = stats(&rates);
        outln!("| pp{:<4} | {mean:>9.2} ± {sd:>5.2} |", a.n_prompt);
    }
    let mut rates = Vec::new();
    for rep in 0..=a.repetitions {
        g.reset();
        let mut next = token();
        let start = Instant::now();
        for _ in 0..a.n_predict {
            let logits = g.eval(&[next], Logits::Last)?;
            next = tessera_models::sampler::greedy(logits);
        }
        if rep > 0 {
            rates.push(a.n_predict as f64 / start.elapsed().as_secs_f64());
        }
    }
    let (mean, sd) = stats(&rates);
    outln!("| tg{:<4} | {mean:>9.2} ± {sd:>5.2} |", a.n_predict);
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(Some(a)) => a,
        Ok(None) => return ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("generate: {e}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            common::out::flush();
            eprintln!("generate: {e}");
            ExitCode::FAILURE
        }
    }
}
