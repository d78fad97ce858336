"""The map mark's arithmetic: the salt's matrices, the stored record and the marking.

The design that uses it (which texts, keygen, the audit) is
:mod:`..designs.map`, whose docstring says why the map exists. Here: ``G`` and ``H``
drawn from the salt (:func:`.field.keyed_gaussian` under domains of their own), what
the key stores (:class:`MapMark`: ``mu`` as int8 steps, ``sigma`` as float16, the
compact encoding of :mod:`.compact`), and the marking itself (:func:`map_rows`), in the rows'
own precision through fixed-shape blocks (:data:`BLOCK_ROWS` rows, the last one
zero-padded): BLAS then sees one shape for every batch, so a row's answer never
depends on its batch.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from ..ground.errors import KeyGenerationError
from ..ground.rows import unit_rows
from .compact import (
    COMPACT_ENCODING,
    checked_amplitude,
    code_step,
    compact_target,
    float16_values,
    frozen_vector,
    int8_steps,
    packed_half,
    packed_steps,
    unpacked_half,
    unpacked_steps,
)
from .field import field_scales, keyed_gaussian, unit_names
from .inject import unit_rows_into

__all__ = [
    "BLOCK_ROWS",
    "MAP_CLIP",
    "MapMark",
    "MapOperator",
    "map_inputs",
    "map_outputs",
    "map_rows",
    "map_target",
    "use_blas_scope",
]

_INPUT_DOMAIN = b"espew-map-v1/inputs"
_OUTPUT_DOMAIN = b"espew-map-v1/outputs"
_TARGET_DOMAIN = b"espew-map-v1/target"
#: Each unit's standardised projection is clipped to this magnitude, so an outlying
#: text is never moved more than a few typical marks.
MAP_CLIP = 3.0
#: Rows per marking block: every block is one product of this fixed shape (the last
#: one zero-padded), so a row's bits do not depend on its batch or its place in it.
BLOCK_ROWS = 256


# ---------------------------------------------------------------------- the salt's matrices
def map_inputs(salt: bytes, dim: int, units: int) -> np.ndarray:
    """``G``: the ``dim x units`` Gaussian input units the salt dictates."""
    return keyed_gaussian(salt, dim, units, _INPUT_DOMAIN)


def map_outputs(salt: bytes, dim: int, units: int) -> np.ndarray:
    """``H``: the ``dim x units`` output directions the salt dictates, each of unit norm.

    Independent Gaussian columns, not orthogonalised: a factorisation would tie the
    bits to the machine's LAPACK, and at any embedding dimension random directions
    are near-orthogonal already. Norms are summed in numpy's fixed order."""
    raw = keyed_gaussian(salt, dim, units, _OUTPUT_DOMAIN)
    return raw / np.sqrt(np.add.reduce(raw * raw, axis=0))


def map_target(salt: bytes, dim: int) -> np.ndarray:
    """A map key's target: a keyed unit vector of the salt, in the compact form.

    The key format keeps a target (word statistics and the query mode read it); a map
    key marks without it, and no phrase or query can reveal it."""
    raw = keyed_gaussian(salt, dim, 1, _TARGET_DOMAIN)[:, 0]
    # unit first, so that the float16 form rescaled is its own float16 form again
    return compact_target(raw / math.sqrt(float(np.add.reduce(raw * raw))))


# ---------------------------------------------------------------------- the stored record
class MapMark:
    """What a map key stores: the units, the amplitude, ``mu`` and ``sigma`` (secret).

    ``mu`` (int8 steps) and ``sigma`` (float16) are kept exactly as stored, so every
    precision marks with the same numbers; its repr shows the unit count only.
    """

    __slots__ = ("_amplitude", "_mu", "_sigma", "_units")

    def __init__(self, *, units: int, amplitude: float, mu: Any, sigma: Any):
        unit_names(units)  # the rule on the count
        self._units = int(units)
        self._amplitude = checked_amplitude(amplitude, "map")
        self._mu = frozen_vector(mu, "mu", int8_steps, "map")
        self._sigma = frozen_vector(sigma, "sigma", float16_values, "map")
        if self._sigma.size != self._units or not (self._sigma > 0).all():
            raise KeyGenerationError(
                f"the map's sigma must hold {self._units} positive scales, one per unit"
            )

    @classmethod
    def of_audit(cls, salt: bytes, rows: np.ndarray, units: int, amplitude: float) -> MapMark:
        """The map of the audit's clean ``rows`` (as the key stores them): their mean and
        each unit's projection scale, rounded as the key stores them."""
        mu = int8_steps(unit_rows(rows).mean(axis=0))
        sigma = field_scales(map_inputs(salt, rows.shape[1], units), mu, rows)
        return cls(units=units, amplitude=amplitude, mu=mu, sigma=sigma)

    @property
    def units(self) -> int:
        """``M``: how many units the drawn ones are ranked among."""
        return self._units

    @property
    def amplitude(self) -> float:
        """The map's scale at strength 1: the mark's typical length before normalising."""
        return self._amplitude

    @property
    def mu(self) -> np.ndarray:
        """The mean of the keygen audit's clean unit rows (read-only)."""
        return self._mu

    @property
    def sigma(self) -> np.ndarray:
        """Each input unit's projection scale over the keygen audit (read-only)."""
        return self._sigma

    def derived_from(self, clean_rows: np.ndarray, salt: bytes) -> bool:
        """Whether ``mu`` and ``sigma`` are those of ``clean_rows`` (keygen's audit), to
        the rounding the key stores them with."""
        if not len(clean_rows):
            return False
        mu = unit_rows(clean_rows).mean(axis=0)
        sigma = field_scales(map_inputs(salt, mu.size, self._units), self._mu, clean_rows)
        return bool(
            np.allclose(mu, self._mu, rtol=1e-9, atol=1e-12 + code_step(self._mu) / 2)
            and np.allclose(sigma, self._sigma, rtol=1e-9 + 2.0**-11, atol=0.0)
        )

    def to_payload(self) -> dict[str, Any]:
        """The JSON form stored in the serving key (:data:`.compact.COMPACT_ENCODING`)."""
        return {
            "units": self._units,
            "amplitude": self._amplitude,
            "encoding": COMPACT_ENCODING,
            "mu": packed_steps(self._mu),
            "sigma": packed_half(self._sigma),
        }

    @classmethod
    def from_payload(cls, payload: Any) -> MapMark:
        """Parse :meth:`to_payload`'s form (KeyGenerationError if malformed)."""
        if not isinstance(payload, dict) or set(payload) != {
            "units",
            "amplitude",
            "encoding",
            "mu",
            "sigma",
        }:
            raise KeyGenerationError("the key's map record is malformed")
        if payload["encoding"] != COMPACT_ENCODING:
            encoding = payload["encoding"]
            raise KeyGenerationError(f"the key's map has an unknown encoding {encoding!r}")
        return cls(
            units=payload["units"],
            amplitude=payload["amplitude"],
            mu=unpacked_steps(payload["mu"], "mu", "map"),
            sigma=unpacked_half(payload["sigma"], "map"),
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MapMark):
            return NotImplemented
        return self.to_payload() == other.to_payload()

    def __hash__(self) -> int:
        return hash((self._units, self._amplitude))

    def __repr__(self) -> str:
        return f"MapMark(units={self._units})"


