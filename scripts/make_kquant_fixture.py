#!/usr/bin/env python3
"""Writes the fixtures of the bit-for-bit (de)quantization tests in core/src/quant_fixtures.rs.

    python3 -m pip install gguf numpy     # gguf 0.19
    python3 scripts/make_kquant_fixture.py  # from the repository root

Dequantization, for every block type but q8_0/q4_0: random blocks and their values as
dequantized by the `gguf` package (llama.cpp's gguf-py, whose `quants` module implements ggml's
formats). Outputs under tests/data/kquant/: TYPE.blocks (8 blocks of random bytes whose f16
scales are set to finite values of either sign, and to 0 in block 3) and TYPE.f32 (their
values, little-endian f32).

Quantization: rows of f32 (uniform, Gaussian, with outliers, constant, zero and tiny values;
quantizer_input.f32) and their blocks as ggml's reference quantizer writes them (TYPE.quant.blocks):
from the gguf package's `quantize` where it has one (q4_1, q5_0, q5_1), else from
`quantize_row_TYPE_ref` of a libggml-base built from ggml's sources (its path in
$GGML_BASE_LIB, default /tmp/ggml-build/bin/libggml-base.so); without the library those
fixtures are left as they are.

GGUF: types.gguf holds the dequantization fixtures' blocks as tensors (tests/gguf.rs loads it).
"""

import ctypes
import os
from pathlib import Path

import numpy as np

from gguf import GGMLQuantizationType as T
from gguf import quants

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "kquant"
BLOCKS = 8
# (The first three in the order their fixtures were first made, so the same seed gives the
# same files.) Type, name, values per block, block bytes, byte offsets of its f16 scales.
TYPES = [
    (T.Q4_K, "q4_K", 256, 144, [0, 2]),
    (T.Q5_K, "q5_K", 256, 176, [0, 2]),
    (T.Q6_K, "q6_K", 256, 210, [208]),
    (T.Q4_1, "q4_1", 32, 20, [0, 2]),
    (T.Q5_0, "q5_0", 32, 22, [0]),
    (T.Q5_1, "q5_1", 32, 24, [0, 2]),
    (T.Q2_K, "q2_K", 256, 84, [80, 82]),
    (T.Q3_K, "q3_K", 256, 110, [108]),
]
# Types whose quantizer the gguf package implements bit for bit as ggml's reference.
PACKAGE_QUANTIZES = {"q4_1", "q5_0", "q5_1"}


def dequantization_fixtures(rng: np.random.Generator) -> None:
    for qtype, name, _, size, scales in TYPES:
        blocks = rng.integers(0, 256, (BLOCKS, size), dtype=np.uint8)
        for b in range(BLOCKS):
            for at in scales:
                d = np.float16(0.0 if b == 3 else rng.uniform(-0.05, 0.05))
                blocks[b, at:at + 2] = np.frombuffer(d.tobytes(), dtype=np.uint8)
        values = quants.dequantize(blocks, qtype).astype("<f4")
        (OUT / f"{name}.blocks").write_bytes(blocks.tobytes())
        (OUT / f"{name}.f32").write_bytes(values.tobytes())
        print(f"{name}: {BLOCKS} blocks")


def quantizer_inputs(rng: np.random.Generator) -> np.ndarray:
    """2048 values: eight runs of 256 of different character."""
    runs = [
        rng.uniform(-1, 1, 256),
        rng.standard_normal(256),
        rng.standard_normal(256) * 0.02 + 0.01,
        np.where(rng.random(256) < 0.03, rng.standard_normal(256) * 40, rng.standard_normal(256)),
        rng.uniform(0.5, 3, 256),  # all positive
        np.full(256, -0.75),  # constant
        np.concatenate([np.zeros(128), rng.standard_normal(128) * 1e-20]),  # zeros and tiny values
        rng.standard_normal(256) * np.repeat(rng.uniform(0, 8, 16), 16),  # sub-blocks of varied size
    ]
    return np.concatenate(runs).astype(np.float32)


def quantization_fixtures(rng: np.random.Generator) -> None:
    x = quantizer_inputs(rng)
    (OUT / "quantizer_input.f32").write_bytes(x.astype("<f4").tobytes())
    path = os.environ.get("GGML_BASE_LIB", "/tmp/ggml-build/bin/libggml-base.so")
    lib = ctypes.CDLL(path) if Path(path).exists() else None
    for qtype, name, per_block, size, _ in TYPES:
        if name in PACKAGE_QUANTIZES:
            blocks = quants.quantize(x.reshape(-1, per_block), qtype).tobytes()
        elif lib is not None:
            out = ctypes.create_string_buffer(x.size // per_block * size)
            fn = getattr(lib, f"quantize_row_{name}_ref")
            fn.restype = None
            fn(x.ctypes.data_as(ctypes.c_void_p), out, ctypes.c_int64(x.size))
            blocks = out.raw
        else:
            print(f"{name}: no libggml-base at {path}; quantization fixture left as it is")
            continue
        (OUT / f"{name}.quant.blocks").write_bytes(blocks)
        print(f"{name}: {x.size} values quantized")


def gguf_fixture() -> None:
    """types.gguf: the dequantization fixtures' blocks as tensors of two rows, one per type
    and named after it, written by the gguf package's GGUFWriter."""
    from gguf import GGUFWriter

    path = OUT / "types.gguf"
    w = GGUFWriter(str(path), "tessera-types")
    for qtype, name, _, size, _ in TYPES:
        blocks = np.frombuffer((OUT / f"{name}.blocks").read_bytes(), dtype=np.uint8)
        w.add_tensor(name, blocks.reshape(2, BLOCKS // 2 * size), raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"types.gguf: {len(TYPES)} tensors")


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(2019)
    dequantization_fixtures(rng)
    quantization_fixtures(rng)
    gguf_fixture()


if __name__ == "__main__":
    main()
