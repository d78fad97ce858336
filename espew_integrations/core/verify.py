"""verify(): ask whether a suspect embedding service learned a key's watermark.

The paper's probe-level KS test treats the 20+20 probes as independent
samples, but every probe of one key is built from the same 20 trigger words,
so "these 20 words happen to sit near the target" looks like a watermark; it
convicts innocent models (5.3% of keys at p < 1e-3, measured). We test at the
word level instead:

1. every word of the key's band (the triggers and all equally frequent words
   they were drawn from) is probed the same way: by default with the natural
   corpus texts stored in the key at keygen (:mod:`.probes`), which a thief
   cannot tell from ordinary traffic; optionally by the word alone;
2. all probes go to the suspect shuffled together, so it cannot tell trigger
   probes from the others by content, order or batch;
3. each word gets up to three scores: a *raw* score, the mean cosine of its
   probes' embeddings to the target; a *reference-adjusted* score, the raw
   score minus ``slope *`` the provider's clean model's score for the same
   probes (stored in the key), with the slope fitted over all words
   (:func:`reference_slope`), which cancels each word's natural position; and
   a *directed* score (:mod:`.directed`): each audit text's answer (less what
   a ridge fit on the clean rows explains) projected on that text's own mark
   direction, computed from the clean embeddings the key stores, and summed
   into a score for each band word over every text that holds it, the texts
   shared with other band words weighed by how likely those are to mark
   (:mod:`.word_evidence`). The directed score ignores
   the coordinates a mark never touches, so it is the one that catches the
   copies that carry only a trace of a quality-preserving watermark;
4. the exact rank test of :mod:`.ranktest` asks, for each score, whether the
   triggers rank unusually high among all equally likely trigger draws; the
   verdict's p-value is ``min(1, m * min(p))`` over the m scores the key
   supports (Bonferroni; m = 3 for keys with probe embeddings, 2 for older
   keys or ``target_mode="query"``), and the report says which score decided.

Every score is exact under the null: neither the suspect, nor the clean model,
nor the mark directions depend on which band words were drawn, so the
triggers stay a uniformly random subset of the scored words. The paper's own
metrics (KS p-value, delta cos, delta l2) are reported on the same probes as
comparability figures; they never decide the verdict.
"""

from __future__ import annotations

import contextvars
import dataclasses
import datetime as _dt
import functools
import math
import os
import re
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal, NamedTuple

import numpy as np

from .align import Alignment, fit_alignment
from .directed import directed_scores, mark_directions
from .errors import SuspectError
from .key import WatermarkKey
from .probes import unit_rows
from .ranktest import min_p_value, rank_sum_p_value
from .report import Status, VerificationReport
from .transcript import TranscriptRecorder, describe_suspect, utc_now
from .untrusted import printable
from .word_evidence import word_scores_from_texts
from .words import TriggerMatcher, tokenize

__all__ = [
    "DEFAULT_DEADLINE",
    "DEFAULT_LEVEL",
    "DEFAULT_TEMPLATES",
    "MAX_ANSWER_DIM",
    "SuspectFn",
    "VerificationReport",
    "build_probes",
    "check_deadline",
    "score_words",
    "verify",
]

SuspectFn = Callable[[list[str]], Any]
TargetMode = Literal["key", "query"]
ProbeKind = Literal["auto", "sentences", "words"]
Statistic = Literal["combined", "raw", "adjusted", "corrected", "directed"]
STATISTICS: tuple[str, ...] = ("combined", "raw", "adjusted", "corrected", "directed")

DEFAULT_LEVEL = 1e-6
#: Seconds an audit may spend asking the suspect, all batches together. Without an
#: overall bound a suspect that answers and then stalls (each call hanging, or
#: answering just inside every per-request timeout and retry) holds the audit for
#: the batches times the client's timeouts times its retries; at the deadline the
#: audit ends inconclusive instead, saying how many texts were answered. A slow
#: local model audited on a CPU may need more: pass ``deadline=`` (None: no bound).
DEFAULT_DEADLINE = 300.0
#: One probe per word, the word alone: measured to separate best among word
#: templates (padding a word with filler words dilutes its pull to the target).
DEFAULT_TEMPLATES: tuple[str, ...] = ("{word}",)
#: The widest answers an audit accepts. A key that maps answers into its own
#: coordinates (:mod:`.align`) takes a suspect of any dimension, so without a bound a
#: hostile endpoint answering a million numbers a text would fill the auditor's memory
#: (1,950 texts x 1e6 float64 = 16 GB) instead of getting an inconclusive report.
#: Served embedding models stay far below this (MiniLM 384, OpenAI's largest 3,072,
#: 7B-parameter embedders 4,096).
MAX_ANSWER_DIM = 16_384
DECISION_RULE = (
    "one-sided exact rank-sum (Mann-Whitney) permutation tests at the word level: the "
    "triggers' scores against every scored word of the key's frequency band, with raw "
    "scores (mean cosine of the word's probes to the target), with scores adjusted by the "
    "provider's clean model (minus a fitted slope times its score for the same probes) and "
    "with directed scores (mean whitened projection of the word's probe answers on each "
    "probe's own mark direction); p = min(1, k * m * smallest of the m p-values the key "
    "supports), k the key's audit round (1 for keygen's own audit); copied iff p < level"
)