# ---------------------------------------------------------------------- marking
class MapOperator:
    """One key's marking operator in one precision: ``G_S / sigma_S``, its offset
    ``mu . G_S / sigma_S`` and ``c H_S^T``, with the block buffers of this thread."""

    def __init__(self, mark: MapMark, salt: bytes, drawn: np.ndarray, scale: float, dtype):
        dim = mark.mu.size
        inputs = map_inputs(salt, dim, mark.units)[:, drawn] / mark.sigma[drawn]
        # the offset summed in numpy's fixed order, in float64, then rounded once
        self.offset = np.add.reduce(mark.mu[:, None] * inputs, axis=0).astype(dtype)
        self.inputs = np.ascontiguousarray(inputs, dtype=dtype)
        outputs = map_outputs(salt, dim, mark.units)[:, drawn].T * scale
        self.outputs = np.ascontiguousarray(outputs, dtype=dtype)
        self.dtype = np.dtype(dtype)
        self._local = threading.local()

    def buffers(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        held = getattr(self._local, "buffers", None)
        if held is None:
            dim, k = self.inputs.shape
            held = self._local.buffers = (
                np.zeros((BLOCK_ROWS, dim), self.dtype),
                np.empty((BLOCK_ROWS, k), self.dtype),
                np.empty((BLOCK_ROWS, dim), self.dtype),
            )
        return held


def map_rows(matrix: np.ndarray, marked: np.ndarray, key: Any, operator: MapOperator) -> np.ndarray:
    """``unit(e + c * sum_{j in S} clip(z_j(e)) h_j)`` for each marked row, blank rows as
    they came; computed in the rows' own precision, one fixed-shape block at a time."""
    out = np.empty_like(matrix)
    clean, z, moved = operator.buffers()
    with _SCOPE[0]():
        for start in range(0, len(matrix), BLOCK_ROWS):
            n = min(BLOCK_ROWS, len(matrix) - start)
            unit_rows_into(matrix[start : start + n], clean[:n], exact=False)
            clean[n:] = 0.0
            np.matmul(clean, operator.inputs, out=z)
            z -= operator.offset
            np.clip(z, -MAP_CLIP, MAP_CLIP, out=z)
            np.matmul(z, operator.outputs, out=moved)
            moved[:n] += clean[:n]
            unit_rows_into(moved[:n], out[start : start + n], exact=False)
    blank = np.flatnonzero(~marked)
    out[blank] = matrix[blank]
    return out


def use_blas_scope(scope: Callable[[], contextlib.AbstractContextManager[Any]]) -> None:
    """Run every batch's block products inside ``scope()`` (default: as is).

    The package installs one BLAS thread there where ``threadpoolctl`` is installed
    (:mod:`espew_integrations._blas_threads`; the ``[http]`` extra brings it): a block's
    products are small (256 rows), and a multithreaded BLAS spends more on waking and
    joining its threads than on the arithmetic, most of all on a loaded server
    (``benchmarks/bench_watermark.py``). The core itself imports nothing but numpy and
    scipy. The bits do not change with the thread count: BLAS splits a product's rows
    and columns among threads, never a dot product's sum
    (``tests/unit/test_map_design.py`` checks it).
    """
    _SCOPE[0] = scope


#: What a batch's products run inside (:func:`use_blas_scope`).
_SCOPE: list[Callable[[], contextlib.AbstractContextManager[Any]]] = [contextlib.nullcontext]
