//! The two ways BERT weights are named in model files: the Hugging Face checkpoint's names
//! (`encoder.layer.0.output.dense.weight`), which the graph uses, and llama.cpp's GGUF names
//! (`blk.0.ffn_down.weight`), which its converter writes and its `llama-embedding` reads.
//!
//! Both store linear weights the same way round (ggml order `[in, out]`, the checkpoint's
//! `[out, in]` row-major matrix), so a weight only changes its name between them.

use std::borrow::Cow;

use tessera_std::model_file::ModelFile;

/// How a model file names its tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TensorNames {
    /// The Hugging Face checkpoint's names, as the graph declares them.
    HuggingFace,
    /// llama.cpp's names (`token_embd`, `blk.N.attn_q`, ...).
    LlamaCpp,
}

/// The embedding weights: checkpoint prefix and llama.cpp's name.
const EMBEDDINGS: [(&str, &str); 4] = [
    ("embeddings.word_embeddings", "token_embd"),
    ("embeddings.position_embeddings", "position_embd"),
    ("embeddings.token_type_embeddings", "token_types"),
    ("embeddings.LayerNorm", "token_embd_norm"),
];

/// The weights of layer N: the part after `encoder.layer.N.` and after `blk.N.`.
const LAYER: [(&str, &str); 8] = [
    ("attention.self.query", "attn_q"),
    ("attention.self.key", "attn_k"),
    ("attention.self.value", "attn_v"),
    ("attention.output.dense", "attn_output"),
    ("attention.output.LayerNorm", "attn_output_norm"),
    ("intermediate.dense", "ffn_up"),
    ("output.dense", "ffn_down"),
    ("output.LayerNorm", "layer_output_norm"),
];

impl TensorNames {
    /// The naming of `file`: llama.cpp's if it has llama.cpp's word embeddings.
    pub fn of_file(file: &ModelFile) -> TensorNames {
        if file.tensor("token_embd.weight").is_some() {
            TensorNames::LlamaCpp
        } else {
            TensorNames::HuggingFace
        }
    }

    /// The name under which a file of this naming stores the graph's weight `name`. Names this
    /// naming has no counterpart for are returned unchanged.
    pub fn file_name(self, name: &str) -> Cow<'_, str> {
        match self {
            TensorNames::HuggingFace => Cow::Borrowed(name),
            TensorNames::LlamaCpp => llama_cpp_name(name).map_or(Cow::Borrowed(name), Cow::Owned),
        }
    }
}

/// llama.cpp's name of a checkpoint weight name (`.weight` or `.bias`), if it has one.
pub fn llama_cpp_name(name: &str) -> Option<String> {
    let (stem, kind) = name.rsplit_once('.')?;
    if kind != "weight" && kind != "bias" {
        return None;
    }
    if let Some((_, llama)) = EMBEDDINGS.iter().find(|(hf, _)| *hf == stem) {
        return Some(format!("{llama}.{kind}"));
    }
    let (layer, part) = stem.strip_prefix("encoder.layer.")?.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let (_, llama) = LAYER.iter().find(|(hf, _)| *hf == part)?;
    Some(format!("blk.{layer}.{llama}.{kind}"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::test_model::TINY;
    use tessera_core::{DType, Graph};

    #[test]
    fn checkpoint_names_map_to_llama_cpp_names() {
        let cases = [
            ("embeddings.word_embeddings.weight", "token_embd.weight"),
            ("embeddings.position_embeddings.weight", "position_embd.weight"),
            ("embeddings.token_type_embeddings.weight", "token_types.weight"),
            ("embeddings.LayerNorm.bias", "token_embd_norm.bias"),
            ("encoder.layer.0.attention.self.query.weight", "blk.0.attn_q.weight"),
            ("encoder.layer.11.attention.self.key.bias", "blk.11.attn_k.bias"),
            ("encoder.layer.2.attention.self.value.weight", "blk.2.attn_v.weight"),
            ("encoder.layer.2.attention.output.dense.weight", "blk.2.attn_output.weight"),
            ("encoder.layer.2.attention.output.LayerNorm.weight", "blk.2.attn_output_norm.weight"),
            ("encoder.layer.3.intermediate.dense.bias", "blk.3.ffn_up.bias"),
            ("encoder.layer.3.output.dense.weight", "blk.3.ffn_down.weight"),
            ("encoder.layer.3.output.LayerNorm.bias", "blk.3.layer_output_norm.bias"),
        ];
        for (hf, llama) in cases {
            assert_eq!(llama_cpp_name(hf).as_deref(), Some(llama), "{hf}");
            assert_eq!(TensorNames::LlamaCpp.file_name(hf), llama);
            assert_eq!(TensorNames::HuggingFace.file_name(hf), hf);
        }
        for other in ["pooler.dense.weight", "encoder.layer.x.output.dense.weight", "embeddings.position_ids"] {
            assert_eq!(llama_cpp_name(other), None, "{other}");
        }
    }

    #[test]
    fn every_weight_of_the_graph_has_a_distinct_llama_cpp_name() {
        let mut g = Graph::new();
        let weight_type = crate::bert::uniform_weight_type(DType::F32);
        let model = crate::bert::build(&mut g, &TINY, &weight_type, crate::Layout::packed(&[1])).unwrap();
        let mut names: Vec<String> = model.weights.iter().map(|(n, _, _)| llama_cpp_name(n).unwrap()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), model.weights.len());
    }
}
