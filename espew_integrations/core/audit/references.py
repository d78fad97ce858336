"""The auditor's reference copies, asked for a field audit's texts and recorded for its replay.

Why apart from the asking: a reference (:mod:`..stats.references`) is not the
suspect. It is asked once, before the suspect, for the plan's texts; its rows must
be in the key's coordinates (its dimension is the key's) and finite, one per text,
or the audit stops with an :class:`~..ground.errors.InputError` naming the reference.
Only a field key uses them (:func:`..mark.field.field_scores`); a word key's
statistics have no place for them, so they are not asked.

How a replay re-runs the same statistic: the transcript's header keeps every
reference's name and its exact rows (:func:`recorded_references`), and the report
carries ``reference_names`` and ``references_sha256`` (:func:`references_digest`).
The evidence check answers the replayed audit's references from those rows
(:func:`replayed_references`). That proves the verdict follows from the recorded
answers *and* reference rows; it does not prove the references were built without
the key: an arbiter rebuilds them from their recipe and compares the digest.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..ground.errors import InputError
from ..keys.key import WatermarkKey
from .options import reference_name
from .plan import AuditPlan
from .settings import ReferenceFn

__all__ = [
    "ReferenceAnswers",
    "ask_references",
    "recorded_references",
    "references_digest",
    "replayed_references",
]

_DIGEST_DOMAIN = b"espew-references-v1"


@dataclasses.dataclass(frozen=True)
class ReferenceAnswers:
    """What the references answered for a plan's texts: names, rows and each text's leans."""

    names: tuple[str, ...]
    rows: tuple[np.ndarray, ...]
    leans: np.ndarray  # n_texts x n_references (field.reference_leans; a map key's per unit)

    @property
    def digest(self) -> str:
        """:func:`references_digest` of the names and rows."""
        return references_digest(self.names, self.rows)


def ask_references(
    references: Sequence[ReferenceFn],
    key: WatermarkKey,
    plan: AuditPlan,
    leans: Callable[[tuple[np.ndarray, ...]], np.ndarray],
) -> ReferenceAnswers | None:
    """Every reference's rows for the plan's texts, checked (None: none). The design asks
    (:meth:`..mark.design.MarkingDesign.references`): a word key's statistics have no
    place for them. ``leans`` turns the rows into the design's regressors (the field's: each
    text's lean along its own mark direction, :func:`..mark.field.reference_leans`)."""
    if not references:
        return None
    names = tuple(reference_name(r) for r in references)
    rows = tuple(
        _checked_rows(name, reference(list(plan.texts)), len(plan.texts), key.dim)
        for name, reference in zip(names, references, strict=True)
    )
    return ReferenceAnswers(names, rows, leans(rows))


def _checked_rows(name: str, answer: Any, n_texts: int, dim: int) -> np.ndarray:
    try:
        rows = np.array(answer, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError(f"reference {name!r} did not answer an array of numbers") from None
    if rows.ndim != 2 or rows.shape[0] != n_texts:
        raise InputError(
            f"reference {name!r} answered shape {rows.shape}, not one row per audit text "
            f"({n_texts} rows)"
        )
    if rows.shape[1] != dim:
        raise InputError(
            f"reference {name!r} answers {rows.shape[1]}-dimensional rows, not the key's "
            f"{dim}: a reference maps into the clean service's coordinates"
        )
    if not np.isfinite(rows).all():
        raise InputError(f"reference {name!r} answered a NaN or infinite value")
    if not (np.abs(rows).max(axis=1) > 0).all():
        raise InputError(f"reference {name!r} answered a zero row, which has no direction")
    return rows


def references_digest(names: Sequence[str], rows: Sequence[np.ndarray]) -> str:
    """``sha256:`` over every reference's name and exact float64 rows, in order."""
    digest = hashlib.sha256(_DIGEST_DOMAIN)
    for name, matrix in zip(names, rows, strict=True):
        encoded = name.encode("utf-8")
        digest.update(len(encoded).to_bytes(4, "big") + encoded)
        values = np.ascontiguousarray(matrix, dtype="<f8")
        digest.update(np.asarray(values.shape, dtype="<i8").tobytes() + values.tobytes())
    return f"sha256:{digest.hexdigest()}"


def recorded_references(
    answers: ReferenceAnswers | None, encode: Callable[[Any], dict[str, Any]]
) -> dict[str, Any]:
    """The transcript header's ``references`` field: names, exact rows (``encode``, the
    transcript's answer codec) and digest; empty without references."""
    if answers is None:
        return {}
    return {
        "references": {
            "names": list(answers.names),
            "rows": [encode(r) for r in answers.rows],
            "sha256": answers.digest,
        }
    }


class _Recorded:
    """A recorded reference: answers the replayed audit's texts with the recorded rows."""

    def __init__(self, name: str, rows: np.ndarray):
        self.name = name
        self._rows = rows

    def __call__(self, texts: list[str]) -> np.ndarray:
        if len(texts) != len(self._rows):
            raise InputError(
                f"reference {self.name!r} was recorded for {len(self._rows)} texts, the "
                f"replay asks {len(texts)}"
            )
        return self._rows


def replayed_references(
    header: Mapping[str, Any], decode: Callable[[Mapping[str, Any]], np.ndarray]
) -> tuple[ReferenceFn, ...]:
    """The references of a transcript's header as callables answering the recorded rows
    (``decode``: the transcript's answer codec); InputError when they do not match
    their recorded digest."""
    recorded = header.get("references")
    if not recorded:
        return ()
    names = [str(n) for n in recorded.get("names") or []]
    rows = [decode(r) for r in recorded.get("rows") or []]
    if len(names) != len(rows) or references_digest(names, rows) != recorded.get("sha256"):
        raise InputError("the transcript's reference rows do not match their recorded digest")
    return tuple(_Recorded(n, r) for n, r in zip(names, rows, strict=True))
