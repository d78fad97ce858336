"""A thief that erases the small coordinates of every answer it serves.

ESpeW writes its mark into the ``alpha * d`` coordinates where a text's clean
embedding is smallest, so a thief who knows the design can wipe exactly those
coordinates from whatever its stolen copy serves, audits included, without
knowing the key: take each answer's smallest ``fraction * d`` coordinates by
magnitude, set them to zero (``mode="zero"``) or to noise of their own mean
magnitude (``mode="noise"``, which leaves no exact zeros for an auditor to
spot), and renormalise. It costs the thief retrieval quality, which the
erasure benchmark measures next to the verdicts
(``benchmarks/bench_erasure.py``, ``docs/limitations.md``).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np

from espew_integrations.core.ground.rows import unit_rows

__all__ = ["ERASURE_MODES", "ErasingSuspect", "erase_smallest"]

ErasureMode = Literal["zero", "noise"]
ERASURE_MODES: tuple[str, ...] = ("zero", "noise")


def erase_smallest(
    rows: np.ndarray,
    fraction: float,
    *,
    mode: ErasureMode = "zero",
    noise_seeds: Sequence[int] | None = None,
) -> np.ndarray:
    """Each row with its smallest ``fraction * d`` coordinates erased, renormalised.

    ``mode="noise"`` draws each row's replacement values from its own seed in
    ``noise_seeds`` (one per row), so a text gets the same answer every time.

    >>> erase_smallest(np.array([[0.6, -0.01, 0.8, 0.02]]), 0.5).round(2).tolist()
    [[0.6, 0.0, 0.8, 0.0]]
    """
    rows = np.asarray(rows, dtype=np.float64)
    if rows.ndim != 2:
        raise ValueError(f"rows must be a 2-d array, got shape {rows.shape}")
    _check_settings(fraction, mode)
    k = round(fraction * rows.shape[1])
    if k == 0:
        return unit_rows(rows)
    smallest = np.argpartition(np.abs(rows), k - 1, axis=1)[:, :k]
    out = rows.copy()
    if mode == "zero":
        np.put_along_axis(out, smallest, 0.0, axis=1)
    else:
        if noise_seeds is None or len(noise_seeds) != len(rows):
            raise ValueError("mode='noise' needs one noise seed per row")
        scale = np.abs(np.take_along_axis(rows, smallest, axis=1)).mean(axis=1)
        noise = np.stack([np.random.default_rng(s).standard_normal(k) for s in noise_seeds])
        np.put_along_axis(out, smallest, noise * scale[:, None], axis=1)
    return unit_rows(out)


def _check_settings(fraction: float, mode: str) -> None:
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"fraction must be in [0, 1), got {fraction}")
    if mode not in ERASURE_MODES:
        raise ValueError(f"unknown erasure mode {mode!r}; choose from {ERASURE_MODES}")


class ErasingSuspect:
    """Serves ``suspect``'s answers with their smallest coordinates erased.

    The erasure is applied to every request (a thief cannot tell which are
    audits, and this one does not need to), deterministically per text.
    """

    def __init__(
        self,
        suspect: Callable[[Sequence[str]], np.ndarray],
        fraction: float,
        *,
        mode: ErasureMode = "zero",
        seed: int = 0,
    ) -> None:
        _check_settings(fraction, mode)
        self.suspect, self.fraction, self.mode, self.seed = suspect, fraction, mode, seed

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        seeds = [zlib.crc32(t.encode("utf-8"), self.seed) for t in texts]
        answers = np.asarray(self.suspect(texts), dtype=np.float64)
        return erase_smallest(answers, self.fraction, mode=self.mode, noise_seeds=seeds)

    def __repr__(self) -> str:
        return f"ErasingSuspect(fraction={self.fraction}, mode={self.mode!r})"
