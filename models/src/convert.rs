//! Writes a BERT model as GGUF in llama.cpp's layout, with its matrices in another type
//! (`embed --convert`).

use std::path::Path;

use tessera_core::{DType, Graph};
use tessera_std::gguf_writer::GgufWriter;
use tessera_std::model_file::ModelFile;

use crate::bert::{self, is_quantizable, Layout};
use crate::config::BertConfig;
use crate::error::{Error, Result};
use crate::gguf_vocab::Vocab;
use crate::tensor_names::{llama_cpp_name, TensorNames};

/// The type of weight `name` in a model converted with its matrices in `matrix_type`:
/// `matrix_type` for the quantizable matrices, F32 for everything else, except that with a
/// quantized `matrix_type` the query, key and value projections and the FFN up projection
/// (the products that read a layer norm's output) stay in F16.
///
/// Why: products with quantized weights also quantize their activations to 8-bit blocks (the
/// CPU kernels' integer dot products, as in ggml), and the two roundings together cost about
/// four times what the weights' rounding alone does. all-MiniLM-L6-v2 entirely in Q8_0
/// reaches a worst cosine similarity of 0.9982 against the float64 reference (0.9996 with
/// f32 activations). Keeping one kind of matrix at a time in f32 showed the value and FFN up
/// projections to matter most and the embedding tables not at all; with these four kinds in
/// F16 (float products, f32 activations) the worst cosine is 0.9996 and the file 29.9 MB
/// (24.1 MB all Q8_0, 45 MB F16): the word embeddings, attention output and FFN down
/// projections, 72% of the matrix values, stay quantized. llama.cpp's quantization mixes
/// likewise keep a few sensitive tensors in a wider type.
pub fn converted_type(name: &str, matrix_type: DType) -> DType {
    if !is_quantizable(name) {
        return DType::F32;
    }
    let reads_layer_norm = name.contains(".attention.self.") || name.contains(".intermediate.dense.");
    if matrix_type.is_quantized() && reads_layer_norm {
        DType::F16
    } else {
        matrix_type
    }
}

/// The types of a conversion's matrices: one type for all of them, or a mix like llama.cpp's
/// Q4_K_M. Either way [`converted_type`]'s rules apply on top (f16 for the products after a
/// layer norm, f32 for what is not a matrix) and rows that do not fill a block fall back.
#[derive(Clone, Copy, Debug)]
pub enum Recipe {
    /// Every matrix in one type.
    Uniform(DType),
    /// Most matrices in `base`, the FFN down projections of the layers `high_layers` picks
    /// (from the layer index and count) in `high`; `name` is what `--type` calls it.
    Mixed { name: &'static str, base: DType, high: DType, high_layers: fn(usize, usize) -> bool },
}

/// The FFN down projections of the later half of the layers at higher precision (llama.cpp's
/// Q4_K_M raises about half of them too). Why these: on all-MiniLM-L6-v2 (whose other matrices
/// have rows of 384 values, which fall back to q8_0) the worst cosine against the f32 run over
/// 68 sentences, q4_K base / q5_K base, with q6_K for the down projections of layers: none
/// 0.9844 / 0.9954, llama.cpp's pick (2, 5) 0.9875 / 0.9969, first and last (0, 5) 0.9864 /
/// 0.9964, later half (3, 4, 5) 0.9948 / 0.9976, all (= q6_K) 0.9989; each single layer's
/// raise helps least for the first ones (layer 0: 0.9847, layer 4: 0.9892 with q4_K).
fn later_half(layer: usize, layers: usize) -> bool {
    2 * layer >= layers
}

impl Recipe {
    /// q4_K for the matrices, q6_K for the FFN down projections of the later half of the layers.
    pub const Q4_K_M: Recipe =
        Recipe::Mixed { name: "q4_K_M", base: DType::Q4_K, high: DType::Q6_K, high_layers: later_half };
    /// q5_K for the matrices, q6_K for the FFN down projections of the later half of the layers.
    pub const Q5_K_M: Recipe =
        Recipe::Mixed { name: "q5_K_M", base: DType::Q5_K, high: DType::Q6_K, high_layers: later_half };

    /// The recipe called `name` (a type name or a mix; case-insensitive).
    pub fn parse(name: &str) -> Option<Recipe> {
        let name = name.to_lowercase();
        [Recipe::Q4_K_M, Recipe::Q5_K_M]
            .into_iter()
            .chain(DType::ALL.into_iter().filter(|t| *t != DType::I32).map(Recipe::Uniform))
            .find(|r| r.name().to_lowercase() == name)
    }

