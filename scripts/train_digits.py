#!/usr/bin/env python3
"""Trains the edge-digits classifier and writes the files examples/edge-digits embeds.

    python3 -m pip install scikit-learn gguf numpy   # scikit-learn 1.9, gguf 0.19
    python3 scripts/train_digits.py                  # from the repository root

The data is scikit-learn's 8x8 `digits` set (1797 images, pixel values 0..16, shipped inside
the package). A stratified split holds out 20 % (360 images) for testing. The model is a
multilayer perceptron trained by scikit-learn:

    x = pixels / 16                      (64 values)
    h1 = relu(W1 x + b1)                 (64)
    h2 = relu(W2 h1 + b2)                (32)
    logits = W3 h2 + b3                  (10)     label = argmax(logits)

Outputs (all committed, all small), under examples/edge-digits/model/:

- digits-f32.gguf: the weights as F32;
- digits-q8_0.gguf: the weight matrices as Q8_0 (ggml's blocks of 32 int8 values sharing an
  f16 scale, quantized by `gguf.quants`), the biases as F32;
- digits-test.bin: the held-out split, in the format below, with this script's own
  predictions for both weight files, so the Rust side can compare image by image.

Both GGUF files carry `general.architecture = "digits-mlp"`, `digits.layer_count`,
`digits.input_scale` (1/16) and `digits.python_accuracy` (this script's accuracy for exactly
those weights: the F32 weights, or the dequantized Q8_0 ones). Tensors are `fc{i}.weight`
(ggml shape [in, out]: one row of `in` values per output) and `fc{i}.bias` ([out]).

digits-test.bin (little-endian):

    magic   b"TDIG"
    u16     version (1)
    u16     pixels per image (64)
    u32     image count N
    N x     64 u8 pixels (0..16), u8 label, u8 predicted label (F32 weights),
            u8 predicted label (Q8_0 weights), u8 zero

The accuracies printed are computed here in numpy float32 with the exported weights (for
Q8_0: after dequantization), which is what the Rust engine computes too.
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier

import gguf
from gguf import GGMLQuantizationType

ROOT = Path(__file__).resolve().parent.parent
OUT_DIR = ROOT / "examples" / "edge-digits" / "model"
ARCH = "digits-mlp"
HIDDEN = (64, 32)
SEED = 0
INPUT_SCALE = np.float32(1.0 / 16.0)


def train() -> tuple[MLPClassifier, np.ndarray, np.ndarray, float]:
    digits = load_digits()
    x = digits.data.astype(np.float32)
    y = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, random_state=SEED, stratify=y)
    mlp = MLPClassifier(
        hidden_layer_sizes=HIDDEN,
        activation="relu",
        solver="adam",
        alpha=1e-4,
        batch_size=64,
        learning_rate_init=2e-3,
        max_iter=400,
        random_state=SEED,
    )
    mlp.fit(x_train * INPUT_SCALE, y_train)
    sklearn_accuracy = float(mlp.score(x_test * INPUT_SCALE, y_test))
    return mlp, x_test.astype(np.uint8), y_test.astype(np.uint8), sklearn_accuracy


def layers_of(mlp: MLPClassifier) -> list[tuple[np.ndarray, np.ndarray]]:
    """(weight [out, in], bias [out]) per layer, float32."""
    return [
        (np.ascontiguousarray(w.T, dtype=np.float32), b.astype(np.float32))
        for w, b in zip(mlp.coefs_, mlp.intercepts_)
    ]


def predict(layers: list[tuple[np.ndarray, np.ndarray]], pixels: np.ndarray) -> np.ndarray:
    """The engine's forward pass in float32: matrix products, bias, relu between layers."""
    h = pixels.astype(np.float32) * INPUT_SCALE
    for i, (w, b) in enumerate(layers):
        h = (h.astype(np.float64) @ w.T.astype(np.float64)).astype(np.float32) + b
        if i + 1 < len(layers):
            h = np.maximum(h, np.float32(0.0))
    return np.argmax(h, axis=1).astype(np.uint8)


