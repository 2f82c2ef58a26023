//! Llama text generation end to end, on a random-weight model that tessera writes itself (2
//! blocks, 8 query heads over 2 KV heads): the logits of a 64-token prompt equal an independent
//! float64 numpy implementation (scripts/llama_reference.py, whose output is committed under
//! tests/data/llama) with NMSE <= 1e-7 at every position, and the greedy continuation of 32
//! tokens is the reference's, on the CPU and on every other device present (GPUs, and
//! lavapipe's Vulkan device in CI) with 0, 1 and 2 blocks offloaded (the last blocks and the
//! head on that device, as `--n-gpu-layers` places them).
//!
//! To regenerate the reference after changing the random model:
//! `cargo run --release --example generate -- --write-random /tmp/tiny.gguf` then
//! `scripts/llama_reference.py /tmp/tiny.gguf tests/data/llama --prompt-ids <the prompt below> --greedy 32`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::OnceLock;

use tessera::runtime::placement::Placement;
use tessera::{DType, Device};
use tessera_models::llama::{Attention, Logits, CHUNKED_FROM};
use tessera_models::llama_module::gpu_layers_spec;
use tessera_models::random_llama::{self, TINY};
use tessera_models::sampler::{Sampler, Sampling};
use tessera_models::{Generator, GeneratorOptions, LLAMA_MODULES};

/// The prompt the reference was computed for: BOS, then 63 ids spread over the vocabulary.
fn prompt() -> Vec<u32> {
    std::iter::once(1).chain((0..63).map(|i| 3 + (i * 37 + 11) % 509)).collect()
}

struct Reference {
    logits: Vec<f32>,
    greedy: Vec<u32>,
}

fn reference() -> &'static Reference {
    static R: OnceLock<Reference> = OnceLock::new();
    R.get_or_init(|| {
        let text = std::fs::read_to_string("tests/data/llama/reference.json").unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let ids =
            |key: &str| -> Vec<u32> { v[key].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect() };
        assert_eq!(ids("prompt"), prompt(), "the reference was computed for another prompt");
        let raw = std::fs::read("tests/data/llama/logits.f32").unwrap();
        let logits = raw.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        Reference { logits, greedy: ids("greedy") }
    })
}

/// The tiny model, f32, seed 0, written once per test run.
fn model() -> PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("tessera-llama-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tiny.gguf");
        random_llama::write(&path, &TINY, DType::F32, 0).unwrap();
        path
    })
    .clone()
}

fn load(backend: &str, all_logits: bool) -> Generator {
    load_with(backend, GeneratorOptions { all_logits, ..GeneratorOptions::default() })
}

/// The test model with a cache of 128 f32 positions and `options`' other choices.
fn load_with(backend: &str, options: GeneratorOptions) -> Generator {
    let devices: Vec<&'static dyn Device> = tessera::discover().requestable_devices().collect();
    let placement = Placement::resolve(backend, "", &LLAMA_MODULES, &devices).unwrap();
    let options = GeneratorOptions { cache_type: DType::F32, context: 128, ..options };
    Generator::load(model(), placement, options).unwrap()
}

/// Normalised mean squared error of `got` against `want`.
fn nmse(got: &[f32], want: &[f32]) -> f64 {
    let err: f64 = got.iter().zip(want).map(|(g, w)| (f64::from(*g) - f64::from(*w)).powi(2)).sum();
    let norm: f64 = want.iter().map(|w| f64::from(*w).powi(2)).sum();
    err / norm
}

/// The worst NMSE over the positions of two runs of logits, `vocab` values a position.
fn worst_nmse(got: &[f32], want: &[f32], vocab: usize) -> f64 {
    got.chunks(vocab).zip(want.chunks(vocab)).map(|(a, b)| nmse(a, b)).fold(0.0, f64::max)
}

