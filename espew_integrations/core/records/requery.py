"""Re-asking the suspect: are a transcript's answers the suspect's own?

A transcript's chain proves only that nobody edited it after its author chained
it; its author can chain anything. An arbiter who distrusts the auditor can ask
the suspect itself: :func:`requery` sends it again a random subset of the texts
the transcript records and judges each answer against the recorded one, within
what the suspect's own repeat noise explains.

- **Keyed by the arbiter.** The subset is drawn from a seed the arbiter gives
  (or a fresh one, printed), uniformly over every answered text, so the auditor
  cannot know in advance which records will be checked, and the suspect learns
  nothing about the triggers from which texts come again.
- **Sized for a target.** By default as many texts are re-asked as it takes for
  a forgery of :data:`DEFAULT_FORGED_FRACTION` of the answers to escape with
  probability at most :data:`DEFAULT_ESCAPE_CHANCE`: the smallest ``n`` whose
  hypergeometric chance of drawing no forged answer is below it
  (:func:`requery_size_for`); :meth:`Requery.escape_chance` gives that chance for
  the size used and any fraction.
- **Judged on the suspect's own noise.** A service may answer a little
  differently each time (another batch, a float16 rounding, added noise). The
  requery measures that: :data:`DEFAULT_REPEAT_SIZE` of the re-asked texts are
  asked a second time in other batches, and the distances between the two
  answers are the suspect's repeat noise. A re-asked answer is *discrepant*
  when its distance to the recorded one is beyond :data:`NOISE_MARGIN` times the
  largest repeat distance (and beyond the floor ``tolerance``, the float noise
  of a deterministic service); and the re-asked distances as a whole must not
  sit above the repeat distances (a one-sided Mann-Whitney test at
  :data:`NOISE_TEST_LEVEL`), which catches a forger that nudged every answer
  within the per-answer margin.
- **What it proves.** If a fraction ``f`` of the recorded answers is not what the
  suspect answers, the requery misses every one of them with the hypergeometric
  chance :meth:`Requery.escape_chance`. A discrepancy says the recorded answers
  are not what the suspect answers *now*: forged, or the suspect's model changed
  since (its answers' ``model`` field tells a new version); the arbiter weighs
  which. The re-asked answers themselves are kept (:attr:`Requery.answers`) so
  that the evidence check can re-derive the verdict from them.

Standard library, numpy and scipy only, like the rest of the core.
"""

from __future__ import annotations

import dataclasses
import math
import secrets
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from scipy import stats

from ..audit.settings import SuspectFn
from ..ground.defaults import DEFAULT_BATCH_SIZE
from ..ground.errors import InputError
from ..ground.untrusted import printable
from .findings import Findings
from .transcript import Transcript, TranscriptError, decode_answer

__all__ = [
    "DEFAULT_ESCAPE_CHANCE",
    "DEFAULT_FORGED_FRACTION",
    "DEFAULT_REPEAT_SIZE",
    "DEFAULT_REQUERY_SIZE",
    "DEFAULT_REQUERY_TOLERANCE",
    "INDISTINCT_BOUND",
    "NOISE_MARGIN",
    "NOISE_TEST_LEVEL",
    "Requery",
    "RequerySize",
    "answer_distances",
    "draw_requery",
    "escape_chance",
    "recorded_answers",
    "requery",
    "requery_findings",
    "requery_size_for",
]

