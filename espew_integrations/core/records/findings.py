"""What one evidence check established, in words an arbiter reads.

Each check of :func:`..evidence_check.check_transcript` (the chain, where the texts
came from, the requery, the anchors) returns :class:`Findings`; they add up, and
the first failure makes the evidence not hold.
"""

from __future__ import annotations

import dataclasses

__all__ = ["Findings"]


@dataclasses.dataclass(frozen=True)
class Findings:
    """What one check established: lines ``proved``, lines ``not_proved``, and a
    ``failure`` ('' if none) that makes the evidence not hold."""

    proved: tuple[str, ...] = ()
    not_proved: tuple[str, ...] = ()
    failure: str = ""

    def __add__(self, other: Findings) -> Findings:
        return Findings(
            self.proved + other.proved,
            self.not_proved + other.not_proved,
            self.failure or other.failure,
        )
