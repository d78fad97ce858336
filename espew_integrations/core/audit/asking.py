"""The interrogation: the plan's texts asked once, shuffled, and the answers put back.

:func:`interrogate` sends the probes, the cover texts and (in query mode) the
key's target text mixed in one seeded random order, so the suspect cannot tell
trigger probes from the others by content, order or batch; then it restores the
plan's order, scores every repeat of a text with its first usable answer, maps
the answers into the key's coordinates when the key can (:mod:`.alignment`)
and takes the target vector. Everything that stops an audit here (no answer,
a dimension the key cannot take, the stall guard or the deadline, an unembedded
target) comes
back as a ``reason`` with what to do next, never as evidence.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, cast

import numpy as np

from ..ground.progress import Progress
from ..keys.key import WatermarkKey
from .alignment import align_answers
from .fields import common_fields
from .options import AuditOptions
from .plan import AuditPlan
from .recorder import Recorder
from .settings import MAX_ANSWER_DIM, SuspectFn
from .subject import Subject
from .suspect_calls import Replies, query_suspect

__all__ = [
    "NEXT_RETRY",
    "Answers",
    "answer_failure",
    "ask_shuffled",
    "deadline_failure",
    "first_answered",
    "interrogate",
]

#: What to do after a fault of the suspect's: fix it and run the audit again.
NEXT_RETRY = (
    "the cause above is the suspect's: fix it (address, credentials, rate limit) and run "
    "the audit again. Re-running is sound: a fault is never evidence, and a deterministic "
    "model gives the same p-value every time"
)


@dataclasses.dataclass(frozen=True)
class Answers:
    """The suspect's answers to a plan, in the plan's order, or why there are none.

    When there are none, ``common`` carries the ``reason``'s ``next_step``.
    """

    common: dict[str, Any]
    embeddings: np.ndarray
    target_vector: np.ndarray
    reason: str = ""
    cover: np.ndarray | None = None  # the answers to the cover texts, in the plan's order


def interrogate(
    suspect_fn: SuspectFn,
    key: WatermarkKey,
    plan: AuditPlan,
    options: AuditOptions,
    progress: Progress | None = None,
    subject: Subject | None = None,
) -> Answers:
    """Ask the suspect the plan's probes once, shuffled; ``verify`` and ``trace`` share it."""
    target_mode, seed = options.target_mode, options.seed
    deadline, stall_timeout = options.deadline, options.stall_timeout
    texts = [*plan.texts, *plan.cover] + ([key.target_text] if target_mode == "query" else [])
    subject = subject or Subject()
    # a key that can map answers into its coordinates (align.py) takes any dimension;
    # plan_audit stores cover rows only for such a key in key mode
    alignable = plan.cover_rows is not None
    expected_dim = key.dim if target_mode == "key" and not alignable else None
    order, (answers, errors, dim, expired) = ask_shuffled(
        suspect_fn,
        texts,
        seed,
        options.batch_size,
        progress,
        expected_dim,
        deadline,
        subject.recorder,
        stall_timeout,
    )
    common = common_fields(
        key, plan, target_mode, options.level, options.statistic, seed, answers, errors, dim
    )
    common.update(suspect=subject.name, suspect_label=subject.label)
    bound = stall_timeout if expired == "stall" else deadline
    failure = deadline_failure(bound, answers, len(texts), expired) if expired else None
    failure = failure or answer_failure(dim, expected_dim)
    if failure:
        return Answers({**common, "next_step": failure[1]}, answers, key.target, failure[0])
    embeddings, cover = _in_plan_order(plan, texts, order, answers)
    return _placed(key, plan, target_mode, common, embeddings, cover, dim)


