#!/usr/bin/env python3
"""Writes random Q4_K, Q5_K and Q6_K blocks and their values as dequantized by the reference
`gguf` package (llama.cpp's gguf-py, whose `quants` module implements ggml's formats), for the
bit-for-bit dequantization test in core/src/kquant.rs.

    python3 -m pip install gguf numpy     # gguf 0.19
    python3 scripts/make_kquant_fixture.py  # from the repository root

Outputs (committed), under tests/data/kquant/: TYPE.blocks (8 blocks of random bytes whose
f16 scales are set to finite values of either sign, and to 0 in one block) and TYPE.f32 (the
2048 values, little-endian f32).
"""

from pathlib import Path

import numpy as np

from gguf import GGMLQuantizationType as T
from gguf import quants

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "kquant"
BLOCKS = 8
# Type, block bytes, byte offsets of its f16 scales.
TYPES = [(T.Q4_K, "q4_K", 144, [0, 2]), (T.Q5_K, "q5_K", 176, [0, 2]), (T.Q6_K, "q6_K", 210, [208])]


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(2019)
    for qtype, name, size, scales in TYPES:
        blocks = rng.integers(0, 256, (BLOCKS, size), dtype=np.uint8)
        for b in range(BLOCKS):
            for at in scales:
                d = np.float16(0.0 if b == 3 else rng.uniform(-0.05, 0.05))
                blocks[b, at:at + 2] = np.frombuffer(d.tobytes(), dtype=np.uint8)
        values = quants.dequantize(blocks, qtype).astype("<f4")
        assert values.size == BLOCKS * 256
        (OUT / f"{name}.blocks").write_bytes(blocks.tobytes())
        (OUT / f"{name}.f32").write_bytes(values.tobytes())
        print(f"{name}: {BLOCKS} blocks")


if __name__ == "__main__":
    main()
