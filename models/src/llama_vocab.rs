//! The vocabulary of a Llama-architecture GGUF file as llama.cpp keeps it in its metadata
//! (`tokenizer.ggml.*`), and its tokenizer: SentencePiece for model "llama" (see [`crate::spm`]),
//! byte-level BPE for model "gpt2" (a `tokenizers` BPE with the pre-tokenizer that
//! `tokenizer.ggml.pre` names). Text becomes the ids llama.cpp gives for it, and ids become the
//! bytes llama.cpp prints for them.

use std::collections::{HashMap, HashSet};
use std::fmt;

use tessera_core::gguf::{Gguf, Value};
use tessera_std::gguf_writer::GgufWriter;
use tokenizers::models::bpe::{self, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{PreTokenizerWrapper, SplitDelimiterBehavior};

use crate::error::{Error, Result};
use crate::spm::{self, SpmVocab, SPACE};

/// The metadata keys of the vocabulary.
pub mod keys {
    pub const MODEL: &str = "tokenizer.ggml.model";
    pub const PRE: &str = "tokenizer.ggml.pre";
    pub const TOKENS: &str = "tokenizer.ggml.tokens";
    pub const SCORES: &str = "tokenizer.ggml.scores";
    pub const TOKEN_TYPE: &str = "tokenizer.ggml.token_type";
    pub const MERGES: &str = "tokenizer.ggml.merges";
    pub const BOS: &str = "tokenizer.ggml.bos_token_id";
    pub const EOS: &str = "tokenizer.ggml.eos_token_id";
    pub const UNK: &str = "tokenizer.ggml.unknown_token_id";
    pub const PAD: &str = "tokenizer.ggml.padding_token_id";
    pub const ADD_BOS: &str = "tokenizer.ggml.add_bos_token";
    pub const ADD_EOS: &str = "tokenizer.ggml.add_eos_token";
    pub const ADD_SPACE_PREFIX: &str = "tokenizer.ggml.add_space_prefix";
}

/// llama.cpp's token types (`tokenizer.ggml.token_type`).
pub mod token_type {
    pub const NORMAL: i32 = 1;
    pub const UNKNOWN: i32 = 2;
    pub const CONTROL: i32 = 3;
    pub const USER_DEFINED: i32 = 4;
    pub const UNUSED: i32 = 5;
    pub const BYTE: i32 = 6;
}

/// The fewest tokens [`LlamaVocab::made_up`] makes: 3 special tokens, 256 byte tokens, U+2581
/// and the 94 printable ASCII characters other than the space.
pub const MADE_UP_MIN_TOKENS: usize = 3 + 256 + 1 + 94;

/// Which tokenizer a vocabulary is for (`tokenizer.ggml.model`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenizerModel {
    /// "llama": SentencePiece with scores and byte fallback.
    SentencePiece,
    /// "gpt2": byte-level BPE with merges.
    BytePairs,
}

impl TokenizerModel {
    /// Its name in `tokenizer.ggml.model`.
    pub fn name(self) -> &'static str {
        match self {
            TokenizerModel::SentencePiece => "llama",
            TokenizerModel::BytePairs => "gpt2",
        }
    }
}

/// How byte-level BPE splits text into words before merging, by `tokenizer.ggml.pre`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PreSplit {
    /// No or "default": punctuation runs, GPT-2's words, digit runs, groups of three digits.
    Default,
    /// "gpt-2": GPT-2's words.
    Gpt2,
    /// "llama3", "llama-v3", "llama-bpe": Llama 3's words; a word that is a token is not merged.
    Llama3,
}

/// The `tokenizer.ggml.pre` values of the byte-level BPE vocabularies tessera tokenizes.
const PRE_NAMES: &str = "\"default\", \"gpt-2\", \"llama3\", \"llama-v3\" or \"llama-bpe\"";

/// GPT-2's word pattern; its last alternative takes trailing whitespace, as llama.cpp does.
const GPT2_WORDS: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";
/// Llama 3's word pattern, its contractions matched case-insensitively in ASCII only.
const LLAMA3_WORDS: &str = concat!(
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])",
    r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
);

impl PreSplit {
    fn from_name(name: Option<&str>) -> Option<PreSplit> {
        match name {
            None | Some("default") => Some(PreSplit::Default),
            Some("gpt-2") => Some(PreSplit::Gpt2),
            Some("llama3" | "llama-v3" | "llama-bpe") => Some(PreSplit::Llama3),
            Some(_) => None,
        }
    }

    /// The patterns that split the text, each applied to the pieces of the one before.
    fn patterns(self) -> &'static [&'static str] {
        match self {
            PreSplit::Default => &[r"[\p{P}\$\+<=>\^~\|]+", GPT2_WORDS, r"\p{N}+", "[0-9][0-9][0-9]"],
            PreSplit::Gpt2 => &[GPT2_WORDS],
            PreSplit::Llama3 => &[LLAMA3_WORDS],
        }
    }
}

/// A piece of text to tokenize: plain text, or a special token it spelled.
enum Fragment<'t> {
    Text(&'t str),
    Token(u32),
}

/// A Llama-architecture model's vocabulary and tokenizer.
#[derive(Clone)]
pub struct LlamaVocab {
    /// Names the vocabulary in errors.
    path: String,
    /// What the metadata says; tokens as llama.cpp spells them (an empty one is `[EMPTY_<id>]`).
    parts: Parts,
    /// Token by text; of tokens spelled alike, the last.
    ids: HashMap<String, u32>,
    /// Control, unknown and user-defined tokens, longest first: the ones text can spell.
    specials: Vec<u32>,
    /// The BPE tokenizer of a "gpt2" vocabulary.
    bpe: Option<tokenizers::Tokenizer>,
}

