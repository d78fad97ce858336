"""Calling the suspect: texts in batches, under a stall guard (and a deadline when asked),
faults kept as missing rows.

Why apart from the plan and the scores: everything here is about a party the
auditor does not trust. A call may hang, fail, answer the wrong shape or a
million numbers a text; none of that may stop the audit or count as evidence,
so each failure becomes NaN rows and a printable error, and a stall ends the
asking: when no answer comes for the stall guard's seconds, or at the total
deadline when one was set.
"""

from __future__ import annotations

import contextvars
import math
import threading
import time
from typing import Any, NamedTuple

import numpy as np

from ..ground.errors import ESpeWError, SuspectError
from ..ground.progress import Progress
from ..ground.untrusted import printable
from .recorder import Recorder, utc_now
from .settings import MAX_ANSWER_DIM, SuspectFn

__all__ = ["Deadline", "DeadlinePassed", "Replies", "query_suspect"]


class DeadlinePassed(ESpeWError):
    """The asking stopped on the clock before the suspect answered the batch in hand.

    ``kind`` says which clock: ``"stall"`` (no answer for the stall guard's
    seconds) or ``"deadline"`` (the audit's total time, when one was set; also
    what a transcript's replay raises, where the record does not tell them apart).
    """

    def __init__(self, kind: str = "deadline") -> None:
        super().__init__(kind)
        self.kind = kind


class Deadline:
    """The asking phase's clocks, and suspect calls that cannot outlast them.

    Two clocks, each optional: the **stall guard** (``stall`` seconds) bounds
    the wait for any one answer, so a suspect that stops answering ends the
    asking while one that keeps answering, however slowly it gets through the
    audit, is never cut; the **deadline** (``seconds``) bounds the whole asking,
    and is set only when asked for.

    Why a thread per call: a suspect that blocks for ever in Python cannot be
    interrupted in the thread that called it, so each call runs in a daemon
    thread and the audit waits for it only as long as the clocks allow.
    A call still running then is abandoned: being a daemon, its thread never
    keeps the process alive at exit, and its answer, if one ever comes, is
    dropped. With neither clock the suspect is called in the caller's own
    thread, as a suspect bound to its thread needs.
    """

    def __init__(self, seconds: float | None, stall: float | None = None) -> None:
        self.seconds = seconds
        self.stall = stall
        self._end = None if seconds is None else time.monotonic() + seconds

    def call(self, suspect: SuspectFn, batch: list[str]) -> Any:
        """``suspect(batch)``, or :class:`DeadlinePassed` once a clock has run out."""
        if self._end is None and self.stall is None:
            return suspect(batch)
        remaining = math.inf if self._end is None else self._end - time.monotonic()
        if remaining <= 0:
            raise DeadlinePassed("deadline")
        kind = "deadline"
        if self.stall is not None and self.stall < remaining:
            remaining, kind = self.stall, "stall"
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
            raise DeadlinePassed(kind)
        answered, value = outcome[0]
        if answered:
            return value
        raise value


class Replies(NamedTuple):
    """What :func:`query_suspect` got: the answer rows in the order sent (NaN rows where
    a batch failed), the faults it recorded, the answers' dimension (None if no batch
    succeeded) and which clock ended the asking early (``"stall"``, ``"deadline"``, or
    ``""`` when none did)."""

    answers: np.ndarray
    errors: list[str]
    dim: int | None
    expired: str = ""


def query_suspect(
    suspect: SuspectFn,
    texts: list[str],
    batch_size: int,
    progress: Progress | None,
    expected_dim: int | None = None,
    deadline: float | None = None,
    recorder: Recorder | None = None,
    stall_timeout: float | None = None,
) -> Replies:
    """Embed ``texts`` in batches; failed or malformed batches become NaN rows.

    If the first answer's dimension differs from ``expected_dim``, or exceeds
    :data:`.settings.MAX_ANSWER_DIM`, it stops there: no verdict is possible, so
    the rest of the query budget (and the auditor's memory) is spared. It also
    stops when one call goes ``stall_timeout`` seconds unanswered, or when
    ``deadline`` seconds have passed since the first batch was sent (the batch in
    hand is abandoned, see :class:`Deadline`); the texts not sent are not among
    the rows. Every recorded error passes through
    :func:`..ground.untrusted.printable`: it may quote the suspect's own text. A
    ``recorder`` gets each batch as it was asked and answered (:mod:`..records.transcript`).
    ``progress(done, total)`` is called after each batch with the texts asked so
    far and the texts to ask (:mod:`..ground.progress`).
    """
    errors: list[str] = []
    batches: list[tuple[int, np.ndarray | None]] = []
    dim: int | None = None
    clock = Deadline(deadline, stall_timeout)
    expired = ""
    done = 0
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
        done += len(batch)
        if progress is not None:
            progress(done, len(texts))
    width = dim or 1
    parts = [out if out is not None else np.full((n, width), np.nan) for n, out in batches]
    matrix = np.concatenate(parts) if parts else np.zeros((0, width))
    return Replies(matrix, errors, dim, expired)


def _ask_batch(
    clock: Deadline,
    suspect: SuspectFn,
    batch: list[str],
    dim: int | None,
    errors: list[str],
    recorder: Recorder | None,
) -> tuple[np.ndarray | None, str]:
    """One batch's rows (None if it failed) and which clock ran out first ("" if none).

    The answer is recorded as it came, before it is checked, so a replay of the
    transcript meets the same checks (:mod:`..evidence_check`)."""
    sent = utc_now()
    try:
        answer = clock.call(suspect, batch)
    except DeadlinePassed as passed:
        if recorder is not None:
            recorder.batch(batch, sent, expired=True)
        return None, passed.kind
    except ImportError:
        # A package missing here (httpx for an endpoint, a model's own) is the auditor's
        # to install, not the suspect's fault: it ends the audit with its own message.
        raise
    except Exception as exc:  # a fault is missing data, never evidence
        errors.append(printable(f"{type(exc).__name__}: {exc}"))
        if recorder is not None:
            recorder.batch(batch, sent, error=errors[-1])
        return None, ""
    if recorder is not None:
        recorder.batch(batch, sent, answer=answer)
    try:
        return _batch_rows(answer, len(batch), dim, errors), ""
    except Exception as exc:
        errors.append(printable(f"{type(exc).__name__}: {exc}"))
        return None, ""


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
