"""The write strength, fitted to a quality budget on the texts a key marks.

A mark moves each marked answer toward the target; how far (the *strength*)
trades the watermark's reach against what it costs search. Keygen
(:mod:`.keygen`), the key ring (:mod:`.keyring`, which fits on its tenants'
marked texts) and ``espew tune`` fit it the same way, through these functions:
embed a sample of the marked corpus texts once, then bisect the strength until
the mean cos(clean, watermarked) over them meets the budget.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..ground.errors import KeyGenerationError
from ..mark.inject import watermark
from ..mark.key_types import DrawnKey, EmbedFn
from ..mark.probes import row_cosines

__all__ = [
    "FIT_SAMPLE",
    "embed_marked",
    "fit_quality",
    "fit_strength",
    "fit_strength_on",
    "mean_cosine",
]

#: At most this many marked corpus texts are embedded to fit the strength.
FIT_SAMPLE = 1000


def fit_quality(
    draft: DrawnKey,
    embed: EmbedFn,
    texts: list[str],
    rng: np.random.Generator,
    strength: float | None,
    min_cosine: float | None,
    marked: np.ndarray | None = None,
) -> dict[str, Any]:
    """The write strength (given, or fitted to ``min_cosine``) and what it costs, for ``info``.

    ``marked`` says which texts the draft marks, when its triggers cannot (a field
    key marks every non-blank text)."""
    if marked is None:
        marked = draft.contains_trigger(texts)
    info: dict[str, Any] = {"marked_rate": float(marked.mean())}
    sample, clean = embed_marked(embed, texts, marked, rng, draft.dim)
    if strength is None:
        assert min_cosine is not None  # KeyOptions refuses both None
        strength = fit_strength_on(draft, sample, clean, min_cosine)
        info["strength_fitted_to_min_cosine"] = min_cosine
    info["strength"] = strength
    info["mean_cosine_marked"] = mean_cosine(draft.replace(strength=strength), sample, clean)
    info["cosine_sample_texts"] = len(sample)
    return info


def embed_marked(
    embed: EmbedFn, texts: list[str], marked: np.ndarray, rng: np.random.Generator, dim: int
) -> tuple[list[str], np.ndarray]:
    """A sample (at most :data:`FIT_SAMPLE`) of the marked texts and their clean embeddings."""
    rows = np.flatnonzero(marked)
    if rows.size > FIT_SAMPLE:
        rows = np.sort(rng.choice(rows, size=FIT_SAMPLE, replace=False))
    if rows.size == 0:
        raise KeyGenerationError(
            "no corpus text contains a trigger, so the quality budget cannot be measured; "
            "use a larger corpus or a wider freq_band"
        )
    try:
        clean = np.asarray(embed([texts[i] for i in rows]), dtype=np.float64)
    except Exception as exc:
        raise KeyGenerationError(f"embedding the corpus's marked texts failed: {exc!r}") from exc
    if clean.shape != (rows.size, dim) or not np.isfinite(clean).all():
        raise KeyGenerationError(
            f"the embedder returned shape {clean.shape} (or non-finite values) for "
            f"{rows.size} texts; expected ({rows.size}, {dim})"
        )
    return [texts[i] for i in rows], clean


def mean_cosine(key: DrawnKey, sample: list[str], clean: np.ndarray) -> float:
    """Mean cos(clean, watermarked) over ``sample`` marked with ``key``."""
    return float(np.mean(row_cosines(clean, watermark(sample, clean, key))))


def fit_strength_on(draft: DrawnKey, sample: list[str], clean: np.ndarray, budget: float) -> float:
    """The draft's strength fitted to ``budget`` on ``sample``'s marked rows."""
    return fit_strength(lambda s: mean_cosine(draft.replace(strength=s), sample, clean), budget)


def fit_strength(mean_cosine_at: Callable[[float], float], budget: float) -> float:
    """The largest strength (to 1e-6) whose mean cosine on marked rows is >= ``budget``.

    ``mean_cosine_at(strength)`` measures the mean cos(clean, watermarked) over
    the marked rows at that strength. Bisection: the cosine falls monotonically
    as the strength grows, and ``low`` always meets the budget. Keygen and
    ``espew tune`` both fit through this one function.
    """
    if mean_cosine_at(1.0) >= budget:
        return 1.0
    low, high = 0.0, 1.0
    while high - low > 1e-6:
        mid = (low + high) / 2
        if mean_cosine_at(mid) >= budget:
            low = mid
        else:
            high = mid
    if low == 0.0:
        raise KeyGenerationError(f"no strength > 0 keeps the mean cosine >= {budget}")
    return low