/// The parts of a vocabulary, as its metadata gives them.
#[derive(Clone)]
struct Parts {
    model: TokenizerModel,
    pre: Option<String>,
    tokens: Vec<String>,
    scores: Option<Vec<f32>>,
    types: Vec<i32>,
    merges: Vec<String>,
    bos: Option<u32>,
    eos: Option<u32>,
    unk: Option<u32>,
    pad: Option<u32>,
    add_bos: bool,
    add_eos: bool,
    add_space_prefix: bool,
}

impl fmt::Debug for LlamaVocab {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LlamaVocab")
            .field("path", &self.path)
            .field("model", &self.parts.model)
            .field("pre", &self.parts.pre)
            .field("tokens", &self.parts.tokens.len())
            .field("merges", &self.parts.merges.len())
            .field("bos", &self.parts.bos)
            .field("eos", &self.parts.eos)
            .field("unk", &self.parts.unk)
            .field("add_bos", &self.parts.add_bos)
            .field("add_eos", &self.parts.add_eos)
            .field("add_space_prefix", &self.parts.add_space_prefix)
            .finish_non_exhaustive()
    }
}

impl LlamaVocab {
    /// The vocabulary in `gguf`'s metadata. Missing special tokens and flags take llama.cpp's
    /// defaults (SentencePiece: BOS 1, EOS 2, unknown 0, BOS added, a space prefixed; BPE: BOS
    /// and EOS 11, BOS added only for Llama 3's pre-tokenizer). `path` names the file in
    /// errors, which name the key at fault.
    pub fn from_gguf(gguf: &Gguf<'_>, path: &str) -> Result<LlamaVocab> {
        let error = |message: String| Error::Tokenizer { path: path.into(), message };
        let model = match gguf.get(keys::MODEL) {
            Some(Value::String("llama")) => TokenizerModel::SentencePiece,
            Some(Value::String("gpt2")) => TokenizerModel::BytePairs,
            Some(Value::String(other)) => {
                return Err(error(format!(
                    "metadata '{}' is \"{other}\"; tessera tokenizes \"llama\" (SentencePiece) and \"gpt2\" \
                     (byte-level BPE) vocabularies",
                    keys::MODEL
                )))
            }
            Some(v) => {
                return Err(error(format!(
                    "metadata '{}' is of type {}; expected a string (\"llama\" or \"gpt2\")",
                    keys::MODEL,
                    v.value_type()
                )))
            }
            None => {
                return Err(error(format!(
                    "metadata '{}' is missing; expected \"llama\" or \"gpt2\" to know how to tokenize",
                    keys::MODEL
                )))
            }
        };
        let array = |key: &str| match gguf.get(key) {
            Some(Value::Array(a)) => Ok(Some(a)),
            Some(v) => Err(error(format!("metadata '{key}' is of type {}; expected an array", v.value_type()))),
            None => Ok(None),
        };
        let strings = |key: &str| -> Result<Option<Vec<String>>> {
            let Some(a) = array(key)? else { return Ok(None) };
            let s = a.strings().ok_or_else(|| {
                error(format!("metadata '{key}' is an array of {}; expected an array of strings", a.elem_type()))
            })?;
            Ok(Some(s.map(str::to_owned).collect()))
        };
        let required = |key: &str, what: &str| {
            error(format!("metadata '{key}' is missing; a \"{}\" vocabulary has {what}", model.name()))
        };
        let tokens = strings(keys::TOKENS)?.ok_or_else(|| required(keys::TOKENS, "its tokens"))?;
        let n = tokens.len();
        if n == 0 {
            return Err(error(format!("metadata '{}' is empty; expected at least one token", keys::TOKENS)));
        }
        let agree = |key: &str, len: usize| {
            if len == n {
                Ok(())
            } else {
                Err(error(format!(
                    "metadata '{key}' has {len} entries but '{}' has {n} tokens; expected one per token",
                    keys::TOKENS
                )))
            }
        };
        let scores = match array(keys::SCORES)? {
            Some(a) => {
                let scores: Vec<f32> = a.iter().map(|v| v.as_f32()).collect::<Option<_>>().ok_or_else(|| {
                    error(format!(
                        "metadata '{}' is an array of {}; expected an array of f32",
                        keys::SCORES,
                        a.elem_type()
                    ))
                })?;
                agree(keys::SCORES, scores.len())?;
                Some(scores)
            }
            None if model == TokenizerModel::SentencePiece => return Err(required(keys::SCORES, "a score per token")),
            None => None,
        };
        let types = match array(keys::TOKEN_TYPE)? {
            Some(a) => {
                let types: Vec<i32> = a
                    .iter()
                    .map(|v| v.as_integer().and_then(|t| i32::try_from(t).ok()))
                    .collect::<Option<_>>()
                    .ok_or_else(|| {
                        error(format!(
                            "metadata '{}' is an array of {}; expected an array of i32",
                            keys::TOKEN_TYPE,
                            a.elem_type()
                        ))
                    })?;
                agree(keys::TOKEN_TYPE, types.len())?;
                types
            }
            None => vec![token_type::NORMAL; n],
        };
        let merges = match strings(keys::MERGES)? {
            Some(m) => m,
            None if model == TokenizerModel::BytePairs => return Err(required(keys::MERGES, "its merges")),
            None => Vec::new(),
        };
        let pre = match gguf.get(keys::PRE) {
            None => None,
            Some(Value::String(s)) => Some(s.to_owned()),
            Some(v) => {
                return Err(error(format!(
                    "metadata '{}' is of type {}; expected a string naming the pre-tokenizer",
                    keys::PRE,
                    v.value_type()
                )))
            }
        };
        let id = |key: &str| -> Result<Option<u32>> {
            match gguf.get(key) {
                None => Ok(None),
                Some(v) => match v.as_unsigned().and_then(|i| u32::try_from(i).ok()) {
                    Some(i) if (i as usize) < n => Ok(Some(i)),
                    _ => Err(error(format!("metadata '{key}' is {v:?}; expected the id of one of its {n} tokens"))),
                },
            }
        };
        let flag = |key: &str| -> Result<Option<bool>> {
            match gguf.get(key) {
                None => Ok(None),
                Some(Value::Bool(b)) => Ok(Some(b)),
                Some(v) => Err(error(format!("metadata '{key}' is of type {}; expected a bool", v.value_type()))),
            }
        };
        // llama.cpp's defaults where the file says nothing.
        let default_id = |i: u32| ((i as usize) < n).then_some(i);
        let spm = model == TokenizerModel::SentencePiece;
        let (bos, eos, unk) = match model {
            TokenizerModel::SentencePiece => (default_id(1), default_id(2), default_id(0)),
            TokenizerModel::BytePairs => (default_id(11), default_id(11), None),
        };
        let llama3 = !spm && PreSplit::from_name(pre.as_deref()) == Some(PreSplit::Llama3);
        let parts = Parts {
            model,
            tokens,
            scores,
            types,
            merges,
            bos: id(keys::BOS)?.or(bos),
            eos: id(keys::EOS)?.or(eos),
            unk: id(keys::UNK)?.or(unk),
            pad: id(keys::PAD)?,
            add_bos: flag(keys::ADD_BOS)?.unwrap_or(spm || llama3),
            add_eos: flag(keys::ADD_EOS)?.unwrap_or(false),
            add_space_prefix: flag(keys::ADD_SPACE_PREFIX)?.unwrap_or(spm),
            pre,
        };
        LlamaVocab::build(parts, path)
    }