    /// ggml's name of the type, or the mix's ("q4_K_M").
    pub fn name(&self) -> &'static str {
        match self {
            Recipe::Uniform(t) => t.name(),
            Recipe::Mixed { name, .. } => name,
        }
    }

    /// Whether the matrices are quantized.
    pub fn is_quantized(&self) -> bool {
        match self {
            Recipe::Uniform(t) => t.is_quantized(),
            Recipe::Mixed { .. } => true,
        }
    }

    /// The type of weight `name` (a tessera BERT weight name) of a model of `layers` layers,
    /// before rows that do not fill a block fall back.
    pub fn type_of(&self, name: &str, layers: usize) -> DType {
        match *self {
            Recipe::Uniform(t) => converted_type(name, t),
            Recipe::Mixed { base, high, high_layers, .. } => {
                let ffn_down = ffn_down_layer(name).filter(|&l| high_layers(l, layers));
                converted_type(name, if ffn_down.is_some() { high } else { base })
            }
        }
    }
}

/// Recipes are known by their names (functions cannot be compared).
impl PartialEq for Recipe {
    fn eq(&self, other: &Recipe) -> bool {
        self.name() == other.name()
    }
}

impl Eq for Recipe {}

impl From<DType> for Recipe {
    fn from(t: DType) -> Recipe {
        Recipe::Uniform(t)
    }
}

/// The layer of an FFN down projection's matrix (`encoder.layer.N.output.dense.weight`).
fn ffn_down_layer(name: &str) -> Option<usize> {
    let rest = name.strip_prefix("encoder.layer.")?;
    let (layer, what) = rest.split_once('.')?;
    (what == "output.dense.weight").then(|| layer.parse().ok()).flatten()
}

/// Writes `model`'s weights to `out` as GGUF in llama.cpp's layout, so that llama.cpp's
/// `llama-embedding` runs it as well as tessera: its tensor names (`blk.N.attn_q.weight`, see
/// [`TensorNames`]), its `bert.*` hyper-parameters (mean pooling, non-causal attention) and the
/// model's WordPiece vocabulary as `tokenizer.ggml.*` metadata (from the `tokenizer.json`
/// beside `model`, else from `model`'s own metadata; none if neither has one). The matrices
/// that matrix products and row lookups read are in the types of `recipe` (a [`Recipe`] or a
/// single type; where rows fit their blocks, else a smaller block or f32; with a quantized
/// type, a few sensitive ones in f16, see [`converted_type`]), everything else in f32.
/// Returns the number of tensors written.
///
/// The file is written beside `out` under a temporary name and checked the way
/// [`Embedder::load`](crate::Embedder::load) checks a model before it takes `out`'s name, so
/// a conversion never leaves a file that would not load (and `out` may be `model` itself).
pub fn convert(model: &Path, out: &Path, recipe: impl Into<Recipe>) -> Result<usize> {
    let recipe = recipe.into();
    let file = ModelFile::open(model)?;
    let config = BertConfig::of_file(&file)?;
    let names = TensorNames::of_file(&file);
    let mut probe = Graph::new();
    let shapes = bert::build(&mut probe, &config, &|_: &str| DType::F32, Layout::packed(&[1]))?;
    let mut w = GgufWriter::new();
    write_hyper_parameters(&mut w, &config)?;
    if let Some(vocab) = model_vocab(&file)? {
        vocab.write_gguf(&mut w);
    }
    for (name, _, _) in &shapes.weights {
        let stored = names.file_name(name);
        let t = file
            .tensor(&stored)
            .ok_or_else(|| Error::NotBert { path: model.display().to_string(), tensor: stored.to_string() })?;
        let values = tessera_core::convert::to_f32_vec(t.dtype, file.data(t)?);
        let target = stored_type(recipe.type_of(name, config.layers), t.ne[0]);
        let bytes = tessera_core::convert::to_bytes(target, &values)?;
        let dims: Vec<usize> = if t.ne[1] > 1 { vec![t.ne[0], t.ne[1]] } else { vec![t.ne[0]] };
        let llama_name = llama_cpp_name(name).ok_or_else(|| Error::InvalidConfig {
            message: format!("weight '{name}' has no name in llama.cpp's layout"),
        })?;
        w.add_tensor(&llama_name, target, &dims, &bytes)?;
    }
    let io = |source| Error::Io { path: out.display().to_string(), source };
    let name = out.file_name().map_or_else(|| "out.gguf".into(), |n| n.to_string_lossy().into_owned());
    let partial = out.with_file_name(format!(".{name}.partial"));
    w.write_to(&partial).map_err(io)?;
    let checked = crate::Embedder::check(&partial).and_then(|_| std::fs::rename(&partial, out).map_err(io));
    if checked.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    checked.map(|_| shapes.weights.len())
}