#: How many texts to re-ask: a number, ``"auto"`` (sized for the default target,
#: :func:`requery_size_for`) or ``None`` / ``"all"`` for every recorded text.
RequerySize = int | Literal["auto", "all"] | None
#: Texts re-asked by default: sized from the target below (:func:`requery_size_for`).
DEFAULT_REQUERY_SIZE: RequerySize = "auto"
#: The forgery the default size is chosen to catch: this fraction of the answers forged...
DEFAULT_FORGED_FRACTION = 0.01
#: ...escapes the default requery with at most this probability: ten times below the
#: 1% the target asks, so that "at least 99 of 100 requeries catch it" holds of nearly
#: every 100 requeries, not of three in four (at 1%, two or more of 100 escape with
#: probability 0.26).
DEFAULT_ESCAPE_CHANCE = 0.001
#: Re-asked texts asked a second time, in other batches, to measure the suspect's noise.
DEFAULT_REPEAT_SIZE = 32
#: A re-asked answer is discrepant beyond this many times the largest repeat distance:
#: a repeat distance is a draw of the same noise a genuine answer shows, and a forged
#: answer (another service's, a watermarked one) sits orders of magnitude further off
#: (docs/research/measurements.md, "Re-asking the suspect").
NOISE_MARGIN = 8.0
#: The level at which the re-asked distances, taken together, sit above the repeat
#: distances (one-sided Mann-Whitney): every answer nudged within the per-answer margin.
NOISE_TEST_LEVEL = 1e-3
#: A per-answer bound this wide or wider cannot tell a forged answer from the suspect's
#: noise: the watermark moves a marked answer by about twice this (relative L2,
#: docs/research/measurements.md, "Re-asking the suspect").
INDISTINCT_BOUND = 0.05
#: Floor of the per-answer threshold, relative L2 ``||a - r|| / ||r||``: a deterministic
#: service repeats bit for bit (repeat distance 0), and this is the float noise that
#: another machine's arithmetic may still add (docs/research/measurements.md).
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


def escape_chance(n_rows: int, n_asked: int, fraction: float) -> float:
    """The chance that ``n_asked`` of ``n_rows`` answers, drawn without replacement,
    include none of a forged ``fraction`` of them (at least one answer forged):
    hypergeometric."""
    if n_rows < 1:
        return 1.0
    forged = min(n_rows, max(1, math.ceil(fraction * n_rows - 1e-9)))
    asked = min(max(n_asked, 0), n_rows)
    return float(stats.hypergeom.pmf(0, n_rows, forged, asked))


def requery_size_for(
    n_rows: int,
    fraction: float = DEFAULT_FORGED_FRACTION,
    escape: float = DEFAULT_ESCAPE_CHANCE,
) -> int:
    """The fewest of ``n_rows`` answers to re-ask so that a forgery of ``fraction`` of
    them escapes with probability at most ``escape`` (every answer if none fewer does)."""
    if not (0.0 < fraction <= 1.0 and 0.0 < escape < 1.0):
        raise InputError(
            f"the forged fraction must be in (0, 1] and the escape chance in (0, 1), "
            f"got {fraction} and {escape}"
        )
    if n_rows < 1:
        return 0
    forged = min(n_rows, max(1, math.ceil(fraction * n_rows - 1e-9)))
    # P(none of the forged among the first n) = prod_{i<n} (N - K - i) / (N - i)
    i = np.arange(n_rows - forged + 1, dtype=np.float64)
    with np.errstate(divide="ignore"):
        chance = np.cumprod(np.maximum(n_rows - forged - i, 0.0) / (n_rows - i))
    return int(min(n_rows, np.searchsorted(-chance, -escape, side="left") + 1))


@dataclasses.dataclass(frozen=True)
class RecordedAnswers:
    """Every usable recorded answer row: its text, the record it is in, its row in that
    record's answer, and the row."""

    texts: tuple[str, ...]
    records: np.ndarray  # the record number of each row
    rows: np.ndarray  # (n, d) float64
    positions: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))


def recorded_answers(transcript: Transcript) -> RecordedAnswers:
    """The transcript's answered texts and their answers (finite, non-zero rows only:
    a row the suspect failed is no evidence, so there is nothing to re-ask it for)."""
    texts: list[str] = []
    numbers: list[int] = []
    positions: list[int] = []
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
        for position, (text, row, ok) in enumerate(zip(batch, answer, usable, strict=True)):
            if ok and isinstance(text, str):
                texts.append(text)
                numbers.append(int(record.get("record", -1)))
                positions.append(position)
                rows.append(row)
    dims = {row.shape[0] for row in rows}
    if len(dims) > 1:  # a suspect that changed dimension mid-audit: keep the first one's
        first = rows[0].shape[0]
        keep = [i for i, row in enumerate(rows) if row.shape[0] == first]
        texts, numbers, positions, rows = (
            [texts[i] for i in keep],
            [numbers[i] for i in keep],
            [positions[i] for i in keep],
            [rows[i] for i in keep],
        )
    matrix = np.stack(rows) if rows else np.zeros((0, 0))
    return RecordedAnswers(
        tuple(texts),
        np.asarray(numbers, dtype=np.int64),
        matrix,
        np.asarray(positions, dtype=np.int64),
    )