fn greedy(g: &mut Generator) -> Vec<u32> {
    let mut sampler = Sampler::new(Sampling::GREEDY).unwrap();
    g.generate(&prompt(), 32, &mut sampler, &mut |_| true).unwrap()
}

#[test]
fn logits_match_the_float64_reference_at_every_position() {
    let r = reference();
    let mut g = load("cpu", true);
    let vocab = TINY.vocab;
    let got = g.eval(&prompt(), Logits::All).unwrap();
    assert_eq!(got.len(), r.logits.len(), "logits for every prompt position");
    let worst = worst_nmse(got, &r.logits, vocab);
    println!("worst NMSE over the 64 positions: {worst:.3e}");
    assert!(worst <= 1e-7, "worst NMSE {worst:.3e} (regenerate the reference if the random model changed)");
}

#[test]
fn a_prompt_in_runs_of_queries_sees_every_key_it_may() {
    // A cache of exactly the prompt's 64 positions: the attention window is the prompt, so
    // each run of queries reads the keys up to its last query and not one more.
    let r = reference();
    let vocab = TINY.vocab;
    let devices: Vec<&'static dyn Device> = vec![&tessera::cpu::CPU_DEVICE];
    let placement = Placement::resolve("cpu", "", &LLAMA_MODULES, &devices).unwrap();
    let options =
        GeneratorOptions { cache_type: DType::F32, context: 64, all_logits: true, ..GeneratorOptions::default() };
    let mut g = Generator::load(model(), placement, options).unwrap();
    assert_eq!(g.attention(), [Attention::CausalProducts; 2]);
    assert!(prompt().len() >= CHUNKED_FROM, "the prompt is split into runs");
    let got = g.eval(&prompt(), Logits::All).unwrap();
    let worst = worst_nmse(got, &r.logits, vocab);
    assert!(worst <= 1e-7, "worst NMSE {worst:.3e}");
}

#[test]
fn flash_attention_gives_the_reference_logits_and_greedy_tokens() {
    // The fused attention op (the reference kernel on the CPU) in every block, then in none.
    let r = reference();
    let vocab = TINY.vocab;
    for flash in [true, false] {
        let options = GeneratorOptions { all_logits: true, flash_attn: Some(flash), ..GeneratorOptions::default() };
        let mut g = load_with("cpu", options);
        assert_eq!(g.flash_attn(), [flash; 2]);
        let got = g.eval(&prompt(), Logits::All).unwrap();
        let worst = worst_nmse(got, &r.logits, vocab);
        println!("FLASH_ATTN {flash}: worst NMSE over the 64 positions: {worst:.3e}");
        assert!(worst <= 1e-7, "FLASH_ATTN {flash}: worst NMSE {worst:.3e}");
        assert_eq!(greedy(&mut g), r.greedy, "FLASH_ATTN {flash}");
    }
}

#[test]
fn batches_and_single_tokens_agree_with_one_pass() {
    // The prompt in batches of 5 (cache written batch by batch) gives the same last logits.
    let r = reference();
    let vocab = TINY.vocab;
    let devices: Vec<&'static dyn Device> = vec![&tessera::cpu::CPU_DEVICE];
    let placement = Placement::resolve("cpu", "", &LLAMA_MODULES, &devices).unwrap();
    let options = GeneratorOptions { cache_type: DType::F32, context: 128, ubatch: 5, ..GeneratorOptions::default() };
    let mut g = Generator::load(model(), placement, options).unwrap();
    let last = g.eval(&prompt(), Logits::Last).unwrap();
    assert!(nmse(last, &r.logits[63 * vocab..]) <= 1e-7);
}

#[test]
fn greedy_continuation_is_the_reference_on_the_cpu() {
    let mut g = load("cpu", false);
    assert_eq!(greedy(&mut g), reference().greedy);
}

