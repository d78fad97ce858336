"""The word design: the paper's trigger words (a text holding one is marked).

Which texts: those holding a trigger word as the model reads them
(:class:`..mark.words.TriggerMatcher`). How: the ESpeW equations on the marked rows,
in constant time per row (:func:`..mark.inject.mark_selected`). Keygen draws the
triggers from a frequency band of the corpus (:func:`..keys.keygen.generate_word_key`);
the key file stores nothing of the design (its band and triggers are the key's own),
so word keys' ids are what they were before designs existed. The audit probes every
band word (:func:`..audit.plan.word_plan`) and decides on the raw, adjusted and
directed word scores (:func:`..audit.decision.decide`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..audit.decision import decide
from ..audit.fields import DECISION_RULE, TRACE_RULE, n_statistics, statistic_used
from ..audit.plan import AuditPlan, check_statistic, word_plan
from ..audit.report import VerificationReport
from ..audit.scores import WordScores
from ..ground.defaults import DEFAULT_RING_AUDIT_BUDGET, DEFAULT_RING_FREQ_BAND
from ..ground.errors import KeyGenerationError
from ..ground.progress import Progress
from ..ground.text import TextView
from ..keys.key import WatermarkKey
from ..keys.key_options import KeyOptions
from ..keys.keygen import Reaudit, generate_word_key, reaudited_words
from ..keys.keyring import KeyRing, word_ring_options
from ..mark.design import MarkingDesign, register_design
from ..mark.inject import mark_selected

__all__ = ["WordDesign"]


@register_design
class WordDesign(MarkingDesign):
    """Texts holding a trigger word are marked; the band's words are audited.

    >>> word_key = WatermarkKey.generate(texts, model, marking="words")  # doctest: +SKIP
    >>> word_key.design  # doctest: +SKIP
    WordDesign()
    """

    name = "words"
    units = "band words"
    layers = "trigger words"
    summary = "texts holding a trigger word are marked"
    decision_rule = DECISION_RULE
    #: The statistics a word key's report may name (``AuditOptions.statistic``).
    statistics = ("combined", "raw", "adjusted", "corrected", "directed")

    @classmethod
    def reports_statistic(cls, statistic: str) -> bool:
        return statistic in cls.statistics

    def marks(self, key: WatermarkKey, texts: Sequence[str], view: TextView | None) -> np.ndarray:
        """Through the key's :meth:`~..keys.key.WatermarkKey.contains_trigger` (what a
        :class:`..mark.key_types.MarkingKey` offers), with ``view`` only when one is given."""
        if view is None:
            return key.contains_trigger(texts)
        return key.contains_trigger(texts, view=view)

    def trigger_texts(
        self, key: WatermarkKey, texts: Sequence[str], view: TextView | None
    ) -> np.ndarray:
        return key.matcher.contains(texts, view=view)

    def mark_rows(self, matrix: np.ndarray, marked: np.ndarray, key: Any) -> np.ndarray:
        return mark_selected(matrix, marked, key)

    @classmethod
    def from_payload(cls, payload: Any, dim: int) -> WordDesign:
        if payload is not None:
            raise KeyGenerationError("a word key's file stores no design record")
        return cls()

    @classmethod
    def generate(
        cls,
        make_key: Callable[..., Any],
        texts: list[str],
        embed: Callable[[list[str]], Any],
        options: KeyOptions,
        progress: Progress | None,
    ) -> Any:
        return generate_word_key(make_key, texts, embed, options, progress)

    def reaudit(self, key: Any, audit: Reaudit) -> Any:
        return reaudited_words(key, audit)

    @classmethod
    def ring_defaults(cls) -> dict[str, Any]:
        """A wider band and a larger audit than a single key's (:mod:`..keys.keyring`)."""
        return {"freq_band": DEFAULT_RING_FREQ_BAND, "audit_budget": DEFAULT_RING_AUDIT_BUDGET}

    @classmethod
    def ring_options(
        cls, key_options: Mapping[str, Any], n_shared: int | None, n_tenant: int | None
    ) -> tuple[int, KeyOptions]:
        return word_ring_options({**cls.ring_defaults(), **key_options}, n_shared, n_tenant)

    @classmethod
    def refit_ring(
        cls,
        ring: KeyRing,
        texts: list[str],
        embed: Any,
        rng: np.random.Generator,
        options: KeyOptions,
    ) -> KeyRing:
        assert options.min_cosine is not None  # KeyOptions refuses both None
        return ring.refit_word_tenants(texts, embed, rng, options.min_cosine)

    def plan(
        self,
        key: WatermarkKey,
        probes: str,
        templates: Sequence[str] | None,
        target_mode: str,
    ) -> AuditPlan:
        return word_plan(key, probes, templates, target_mode)

    def check_statistic(self, plan: AuditPlan, statistic: str) -> None:
        check_statistic(plan, statistic)

    def statistic_used(self, plan: AuditPlan, statistic: str) -> str:
        return statistic_used(plan, statistic)

    def n_statistics(self, plan: AuditPlan, statistic: str) -> int:
        return n_statistics(plan, statistic)

    def decide(
        self,
        key: WatermarkKey,
        scores: WordScores,
        min_coverage: float,
        common: dict[str, Any],
    ) -> VerificationReport:
        return decide(key, scores, min_coverage, common)

    def universe_scores(
        self, scores: WordScores, in_universe: np.ndarray, statistic: str
    ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
        """Each universe word's raw score, and its reference and directed scores where the
        plan has them and the statistic uses them."""
        reference = scores.reference if statistic != "raw" else None
        directed = scores.directed if statistic in ("combined", "directed") else None
        return (
            scores.raw[in_universe],
            None if reference is None else reference[in_universe],
            None if directed is None else directed[in_universe],
        )

    def trace_fields(self) -> dict[str, Any]:
        return {"marking": self.name, "decision_rule": TRACE_RULE}
