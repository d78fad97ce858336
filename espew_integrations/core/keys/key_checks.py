"""The rules every key field obeys, in one place for the key and for keygen.

:class:`~.key.WatermarkKey` checks its fields with them when it is built
(from keygen, a file or ``replace``), and :func:`~.keygen.generate` checks the
caller's options with the same functions before any slow work, so both say
the same thing about the same mistake.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..ground.draw import check_audit_round
from ..ground.errors import KeyGenerationError
from ..ground.text import NORMALIZATIONS, UNICODE_V1
from ..mark.design import LEGACY_DESIGN, MarkingDesign, design_class
from ..mark.words import is_word

__all__ = [
    "SALT_BYTES",
    "SELECTIONS",
    "check_alpha",
    "check_fields",
    "check_freq_band",
    "check_positions",
    "check_probes",
    "check_selection",
    "check_strength",
    "check_text_rules",
    "checked_design",
    "checked_info",
    "is_number_between",
    "min_band_size",
    "n_positions",
    "read_only_vector",
]

SELECTIONS = ("smallest", "hashed")
SALT_BYTES = 32
UNIT_NORM_TOLERANCE = 1e-6


def n_positions(alpha: float, dim: int) -> int:
    """floor(alpha * dim), guarded against float round-off (0.29 * 100 = 28.999...)."""
    return math.floor(alpha * dim + 1e-9)


def min_band_size(n_triggers: int) -> int:
    # At least as many benign words as triggers: below that the exact test's
    # smallest reachable p-value is too coarse to convict at any useful level.
    return 2 * n_triggers


def is_number_between(value: object, low: float, high: float) -> bool:
    """Whether ``value`` is a real number (not a bool, not NaN) with ``low < value < high``."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and low < value < high


def check_alpha(alpha: object) -> None:
    if not is_number_between(alpha, 0.0, 1.0):
        raise KeyGenerationError(f"alpha must be a number with 0 < alpha < 1, got {alpha!r}")


def check_strength(strength: object) -> None:
    if (
        isinstance(strength, bool)
        or not isinstance(strength, (int, float))
        or not 0.0 < strength <= 1.0
    ):
        raise KeyGenerationError(
            f"strength must be a number with 0 < strength <= 1, got {strength!r}"
        )


def check_selection(selection: object) -> None:
    if selection not in SELECTIONS:
        raise KeyGenerationError(f"selection must be one of {SELECTIONS}, got {selection!r}")


def check_freq_band(freq_band: object) -> None:
    ok = (
        isinstance(freq_band, (tuple, list))
        and len(freq_band) == 2
        and all(isinstance(v, (int, float)) for v in freq_band)
        and 0.0 <= freq_band[0] < freq_band[1] <= 1.0
    )
    if not ok:
        raise KeyGenerationError(
            f"freq_band must be (low, high) with 0 <= low < high <= 1, got {freq_band!r}"
        )