    /// A vocabulary from its parts: the lookups, and the BPE tokenizer of a "gpt2" one.
    fn build(mut p: Parts, path: &str) -> Result<LlamaVocab> {
        let error = |message: String| Error::Tokenizer { path: path.into(), message };
        for (i, t) in p.tokens.iter_mut().enumerate() {
            if t.is_empty() {
                *t = format!("[EMPTY_{i}]");
            }
        }
        let ids: HashMap<String, u32> = p.tokens.iter().enumerate().map(|(i, t)| (t.clone(), i as u32)).collect();
        if p.model == TokenizerModel::SentencePiece {
            for (i, (t, &ty)) in p.tokens.iter().zip(&p.types).enumerate() {
                if ty == token_type::BYTE && byte_of(t).is_none() {
                    return Err(error(format!(
                        "metadata '{}' says token {i} {t:?} is a byte token (type {}); expected one spelled \
                         like <0x0A>",
                        keys::TOKEN_TYPE,
                        token_type::BYTE
                    )));
                }
            }
        }
        let mut specials: Vec<u32> = (0..p.tokens.len() as u32)
            .filter(|&i| {
                matches!(p.types[i as usize], token_type::CONTROL | token_type::UNKNOWN | token_type::USER_DEFINED)
            })
            .collect();
        specials.sort_by_key(|&i| std::cmp::Reverse(p.tokens[i as usize].len()));
        let bpe = match p.model {
            TokenizerModel::SentencePiece => None,
            TokenizerModel::BytePairs => {
                let split = PreSplit::from_name(p.pre.as_deref()).ok_or_else(|| {
                    error(format!(
                        "metadata '{}' is {:?}, a pre-tokenizer tessera does not know; expected {PRE_NAMES}",
                        keys::PRE,
                        p.pre.as_deref().unwrap_or_default()
                    ))
                })?;
                Some(bpe_tokenizer(&ids, &p.merges, split).map_err(error)?)
            }
        };
        Ok(LlamaVocab { path: path.into(), parts: p, ids, specials, bpe })
    }

    /// A deterministic made-up SentencePiece vocabulary of exactly `n_tokens` tokens (at least
    /// [`MADE_UP_MIN_TOKENS`]): `<unk>`, `<s>` (BOS), `</s>` (EOS), the 256 byte tokens, U+2581
    /// and the printable ASCII characters, then common English words with and without a
    /// leading U+2581, then all lowercase letter pairs, triples, ... (each with and without
    /// U+2581). Every prefix of a piece comes before it, so each piece merges from two tokens;
    /// scores fall with the id, so earlier pieces merge first.
    pub fn made_up(n_tokens: usize) -> Result<LlamaVocab> {
        let error = |message: String| Error::Tokenizer { path: "made-up vocabulary".into(), message };
        if n_tokens < MADE_UP_MIN_TOKENS {
            return Err(error(format!(
                "{n_tokens} tokens are too few; a made-up vocabulary has at least {MADE_UP_MIN_TOKENS} (3 special, \
                 256 byte and 95 character tokens)"
            )));
        }
        let mut m = MadeUp { tokens: Vec::with_capacity(n_tokens), types: Vec::with_capacity(n_tokens), n_tokens };
        m.push("<unk>".into(), token_type::UNKNOWN);
        m.push("<s>".into(), token_type::CONTROL);
        m.push("</s>".into(), token_type::CONTROL);
        for b in 0..=255u8 {
            m.push(format!("<0x{b:02X}>"), token_type::BYTE);
        }
        m.push(SPACE.into(), token_type::NORMAL);
        for c in '!'..='~' {
            m.push(c.into(), token_type::NORMAL);
        }
        let mut seen: HashSet<String> = m.tokens.iter().cloned().collect();
        for word in COMMON_WORDS {
            m.insert_with_prefixes(&format!("{SPACE}{word}"), &mut seen);
            m.insert_with_prefixes(word, &mut seen);
        }
        // Letter strings of `len` letters, then U+2581 and `len - 1` letters.
        let mut len = 2u32;
        while !m.full() {
            for (letters, prefix) in [(len, ""), (len - 1, "\u{2581}")] {
                let count =
                    26u64.checked_pow(letters).ok_or_else(|| error(format!("{n_tokens} tokens are too many")))?;
                for k in 0..count {
                    if m.full() {
                        break;
                    }
                    m.insert_with_prefixes(&format!("{prefix}{}", letter_string(k, letters)), &mut seen);
                }
            }
            len += 1;
        }
        let scores = (0..m.tokens.len()).map(|i| -(i as f32)).collect();
        let parts = Parts {
            model: TokenizerModel::SentencePiece,
            pre: None,
            tokens: m.tokens,
            scores: Some(scores),
            types: m.types,
            merges: Vec::new(),
            bos: Some(1),
            eos: Some(2),
            unk: Some(0),
            pad: None,
            add_bos: true,
            add_eos: false,
            add_space_prefix: true,
        };
        LlamaVocab::build(parts, "made-up vocabulary")
    }