/// The type a matrix meant to be `dtype` is stored in when its rows hold `row` values: rows that
/// do not fill K-quant super-blocks take Q8_0's 32-value blocks (as llama.cpp's quantization
/// mixes fall back to a smaller block), rows that fit no block stay f32.
fn stored_type(dtype: DType, row: usize) -> DType {
    if row % dtype.block_len() == 0 {
        dtype
    } else if dtype.block_len() > DType::Q8_0.block_len() && row % DType::Q8_0.block_len() == 0 {
        DType::Q8_0
    } else {
        DType::F32
    }
}

/// llama.cpp's hyper-parameters of a BERT model (what its loader requires, and what its
/// embedding program reads: mean pooling, attention over the whole sequence).
fn write_hyper_parameters(w: &mut GgufWriter, config: &BertConfig) -> Result<()> {
    let u32_of = |what: &str, n: usize| {
        u32::try_from(n).map_err(|_| Error::InvalidConfig { message: format!("{what} {n} does not fit GGUF's u32") })
    };
    w.add_string("general.architecture", "bert");
    w.add_u32("bert.context_length", u32_of("max_position_embeddings", config.max_positions)?);
    w.add_u32("bert.embedding_length", u32_of("hidden_size", config.hidden)?);
    w.add_u32("bert.feed_forward_length", u32_of("intermediate_size", config.intermediate)?);
    w.add_u32("bert.block_count", u32_of("num_hidden_layers", config.layers)?);
    w.add_u32("bert.attention.head_count", u32_of("num_attention_heads", config.heads)?);
    w.add_f32("bert.attention.layer_norm_epsilon", config.eps);
    w.add_bool("bert.attention.causal", false);
    w.add_u32("bert.pooling_type", POOLING_MEAN);
    w.add_u32("tokenizer.ggml.token_type_count", u32_of("type_vocab_size", config.type_vocab)?);
    Ok(())
}

/// llama.cpp's code of mean pooling (`bert.pooling_type`), what sentence-transformers does
/// for this model family and what this graph computes.
const POOLING_MEAN: u32 = 1;

