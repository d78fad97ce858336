"""Measuring tuning points end to end (step 3 of :mod:`.tune`).

Watermark the corpus, audit the service itself; attack its answers, train
the judging copies on them, audit each copy; the worst p-value counts. Part
of :mod:`.tune`, whose :func:`~.tune.tune` drives these.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from espew_integrations.core.keys.key import WatermarkKey
from espew_integrations.core.mark.inject import marks, watermark
from espew_integrations.core.mark.probes import row_cosines

from .tune_judge import Embedder, MarkedRows, strength_for_budget
from .tune_result import TunePoint

__all__ = ["Attacker", "Setup", "attacker_for", "measure_frontier", "prepare"]


@dataclasses.dataclass(frozen=True)
class Setup:
    """What every point of one tuning run shares: the corpus, its clean embeddings, the draw."""

    corpus_name: str
    texts: list[str]
    clean: np.ndarray
    model_name: str
    clean_model: Embedder
    base: WatermarkKey
    marked_rows: np.ndarray

    @property
    def marked(self) -> MarkedRows:
        rows = np.flatnonzero(self.marked_rows)
        return MarkedRows([self.texts[i] for i in rows], self.clean[rows])

    def describe(self) -> dict[str, Any]:
        return {
            "corpus": self.corpus_name,
            "n_texts": len(self.texts),
            "model": self.model_name,
            "n_triggers": len(self.base.triggers),
            "band_words": len(self.base.band),
            "n_queries": self.base.audit_queries,
            "marked_fraction": float(self.marked_rows.mean()),
        }


def prepare(
    *,
    corpus: str,
    limit: int | None,
    model: str,
    target_text: str,
    key_options: dict[str, Any],
    seed: int,
    progress: bool,
) -> Setup:
    """Load and embed the corpus (cached), and draw the triggers, band and audit probes once."""
    from .cache import CorpusEmbedder, cached_embed
    from .context import model_name, resolve_model
    from .data import load_data

    data = load_data(corpus, limit=limit, seed=seed)
    texts = list(data.texts)
    victim = resolve_model(model)
    name = model_name(victim, model)
    clean = cached_embed(victim, texts, model_name=name, progress=progress).astype(np.float64)
    clean_model = CorpusEmbedder(texts, clean, victim, model_name=name)
    # strength 1 (the paper's write): the frontier fits the strength per alpha itself.
    base = WatermarkKey.generate(
        texts,
        clean_model,
        target_text=target_text,
        strength=1.0,
        seed=seed,
        twin_check=False,
        **{"marking": "words", **key_options},  # the frontier is the word design's
    )
    marked_rows = marks(texts, base)
    return Setup(data.name, texts, clean, name, clean_model, base, marked_rows)


@dataclasses.dataclass(frozen=True)
class Attacker:
    """The attacker's own model: its corpus embeddings (CSE needs them) and the model
    itself (a frozen-MLP copy answers through it); each None when nothing needs it."""

    embeddings: np.ndarray | None = None
    model: Embedder | None = None


def attacker_for(
    attack: str, standard: str, texts: list[str], *, neural_judge: bool, progress: bool
) -> Attacker:
    from .attacks import parse_attack
    from .cache import CorpusEmbedder, cached_embed
    from .context import model_name, resolve_model

    if parse_attack(attack)[0] != "cse" and not neural_judge:
        return Attacker()
    model = resolve_model(standard)
    name = model_name(model, standard)
    matrix = cached_embed(model, texts, model_name=name, progress=progress).astype(np.float64)
    own = CorpusEmbedder(texts, matrix, model, model_name=name) if neural_judge else None
    return Attacker(matrix, own)


def _service(key: WatermarkKey, clean_model: Embedder) -> Embedder:
    """The watermarked service itself: the perfect copy a faithful thief wants."""

    def serve(texts: list[str]) -> np.ndarray:
        return watermark(texts, clean_model(texts), key)

    return serve


def _copy_verdicts(
    made: Any,
    setup: Setup,
    answers: np.ndarray,
    attack: str,
    attacker: Attacker,
    level: float,
    seed: int,
) -> dict[str, Any]:
    """Attack the service's answers, train each judging copy on them, audit each copy."""
    from .attacks import apply_attack
    from .stealers import FrozenMLPStealer, RidgeStealer

    standard = attacker.embeddings
    attacked = apply_attack(attack, setup.texts, answers, standard=standard, seed=seed)
    copies: dict[str, Any] = {"ridge copy": RidgeStealer(seed=seed)}
    if attacker.model is not None:
        copies["frozen-MLP copy"] = FrozenMLPStealer(attacker.model, seed=seed, features=standard)
    return {
        name: made.verify(
            copy.fit(setup.texts, attacked.embeddings),
            target_mode=attacked.target_mode,
            level=level,
            seed=seed,
        )
        for name, copy in copies.items()
    }


