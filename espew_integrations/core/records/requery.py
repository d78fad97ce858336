"""Re-asking the suspect: are a transcript's answers the suspect's own?

A transcript's chain proves only that nobody edited it after its author chained
it; its author can chain anything. An arbiter who distrusts the auditor can ask
the suspect itself: :func:`requery` sends it again a random subset of the texts
the transcript records and compares each answer with the recorded one.

- **Keyed by the arbiter.** The subset is drawn from a seed the arbiter gives
  (or a fresh one, printed), uniformly over every answered text, so the auditor
  cannot know in advance which records will be checked, and the suspect learns
  nothing about the triggers from which texts come again.
- **A stated tolerance.** Embedding services are deterministic up to float
  noise (another batch, another order, another thread count):
  :data:`DEFAULT_REQUERY_TOLERANCE` bounds the relative L2 distance
  ``||answer - recorded|| / ||recorded||`` with a wide margin over the noise
  measured on the bundled models and ``espew serve``, and far below what a
  watermark moves (docs/research/measurements.md, "Re-asking the suspect").
- **What it proves.** If a fraction ``f`` of the recorded answers is not what
  the suspect answers, ``k`` texts re-asked miss every one of them with
  probability at most ``(1 - f) ** k`` (:meth:`Requery.escape_chance`). A
  mismatch says the recorded answers are not what the suspect answers *now*:
  forged, or the suspect's model changed since (its answers' ``model`` field
  tells a new version); the arbiter weighs which.

Standard library and numpy only, like the rest of the core.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..audit.settings import SuspectFn
from ..ground.defaults import DEFAULT_BATCH_SIZE
from ..ground.errors import InputError
from ..ground.untrusted import printable
from .transcript import Transcript, TranscriptError, decode_answer

__all__ = [
    "DEFAULT_REQUERY_SIZE",
    "DEFAULT_REQUERY_TOLERANCE",
    "Requery",
    "answer_distances",
    "draw_requery",
    "recorded_answers",
    "requery",
]

#: Texts re-asked by default: cheap for the suspect, and each one a fresh chance to
#: catch a forged answer (raise it in a dispute: ``size=None`` re-asks every text).
DEFAULT_REQUERY_SIZE = 32
#: Largest relative L2 distance ``||a - r|| / ||r||`` between a re-asked answer and the
#: recorded one that still counts as the same answer: a wide margin over the float
#: noise measured on the bundled models and ``espew serve``, far below a watermark's
#: move of an answer (docs/research/measurements.md).
DEFAULT_REQUERY_TOLERANCE = 1e-4


def answer_distances(recorded: np.ndarray, answers: np.ndarray) -> np.ndarray:
    """Per row, ``||answers - recorded|| / ||recorded||`` (inf where a row cannot match:
    another dimension, a non-finite value, a zero recorded row)."""
    recorded = np.asarray(recorded, dtype=np.float64)
    answers = np.asarray(answers, dtype=np.float64)
    if recorded.shape != answers.shape:
        return np.full(len(recorded), np.inf)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        distance = np.linalg.norm(answers - recorded, axis=1) / np.linalg.norm(recorded, axis=1)
    return np.where(np.isfinite(distance), distance, np.inf)


@dataclasses.dataclass(frozen=True)
class RecordedAnswers:
    """Every usable recorded answer row: its text, the record it is in, and the row."""

    texts: tuple[str, ...]
    records: np.ndarray  # the record number of each row
    rows: np.ndarray  # (n, d) float64


def recorded_answers(transcript: Transcript) -> RecordedAnswers:
    """The transcript's answered texts and their answers (finite, non-zero rows only:
    a row the suspect failed is no evidence, so there is nothing to re-ask it for)."""
    texts: list[str] = []
    numbers: list[int] = []
    rows: list[np.ndarray] = []
    for record in transcript.batches:
        if record.get("kind") != "batch" or "answer" not in record:
            continue
        try:
            answer = decode_answer(record["answer"])
        except TranscriptError:
            continue
        batch = record.get("texts") or []
        if answer.ndim != 2 or len(answer) != len(batch):
            continue
        usable = np.isfinite(answer).all(axis=1) & answer.any(axis=1)
        for text, row, ok in zip(batch, answer, usable, strict=True):
            if ok and isinstance(text, str):
                texts.append(text)
                numbers.append(int(record.get("record", -1)))
                rows.append(row)
    dims = {row.shape[0] for row in rows}
    if len(dims) > 1:  # a suspect that changed dimension mid-audit: keep the first one's
        first = rows[0].shape[0]
        keep = [i for i, row in enumerate(rows) if row.shape[0] == first]
        texts, numbers, rows = (
            [texts[i] for i in keep],
            [numbers[i] for i in keep],
            [rows[i] for i in keep],
        )
    matrix = np.stack(rows) if rows else np.zeros((0, 0))
    return RecordedAnswers(tuple(texts), np.asarray(numbers, dtype=np.int64), matrix)


def draw_requery(n_rows: int, size: int | None, seed: int) -> np.ndarray:
    """Which of ``n_rows`` recorded answers to re-ask: ``size`` of them (all for None),
    uniformly without replacement, from ``seed``; sorted."""
    if size is not None and size < 1:
        raise InputError(f"the requery size must be >= 1 (or None for every text), got {size}")
    take = n_rows if size is None else min(size, n_rows)
    rng = np.random.default_rng(np.random.SeedSequence(seed))
    return np.sort(rng.choice(n_rows, size=take, replace=False))


@dataclasses.dataclass(frozen=True)
class Requery:
    """What :func:`requery` found: the texts re-asked and the records whose answers did
    not match within ``tolerance`` (``mismatched``, record numbers, with the largest
    distance seen); ``error`` when the suspect could not be asked."""

    suspect: str
    seed: int
    n_asked: int
    n_answered: int
    tolerance: float
    mismatched: tuple[int, ...] = ()
    n_rows_mismatched: int = 0
    largest_distance: float = 0.0
    error: str = ""

    @property
    def matched(self) -> bool:
        """Every re-asked text was answered, as recorded, within the tolerance."""
        return (
            not self.error
            and self.n_asked > 0
            and self.n_answered == self.n_asked
            and not self.mismatched
        )

    def escape_chance(self, fraction: float) -> float:
        """The most a forgery that changed ``fraction`` of the answers could hope to
        escape this requery by luck: ``(1 - fraction) ** n_asked``."""
        return float((1.0 - fraction) ** self.n_asked)

    def describe(self) -> str:
        """One line for the evidence check's report."""
        asked = f"{self.n_asked} recorded texts re-asked of {self.suspect} (seed {self.seed})"
        if self.error:
            return f"{asked}: the suspect could not be asked: {self.error}"
        unanswered = self.n_asked - self.n_answered
        if unanswered and not self.mismatched:
            return f"{asked}: {unanswered} were not answered (a fault proves nothing either way)"
        if self.mismatched:
            shown = ", ".join(str(n) for n in self.mismatched[:20])
            more = f" and {len(self.mismatched) - 20} more" * (len(self.mismatched) > 20)
            return (
                f"{asked}: {self.n_rows_mismatched} answers differ from the recorded ones by "
                f"more than {self.tolerance:g} (relative L2, largest {self.largest_distance:.3g})"
                f", in records {shown}{more}"
            )
        return (
            f"{asked}: all {self.n_asked} answered as recorded, within {self.tolerance:g} "
            f"(relative L2, largest {self.largest_distance:.3g})"
        )


