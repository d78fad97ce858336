"""The audit's plan: what to ask the suspect and how to score the answers.

A plan is a function of the key and the options alone, never of the suspect,
so it is made once and shared by :func:`~espew_integrations.core.verify.verify_callable`,
``trace``'s one interrogation and the null study's scoring of fixed answers.
The band words each audit text holds are cached across plans: a null study
verifies the same audit under many salts (``key.replace``), whose texts and band
are the same.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

import numpy as np

from ..ground.errors import InputError
from ..keys.key import WatermarkKey
from ..mark.words import TriggerMatcher
from .directed import mark_directions
from .word_probes import DEFAULT_TEMPLATES, build_probes, check_templates

__all__ = [
    "AuditPlan",
    "band_sets",
    "check_statistic",
    "maps_answers",
    "plan_audit",
    "word_plan",
]


@dataclasses.dataclass(frozen=True)
class AuditPlan:
    """What to ask the suspect and how to score the answers.

    ``kind`` is ``"sentences"`` (the key's stored natural-text probes) or
    ``"words"`` (:mod:`.word_probes`); ``texts[i]`` is probe i, ``owner[i]`` the
    band index of the word it probes. The optional fields are what a score
    needs beyond the raw cosine: the clean model's cosine per probe
    (``reference``), each probe's mark direction and clean row (the directed
    score), the cover texts sent among the probes and their clean rows and
    directions, and the band words each scored text holds.
    """

    kind: str
    texts: list[str]
    owner: np.ndarray
    reference: np.ndarray | None  # clean model's cosine per probe, if known
    templates: tuple[str, ...]
    directions: np.ndarray | None = None  # each probe's mark direction, if known
    clean_rows: np.ndarray | None = None  # the clean probe rows they were made from
    cover: tuple[str, ...] = ()  # sent among the probes so the audit looks ordinary
    cover_rows: np.ndarray | None = None  # their clean rows, which join the directed score's fit
    cover_directions: np.ndarray | None = None  # the cover texts' own mark directions
    band_sets: tuple[tuple[int, ...], ...] = ()  # band words of each text the directed score scores
    trigger_share: float = 0.0  # the key's triggers over its band words (the same for any draw)
    field_z: np.ndarray | None = None  # a field key's unit projections of each probe (.field)
    unit_directions: np.ndarray | None = None  # a map key's output direction per unit (d x M)


def check_statistic(plan: AuditPlan, statistic: str) -> None:
    """Refuse a single statistic a word key's plan cannot compute, saying what it needs
    (each design checks its own: :meth:`..mark.design.MarkingDesign.check_statistic`)."""
    if statistic == "field":
        raise InputError("statistic='field' needs a field key (marking='field')")
    if statistic in ("adjusted", "corrected") and plan.reference is None:
        raise InputError(f"statistic={statistic!r} needs the clean reference this key lacks")
    if statistic == "directed" and plan.directions is None:
        raise InputError(
            "statistic='directed' needs sentence probes, a key that stores their clean "
            "embeddings (generate a new key: older ones lack them) and target_mode='key'"
        )


def plan_audit(
    key: WatermarkKey, probes: str, templates: Sequence[str] | None, target_mode: str = "key"
) -> AuditPlan:
    """What to send and how to score it: the key's design's plan
    (:meth:`..mark.design.MarkingDesign.plan`), ``probes`` checked first. For a caller
    without :class:`.options.AuditOptions` (a null study); the pipeline
    (:func:`.pipeline.run_audit`) asks the design itself, its options checked."""
    if probes not in ("auto", "sentences", "words"):
        raise InputError(f"probes must be 'auto', 'sentences' or 'words', got {probes!r}")
    plan: AuditPlan = key.design.plan(key, probes, templates, target_mode)
    return plan


def word_plan(
    key: WatermarkKey, probes: str, templates: Sequence[str] | None, target_mode: str = "key"
) -> AuditPlan:
    """A word key's plan. Mark directions live in the key's own coordinates, so they are
    used only when the answers are compared there (``target_mode="key"``)."""
    has_sentences = bool(key.probe_texts)
    if probes == "sentences" and not has_sentences:
        raise InputError(
            "this key stores no sentence probes (made before they existed); "
            "use probes='words' or generate a new key"
        )
    if probes == "sentences" or (probes == "auto" and has_sentences and templates is None):
        return _sentence_plan(key, target_mode)
    templates = tuple(DEFAULT_TEMPLATES if templates is None else templates)
    check_templates(templates, key)
    texts, owner = build_probes(list(key.band), templates)
    reference = None
    if templates == DEFAULT_TEMPLATES and key.word_reference.size:
        reference = key.word_reference
    return AuditPlan("words", texts, owner, reference, templates)


def _sentence_plan(key: WatermarkKey, target_mode: str) -> AuditPlan:
    """The plan of a key's stored sentence probes (and cover texts, when it maps answers)."""
    reference = key.probe_reference if key.probe_reference.size else None
    clean_rows = key.probe_embeddings
    usable = len(clean_rows) and target_mode == "key"
    directions = mark_directions(clean_rows, key) if usable else None
    cover_rows = key.cover_embeddings if usable and maps_answers(key) else None
    scored = key.probe_texts + (key.cover_texts if cover_rows is not None else ())
    return AuditPlan(
        "sentences",
        list(key.probe_texts),
        key.probe_owner,
        reference,
        (),
        directions,
        clean_rows if usable else None,
        key.cover_texts,
        cover_rows,
        None if cover_rows is None else mark_directions(cover_rows, key),
        band_sets(key, key.probe_owner, scored) if usable else (),
        len(key.triggers) / len(key.band),
    )


def maps_answers(key: WatermarkKey) -> bool:
    """Whether ``verify(..., target_mode="key")`` with the default sentence probes maps
    a suspect's answers into the key's coordinates (:mod:`..stats.align`): a key that stores
    its audit's clean probe and cover rows. Such a key needs no ``target_mode="query"``
    for a suspect of another dimension or with scrambled coordinates. :func:`plan_audit`
    stores the cover rows (what :func:`.alignment.align_answers` fits on) on this same
    condition."""
    return (
        bool(key.probe_texts)
        and bool(len(key.probe_embeddings))
        and bool(len(key.cover_embeddings))
    )


def band_sets(
    key: WatermarkKey, owner: np.ndarray, texts: Sequence[str]
) -> tuple[tuple[int, ...], ...]:
    """The band words each text holds as the model reads it (within the key's
    window; a probe always holds its own word, even when it is the word alone):
    what the directed score weighs shared texts by."""
    owners = tuple(int(w) for w in owner)
    return _cached_band_sets(key.band, key.normalization, key.window, owners, tuple(texts))


@functools.lru_cache(maxsize=8)
def _cached_band_sets(
    band: tuple[str, ...],
    normalization: str,
    window: int | None,
    owner: tuple[int, ...],
    texts: tuple[str, ...],
) -> tuple[tuple[int, ...], ...]:
    """:func:`band_sets`, cached: reading an audit's texts as the model does is the
    slow part, and a null study verifies the same audit under many salts
    (``key.replace``), whose texts and band are the same."""
    index = {word: i for i, word in enumerate(band)}
    matcher = TriggerMatcher(band, normalization=normalization, window=window)
    owners = [(w,) for w in owner] + [()] * (len(texts) - len(owner))
    return tuple(
        tuple(sorted({*own, *(index[w] for w in words)}))
        for own, words in zip(owners, matcher.which(texts), strict=True)
    )
