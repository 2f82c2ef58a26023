//! A BERT written in llama.cpp's GGUF layout by llama.cpp's own `gguf` package
//! (scripts/make_llama_bert_fixture.py) loads on its own, and computes and tokenizes exactly
//! like its twin under the checkpoint's names with a `tokenizer.json`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use tessera_core::Device;
use tessera_models::{BertConfig, Embedder, TensorNames, MODULES};
use tessera_std::model_file::ModelFile;
use tessera_std::placement::Placement;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/llama_bert").join(name)
}

fn load(path: &Path) -> Embedder {
    let devices = [&tessera_cpu::CPU_DEVICE as &'static dyn Device];
    Embedder::load(path, Placement::resolve("", "", &MODULES, &devices).unwrap()).unwrap()
}

const TEXTS: [&str; 6] = [
    "A sentence.",
    "Another one!",
    "The CAFÉ, the café?",
    "An unknown word is longer",
    "[CLS] a [SEP] [MASK]",
    "zebra quixotically words, sentences",
];

#[test]
fn a_llama_cpp_file_loads_with_its_names_keys_and_vocabulary() {
    let llama = fixture("llama.gguf");
    assert_eq!(TensorNames::of_file(&ModelFile::open(&llama).unwrap()), TensorNames::LlamaCpp);
    let config = Embedder::check(&llama).unwrap();
    let want = BertConfig {
        vocab: 24,
        max_positions: 16,
        type_vocab: 2,
        hidden: 32,
        heads: 4,
        layers: 2,
        intermediate: 64,
        eps: 1e-12,
    };
    assert_eq!(config, want);
    let e = load(&llama);
    assert_eq!(e.tokenizer().unwrap().path(), llama, "the tokenizer comes from the file itself");
    assert_eq!(e.tokenize(&["A sentence.", "Another one!"]).unwrap(), [vec![2, 5, 6, 7, 3], vec![2, 8, 9, 10, 11, 3]]);
}

#[test]
fn a_llama_cpp_file_tokenizes_and_embeds_exactly_like_its_checkpoint_twin() {
    let mut llama = load(&fixture("llama.gguf"));
    let mut twin = load(&fixture("hf/model.gguf"));
    let tokens = twin.tokenize(&TEXTS).unwrap();
    assert_eq!(llama.tokenize(&TEXTS).unwrap(), tokens);
    assert!(tokens[5].contains(&1), "unknown words become [UNK]: {:?}", tokens[5]);
    assert_eq!(llama.embed(&TEXTS).unwrap(), twin.embed(&TEXTS).unwrap());
}