def draw_requery(n_rows: int, size: RequerySize, seed: int) -> np.ndarray:
    """Which of ``n_rows`` recorded answers to re-ask: ``size`` of them (every one for
    None or "all", :func:`requery_size_for` for "auto"), uniformly without replacement,
    from ``seed``; sorted."""
    take = _size(n_rows, size)
    rng = np.random.default_rng(np.random.SeedSequence(seed))
    return np.sort(rng.choice(n_rows, size=take, replace=False))


def _size(n_rows: int, size: RequerySize) -> int:
    if size is None or size == "all":
        return n_rows
    if size == "auto":
        return requery_size_for(n_rows)
    if isinstance(size, bool) or not isinstance(size, int | np.integer) or size < 1:
        raise InputError(
            f"the requery size must be an integer >= 1, 'auto' or 'all' (None), got {size!r}"
        )
    return min(int(size), n_rows)


@dataclasses.dataclass(frozen=True)
class Requery:
    """What :func:`requery` found.

    ``n_asked`` of the ``n_rows`` recorded answers were re-asked (``chosen``, indices
    into :func:`recorded_answers`; their answers in ``answers``), ``n_repeated`` of
    them twice to measure the suspect's repeat noise (largest repeat distance
    ``repeat_largest``). ``threshold`` is the per-answer bound that noise sets;
    ``mismatched`` are the records holding a discrepant answer (``n_rows_mismatched``
    rows, the largest distance ``largest_distance``); ``noise_p`` is the one-sided
    Mann-Whitney p-value that the re-asked distances sit above the repeat ones
    (1.0 when both are within the floor). ``error`` when the suspect could not be asked.
    """

    suspect: str
    seed: int
    n_asked: int
    n_answered: int
    tolerance: float
    mismatched: tuple[int, ...] = ()
    n_rows_mismatched: int = 0
    largest_distance: float = 0.0
    error: str = ""
    n_rows: int = 0
    n_repeated: int = 0
    repeat_largest: float = 0.0
    threshold: float = 0.0
    noise_p: float = 1.0
    chosen: np.ndarray = dataclasses.field(
        default_factory=lambda: np.zeros(0, np.int64), repr=False, compare=False
    )
    answers: np.ndarray = dataclasses.field(
        default_factory=lambda: np.zeros((0, 0)), repr=False, compare=False
    )

    @property
    def shifted(self) -> bool:
        """The re-asked answers, taken together, sit further from the record than the
        suspect's own repeat noise explains (``noise_p`` below :data:`NOISE_TEST_LEVEL`)."""
        return self.noise_p < NOISE_TEST_LEVEL

    @property
    def matched(self) -> bool:
        """Every re-asked text was answered as recorded, within the suspect's noise."""
        return (
            not self.error
            and self.n_asked > 0
            and self.n_answered == self.n_asked
            and not self.mismatched
            and not self.shifted
        )

    def escape_chance(self, fraction: float) -> float:
        """The chance that a forgery of ``fraction`` of the recorded answers (at least
        one) escaped this requery: no forged answer among those re-asked
        (hypergeometric over ``n_rows``)."""
        return escape_chance(self.n_rows or self.n_asked, self.n_asked, fraction)

    def describe(self) -> str:
        """One line for the evidence check's report."""
        asked = (
            f"{self.n_asked} of {self.n_rows} recorded texts re-asked of {self.suspect} "
            f"(seed {self.seed})"
        )
        if self.error:
            return f"{asked}: the suspect could not be asked: {self.error}"
        noise = (
            f"repeat noise {self.repeat_largest:.3g} at most over {self.n_repeated} texts asked "
            f"twice, so an answer counts as recorded within {self.threshold:.3g} (relative L2)"
        )
        unanswered = self.n_asked - self.n_answered
        if unanswered and not self.mismatched:
            return f"{asked}: {unanswered} were not answered (a fault proves nothing either way)"
        if self.mismatched:
            shown = ", ".join(str(n) for n in self.mismatched[:20])
            more = f" and {len(self.mismatched) - 20} more" * (len(self.mismatched) > 20)
            return (
                f"{asked}: {self.n_rows_mismatched} answers differ from the recorded ones "
                f"beyond the suspect's noise (largest {self.largest_distance:.3g}; {noise}), "
                f"in records {shown}{more}"
            )
        if self.shifted:
            return (
                f"{asked}: every answer within {self.threshold:.3g}, but taken together they "
                f"sit further from the record than the suspect's repeat noise (one-sided "
                f"Mann-Whitney p = {self.noise_p:.3g} < {NOISE_TEST_LEVEL:g}; {noise}): the "
                "recorded answers were moved"
            )
        return (
            f"{asked}: all {self.n_asked} answered as recorded (largest distance "
            f"{self.largest_distance:.3g}; {noise})"
        )


