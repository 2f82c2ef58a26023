//! all-MiniLM-L6-v2 end to end: embeddings equal an independent float64 numpy implementation
//! (scripts/minilm_reference.py) for f32, q8_0 and f16 weights, and stay the same when
//! modules are placed on a simulated accelerator with their weights on the CPU.
//! The tests that need the model are `#[ignore]`d with the reason, so the default run lists
//! them as ignored; CI fetches the model (scripts/fetch_minilm.sh) and runs them with
//! `--ignored`, where a missing model fails them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use tessera::runtime::placement::Placement;
use tessera::{DType, Device};
use tessera_models::{Embedder, Recipe, MODULES};
use tessera_sim::{SimConfig, SimDevice};

const MODEL: &str = "weights/all-MiniLM-L6-v2/model.safetensors";

struct Reference {
    sentences: Vec<String>,
    tokens: Vec<Vec<u32>>,
    embeddings: Vec<Vec<f64>>,
}

fn reference() -> &'static Reference {
    static R: OnceLock<Reference> = OnceLock::new();
    R.get_or_init(|| {
        let text = std::fs::read_to_string("tests/data/minilm/reference.json").unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let sentences = v["sentences"].as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_string()).collect();
        let tokens = v["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect())
            .collect();
        let embeddings = v["embeddings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect())
            .collect();
        Reference { sentences, tokens, embeddings }
    })
}

/// The fetched model, or the file `TESSERA_MINILM_MODEL` names (a converted copy, for the tests
/// that compare devices with each other); a test that needs it fails when it is missing (never
/// passes unchecked).
fn model() -> PathBuf {
    let p = match std::env::var_os("TESSERA_MINILM_MODEL") {
        Some(file) => PathBuf::from(file),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join(MODEL),
    };
    assert!(p.exists(), "{} not found: fetch it with scripts/fetch_minilm.sh", p.display());
    p
}

fn cosine(a: &[f32], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * y).sum();
    let na: f64 = a.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|y| y * y).sum::<f64>().sqrt();
    dot / (na * nb)
}

fn cpu() -> Vec<&'static dyn Device> {
    vec![&tessera::cpu::CPU_DEVICE]
}

/// Embeds every reference sentence in one batch; returns the smallest cosine similarity.
fn worst_cosine(embedder: &mut Embedder) -> (f64, Vec<Vec<f32>>) {
    let r = reference();
    let got = embedder.embed_tokens(&r.tokens).unwrap();
    assert_eq!(got.len(), r.embeddings.len());
    let worst = got.iter().zip(&r.embeddings).map(|(g, w)| cosine(g, w)).fold(1.0, f64::min);
    (worst, got)
}

