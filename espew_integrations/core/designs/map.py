"""The map design: every answer moved by a keyed linear map of its clean embedding.

Why a third design: the field key moves every answer along its own ESpeW
displacement, and every displacement leans toward one secret vector, the target.
A thief who estimates that vector from its stolen answers (or guesses the phrase
it embeds) projects it out and keeps everything it stole
(``benchmarks/bench_informed_thieves.py``). The map key has no such vector.
Each answer moves by a keyed *linear map* of its own clean row, spread over ``K``
secret output directions:

    marked(e) = unit(e + c * sum_{j in S} clip(z_j(e), -3, 3) h_j),
    z_j(e)    = (e - mu) . g_j / sigma_j,   c = amplitude * strength / sqrt(K),

with ``g_j`` (input units) and ``h_j`` (unit output directions) drawn from the salt
by :func:`..mark.field.keyed_gaussian` under two domains of their own, ``S`` the
key's ``K`` drawn units of ``M`` (its triggers), ``mu`` and ``sigma_j`` the keygen
audit's clean mean and unit scales. Nothing here is a text, a phrase or a fixed
point: the mark of an answer is a different mix of ``K`` directions for each text,
so no few directions carry most of it, and a copy learns it as well as it learns
the embedding itself (it is linear in the clean row).

Its audit ranks the drawn units among all ``M`` by how the suspect's answers lean
along each unit's output direction in step with that unit's keyed projection of
the clean row, after what the clean row itself has along it is fitted away
(:func:`map_unit_scores`). Nothing in the scores depends on which units were drawn
(the draw is an independent keyed stream), so the rank test is exact.

The arithmetic of the mark (the salt's matrices, the stored record, the marking)
is :mod:`..mark.map`: the serving key stores ``mu`` as int8 steps, ``sigma`` as
float16 and a keyed target for the key format's sake; ``G`` and ``H`` are
re-derived from the salt.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Collection, Sequence
from typing import Any

import numpy as np

from ..audit.field_decision import decide_field
from ..audit.plan import AuditPlan
from ..audit.references import ReferenceAnswers, ask_references
from ..audit.report import VerificationReport
from ..audit.scores import WordScores
from ..audit.settings import ReferenceFn
from ..ground.errors import KeyGenerationError, MarkingError
from ..ground.progress import Progress
from ..ground.rows import unit_rows
from ..ground.stable import snap_residual
from ..ground.text import TextView
from ..keys.field_keygen import generate_field_key
from ..keys.key import WatermarkKey
from ..keys.key_options import KeyOptions
from ..mark.compact import packed_target
from ..mark.design import register_design
from ..mark.field import drawn_mask, scoring_projections, unit_names
from ..mark.map import MapMark, MapOperator, map_inputs, map_outputs, map_rows, map_target
from ..stats.ranktest import rank_sum_p_value
from .units import MIN_AUDIT_TEXTS, UnitDesign

__all__ = [
    "MAP_DECISION_RULE",
    "MAP_TRACE_RULE",
    "MapDesign",
    "map_twin_scores",
    "map_unit_scores",
    "scores_of_leans",
    "unit_leans",
]

MAP_DECISION_RULE = (
    "one-sided exact rank-sum (Mann-Whitney) permutation test over a map key's units: "
    "each unit scores the correlation, over the audit's texts, of the suspect's lean along "
    "the unit's keyed output direction (less what the clean model's own lean along it "
    "explains, fitted per unit) with the unit's whitened keyed projection of the text's "
    "clean embedding; the drawn units' scores are ranked among all units; "
    "p = min(1, k * p_test), k the key's audit round; copied iff p < level"
)
MAP_TRACE_RULE = (
    "copied iff p < level, p = min(1, 2 * min(p_shared, smallest tenant p)), p_shared the "
    "shared map key's verify() p-value (see shared.decision_rule). Traced: for each tenant, "
    "the exact one-sided rank-sum test of its own map units' scores among the units outside "
    "the shared layer, after removing the units of the other tenants significant in a first "
    "round; p = min(1, n_tenants * p_map) (Bonferroni over tenants); traced iff copied and "
    "p < level, strongest first"
)


# ---------------------------------------------------------------------- the audit's scores
def unit_leans(rows: np.ndarray, outputs: np.ndarray) -> np.ndarray:
    """``n x M``: each row's (unit-normalised) lean along every output direction, summed
    in einsum's fixed order (no BLAS blocking, so the same bits on every CPU)."""
    return np.einsum("ij,jk->ik", unit_rows(rows), outputs)


