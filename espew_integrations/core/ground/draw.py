"""Every random choice a verdict relies on, derived from the key's secret salt.

The false-positive guarantee of :mod:`..stats.ranktest` assumes the triggers are a
uniformly random subset of the band, drawn before any suspect existed. A key
whose triggers were hand-picked after the fact (say, the band words an
innocent model already puts near the target) would convict that model. So the
draw is not taken from an opaque random generator: it is a keyed,
deterministic function of the salt and the band. Anyone who is shown the key
(an arbiter in a dispute) re-derives it and checks that the triggers are the
ones the salt dictates; combined with the commitment published at keygen (a
SHA-256 over the whole key), the provider cannot have chosen them.

Each choice ranks candidates by ``HMAC-SHA256(salt, domain || 0 || item)`` and
keeps the first ``k``. HMAC is a pseudo-random function, so for a fresh secret
salt the ranking is a uniformly random permutation, and different domains
(``band``, ``triggers``, ``probes``) give independent draws.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Sequence

from .errors import InputError

__all__ = [
    "audit_salt",
    "check_audit_round",
    "draw_band",
    "draw_triggers",
    "keyed_digests",
    "keyed_order",
]

_BAND_DOMAIN = b"espew-draw-v1/band"
_TRIGGER_DOMAIN = b"espew-draw-v1/triggers"
_AUDIT_ROUND_DOMAIN = b"espew-draw-v1/audit-round"


def keyed_order(salt: bytes, domain: bytes, items: Iterable[str]) -> list[str]:
    """``items`` sorted by their keyed hash: a salt-determined random permutation.

    >>> keyed_order(bytes(32), b"demo", ["a", "b", "c"]) == keyed_order(bytes(32), b"demo", "abc")
    True
    """
    digests = keyed_digests(salt, domain, items)
    return sorted(digests, key=lambda item: (digests[item], item))


def keyed_digests(salt: bytes, domain: bytes, items: Iterable[str]) -> dict[str, bytes]:
    """Each distinct item's ``HMAC-SHA256(salt, domain || 0 || item)``: its rank in
    :func:`keyed_order`, for a draw that merges items ranked in several domains."""
    prefix = hmac.new(bytes(salt), domain + b"\x00", hashlib.sha256)
    digests: dict[str, bytes] = {}
    for item in items:
        if item not in digests:
            mac = prefix.copy()
            mac.update(item.encode("utf-8"))
            digests[item] = mac.digest()
    return digests


def draw_band(salt: bytes, band: Sequence[str], size: int | None) -> list[str]:
    """The sub-band a key keeps when its corpus band exceeds ``size`` words (sorted)."""
    if size is None or len(band) <= size:
        return sorted(set(band))
    return sorted(keyed_order(salt, _BAND_DOMAIN, band)[:size])


def draw_triggers(salt: bytes, band: Sequence[str], n_triggers: int) -> frozenset[str]:
    """The ``n_triggers`` band words the salt selects as triggers.

    >>> band = [f"w{i}" for i in range(10)]
    >>> draw_triggers(bytes(32), band, 3) == draw_triggers(bytes(32), list(reversed(band)), 3)
    True
    """
    if not 0 < n_triggers <= len(set(band)):
        raise InputError(f"cannot draw {n_triggers} triggers from a band of {len(set(band))}")
    return frozenset(keyed_order(salt, _TRIGGER_DOMAIN, band)[:n_triggers])


def audit_salt(salt: bytes, audit_round: int) -> bytes:
    """The salt audit round ``audit_round`` draws its texts with.

    Round 1 is the key's own salt, so its audit is the one keygen stored. Each
    later round gets ``HMAC-SHA256(salt, domain || 0 || round)``: as secret as
    the salt, and a draw independent of every other round's. Only the audit's
    texts are drawn with it; the band and the triggers stay the salt's.

    >>> audit_salt(bytes(32), 1) == bytes(32), audit_salt(bytes(32), 2) == audit_salt(bytes(32), 3)
    (True, False)
    """
    if check_audit_round(audit_round) == 1:
        return bytes(salt)
    mac = hmac.new(bytes(salt), _AUDIT_ROUND_DOMAIN + b"\x00", hashlib.sha256)
    mac.update(str(audit_round).encode("ascii"))
    return mac.digest()


def check_audit_round(value: object, name: str = "audit_round") -> int:
    """``value`` if it is a positive integer (not a bool), else a ValueError naming
    ``name``: the one rule for an audit round, given to :func:`audit_salt` or read
    back from a key's ``info``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"{name} must be a positive integer, got {value!r}")
    return value