    /// Writes the vocabulary as llama.cpp's metadata (every key [`from_gguf`](Self::from_gguf)
    /// reads, special tokens and flags included).
    pub fn write_gguf(&self, w: &mut GgufWriter) {
        w.add_string(keys::MODEL, self.parts.model.name());
        if let Some(pre) = &self.parts.pre {
            w.add_string(keys::PRE, pre);
        }
        w.add_array(keys::TOKENS, &self.parts.tokens);
        if let Some(scores) = &self.parts.scores {
            w.add_array(keys::SCORES, scores);
        }
        w.add_array(keys::TOKEN_TYPE, &self.parts.types);
        if self.parts.model == TokenizerModel::BytePairs {
            w.add_array(keys::MERGES, &self.parts.merges);
        }
        for (key, id) in [
            (keys::BOS, self.parts.bos),
            (keys::EOS, self.parts.eos),
            (keys::UNK, self.parts.unk),
            (keys::PAD, self.parts.pad),
        ] {
            if let Some(id) = id {
                w.add_u32(key, id);
            }
        }
        w.add_bool(keys::ADD_BOS, self.parts.add_bos);
        w.add_bool(keys::ADD_EOS, self.parts.add_eos);
        w.add_bool(keys::ADD_SPACE_PREFIX, self.parts.add_space_prefix);
    }

    /// The ids of `text` as llama.cpp's `llama_tokenize` gives them with special tokens added
    /// and not parsed: BOS if the vocabulary adds it, the text's tokens, EOS if it adds it.
    /// Text that spells a control token (`</s>`) is plain text; a user-defined token's text is
    /// that token. The empty text is just BOS.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        self.tokenize(text, true, false)
    }

    /// The ids of `text` as llama.cpp's `llama_tokenize` gives them: BOS and EOS as the
    /// vocabulary says if `add_special`; text spelling a control or unknown token is that token
    /// if `parse_special` (llama.cpp's tools parse them), text spelling a user-defined token
    /// always is. Only a byte-level BPE tokenizer can fail.
    pub fn tokenize(&self, text: &str, add_special: bool, parse_special: bool) -> Result<Vec<u32>> {
        let mut out = Vec::new();
        if add_special && self.parts.add_bos {
            out.extend(self.parts.bos);
        }
        // SentencePiece prefixes a space to the text and to text after a special token.
        let mut after_special = true;
        for fragment in self.fragments(text, parse_special) {
            match fragment {
                Fragment::Token(id) => {
                    out.push(id);
                    after_special = true;
                }
                Fragment::Text(t) => {
                    match &self.bpe {
                        None => spm::tokenize(
                            &spm::normalize(t, self.parts.add_space_prefix && after_special),
                            self,
                            &mut out,
                        ),
                        Some(bpe) => {
                            let encoding = bpe.encode(t, false).map_err(|e| {
                                let shown: String = t.chars().take(60).collect();
                                let more = if shown.len() < t.len() { "..." } else { "" };
                                Error::Tokenizer {
                                    path: self.path.clone(),
                                    message: format!("cannot tokenize {shown:?}{more}: {e}"),
                                }
                            })?;
                            out.extend_from_slice(encoding.get_ids());
                        }
                    }
                    after_special = false;
                }
            }
        }
        if add_special && self.parts.add_eos {
            out.extend(self.parts.eos);
        }
        Ok(out)
    }

    /// `text` cut at the special tokens it spells (user-defined ones; control and unknown ones
    /// too if `parse_special`), longest tokens first, each at its leftmost occurrences.
    fn fragments<'t>(&self, text: &'t str, parse_special: bool) -> Vec<Fragment<'t>> {
        let mut fragments = if text.is_empty() { Vec::new() } else { vec![Fragment::Text(text)] };
        for &id in &self.specials {
            if !parse_special && self.parts.types[id as usize] != token_type::USER_DEFINED {
                continue;
            }
            let needle = self.parts.tokens[id as usize].as_str();
            let mut cut = Vec::with_capacity(fragments.len());
            for fragment in fragments {
                let Fragment::Text(mut rest) = fragment else {
                    cut.push(fragment);
                    continue;
                };
                while let Some(at) = rest.find(needle) {
                    if at > 0 {
                        cut.push(Fragment::Text(&rest[..at]));
                    }
                    cut.push(Fragment::Token(id));
                    rest = &rest[at + needle.len()..];
                }
                if !rest.is_empty() {
                    cut.push(Fragment::Text(rest));
                }
            }
            fragments = cut;
        }
        fragments
    }

    /// The bytes token `id` stands for in generated text, as llama.cpp's `token_to_piece`
    /// gives them for non-special output: SentencePiece tokens with U+2581 as a space, byte
    /// tokens (`<0x0A>`) as their byte, byte-level BPE tokens decoded to their bytes,
    /// user-defined tokens as spelled; control, unknown and unused tokens (and ids out of
    /// range) as nothing.
    pub fn piece(&self, id: u32) -> Vec<u8> {
        let (Some(text), Some(&ty)) = (self.parts.tokens.get(id as usize), self.parts.types.get(id as usize)) else {
            return Vec::new();
        };
        match (ty, self.parts.model) {
            (token_type::USER_DEFINED, _) => text.as_bytes().to_vec(),
            (token_type::NORMAL, TokenizerModel::SentencePiece) => text.replace(SPACE, " ").into_bytes(),
            (token_type::NORMAL, TokenizerModel::BytePairs) => byte_level_decode(text),
            (token_type::BYTE, TokenizerModel::SentencePiece) => byte_of(text).into_iter().collect(),
            _ => Vec::new(),
        }
    }

    /// The text `ids` stand for: their pieces one after the other, less the space a
    /// SentencePiece vocabulary prefixes (so `decode(encode(text)) == text` for plain text).
    pub fn decode(&self, ids: &[u32]) -> Vec<u8> {
        let mut out: Vec<u8> = ids.iter().flat_map(|&id| self.piece(id)).collect();
        if self.parts.model == TokenizerModel::SentencePiece
            && self.parts.add_space_prefix
            && out.first() == Some(&b' ')
        {
            out.remove(0);
        }
        out
    }

    /// Which tokenizer the vocabulary is for.
    pub fn model(&self) -> TokenizerModel {
        self.parts.model
    }

    /// The number of tokens.
    pub fn len(&self) -> usize {
        self.parts.tokens.len()
    }

    /// Whether it has no tokens (a vocabulary read or made up always has some).
    pub fn is_empty(&self) -> bool {
        self.parts.tokens.is_empty()
    }

    /// Token `id` as the vocabulary spells it.
    pub fn token(&self, id: u32) -> Option<&str> {
        self.parts.tokens.get(id as usize).map(String::as_str)
    }

    /// The id of the token spelled `text` (of tokens spelled alike, the last, as in llama.cpp).
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.ids.get(text).copied()
    }

    /// llama.cpp's type of token `id` ([`token_type`]).
    pub fn token_type(&self, id: u32) -> Option<i32> {
        self.parts.types.get(id as usize).copied()
    }

    /// The beginning-of-sequence token.
    pub fn bos(&self) -> Option<u32> {
        self.parts.bos
    }

    /// The end-of-sequence token.
    pub fn eos(&self) -> Option<u32> {
        self.parts.eos
    }

    /// The unknown token.
    pub fn unk(&self) -> Option<u32> {
        self.parts.unk
    }

    /// The padding token.
    pub fn pad(&self) -> Option<u32> {
        self.parts.pad
    }

    /// Whether [`encode`](Self::encode) starts with BOS.
    pub fn add_bos(&self) -> bool {
        self.parts.add_bos
    }

    /// Whether [`encode`](Self::encode) ends with EOS.
    pub fn add_eos(&self) -> bool {
        self.parts.add_eos
    }

    /// Whether SentencePiece prefixes a space to the text.
    pub fn add_space_prefix(&self) -> bool {
        self.parts.add_space_prefix
    }
}