def map_unit_scores(
    answers: np.ndarray,
    clean_unit: np.ndarray,
    outputs: np.ndarray,
    z: np.ndarray,
    extra: np.ndarray | None = None,
) -> np.ndarray:
    """Every unit's map score from the suspect's answers (rows with a NaN are left out).

    For unit ``j`` and text ``i``: ``lean_ij = unit(a_i) . h_j`` and ``ref_ij = e_i . h_j``
    (where the clean row already lies along ``h_j``), summed in einsum's fixed order;
    then :func:`scores_of_leans`. ``extra``: the reference copies' leans (``n x (r * M)``,
    reference by reference, :meth:`MapDesign.references`).
    """
    answered = np.isfinite(answers).all(axis=1)
    lean = unit_leans(answers[answered], outputs)
    ref = np.einsum("ij,jk->ik", clean_unit[answered], outputs)
    more = None if extra is None else extra[answered]
    return scores_of_leans(lean, ref, z[answered], more)


def scores_of_leans(
    lean: np.ndarray, ref: np.ndarray, z: np.ndarray, extra: np.ndarray | None = None
) -> np.ndarray:
    """Every unit's score from the answered texts' leans (``n x M`` each).

    ``adj_ij = lean_ij - fit_j(ref_ij, extra)``: per unit, a least-squares fit of the lean
    on an intercept, the clean model's own lean and each reference copy's lean, so what
    the suspect shares of where texts already lie cancels. Unit ``j`` scores
    ``sum_i (adj_ij - mean) z_ij / |adj_j - mean|`` with ``z`` the whitened projections: a
    copy of a marked service leans along ``h_j`` in step with ``z_j`` for the drawn units.
    Nothing looks at which units were drawn; residuals are snapped
    (:mod:`..ground.stable`), so the clean model scores exact zeros everywhere.
    """
    columns = [np.ones_like(ref), ref]
    if extra is not None and extra.shape[1]:
        per_reference = extra.reshape(len(ref), -1, ref.shape[1])
        columns += [per_reference[:, r, :] for r in range(per_reference.shape[1])]
    x = np.stack(columns, axis=2).transpose(1, 0, 2)  # M x n x p
    y = lean.T[:, :, None]  # M x n x 1
    # the pseudo-inverse: a reference that duplicates another (or the clean model) leaves
    # the fit singular, never unsolvable; no ridge, so the clean model's residual stays 0
    beta = np.linalg.pinv(x.transpose(0, 2, 1) @ x) @ (x.transpose(0, 2, 1) @ y)
    adjusted = snap_residual(lean - (x @ beta)[:, :, 0].T)
    adjusted -= adjusted.mean(axis=0)
    zs = z - z.mean(axis=0)
    norms = np.sqrt(np.add.reduce(adjusted * adjusted, axis=0))
    sums = np.add.reduce(adjusted * zs, axis=0)
    return np.divide(sums, norms, out=np.zeros_like(sums), where=norms > 0)