def requery(
    transcript: Transcript,
    suspect: SuspectFn,
    *,
    size: int | None = DEFAULT_REQUERY_SIZE,
    seed: int | None = None,
    tolerance: float = DEFAULT_REQUERY_TOLERANCE,
    batch_size: int = DEFAULT_BATCH_SIZE,
    suspect_name: str = "",
) -> Requery:
    """Ask ``suspect`` again ``size`` of the texts ``transcript`` records (every one for
    None), drawn from ``seed`` (a fresh random one when None), and compare its answers
    with the recorded ones within ``tolerance`` (relative L2).

    Raises ``ValueError`` for a bad size or tolerance; a suspect that fails is
    recorded in ``Requery.error`` (nothing was proved, nothing was disproved).
    """
    if not 0.0 <= tolerance < np.inf:
        raise InputError(f"the requery tolerance must be a finite number >= 0, got {tolerance}")
    seed = secrets.randbits(63) if seed is None else int(seed)
    recorded = recorded_answers(transcript)
    chosen = draw_requery(len(recorded.texts), size, seed)
    texts = [recorded.texts[i] for i in chosen]
    found: dict[str, Any] = dict(
        suspect=suspect_name or "the suspect", seed=seed, tolerance=tolerance
    )
    if not texts:
        return Requery(**found, n_asked=0, n_answered=0, error="the transcript holds no answer")
    try:
        answers = _asked(suspect, texts, batch_size)
    except Exception as exc:  # the suspect's fault: nothing proved either way
        error = printable(f"{type(exc).__name__}: {exc}")
        return Requery(**found, n_asked=len(texts), n_answered=0, error=error)
    distance = answer_distances(recorded.rows[chosen], answers)
    answered = np.isfinite(answers).all(axis=1) & answers.any(axis=1)
    bad = answered & (distance > tolerance)
    records = tuple(sorted(set(recorded.records[chosen][bad].tolist())))
    largest = float(distance[answered].max()) if answered.any() else 0.0
    return Requery(
        **found,
        n_asked=len(texts),
        n_answered=int(answered.sum()),
        mismatched=records,
        n_rows_mismatched=int(bad.sum()),
        largest_distance=largest,
    )


def _asked(suspect: SuspectFn, texts: Sequence[str], batch_size: int) -> np.ndarray:
    """The suspect's answers to ``texts``, in batches, as float64 rows."""
    parts = []
    for start in range(0, len(texts), batch_size):
        batch = list(texts[start : start + batch_size])
        part = np.asarray(suspect(batch), dtype=np.float64)
        if part.ndim != 2 or len(part) != len(batch):
            raise InputError(f"answered shape {part.shape} for a batch of {len(batch)} texts")
        parts.append(part)
    dims = {part.shape[1] for part in parts}
    if len(dims) != 1:
        raise InputError(f"answered mixed dimensions {sorted(dims)}")
    return np.concatenate(parts)
