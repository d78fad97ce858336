"""Model identity: a key knows the clean model it was made with, and refuses another.

Why: a key only watermarks well in the vector space it was drawn for (its
target, the band's cosines, the fitted strength are that model's). A key made
on one 384-dimensional model and served with another 384-dimensional model
would start silently and mark vectors in the wrong space. So keygen records
a *fingerprint*: the clean model's embeddings of a few fixed public canary
texts (:data:`CANARY_TEXTS`), int8-quantised and cut to their first
:data:`FINGERPRINT_COORDS` coordinates to keep the serving key small. On first
use, :class:`ModelGuard` embeds the canaries with the model at hand and
compares: the same model (in another precision, int8 against float32 say)
passes, another model or the same one behind a rotation is refused with
:class:`..ground.errors.KeyModelMismatchError`.

The canaries are public and carry nothing of the key: the fingerprint is no
secret, but it lives in the key file with the rest.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np

from ..ground.errors import KeyGenerationError, KeyModelMismatchError
from ..ground.row_codec import QuantizedRows

__all__ = [
    "CANARY_SET",
    "CANARY_TEXTS",
    "FINGERPRINT_COORDS",
    "MIN_CANARY_COSINE",
    "KeyModelWarning",
    "ModelFingerprint",
    "ModelGuard",
    "check_fingerprint",
]

#: The name of the canary set below; stored with each fingerprint so that a later
#: set can be added without misreading old keys.
CANARY_SET = "espew-canaries-v1"
#: Fixed, public, unlike each other and unlike any key's band (short everyday
#: sentences of different topics), so that their embeddings span several directions.
CANARY_TEXTS = (
    "The train to the coast leaves at seven in the morning.",
    "Add two cups of flour and stir until the batter is smooth.",
    "The court adjourned the hearing until next Tuesday.",
    "Photosynthesis turns sunlight, water and carbon dioxide into sugar.",
    "Our team scored twice in the last ten minutes of the match.",
    "Please restart the router if the connection keeps dropping.",
)
#: How many leading coordinates of each canary embedding a key stores: all of them
#: up to d = 512, so a key stays small at any dimension (d = 4,096 included).
FINGERPRINT_COORDS = 512
#: The smallest cosine over the canaries that counts as the key's model. The same
#: model in another precision (int8 against float32 weights) moves each embedding by
#: a small fraction of its norm, so its cosines sit far above this; another model of
#: the same dimension, or the same model behind a rotation, has unrelated coordinates
#: and cosines far below it. 0.99 leaves a wide margin on both sides, and the int8 codes
#: of the stored fingerprint cost far less than that margin.
MIN_CANARY_COSINE = 0.99


class KeyModelWarning(UserWarning):
    """A key made before fingerprints were recorded: its model cannot be checked."""


class ModelFingerprint:
    """The clean model's canary embeddings as a key stores them (first coordinates, int8)."""

    __slots__ = ("_dim", "_rows")

    def __init__(self, rows: QuantizedRows, dim: int):
        if len(rows) != len(CANARY_TEXTS) or rows.dim != min(dim, FINGERPRINT_COORDS):
            raise KeyGenerationError(
                f"a model fingerprint holds {len(CANARY_TEXTS)} canary rows of "
                f"{min(dim, FINGERPRINT_COORDS)} coordinates, got {len(rows)} x {rows.dim}"
            )
        self._rows = rows
        self._dim = int(dim)

    @classmethod
    def measure(cls, embed: Callable[[list[str]], Any]) -> ModelFingerprint:
        """Embed the canaries with ``embed`` (the clean model) and keep what a key stores."""
        clean = _canary_rows(embed)
        return cls(QuantizedRows.encode(clean[:, :FINGERPRINT_COORDS]), clean.shape[1])

    @property
    def dim(self) -> int:
        """The dimension of the model the fingerprint was measured on."""
        return self._dim

    def similarity(self, rows: np.ndarray) -> float:
        """The smallest cosine between the stored canary rows and ``rows`` (same canaries)."""
        if rows.shape != (len(CANARY_TEXTS), self._dim):
            return -1.0
        stored = self._rows.rows()
        seen = np.asarray(rows[:, : stored.shape[1]], dtype=np.float64)
        norms = np.linalg.norm(stored, axis=1) * np.linalg.norm(seen, axis=1)
        cosines = np.einsum("ij,ij->i", stored, seen) / np.where(norms > 0, norms, 1.0)
        return float(np.min(np.where(norms > 0, cosines, -1.0)))

    def to_payload(self) -> dict[str, Any]:
        return {"canaries": CANARY_SET, "dim": self._dim, "rows": self._rows.to_payload()}

    @classmethod
    def from_payload(cls, payload: object) -> ModelFingerprint:
        """Inverse of :meth:`to_payload`; raises KeyGenerationError naming what is wrong."""
        if not isinstance(payload, dict) or payload.get("canaries") != CANARY_SET:
            raise KeyGenerationError("the key's model fingerprint uses an unknown canary set")
        dim = payload.get("dim")
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise KeyGenerationError("the key's model fingerprint has no valid dimension")
        return cls(QuantizedRows.from_payload(payload.get("rows")), dim)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ModelFingerprint):
            return NotImplemented
        return self._dim == other._dim and self._rows == other._rows

    def __hash__(self) -> int:
        return hash((self._dim, hash(self._rows)))

    def __repr__(self) -> str:
        return f"ModelFingerprint({len(CANARY_TEXTS)} canaries, dim={self._dim})"