def _worst(verdicts: dict[str, Any]) -> tuple[Any, str]:
    """The verdict with the largest p-value (an inconclusive NaN counts as the worst);
    on a tie the first judge named (the faithful copy) says it."""

    def badness(name: str) -> float:
        p = verdicts[name].p_value
        return math.inf if not math.isfinite(p) else p

    name = max(verdicts, key=badness)  # max keeps the first of equal values
    return verdicts[name], name


def _measure_point(
    key: WatermarkKey,
    target: int,
    *,
    setup: Setup,
    attack: str,
    attacker: Attacker,
    level: float,
    seed: int,
    erasure_fraction: float | None = None,
) -> TunePoint:
    """Watermark; audit the service itself; attack, train the copies, audit them: one point.

    ``erasure_fraction`` (None: no erasure judge) is the share of every answer's
    coordinates the erasing thief zeroes.
    """
    from .watermarks import ESpeW

    made = ESpeW(key)
    answers = np.asarray(made.apply(setup.texts, setup.clean), dtype=np.float64)
    service = _service(key, setup.clean_model)
    verdicts = {
        "faithful copy": made.verify(service, level=level, seed=seed),
        **_copy_verdicts(made, setup, answers, attack, attacker, level, seed),
    }
    if erasure_fraction is not None:
        from .erasure import ErasingSuspect

        erasing = ErasingSuspect(service, erasure_fraction, mode="zero", seed=seed)
        verdicts["erasing service"] = made.verify(erasing, level=level, seed=seed)
    worse, judged_by = _worst(verdicts)
    mlp, erased = verdicts.get("frozen-MLP copy"), verdicts.get("erasing service")
    rows = setup.marked_rows
    return TunePoint(
        target=target,
        alpha=float(key.alpha),
        strength=float(key.strength),
        cos_marked=float(np.mean(row_cosines(setup.clean[rows], answers[rows]))),
        p_value=worse.p_value,
        copied=bool(worse.p_value < level),
        delta_cos=worse.delta_cos,
        n_queries=sum(v.n_queries for v in verdicts.values()),
        p_value_service=verdicts["faithful copy"].p_value,
        p_value_ridge=verdicts["ridge copy"].p_value,
        judged_by=judged_by,
        p_value_mlp=math.nan if mlp is None else mlp.p_value,
        p_value_erased=math.nan if erased is None else erased.p_value,
    )


def measure_frontier(
    keys: dict[int, WatermarkKey],
    alphas: Sequence[float],
    *,
    setup: Setup,
    fit_strength: bool,
    min_cos: float,
    progress: bool,
    **measure: Any,
) -> list[TunePoint]:
    """Every chosen target x alpha, at the paper's full write and at the budget's strength."""
    plan: Any = [(t, float(a)) for t in keys for a in sorted(alphas)]
    if progress:
        from tqdm.auto import tqdm

        plan = tqdm(plan, desc="tune", unit="point")
    frontier = []
    for target, alpha in plan:
        key = keys[target].replace(alpha=alpha, strength=1.0)
        strengths = [1.0]
        if fit_strength:
            fitted = strength_for_budget(setup.marked, key, min_cos)
            strengths += [fitted] if fitted < 1.0 else []
        for strength in strengths:
            point_key = key.replace(strength=strength)
            frontier.append(_measure_point(point_key, target, setup=setup, **measure))
    return frontier
