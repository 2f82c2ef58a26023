#!/usr/bin/env python3
"""Reference embeddings for all-MiniLM-L6-v2, computed by an independent numpy implementation
of BERT in float64 (not sentence-transformers): token embeddings, 6 post-norm layers with
exact-erf GELU, mean pooling over the tokens, L2 normalisation.

usage: scripts/minilm_reference.py MODEL_DIR SENTENCES.txt OUT.json
  e.g. scripts/minilm_reference.py weights/all-MiniLM-L6-v2 tests/data/minilm/sentences.txt tests/data/minilm/reference.json
needs: pip install numpy safetensors tokenizers
"""
import json
import math
import sys

import numpy as np
from safetensors.numpy import load_file
from tokenizers import Tokenizer


def layer_norm(x, w, b, eps=1e-12):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


erf = np.vectorize(math.erf)


def gelu(x):
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def embed(weights, ids, heads=12):
    w = {k: v.astype(np.float64) for k, v in weights.items() if v.dtype != np.int64}
    n = len(ids)
    x = w["embeddings.word_embeddings.weight"][ids]
    x = x + w["embeddings.position_embeddings.weight"][:n] + w["embeddings.token_type_embeddings.weight"][0]
    x = layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
    hidden = x.shape[1]
    d = hidden // heads
    layer = 0
    while f"encoder.layer.{layer}.output.dense.weight" in w:
        p = f"encoder.layer.{layer}"
        lin = lambda name, v: v @ w[f"{p}.{name}.weight"].T + w[f"{p}.{name}.bias"]
        q = lin("attention.self.query", x).reshape(n, heads, d).transpose(1, 0, 2)
        k = lin("attention.self.key", x).reshape(n, heads, d).transpose(1, 0, 2)
        v = lin("attention.self.value", x).reshape(n, heads, d).transpose(1, 0, 2)
        s = q @ k.transpose(0, 2, 1) / math.sqrt(d)
        s = np.exp(s - s.max(-1, keepdims=True))
        s = s / s.sum(-1, keepdims=True)
        ctx = (s @ v).transpose(1, 0, 2).reshape(n, hidden)
        a = layer_norm(lin("attention.output.dense", ctx) + x, w[f"{p}.attention.output.LayerNorm.weight"], w[f"{p}.attention.output.LayerNorm.bias"])
        f = lin("output.dense", gelu(lin("intermediate.dense", a)))
        x = layer_norm(f + a, w[f"{p}.output.LayerNorm.weight"], w[f"{p}.output.LayerNorm.bias"])
        layer += 1
    pooled = x.mean(0)
    return pooled / np.linalg.norm(pooled)


def main():
    model_dir, sentences_path, out_path = sys.argv[1:4]
    weights = load_file(f"{model_dir}/model.safetensors")
    tok = Tokenizer.from_file(f"{model_dir}/tokenizer.json")
    tok.no_padding()
    tok.enable_truncation(256)
    sentences = [l.strip() for l in open(sentences_path, encoding="utf-8") if l.strip()]
    out = {"sentences": sentences, "tokens": [], "embeddings": []}
    for s in sentences:
        ids = tok.encode(s).ids
        out["tokens"].append(ids)
        out["embeddings"].append([float(v) for v in embed(weights, ids)])
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(out, f)
    print(f"wrote {len(sentences)} reference embeddings to {out_path}")


if __name__ == "__main__":
    main()