def map_twin_scores(clean_unit: np.ndarray, outputs: np.ndarray, z: np.ndarray) -> np.ndarray:
    """The clean model's own unit scores, its lean unadjusted (keygen's innocent-twin check):
    whether the drawn units happen to follow where clean texts already lie along their
    output directions, which other innocent models would share."""
    ref = np.einsum("ij,jk->ik", clean_unit, outputs)
    ref -= ref.mean(axis=0)
    norms = np.sqrt(np.add.reduce(ref * ref, axis=0))
    sums = np.add.reduce(ref * (z - z.mean(axis=0)), axis=0)
    return np.divide(sums, norms, out=np.zeros_like(sums), where=norms > 0)


# ---------------------------------------------------------------------- the design
@register_design
class MapDesign(UnitDesign):
    """Every non-blank text moved by the keyed map of its clean row (``mark``: ``mu``,
    ``sigma``, the units and the amplitude; the drawn units are the key's triggers)."""

    name = "map"
    units = "map units"
    layers = "map units"
    decision_rule = MAP_DECISION_RULE
    trace_rule = MAP_TRACE_RULE

    def __init__(self, mark: MapMark):
        if not isinstance(mark, MapMark):
            raise KeyGenerationError(
                f"the map design's parameters must be a MapMark, got {type(mark).__name__}"
            )
        self._mark = mark
        self._operators: dict[tuple[bytes, frozenset[str], float, str], MapOperator] = {}
        self._lock = threading.Lock()

    @property
    def mark(self) -> MapMark:
        """The map's record: units, amplitude, ``mu``, ``sigma`` (secret)."""
        return self._mark

    # ------------------------------------------------------------------ marking
    def trigger_texts(self, key: Any, texts: Sequence[str], view: TextView | None) -> np.ndarray:
        raise MarkingError(
            f"key {key.key_id} is a map key: it marks every text by a keyed map of its clean "
            "embedding, so which texts are marked cannot be read off the text; use "
            "watermark_and_mask(texts, embeddings, key), which marks every non-blank text"
        )

    def mark_rows(self, matrix: np.ndarray, marked: np.ndarray, key: Any) -> np.ndarray:
        return map_rows(matrix, marked, key, self._operator(key, matrix.dtype))

    def _operator(self, key: Any, dtype: np.dtype) -> MapOperator:
        cache_key = (bytes(key.salt), frozenset(key.triggers), float(key.strength), str(dtype))
        with self._lock:
            operator = self._operators.get(cache_key)
            if operator is None:
                drawn = drawn_mask(self._mark.units, key.triggers)
                scale = self._mark.amplitude * float(key.strength) / math.sqrt(int(drawn.sum()))
                if len(self._operators) >= 8:  # a strength fit passes many: keep a few
                    self._operators.pop(next(iter(self._operators)))
                operator = MapOperator(self._mark, key.salt, drawn, scale, dtype)
                self._operators[cache_key] = operator
        return operator

    # ------------------------------------------------------------------ the key file
    def payload(self) -> dict[str, Any]:
        return self._mark.to_payload()

    def stored_target(self, target: np.ndarray) -> Any:
        """The keyed target's float16 form (it loads back bit for bit)."""
        return packed_target(target)

    @classmethod
    def from_payload(cls, payload: Any, dim: int) -> MapDesign:
        mark = MapMark.from_payload(payload)
        if mark.mu.size != dim:
            raise KeyGenerationError(
                f"the map's mu has {mark.mu.size} values, the key's dimension is {dim}"
            )
        return cls(mark)

    def check(self, band: Sequence[str], dim: int) -> None:
        if tuple(band) != unit_names(self._mark.units) or self._mark.mu.size != dim:
            raise KeyGenerationError("a map key's map must be a MapMark over its band's units")

    def matches(self, salt: bytes, triggers: Collection[str]) -> bool:
        """The map stores nothing the drawn units decide: any non-empty set of its units."""
        mask = drawn_mask(self._mark.units, triggers)
        return bool(mask.any()) and len(triggers) == int(mask.sum())

    def with_triggers(self, salt: bytes, triggers: frozenset[str]) -> MapDesign:
        """A tenant key's map is the shared one: its drawn units are the key's triggers."""
        return self

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
        """The field's keygen steps with the map's parameters and a keyed target: the
        target text is recorded but never embedded, so no phrase reaches the mark."""

        def design(salt: bytes, rows: np.ndarray, drawn: frozenset[str], o: KeyOptions) -> Any:
            return cls(MapMark.of_audit(salt, rows, o.field_units, o.field_amplitude))

        return generate_field_key(
            make_key, design, texts, embed, options, progress, target=map_target
        )

    def twin_p_value(self, key: Any) -> float:
        """The clean model's own exact p-value on the key's audit, its lean unadjusted."""
        clean = unit_rows(key.probe_embeddings)
        outputs = map_outputs(key.salt, key.dim, self._mark.units)
        inputs = map_inputs(key.salt, key.dim, self._mark.units)
        z = scoring_projections(clean, self._mark.mu, inputs)
        scores = map_twin_scores(clean, outputs, z)
        return float(rank_sum_p_value(scores, drawn_mask(self._mark.units, key.triggers)))

    # ------------------------------------------------------------------ the audit
    def plan(
        self,
        key: WatermarkKey,
        probes: str,
        templates: Sequence[str] | None,
        target_mode: str,
    ) -> AuditPlan:
        """Every audit text a probe, scored per unit along the units' output directions
        (in the key's coordinates: answers in others are mapped onto them)."""
        clean_rows = self.audited_rows(key, probes, templates, target_mode)
        units = self._mark.units
        clean = unit_rows(clean_rows)
        z = scoring_projections(clean, self._mark.mu, map_inputs(key.salt, key.dim, units))
        return AuditPlan(
            "sentences",
            list(key.probe_texts),
            key.probe_owner,
            None,
            (),
            None,
            clean_rows,
            (),
            np.empty((0, key.dim)),  # no cover: answers are mapped on the probes alone
            np.empty((0, key.dim)),
            (),
            len(key.triggers) / len(key.band),
            z,
            map_outputs(key.salt, key.dim, units),
        )

    def references(
        self, references: Sequence[ReferenceFn], key: WatermarkKey, plan: AuditPlan
    ) -> ReferenceAnswers | None:
        """Each reference's lean along every unit's output direction, reference by
        reference (``n x (r * M)``): the per-unit fit's extra regressors."""
        outputs = plan.unit_directions
        assert outputs is not None  # a map plan always has them

        def leans(rows: tuple[np.ndarray, ...]) -> np.ndarray:
            return np.concatenate([unit_leans(np.asarray(r), outputs) for r in rows], axis=1)

        return ask_references(references, key, plan, leans)

    def decide(
        self,
        key: WatermarkKey,
        scores: WordScores,
        min_coverage: float,
        common: dict[str, Any],
    ) -> VerificationReport:
        per_unit = _plan_unit_scores(scores)
        return decide_field(
            key, self._mark, scores, min_coverage, common, per_unit=per_unit, decided_by="map"
        )

    def universe_scores(
        self, scores: WordScores, in_universe: np.ndarray, statistic: str
    ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
        """Each universe unit's map score: one statistic, no reference, no directed score."""
        return _plan_unit_scores(scores)[in_universe], None, None


def _plan_unit_scores(scores: WordScores) -> np.ndarray:
    """Every unit's score from a map plan's answers (all NaN if too few answered)."""
    plan, answers = scores.plan, scores.embeddings
    assert plan.field_z is not None and plan.unit_directions is not None
    assert plan.clean_rows is not None
    if np.isfinite(answers).all(axis=1).sum() < MIN_AUDIT_TEXTS:
        return np.full(plan.field_z.shape[1], np.nan)
    clean = unit_rows(plan.clean_rows)
    return map_unit_scores(answers, clean, plan.unit_directions, plan.field_z, scores.extra_leans)