def quantize_q8_0(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(Q8_0 bytes as gguf stores them, the dequantized float32 values)."""
    q = gguf.quants.quantize(w, GGMLQuantizationType.Q8_0)
    return q, gguf.quants.dequantize(q, GGMLQuantizationType.Q8_0).astype(np.float32).reshape(w.shape)


def write_gguf(path: Path, layers, quantized: bool, accuracy: float) -> list[tuple[np.ndarray, np.ndarray]]:
    """Writes one model file; returns the layers as a reader of that file sees them."""
    writer = gguf.GGUFWriter(path, ARCH)
    writer.add_name(f"edge-digits MLP 64-{HIDDEN[0]}-{HIDDEN[1]}-10 ({'q8_0' if quantized else 'f32'})")
    writer.add_uint32("digits.layer_count", len(layers))
    writer.add_float32("digits.input_scale", float(INPUT_SCALE))
    writer.add_float32("digits.python_accuracy", accuracy)
    seen = []
    for i, (w, b) in enumerate(layers):
        if quantized:
            q, deq = quantize_q8_0(w)
            writer.add_tensor(f"fc{i}.weight", q, raw_dtype=GGMLQuantizationType.Q8_0)
            seen.append((deq, b))
        else:
            writer.add_tensor(f"fc{i}.weight", w)
            seen.append((w, b))
        writer.add_tensor(f"fc{i}.bias", b)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return seen


def main() -> int:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    mlp, x_test, y_test, sklearn_accuracy = train()
    layers = layers_of(mlp)
    n = len(y_test)

    # Accuracies of exactly the exported weights, computed the way the engine computes.
    pred_f32 = predict(layers, x_test)
    q_layers = [(quantize_q8_0(w)[1], b) for w, b in layers]
    pred_q8 = predict(q_layers, x_test)
    acc_f32 = float(np.mean(pred_f32 == y_test))
    acc_q8 = float(np.mean(pred_q8 == y_test))

    seen_f32 = write_gguf(OUT_DIR / "digits-f32.gguf", layers, False, acc_f32)
    seen_q8 = write_gguf(OUT_DIR / "digits-q8_0.gguf", layers, True, acc_q8)
    # What a reader of the files sees must be what was evaluated.
    assert np.array_equal(predict(seen_f32, x_test), pred_f32)
    assert np.array_equal(predict(seen_q8, x_test), pred_q8)
    for path, seen in ((OUT_DIR / "digits-f32.gguf", seen_f32), (OUT_DIR / "digits-q8_0.gguf", seen_q8)):
        reader = gguf.GGUFReader(path)
        for t in reader.tensors:
            i = int(t.name[2])
            want = seen[i][0] if t.name.endswith("weight") else seen[i][1]
            got = gguf.quants.dequantize(t.data, t.tensor_type).reshape(want.shape)
            assert np.array_equal(got.astype(np.float32), want), t.name

    with open(OUT_DIR / "digits-test.bin", "wb") as f:
        f.write(b"TDIG" + struct.pack("<HHI", 1, 64, n))
        for pixels, label, p32, p8 in zip(x_test, y_test, pred_f32, pred_q8):
            f.write(pixels.astype(np.uint8).tobytes() + bytes([int(label), int(p32), int(p8), 0]))

    print(f"sklearn: accuracy {sklearn_accuracy:.4f} on {n} images (float64)")
    print(f"python: accuracy {acc_f32:.4f} on {n} images, f32 weights")
    print(f"python: accuracy {acc_q8:.4f} on {n} images, q8_0 weights")
    for name in ("digits-f32.gguf", "digits-q8_0.gguf", "digits-test.bin"):
        print(f"wrote {(OUT_DIR / name).relative_to(ROOT)} ({(OUT_DIR / name).stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
