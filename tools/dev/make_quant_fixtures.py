#!/usr/bin/env python3
"""Writes the block-quantization fixtures in tests/data/quant/ with gguf-py as the oracle.

For every type T the files are:
  T.bin      raw blocks (ggml layout)
  T.f32      gguf.quants.dequantize(T.bin), little-endian float32
  T.src.f32  (BF16, Q8_0, Q4_0, Q4_1) the floats that gguf-py quantized into T.bin; our
             reference quantizer must produce the same bytes from them. For F16, T.bin is raw
             random bits and f16.src.f32 -> f16.quant.bin is the quantization case.
gguf-py cannot quantize the K-quants, so their blocks are random bytes with sane f16 scales
(finite, mostly normal, one zero and one subnormal). Deterministic: a fixed seed.

Usage: python3 tools/dev/make_quant_fixtures.py [out_dir]   (default tests/data/quant)
"""
import os
import sys

import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf import quants

SEED = 20240611
OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data", "quant")


def write(name, array):
    path = os.path.join(OUT, name)
    data = np.ascontiguousarray(array).tobytes()
    assert len(data) < 20 * 1024, (name, len(data))
    with open(path, "wb") as f:
        f.write(data)


def source_floats(rng, n_blocks, block):
    """Blocks of varied scale and offset, plus an all-zero block and a constant block."""
    rows = []
    for b in range(n_blocks):
        if b == 1:
            rows.append(np.zeros(block, np.float32))
        elif b == 2:
            rows.append(np.full(block, 0.375, np.float32))
        else:
            scale = 10.0 ** rng.uniform(-3, 2)
            offset = rng.uniform(-1, 1) * scale * (b % 3 == 0)
            rows.append((rng.standard_normal(block) * scale + offset).astype(np.float32))
    return np.concatenate(rows).astype(np.float32)


def random_f16(rng, n, lo=-6, hi=0):
    """Finite positive f16 values 10^[lo, hi) as raw uint16."""
    return (10.0 ** rng.uniform(lo, hi, n)).astype(np.float16).view(np.uint16)


def k_blocks(rng, qtype, n_blocks):
    block_size, type_size = quants.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    if qtype == QT.Q6_K:
        d_at = [type_size - 2]  # ql, qh, scales, then d
    else:
        d_at = [0, 2]  # d, dmin, then scales
    for at in d_at:
        vals = random_f16(rng, n_blocks, -5, 0)
        vals[0] = 0x0000 if at == d_at[-1] else vals[0]  # a zero scale
        vals[1] = 0x0003  # a subnormal scale
        raw[:, at:at + 2] = vals.view(np.uint8).reshape(n_blocks, 2)
    return raw


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(SEED)

    # F32: the bytes are the values.
    f32 = source_floats(rng, 8, 32)
    write("f32.bin", f32)
    write("f32.f32", quants.dequantize(f32.view(np.uint8), QT.F32))

    # F16: every kind of value as raw bits (normal, subnormal, zeros, infinities) ...
    bits = rng.integers(0, 0x10000, 256, dtype=np.uint32).astype(np.uint16)
    bits[(bits & 0x7C00) == 0x7C00] &= 0xBFFF  # no NaN or inf from the random draw
    bits[:6] = [0x0000, 0x8000, 0x0001, 0x83FF, 0x7C00, 0xFC00]
    write("f16.bin", bits)
    write("f16.f32", quants.dequantize(bits.view(np.uint8), QT.F16))
    # ... and a quantization case with ties, overflow to inf and underflow to subnormals.
    src = source_floats(rng, 8, 32)
    src[:8] = [65519.0, 65520.0, 1e6, -1e6, 1e-8, -3e-8, 2.0 ** -25, 1.0 + 2.0 ** -11]
    write("f16.src.f32", src)
    with np.errstate(over="ignore"):
        q = src.astype(np.float16).view(np.uint8)
    write("f16.quant.bin", q)

    # BF16: raw bits for dequantization, gguf-py's rounding for quantization.
    src = source_floats(rng, 8, 32)
    q = quants.quantize(src, QT.BF16)
    write("bf16.src.f32", src)
    write("bf16.bin", q)
    write("bf16.f32", quants.dequantize(q, QT.BF16))

    # Legacy block types: gguf-py quantizes (bit-exact to ggml's reference quantizer).
    for name, qtype in (("q8_0", QT.Q8_0), ("q4_0", QT.Q4_0), ("q4_1", QT.Q4_1)):
        src = source_floats(rng, 8, 32)
        q = quants.quantize(src, qtype)
        write(name + ".src.f32", src)
        write(name + ".bin", q)
        write(name + ".f32", quants.dequantize(q, qtype))

    # K-quants: random blocks.
    for name, qtype in (("q4_k", QT.Q4_K), ("q5_k", QT.Q5_K), ("q6_k", QT.Q6_K)):
        raw = k_blocks(rng, qtype, 4)
        out = quants.dequantize(raw.reshape(-1), qtype)
        assert np.all(np.isfinite(out)), name
        write(name + ".bin", raw)
        write(name + ".f32", out)


if __name__ == "__main__":
    main()
