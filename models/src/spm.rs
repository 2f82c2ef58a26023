//! SentencePiece tokenization as llama.cpp does it for vocabularies of model "llama": text is
//! normalized (an optional leading space, every space spelled U+2581), split into characters,
//! and adjacent symbols are merged, best-scoring pair first, while their concatenation is a
//! token. A character that is no token becomes its UTF-8 bytes' byte tokens (`<0x0A>`).
//!
//! Ties between pairs of equal score go to the leftmost pair. A merged symbol is always a token
//! (it was merged because its text is one), so only single characters fall back to bytes.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// llama.cpp's spelling of a space.
pub const SPACE: char = '\u{2581}';

/// The lookups SentencePiece tokenization needs of a vocabulary.
pub trait SpmVocab {
    /// The id of the token spelled `text`.
    fn token_id(&self, text: &str) -> Option<u32>;
    /// The score of token `id`: of two mergeable pairs, the one whose token scores higher
    /// merges first.
    fn score(&self, id: u32) -> f32;
    /// The token for bytes that have no byte token.
    fn unknown(&self) -> Option<u32>;
}

/// `text` as the tokenizer sees it: a space before it if `add_space_prefix`, then every
/// space (U+0020 only) replaced by U+2581.
pub fn normalize(text: &str, add_space_prefix: bool) -> String {
    let mut out = String::with_capacity(text.len() + 3);
    if add_space_prefix {
        out.push(SPACE);
    }
    for c in text.chars() {
        out.push(if c == ' ' { SPACE } else { c });
    }
    out
}

