"""Two-layer trigger draws: a shared layer for every tenant, and one layer per tenant.

A provider with many API customers gives each of them their own key
(:meth:`.keyring.KeyRing.key_for`). Every tenant key marks the union of

* the **shared layer**, drawn from the ring's salt exactly as an ordinary key
  draws its triggers (:func:`..ground.draw.draw_triggers`): it proves a copy, and
  survives a thief who votes across several accounts, since every account
  marks it the same way;
* the **tenant layer**, ``n`` words drawn from the band *minus* the shared
  layer (the *universe*) with the tenant's own salt: it names the account.

The tenant salt is ``HMAC-SHA256(master, domain || tenant_id)``: a keyed
derivation, so the master secret is never in a tenant key, and one tenant's
salt says nothing about another's. The tenant layer is then ``n`` universe
words picked by a partial Fisher-Yates shuffle driven by SHAKE-256 output of
the tenant salt: for a pseudo-random stream that is a uniformly random ``n``-subset,
which is what keeps the per-tenant rank test exact (see :mod:`..trace`). SHAKE
rather than a numpy Generator because the draw must be re-derivable by an
arbiter years later: hashlib's output never changes between versions, while
numpy only promises stable streams for its bit generators. It is also fast:
one HMAC and one SHAKE call per tenant, and a shuffle vectorised over a whole
batch of tenants (see ``benchmarks/bench_trace.py`` for 100,000 tenants).
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
from collections.abc import Sequence

import numpy as np

from ..ground.draw import draw_triggers
from ..ground.errors import InputError, KeyGenerationError
from .key_checks import SALT_BYTES

__all__ = [
    "MAX_TENANT_ID_CHARS",
    "TenantLayer",
    "check_tenant_id",
    "checked_tenant",
    "draw_layer_indices",
    "layered_triggers",
    "tenant_salt",
    "universe",
]

_TENANT_DOMAIN = b"espew-ring-v1/tenant\x00"
_LAYER_DOMAIN = b"espew-ring-v1/layer\x00"
#: Tenant layers are drawn for this many tenants at a time (bounds memory for
#: big bands: 4,096 tenants x 2,000 words x 8 bytes = 64 MB of shuffle state).
_CHUNK = 4096
MAX_TENANT_ID_CHARS = 256


@dataclasses.dataclass(frozen=True)
class TenantLayer:
    """What a tenant key holds about its own layer (the salt is secret).

    ``n_shared`` says how many of the key's triggers are the shared layer; the
    rest are the tenant layer. ``salt`` never appears in ``repr``.
    """

    tenant_id: str
    salt: bytes = dataclasses.field(repr=False)
    n_shared: int

    def __post_init__(self) -> None:
        check_tenant_id(self.tenant_id)
        if not isinstance(self.salt, (bytes, bytearray)) or len(self.salt) != SALT_BYTES:
            raise InputError(f"a tenant layer's salt must be {SALT_BYTES} bytes")
        if _checked_n_shared(self.n_shared) < 1:
            raise InputError(f"a tenant layer needs a shared layer, got n_shared={self.n_shared}")
        object.__setattr__(self, "salt", bytes(self.salt))

    def to_payload(self) -> dict[str, object]:
        """The JSON fields a key file stores (salt in hex: the file is secret anyway)."""
        return {"id": self.tenant_id, "salt": self.salt.hex(), "n_shared": self.n_shared}

    @classmethod
    def from_payload(cls, payload: dict[str, object]) -> TenantLayer:
        """Inverse of :meth:`to_payload`; raises ValueError on malformed fields."""
        salt = payload.get("salt") if isinstance(payload, dict) else None
        if not isinstance(salt, str):
            raise InputError("the tenant layer record is malformed")
        tenant_id = check_tenant_id(payload.get("id"))
        return cls(
            tenant_id=tenant_id,
            salt=bytes.fromhex(salt),
            n_shared=_checked_n_shared(payload.get("n_shared")),
        )


def _checked_n_shared(n_shared: object) -> int:
    """A tenant layer's ``n_shared`` if it is an integer (not a bool)."""
    if isinstance(n_shared, bool) or not isinstance(n_shared, int):
        raise InputError("a tenant layer's n_shared must be an integer")
    return n_shared


