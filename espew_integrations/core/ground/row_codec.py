"""Compact storage of embedding rows in a key file: one int8 per coordinate.

A key stores the provider's clean embeddings of its audit probes and cover
texts (one row per audit text) so that the verifier can compute each probe's
mark direction and the clean fit (:mod:`..audit.directed`) without the provider's
model. As JSON floats each coordinate would take about twenty characters; as
one int8 code per coordinate plus one float scale per row it is d bytes per
row (4/3 of that in the file's base64).

Codes are square-root companded, ``code = round(127 sqrt(|x| / max|x|))``
with the sign: the mark lives on each row's *smallest* coordinates, so they
get the finest steps (a linear int8 code rounds most of them to 0 or 1 and
blurs which ones a mark takes; the comparison with float64 and linear int8
rows: docs/research/method.md, "Catching the faithful copy"). The verifier only needs *a*
direction that does not depend on which band words are triggers: any fixed
function of the clean rows keeps the rank test exact. The codes and scales,
not the float rows, are what the key's id commits to, so saving and loading a
key never changes its id.
"""

from __future__ import annotations

import base64
import dataclasses
import math
from typing import Any

import numpy as np

from .errors import KeyGenerationError

__all__ = ["QuantizedRows"]

_LEVELS = 127
_ENCODING = "int8-sqrt-row-scale"


@dataclasses.dataclass(frozen=True, eq=False)
class QuantizedRows:
    """Rows stored as ``sign(c) (c / 127)^2 * scale[i]`` with int8 codes c in [-127, 127]."""

    codes: np.ndarray  # (n, d) int8, read-only
    scale: np.ndarray  # (n,) float64, read-only: max |x| of the row, > 0 (1.0 if all zero)

    @classmethod
    def encode(cls, rows: Any) -> QuantizedRows:
        """Quantise finite rows, each to its own scale (its largest magnitude)."""
        matrix = np.asarray(rows, dtype=np.float64)
        if matrix.ndim != 2:
            raise KeyGenerationError(f"rows to store must be a 2-D array, got shape {matrix.shape}")
        if not np.isfinite(matrix).all():
            raise KeyGenerationError("rows to store contain NaN or infinite values")
        peak = np.abs(matrix).max(axis=1) if matrix.size else np.zeros(len(matrix))
        scale = np.where(peak > 0, peak, 1.0)
        levels = np.rint(_LEVELS * np.sqrt(np.abs(matrix) / scale[:, None]))
        codes = (np.sign(matrix) * np.minimum(levels, _LEVELS)).astype(np.int8)
        return cls._sealed(codes, scale)

    @classmethod
    def empty(cls, dim: int) -> QuantizedRows:
        return cls._sealed(np.zeros((0, dim), dtype=np.int8), np.zeros(0))

    @classmethod
    def _sealed(cls, codes: np.ndarray, scale: np.ndarray) -> QuantizedRows:
        codes, scale = np.array(codes, dtype=np.int8), np.array(scale, dtype=np.float64)
        codes.setflags(write=False)
        scale.setflags(write=False)
        return cls(codes, scale)

    def __len__(self) -> int:
        return len(self.codes)

    @property
    def dim(self) -> int:
        return int(self.codes.shape[1])

    def rows(self) -> np.ndarray:
        """The stored rows as float64 (a fresh array)."""
        codes = self.codes.astype(np.float64)
        return np.sign(codes) * (codes / _LEVELS) ** 2 * self.scale[:, None]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, QuantizedRows):
            return NotImplemented
        same_codes = np.array_equal(self.codes, other.codes)
        return bool(same_codes and np.array_equal(self.scale, other.scale))

    def __hash__(self) -> int:
        return hash((self.codes.tobytes(), self.scale.tobytes()))

    def __repr__(self) -> str:
        return f"QuantizedRows({len(self)} rows x {self.dim})"

    # ------------------------------------------------------------------ storage
    def to_payload(self) -> dict[str, Any]:
        """JSON fields: the codes as base64 of row-major int8 bytes, one scale per row."""
        return {
            "encoding": _ENCODING,
            "dim": self.dim,
            "scale": [float(x) for x in self.scale],
            "codes": base64.b64encode(self.codes.tobytes()).decode("ascii"),
        }

    @classmethod
    def from_payload(cls, payload: object) -> QuantizedRows:
        """Inverse of :meth:`to_payload`; raises KeyGenerationError naming what is wrong."""
        if not isinstance(payload, dict) or payload.get("encoding") != _ENCODING:
            raise KeyGenerationError("the stored probe embeddings are not in a known encoding")
        dim, scale, codes = payload.get("dim"), payload.get("scale"), payload.get("codes")
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise KeyGenerationError("the stored probe embeddings have no valid dimension")
        if not isinstance(scale, list) or not all(
            isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0
            for x in scale
        ):
            raise KeyGenerationError("the stored probe embeddings' scales must be positive numbers")
        try:
            raw = base64.b64decode(codes, validate=True) if isinstance(codes, str) else None
        except ValueError:
            raw = None
        if raw is None or len(raw) != dim * len(scale):
            raise KeyGenerationError(
                "the stored probe embeddings are corrupt (their codes do not match "
                f"{len(scale)} rows x {dim})"
            )
        codes_array = np.frombuffer(raw, dtype=np.int8).reshape(len(scale), dim)
        if (codes_array == -128).any():
            raise KeyGenerationError("the stored probe embeddings are corrupt (code -128)")
        return cls._sealed(codes_array, np.asarray(scale, dtype=np.float64))
