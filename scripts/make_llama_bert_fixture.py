#!/usr/bin/env python3
"""Writes a tiny BERT in llama.cpp's GGUF layout, and its twin in Hugging Face's names, with
the reference `gguf` package (llama.cpp's gguf-py), for models/tests/llama_cpp_layout.rs.

    python3 -m pip install gguf numpy        # gguf 0.19
    python3 scripts/make_llama_bert_fixture.py  # from the repository root

Outputs (all committed), under models/tests/data/llama_bert/:

- llama.gguf: the model as llama.cpp's `convert_hf_to_gguf.py` lays out a BERT (tensor names
  from `gguf.TENSOR_NAMES`, the `bert.*` keys, the vocabulary in llama.cpp's "phantom space"
  spelling with its token types and special token ids, written with the same `GGUFWriter`
  calls the converter makes);
- hf/model.gguf, hf/tokenizer.json: the same weights under the checkpoint's names with only
  the `bert.*` keys, and the vocabulary as a Hugging Face WordPiece `tokenizer.json`.

Weights are f32 from a fixed seed, so both files describe the same model bit for bit.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

import gguf
from gguf import MODEL_TENSOR, TENSOR_NAMES

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "models" / "tests" / "data" / "llama_bert"

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "sentence", ".", "an", "##other", "one", "!",
         "the", "cafe", "word", "##s", "long", "##er", ",", "?", "[unused0]", "un", "##known", "is"]
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
CTX, HIDDEN, FF, LAYERS, HEADS, TYPES, EPS = 16, 32, 64, 2, 4, 2, 1e-12

# Checkpoint name -> llama.cpp tensor (per layer where it has {bid}).
EMBEDDINGS = [
    ("embeddings.word_embeddings", MODEL_TENSOR.TOKEN_EMBD, (len(VOCAB), HIDDEN)),
    ("embeddings.position_embeddings", MODEL_TENSOR.POS_EMBD, (CTX, HIDDEN)),
    ("embeddings.token_type_embeddings", MODEL_TENSOR.TOKEN_TYPES, (TYPES, HIDDEN)),
]
LAYER = [
    ("attention.self.query", MODEL_TENSOR.ATTN_Q, (HIDDEN, HIDDEN)),
    ("attention.self.key", MODEL_TENSOR.ATTN_K, (HIDDEN, HIDDEN)),
    ("attention.self.value", MODEL_TENSOR.ATTN_V, (HIDDEN, HIDDEN)),
    ("attention.output.dense", MODEL_TENSOR.ATTN_OUT, (HIDDEN, HIDDEN)),
    ("intermediate.dense", MODEL_TENSOR.FFN_UP, (FF, HIDDEN)),
    ("output.dense", MODEL_TENSOR.FFN_DOWN, (HIDDEN, FF)),
]
NORMS = [("attention.output.LayerNorm", MODEL_TENSOR.ATTN_OUT_NORM), ("output.LayerNorm", MODEL_TENSOR.LAYER_OUT_NORM)]


def weights() -> list[tuple[str, str, np.ndarray]]:
    """(checkpoint name, llama.cpp name, numpy array in the checkpoint's [out, in] shape)."""
    rng = np.random.default_rng(19)
    out = []

    def add(hf: str, llama: str, shape: tuple[int, ...], scale: float, offset: float = 0.0) -> None:
        out.append((hf, llama, (offset + scale * rng.uniform(-0.5, 0.5, shape)).astype(np.float32)))

    for hf, t, shape in EMBEDDINGS:
        add(f"{hf}.weight", f"{TENSOR_NAMES[t]}.weight", shape, 1.0)
    add("embeddings.LayerNorm.weight", f"{TENSOR_NAMES[MODEL_TENSOR.TOKEN_EMBD_NORM]}.weight", (HIDDEN,), 0.2, 1.0)
    add("embeddings.LayerNorm.bias", f"{TENSOR_NAMES[MODEL_TENSOR.TOKEN_EMBD_NORM]}.bias", (HIDDEN,), 0.1)
    for bid in range(LAYERS):
        for hf, t, shape in LAYER:
            llama = TENSOR_NAMES[t].format(bid=bid)
            add(f"encoder.layer.{bid}.{hf}.weight", f"{llama}.weight", shape, 2.0 / np.sqrt(shape[1]))
            add(f"encoder.layer.{bid}.{hf}.bias", f"{llama}.bias", (shape[0],), 0.1)
        for hf, t in NORMS:
            llama = TENSOR_NAMES[t].format(bid=bid)
            add(f"encoder.layer.{bid}.{hf}.weight", f"{llama}.weight", (HIDDEN,), 0.2, 1.0)
            add(f"encoder.layer.{bid}.{hf}.bias", f"{llama}.bias", (HIDDEN,), 0.1)
    return out


def hyper_parameters(w: gguf.GGUFWriter) -> None:
    w.add_context_length(CTX)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FF)
    w.add_block_count(LAYERS)
    w.add_head_count(HEADS)
    w.add_layer_norm_eps(EPS)


