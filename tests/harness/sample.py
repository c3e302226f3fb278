"""Deterministic sample "model" files for tests, the demo and the benchmark.

Content is pseudo-random but fully determined by (size, seed), so a test can
regenerate the expected bytes instead of storing fixtures. Generation is cheap:
one 1 MiB random block per call, then every further block is a rotation of it.
"""

from __future__ import annotations

import json
import os
import random
import struct

KIB = 1024
MIB = 1024 * KIB

_BLOCK = 1 << 20
# Odd multiplier: i * _STEP mod 2**20 is a bijection, so the first 2**20 blocks
# (1 TiB) all get distinct rotations and a resume at a wrong block-aligned offset
# still produces different bytes.
_STEP = 0x9E3779B1
_GGUF_MAGIC = b"GGUF"
_GGUF_VERSION = 3


def payload(size: int, seed: int = 1) -> bytes:
    """`size` deterministic pseudo-random bytes; another seed differs everywhere."""
    return random.Random(seed).randbytes(size)


def _with_random_tail(prefix: bytes, size: int, seed: int) -> bytes:
    """``prefix`` then deterministic pseudo-random bytes, ``size`` bytes in total."""
    base = random.Random(seed).randbytes(_BLOCK)
    doubled = memoryview(base + base)
    # One join of memoryview slices: a single copy of the output, no per-block bytes.
    parts: list[bytes | memoryview] = [prefix]
    remaining = size - len(prefix)
    index = 0
    while remaining > 0:
        shift = (index * _STEP + seed) % _BLOCK
        take = min(_BLOCK, remaining)
        parts.append(doubled[shift : shift + take])
        remaining -= take
        index += 1
    return b"".join(parts)


def gguf_like(size_bytes: int, seed: int = 0) -> bytes:
    """``size_bytes`` bytes: GGUF magic, version 3 (uint32 LE), then pseudo-random bytes."""
    header = _GGUF_MAGIC + struct.pack("<I", _GGUF_VERSION)
    if size_bytes < len(header):
        raise ValueError(f"gguf_like needs at least {len(header)} bytes, got {size_bytes}")
    return _with_random_tail(header, size_bytes, seed)


def _safetensors_header(n: int) -> bytes:
    header = {
        "__metadata__": {"format": "pt"},
        "weight": {"dtype": "U8", "shape": [n], "data_offsets": [0, n]},
    }
    return json.dumps(header, separators=(",", ":")).encode()


def safetensors_like(size_bytes: int, seed: int = 0) -> bytes:
    """``size_bytes`` bytes of a valid safetensors file holding one U8 tensor."""
    # The header names the tensor length, which depends on the header length; try
    # 8-aligned header sizes (spaces pad the JSON, as the format allows) until one fits.
    for header_len in range(8, size_bytes - 8 + 1, 8):
        n = size_bytes - 8 - header_len
        header = _safetensors_header(n)
        if len(header) <= header_len:
            padded = header.ljust(header_len, b" ")
            return _with_random_tail(struct.pack("<Q", header_len) + padded, size_bytes, seed)
    raise ValueError(f"safetensors_like: {size_bytes} bytes is too small for a header")


_CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "torch_dtype": "uint8"}
_TOKENIZER = {"version": "1.0", "model": {"type": "BPE", "vocab": {"<s>": 0, "</s>": 1}}}


def _write(root: str, rel: str, data: bytes) -> None:
    path = os.path.join(root, *rel.split("/"))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(data)


def write_sample_tree(
    root: str, *, gguf_size: int = 8 << 20, shard_size: int = 4 << 20
) -> dict[str, list[str]]:
    """Write ``root/single`` (one GGUF) and ``root/multi`` (a sharded safetensors set).

    Returns relative paths per set, primary file first (for ``multi``: the first shard).
    """
    single = ["model.gguf"]
    multi = [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "config.json",
        "tokenizer/tokenizer.json",
    ]
    _write(os.path.join(root, "single"), single[0], gguf_like(gguf_size, seed=1))
    multi_root = os.path.join(root, "multi")
    _write(multi_root, multi[0], safetensors_like(shard_size, seed=2))
    _write(multi_root, multi[1], safetensors_like(shard_size, seed=3))
    _write(multi_root, multi[2], json.dumps(_CONFIG, indent=2).encode() + b"\n")
    _write(multi_root, multi[3], json.dumps(_TOKENIZER, indent=2).encode() + b"\n")
    return {"single": single, "multi": multi}