def requery(
    transcript: Transcript,
    suspect: SuspectFn,
    *,
    size: RequerySize = DEFAULT_REQUERY_SIZE,
    seed: int | None = None,
    tolerance: float = DEFAULT_REQUERY_TOLERANCE,
    repeat: int = DEFAULT_REPEAT_SIZE,
    batch_size: int = DEFAULT_BATCH_SIZE,
    suspect_name: str = "",
) -> Requery:
    """Ask ``suspect`` again ``size`` of the texts ``transcript`` records (:data:`RequerySize`),
    drawn from ``seed`` (a fresh random one when None), ``repeat`` of them a second time
    in other batches, and judge each answer against the recorded one within the
    suspect's repeat noise (floor ``tolerance``, relative L2; the module says how).

    Raises ``InputError`` for a bad size, tolerance or repeat; a suspect that fails
    is recorded in ``Requery.error`` (nothing was proved, nothing was disproved).
    """
    if not 0.0 <= tolerance < np.inf:
        raise InputError(f"the requery tolerance must be a finite number >= 0, got {tolerance}")
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 2:
        raise InputError(f"the repeat size must be an integer >= 2, got {repeat!r}")
    seed = secrets.randbits(63) if seed is None else int(seed)
    recorded = recorded_answers(transcript)
    chosen = draw_requery(len(recorded.texts), size, seed)
    texts = [recorded.texts[i] for i in chosen]
    found: dict[str, Any] = dict(
        suspect=suspect_name or "the suspect",
        seed=seed,
        tolerance=tolerance,
        n_rows=len(recorded.texts),
        chosen=chosen,
    )
    if not texts:
        return Requery(**found, n_asked=0, n_answered=0, error="the transcript holds no answer")
    # the repeat: a keyed subset of the re-asked texts, asked again in another order and
    # so in other batches, after all of them were asked once
    rng = np.random.default_rng(np.random.SeedSequence([seed, 1]))
    again = rng.permutation(len(texts))[: min(repeat, len(texts))]
    order = rng.permutation(len(texts))
    try:
        asked = _asked(suspect, [texts[i] for i in order], batch_size)
        first = np.empty_like(asked)
        first[order] = asked
        second = _asked(suspect, [texts[i] for i in again], batch_size)
    except Exception as exc:  # the suspect's fault: nothing proved either way
        error = printable(f"{type(exc).__name__}: {exc}")
        return Requery(**found, n_asked=len(texts), n_answered=0, error=error)
    return _judged(found, recorded.rows[chosen], recorded.records[chosen], first, second, again)