/// One symbol of the text being merged: a byte range, linked to its neighbours.
#[derive(Clone, Copy, Debug)]
struct Symbol {
    start: usize,
    /// Bytes; 0 once merged into the symbol on its left.
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

/// Two adjacent symbols whose concatenation (`size` bytes) is a token of `score`.
#[derive(Debug)]
struct Bigram {
    score: f32,
    left: usize,
    right: usize,
    size: usize,
}

/// Highest score first; of equal scores, the leftmost.
impl Ord for Bigram {
    fn cmp(&self, other: &Self) -> Ordering {
        self.score.partial_cmp(&other.score).unwrap_or(Ordering::Equal).then_with(|| other.left.cmp(&self.left))
    }
}

impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Bigram {}

/// Appends the tokens of `normalized` (see [`normalize`]) to `out`.
pub fn tokenize(normalized: &str, vocab: &impl SpmVocab, out: &mut Vec<u32>) {
    let n = normalized.chars().count();
    let mut symbols: Vec<Symbol> = normalized
        .char_indices()
        .enumerate()
        .map(|(i, (start, c))| Symbol {
            start,
            len: c.len_utf8(),
            prev: i.checked_sub(1),
            next: (i + 1 < n).then_some(i + 1),
        })
        .collect();
    let mut queue = BinaryHeap::new();
    for right in 1..symbols.len() {
        push_bigram(normalized, &symbols, right - 1, right, vocab, &mut queue);
    }
    while let Some(bigram) = queue.pop() {
        let (left, right) = (symbols[bigram.left], symbols[bigram.right]);
        // Stale: one of the two was merged into another symbol since the pair was queued.
        if left.len == 0 || right.len == 0 || left.len + right.len != bigram.size {
            continue;
        }
        symbols[bigram.left].len += right.len;
        symbols[bigram.left].next = right.next;
        symbols[bigram.right].len = 0;
        if let Some(next) = right.next {
            symbols[next].prev = Some(bigram.left);
        }
        if let Some(prev) = left.prev {
            push_bigram(normalized, &symbols, prev, bigram.left, vocab, &mut queue);
        }
        if let Some(next) = right.next {
            push_bigram(normalized, &symbols, bigram.left, next, vocab, &mut queue);
        }
    }
    // The first symbol is never merged into another, so the chain starts there.
    let mut at = (!symbols.is_empty()).then_some(0);
    while let Some(i) = at {
        let s = symbols[i];
        let text = &normalized[s.start..s.start + s.len];
        match vocab.token_id(text) {
            Some(id) => out.push(id),
            None => out.extend(text.bytes().filter_map(|b| byte_token(vocab, b))),
        }
        at = s.next;
    }
}

/// Queues the pair `left`, `right` if their concatenation is a token.
fn push_bigram(
    text: &str,
    symbols: &[Symbol],
    left: usize,
    right: usize,
    vocab: &impl SpmVocab,
    queue: &mut BinaryHeap<Bigram>,
) {
    let (l, r) = (symbols[left], symbols[right]);
    let size = l.len + r.len;
    if let Some(id) = vocab.token_id(&text[l.start..l.start + size]) {
        queue.push(Bigram { score: vocab.score(id), left, right, size });
    }
}

/// The token of byte `b`: its byte token `<0xAB>`, else the token spelled as that one
/// (ASCII) character, else the unknown token.
fn byte_token(vocab: &impl SpmVocab, b: u8) -> Option<u32> {
    vocab
        .token_id(&format!("<0x{b:02X}>"))
        .or_else(|| if b.is_ascii() { vocab.token_id(char::from(b).encode_utf8(&mut [0; 4])) } else { None })
        .or_else(|| vocab.unknown())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::collections::HashMap;

    use super::*;
    use crate::llama_vocab::LlamaVocab;

    /// A hand-made vocabulary: `(token, score)` by id; id 0 is the unknown token.
    struct Tiny(Vec<(&'static str, f32)>);

    impl SpmVocab for Tiny {
        fn token_id(&self, text: &str) -> Option<u32> {
            self.0.iter().position(|(t, _)| *t == text).map(|i| i as u32)
        }
        fn score(&self, id: u32) -> f32 {
            self.0[id as usize].1
        }
        fn unknown(&self) -> Option<u32> {
            Some(0)
        }
    }

    fn ids(vocab: &impl SpmVocab, text: &str) -> Vec<u32> {
        let mut out = Vec::new();
        tokenize(text, vocab, &mut out);
        out
    }

    fn made_up() -> LlamaVocab {
        LlamaVocab::made_up(2000).unwrap()
    }

    fn round_trip(v: &LlamaVocab, text: &str) -> Vec<u32> {
        let ids = v.encode(text).unwrap();
        assert_eq!(ids.first(), Some(&1), "{text:?} starts with BOS");
        assert_eq!(String::from_utf8(v.decode(&ids)).unwrap(), text, "{text:?} -> {ids:?}");
        ids
    }

    #[test]
    fn normalizing_prefixes_a_space_and_spells_spaces_as_u2581() {
        assert_eq!(normalize("a b  c", true), "\u{2581}a\u{2581}b\u{2581}\u{2581}c");
        assert_eq!(normalize(" a\tb\n", false), "\u{2581}a\tb\n");
        assert_eq!(normalize("", true), "\u{2581}");
        assert_eq!(normalize("", false), "");
    }

    #[test]
    fn the_best_scoring_pair_merges_first_not_the_leftmost() {
        // Left to right would give "ab" + "c"; "bc" scores higher, so "a" + "bc".
        let v = Tiny(vec![("<unk>", 0.0), ("a", -1.0), ("b", -1.0), ("c", -1.0), ("ab", -5.0), ("bc", -2.0)]);
        assert_eq!(ids(&v, "abc"), [1, 5]);
        // With the scores swapped, "ab" wins.
        let v = Tiny(vec![("<unk>", 0.0), ("a", -1.0), ("b", -1.0), ("c", -1.0), ("ab", -2.0), ("bc", -5.0)]);
        assert_eq!(ids(&v, "abc"), [4, 3]);
    }

    #[test]
    fn merges_continue_with_the_new_neighbours() {
        // "bc" first, then "a"+"bc" = "abc" although "ab" scores higher than "abc".
        let v = Tiny(vec![
            ("<unk>", 0.0),
            ("a", -1.0),
            ("b", -1.0),
            ("c", -1.0),
            ("bc", -2.0),
            ("ab", -3.0),
            ("abc", -4.0),
        ]);
        assert_eq!(ids(&v, "abc"), [6]);
        assert_eq!(ids(&v, "abcabc"), [6, 6]);
    }

    #[test]
    fn ties_go_to_the_leftmost_pair() {
        // "aaa": "a"+"a" at 0 and at 1 score alike; the left pair merges, leaving "aa" + "a".
        let v = Tiny(vec![("<unk>", 0.0), ("a", -1.0), ("aa", -2.0)]);
        assert_eq!(ids(&v, "aaa"), [2, 1]);
        // Two different tokens of equal score: "xy" (left) wins over "yz".
        let v = Tiny(vec![("<unk>", 0.0), ("x", -1.0), ("y", -1.0), ("z", -1.0), ("yz", -2.0), ("xy", -2.0)]);
        assert_eq!(ids(&v, "xyz"), [5, 3]);
    }

    #[test]
    fn characters_that_are_no_tokens_become_bytes_or_unknown() {
        let v = Tiny(vec![("<unk>", 0.0), ("a", -1.0), ("<0xC3>", -1.0), ("<0xA9>", -1.0), ("b", -1.0)]);
        assert_eq!(ids(&v, "aéb"), [1, 2, 3, 4]);
        // No byte token for 'c': the ASCII character's own token would do, here none, so unknown.
        assert_eq!(ids(&v, "ac"), [1, 0]);
        assert_eq!(ids(&v, ""), Vec::<u32>::new());
    }

    #[test]
    fn made_up_vocabulary_round_trips() {
        let v = made_up();
        for text in [
            "Hello world",
            "the quick brown fox jumps over the lazy dog.",
            "  leading, trailing and   multiple spaces  ",
            " ",
            "line one\nline two\n\n",
            "tabs\tand\r\ncarriage returns",
            "café, naïve, déjà vu",
            "日本語のテキスト",
            "emoji 🦀 and 👍🏽",
            "ASCII punctuation: !\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
            "<s> and </s> are plain text here",
        ] {
            round_trip(&v, text);
        }
        assert_eq!(v.encode("").unwrap(), [1], "the empty text is just BOS");
    }

    #[test]
    fn made_up_vocabulary_merges_words_and_falls_back_to_bytes() {
        let v = made_up();
        let id = |t: &str| v.token_id(t).unwrap_or_else(|| panic!("{t:?} is a token"));
        assert_eq!(v.encode("the").unwrap(), [1, id("\u{2581}the")]);
        assert_eq!(v.encode("The people").unwrap(), [1, id("\u{2581}The"), id("\u{2581}people")]);
        // A leading space of the text is its own U+2581 before the prefixed one.
        assert_eq!(v.encode(" the").unwrap(), [1, id("\u{2581}"), id("\u{2581}the")]);
        // "é" is no token: its two UTF-8 bytes are.
        let e = v.encode("é").unwrap();
        assert_eq!(e, [1, id("\u{2581}"), id("<0xC3>"), id("<0xA9>")]);
        // A four-byte character.
        let crab = v.encode("🦀").unwrap();
        assert_eq!(crab[2..], [id("<0xF0>"), id("<0x9F>"), id("<0xA6>"), id("<0x80>")]);
        assert_eq!(v.encode("a\nb").unwrap(), [1, id("\u{2581}a"), id("<0x0A>"), id("b")]);
    }

    #[test]
    fn made_up_vocabularies_tokenize_as_llama_cpp_does() {
        // The ids llama.cpp's llama-tokenize gives (special tokens not parsed) for these made-up
        // vocabularies written as GGUF files.
        let cases: [(usize, &str, &[u32]); 13] = [
            (3000, "Hello world", &[1, 1553, 1235]),
            (3000, " leading  and trailing ", &[1, 259, 1343, 327, 1558, 259, 364, 1200, 1038, 950, 330, 259]),
            (3000, "don't stop\n", &[1, 547, 399, 266, 343, 1452, 339, 13]),
            (3000, "日本 🦀 é", &[1, 259, 233, 154, 168, 233, 159, 175, 259, 243, 162, 169, 131, 259, 198, 172]),
            (3000, "the people of the world", &[1, 356, 698, 360, 356, 1235]),
            (3000, "abcabc xyz", &[1, 568, 481, 1598, 259, 2086, 349]),
            (3000, "", &[1]),
            (400, "Hello world", &[1, 259, 299, 328, 335, 335, 338, 388, 338, 341, 335, 327]),
            (
                400,
                " leading  and trailing ",
                &[1, 259, 259, 335, 328, 324, 327, 371, 330, 259, 364, 354, 341, 324, 332, 335, 371, 330, 259],
            ),
            (400, "don't stop\n", &[1, 259, 327, 399, 266, 343, 259, 342, 368, 339, 13]),
            (400, "日本 🦀 é", &[1, 259, 233, 154, 168, 233, 159, 175, 259, 243, 162, 169, 131, 259, 198, 172]),
            (
                400,
                "the people of the world",
                &[1, 356, 259, 339, 328, 338, 339, 335, 328, 360, 356, 388, 338, 341, 335, 327],
            ),
            (400, "abcabc xyz", &[1, 362, 325, 326, 324, 325, 326, 259, 347, 348, 349]),
        ];
        let (big, small) = (LlamaVocab::made_up(3000).unwrap(), LlamaVocab::made_up(400).unwrap());
        for (n, text, expected) in cases {
            let v = if n == 3000 { &big } else { &small };
            assert_eq!(v.encode(text).unwrap(), expected, "{n} tokens, {text:?}");
        }
    }

    #[test]
    fn every_made_up_piece_merges_from_two_tokens() {
        let v = made_up();
        let ids: HashMap<&str, u32> = (0..v.len() as u32).map(|i| (v.token(i).unwrap(), i)).collect();
        for i in 0..v.len() as u32 {
            let t = v.token(i).unwrap();
            if t.chars().count() < 2 || t.starts_with('<') {
                continue;
            }
            let reachable =
                t.char_indices().skip(1).any(|(at, _)| ids.contains_key(&t[..at]) && ids.contains_key(&t[at..]));
            assert!(reachable, "{t:?} is no merge of two tokens");
            // And the tokenizer finds it as one token.
            let mut out = Vec::new();
            tokenize(t, &v, &mut out);
            assert_eq!(out, [i], "{t:?}");
        }
    }
}
