"""Recorder: how an audit hands what it asked and heard to whoever records it.

Why a protocol: the audit (:mod:`.asking`, :mod:`.suspect_calls`, :mod:`.subject`)
decides; it writes no file. A recorder is told, in order, what the audit is
(:meth:`Recorder.expect`), the order of its texts (:meth:`~Recorder.begin`), each
batch as it comes back (:meth:`~Recorder.batch`), that every answer is in, before
anything is scored (:meth:`~Recorder.commit`), and the verdict
(:meth:`~Recorder.finish`). The records room implements it: the audit transcript
(:class:`~espew_integrations.core.records.transcript.TranscriptRecorder`) is one, and
``tests/unit/test_architecture.py`` keeps the audit from importing the records.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

__all__ = ["Recorder", "utc_now"]


def utc_now() -> str:
    """The current UTC time, to the microsecond (a batch's sent and received times)."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="microseconds")


@runtime_checkable
class Recorder(Protocol):
    """What an audit tells its recorder, in the order it tells it."""

    def expect(
        self, audit: str, suspect: Any, subject: Mapping[str, str], fields: Mapping[str, Any]
    ) -> None:
        """What the audit is (``"verify"`` or ``"trace"``), whom it asks and its names
        (``subject``: name, label), and ``fields`` (the key's commitment and round, the
        options a replay passes again): before anything is asked."""

    def begin(self, shuffle_seed: int, n_texts: int) -> None:
        """The texts' order is drawn from ``shuffle_seed``; ``n_texts`` will be asked."""

    def batch(
        self,
        texts: Sequence[str],
        sent: str,
        *,
        answer: Any = None,
        error: str = "",
        expired: bool = False,
    ) -> None:
        """One batch, sent at ``sent`` (:func:`utc_now`): its answer as it came, its
        fault, or that a clock ran out before it came (``expired``)."""

    def commit(self, last_text: str | None = None) -> str:
        """Every answer is in and none is scored yet; returns the commitment to them.
        ``last_text`` is the audit's last text asked (a recorder may ask it again)."""

    def finish(self, outcome: Mapping[str, Any]) -> str:
        """The verdict (``outcome``); returns the digest the public report carries."""