def _judged(
    found: dict[str, Any],
    recorded: np.ndarray,
    records: np.ndarray,
    answers: np.ndarray,
    repeated: np.ndarray,
    again: np.ndarray,
) -> Requery:
    """The re-asked ``answers`` judged against the ``recorded`` rows, on the repeat noise
    that ``repeated`` (the second answers to the texts ``again``) shows."""
    tolerance = found["tolerance"]
    distance = answer_distances(recorded, answers)
    answered = np.isfinite(answers).all(axis=1) & answers.any(axis=1)
    # the repeat distance over the recorded row's norm, as the re-asked distances are
    noise = _relative(answers[again] - np.asarray(repeated, dtype=np.float64), recorded[again])
    noise = noise[np.isfinite(noise) & answered[again]]
    # a suspect that cannot repeat its own answer has no finite noise: the floor alone
    repeat_largest = float(noise.max()) if noise.size else 0.0
    threshold = max(tolerance, NOISE_MARGIN * repeat_largest)
    bad = answered & (distance > threshold)
    within = distance[answered & ~bad]
    noise_p = 1.0
    if noise.size >= 2 and within.size >= 2 and within.max() > tolerance:
        # ties at the floor carry no information: both sides are clipped to it
        noise_p = float(
            stats.mannwhitneyu(
                np.maximum(within, tolerance), np.maximum(noise, tolerance), alternative="greater"
            ).pvalue
        )
    largest = float(distance[answered].max()) if answered.any() else 0.0
    return Requery(
        **found,
        n_asked=len(answers),
        n_answered=int(answered.sum()),
        mismatched=tuple(sorted(set(records[bad].tolist()))),
        n_rows_mismatched=int(bad.sum()),
        largest_distance=largest,
        n_repeated=int(noise.size),
        repeat_largest=repeat_largest,
        threshold=threshold,
        noise_p=noise_p,
        answers=answers,
    )


def requery_findings(asked: Requery | None) -> Findings:
    """What re-asking the suspect proves, or why the evidence fails (``None``: not asked)."""
    if asked is None:
        return Findings(
            not_proved=(
                "that the recorded answers are the suspect's: the suspect was not asked again "
                "(--requery SUSPECT); whoever wrote the transcript could have written any "
                "answers and chained them",
            )
        )
    escape = (
        f"a forgery of 1% of the answers would have escaped this requery with probability "
        f"{asked.escape_chance(0.01):.2g}, of 2% with {asked.escape_chance(0.02):.2g}, of 5% "
        f"with {asked.escape_chance(0.05):.2g} (hypergeometric over {asked.n_rows} answers; "
        f"the default size is the smallest that holds {DEFAULT_FORGED_FRACTION:.0%} to "
        f"{DEFAULT_ESCAPE_CHANCE:g})"
    )
    if asked.matched and asked.threshold >= INDISTINCT_BOUND:
        return Findings(
            not_proved=(
                f"that the recorded answers are the suspect's: {asked.describe()}; a bound that "
                f"wide (>= {INDISTINCT_BOUND:g}) cannot tell a forged answer from the suspect's "
                "own noise, so only the verdict re-derived from its answers speaks",
            )
        )
    if asked.matched:
        return Findings(proved=(f"answers re-asked and matched: {asked.describe()}", escape))
    if asked.mismatched or asked.shifted:
        return Findings(
            failure=f"the recorded answers are not the suspect's: {asked.describe()} (forged, "
            "or the suspect's model changed since the audit)"
        )
    return Findings(
        failure=f"the suspect could not be asked again: {asked.describe()}",
        not_proved=("that the recorded answers are the suspect's",),
    )


def _relative(difference: np.ndarray, recorded: np.ndarray) -> np.ndarray:
    """Per row ``||difference|| / ||recorded||`` (inf where it cannot be computed)."""
    if difference.shape != recorded.shape:
        return np.full(len(recorded), np.inf)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        distance = np.linalg.norm(difference, axis=1) / np.linalg.norm(recorded, axis=1)
    return np.where(np.isfinite(distance), distance, np.inf)


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
