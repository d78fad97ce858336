"""What an audit may be asked to do: its option types, the limit on answers, the suspect.

The options themselves, their defaults and their one validator are
:class:`.options.AuditOptions`; the defaults are lines of :mod:`..ground.defaults`.

Why a stall guard: a suspect that answers and then stalls (a call that hangs) would
hold the audit for ever, or for the batches times the client's timeouts times its
retries. So the audit waits at most :data:`..ground.defaults.DEFAULT_STALL_TIMEOUT` seconds for any
one answer and then ends inconclusive, saying how many texts were answered. Each answer
restarts that wait, so a slow but healthy suspect (a CPU model, whose whole audit
may take many minutes) is never cut. A total bound on the asking, ``deadline=``,
is there for a caller who wants one; it is off by default
(:data:`..ground.defaults.DEFAULT_DEADLINE`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from ..ground.errors import InputTypeError

__all__ = [
    "MAX_ANSWER_DIM",
    "STATISTICS",
    "ProbeKind",
    "ReferenceFn",
    "Statistic",
    "SuspectFn",
    "TargetMode",
    "check_suspect",
]

#: A suspect as the core asks it: texts in, one embedding row per text out.
SuspectFn = Callable[[list[str]], Any]
#: A reference copy as an audit asks it (:mod:`.references`): texts in, one row per text out.
ReferenceFn = Callable[[list[str]], Any]
TargetMode = Literal["key", "query"]
ProbeKind = Literal["auto", "sentences", "words"]
Statistic = Literal["combined", "raw", "adjusted", "corrected", "directed", "field", "map"]
#: ``"field"`` is a field key's one statistic (:mod:`..designs.field`), ``"map"`` a map key's
#: (:mod:`..designs.map`); the others are a word key's.
STATISTICS: tuple[str, ...] = (
    "combined",
    "raw",
    "adjusted",
    "corrected",
    "directed",
    "field",
    "map",
)

#: The widest answers an audit accepts. A key that maps answers into its own
#: coordinates (:mod:`..stats.align`) takes a suspect of any dimension, so without a bound a
#: hostile endpoint answering a million numbers a text would fill the auditor's memory
#: (thousands of audit texts x 1e6 float64: gigabytes) instead of getting an inconclusive
#: report.
#: Served embedding models stay far below this (MiniLM 384, OpenAI's largest 3,072,
#: 7B-parameter embedders 4,096).
MAX_ANSWER_DIM = 16_384


def check_suspect(suspect: object) -> None:
    """Refuse a suspect the core cannot call, naming the adapter that can."""
    if not callable(suspect):
        raise InputTypeError(
            f"the core's verify takes a callable list[str] -> embeddings, not a "
            f"{type(suspect).__name__}; pass it to espew_integrations.verify (which adapts "
            "LangChain, LlamaIndex, Chroma and OpenAIEndpoint suspects) or wrap it with "
            "espew_integrations.as_suspect"
        )
