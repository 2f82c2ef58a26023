#!/usr/bin/env python3
"""Reference logits for a Llama-architecture model stored in a GGUF file, computed by an
independent numpy implementation in float64 (no llama.cpp, no transformers, no `gguf` package):
its own GGUF reader (F32, F16 and BF16 tensors), RMSNorm, rotary embedding in ggml's normal mode
(adjacent pairs), grouped-query causal attention, SwiGLU feed-forward, and a greedy continuation
recomputed over the full sequence at every step (fine for small models).

usage: scripts/llama_reference.py MODEL.gguf OUT_DIR (--prompt-ids 1,15,27 | --prompt-ids-file FILE) [--greedy N]
  e.g. scripts/llama_reference.py weights/tiny-llama.gguf tests/data/tiny-llama --prompt-ids 1,15,27 --greedy 32
writes OUT_DIR/logits.f32 (n_prompt x n_vocab, row-major little-endian float32) and
OUT_DIR/reference.json (model, model_sha256, prompt, n_vocab, greedy, note).
needs: pip install numpy
"""
import argparse
import hashlib
import json
import os
import re
import struct
import sys

import numpy as np

SCALAR_FORMATS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
GGML_F32, GGML_F16, GGML_BF16 = 0, 1, 30


class Reader:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def unpack(self, fmt):
        values = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return values[0]

    def string(self):
        n = self.unpack("<Q")
        s = bytes(self.data[self.pos:self.pos + n]).decode("utf-8")
        self.pos += n
        return s

    def value(self, vtype):
        if vtype in SCALAR_FORMATS:
            return self.unpack(SCALAR_FORMATS[vtype])
        if vtype == 8:
            return self.string()
        if vtype == 9:
            elem_type, count = self.unpack("<I"), self.unpack("<Q")
            return [self.value(elem_type) for _ in range(count)]
        raise ValueError(f"unknown GGUF value type {vtype}")