/// Places the modules as `--backend` / `--params-backend` would, then loads `model`.
fn try_load(
    model: &Path,
    backend: &str,
    params: &str,
    devices: &[&'static dyn Device],
) -> Result<Embedder, Box<dyn std::error::Error>> {
    let placement = Placement::resolve(backend, params, &MODULES, devices)?;
    Ok(Embedder::load(model, placement)?)
}

fn load(model: &Path, backend: &str, params: &str, devices: &[&'static dyn Device]) -> Embedder {
    try_load(model, backend, params, devices).unwrap()
}

#[test]
#[ignore = "needs the MiniLM weights: scripts/fetch_minilm.sh"]
fn f32_embeddings_match_the_reference() {
    let model = model();
    assert!(reference().tokens.len() >= 32);
    let (worst, _) = worst_cosine(&mut load(&model, "", "", &cpu()));
    println!("minilm f32: worst cosine similarity {worst:.9} over {} sentences", reference().tokens.len());
    assert!(worst >= 0.999999, "worst cosine {worst}");
}

/// The worst cosine similarity between MiniLM's embeddings on the first CUDA GPU (attention
/// in `precision`) and on the CPU, over 1024 sequences (the reference sentences over and over),
/// whose dense products are large enough to be split into TF32 parts and remainders; `None`
/// after printing why where there is no CUDA GPU.
#[cfg(feature = "cuda")]
fn worst_cosine_on_a_cuda_gpu(precision: tessera::Precision) -> Option<f64> {
    use tessera::BackendReg;
    let model = model();
    let Some(gpu) = tessera::cuda::CUDA_REG.device(0) else {
        eprintln!("skipped: no CUDA device on this machine");
        return None;
    };
    let tokens: Vec<Vec<u32>> = reference().tokens.iter().cycle().take(1024).cloned().collect();
    let on_cpu = load(&model, "", "", &cpu()).embed_tokens(&tokens).unwrap();
    let placement = Placement::resolve("cuda0", "", &MODULES, &[gpu, &tessera::cpu::CPU_DEVICE]).unwrap();
    let options = tessera_models::LoadOptions { attention_precision: precision, ..Default::default() };
    let on_gpu = Embedder::load_with(&model, placement, options).unwrap().embed_tokens(&tokens).unwrap();
    let worst = on_gpu
        .iter()
        .zip(&on_cpu)
        .map(|(g, c)| cosine(g, &c.iter().map(|&v| f64::from(v)).collect::<Vec<_>>()))
        .fold(1.0, f64::min);
    println!(
        "minilm {precision:?} attention on {}: worst cosine {worst:.9} to the CPU over {} sequences",
        gpu.name(),
        tokens.len()
    );
    Some(worst)
}

/// MiniLM with every module on the first CUDA GPU embeds as the CPU does in f32 (worst cosine
/// at least 0.999999).
#[cfg(feature = "cuda")]
#[test]
#[ignore = "needs the MiniLM weights: scripts/fetch_minilm.sh"]
fn f32_embeddings_on_a_cuda_gpu_match_the_cpu() {
    if let Some(worst) = worst_cosine_on_a_cuda_gpu(tessera::Precision::Full) {
        assert!(worst >= 0.999999, "worst cosine {worst}");
    }
}

/// With attention's products in half precision (`--compute-type f16`) the embeddings stay
/// within a worst cosine of 0.9999 of the CPU's f32 ones.
#[cfg(feature = "cuda")]
#[test]
#[ignore = "needs the MiniLM weights: scripts/fetch_minilm.sh"]
fn f32_embeddings_on_a_cuda_gpu_with_half_precision_attention_stay_near_the_cpu() {
    if let Some(worst) = worst_cosine_on_a_cuda_gpu(tessera::Precision::Reduced) {
        assert!(worst >= 0.9999, "worst cosine {worst}");
    }
}

#[test]
#[ignore = "needs the MiniLM weights: scripts/fetch_minilm.sh"]
fn the_tokenizer_next_to_the_model_gives_the_reference_tokens() {
    let model = model();
    let embedder = load(&model, "", "", &cpu());
    let sentences: Vec<&str> = reference().sentences.iter().map(String::as_str).collect();
    assert_eq!(embedder.tokenize(&sentences).unwrap(), reference().tokens);
}

/// The model converted to GGUF with `recipe`'s matrix types (the example's `--convert`).
fn converted(model: &Path, recipe: impl Into<Recipe>) -> PathBuf {
    let recipe = recipe.into();
    let out = std::env::temp_dir().join(format!("tessera-minilm-{}-{}.gguf", recipe.name(), std::process::id()));
    tessera_models::convert(model, &out, recipe).unwrap();
    out
}

#[test]
#[ignore = "needs the MiniLM weights: scripts/fetch_minilm.sh"]
fn gguf_quantized_and_f16_embeddings_match_the_reference() {
    let model = model();
    // Q8_0: the attention q/k/v and FFN up matrices stay in f16 (see converted_type).
    // K-quants: rows of 384 values do not fill their 256-value blocks and fall back to q8_0;
    // the FFN down projections (rows of 1536) take the K-quant, and cost what its fewer bits
    // do (measured against the f32 run: q2_K 0.773, q3_K 0.937, q4_K 0.984, q5_K 0.995, q6_K
    // 0.9989, q4_K_M 0.9948, q5_K_M 0.9976; q4_0 0.970, q4_1 0.980, q5_0 0.9926, q5_1 0.9938).
    let types = [
        (Recipe::Uniform(DType::Q8_0), 0.9995),
        (Recipe::Uniform(DType::F16), 0.99999),
        (Recipe::Uniform(DType::F32), 0.999999),
        (Recipe::Uniform(DType::Q2_K), 0.75),
        (Recipe::Uniform(DType::Q3_K), 0.93),
        (Recipe::Uniform(DType::Q4_K), 0.98),
        (Recipe::Uniform(DType::Q5_K), 0.993),
        (Recipe::Uniform(DType::Q6_K), 0.998),
        (Recipe::Q4_K_M, 0.993),
        (Recipe::Q5_K_M, 0.997),
        (Recipe::Uniform(DType::Q4_1), 0.975),
        (Recipe::Uniform(DType::Q5_0), 0.99),
        (Recipe::Uniform(DType::Q5_1), 0.99),
    ];
    for (recipe, bound) in types {
        let path = converted(&model, recipe);
        let (worst, _) = worst_cosine(&mut load(&path, "", "", &cpu()));
        let name = recipe.name();
        println!("minilm gguf {name}: worst cosine similarity {worst:.9}");
        std::fs::remove_file(&path).ok();
        assert!(worst >= bound, "{name}: worst cosine {worst} < {bound}");
    }
}

#[test]
#[ignore = "needs the MiniLM weights: scripts/fetch_minilm.sh"]
fn params_on_the_cpu_compute_on_an_accelerator_gives_the_same_embeddings() {
    let model = model();
    let sim: &'static dyn Device = SimDevice::create(SimConfig::new("SIM0"));
    let devices = vec![sim, &tessera::cpu::CPU_DEVICE];
    let (_, on_cpu) = worst_cosine(&mut load(&model, "cpu", "", &devices));
    // The encoder runs on the accelerator with its weights in host memory: the scheduler
    // copies them in as split inputs. The embedding lookup stays on the CPU.
    let mut split = load(&model, "encoder=sim0,pool=sim0,embed=cpu", "cpu", &devices);
    assert!(split.describe().contains("encoder: SIM0 (params CPU)"), "{}", split.describe());
    let (worst, got) = worst_cosine(&mut split);
    let plan = split.scheduler().plan().unwrap();
    assert!(plan.splits.len() > 2, "{plan}");
    assert!(plan.splits.iter().any(|s| s.inputs.iter().any(|i| i.name.ends_with(".weight"))), "{plan}");
    assert!(worst >= 0.999999, "worst cosine {worst}");
    // The accelerator runs the reference kernels, the CPU its fast ones: equal up to rounding.
    assert_close(&got, &on_cpu);
    // Weights placed on the accelerator itself: uploaded once, no weight copies per run.
    let mut resident = load(&model, "sim0", "", &devices);
    let (_, got) = worst_cosine(&mut resident);
    let plan = resident.scheduler().plan().unwrap();
    assert!(!plan.splits.iter().any(|s| s.inputs.iter().any(|i| i.name.ends_with(".weight"))), "{plan}");
    assert_close(&got, &on_cpu);
}

/// Sentences that exercise the tokenizer: accents, punctuation, unknown and long words, CJK,
/// control characters, special tokens written out, runs of spaces.
const TOKENIZER_SENTENCES: [&str; 10] = [
    "Crème brûlée at the Café Müller, naïve façade!",
    "What?! Really... (yes) -- \"quoted\" [brackets] {braces} a/b@c#d$e%f^g&h*i",
    "Pneumonoultramicroscopicsilicovolcanoconiosis and antidisestablishmentarianism",
    "supercalifragilisticexpialidociousnessfulnessishlylessnesslike words",
    "xqzvbw qqqqq zzzzzzzzzzzzzzzzzzzzzzzz",
    "東京 は 日本 の 首都 です。",
    "tabs\tand\nnewlines\r\n and   many    spaces",
    "[CLS] literal [SEP] specials [MASK] [UNK] [PAD]",
    "Ünïcödé ΑΒΓ αβγ Привет мир",
    "emoji 😀 and symbols ™ © ® € £ ¥",
];

/// The model converted to llama.cpp's layout in a folder of its own (no tokenizer.json beside it).
fn converted_alone(model: &Path, dtype: DType) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tessera-minilm-alone-{dtype}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("minilm.gguf");
    tessera_models::convert(model, &out, dtype).unwrap();
    out
}

#[test]
#[ignore = "needs the MiniLM weights: scripts/fetch_minilm.sh"]
fn a_converted_file_alone_tokenizes_like_the_tokenizer_json() {
    let model = model();
    let json = model.with_file_name("tokenizer.json");
    let vocab = tessera_models::Vocab::from_tokenizer_json(&json).unwrap();
    let path = converted_alone(&model, DType::F16);
    let alone = load(&path, "", "", &cpu());
    assert_eq!(alone.tokenizer().unwrap().path(), path);
    let from_json = load(&model, "", "", &cpu());
    let mut texts: Vec<&str> = reference().sentences.iter().map(String::as_str).collect();
    texts.extend(TOKENIZER_SENTENCES);
    let want = from_json.tokenize(&texts).unwrap();
    assert_eq!(alone.tokenize(&texts).unwrap(), want);
    assert!(want.iter().any(|t| t.contains(&vocab.unk)), "some word is unknown");
    let gguf_bytes = std::fs::read(&path).unwrap();
    let gguf = tessera::gguf::Gguf::parse(&gguf_bytes).unwrap();
    assert_eq!(tessera_models::Vocab::from_gguf(&gguf, "minilm.gguf").unwrap().unwrap(), vocab);
    std::fs::remove_dir_all(path.parent().unwrap()).ok();
}

#[test]
#[ignore = "needs the MiniLM weights: scripts/fetch_minilm.sh"]
fn llama_cpp_layout_round_trip_embeds_like_the_safetensors_run() {
    let model = model();
    let (_, want) = worst_cosine(&mut load(&model, "", "", &cpu()));
    for (dtype, bound) in [(DType::F32, 0.999_999), (DType::F16, 0.9999)] {
        let path = converted_alone(&model, dtype);
        let (worst_reference, got) = worst_cosine(&mut load(&path, "", "", &cpu()));
        let worst = got
            .iter()
            .zip(&want)
            .map(|(g, w)| cosine(g, &w.iter().map(|v| f64::from(*v)).collect::<Vec<_>>()))
            .fold(1.0, f64::min);
        println!("minilm llama.cpp layout {dtype}: worst cosine {worst:.9} to the safetensors run, {worst_reference:.9} to the reference");
        std::fs::remove_dir_all(path.parent().unwrap()).ok();
        if dtype == DType::F32 {
            assert_eq!(got, want, "f32: bit-identical");
        }
        assert!(worst >= bound, "{dtype}: worst cosine {worst} < {bound}");
        assert!(worst_reference >= 0.9999, "{dtype}: worst cosine to the reference {worst_reference}");
    }
}

/// Every value within 1e-5 of the other run's.
fn assert_close(got: &[Vec<f32>], want: &[Vec<f32>]) {
    assert_eq!(got.len(), want.len());
    let worst = got.iter().zip(want).flat_map(|(g, w)| g.iter().zip(w).map(|(a, b)| (a - b).abs())).fold(0.0, f32::max);
    assert!(got.iter().zip(want).all(|(g, w)| g.len() == w.len()) && worst <= 1e-5, "values differ by up to {worst}");
}

#[test]
fn a_missing_or_foreign_file_is_a_clear_error() {
    let err = try_load(Path::new("no/such/model.safetensors"), "", "", &cpu()).err().unwrap();
    assert!(err.to_string().contains("no/such/model.safetensors: cannot open"), "{err}");
    let err = try_load(Path::new("tests/data/minilm/sentences.txt"), "", "", &cpu()).err().unwrap();
    assert!(err.to_string().contains("not a GGUF or safetensors file"), "{err}");
}

#[test]
#[ignore = "needs the MiniLM weights: scripts/fetch_minilm.sh"]
fn an_unknown_device_for_the_model_is_a_clear_error() {
    let err = try_load(&model(), "encoder=cuda0", "", &cpu()).err().unwrap();
    assert_eq!(err.to_string(), "unknown device 'cuda0'; devices: CPU");
}