def _in_plan_order(
    plan: AuditPlan, texts: list[str], order: np.ndarray, answers: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The answers put back in the plan's order, each repeat scored with its first usable
    answer: (the probes' and the target's, the cover texts')."""
    embeddings = np.empty_like(answers)
    embeddings[order] = answers  # back to the original probe order
    embeddings = embeddings[first_answered(texts, order, answers)]
    n_probes, n_cover = len(plan.texts), len(plan.cover)
    cover = embeddings[n_probes : n_probes + n_cover]  # never scored; they join the clean fit
    return embeddings[np.r_[0:n_probes, n_probes + n_cover : len(texts)]], cover


def _placed(
    key: WatermarkKey,
    plan: AuditPlan,
    target_mode: str,
    common: dict[str, Any],
    embeddings: np.ndarray,
    cover: np.ndarray,
    dim: int | None,
) -> Answers:
    """The answers mapped into the key's coordinates when the key can, and the target
    vector taken (the suspect's own in query mode), or why there are none."""
    if plan.cover_rows is not None:  # alignable
        alignment, mapped, mapped_cover = align_answers(plan, embeddings, cover, key.dim)
        common["alignment"] = "" if alignment is None else alignment.describe()
        if alignment is None and dim != key.dim:
            common["next_step"] = NEXT_RETRY
            reason = (
                f"the suspect returns {dim}-dimensional embeddings, not the key's {key.dim}, "
                "and answered too few of the audit's texts to map them onto the key's "
                "coordinates"
            )
            return Answers(common, embeddings, key.target, reason, cover)
        embeddings, cover = mapped, mapped_cover
    target_vector = key.target
    if target_mode == "query":
        target_vector, embeddings = embeddings[-1], embeddings[:-1]
        if not np.isfinite(target_vector).all():
            reason = "the suspect failed to embed the target text"
            common["next_step"] = NEXT_RETRY
            return Answers(common, embeddings, key.target, reason, cover)
    return Answers(common, embeddings, target_vector, cover=cover)


def ask_shuffled(
    suspect_fn: SuspectFn,
    texts: list[str],
    seed: int | None,
    batch_size: int,
    progress: Progress | None,
    expected_dim: int | None,
    deadline: float | None,
    recorder: Recorder | None,
    stall_timeout: float | None = None,
) -> tuple[np.ndarray, Replies]:
    """The texts' order (triggers, others and cover mixed) and the suspect's replies.

    Without a ``seed`` one is drawn here (as ``default_rng(None)`` would draw it), so
    that a transcript can keep it and its replay send the texts in the same order.
    A transcript is committed here, once the asking is over and before any answer
    is scored (:meth:`.recorder.Recorder.commit`)."""
    shuffle = seed if seed is not None else int(cast(int, np.random.SeedSequence().entropy))
    order = np.random.default_rng(shuffle).permutation(len(texts))
    if recorder is not None:
        recorder.begin(shuffle, len(texts))
    asked = [texts[i] for i in order]
    replies = query_suspect(
        suspect_fn, asked, batch_size, progress, expected_dim, deadline, recorder, stall_timeout
    )
    if recorder is not None:  # every answer fixed and anchored before any is scored
        recorder.commit(asked[len(replies.answers) - 1] if len(replies.answers) else None)
    return order, replies


def first_answered(texts: Sequence[str], order: np.ndarray, answers: np.ndarray) -> np.ndarray:
    """For each position of ``texts``, the position of that text's first answered copy.

    An audit drawn from traffic that repeats texts sends a repeat again
    (:meth:`..mark.probes.BandScan.sample`). Every copy of a text is scored with the
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


def deadline_failure(
    seconds: float | None, answers: np.ndarray, n_texts: int, kind: str = "deadline"
) -> tuple[str, str]:
    """Why an audit whose asking stopped on a clock has no verdict, and what to do next.

    ``kind`` is the clock: ``"stall"`` (no answer for ``seconds``) or ``"deadline"``
    (the whole asking took ``seconds``). Always inconclusive: the texts left unasked
    are not a sample the verdict could rest on, and a suspect must never gain by
    stalling."""
    answered = int(np.isfinite(answers).all(axis=1).sum())
    bound = "" if seconds is None else f" of {seconds:g} s"  # None: a transcript's replay
    tally = f"with {answered:,} of its {n_texts:,} texts answered"
    if kind == "stall":
        return (
            f"the suspect sent no answer for {seconds:g} s (the audit's stall guard) "
            f"{tally}: it stalled, and asking stopped",
            "run the audit again when the suspect answers reliably, or let it wait longer "
            "for each answer (stall_timeout= / --stall-timeout SECONDS); a call the suspect "
            "never answers is abandoned, and re-running is sound, since a fault is never "
            "evidence",
        )
    return (
        f"the audit's deadline{bound} passed {tally}: the suspect stalled or answered too "
        "slowly, and asking stopped",
        "run the audit again when the suspect answers reliably, or allow it more time "
        "(deadline= / --deadline SECONDS, or no deadline: the stall guard alone ends an "
        "audit whose suspect stops answering); a call the suspect never answers is "
        "abandoned at the deadline, and re-running is sound, since a fault is never evidence",
    )


def answer_failure(dim: int | None, expected_dim: int | None) -> tuple[str, str] | None:
    """Why the answers cannot be scored at all, and what to do next (None if they can)."""
    if dim is None:
        return "every query to the suspect failed", NEXT_RETRY
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