def check_tenant_id(tenant_id: object) -> str:
    """A tenant id is a printable, non-empty string of at most 256 characters.

    Ids end up in reports, logs and file names, so control characters,
    newlines and surrounding spaces are refused rather than escaped.
    """
    if not isinstance(tenant_id, str):
        raise InputError(f"a tenant id must be a string, got {type(tenant_id).__name__}")
    if not tenant_id or len(tenant_id) > MAX_TENANT_ID_CHARS:
        raise InputError(f"a tenant id must have 1 to {MAX_TENANT_ID_CHARS} characters")
    if not tenant_id.isprintable() or tenant_id.strip() != tenant_id:
        raise InputError(
            "a tenant id must be printable, without control characters or surrounding spaces"
        )
    return tenant_id


def tenant_salt(master: bytes, tenant_id: str) -> bytes:
    """The tenant's salt: ``HMAC-SHA256(master, domain || utf-8 tenant id)``."""
    message = _TENANT_DOMAIN + check_tenant_id(tenant_id).encode("utf-8")
    return hmac.digest(bytes(master), message, "sha256")


def universe(salt: bytes, band: Sequence[str], n_shared: int) -> tuple[str, ...]:
    """The band words a tenant layer is drawn from: the band minus the shared layer, sorted."""
    shared = draw_triggers(salt, band, n_shared)
    return tuple(w for w in sorted(set(band)) if w not in shared)


def draw_layer_indices(salts: Sequence[bytes], n_universe: int, n_triggers: int) -> np.ndarray:
    """For each salt, the indices (ascending) of its ``n_triggers`` universe words.

    Returns an ``(len(salts), n_triggers)`` int64 array. A partial
    Fisher-Yates shuffle driven by 64-bit SHAKE-256 output words: step ``j``
    swaps position ``j`` with a uniform position in ``[j, n_universe)``, so
    the first ``n_triggers`` positions are a uniform subset (the modulo bias is
    below ``n_universe / 2**64``). Vectorised over the tenants: Python calls
    SHAKE once per tenant and loops only over the ``n_triggers`` steps.

    >>> draw_layer_indices([bytes(32)], 10, 3).shape
    (1, 3)
    """
    if not 0 < n_triggers < n_universe:
        raise InputError(
            f"cannot draw a layer of {n_triggers} words from a universe of {n_universe} "
            "(at least one universe word must stay outside the layer)"
        )
    out = np.empty((len(salts), n_triggers), dtype=np.int64)
    width = 8 * n_triggers
    spans = n_universe - np.arange(n_triggers, dtype=np.uint64)
    for start in range(0, len(salts), _CHUNK):
        chunk = salts[start : start + _CHUNK]
        stream = b"".join(hashlib.shake_256(_LAYER_DOMAIN + s).digest(width) for s in chunk)
        words = np.frombuffer(stream, dtype="<u8").reshape(len(chunk), n_triggers)
        jumps = (words % spans).astype(np.int64) + np.arange(n_triggers)
        order = np.tile(np.arange(n_universe, dtype=np.int64), (len(chunk), 1))
        rows = np.arange(len(chunk))
        for j in range(n_triggers):  # over the layer's words, not the tenants
            here, there = order[:, j].copy(), order[rows, jumps[:, j]]
            order[:, j], order[rows, jumps[:, j]] = there, here
        out[start : start + len(chunk)] = np.sort(order[:, :n_triggers], axis=1)
    return out


def layered_triggers(
    salt: bytes, band: Sequence[str], layer: TenantLayer, n_triggers: int
) -> frozenset[str]:
    """The trigger set a tenant key must hold: the shared layer plus its tenant layer.

    ``salt`` is the key's (shared) salt, ``n_triggers`` the key's total trigger
    count. This is what a tenant key's :attr:`~.key.WatermarkKey.verifiable`
    checks, so both draws are re-derived whenever a tenant key is loaded.
    """
    words = universe(salt, band, layer.n_shared)
    n_tenant = n_triggers - layer.n_shared
    if n_tenant < 1 or n_tenant >= len(words):
        return frozenset()  # no legitimate draw has this shape: never verifiable
    picked = draw_layer_indices([layer.salt], len(words), n_tenant)[0]
    return draw_triggers(salt, band, layer.n_shared) | {words[i] for i in picked}


def checked_tenant(tenant: object) -> TenantLayer | None:
    """``tenant`` if it is None or a :class:`.layers.TenantLayer`."""
    if tenant is not None and not isinstance(tenant, TenantLayer):
        raise KeyGenerationError("tenant must be a TenantLayer (see KeyRing.key_for)")
    return tenant