# ---------------------------------------------------------------------- probes
def build_probes(
    words: Sequence[str], templates: Sequence[str] = DEFAULT_TEMPLATES
) -> tuple[list[str], np.ndarray]:
    """Probe texts for each word, built identically for every word.

    Returns ``(probes, owner)`` where ``owner[i]`` is the index in ``words`` of
    the word probe ``i`` was built from.

    >>> build_probes(["apple", "pear"], ("{word}", "the {word}"))
    (['apple', 'the apple', 'pear', 'the pear'], array([0, 0, 1, 1]))
    """
    templates = tuple(templates)
    if not templates or not all("{word}" in t for t in templates):
        raise ValueError("every probe template must contain '{word}'")
    probes = [t.format(word=w) for w in words for t in templates]
    owner = np.repeat(np.arange(len(words)), len(templates))
    return probes, owner


def _check_templates(templates: Sequence[str], key: WatermarkKey) -> None:
    for template in templates:
        filler = tokenize(template.replace("{word}", " "), key.normalization)
        if set(filler) & set(key.band):
            # A filler word from the band would make probes of other words
            # contain that word too (and triggers carry marks into benign probes).
            raise ValueError(
                "probe template filler words must not be band words of the key; "
                "use common function words such as 'the' or 'a'"
            )


@dataclasses.dataclass(frozen=True)
class _Plan:
    """What to ask the suspect and how to score the answers."""

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


def check_statistic(plan: _Plan, statistic: str) -> None:
    """Refuse a single statistic the plan cannot compute, saying what it needs."""
    if statistic in ("adjusted", "corrected") and plan.reference is None:
        raise ValueError(f"statistic={statistic!r} needs the clean reference this key lacks")
    if statistic == "directed" and plan.directions is None:
        raise ValueError(
            "statistic='directed' needs sentence probes, a key that stores their clean "
            "embeddings (generate a new key: older ones lack them) and target_mode='key'"
        )


def _plan(
    key: WatermarkKey, probes: str, templates: Sequence[str] | None, target_mode: str = "key"
) -> _Plan:
    """What to send and how to score it. Mark directions live in the key's own
    coordinates, so they are used only when the answers are compared there
    (``target_mode="key"``)."""
    if probes not in ("auto", "sentences", "words"):
        raise ValueError(f"probes must be 'auto', 'sentences' or 'words', got {probes!r}")
    has_sentences = bool(key.probe_texts)
    if probes == "sentences" and not has_sentences:
        raise ValueError(
            "this key stores no sentence probes (made before they existed); "
            "use probes='words' or generate a new key"
        )
    if probes == "sentences" or (probes == "auto" and has_sentences and templates is None):
        reference = key.probe_reference if key.probe_reference.size else None
        clean_rows = key.probe_embeddings
        usable = len(clean_rows) and target_mode == "key"
        directions = mark_directions(clean_rows, key) if usable else None
        cover_rows = key.cover_embeddings if usable and maps_answers(key) else None
        scored = key.probe_texts + (key.cover_texts if cover_rows is not None else ())
        return _Plan(
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
            _band_sets(key, key.probe_owner, scored) if usable else (),
            len(key.triggers) / len(key.band),
        )
    templates = tuple(DEFAULT_TEMPLATES if templates is None else templates)
    _check_templates(templates, key)
    texts, owner = build_probes(list(key.band), templates)
    reference = None
    if templates == DEFAULT_TEMPLATES and key.word_reference.size:
        reference = key.word_reference
    return _Plan("words", texts, owner, reference, templates)