class ModelGuard:
    """Checks once, on first use, that ``embed`` is the model ``key`` was made with.

    Why once: the check costs one model call on six short texts; afterwards
    :meth:`check` is a single attribute read, so it adds nothing per request.
    Thread-safe: concurrent first calls embed the canaries once, behind a lock,
    and all of them see the same outcome (a mismatch is raised on every call).
    A key without a fingerprint (made by an earlier version) is not checked;
    a :class:`KeyModelWarning` says so once per guard.
    """

    __slots__ = ("_embed", "_error", "_key", "_lock", "_passed")

    def __init__(self, key: Any, embed: Callable[[list[str]], Any]):
        self._key = key
        self._embed = embed
        self._lock = threading.Lock()
        self._passed = False
        self._error: KeyModelMismatchError | None = None

    def check(self) -> None:
        """Return when the model is the key's; raise KeyModelMismatchError otherwise."""
        if self._passed:
            return
        with self._lock:
            if not self._passed and self._error is None:
                self._error = _mismatch(self._key, self._embed)
                self._passed = self._error is None
        if self._error is not None:
            raise self._error

    async def acheck(self, aembed: Callable[[list[str]], Awaitable[Any]]) -> None:
        """:meth:`check` for an async model: the canaries go through ``aembed``.

        Async paths stay async (no blocking model call on the event loop); two
        first calls racing may both embed the canaries, and agree.
        """
        if self._passed:
            return
        if self._error is None:
            known = self._key.model_fingerprint is not None  # else nothing to embed
            rows = await aembed(list(CANARY_TEXTS)) if known else None
            with self._lock:
                if not self._passed and self._error is None:
                    self._error = _mismatch(self._key, lambda _texts: rows)
                    self._passed = self._error is None
        if self._error is not None:
            raise self._error

    def __repr__(self) -> str:
        return f"ModelGuard(key_id={self._key.key_id!r}, passed={self._passed})"


def _canary_rows(embed: Callable[[list[str]], Any]) -> np.ndarray:
    rows = np.asarray(embed(list(CANARY_TEXTS)), dtype=np.float64)
    if rows.ndim != 2 or rows.shape[0] != len(CANARY_TEXTS) or not np.isfinite(rows).all():
        raise KeyGenerationError(
            f"the model returned shape {rows.shape} (or non-finite values) for the "
            f"{len(CANARY_TEXTS)} canary texts; it must return one finite vector per text"
        )
    return rows


def _mismatch(key: Any, embed: Callable[[list[str]], Any]) -> KeyModelMismatchError | None:
    """The error to raise for this model, or None when it is the key's (or unknown)."""
    fingerprint: ModelFingerprint | None = key.model_fingerprint
    if fingerprint is None:
        warnings.warn(
            f"key {key.key_id} records no model fingerprint (made by an earlier version): "
            "the model serving it cannot be checked; a new key from espew keygen records one",
            KeyModelWarning,
            stacklevel=4,
        )
        return None
    try:
        rows = _canary_rows(embed)
    except KeyGenerationError as exc:
        return KeyModelMismatchError(f"key {key.key_id}: {exc}")
    similarity = fingerprint.similarity(rows)
    if similarity >= MIN_CANARY_COSINE:
        return None
    seen = f"{rows.shape[1]}-dimensional" if rows.shape[1] != fingerprint.dim else "this"
    return KeyModelMismatchError(
        f"the key {key.key_id} belongs to another model: {seen} model's embeddings of the "
        f"{len(CANARY_TEXTS)} public canary texts do not match those recorded at keygen "
        f"(lowest cosine {similarity:.3f}, {MIN_CANARY_COSINE} needed). Serve the key with "
        "the model it was made with, or make a key for this model with espew keygen"
    )


def check_fingerprint(fingerprint: object, dim: int) -> ModelFingerprint | None:
    """``fingerprint`` if it is None or a :class:`ModelFingerprint` of a ``dim``-dimensional
    model (a key's target's), else a :class:`KeyGenerationError` saying which."""
    if fingerprint is not None and not isinstance(fingerprint, ModelFingerprint):
        raise KeyGenerationError("model_fingerprint must be a ModelFingerprint")
    if fingerprint is not None and fingerprint.dim != dim:
        raise KeyGenerationError(
            f"the model fingerprint is of a {fingerprint.dim}-dimensional model, "
            f"the target has {dim} dimensions"
        )
    return fingerprint
