//! Writes a BERT model as GGUF with its matrices in another type (`embed --convert`).

use std::path::Path;

use tessera_core::{DType, Graph};
use tessera_std::gguf_writer::GgufWriter;
use tessera_std::model_file::ModelFile;

use crate::bert::{self, is_quantizable, Layout};
use crate::config::BertConfig;
use crate::error::{Error, Result};

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

/// Writes `model`'s weights to `out` as GGUF: the matrices that matrix products and row
/// lookups read in `matrix_type` (where rows fit its blocks; with a quantized type, a few
/// sensitive ones in f16, see [`converted_type`]), everything else in f32, and the config as
/// `bert.*` metadata. Returns the number of tensors written.
///
/// The file is written beside `out` under a temporary name and checked the way
/// [`Embedder::load`](crate::Embedder::load) checks a model before it takes `out`'s name, so
/// a conversion never leaves a file that would not load (and `out` may be `model` itself).
pub fn convert(model: &Path, out: &Path, matrix_type: DType) -> Result<usize> {
    let file = ModelFile::open(model)?;
    let config = BertConfig::of_file(&file)?;
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
        let t = file
            .tensor(name)
            .ok_or_else(|| Error::NotBert { path: model.display().to_string(), tensor: name.clone() })?;
        let values = tessera_core::convert::to_f32_vec(t.dtype, file.data(t)?);
        let target = match converted_type(name, matrix_type) {
            q if t.ne[0] % q.block_len() != 0 => DType::F32,
            q => q,
        };
        let bytes = tessera_core::convert::to_bytes(target, &values)?;
        let dims: Vec<usize> = if t.ne[1] > 1 { vec![t.ne[0], t.ne[1]] } else { vec![t.ne[0]] };
        w.add_tensor(name, target, &dims, &bytes)?;
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
