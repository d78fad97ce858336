"""What an audit may be asked to do: its defaults, its option types and their checks.

Why a module of its own: :func:`~espew_integrations.core.verify.verify`, ``trace``
and a transcript's replay take the same options and must refuse the same bad
values with the same words, before a single text is sent to the suspect. The
defaults (:data:`DEFAULT_LEVEL`, :data:`DEFAULT_DEADLINE`) are lines of
:mod:`..defaults`, re-exported here with the limit an audit enforces.

Why a stall guard: a suspect that answers and then stalls (a call that hangs) would
hold the audit for ever, or for the batches times the client's timeouts times its
retries. So the audit waits at most :data:`DEFAULT_STALL_TIMEOUT` seconds for any one
answer and then ends inconclusive, saying how many texts were answered. Each answer
restarts that wait, so a slow but healthy suspect (a CPU model, whose whole audit
may take many minutes) is never cut. A total bound on the asking, ``deadline=``,
is there for a caller who wants one; it is off by default (:data:`DEFAULT_DEADLINE`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal

from ..defaults import DEFAULT_DEADLINE, DEFAULT_LEVEL, DEFAULT_STALL_TIMEOUT
from ..progress import check_progress

__all__ = [
    "DEFAULT_DEADLINE",
    "DEFAULT_LEVEL",
    "DEFAULT_STALL_TIMEOUT",
    "MAX_ANSWER_DIM",
    "STATISTICS",
    "ProbeKind",
    "Statistic",
    "SuspectFn",
    "TargetMode",
    "check_deadline",
    "check_options",
    "check_suspect",
]

#: A suspect as the core asks it: texts in, one embedding row per text out.
SuspectFn = Callable[[list[str]], Any]
TargetMode = Literal["key", "query"]
ProbeKind = Literal["auto", "sentences", "words"]
Statistic = Literal["combined", "raw", "adjusted", "corrected", "directed", "field"]
#: ``"field"`` is a field key's one statistic (:mod:`...field`); the others are a word key's.
STATISTICS: tuple[str, ...] = ("combined", "raw", "adjusted", "corrected", "directed", "field")

#: The widest answers an audit accepts. A key that maps answers into its own
#: coordinates (:mod:`..align`) takes a suspect of any dimension, so without a bound a
#: hostile endpoint answering a million numbers a text would fill the auditor's memory
#: (thousands of audit texts x 1e6 float64: gigabytes) instead of getting an inconclusive
#: report.
#: Served embedding models stay far below this (MiniLM 384, OpenAI's largest 3,072,
#: 7B-parameter embedders 4,096).
MAX_ANSWER_DIM = 16_384


def check_options(
    target_mode: str,
    level: float,
    batch_size: int,
    min_coverage: float,
    statistic: str,
    deadline: float | None = DEFAULT_DEADLINE,
    stall_timeout: float | None = DEFAULT_STALL_TIMEOUT,
    progress: object = None,
) -> None:
    """Refuse an audit option out of its range, naming it: nothing is asked before."""
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
    check_deadline(stall_timeout, name="stall_timeout")
    check_progress(progress)


def check_deadline(deadline: float | None, *, name: str = "deadline") -> None:
    """Refuse a deadline (or stall guard, ``name``) that is not None or a positive,
    finite number of seconds."""
    if deadline is None:
        return
    if isinstance(deadline, bool) or not isinstance(deadline, (int, float)):
        raise TypeError(f"{name} must be a number of seconds or None, got {deadline!r}")
    if not 0.0 < deadline < math.inf:
        raise ValueError(f"{name} must be a positive number of seconds, got {deadline!r}")


def check_suspect(suspect: object) -> None:
    """Refuse a suspect the core cannot call, naming the adapter that can."""
    if not callable(suspect):
        raise TypeError(
            f"the core's verify takes a callable list[str] -> embeddings, not a "
            f"{type(suspect).__name__}; pass it to espew_integrations.verify (which adapts "
            "LangChain, LlamaIndex, Chroma and OpenAIEndpoint suspects) or wrap it with "
            "espew_integrations.as_suspect"
        )