/// The vocabulary of the model in `file`: its `tokenizer.json`, else its GGUF metadata's.
fn model_vocab(file: &ModelFile) -> Result<Option<Vocab>> {
    let beside = file.path().with_file_name("tokenizer.json");
    if beside.exists() {
        return Vocab::from_tokenizer_json(&beside).map(Some);
    }
    match file.gguf() {
        Some(gguf) => Vocab::from_gguf(&gguf, &file.path().display().to_string()),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::test_model::{self, TINY};

    #[test]
    fn a_conversion_that_would_not_load_writes_no_file() {
        let dir = test_model::temp_dir("convert-refused");
        let model = test_model::write_safetensors(&dir, &TINY);
        let out = dir.join("out.gguf");
        // No config.json: no head count, so nothing that embeds could load is written.
        let err = convert(&model, &out, DType::F16).unwrap_err();
        assert!(err.to_string().contains("no attention head count"), "{err}");
        assert!(std::fs::read_dir(&dir).unwrap().all(|e| !e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .contains("out.gguf")));
        // With it, the file is written, and even over the model it was converted from.
        std::fs::write(dir.join("config.json"), test_model::config_json(&TINY)).unwrap();
        convert(&model, &out, DType::F16).unwrap();
        crate::Embedder::check(&out).unwrap();
        convert(&out, &out, DType::Q8_0).unwrap();
        assert_eq!(crate::Embedder::check(&out).unwrap(), TINY);
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn converted_files_have_llama_cpp_names_keys_vocabulary_and_alignment() {
        let dir = test_model::temp_dir("convert-layout");
        let model = test_model::write_safetensors(&dir, &TINY);
        std::fs::write(dir.join("config.json"), test_model::config_json(&TINY)).unwrap();
        std::fs::write(dir.join("tokenizer.json"), test_model::TOKENIZER_JSON).unwrap();
        let out = dir.join("out.gguf");
        convert(&model, &out, DType::F16).unwrap();
        let bytes = std::fs::read(&out).unwrap();
        let gguf = tessera_core::gguf::Gguf::parse(&bytes).unwrap();
        let names: Vec<&str> = gguf.tensors().iter().map(|t| t.name()).collect();
        for name in ["token_embd.weight", "position_embd.weight", "token_types.weight", "token_embd_norm.bias"] {
            assert!(names.contains(&name), "{name} not in {names:?}");
        }
        assert!(names.contains(&"blk.1.layer_output_norm.weight") && names.contains(&"blk.0.attn_q.bias"));
        assert!(names.iter().all(|n| !n.starts_with("encoder.") && !n.starts_with("embeddings.")), "{names:?}");
        assert_eq!(gguf.alignment(), 32);
        assert!(gguf.tensors().iter().all(|t| t.file_offset() % 32 == 0));
        assert_eq!(gguf.tensor("blk.0.ffn_up.weight").unwrap().ne(), [TINY.hidden, TINY.intermediate, 1, 1]);
        let u = |key: &str| gguf.get(key).and_then(|v| v.as_unsigned()).unwrap() as usize;
        assert_eq!(u("bert.context_length"), TINY.max_positions);
        assert_eq!(u("bert.block_count"), TINY.layers);
        assert_eq!(u("bert.pooling_type"), 1);
        assert_eq!(gguf.get("bert.attention.causal").and_then(|v| v.as_bool()), Some(false));
        assert_eq!(gguf.get("general.architecture").and_then(|v| v.as_str()), Some("bert"));
        let vocab = Vocab::from_gguf(&gguf, "out.gguf").unwrap().unwrap();
        assert_eq!(vocab, Vocab::from_tokenizer_json(&dir.join("tokenizer.json")).unwrap());
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn rows_that_do_not_fill_a_block_fall_back_to_smaller_blocks_or_f32() {
        assert_eq!(stored_type(DType::Q4_K, 1536), DType::Q4_K);
        assert_eq!(stored_type(DType::Q6_K, 384), DType::Q8_0);
        assert_eq!(stored_type(DType::Q5_K, 40), DType::F32);
        assert_eq!(stored_type(DType::Q8_0, 40), DType::F32);
        assert_eq!(stored_type(DType::F16, 7), DType::F16);
    }

    #[test]
    fn mixed_recipes_raise_the_ffn_down_projections_of_the_later_layers() {
        let down = |l: usize| format!("encoder.layer.{l}.output.dense.weight");
        let r = Recipe::parse("Q4_K_M").unwrap();
        assert_eq!(r, Recipe::Q4_K_M);
        assert_eq!(r.type_of(&down(2), 6), DType::Q4_K);
        assert_eq!(r.type_of(&down(3), 6), DType::Q6_K);
        assert_eq!(r.type_of(&down(5), 6), DType::Q6_K);
        assert_eq!(r.type_of(&down(6), 12), DType::Q6_K);
        assert_eq!(r.type_of(&down(5), 12), DType::Q4_K);
        assert_eq!(r.type_of("encoder.layer.0.attention.output.dense.weight", 6), DType::Q4_K);
        assert_eq!(r.type_of("encoder.layer.0.attention.self.value.weight", 6), DType::F16);
        assert_eq!(r.type_of("encoder.layer.0.output.dense.bias", 6), DType::F32);
        assert_eq!(Recipe::parse("q5_k_m").unwrap().type_of(&down(0), 6), DType::Q5_K);
        assert_eq!(Recipe::parse("q3_k"), Some(Recipe::Uniform(DType::Q3_K)));
        assert_eq!(Recipe::parse("i32"), None);
        assert_eq!(Recipe::parse("q4_K_S"), None);
    }

    #[test]
    fn quantized_conversions_keep_the_products_after_a_layer_norm_in_f16() {
        let q = DType::Q8_0;
        assert_eq!(converted_type("embeddings.word_embeddings.weight", q), q);
        assert_eq!(converted_type("encoder.layer.3.attention.self.query.weight", q), DType::F16);
        assert_eq!(converted_type("encoder.layer.3.attention.self.value.weight", q), DType::F16);
        assert_eq!(converted_type("encoder.layer.3.intermediate.dense.weight", q), DType::F16);
        assert_eq!(converted_type("encoder.layer.3.attention.output.dense.weight", q), q);
        assert_eq!(converted_type("encoder.layer.3.output.dense.weight", q), q);
        // Biases, layer norms and the token-type table stay f32 whatever the matrices are.
        for t in [DType::F16, q] {
            assert_eq!(converted_type("encoder.layer.3.output.dense.bias", t), DType::F32);
            assert_eq!(converted_type("encoder.layer.3.output.LayerNorm.weight", t), DType::F32);
            assert_eq!(converted_type("embeddings.token_type_embeddings.weight", t), DType::F32);
        }
        // Float conversions are uniform.
        assert_eq!(converted_type("encoder.layer.0.attention.self.key.weight", DType::F16), DType::F16);
    }
}