#[test]
fn greedy_continuation_is_the_same_with_blocks_offloaded_to_each_device() {
    let gpus: Vec<&'static dyn Device> =
        tessera::discover().requestable_devices().filter(|d| !d.is_host_cpu()).collect();
    if gpus.is_empty() {
        println!("skipped: no device besides the CPU found");
        return;
    }
    for gpu in gpus {
        // Without FLASH_ATTN, then with it where the device has a kernel for it.
        for (n, flash_attn) in (0..=TINY.layers).flat_map(|n| [(n, Some(false)), (n, None)]) {
            let spec = gpu_layers_spec(n, TINY.layers, gpu.name());
            let mut g = load_with(&spec, GeneratorOptions { flash_attn, ..GeneratorOptions::default() });
            let flash = g.flash_attn().to_vec();
            if flash_attn.is_none() && gpu.reg().name().eq_ignore_ascii_case("cuda") {
                assert_eq!(flash.iter().filter(|&&f| f).count(), n, "CUDA runs FLASH_ATTN in its blocks");
            }
            if n == 1 && flash_attn.is_some() && gpu.reg().name().eq_ignore_ascii_case("cuda") {
                // The prompt's products with block 0's CPU weights run on the GPU (op offload).
                g.eval(&prompt(), Logits::Last).unwrap();
                let plan = g.scheduler().plan().unwrap();
                let offloaded = plan.assignments.iter().filter(|a| a.cause == tessera::sched::Cause::Offload).count();
                println!("{}: {offloaded} products of block 0 offloaded for the prompt", gpu.name());
                assert!(offloaded > 0, "no product of the CPU block was offloaded:\n{plan}");
            }
            let tokens = greedy(&mut g);
            if n == 1 && flash_attn.is_some() {
                // The plan of the last token: CPU block 0, then block 1 and the head on the GPU.
                println!("{}: --n-gpu-layers 1, plan of one token:\n{}", gpu.name(), g.scheduler().plan().unwrap());
            }
            let what = format!("{} with {n} blocks offloaded, FLASH_ATTN in blocks {flash:?}", gpu.name());
            assert_eq!(tokens, reference().greedy, "{what}");
            println!("{what}: greedy tokens equal the reference");
        }
    }
}

#[test]
fn bad_requests_are_errors_that_lose_nothing() {
    let mut g = load("cpu", false);
    let err = g.eval(&[1, 600], Logits::Last).unwrap_err().to_string();
    assert_eq!(err, "token id 600 is not below the vocabulary size 512");
    let err = g.eval(&[], Logits::Last).unwrap_err().to_string();
    assert_eq!(err, "no tokens to evaluate");
    // The context holds 128 positions: 100 fit, 29 more do not, and the cache keeps the 100.
    let ids: Vec<u32> = (0..100).map(|i| 3 + i % 500).collect();
    g.eval(&ids, Logits::Last).unwrap();
    let err = g.eval(&ids[..29], Logits::Last).unwrap_err().to_string();
    assert_eq!(err, "129 positions do not fit in a context of 128; give a larger context or fewer tokens");
    assert_eq!(g.past(), 100);
    g.eval(&ids[..28], Logits::Last).unwrap();
    assert_eq!(g.past(), 128);
}

#[test]
fn files_that_are_not_llama_models_are_errors_naming_what_is_wrong() {
    let dir = model().parent().unwrap().to_path_buf();
    let devices: Vec<&'static dyn Device> = vec![&tessera::cpu::CPU_DEVICE];
    let load_file = |path: &std::path::Path| {
        let placement = Placement::resolve("cpu", "", &LLAMA_MODULES, &devices).unwrap();
        Generator::load(path, placement, GeneratorOptions::default()).err().map(|e| e.to_string())
    };
    let truncated = dir.join("truncated.gguf");
    let bytes = std::fs::read(model()).unwrap();
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let err = load_file(&truncated).unwrap();
    assert!(err.contains("truncated.gguf"), "{err}");
    let missing = dir.join("missing.gguf");
    let err = load_file(&missing).unwrap();
    assert!(err.contains("missing.gguf"), "{err}");
}