def check_fields(
    triggers: frozenset[str],
    target: Any,
    target_text: object,
    band: tuple[str, ...],
    salt: object,
    alpha: object,
    selection: object,
    freq_band: object,
    normalization: str = UNICODE_V1,
) -> None:
    check_alpha(alpha)
    check_selection(selection)
    check_freq_band(freq_band)
    if not triggers:
        raise KeyGenerationError("the trigger set is empty")
    if not all(isinstance(w, str) and is_word(w, normalization) for w in triggers):
        raise KeyGenerationError("every trigger must be one lowercase word of the tokeniser")
    if not all(isinstance(w, str) and is_word(w, normalization) for w in band):
        raise KeyGenerationError("every band word must be one lowercase word of the tokeniser")
    if not triggers <= set(band):
        raise KeyGenerationError("the triggers must be a subset of the band")
    if len(band) < len(triggers) + 1:
        raise KeyGenerationError("the band must contain benign words besides the triggers")
    if not isinstance(target_text, str) or not target_text.strip():
        raise KeyGenerationError("target_text must be a non-empty string")
    if not isinstance(salt, (bytes, bytearray)) or len(salt) != SALT_BYTES:
        raise KeyGenerationError(f"the salt must be {SALT_BYTES} bytes")
    try:
        arr = np.asarray(target, dtype=np.float64)
    except (TypeError, ValueError):
        raise KeyGenerationError("the target is not a numeric vector") from None
    if arr.ndim != 1 or arr.size < 2:
        raise KeyGenerationError(f"the target must be a 1-D vector, got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise KeyGenerationError("the target contains NaN or infinite values")
    norm = float(np.linalg.norm(arr))
    if abs(norm - 1.0) > UNIT_NORM_TOLERANCE:
        raise KeyGenerationError(f"the target must have unit norm, its norm is {norm:.6g}")


def check_positions(alpha: float, dim: int, error: type[Exception] = KeyGenerationError) -> None:
    if n_positions(alpha, dim) < 1:
        raise error(
            f"alpha={alpha} with a {dim}-dimensional target overwrites floor(alpha*d) = 0 "
            "coordinates: the watermark would silently do nothing. Raise alpha."
        )


def check_text_rules(normalization: object, window: object) -> None:
    if normalization not in NORMALIZATIONS:
        raise KeyGenerationError(
            f"unknown text normalization {normalization!r}; known: {NORMALIZATIONS}"
        )
    if window is not None and (
        isinstance(window, bool) or not isinstance(window, int) or window < 3
    ):
        raise KeyGenerationError(f"window must be None or an integer >= 3, got {window!r}")


def check_probes(
    n_band: int,
    texts: Sequence[str],
    owner: Sequence[int],
    probe_reference: Sequence[float],
    word_reference: Sequence[float],
    *,
    n_embeddings: int = 0,
) -> None:
    """The stored audit probes agree with each other and with a band of ``n_band`` words.

    ``n_embeddings`` is the number of stored clean probe embeddings (0: none stored).
    """
    if len(texts) != len(owner) or (probe_reference and len(probe_reference) != len(texts)):
        raise KeyGenerationError("the stored probes, owners and references differ in length")
    if n_embeddings not in (0, len(texts)):
        raise KeyGenerationError(
            f"the key stores {n_embeddings} probe embeddings for {len(texts)} probes"
        )
    if not all(isinstance(t, str) and t for t in texts):
        raise KeyGenerationError("every stored probe must be a non-empty text")
    if owner and (min(owner) < 0 or max(owner) >= n_band):
        raise KeyGenerationError("a stored probe names a band word that does not exist")
    if word_reference and len(word_reference) != n_band:
        raise KeyGenerationError("the stored word references do not match the band")
    refs = tuple(probe_reference) + tuple(word_reference)
    if not all(math.isfinite(x) and -1.0 - 1e-6 <= x <= 1.0 + 1e-6 for x in refs):
        raise KeyGenerationError("a stored reference cosine is not a finite number in [-1, 1]")


def checked_info(info: dict[str, Any] | None) -> dict[str, Any]:
    """A copy of a key's ``info``, whose ``audit_round`` (if any) is a positive integer."""
    checked = dict(info or {})
    try:
        check_audit_round(checked.get("audit_round", 1), "info['audit_round']")
    except ValueError as exc:
        raise KeyGenerationError(str(exc)) from None
    return checked


def checked_design(design: object, band: Sequence[str], dim: int) -> MarkingDesign:
    """``design`` checked against the key's band and dimension; None is the legacy design."""
    design = design_class(LEGACY_DESIGN).from_payload(None, dim) if design is None else design
    if not isinstance(design, MarkingDesign):
        raise KeyGenerationError(f"design must be a MarkingDesign, not {type(design).__name__}")
    design.check(band, dim)
    return design


def read_only_vector(target: Any) -> np.ndarray:
    """The target as a float64 vector nobody can make writable again.

    An array that owns its memory can be flipped back to writable with
    ``setflags(write=True)``; one that views an immutable ``bytes`` object
    cannot.
    """
    values = np.array(target, dtype=np.float64).reshape(-1)
    frozen = np.frombuffer(values.tobytes(), dtype=np.float64)
    return frozen
