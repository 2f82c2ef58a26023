//! A BERT WordPiece vocabulary as llama.cpp keeps it in GGUF metadata (`tokenizer.ggml.*`):
//! read from a file, taken from a `tokenizer.json`, written into a file, and made into a
//! tokenizer, so that a single GGUF file is enough to embed text.
//!
//! llama.cpp spells tokens its own way ("phantom space"): a word-initial token gets a U+2581
//! prefix, a continuation loses its `##`, control tokens (`[CLS]`) stay as they are (its older
//! converter kept every token of the form `[...]` as it was instead).

use std::collections::HashMap;
use std::path::Path;

use serde::Deserialize;
use tessera_core::gguf::{Gguf, Value};
use tessera_std::gguf_writer::GgufWriter;

use crate::error::{Error, Result};

/// The metadata keys of the vocabulary.
pub mod keys {
    pub const MODEL: &str = "tokenizer.ggml.model";
    pub const PRE: &str = "tokenizer.ggml.pre";
    pub const TOKENS: &str = "tokenizer.ggml.tokens";
    pub const TOKEN_TYPE: &str = "tokenizer.ggml.token_type";
    pub const CLS: &str = "tokenizer.ggml.cls_token_id";
    pub const BOS: &str = "tokenizer.ggml.bos_token_id";
    pub const EOS: &str = "tokenizer.ggml.eos_token_id";
    pub const ADD_BOS: &str = "tokenizer.ggml.add_bos_token";
    pub const ADD_EOS: &str = "tokenizer.ggml.add_eos_token";
    /// Spelled as llama.cpp spells it.
    pub const SEP: &str = "tokenizer.ggml.seperator_token_id";
    pub const PAD: &str = "tokenizer.ggml.padding_token_id";
    pub const UNK: &str = "tokenizer.ggml.unknown_token_id";
    pub const MASK: &str = "tokenizer.ggml.mask_token_id";
}

/// llama.cpp's token types.
pub mod token_type {
    pub const NORMAL: i32 = 1;
    pub const CONTROL: i32 = 3;
    pub const USER_DEFINED: i32 = 4;
    pub const UNUSED: i32 = 5;
}

/// llama.cpp's word-start marker.
const WORD_START: char = '\u{2581}';

/// A WordPiece vocabulary and its special tokens.
#[derive(Clone, Debug, PartialEq)]
pub struct Vocab {
    /// Tokens by id, spelled as WordPiece spells them (`##` before continuations).
    pub tokens: Vec<String>,
    /// llama.cpp's type of each token ([`token_type`]).
    pub types: Vec<i32>,
    pub cls: u32,
    pub sep: u32,
    pub unk: u32,
    pub pad: Option<u32>,
    pub mask: Option<u32>,
}

/// The parts of a `tokenizer.json` a WordPiece vocabulary needs.
#[derive(Deserialize)]
struct TokenizerJson {
    model: ModelJson,
    #[serde(default)]
    added_tokens: Vec<AddedToken>,
}

#[derive(Deserialize)]
struct ModelJson {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    vocab: HashMap<String, u32>,
    unk_token: Option<String>,
}

#[derive(Deserialize)]
struct AddedToken {
    id: u32,
    content: String,
    #[serde(default)]
    special: bool,
}