impl SpmVocab for LlamaVocab {
    fn token_id(&self, text: &str) -> Option<u32> {
        self.ids.get(text).copied()
    }

    fn score(&self, id: u32) -> f32 {
        self.parts.scores.as_ref().and_then(|s| s.get(id as usize)).copied().unwrap_or(0.0)
    }

    fn unknown(&self) -> Option<u32> {
        self.parts.unk
    }
}

/// The byte a SentencePiece byte token spelled `<0xAB>` stands for.
fn byte_of(token: &str) -> Option<u8> {
    let hex = token.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

/// The tokenizer of a byte-level BPE vocabulary: its merges (split at the first space after
/// the first byte, as llama.cpp splits them; the first of duplicates ranks), and the words
/// `split` cuts the text into, spelled in GPT-2's byte alphabet.
fn bpe_tokenizer(
    ids: &HashMap<String, u32>,
    merges: &[String],
    split: PreSplit,
) -> std::result::Result<tokenizers::Tokenizer, String> {
    let mut seen = HashSet::new();
    let mut pairs = Vec::with_capacity(merges.len());
    for (i, merge) in merges.iter().enumerate() {
        // llama.cpp ranks an entry without a space as a pair of empty strings, which no
        // symbols ever form: it changes nothing.
        let Some(space) = merge.bytes().skip(1).position(|b| b == b' ').map(|p| p + 1) else { continue };
        let (a, b) = (&merge[..space], &merge[space + 1..]);
        if !seen.insert((a, b)) {
            continue;
        }
        for part in [a, b, &format!("{a}{b}")] {
            if !ids.contains_key(part) {
                return Err(format!(
                    "metadata '{}' entry {i} {merge:?} names {part:?}, which is no token; expected merges of \
                     tokens into tokens",
                    keys::MERGES
                ));
            }
        }
        pairs.push((a.to_owned(), b.to_owned()));
    }
    let vocab: bpe::Vocab = ids.iter().map(|(t, &id)| (t.clone(), id)).collect();
    let model = BPE::builder()
        .vocab_and_merges(vocab, pairs)
        .ignore_merges(split == PreSplit::Llama3)
        .build()
        .map_err(|e| format!("metadata '{}' makes no BPE tokenizer: {e}", keys::MERGES))?;
    let mut steps = Vec::new();
    for pattern in split.patterns() {
        let split = Split::new(SplitPattern::Regex((*pattern).into()), SplitDelimiterBehavior::Isolated, false)
            .map_err(|e| format!("the pre-tokenizer pattern {pattern:?} does not compile: {e}"))?;
        steps.push(PreTokenizerWrapper::Split(split));
    }
    steps.push(PreTokenizerWrapper::ByteLevel(ByteLevel::new(false, true, false)));
    let mut tokenizer = tokenizers::Tokenizer::new(model);
    tokenizer.with_pre_tokenizer(Some(PreTokenizerWrapper::Sequence(Sequence::new(steps))));
    Ok(tokenizer)
}

/// GPT-2's byte alphabet: byte `b` is spelled `char(b)` if printable (`!`..`~`, `¡`..`¬`,
/// `®`..`ÿ`), else `char(256 + n)` for the n-th other byte.
fn byte_level_char(b: u8) -> char {
    let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    if printable(b) {
        return char::from(b);
    }
    let n = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(256 + n).unwrap_or(char::REPLACEMENT_CHARACTER)
}

/// The bytes a byte-level BPE token spells; a character outside GPT-2's byte alphabet becomes
/// `[UNK_BYTE_0x<its UTF-8 in hex><token>]`, as llama.cpp writes it.
fn byte_level_decode(token: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(token.len());
    for c in token.chars() {
        match (0..=255u8).find(|&b| byte_level_char(b) == c) {
            Some(b) => out.push(b),
            None => {
                out.extend_from_slice(b"[UNK_BYTE_0x");
                for b in c.encode_utf8(&mut [0; 4]).bytes() {
                    out.extend_from_slice(format!("{b:02x}").as_bytes());
                }
                out.extend_from_slice(token.as_bytes());
                out.push(b']');
            }
        }
    }
    out
}

/// The lowercase string of `len` letters that is number `k` in alphabetical order.
fn letter_string(mut k: u64, len: u32) -> String {
    let mut s = vec![b'a'; len as usize];
    for c in s.iter_mut().rev() {
        *c = b'a' + (k % 26) as u8;
        k /= 26;
    }
    String::from_utf8(s).unwrap_or_default()
}

/// A made-up vocabulary being filled.
struct MadeUp {
    tokens: Vec<String>,
    types: Vec<i32>,
    n_tokens: usize,
}

impl MadeUp {
    fn full(&self) -> bool {
        self.tokens.len() >= self.n_tokens
    }

    fn push(&mut self, token: String, ty: i32) {
        self.tokens.push(token);
        self.types.push(ty);
    }

    /// Adds `piece` and, before it, each of its prefixes of two characters or more that is not
    /// yet a token, while there is room.
    fn insert_with_prefixes(&mut self, piece: &str, seen: &mut HashSet<String>) {
        let ends = piece.char_indices().map(|(i, c)| i + c.len_utf8()).skip(1);
        for end in ends {
            if self.full() {
                return;
            }
            let prefix = &piece[..end];
            if seen.insert(prefix.to_owned()) {
                self.push(prefix.to_owned(), token_type::NORMAL);
            }
        }
    }
}

/// Common English words, most common first, for [`LlamaVocab::made_up`].
const COMMON_WORDS: &[&str] = &[
    "the", "of", "and", "to", "a", "in", "is", "it", "you", "that", "he", "was", "for", "on", "are", "with", "as", "I",
    "his", "they", "be", "at", "one", "have", "this", "from", "or", "had", "by", "not", "word", "but", "what", "some",
    "we", "can", "out", "other", "were", "all", "there", "when", "up", "use", "your", "how", "said", "an", "each",
    "she", "which", "do", "their", "time", "if", "will", "way", "about", "many", "then", "them", "write", "would",
    "like", "so", "these", "her", "long", "make", "thing", "see", "him", "two", "has", "look", "more", "day", "could",
    "go", "come", "did", "number", "sound", "no", "most", "people", "my", "over", "know", "water", "than", "call",
    "first", "who", "may", "down", "side", "been", "now", "find", "any", "new", "work", "part", "take", "get", "place",
    "made", "live", "where", "after", "back", "little", "only", "round", "man", "year", "came", "show", "every",
    "good", "me", "give", "our", "under", "name", "very", "through", "just", "form", "sentence", "great", "think",
    "say", "help", "low", "line", "differ", "turn", "cause", "much", "mean", "before", "move", "right", "boy", "old",
    "too", "same", "tell", "does", "set", "three", "want", "air", "well", "also", "play", "small", "end", "put",
    "home", "read", "hand", "port", "large", "spell", "add", "even", "land", "here", "must", "big", "high", "such",
    "follow", "act", "why", "ask", "men", "change", "went", "light", "kind", "off", "need", "house", "picture", "try",
    "us", "again", "animal", "point", "mother", "world", "near", "build", "self", "earth", "father", "head", "stand",
    "own", "page", "should", "country", "found", "answer", "school", "grow", "study", "still", "learn", "plant",
    "cover", "food", "sun", "four", "between", "state", "keep", "eye", "never", "last", "let", "thought", "city",
    "tree", "cross", "farm", "hard", "start", "might", "story", "saw", "far", "sea", "draw", "left", "late", "run",
    "while", "press", "close", "night", "real", "life", "few", "north", "The", "It", "In", "This", "He", "She", "We",
    "They", "A", "Hello", "world", "ing", "ed", "er", "ly", "tion", "es", "'s", "n't", ".", ",", "!", "?",
];

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn read_back(w: &GgufWriter) -> Result<LlamaVocab> {
        let bytes = w.to_bytes();
        LlamaVocab::from_gguf(&Gguf::parse(&bytes).unwrap(), "v.gguf")
    }

    /// A byte-level BPE vocabulary: the 256 byte characters, then "Ġt", "he", "Ġthe", "Ġa",
    /// "ll", "Ġall"; and its merges.
    fn tiny_bpe(pre: &str) -> GgufWriter {
        let mut tokens: Vec<String> = (0..=255u8).map(|b| byte_level_char(b).to_string()).collect();
        for t in ["Ġt", "he", "Ġthe", "Ġa", "ll", "Ġall", "<|end|>", "<tool>"] {
            tokens.push(t.into());
        }
        let mut types = vec![token_type::NORMAL; 262];
        types.extend([token_type::CONTROL, token_type::USER_DEFINED]);
        let merges = ["Ġ t", "h e", "Ġt he", "Ġ a", "l l", "Ġa ll"];
        let mut w = GgufWriter::new();
        w.add_string(keys::MODEL, "gpt2");
        w.add_string(keys::PRE, pre);
        w.add_array(keys::TOKENS, &tokens);
        w.add_array(keys::TOKEN_TYPE, &types);
        w.add_array(keys::MERGES, &merges);
        w.add_u32(keys::BOS, 262);
        w.add_u32(keys::EOS, 262);
        w
    }

    #[test]
    fn gpt2_byte_alphabet_is_a_bijection() {
        let chars: HashSet<char> = (0..=255u8).map(byte_level_char).collect();
        assert_eq!(chars.len(), 256);
        assert_eq!(byte_level_char(b' '), 'Ġ');
        assert_eq!(byte_level_char(b'\n'), 'Ċ');
        assert_eq!(byte_level_char(b'a'), 'a');
        assert_eq!(byte_level_char(0xAD), 'Ń');
        assert_eq!(byte_level_decode("Ġthe"), b" the");
    }

    #[test]
    fn byte_level_bpe_merges_by_rank_within_words() {
        let v = read_back(&tiny_bpe("gpt-2")).unwrap();
        assert_eq!(v.model(), TokenizerModel::BytePairs);
        assert!(!v.add_bos(), "GPT-2 vocabularies add no BOS unless they say so");
        let id = |t: &str| v.token_id(t).unwrap();
        let b = |c: char| u32::from(c as u8);
        assert_eq!(v.encode("the all").unwrap(), [b('t'), id("he"), id("Ġall")]);
        assert_eq!(v.encode(" the tall").unwrap(), [id("Ġthe"), id("Ġt"), b('a'), id("ll")]);
        // "é" is two bytes, each its own byte character.
        assert_eq!(v.encode("é").unwrap(), [0xC3, 0xA9]);
        assert_eq!(v.decode(&v.encode("é the\n").unwrap()), "é the\n".as_bytes());
        // User-defined tokens are cut out even when special tokens are not parsed.
        assert_eq!(v.encode("a<tool>b").unwrap(), [b('a'), id("<tool>"), b('b')]);
        assert_eq!(v.encode("<|end|>").unwrap().len(), 7);
        assert_eq!(v.tokenize("<|end|>", false, true).unwrap(), [id("<|end|>")]);
        assert_eq!(v.piece(id("Ġthe")), b" the");
        assert_eq!(v.piece(id("<|end|>")), b"");
        assert_eq!(v.piece(id("<tool>")), b"<tool>");
    }

    #[test]
    fn llama3_pre_tokenizer_adds_bos_and_keeps_whole_word_tokens() {
        let v = read_back(&tiny_bpe("llama-bpe")).unwrap();
        assert!(v.add_bos());
        let id = |t: &str| v.token_id(t).unwrap();
        assert_eq!(v.encode(" the").unwrap(), [262, id("Ġthe")]);
        assert_eq!(v.encode("12345").unwrap(), [262, 49, 50, 51, 52, 53]);
    }

    #[test]
    fn unknown_pre_tokenizers_and_models_are_errors_naming_the_key() {
        let err = read_back(&tiny_bpe("qwen2")).unwrap_err();
        assert!(err.to_string().contains("'tokenizer.ggml.pre' is \"qwen2\""), "{err}");
        let mut w = tiny_bpe("gpt-2");
        w.add_string(keys::MODEL, "bert");
        let err = read_back(&w).unwrap_err();
        assert!(err.to_string().contains("'tokenizer.ggml.model' is \"bert\""), "{err}");
        assert!(err.to_string().contains("\"llama\""), "{err}");
    }

    #[test]
    fn made_up_vocabulary_has_the_asked_size_and_layout() {
        assert!(LlamaVocab::made_up(MADE_UP_MIN_TOKENS - 1).is_err());
        for n in [MADE_UP_MIN_TOKENS, 1000, 32000] {
            let v = LlamaVocab::made_up(n).unwrap();
            assert_eq!(v.len(), n);
            assert_eq!((v.bos(), v.eos(), v.unk()), (Some(1), Some(2), Some(0)));
            assert_eq!(v.token(3), Some("<0x00>"));
            assert_eq!(v.token(3 + 10), Some("<0x0A>"));
            assert_eq!(v.token(259), Some("\u{2581}"));
            let unique: HashSet<&str> = (0..n as u32).map(|i| v.token(i).unwrap()).collect();
            assert_eq!(unique.len(), n, "tokens are distinct");
        }
        let a = LlamaVocab::made_up(5000).unwrap();
        let b = LlamaVocab::made_up(5000).unwrap();
        assert_eq!(a.parts.tokens, b.parts.tokens);
        assert_eq!(a.token(354), Some("\u{2581}t"));
    }

    #[test]
    fn pieces_are_the_bytes_tokens_stand_for() {
        let v = LlamaVocab::made_up(1000).unwrap();
        assert_eq!(v.piece(0), b"");
        assert_eq!(v.piece(1), b"");
        assert_eq!(v.piece(3 + 0x0A), b"\n");
        assert_eq!(v.piece(3 + 0xC3), [0xC3]);
        assert_eq!(v.piece(v.token_id("\u{2581}the").unwrap()), b" the");
        assert_eq!(v.piece(99_999), b"");
        assert_eq!(v.decode(&[1, v.token_id("\u{2581}the").unwrap(), 2]), b"the");
    }

    #[test]
    fn a_vocabulary_written_as_metadata_reads_back_the_same() {
        let v = LlamaVocab::made_up(600).unwrap();
        let mut w = GgufWriter::new();
        v.write_gguf(&mut w);
        let back = read_back(&w).unwrap();
        assert_eq!(back.parts.tokens, v.parts.tokens);
        assert_eq!(back.parts.scores, v.parts.scores);
        assert_eq!(back.parts.types, v.parts.types);
        assert_eq!(
            (back.parts.bos, back.parts.eos, back.parts.unk, back.parts.pad),
            (v.parts.bos, v.parts.eos, v.parts.unk, v.parts.pad)
        );
        assert_eq!((back.parts.add_bos, back.parts.add_eos, back.parts.add_space_prefix), (true, false, true));
        assert_eq!(back.encode("the world").unwrap(), v.encode("the world").unwrap());

        let bpe = read_back(&tiny_bpe("llama-bpe")).unwrap();
        let mut w = GgufWriter::new();
        bpe.write_gguf(&mut w);
        let back = read_back(&w).unwrap();
        assert_eq!((back.parts.merges.len(), back.parts.pre.as_deref()), (6, Some("llama-bpe")));
        assert_eq!(back.encode(" the all").unwrap(), bpe.encode(" the all").unwrap());
    }

    #[test]
    fn wrong_or_missing_keys_are_errors_naming_them() {
        let v = LlamaVocab::made_up(400).unwrap();
        let check = |edit: &dyn Fn(&mut GgufWriter), expected: &str| {
            let mut w = GgufWriter::new();
            v.write_gguf(&mut w);
            edit(&mut w);
            let err = read_back(&w).unwrap_err();
            assert!(matches!(&err, Error::Tokenizer { path, .. } if path == "v.gguf"), "{err:?}");
            assert!(err.to_string().contains(expected), "{err}");
        };
        check(
            &|w| {
                w.add_u32(keys::BOS, 400);
            },
            "'tokenizer.ggml.bos_token_id' is U32(400)",
        );
        check(
            &|w| {
                w.add_array(keys::SCORES, &[0.0f32]);
            },
            "'tokenizer.ggml.scores' has 1 entries",
        );
        check(
            &|w| {
                w.add_array(keys::SCORES, &[0i32; 400]);
            },
            "'tokenizer.ggml.scores' is an array of i32",
        );
        check(
            &|w| {
                w.add_array(keys::TOKEN_TYPE, &[1i32; 3]);
            },
            "'tokenizer.ggml.token_type' has 3 entries",
        );
        check(
            &|w| {
                w.add_u32(keys::ADD_BOS, 1);
            },
            "'tokenizer.ggml.add_bos_token' is of type u32",
        );
        check(
            &|w| {
                w.add_array(keys::TOKENS, &[1u8]);
            },
            "'tokenizer.ggml.tokens' is an array of u8",
        );
        check(
            &|w| {
                w.add_string(keys::MODEL, "t5");
            },
            "'tokenizer.ggml.model' is \"t5\"",
        );
        check(
            &|w| {
                let mut types = v.parts.types.clone();
                types[300] = token_type::BYTE;
                w.add_array(keys::TOKEN_TYPE, &types);
            },
            "token 300",
        );
        let mut w = GgufWriter::new();
        w.add_string(keys::MODEL, "llama");
        w.add_array(keys::TOKENS, &["a", "b"]);
        let err = read_back(&w).unwrap_err();
        assert!(err.to_string().contains("'tokenizer.ggml.scores' is missing"), "{err}");
        let mut w = tiny_bpe("gpt-2");
        w.add_array(keys::MERGES, &["Ġ t", "x y"]);
        let err = read_back(&w).unwrap_err();
        assert!(err.to_string().contains("'tokenizer.ggml.merges' entry 1 \"x y\""), "{err}");
        assert!(read_back(&GgufWriter::new()).unwrap_err().to_string().contains("'tokenizer.ggml.model' is missing"));
    }

    #[test]
    fn missing_special_tokens_and_flags_take_llama_cpp_defaults() {
        let mut w = GgufWriter::new();
        w.add_string(keys::MODEL, "llama");
        w.add_array(keys::TOKENS, &["<unk>", "<s>", "</s>", "\u{2581}a", "\u{2581}", "a"]);
        w.add_array(keys::SCORES, &[0.0f32, 0.0, 0.0, -1.0, -2.0, -3.0]);
        let v = read_back(&w).unwrap();
        assert_eq!((v.bos(), v.eos(), v.unk(), v.pad()), (Some(1), Some(2), Some(0), None));
        assert!(v.add_bos() && !v.add_eos() && v.add_space_prefix());
        assert_eq!(v.encode("a a").unwrap(), [1, 3, 3]);
        // No byte tokens: a character that is no token becomes the unknown token per byte.
        assert_eq!(v.encode("é").unwrap(), [1, 4, 0, 0]);
        w.add_bool(keys::ADD_SPACE_PREFIX, false);
        w.add_bool(keys::ADD_EOS, true);
        let v = read_back(&w).unwrap();
        assert_eq!(v.encode("a a").unwrap(), [1, 5, 3, 2]);
    }

    #[test]
    fn text_after_a_user_defined_token_gets_a_space_prefix_again() {
        let mut w = GgufWriter::new();
        LlamaVocab::made_up(500).unwrap().write_gguf(&mut w);
        let v = read_back(&w).unwrap();
        let mut tokens = v.parts.tokens.clone();
        let mut types = v.parts.types.clone();
        tokens.push("<tool>".into());
        types.push(token_type::USER_DEFINED);
        let mut scores = v.parts.scores.clone().unwrap();
        scores.push(0.0);
        w.add_array(keys::TOKENS, &tokens);
        w.add_array(keys::TOKEN_TYPE, &types);
        w.add_array(keys::SCORES, &scores);
        let v = read_back(&w).unwrap();
        let id = |t: &str| v.token_id(t).unwrap();
        assert_eq!(v.encode("a<tool>a").unwrap(), [1, id("\u{2581}a"), 500, id("\u{2581}a")]);
        assert_eq!(v.encode("</s>").unwrap()[1..3], [id("\u{2581}"), id("<")]);
        assert_eq!(v.tokenize("</s>", false, true).unwrap(), [2]);
    }
}
