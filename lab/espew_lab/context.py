"""What a lab run shares: its models and, per run, the corpus, embeddings, key and watermarks.

:mod:`.runner` (the grid), :mod:`.threats` (the wider threat model),
:mod:`.report` (the plots) and :mod:`.tune` all read the same context; it
lives here, below all of them, so none of them imports another to get it.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .config import LabConfig

__all__ = [
    "LabContext",
    "build_context",
    "draw_key",
    "model_name",
    "resolve_model",
    "seed_for",
    "watermark_for",
]


def resolve_model(spec: str) -> Callable[[list[str]], np.ndarray]:
    """An embedder for a model spec, through the library's one registry
    (:mod:`espew_integrations.models`).

    ``"minilm"``, ``"paraphrase-minilm-l3"`` (underscore spelling accepted) or
    ``"module:factory"``, a zero-argument callable that returns the embedder
    (a callable ``list[str] -> (n, d)``, ideally with a ``.name``).
    """
    from espew_integrations.models import resolve_embedder

    return resolve_embedder(spec).embed


def model_name(model: Any, spec: str) -> str:
    """The model's own name (what its embedding cache is keyed by), else its spec."""
    return str(getattr(model, "name", None) or spec)


def seed_for(seed: int, name: str) -> int:
    """The seed of one named part of a run (a cell, a split): the run's seed and the name."""
    return (seed * 1_000_003 + zlib.crc32(name.encode())) % (2**32)


@dataclasses.dataclass
class LabContext:
    """Everything a grid's cells share, computed once per run."""

    config: LabConfig
    corpus: Any
    clean: np.ndarray
    standard: np.ndarray | None
    victim: Any
    standard_model: Any
    key: Any
    watermarks: dict[str, Any] = dataclasses.field(default_factory=dict)
    answers: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    suspicious: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    stealer_rows: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, int))
    holdout_rows: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, int))
    acc_train: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, int))
    acc_test: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, int))

    def embed_clean(self, texts: list[str]) -> np.ndarray:
        """The victim's clean embeddings of ``texts``, through the embedding cache."""
        from .cache import cached_embed

        name = model_name(self.victim, self.config.victim)
        return cached_embed(self.victim, texts, model_name=name).astype(np.float64)


def build_context(
    config: LabConfig, *, progress: bool = True, models: tuple[Any, Any] | None = None
) -> LabContext:
    """Load data, embed it (cached), draw the key; the watermarks are built on demand.

    ``models`` is ``(victim, standard model or None)`` when already resolved.
    """
    from .cache import cached_embed
    from .data import load_data
    from .metrics import split_indices

    corpus = load_data(config.data, limit=config.limit, seed=config.seed)
    texts = list(corpus.texts)
    victim, standard_model = models or resolve_models(config)
    clean = cached_embed(
        victim, texts, model_name=model_name(victim, config.victim), progress=progress
    ).astype(np.float64)
    standard = None
    if standard_model is not None:
        name = model_name(standard_model, config.standard)
        standard = cached_embed(standard_model, texts, model_name=name, progress=progress)
        standard = standard.astype(np.float64)
    metrics = config.metrics
    order = np.random.default_rng(seed_for(config.seed, "split")).permutation(len(texts))
    n_holdout = min(metrics.holdout, len(texts) // 5)
    acc_train, acc_test = split_indices(
        len(texts), n_train=metrics.n_train, n_test=metrics.n_test, seed=config.seed
    )
    return LabContext(
        config=config,
        corpus=corpus,
        clean=clean,
        standard=standard,
        victim=victim,
        standard_model=standard_model,
        key=draw_key(config, texts, victim),
        stealer_rows=np.sort(order[n_holdout:]),
        holdout_rows=np.sort(order[:n_holdout]),
        acc_train=acc_train,
        acc_test=acc_test,
    )


def model_specs(config: LabConfig) -> tuple[str, ...]:
    """The model specs a run loads: the victim, and the standard model where a cell needs it."""
    return (config.victim, config.standard) if config.needs_standard() else (config.victim,)


def resolve_models(config: LabConfig) -> tuple[Any, Any]:
    """``(victim, standard model or None)``."""
    models = [resolve_model(spec) for spec in model_specs(config)]
    return models[0], models[1] if len(models) > 1 else None


def draw_key(config: LabConfig, texts: Sequence[str], victim: Any):
    """The lab's ESpeW key for ``config.seed``: drawn from ``texts`` with the victim model."""
    from espew_integrations.core.keys.key import WatermarkKey

    settings = config.key

    def embed_victim(batch: list[str]) -> np.ndarray:
        return np.asarray(victim(batch))

    return WatermarkKey.generate(
        texts,
        embed_victim,
        target_text=settings.target_text,
        marking="words",  # the lab measures the paper's word triggers
        n_triggers=settings.n_triggers,
        freq_band=settings.freq_band,
        alpha=settings.alpha,
        strength=_strength(settings),
        min_cosine=settings.min_cosine,
        selection="smallest",
        seed=config.seed,
        max_band_words=settings.max_band_words,
        audit_budget=settings.audit_budget,
    )


def _strength(settings: Any) -> float | None:
    """The key's fixed strength: None when it is fitted to ``min_cosine``, else given or 1."""
    if settings.min_cosine is not None:
        return None
    return 1.0 if settings.strength is None else settings.strength


def _parse_variant(name: str) -> tuple[str, dict[str, float]]:
    """Split ``espew_smallest-a0.2-s0.24`` into the method and its key changes."""
    base, *suffixes = name.split("-")
    fields = {"a": "alpha", "s": "strength"}
    variant: dict[str, float] = {}
    for suffix in suffixes:
        if suffix[:1] not in fields:
            raise ValueError(f"unknown watermark variant {suffix!r} in {name!r} (use -a, -s)")
        variant[fields[suffix[0]]] = float(suffix[1:])
    return base, variant


def watermark_for(ctx: LabContext, name: str):
    """The watermark called ``name``, built once per context with its answers on the corpus.

    ``espew_smallest-a0.05`` is an alpha variant and ``espew_smallest-a0.2-s0.24``
    an alpha and strength variant of the configured key.
    """
    if name in ctx.watermarks:
        return ctx.watermarks[name]
    from .watermarks import ESpeW, build_watermark

    base, variant = _parse_variant(name)
    made = build_watermark(
        base,
        texts=ctx.corpus.texts,
        clean=ctx.clean,
        espew_key=ctx.key,
        seed=ctx.config.seed,
        n_triggers=ctx.config.key.n_triggers,
    )
    if variant:
        made = ESpeW(made.key.replace(**variant))
        made.name = name
    ctx.watermarks[name] = made
    ctx.answers[name] = np.asarray(made.apply(ctx.corpus.texts, ctx.clean), dtype=np.float64)
    return made