impl Vocab {
    /// The vocabulary in `gguf`'s metadata; `None` if it has no `tokenizer.ggml.model`. `path`
    /// names the file in errors, which name the key at fault.
    pub fn from_gguf(gguf: &Gguf<'_>, path: &str) -> Result<Option<Vocab>> {
        let error = |message: String| Error::Tokenizer { path: path.into(), message };
        let Some(model) = gguf.get(keys::MODEL) else { return Ok(None) };
        match model {
            Value::String("bert") => {}
            Value::String(other) => {
                return Err(error(format!(
                    "metadata '{}' is \"{other}\"; tessera builds WordPiece (\"bert\") tokenizers",
                    keys::MODEL
                )))
            }
            v => {
                return Err(error(format!(
                    "metadata '{}' is of type {}; expected a string",
                    keys::MODEL,
                    v.value_type()
                )))
            }
        }
        let array = |key: &str| match gguf.get(key) {
            Some(Value::Array(a)) => Ok(a),
            Some(v) => Err(error(format!("metadata '{key}' is of type {}; expected an array", v.value_type()))),
            None => Err(error(format!("metadata '{key}' is missing; a BERT vocabulary has it"))),
        };
        let spelled: Vec<&str> = array(keys::TOKENS)?
            .strings()
            .ok_or_else(|| error(format!("metadata '{}' is not an array of strings", keys::TOKENS)))?
            .collect();
        let types: Vec<i32> = array(keys::TOKEN_TYPE)?
            .iter()
            .map(|v| v.as_integer().and_then(|t| i32::try_from(t).ok()))
            .collect::<Option<_>>()
            .ok_or_else(|| error(format!("metadata '{}' is not an array of integers", keys::TOKEN_TYPE)))?;
        if types.len() != spelled.len() {
            return Err(error(format!(
                "metadata '{}' has {} entries but '{}' has {} tokens; expected one type per token",
                keys::TOKEN_TYPE,
                types.len(),
                keys::TOKENS,
                spelled.len()
            )));
        }
        let tokens = spelled.iter().zip(&types).map(|(t, &ty)| from_phantom(t, ty)).collect();
        let id = |key: &str| -> Result<Option<u32>> {
            match gguf.get(key) {
                None => Ok(None),
                Some(v) => match v.as_unsigned().and_then(|n| u32::try_from(n).ok()) {
                    Some(n) if (n as usize) < spelled.len() => Ok(Some(n)),
                    _ => Err(error(format!(
                        "metadata '{key}' is {v:?}; expected the id of one of its {} tokens",
                        spelled.len()
                    ))),
                },
            }
        };
        let required = |key: &str| id(key)?.ok_or_else(|| error(format!("metadata '{key}' is missing")));
        // llama.cpp's newer files give the classification token as the beginning of sequence.
        let cls = match id(keys::CLS)? {
            Some(cls) => cls,
            None => id(keys::BOS)?.ok_or_else(|| error(format!("metadata '{}' is missing", keys::CLS)))?,
        };
        Ok(Some(Vocab {
            tokens,
            types,
            cls,
            sep: required(keys::SEP)?,
            unk: required(keys::UNK)?,
            pad: id(keys::PAD)?,
            mask: id(keys::MASK)?,
        }))
    }

    /// The vocabulary of a WordPiece `tokenizer.json`, with its special tokens by their BERT
    /// names (`[CLS]`, `[SEP]`, `[PAD]`, `[MASK]`; the model's unknown token).
    pub fn from_tokenizer_json(path: &Path) -> Result<Vocab> {
        let error = |message: String| Error::Tokenizer { path: path.display().to_string(), message };
        let text = std::fs::read_to_string(path).map_err(|e| error(format!("cannot read: {e}")))?;
        let json: TokenizerJson =
            serde_json::from_str(&text).map_err(|e| error(format!("not a tokenizer.json: {e}")))?;
        if json.model.kind != "WordPiece" {
            return Err(error(format!("its model is {}; a BERT vocabulary is WordPiece", json.model.kind)));
        }
        let mut by_id: HashMap<u32, (&str, i32)> = HashMap::new();
        for (token, &id) in &json.model.vocab {
            by_id.insert(id, (token, token_type::NORMAL));
        }
        for t in &json.added_tokens {
            let ty = if t.special { token_type::CONTROL } else { token_type::USER_DEFINED };
            by_id.insert(t.id, (&t.content, ty));
        }
        let n = by_id.keys().max().map_or(0, |&m| m as usize + 1);
        let (mut tokens, mut types) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for i in 0..n {
            let (token, ty) = match by_id.get(&(i as u32)) {
                Some(&(token, ty)) => (token.to_owned(), ty),
                // Ids no token has are kept as unused placeholders, as llama.cpp's converter does.
                None => (format!("[PAD{i}]"), token_type::UNUSED),
            };
            tokens.push(token);
            types.push(ty);
        }
        let find = |name: &str| tokens.iter().position(|t| t == name).map(|i| i as u32);
        let named = |name: &str| find(name).ok_or_else(|| error(format!("it has no {name} token")));
        let unk_name = json.model.unk_token.as_deref().unwrap_or("[UNK]");
        Ok(Vocab {
            cls: named("[CLS]")?,
            sep: named("[SEP]")?,
            unk: named(unk_name)?,
            pad: find("[PAD]"),
            mask: find("[MASK]"),
            tokens,
            types,
        })
    }

