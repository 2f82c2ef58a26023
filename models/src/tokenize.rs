//! Text to token ids with a Hugging Face `tokenizer.json` (WordPiece for BERT models), or
//! with the vocabulary a GGUF file holds in its metadata.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::gguf_vocab::Vocab;

/// sentence-transformers truncates all-MiniLM-L6-v2 inputs at 256 word pieces.
pub const MAX_TOKENS: usize = 256;

/// One text's token ids.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Encoded {
    pub ids: Vec<u32>,
    /// The text had more tokens than the tokenizer's maximum; `ids` holds the first ones.
    pub truncated: bool,
}

/// A model's tokenizer: special tokens added, no padding, sequences truncated at
/// `max_tokens` (special tokens included).
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    path: PathBuf,
    max_tokens: usize,
}

impl Tokenizer {
    /// Loads a `tokenizer.json`.
    pub fn from_file(path: impl AsRef<Path>, max_tokens: usize) -> Result<Tokenizer> {
        let path = path.as_ref();
        let error = |message: String| Error::Tokenizer { path: path.display().to_string(), message };
        let inner = tokenizers::Tokenizer::from_file(path).map_err(|e| error(e.to_string()))?;
        Tokenizer::new(inner, path, max_tokens)
    }

    /// The tokenizer of a GGUF file's vocabulary (see [`Vocab::tokenizer_json`]); `path`
    /// names the file.
    pub fn from_vocab(vocab: &Vocab, path: impl AsRef<Path>, max_tokens: usize) -> Result<Tokenizer> {
        let path = path.as_ref();
        let error = |message: String| Error::Tokenizer { path: path.display().to_string(), message };
        let inner: tokenizers::Tokenizer =
            serde_json::from_value(vocab.tokenizer_json()).map_err(|e| error(e.to_string()))?;
        Tokenizer::new(inner, path, max_tokens)
    }

    /// `inner` without padding, truncating at `max_tokens`.
    fn new(mut inner: tokenizers::Tokenizer, path: &Path, max_tokens: usize) -> Result<Tokenizer> {
        let error = |message: String| Error::Tokenizer { path: path.display().to_string(), message };
        if max_tokens == 0 {
            return Err(error("a maximum of 0 tokens leaves no room for any; expected at least 1".into()));
        }
        inner.with_padding(None);
        inner
            .with_truncation(Some(tokenizers::TruncationParams { max_length: max_tokens, ..Default::default() }))
            .map_err(|e| error(e.to_string()))?;
        Ok(Tokenizer { inner, path: path.to_path_buf(), max_tokens })
    }

    /// The file it was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The longest sequence it produces.
    pub fn max_tokens(&self) -> usize {
        self.max_tokens
    }

    /// The token ids of each text (truncated at [`max_tokens`](Self::max_tokens)).
    pub fn encode(&self, texts: &[&str]) -> Result<Vec<Vec<u32>>> {
        Ok(self.encode_each(texts)?.into_iter().map(|e| e.ids).collect())
    }

    /// The token ids of each text, and whether it had to be truncated to fit.
    pub fn encode_each(&self, texts: &[&str]) -> Result<Vec<Encoded>> {
        texts
            .iter()
            .map(|text| {
                let encoding = self.inner.encode(*text, true).map_err(|e| {
                    let shown: String = text.chars().take(60).collect();
                    let more = if shown.len() < text.len() { "..." } else { "" };
                    Error::Tokenizer {
                        path: self.path.display().to_string(),
                        message: format!("cannot tokenize {shown:?}{more}: {e}"),
                    }
                })?;
                let truncated = !encoding.get_overflowing().is_empty();
                Ok(Encoded { ids: encoding.get_ids().to_vec(), truncated })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn tiny(max_tokens: usize) -> Tokenizer {
        let dir = crate::test_model::temp_dir("tokenizer");
        let path = dir.join("tokenizer.json");
        std::fs::write(&path, crate::test_model::TOKENIZER_JSON).unwrap();
        let t = Tokenizer::from_file(&path, max_tokens).unwrap();
        std::fs::remove_dir_all(&dir).ok();
        t
    }

    #[test]
    fn encodes_with_special_tokens_and_truncates() {
        let ids = tiny(MAX_TOKENS).encode(&["A sentence.", "Another one!"]).unwrap();
        assert_eq!(ids, [vec![2, 4, 5, 6, 3], vec![2, 7, 8, 9, 1, 3]]);
        let ids = tiny(4).encode(&["A sentence."]).unwrap();
        assert_eq!(ids, [vec![2, 4, 5, 3]]);
    }

    #[test]
    fn truncated_texts_are_marked_as_truncated() {
        let each = tiny(4).encode_each(&["A sentence.", "A"]).unwrap();
        assert_eq!(each[0], Encoded { ids: vec![2, 4, 5, 3], truncated: true });
        assert_eq!(each[1], Encoded { ids: vec![2, 4, 3], truncated: false });
    }

    #[test]
    fn a_missing_or_broken_file_is_a_tokenizer_error() {
        let err = Tokenizer::from_file("no/such/tokenizer.json", MAX_TOKENS).err().unwrap();
        assert!(matches!(&err, Error::Tokenizer { path, .. } if path == "no/such/tokenizer.json"), "{err:?}");
        assert!(err.to_string().starts_with("tokenizer no/such/tokenizer.json: "), "{err}");
        let dir = crate::test_model::temp_dir("bad-tokenizer");
        let path = dir.join("tokenizer.json");
        std::fs::write(&path, "{}").unwrap();
        assert!(matches!(Tokenizer::from_file(&path, MAX_TOKENS), Err(Error::Tokenizer { .. })));
        std::fs::remove_dir_all(&dir).ok();
    }
}
