#!/usr/bin/env python3
"""Writes the GGUF fixture that tests/gguf.rs reads, using the reference `gguf` package.

    python3 -m pip install gguf numpy      # gguf 0.19
    python3 scripts/make_gguf_fixtures.py  # from the repository root

Outputs (both committed):

- tests/data/gguf/python_writer.gguf: a small file written by `gguf.GGUFWriter` with
  `general.alignment` = 64, the metadata listed in METADATA below and the tensors in TENSORS
  (f32, f16, bf16, i32 and q8_0 quantized with `gguf.quants`);
- tests/data/gguf/python_writer.expected.txt: what the Rust test compares against, one
  tab-separated line per tensor:

      tensor  NAME  GGML_TYPE  NE0,NE1,...  V0 V1 ...   (values as f32 after dequantization)
      source  NAME  V0 V1 ...                           (the f32 values a quantized tensor was made from)

  NE is in ggml order: the reversed numpy shape, so a numpy array of shape (4, 3) has
  ne = [3, 4]. Values are written with Python's repr of the exact f32, which Rust parses back
  exactly.

The metadata values are hard-coded in tests/gguf.rs as well; keep the two in sync.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import gguf
from gguf import GGMLQuantizationType, GGUFValueType

ROOT = Path(__file__).resolve().parent.parent
OUT_DIR = ROOT / "tests" / "data" / "gguf"
GGUF_PATH = OUT_DIR / "python_writer.gguf"
EXPECTED_PATH = OUT_DIR / "python_writer.expected.txt"

ARCH = "tessera-fixture"
ALIGNMENT = 64

# (key, value, type, array element type or None)
METADATA = [
    ("general.name", "tessera gguf fixture", GGUFValueType.STRING, None),
    ("fixture.u8", 200, GGUFValueType.UINT8, None),
    ("fixture.i8", -100, GGUFValueType.INT8, None),
    ("fixture.u16", 60000, GGUFValueType.UINT16, None),
    ("fixture.i16", -30000, GGUFValueType.INT16, None),
    ("fixture.u32", 4_000_000_000, GGUFValueType.UINT32, None),
    ("fixture.i32", -2_000_000_000, GGUFValueType.INT32, None),
    ("fixture.f32", 3.25, GGUFValueType.FLOAT32, None),
    ("fixture.bool", True, GGUFValueType.BOOL, None),
    ("fixture.u64", 2**63 + 5, GGUFValueType.UINT64, None),
    ("fixture.i64", -(2**62) - 7, GGUFValueType.INT64, None),
    ("fixture.f64", -0.1, GGUFValueType.FLOAT64, None),
    ("fixture.string", "héllo, wörld ✓", GGUFValueType.STRING, None),
    ("fixture.tokens", ["<s>", "</s>", "héllo", ""], GGUFValueType.ARRAY, None),
    ("fixture.i32s", [1, -2, 3], GGUFValueType.ARRAY, None),
    ("fixture.f32s", [0.5, -1.25], GGUFValueType.ARRAY, None),
    ("fixture.bools", [True, False, True], GGUFValueType.ARRAY, None),
    ("fixture.u16s", [1, 2, 65535], GGUFValueType.ARRAY, GGUFValueType.UINT16),
    ("fixture.nested", [[1, 2], [3], ["x", "y"]], GGUFValueType.ARRAY, None),
]


def q8_0_source() -> np.ndarray:
    """Two rows of 64 values with a spread of magnitudes, including exact zeros."""
    i = np.arange(128, dtype=np.float32)
    values = np.sin(i * np.float32(0.37)) * (np.float32(1.0) + i / np.float32(16.0))
    values[40:72] = 0.0  # one all-zero block (scale 0)
    return values.reshape(2, 64).astype(np.float32)


def tensors() -> list[tuple[str, np.ndarray, GGMLQuantizationType, np.ndarray]]:
    """(name, array to write, ggml type, f32 values a reader should see)."""
    f32 = (np.arange(12, dtype=np.float32) * np.float32(0.25) - np.float32(1.5)).reshape(4, 3)
    f16 = ((np.arange(16, dtype=np.float32) - 8) / 4).astype(np.float16).reshape(2, 8)
    bf16_src = np.array([1.0, -2.5, 3.140625, 1e10, -1e-3, 0.0], dtype=np.float32).reshape(3, 2)
    bf16 = gguf.quants.quantize(bf16_src, GGMLQuantizationType.BF16)
    i32 = np.array([-2, -1, 0, 1, 2**31 - 1], dtype=np.int32)
    q8_src = q8_0_source()
    q8 = gguf.quants.quantize(q8_src, GGMLQuantizationType.Q8_0)
    return [
        ("tok_embd.weight", f32, GGMLQuantizationType.F32, f32),
        ("blk.0.attn_q.weight", f16, GGMLQuantizationType.F16, f16.astype(np.float32)),
        ("blk.0.ffn_up.weight", bf16, GGMLQuantizationType.BF16, gguf.quants.dequantize(bf16, GGMLQuantizationType.BF16)),
        ("token_ids", i32, GGMLQuantizationType.I32, i32.astype(np.float32)),
        ("output.weight", q8, GGMLQuantizationType.Q8_0, gguf.quants.dequantize(q8, GGMLQuantizationType.Q8_0)),
    ]


def fmt(values: np.ndarray) -> str:
    return " ".join(repr(float(v)) for v in np.asarray(values, dtype=np.float32).reshape(-1))


def main() -> int:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(GGUF_PATH, ARCH)
    writer.add_custom_alignment(ALIGNMENT)
    for key, value, vtype, sub_type in METADATA:
        writer.add_key_value(key, value, vtype, sub_type=sub_type)

    lines = []
    for name, array, qtype, seen in tensors():
        if qtype in (GGMLQuantizationType.F32, GGMLQuantizationType.F16, GGMLQuantizationType.I32):
            writer.add_tensor(name, array)
            shape = array.shape
        else:
            writer.add_tensor(name, array, raw_dtype=qtype)
            shape = gguf.quants.quant_shape_from_byte_shape(array.shape, qtype)
        ne = list(reversed(shape))
        lines.append(f"tensor\t{name}\t{qtype.name.lower()}\t{','.join(map(str, ne))}\t{fmt(seen)}")
        if qtype == GGMLQuantizationType.Q8_0:
            lines.append(f"source\t{name}\t{fmt(q8_0_source())}")

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    EXPECTED_PATH.write_text("\n".join(lines) + "\n", encoding="utf-8")

    # Read the file back with the reference reader as a check of the script itself.
    reader = gguf.GGUFReader(GGUF_PATH)
    names = [t.name for t in reader.tensors]
    assert names == [t[0] for t in tensors()], names
    for t in reader.tensors:
        assert int(t.data_offset) % ALIGNMENT == 0, (t.name, t.data_offset)
    size = GGUF_PATH.stat().st_size
    assert size < 20 * 1024, size
    print(f"wrote {GGUF_PATH.relative_to(ROOT)} ({size} bytes) and {EXPECTED_PATH.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