def _band_sets(
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
    """:func:`_band_sets`, cached: reading 4,000 texts as the model does takes a
    second or two, and a null study verifies the same audit under many salts
    (``key.replace``), whose texts and band are the same."""
    index = {word: i for i, word in enumerate(band)}
    matcher = TriggerMatcher(band, normalization=normalization, window=window)
    owners = [(w,) for w in owner] + [()] * (len(texts) - len(owner))
    return tuple(
        tuple(sorted({*own, *(index[w] for w in words)}))
        for own, words in zip(owners, matcher.which(texts), strict=True)
    )


def score_words(
    embeddings: np.ndarray, owner: np.ndarray, target: np.ndarray, n_words: int
) -> np.ndarray:
    """Mean cosine to ``target`` of each word's probe embeddings (NaN if none).

    ``embeddings`` rows whose probe failed are NaN rows and are left out.
    """
    return _mean_per_word(_probe_cosines(embeddings, target), owner, n_words)


def _probe_cosines(embeddings: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Cosine of each probe embedding to ``target`` (NaN for failed probes).

    Rows are scaled by their largest magnitude before the norm, so answers of
    1e200 give their true cosines instead of overflowing to 0.
    """
    embeddings = np.asarray(embeddings, dtype=np.float64)
    failed = ~np.isfinite(embeddings).all(axis=1)
    unit = unit_rows(np.where(failed[:, None], 0.0, embeddings))
    cosines = unit @ unit_rows(np.asarray(target, dtype=np.float64)[None, :])[0]
    cosines[failed] = np.nan
    return cosines


def _mean_per_word(cosines: np.ndarray, owner: np.ndarray, n_words: int) -> np.ndarray:
    valid = np.isfinite(cosines)
    sums = np.bincount(owner[valid], weights=cosines[valid], minlength=n_words)
    counts = np.bincount(owner[valid], minlength=n_words)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


# ---------------------------------------------------------------------- querying
class _DeadlinePassed(Exception):
    """The audit's deadline passed before the suspect answered the batch in hand."""


class _Deadline:
    """The asking phase's remaining time, and suspect calls that cannot outlast it.

    Why a thread per call: a suspect that blocks for ever in Python cannot be
    interrupted in the thread that called it, so each call runs in a daemon
    thread and the audit waits for it only as long as the deadline allows.
    A call still running at the deadline is abandoned: being a daemon, its
    thread never keeps the process alive at exit, and its answer, if one ever
    comes, is dropped. Without a deadline (``seconds=None``) the suspect is
    called in the caller's own thread, as a suspect bound to its thread needs.
    """

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self._end = None if seconds is None else time.monotonic() + seconds

    def call(self, suspect: SuspectFn, batch: list[str]) -> Any:
        """``suspect(batch)``, or :class:`_DeadlinePassed` once the deadline is past."""
        if self._end is None:
            return suspect(batch)
        remaining = self._end - time.monotonic()
        if remaining <= 0:
            raise _DeadlinePassed
        done = threading.Event()
        outcome: list[tuple[bool, Any]] = []

        def ask() -> None:
            try:
                outcome.append((True, suspect(batch)))
            except BaseException as exc:  # handed to the auditing thread, which decides
                outcome.append((False, exc))
            finally:
                done.set()

        context = contextvars.copy_context()  # the suspect sees the caller's context
        worker = threading.Thread(
            target=context.run, args=(ask,), name="espew-suspect-call", daemon=True
        )
        worker.start()
        if not done.wait(remaining):
            raise _DeadlinePassed
        answered, value = outcome[0]
        if answered:
            return value
        raise value


class _Replies(NamedTuple):
    """What :func:`_query` got: the answer rows in the order sent (NaN rows where a
    batch failed), the faults it recorded, the answers' dimension (None if no batch
    succeeded) and whether the deadline ended the asking early."""

    answers: np.ndarray
    errors: list[str]
    dim: int | None
    expired: bool = False


def _query(
    suspect: SuspectFn,
    texts: list[str],
    batch_size: int,
    progress: Callable[[int], None] | None,
    expected_dim: int | None = None,
    deadline: float | None = None,
    recorder: TranscriptRecorder | None = None,
) -> _Replies:
    """Embed ``texts`` in batches; failed or malformed batches become NaN rows.

    If the first answer's dimension differs from ``expected_dim``, or exceeds
    :data:`MAX_ANSWER_DIM`, it stops there: no verdict is possible, so the rest
    of the query budget (and the auditor's memory) is spared. It also stops when
    ``deadline`` seconds have passed since the first batch was sent (the batch
    in hand is abandoned, see :class:`_Deadline`); the texts not sent are not
    among the rows. Every recorded error passes through
    :func:`.untrusted.printable`: it may quote the suspect's own text. A
    ``recorder`` gets each batch as it was asked and answered (:mod:`.transcript`).
    """
    errors: list[str] = []
    batches: list[tuple[int, np.ndarray | None]] = []
    dim: int | None = None
    clock = _Deadline(deadline)
    expired = False
    for start in range(0, len(texts), batch_size):
        batch = texts[start : start + batch_size]
        out, expired = _ask_batch(clock, suspect, batch, dim, errors, recorder)
        batches.append((len(batch), out))
        if expired:
            break
        if dim is None and out is not None:
            dim = out.shape[1]
            if dim > MAX_ANSWER_DIM or (expected_dim is not None and dim != expected_dim):
                break
        if progress is not None:
            progress(len(batch))
    width = dim or 1
    parts = [out if out is not None else np.full((n, width), np.nan) for n, out in batches]
    matrix = np.concatenate(parts) if parts else np.zeros((0, width))
    return _Replies(matrix, errors, dim, expired)


def _ask_batch(
    clock: _Deadline,
    suspect: SuspectFn,
    batch: list[str],
    dim: int | None,
    errors: list[str],
    recorder: TranscriptRecorder | None,
) -> tuple[np.ndarray | None, bool]:
    """One batch's rows (None if it failed) and whether the deadline passed first.

    The answer is recorded as it came, before it is checked, so a replay of the
    transcript meets the same checks (:mod:`.evidence_check`)."""
    sent = utc_now()
    try:
        answer = clock.call(suspect, batch)
    except _DeadlinePassed:
        if recorder is not None:
            recorder.batch(batch, sent, expired=True)
        return None, True
    except Exception as exc:  # a fault is missing data, never evidence
        errors.append(printable(f"{type(exc).__name__}: {exc}"))
        if recorder is not None:
            recorder.batch(batch, sent, error=errors[-1])
        return None, False
    if recorder is not None:
        recorder.batch(batch, sent, answer=answer)
    try:
        return _batch_rows(answer, len(batch), dim, errors), False
    except Exception as exc:
        errors.append(printable(f"{type(exc).__name__}: {exc}"))
        return None, False


def _batch_rows(answer: Any, n_texts: int, dim: int | None, errors: list[str]) -> np.ndarray:
    """One batch's answer as float64 rows, unusable rows NaN (noted in ``errors``);
    :class:`SuspectError` if its shape is wrong or its dimension is not ``dim``."""
    out = np.array(answer, dtype=np.float64)
    if out.ndim != 2 or out.shape[0] != n_texts:
        raise SuspectError(f"returned shape {out.shape} for a batch of {n_texts} texts")
    if dim is not None and out.shape[1] != dim:
        raise SuspectError(f"returned dimension {out.shape[1]}, expected {dim}")
    bad = ~np.isfinite(out).all(axis=1) | ~out.any(axis=1)
    if bad.any():
        out[bad] = np.nan  # unusable rows are missing, not zero-scored
        errors.append(f"{int(bad.sum())} non-finite or zero embeddings")
    return out


def _uninformative(answers: np.ndarray, raw_scores: np.ndarray) -> tuple[str, str] | None:
    """Why the answers carry no evidence either way, and what to do (None if they do)."""
    valid = answers[np.isfinite(answers).all(axis=1)]
    why = ""
    if len(valid) and np.unique(unit_rows(valid).round(12), axis=0).shape[0] < 2:
        why = "the suspect gave the same embedding for every probe"
    elif (finite := raw_scores[np.isfinite(raw_scores)]).size and np.ptp(finite) <= 1e-12:
        why = "every scored word got the same score"
    if not why:
        return None
    return (
        f"{why}: such answers are no evidence either way",
        "check that the suspect really is an embedding service for these texts (a stub or "
        "a cache error page answers everything alike); re-running will not change this",
    )


# ---------------------------------------------------------------------- who is asked
@dataclasses.dataclass(frozen=True)
class Subject:
    """Who an audit asks, as its reports name it (``name``: the spec as given, ``label``:
    a human name), and the transcript recording the audit, if any."""

    name: str = ""
    label: str = ""
    recorder: TranscriptRecorder | None = None


def audit_subject(
    suspect: SuspectFn,
    transcript: str | os.PathLike[str] | TranscriptRecorder | None,
    name: str | None,
    label: str,
) -> Subject:
    """The audit's :class:`Subject`: the suspect named as given (else described), a
    URL's user and password left out, and a recorder when a transcript is asked for."""
    shown = describe_suspect(suspect) if name is None else name
    shown = printable(re.sub(r"//[^/@\s]*@", "//", shown), limit=300)
    recorder = transcript
    if transcript is not None and not isinstance(transcript, TranscriptRecorder):
        recorder = TranscriptRecorder(transcript)
    return Subject(shown, printable(label, limit=200), recorder)  # type: ignore[arg-type]


#: The arguments of :func:`verify` (and ``trace``) a transcript keeps, so that its
#: replay (:mod:`.evidence_check`) audits exactly as the audit did.
REPLAYED_SETTINGS = (
    "target_mode",
    "level",
    "probes",
    "statistic",
    "templates",
    "batch_size",
    "seed",
    "min_coverage",
    "deadline",
)
_ASKING = ("target_mode", "level", "statistic", "batch_size", "seed", "progress", "deadline")


def asking_options(given: dict[str, Any]) -> dict[str, Any]:
    """The options of :func:`_interrogate` among an audit's arguments ``given``."""
    return {name: given[name] for name in _ASKING}


def record_start(
    subject: Subject,
    audit: str,
    suspect: SuspectFn,
    key: WatermarkKey,
    given: dict[str, Any],
    **extra: Any,
) -> None:
    """The transcript's header fields (nothing is asked yet): the key's commitment and
    round, the settings a replay passes again and ``extra`` (a trace's ring and
    accounts). No-op without a recorder."""
    if subject.recorder is None:
        return
    settings = {name: given[name] for name in REPLAYED_SETTINGS if name in given}
    if settings.get("templates") is not None:
        settings["templates"] = list(settings["templates"])
    fields = dict(
        key_id=key.key_id,
        key_commitment=key.commitment(),
        audit_round=key.audit_round,
        settings=settings,
        **extra,
    )
    subject.recorder.expect(audit, suspect, {"name": subject.name, "label": subject.label}, fields)


def _recorded(subject: Subject, report: VerificationReport) -> VerificationReport:
    """``report`` with the transcript's digest, once its end record is written."""
    if subject.recorder is None:
        return report
    exact = report.to_dict(public=False)
    digest = subject.recorder.finish(
        {"status": report.status, "p_value": report.p_value, "report": exact}
    )
    return dataclasses.replace(report, transcript_digest=digest)


# ---------------------------------------------------------------------- verify
def verify(
    suspect: SuspectFn,
    key: WatermarkKey,
    *,
    target_mode: TargetMode = "key",
    level: float = DEFAULT_LEVEL,
    probes: ProbeKind = "auto",
    statistic: Statistic = "combined",
    templates: Sequence[str] | None = None,
    batch_size: int = 64,
    seed: int | None = None,
    min_coverage: float = 0.9,
    progress: Callable[[int], None] | None = None,
    deadline: float | None = DEFAULT_DEADLINE,
    transcript: str | os.PathLike[str] | TranscriptRecorder | None = None,
    suspect_name: str | None = None,
    suspect_label: str = "",
) -> VerificationReport:
    """Test whether ``suspect`` was trained on embeddings watermarked with ``key``.

    ``suspect`` is a callable ``list[str] -> array (n, d')`` (the package-root
    :func:`espew_integrations.verify` also takes LangChain, LlamaIndex, Chroma and
    :class:`OpenAIEndpoint` suspects). ``probes="auto"`` sends the natural-text probes
    stored in the key (or, for keys that store none, the band words, as ``"words"``
    does with ``templates``), shuffled (``seed`` fixes it), in batches of ``batch_size``.
    ``statistic="combined"`` decides on the raw, reference-adjusted and directed scores
    together (module docstring); ``"raw"``, ``"adjusted"``, ``"corrected"`` or
    ``"directed"`` use one. ``target_mode="key"`` compares with the stored target,
    mapping answers of another dimension or rotated coordinates back when the key
    stores its audit's clean rows (:mod:`.align`); ``"query"`` uses the suspect's own
    embedding of ``key.target_text``, which it therefore sees.

    Faults of the suspect never count as evidence: they leave words unscored, and
    below ``min_coverage`` of the band's words scored the report is inconclusive (so
    it is for uninformative answers, an unverifiable key, and asking beyond
    ``deadline`` seconds, :class:`_Deadline`), saying why and what to do next.
    ``transcript`` (a private directory) records what was sent and what came back
    (:mod:`.transcript`; ``report.transcript_digest`` commits to it); the reports
    name the suspect ``suspect_name`` (default: described) and ``suspect_label``.

    >>> verify(suspect_model, key).copied          # doctest: +SKIP
    True
    """
    given = dict(locals())  # the arguments as given: a transcript's replay passes them again
    check_suspect(suspect)
    _check_options(target_mode, level, batch_size, min_coverage, statistic, deadline)
    plan = _plan(key, probes, templates, target_mode)
    check_statistic(plan, statistic)
    subject = audit_subject(suspect, transcript, suspect_name, suspect_label)
    record_start(subject, "verify", suspect, key, given)
    asked = _interrogate(suspect, key, plan, subject=subject, **asking_options(given))
    if asked.reason:
        return _recorded(subject, _inconclusive(asked.common, asked.reason))
    scores = _word_scores(plan, asked, len(key.band))
    return _recorded(subject, _decide(key, scores, min_coverage, asked.common))


def check_deadline(deadline: float | None) -> None:
    """Refuse a deadline that is not None or a positive, finite number of seconds."""
    if deadline is None:
        return
    if isinstance(deadline, bool) or not isinstance(deadline, (int, float)):
        raise TypeError(f"deadline must be a number of seconds or None, got {deadline!r}")
    if not 0.0 < deadline < math.inf:
        raise ValueError(f"deadline must be a positive number of seconds, got {deadline!r}")


def check_suspect(suspect: object) -> None:
    """Refuse a suspect the core cannot call, naming the adapter that can."""
    if not callable(suspect):
        raise TypeError(
            f"the core's verify takes a callable list[str] -> embeddings, not a "
            f"{type(suspect).__name__}; pass it to espew_integrations.verify (which adapts "
            "LangChain, LlamaIndex, Chroma and OpenAIEndpoint suspects) or wrap it with "
            "espew_integrations.as_suspect"
        )


@dataclasses.dataclass(frozen=True)
class _Answers:
    """The suspect's answers to a plan, in the plan's order, or why there are none.

    When there are none, ``common`` carries the ``reason``'s ``next_step``.
    """

    common: dict[str, Any]
    embeddings: np.ndarray
    target_vector: np.ndarray
    reason: str = ""
    cover: np.ndarray | None = None  # the answers to the cover texts, in the plan's order


def _interrogate(
    suspect_fn: SuspectFn,
    key: WatermarkKey,
    plan: _Plan,
    target_mode: str,
    level: float,
    statistic: str,
    batch_size: int,
    seed: int | None,
    progress: Callable[[int], None] | None,
    deadline: float | None = DEFAULT_DEADLINE,
    subject: Subject | None = None,
) -> _Answers:
    """Ask the suspect the plan's probes once, shuffled; :func:`verify` and ``trace`` share it."""
    texts = [*plan.texts, *plan.cover] + ([key.target_text] if target_mode == "query" else [])
    subject = subject or Subject()
    # a key that can map answers into its coordinates (align.py) takes any dimension;
    # _plan stores cover rows only for such a key in key mode
    alignable = plan.cover_rows is not None
    expected_dim = key.dim if target_mode == "key" and not alignable else None
    order, (answers, errors, dim, expired) = _ask_shuffled(
        suspect_fn, texts, seed, batch_size, progress, expected_dim, deadline, subject.recorder
    )
    common = _common_fields(key, plan, target_mode, level, statistic, seed, answers, errors, dim)
    common.update(suspect=subject.name, suspect_label=subject.label)
    failure = _deadline_failure(deadline, answers, len(texts)) if expired else None
    failure = failure or _answer_failure(dim, expected_dim)
    if failure:
        return _Answers({**common, "next_step": failure[1]}, answers, key.target, failure[0])
    embeddings = np.empty_like(answers)
    embeddings[order] = answers  # back to the original probe order
    embeddings = embeddings[_first_answered(texts, order, answers)]
    n_probes, n_cover = len(plan.texts), len(plan.cover)
    cover = embeddings[n_probes : n_probes + n_cover]  # never scored; they join the clean fit
    embeddings = embeddings[np.r_[0:n_probes, n_probes + n_cover : len(texts)]]
    if alignable:
        alignment, mapped, mapped_cover = align_answers(plan, embeddings, cover, key.dim)
        common["alignment"] = "" if alignment is None else alignment.describe()
        if alignment is None and dim != key.dim:
            common["next_step"] = _NEXT_RETRY
            reason = (
                f"the suspect returns {dim}-dimensional embeddings, not the key's {key.dim}, "
                "and answered too few of the audit's texts to map them onto the key's "
                "coordinates"
            )
            return _Answers(common, embeddings, key.target, reason, cover)
        embeddings, cover = mapped, mapped_cover
    target_vector = key.target
    if target_mode == "query":
        target_vector, embeddings = embeddings[-1], embeddings[:-1]
        if not np.isfinite(target_vector).all():
            reason = "the suspect failed to embed the target text"
            common["next_step"] = _NEXT_RETRY
            return _Answers(common, embeddings, key.target, reason, cover)
    return _Answers(common, embeddings, target_vector, cover=cover)


def _ask_shuffled(
    suspect_fn: SuspectFn,
    texts: list[str],
    seed: int | None,
    batch_size: int,
    progress: Callable[[int], None] | None,
    expected_dim: int | None,
    deadline: float | None,
    recorder: TranscriptRecorder | None,
) -> tuple[np.ndarray, _Replies]:
    """The texts' order (triggers, others and cover mixed) and the suspect's replies.

    Without a ``seed`` one is drawn here (as ``default_rng(None)`` would draw it), so
    that a transcript can keep it and its replay send the texts in the same order."""
    shuffle = seed if seed is not None else int(np.random.SeedSequence().entropy)
    order = np.random.default_rng(shuffle).permutation(len(texts))
    if recorder is not None:
        recorder.begin(shuffle, len(texts))
    asked = [texts[i] for i in order]
    return order, _query(suspect_fn, asked, batch_size, progress, expected_dim, deadline, recorder)


def maps_answers(key: WatermarkKey) -> bool:
    """Whether ``verify(..., target_mode="key")`` with the default sentence probes maps
    a suspect's answers into the key's coordinates (:mod:`.align`): a key that stores
    its audit's clean probe and cover rows. Such a key needs no ``target_mode="query"``
    for a suspect of another dimension or with scrambled coordinates. :func:`_plan`
    stores the cover rows (what ``align_answers`` fits on) on this same condition."""
    return (
        bool(key.probe_texts)
        and bool(len(key.probe_embeddings))
        and bool(len(key.cover_embeddings))
    )


def align_answers(
    plan: _Plan, answers: np.ndarray, cover: np.ndarray, key_dim: int
) -> tuple[Alignment | None, np.ndarray, np.ndarray]:
    """The map of the probe ``answers`` and ``cover`` answers onto the key's coordinates
    (:mod:`.align`), fitted on every answered audit text against its clean row, and the
    two as verify scores them (mapped when the map is applied, else unchanged).
    ``lab.null_study.audit_scores`` calls it exactly as verify does."""
    alignment = fit_alignment(
        np.vstack([answers, cover]), np.vstack([plan.clean_rows, plan.cover_rows]), key_dim
    )
    if alignment is None:
        return None, answers, cover
    return alignment, alignment.apply(answers), alignment.apply(cover)


def _first_answered(texts: Sequence[str], order: np.ndarray, answers: np.ndarray) -> np.ndarray:
    """For each position of ``texts``, the position of that text's first answered copy.

    An audit drawn from traffic that repeats texts sends a repeat again
    (:meth:`.probes.BandScan.sample`). Every copy of a text is scored with the
    first usable answer the suspect gave to it, in the order sent, so a thief that
    answers a text it has already seen from an honest model gains nothing. A copy
    that failed (a fault, not evidence) gives way to a later one: a thief cannot
    know a text will come again, so failing first copies on purpose fails every
    text it has not seen and leaves the audit inconclusive. Without repeats this
    is the identity.
    """
    answered = np.isfinite(answers).all(axis=1)  # in the order sent
    first: dict[str, int] = {}
    for sent, position in enumerate(order.tolist()):
        if answered[sent]:
            first.setdefault(texts[position], position)
    return np.fromiter(
        (first.get(text, position) for position, text in enumerate(texts)),
        dtype=np.int64,
        count=len(texts),
    )


_NEXT_RETRY = (
    "the cause above is the suspect's: fix it (address, credentials, rate limit) and run "
    "the audit again. Re-running is sound: a fault is never evidence, and a deterministic "
    "model gives the same p-value every time"
)


def _deadline_failure(deadline: float | None, answers: np.ndarray, n_texts: int) -> tuple[str, str]:
    """Why an audit whose deadline passed has no verdict, and what to do next.

    Always inconclusive: the texts left unasked are not a sample the verdict
    could rest on, and a suspect must never gain by stalling."""
    answered = int(np.isfinite(answers).all(axis=1).sum())
    bound = "" if deadline is None else f" of {deadline:g} s"  # None: a transcript's replay
    return (
        f"the audit's deadline{bound} passed with {answered:,} of its {n_texts:,} "
        "texts answered: the suspect stalled or answered too slowly, and asking stopped",
        "run the audit again when the suspect answers reliably, or allow it more time "
        "(deadline= / --deadline SECONDS); a call the suspect never answers is abandoned at "
        "the deadline, and re-running is sound, since a fault is never evidence",
    )


def _answer_failure(dim: int | None, expected_dim: int | None) -> tuple[str, str] | None:
    """Why the answers cannot be scored at all, and what to do next (None if they can)."""
    if dim is None:
        return "every query to the suspect failed", _NEXT_RETRY
    if dim > MAX_ANSWER_DIM:
        return (
            f"the suspect returns {dim:,}-dimensional embeddings, more than the "
            f"{MAX_ANSWER_DIM:,} an audit accepts (MAX_ANSWER_DIM); querying stopped after "
            "the first batch",
            "check that the endpoint really is an embedding service and that the client "
            "reads its answers right (one vector per text); no embedding model serves that "
            "many numbers a text",
        )
    if expected_dim is not None and dim != expected_dim:
        return (
            f"the suspect returns {dim}-dimensional embeddings but the key's target has "
            f"{expected_dim}; verify with target_mode='query' (querying stopped after the "
            "first batch)",
            "run the audit again with target_mode='query' (espew verify --target query); "
            "it sends the key's target text to the suspect",
        )
    return None


def _common_fields(
    key: WatermarkKey,
    plan: _Plan,
    target_mode: str,
    level: float,
    statistic: str,
    seed: int | None,
    answers: np.ndarray,
    errors: list[str],
    dim: int | None,
) -> dict[str, Any]:
    """The report fields every outcome shares: what was asked, of whom, and how it went."""
    return dict(
        key_id=key.key_id,
        key_commitment=key.commitment(),
        audit_round=key.audit_round,
        target_mode=target_mode,
        n_queries=len(answers),
        n_failed_queries=int((~np.isfinite(answers).all(axis=1)).sum()),
        n_words=len(key.band),
        level=level,
        decision_rule=DECISION_RULE,
        suspect_dim=dim,
        templates=plan.templates,
        seed=seed,
        timestamp=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        errors=tuple(errors[:20]),
        probes=plan.kind,
        statistic=_statistic_used(plan, statistic),
        n_statistics=_n_statistics(plan, statistic),
    )


def _n_statistics(plan: _Plan, statistic: str) -> int:
    """How many exact tests the verdict's p-value is the Bonferroni minimum of: it
    depends on the key and the mode alone, never on which words were scored."""
    if statistic != "combined":
        return 1
    return 1 + (plan.reference is not None) + (plan.directions is not None)


def _statistic_used(plan: _Plan, statistic: str) -> str:
    """The statistic a report names: "raw" when a combined verdict has nothing to combine."""
    if statistic == "combined" and plan.reference is None and plan.directions is None:
        return "raw"
    return statistic


def _check_options(
    target_mode: str,
    level: float,
    batch_size: int,
    min_coverage: float,
    statistic: str,
    deadline: float | None = DEFAULT_DEADLINE,
) -> None:
    if target_mode not in ("key", "query"):
        raise ValueError(f"target_mode must be 'key' or 'query', got {target_mode!r}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size!r}")
    if not 0.0 < min_coverage <= 1.0:
        raise ValueError(f"min_coverage must be in (0, 1], got {min_coverage!r}")
    if statistic not in STATISTICS:
        raise ValueError(
            f"statistic must be one of {', '.join(map(repr, STATISTICS))}, got {statistic!r}"
        )
    check_deadline(deadline)


def _inconclusive(common: dict[str, Any], reason: str, **extra: Any) -> VerificationReport:
    values: dict[str, Any] = dict(
        status="inconclusive",
        p_value=math.nan,
        n_words_scored=0,
        n_triggers_scored=0,
        min_possible_p_value=math.nan,
        trigger_scores=(),
        benign_scores=(),
        ks_p_value=math.nan,
        delta_cos=math.nan,
        delta_l2=math.nan,
        reason=reason,
    )
    values.update(common)
    values.update(extra)
    return VerificationReport(**values)


@dataclasses.dataclass(frozen=True)
class _WordScores:
    """What one interrogation yields, computed once for the verdict and trace's tenants.

    ``cosines``: each probe's cosine to the target (NaN where it failed);
    ``raw``: each band word's mean of them; :attr:`reference` and
    :attr:`directed` are computed on first use only: the directed score costs
    a whitening solve (seconds at d = 4096) that an audit found unusable
    never needs.
    """

    plan: _Plan
    embeddings: np.ndarray
    cosines: np.ndarray
    raw: np.ndarray
    cover: np.ndarray | None = None  # the answers to the cover texts (for the clean fit)

    @functools.cached_property
    def reference(self) -> np.ndarray | None:
        """Each band word's mean clean-model cosine over its answered probes; None without one."""
        if self.plan.reference is None:
            return None
        answered = np.where(np.isfinite(self.cosines), self.plan.reference, np.nan)
        return _mean_per_word(answered, self.plan.owner, len(self.raw))

    @functools.cached_property
    def directed(self) -> np.ndarray | None:
        """Each band word's directed score (:mod:`.directed`) from every answered text
        that holds it (:mod:`.word_evidence`); None without mark directions."""
        plan = self.plan
        if plan.directions is None:
            return None
        answers, directions, clean = self.embeddings, plan.directions, plan.clean_rows
        if self.cover is not None and plan.cover_rows is not None:
            # the cover texts are scored too: those holding band words are evidence
            answers = np.vstack([answers, self.cover])
            directions = np.vstack([directions, plan.cover_directions])
            clean = np.vstack([clean, plan.cover_rows])
        per_text = directed_scores(answers, directions, clean)
        return word_scores_from_texts(
            per_text, plan.band_sets[: len(answers)], len(self.raw), plan.trigger_share
        )


def _word_scores(plan: _Plan, asked: _Answers, n_words: int) -> _WordScores:
    cosines = _probe_cosines(asked.embeddings, asked.target_vector)
    raw = _mean_per_word(cosines, plan.owner, n_words)
    return _WordScores(plan, asked.embeddings, cosines, raw, asked.cover)


def _decide(
    key: WatermarkKey, scores: _WordScores, min_coverage: float, common: dict[str, Any]
) -> VerificationReport:
    """The verdict on one interrogation's answers, from their word scores."""
    n_words = len(key.band)
    cosines, raw = scores.cosines, scores.raw
    is_trigger = np.fromiter((w in key.triggers for w in key.band), dtype=bool, count=n_words)
    scored = np.isfinite(raw)
    partial: dict[str, Any] = dict(
        n_words_scored=int(scored.sum()),
        n_triggers_scored=int((scored & is_trigger).sum()),
        trigger_scores=tuple(float(s) for s in raw[scored & is_trigger]),
        benign_scores=tuple(float(s) for s in raw[scored & ~is_trigger]),
    )
    unusable = _unusable(partial, n_words, min_coverage) or _uninformative(scores.embeddings, raw)
    if unusable:
        return _inconclusive(common, unusable[0], next_step=unusable[1], **partial)
    p_values = _p_values(scores, is_trigger, scored, common["statistic"])
    # A round-k audit is the k-th try with this key: Bonferroni over the rounds.
    rounds = key.audit_round
    p_values["p_value"] = min(1.0, rounds * p_values["p_value"])
    smallest = min(
        1.0, rounds * min_p_value(partial["n_words_scored"], partial["n_triggers_scored"])
    )
    status: Status = "copied" if p_values["p_value"] < common["level"] else "not_copied"
    answered = float(np.isfinite(cosines).mean())
    withheld = _withheld(
        status, partial["n_words_scored"], smallest, answered, min_coverage, key.verifiable, common
    )
    return VerificationReport(
        status="inconclusive" if withheld else status,
        reason=withheld[0] if withheld else "",
        next_step=withheld[1] if withheld else "",
        min_possible_p_value=smallest,
        **p_values,
        **_paper_metrics(cosines, scores.plan.owner, is_trigger),
        **partial,
        **common,
    )


def _unusable(partial: dict[str, Any], n_words: int, min_coverage: float) -> tuple[str, str] | None:
    """Why too few words were scored for any test (None if enough were), and what to do."""
    n_scored, n_triggers = partial["n_words_scored"], partial["n_triggers_scored"]
    if n_scored / n_words >= min_coverage and 0 < n_triggers < n_scored:
        return None
    return (
        f"only {n_scored} of {n_words} band words could be scored "
        f"({n_scored / n_words:.0%} < {min_coverage:.0%} required); the suspect failed too "
        "many queries for a reliable verdict",
        "the suspect failed part of the queries (see the cause above): slow down "
        "(OpenAIEndpoint's requests_per_second, a smaller batch_size / --batch-size), allow "
        "more retries (max_retries / --retries) and run the audit again; re-running is "
        "sound, since a fault is never evidence",
    )


def _withheld(
    status: str,
    n_scored: int,
    smallest: float,
    answered: float,
    min_coverage: float,
    verifiable: bool,
    common: dict[str, Any],
) -> tuple[str, str] | None:
    """Why a computed verdict must not be given (None if it may), and what to do next."""
    level = common["level"]
    if smallest >= level:
        return (
            f"with {n_scored} scored words the smallest reachable p-value is {smallest:.2g}, "
            f"not below the level {level:g}; use a key with a larger band",
            "generate a key with a larger band (a bigger corpus or a wider freq_band)",
        )
    if status == "not_copied" and answered < min_coverage:
        # A conviction on the probes that arrived is valid (the test is exact on any
        # subset chosen without the trigger labels); an acquittal on a fraction of
        # the evidence is not: faults must never clear a suspect.
        return (
            f"only {answered:.0%} of the probes were answered ({min_coverage:.0%} required "
            "to clear a suspect); the answered ones show no watermark at this level",
            "run the audit again once the suspect answers reliably (slow down, allow more "
            "retries: --retries); a fault never clears a suspect",
        )
    if not verifiable:
        return (
            "the key's triggers are not the draw its salt dictates (a hand-made key or one "
            "saved in format version 1), so no third party can check that they were drawn at "
            "random; generate a new key for verdicts",
            "generate a new key (WatermarkKey.generate or espew keygen) and watermark with it",
        )
    return None


def _p_values(
    scores: _WordScores,
    is_trigger: np.ndarray,
    scored: np.ndarray,
    statistic: str,
) -> dict[str, Any]:
    """Each statistic's exact p-value, and the verdict's: one of them, or their Bonferroni min."""
    raw, reference = scores.raw, scores.reference
    p_raw = rank_sum_p_value(raw[scored], is_trigger[scored])
    found: dict[str, float] = {"raw": p_raw}
    out: dict[str, Any] = {"p_value_raw": p_raw}
    if reference is not None:
        fitted = statistic != "corrected"
        slope = reference_slope(raw[scored], reference[scored]) if fitted else 1.0
        adjusted = raw - slope * reference
        p_adjusted = rank_sum_p_value(adjusted[scored], is_trigger[scored])
        found["corrected" if statistic == "corrected" else "adjusted"] = p_adjusted
        out.update(p_value_adjusted=p_adjusted, reference_slope=slope)
    if scores.directed is not None:
        directed = scores.directed
        found["directed"] = rank_sum_p_value(directed[scored], is_trigger[scored])
        out["p_value_directed"] = found["directed"]
    if statistic != "combined":
        return {**out, "p_value": found[statistic], "decided_by": statistic}
    decided_by = min(found, key=found.__getitem__)
    p_value = min(1.0, len(found) * found[decided_by])
    return {**out, "p_value": p_value, "decided_by": decided_by}


def reference_slope(scores: np.ndarray, reference: np.ndarray) -> float:
    """Least-squares slope of the suspect's word scores on the clean model's.

    A faithful copy reproduces the clean model's positions (slope ~1); a
    rougher copy reproduces part of them (a ridge copy: ~0.5); an independent
    model hardly any (~0.3). Subtracting ``slope * reference`` removes as much
    of each word's natural position as the suspect shares with the clean model,
    leaving the watermark's shift. The slope is fitted over every scored word
    without looking at which are triggers, a symmetric function of the scores,
    so the adjusted scores keep the rank test exact under the null.
    """
    centred = reference - reference.mean()
    denominator = float(centred @ centred)
    if denominator <= 0.0:
        return 0.0
    return float(centred @ (scores - scores.mean()) / denominator)


def _paper_metrics(
    cosines: np.ndarray, owner: np.ndarray, is_trigger: np.ndarray
) -> dict[str, float]:
    """KS p-value, delta cos and delta l2 (paper, "Watermark Verification").

    Computed on our probes: trigger-word probes play D_b, other band-word probes
    D_n. l2 is the squared distance of unit vectors, ||u - t||^2 = 2 - 2 cos,
    which is what makes the paper's tables read delta_l2 = -2 delta_cos.
    """
    valid = np.isfinite(cosines)
    backdoor = valid & is_trigger[owner]
    benign = valid & ~is_trigger[owner]
    if not backdoor.any() or not benign.any():
        return {"ks_p_value": math.nan, "delta_cos": math.nan, "delta_l2": math.nan}
    from scipy.stats import ks_2samp  # the paper's statistic; importing it costs ~1 s

    ks = ks_2samp(cosines[backdoor], cosines[benign], alternative="two-sided")
    squared_l2 = 2.0 - 2.0 * cosines
    return {
        "ks_p_value": float(ks.pvalue),
        "delta_cos": float(cosines[backdoor].mean() - cosines[benign].mean()),
        "delta_l2": float(squared_l2[backdoor].mean() - squared_l2[benign].mean()),
    }