    /// Writes the vocabulary as llama.cpp's metadata, as its converter does: the classification
    /// token is also the beginning of sequence and the separator the end, both added to every
    /// sequence (the `cls_token_id` of its older readers is written too).
    pub fn write_gguf(&self, w: &mut GgufWriter) {
        let spelled: Vec<String> = self.tokens.iter().zip(&self.types).map(|(t, &ty)| to_phantom(t, ty)).collect();
        w.add_string(keys::MODEL, "bert");
        w.add_string(keys::PRE, "default");
        w.add_array(keys::TOKENS, &spelled);
        w.add_array(keys::TOKEN_TYPE, &self.types);
        w.add_u32(keys::CLS, self.cls);
        w.add_u32(keys::BOS, self.cls);
        w.add_u32(keys::EOS, self.sep);
        w.add_bool(keys::ADD_BOS, true);
        w.add_bool(keys::ADD_EOS, true);
        w.add_u32(keys::SEP, self.sep);
        w.add_u32(keys::UNK, self.unk);
        if let Some(pad) = self.pad {
            w.add_u32(keys::PAD, pad);
        }
        if let Some(mask) = self.mask {
            w.add_u32(keys::MASK, mask);
        }
    }

    /// The `tokenizer.json` of a BERT checkpoint with this vocabulary: BERT's normalizer
    /// (lower case, accents stripped, as llama.cpp's WordPiece tokenizer does), pre-tokenizer and
    /// `[CLS] $A [SEP]` template; control tokens are special added tokens.
    pub fn tokenizer_json(&self) -> serde_json::Value {
        let vocab: serde_json::Map<String, serde_json::Value> =
            self.tokens.iter().enumerate().map(|(i, t)| (t.clone(), i.into())).collect();
        let added: Vec<serde_json::Value> = self
            .types
            .iter()
            .enumerate()
            .filter(|(_, &ty)| ty == token_type::CONTROL)
            .map(|(i, _)| {
                serde_json::json!({"id": i, "content": self.tokens[i], "special": true, "single_word": false,
                    "lstrip": false, "rstrip": false, "normalized": false})
            })
            .collect();
        let (cls, sep) = (&self.tokens[self.cls as usize], &self.tokens[self.sep as usize]);
        serde_json::json!({
            "version": "1.0",
            "truncation": null,
            "padding": null,
            "added_tokens": added,
            "normalizer": {"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true,
                           "strip_accents": null, "lowercase": true},
            "pre_tokenizer": {"type": "BertPreTokenizer"},
            "post_processor": {"type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": cls, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                           {"SpecialToken": {"id": sep, "type_id": 0}}],
                "pair": [{"SpecialToken": {"id": cls, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                         {"SpecialToken": {"id": sep, "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}},
                         {"SpecialToken": {"id": sep, "type_id": 1}}],
                "special_tokens": {
                    cls.as_str(): {"id": cls, "ids": [self.cls], "tokens": [cls]},
                    sep.as_str(): {"id": sep, "ids": [self.sep], "tokens": [sep]}}},
            "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": true},
            "model": {"type": "WordPiece", "unk_token": self.tokens[self.unk as usize],
                      "continuing_subword_prefix": "##", "max_input_chars_per_word": 100, "vocab": vocab}
        })
    }
}

/// llama.cpp's spelling of a WordPiece token.
fn to_phantom(token: &str, ty: i32) -> String {
    if ty == token_type::CONTROL {
        token.to_owned()
    } else if let Some(rest) = token.strip_prefix("##") {
        rest.to_owned()
    } else {
        format!("{WORD_START}{token}")
    }
}

/// The WordPiece spelling of a token llama.cpp spelled `token`.
fn from_phantom(token: &str, ty: i32) -> String {
    if ty == token_type::CONTROL || (token.starts_with('[') && token.ends_with(']')) {
        token.to_owned()
    } else if let Some(word) = token.strip_prefix(WORD_START) {
        word.to_owned()
    } else {
        format!("##{token}")
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn tiny_vocab() -> Vocab {
        let dir = crate::test_model::temp_dir("vocab");
        let path = dir.join("tokenizer.json");
        std::fs::write(&path, crate::test_model::TOKENIZER_JSON).unwrap();
        let v = Vocab::from_tokenizer_json(&path).unwrap();
        std::fs::remove_dir_all(&dir).ok();
        v
    }

    #[test]
    fn tokens_are_spelled_as_llama_cpp_spells_them_and_back() {
        let cases = [
            ("[CLS]", token_type::CONTROL, "[CLS]"),
            ("##ing", token_type::NORMAL, "ing"),
            ("word", token_type::NORMAL, "\u{2581}word"),
            ("[unused0]", token_type::NORMAL, "\u{2581}[unused0]"),
            ("##", token_type::NORMAL, ""),
        ];
        for (wordpiece, ty, llama) in cases {
            assert_eq!(to_phantom(wordpiece, ty), llama);
            assert_eq!(from_phantom(llama, ty), wordpiece);
        }
        // Files of llama.cpp's older converter keep bracketed tokens as they are.
        assert_eq!(from_phantom("[unused0]", token_type::NORMAL), "[unused0]");
    }

    #[test]
    fn a_vocabulary_written_as_metadata_reads_back_the_same() {
        let v = tiny_vocab();
        assert_eq!((v.cls, v.sep, v.unk, v.pad, v.mask), (2, 3, 1, Some(0), None));
        assert_eq!(v.tokens[8], "##other");
        let mut w = GgufWriter::new();
        v.write_gguf(&mut w);
        let bytes = w.to_bytes();
        let gguf = Gguf::parse(&bytes).unwrap();
        let spelled: Vec<&str> = gguf.get(keys::TOKENS).unwrap().as_array().unwrap().strings().unwrap().collect();
        assert_eq!(spelled[4], "\u{2581}a");
        assert_eq!(spelled[8], "other");
        assert_eq!(Vocab::from_gguf(&gguf, "v.gguf").unwrap().unwrap(), v);
    }

    #[test]
    fn a_wrong_or_missing_key_is_an_error_naming_it() {
        let v = tiny_vocab();
        let check = |edit: &dyn Fn(&mut GgufWriter), expected: &str| {
            let mut w = GgufWriter::new();
            v.write_gguf(&mut w);
            edit(&mut w);
            let bytes = w.to_bytes();
            let err = Vocab::from_gguf(&Gguf::parse(&bytes).unwrap(), "v.gguf").unwrap_err();
            assert!(matches!(&err, Error::Tokenizer { path, .. } if path == "v.gguf"), "{err:?}");
            assert!(err.to_string().contains(expected), "{err}");
        };
        check(
            &|w| {
                w.add_string(keys::MODEL, "gpt2");
            },
            "'tokenizer.ggml.model' is \"gpt2\"",
        );
        check(
            &|w| {
                w.add_u32(keys::SEP, 99);
            },
            "'tokenizer.ggml.seperator_token_id' is U32(99)",
        );
        check(
            &|w| {
                w.add_u32(keys::TOKENS, 1);
            },
            "'tokenizer.ggml.tokens' is of type u32",
        );
        check(
            &|w| {
                w.add_array(keys::TOKEN_TYPE, &[1i32]);
            },
            "'tokenizer.ggml.token_type' has 1 entries",
        );
        let mut w = GgufWriter::new();
        w.add_string(keys::MODEL, "bert");
        let bytes = w.to_bytes();
        let err = Vocab::from_gguf(&Gguf::parse(&bytes).unwrap(), "v.gguf").unwrap_err();
        assert!(err.to_string().contains("'tokenizer.ggml.tokens' is missing"), "{err}");
        assert!(Vocab::from_gguf(&Gguf::parse(&GgufWriter::new().to_bytes()).unwrap(), "v").unwrap().is_none());
    }
}
