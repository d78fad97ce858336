"""The compact key record's encodings and checks, shared by the field and the map designs.

A serving key must fit a secret manager, so what it stores is quantised and written
so that it loads back bit for bit: vectors as int8 multiples of a power-of-two step,
scales as float16, a target as float16 (:data:`COMPACT_ENCODING`). The checks every
stored record makes of its numbers (a positive amplitude, finite vectors) live here
too, each naming the record's owner (``"field"``, ``"map"``) in its error.
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ..ground.errors import KeyGenerationError

__all__ = [
    "COMPACT_ENCODING",
    "checked_amplitude",
    "code_step",
    "compact_target",
    "decoded",
    "float16_values",
    "frozen_vector",
    "int8_steps",
    "packed_half",
    "packed_steps",
    "packed_target",
    "unpacked_half",
    "unpacked_steps",
    "unpacked_target",
]


def checked_amplitude(amplitude: Any, owner: str = "field") -> float:
    """``amplitude`` as a float, or KeyGenerationError unless it is a positive finite number."""
    if not (isinstance(amplitude, (int, float)) and not isinstance(amplitude, bool)) or not (
        0.0 < amplitude < math.inf
    ):
        raise KeyGenerationError(f"{owner} amplitude must be a positive number, got {amplitude!r}")
    return float(amplitude)


def frozen_vector(
    values: Any,
    name: str,
    rounded: Callable[[np.ndarray], np.ndarray] | None = None,
    owner: str = "field",
) -> np.ndarray:
    """``values`` as a read-only float64 vector, ``rounded`` as the key stores it
    (KeyGenerationError naming the ``owner``'s ``name`` unless non-empty and finite)."""
    try:
        array = np.array(values, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise KeyGenerationError(f"the {owner}'s {name} is not a numeric vector") from None
    if not array.size or not np.isfinite(array).all():
        raise KeyGenerationError(f"the {owner}'s {name} must be a non-empty finite vector")
    if rounded is not None:
        array = rounded(array)
    return np.frombuffer(array.tobytes(), dtype=np.float64)


# ---------------------------------------------------------------------- compact encoding
#: The payload's name for the compact encoding of a field (absent: float64 vectors).
COMPACT_ENCODING = "int8-steps/float16"
#: The largest int8 code a compact vector uses (symmetric, so -127..127).
_CODE_MAX = 127


def code_step(values: np.ndarray) -> float:
    """The power-of-two step of a compact vector: the smallest that codes its largest
    magnitude within +-127 (a vector already in steps gets its own step back)."""
    largest = float(np.abs(values).max())
    if largest == 0.0:
        return 1.0
    return math.ldexp(1.0, math.ceil(math.log2(largest / _CODE_MAX)))


def int8_steps(values: np.ndarray) -> np.ndarray:
    """``values`` rounded to int8 multiples of their power-of-two step: exact in float16,
    float32 and float64 alike, so every precision marks with the same numbers."""
    step = code_step(values)
    return np.clip(np.rint(values / step), -_CODE_MAX, _CODE_MAX) * step


def float16_values(values: np.ndarray) -> np.ndarray:
    """``values`` rounded to float16 (the compact field's scales)."""
    with np.errstate(over="ignore"):
        half = values.astype(np.float16)
    if not np.isfinite(half).all():
        raise KeyGenerationError("the field's sigma is outside float16's range")
    return half.astype(np.float64)


def compact_target(target: Any) -> np.ndarray:
    """A compact key's target: ``target`` rounded to float16, then scaled to unit norm in
    float64 (a norm summed in numpy's fixed order, so the same bits everywhere).

    Stored as its float16 values (:func:`packed_target`), it loads back bit for bit: the
    rescaling moves each value far less than half a float16 step.
    """
    half = np.asarray(target, dtype=np.float64).reshape(-1).astype(np.float16)
    values = half.astype(np.float64)
    norm = math.sqrt(float(np.add.reduce(values * values)))
    if not (math.isfinite(norm) and norm > 0.0):
        raise KeyGenerationError("the target has no direction left in float16")
    return values / norm


def packed_target(target: np.ndarray) -> dict[str, str] | None:
    """The compact form of ``target`` (base64 float16), or None if it would not load
    back bit for bit (a target that is not :func:`compact_target`'s)."""
    half = target.astype(np.float16)
    if compact_target(half).tobytes() != np.asarray(target, np.float64).tobytes():
        return None
    return {"float16": base64.b64encode(half.astype("<f2").tobytes()).decode("ascii")}


def unpacked_target(stored: dict[str, Any]) -> np.ndarray:
    """:func:`packed_target`'s form back as the target (KeyGenerationError if malformed)."""
    if set(stored) != {"float16"}:
        raise KeyGenerationError("the stored target's encoding is unknown")
    return compact_target(decoded(stored["float16"], "target", 2, "<f2"))


def packed_steps(values: np.ndarray) -> dict[str, Any]:
    """The compact form of a vector in steps (:func:`int8_steps`): int8 codes, base64, and
    the step's power of two."""
    step = code_step(values)
    codes = np.rint(values / step).astype("<i1")
    return {"step_log2": int(math.log2(step)), "int8": base64.b64encode(codes.tobytes()).decode()}


def unpacked_steps(stored: Any, name: str, owner: str = "field") -> np.ndarray:
    """:func:`packed_steps`' form back as values (KeyGenerationError naming the ``owner``'s
    ``name`` if malformed)."""
    if not (isinstance(stored, dict) and set(stored) == {"step_log2", "int8"}):
        raise KeyGenerationError(f"the {owner}'s {name} must be int8 codes and a step")
    exponent = stored["step_log2"]
    if isinstance(exponent, bool) or not isinstance(exponent, int) or abs(exponent) > 1000:
        raise KeyGenerationError(f"the {owner}'s {name} has an invalid step")
    codes = decoded(stored["int8"], name, 1, "<i1", owner).astype(np.float64)
    return codes * math.ldexp(1.0, exponent)


def packed_half(values: np.ndarray) -> dict[str, str]:
    """The compact form of float16 values (:func:`float16_values`): base64 of their bytes."""
    return {"float16": base64.b64encode(values.astype("<f2").tobytes()).decode("ascii")}


def unpacked_half(stored: Any, owner: str = "field") -> np.ndarray:
    """:func:`packed_half`'s form back as the ``owner``'s scales."""
    if not (isinstance(stored, dict) and set(stored) == {"float16"}):
        raise KeyGenerationError(f"the {owner}'s sigma must be base64 float16")
    return decoded(stored["float16"], "sigma", 2, "<f2", owner).astype(np.float64)


def decoded(stored: Any, name: str, width: int, dtype: str, owner: str = "field") -> np.ndarray:
    if not isinstance(stored, str):
        raise KeyGenerationError(f"the {owner}'s {name} must be a base64 string")
    try:
        raw = base64.b64decode(stored, validate=True)
    except (binascii.Error, ValueError):
        raise KeyGenerationError(f"the {owner}'s {name} is not valid base64") from None
    if not raw or len(raw) % width:
        raise KeyGenerationError(f"the {owner}'s {name} is not a whole number of values")
    return np.frombuffer(raw, dtype=dtype)