def read_gguf(path):
    """Returns (metadata dict, {name: numpy array of shape reversed(ne)}) without copying data."""
    data = np.memmap(path, dtype=np.uint8, mode="r")
    r = Reader(data)
    if bytes(data[:4]) != b"GGUF":
        raise ValueError(f"{path}: not a GGUF file")
    r.pos = 4
    version = r.unpack("<I")
    if version not in (2, 3):
        raise ValueError(f"{path}: unsupported GGUF version {version}")
    n_tensors, n_kv = r.unpack("<Q"), r.unpack("<Q")
    meta = {}
    for _ in range(n_kv):
        key = r.string()
        meta[key] = r.value(r.unpack("<I"))
    infos = []
    for _ in range(n_tensors):
        name = r.string()
        ne = [r.unpack("<Q") for _ in range(r.unpack("<I"))]
        infos.append((name, ne, r.unpack("<I"), r.unpack("<Q")))
    alignment = meta.get("general.alignment", 32)
    data_start = (r.pos + alignment - 1) // alignment * alignment
    tensors = {}
    for name, ne, ggml_type, offset in infos:
        count = int(np.prod(ne))
        start = data_start + offset
        if ggml_type == GGML_F32:
            t = data[start:start + 4 * count].view("<f4")
        elif ggml_type == GGML_F16:
            t = data[start:start + 2 * count].view("<f2")
        elif ggml_type == GGML_BF16:
            t = (data[start:start + 2 * count].view("<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise ValueError(f"tensor {name}: ggml type {ggml_type} not supported (only F32, F16, BF16)")
        tensors[name] = t.reshape(ne[::-1])
    return meta, tensors


def load_llama(path):
    meta, raw = read_gguf(path)
    if meta.get("general.architecture") != "llama":
        raise ValueError(f"{path}: general.architecture is {meta.get('general.architecture')!r}, not 'llama'")
    n_embd, n_head = meta["llama.embedding_length"], meta["llama.attention.head_count"]
    hp = {
        "n_embd": n_embd,
        "n_layer": meta["llama.block_count"],
        "n_head": n_head,
        "n_head_kv": meta.get("llama.attention.head_count_kv", n_head),
        "head_dim": n_embd // n_head,
        "n_rot": meta.get("llama.rope.dimension_count", n_embd // n_head),
        "freq_base": meta.get("llama.rope.freq_base", 10000.0),
        "eps": meta["llama.attention.layer_norm_rms_epsilon"],
    }
    w = {name: t.astype(np.float64) for name, t in raw.items()}
    w.setdefault("output.weight", w["token_embd.weight"])  # tied embeddings
    return hp, w


def rms_norm(x, weight, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * weight


def rope_normal(x, n_rot, freq_base):
    """x: (n_tokens, heads, head_dim); rotates adjacent pairs (2i, 2i+1) for 2i < n_rot."""
    pos = np.arange(x.shape[0], dtype=np.float64)[:, None]
    theta = pos * freq_base ** (-2.0 * np.arange(n_rot // 2) / n_rot)  # (n_tokens, n_rot/2)
    cos, sin = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]
    even, odd = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
    out = x.copy()
    out[..., 0:n_rot:2] = even * cos - odd * sin
    out[..., 1:n_rot:2] = even * sin + odd * cos
    return out


def causal_attention(q, k, v):
    """q: (n, n_head, d), k, v: (n, n_head_kv, d) -> (n, n_head * d)."""
    n, n_head, d = q.shape
    group = n_head // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)  # query head h uses kv head h // group
    scores = np.einsum("thd,shd->hts", q, k) / np.sqrt(d)
    scores = np.where(np.tril(np.ones((n, n), dtype=bool)), scores, -np.inf)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    return np.einsum("hts,shd->thd", probs, v).reshape(n, n_head * d)


def forward(hp, w, ids):
    """Logits (n_tokens, n_vocab) for every position of the token sequence ids."""
    n, eps, hd = len(ids), hp["eps"], hp["head_dim"]
    x = w["token_embd.weight"][ids]
    for i in range(hp["n_layer"]):
        p = f"blk.{i}"
        h = rms_norm(x, w[f"{p}.attn_norm.weight"], eps)
        q = (h @ w[f"{p}.attn_q.weight"].T).reshape(n, hp["n_head"], hd)
        k = (h @ w[f"{p}.attn_k.weight"].T).reshape(n, hp["n_head_kv"], hd)
        v = (h @ w[f"{p}.attn_v.weight"].T).reshape(n, hp["n_head_kv"], hd)
        q, k = rope_normal(q, hp["n_rot"], hp["freq_base"]), rope_normal(k, hp["n_rot"], hp["freq_base"])
        x = x + causal_attention(q, k, v) @ w[f"{p}.attn_output.weight"].T
        h = rms_norm(x, w[f"{p}.ffn_norm.weight"], eps)
        gate, up = h @ w[f"{p}.ffn_gate.weight"].T, h @ w[f"{p}.ffn_up.weight"].T
        x = x + (gate / (1.0 + np.exp(-gate)) * up) @ w[f"{p}.ffn_down.weight"].T
    return rms_norm(x, w["output_norm.weight"], eps) @ w["output.weight"].T


def greedy_continuation(hp, w, prompt, n_new):
    ids = list(prompt)
    for _ in range(n_new):
        ids.append(int(np.argmax(forward(hp, w, ids)[-1])))  # argmax picks the lowest id on ties
    return ids[len(prompt):]


def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("out_dir")
    ids_arg = ap.add_mutually_exclusive_group(required=True)
    ids_arg.add_argument("--prompt-ids", help="comma separated token ids")
    ids_arg.add_argument("--prompt-ids-file", help="file of comma/whitespace separated token ids")
    ap.add_argument("--greedy", type=int, default=0, help="number of greedy tokens to generate after the prompt")
    args = ap.parse_args()
    text = args.prompt_ids if args.prompt_ids is not None else open(args.prompt_ids_file, encoding="utf-8").read()
    prompt = [int(t) for t in re.split(r"[,\s]+", text.strip()) if t]
    if not prompt:
        sys.exit("empty prompt")

    hp, w = load_llama(args.model)
    n_vocab = w["token_embd.weight"].shape[0]
    if max(prompt) >= n_vocab or min(prompt) < 0:
        sys.exit(f"prompt ids must lie in 0..{n_vocab - 1}")
    logits = forward(hp, w, prompt)
    greedy = greedy_continuation(hp, w, prompt, args.greedy)

    os.makedirs(args.out_dir, exist_ok=True)
    logits.astype("<f4").tofile(os.path.join(args.out_dir, "logits.f32"))
    reference = {
        "model": os.path.basename(args.model),
        "model_sha256": sha256_of(args.model),
        "prompt": prompt,
        "n_vocab": int(n_vocab),
        "greedy": greedy,
        "note": "float64 numpy reference (independent GGUF reader and Llama forward pass): "
        + " ".join(["scripts/llama_reference.py"] + sys.argv[1:]),
    }
    with open(os.path.join(args.out_dir, "reference.json"), "w", encoding="utf-8") as f:
        json.dump(reference, f, indent=1)
    print(f"wrote {len(prompt)}x{n_vocab} logits and {len(greedy)} greedy tokens to {args.out_dir}")


if __name__ == "__main__":
    main()
