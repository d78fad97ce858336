"""The field design: every answer moved by a keyed field (:mod:`..mark.field`).

Which texts: every non-blank one; by how much, only the clean embedding decides, so
no text rule exists (:meth:`FieldDesign.trigger_texts` refuses). How: each row along
its own ESpeW displacement scaled by the field's keyed gain
(:func:`..mark.inject.field_rows`). Keygen draws the units from the salt, samples
the audit and computes the field from its clean rows
(:func:`..keys.field_keygen.generate_field_key`); the key file stores the field
(:meth:`..mark.field.FieldMark.to_payload`) under ``"field"``. The audit asks the
stored texts, every one a probe, and ranks the drawn units among all units by the
field statistic (:func:`..audit.field_decision.decide_field`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any

import numpy as np

from ..audit.directed import mark_directions
from ..audit.field_decision import decide_field, unit_scores
from ..audit.fields import FIELD_DECISION_RULE, FIELD_TRACE_RULE
from ..audit.plan import AuditPlan
from ..audit.references import ReferenceAnswers, ask_references
from ..audit.report import VerificationReport
from ..audit.scores import WordScores
from ..audit.settings import ReferenceFn
from ..ground.errors import KeyGenerationError, MarkingError
from ..ground.progress import Progress
from ..ground.rows import unit_rows
from ..ground.text import TextView
from ..keys.field_keygen import (
    field_twin_p_value,
    generate_field_key,
    make_field,
)
from ..keys.key import WatermarkKey
from ..keys.key_options import KeyOptions
from ..keys.keyring import tenant_field
from ..mark.compact import packed_target
from ..mark.design import register_design
from ..mark.field import (
    FieldMark,
    check_field,
    no_text_rule,
    reference_leans,
    scoring_projections,
)
from ..mark.inject import field_rows
from .units import UnitDesign

__all__ = ["FieldDesign"]


@register_design
class FieldDesign(UnitDesign):
    """Every non-blank text marked by the field ``field`` (its ``mu``, ``sigma``, ``q``).

    >>> key.design.field.units  # doctest: +SKIP
    64
    """

    name = "field"
    units = "field units"
    layers = "field units"
    decision_rule = FIELD_DECISION_RULE
    trace_rule = FIELD_TRACE_RULE

    def __init__(self, field: FieldMark):
        if not isinstance(field, FieldMark):
            raise KeyGenerationError(
                f"the field design's parameters must be a FieldMark, got {type(field).__name__}"
            )
        self._field = field
        self._gaussians: dict[bytes, np.ndarray] = {}  # G per salt, derived on first use

    @property
    def field(self) -> FieldMark:
        """The field's record: units, amplitude, ``mu``, ``sigma``, ``q`` (secret)."""
        return self._field

    # ------------------------------------------------------------------ marking
    def trigger_texts(self, key: Any, texts: Sequence[str], view: TextView | None) -> np.ndarray:
        raise MarkingError(no_text_rule(key.key_id))

    def mark_rows(self, matrix: np.ndarray, marked: np.ndarray, key: Any) -> np.ndarray:
        return field_rows(matrix, marked, key, self._field)

    # ------------------------------------------------------------------ the key file
    def payload(self) -> dict[str, Any]:
        return self._field.to_payload()

    def stored_target(self, target: np.ndarray) -> Any:
        """A compact field's float16 target, where it loads back bit for bit."""
        return packed_target(target) if self._field.compact else None

    @classmethod
    def from_payload(cls, payload: Any, dim: int) -> FieldDesign:
        return cls(FieldMark.from_payload(payload))

    def check(self, band: Sequence[str], dim: int) -> None:
        check_field(self._field, band, dim)

    def matches(self, salt: bytes, triggers: Collection[str]) -> bool:
        return self._field.matches(salt, triggers)

    def with_triggers(self, salt: bytes, triggers: frozenset[str]) -> FieldDesign:
        """A tenant key's field: the shared one's centre, scales and amplitude, the gain of
        every drawn unit (:func:`..keys.keyring.tenant_field`)."""
        gaussian = self._gaussians.get(salt)
        if gaussian is None:
            gaussian = self._gaussians[salt] = self._field.gaussian(salt)
        tenant = type(self)(tenant_field(self._field, gaussian, triggers))
        tenant._gaussians = self._gaussians  # the same salt, the same G
        return tenant

    # ------------------------------------------------------------------ key generation
    @classmethod
    def generate(
        cls,
        make_key: Callable[..., Any],
        texts: list[str],
        embed: Callable[[list[str]], Any],
        options: KeyOptions,
        progress: Progress | None,
    ) -> Any:
        def design(salt: bytes, rows: np.ndarray, drawn: frozenset[str], o: KeyOptions) -> Any:
            return cls(make_field(salt, rows, drawn, o))

        return generate_field_key(make_key, design, texts, embed, options, progress)

    def twin_p_value(self, key: Any) -> float:
        """The clean model's own exact p-value on the key's audit (keygen's innocent-twin
        check, :func:`..keys.field_keygen.field_twin_p_value`)."""
        return field_twin_p_value(key, self._field)

    # ------------------------------------------------------------------ the audit
    def plan(
        self,
        key: WatermarkKey,
        probes: str,
        templates: Sequence[str] | None,
        target_mode: str,
    ) -> AuditPlan:
        """Every audit text a probe, scored by the field statistic.

        The mark directions and the unit projections live in the key's coordinates, so
        answers are compared there (mapped onto them when they come in others)."""
        clean_rows = self.audited_rows(key, probes, templates, target_mode)
        clean = unit_rows(clean_rows)
        z = scoring_projections(clean, self._field.mu, self._field.gaussian(key.salt))
        return AuditPlan(
            "sentences",
            list(key.probe_texts),
            key.probe_owner,
            None,
            (),
            mark_directions(clean_rows, key),
            clean_rows,
            (),
            np.empty((0, key.dim)),  # no cover: answers are mapped on the probes alone
            np.empty((0, key.dim)),
            (),
            len(key.triggers) / len(key.band),
            z,
        )

    def references(
        self, references: Sequence[ReferenceFn], key: WatermarkKey, plan: AuditPlan
    ) -> ReferenceAnswers | None:
        """Each reference's lean along each text's own mark direction."""
        directions = plan.directions
        assert directions is not None  # a field plan always has its mark directions
        return ask_references(references, key, plan, lambda rows: reference_leans(directions, rows))

    def decide(
        self,
        key: WatermarkKey,
        scores: WordScores,
        min_coverage: float,
        common: dict[str, Any],
    ) -> VerificationReport:
        return decide_field(key, self._field, scores, min_coverage, common)

    def universe_scores(
        self, scores: WordScores, in_universe: np.ndarray, statistic: str
    ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
        """Each universe unit's field score: one statistic, no reference, no directed score."""
        return unit_scores(scores)[in_universe], None, None