def phantom(token: str, token_type: int) -> str:
    """convert_hf_to_gguf.py's BertModel.set_vocab spelling."""
    if token_type == gguf.TokenType.CONTROL:
        return token
    if token.startswith("##"):
        return token[2:]
    return "\u2581" + token


def write_llama(tensors: list[tuple[str, str, np.ndarray]]) -> None:
    w = gguf.GGUFWriter(OUT / "llama.gguf", "bert")
    w.add_name("tiny-bert")
    hyper_parameters(w)
    w.add_causal_attention(False)
    w.add_pooling_type(gguf.PoolingType.MEAN)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_token_type_count(TYPES)
    types = [gguf.TokenType.CONTROL if t in SPECIAL else gguf.TokenType.NORMAL for t in VOCAB]
    w.add_tokenizer_model("bert")
    w.add_tokenizer_pre("default")
    w.add_token_list([phantom(t, ty) for t, ty in zip(VOCAB, types)])
    w.add_token_types(types)
    # What gguf.SpecialVocab writes for a BERT tokenizer: [CLS] as BOS, [SEP] as EOS.
    w.add_bos_token_id(VOCAB.index("[CLS]"))
    w.add_eos_token_id(VOCAB.index("[SEP]"))
    w.add_unk_token_id(VOCAB.index("[UNK]"))
    w.add_sep_token_id(VOCAB.index("[SEP]"))
    w.add_pad_token_id(VOCAB.index("[PAD]"))
    w.add_mask_token_id(VOCAB.index("[MASK]"))
    w.add_add_bos_token(True)
    w.add_add_eos_token(True)
    for _, llama, array in tensors:
        w.add_tensor(llama, array)
    finish(w)


def write_hf(tensors: list[tuple[str, str, np.ndarray]]) -> None:
    (OUT / "hf").mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(OUT / "hf" / "model.gguf", "bert")
    hyper_parameters(w)
    for hf, _, array in tensors:
        w.add_tensor(hf, array)
    finish(w)
    cls, sep = VOCAB.index("[CLS]"), VOCAB.index("[SEP]")
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": VOCAB.index(t), "content": t, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True} for t in SPECIAL],
        "normalizer": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                       "strip_accents": None, "lowercase": True},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}},
                                      {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
                           "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [cls], "tokens": ["[CLS]"]},
                                              "[SEP]": {"id": "[SEP]", "ids": [sep], "tokens": ["[SEP]"]}}},
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 100, "vocab": {t: i for i, t in enumerate(VOCAB)}},
    }
    (OUT / "hf" / "tokenizer.json").write_text(json.dumps(tokenizer, indent=1) + "\n")


def finish(w: gguf.GGUFWriter) -> None:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    tensors = weights()
    write_llama(tensors)
    write_hf(tensors)
    print(f"wrote {OUT}: {len(tensors)} tensors")


if __name__ == "__main__":
    main()
