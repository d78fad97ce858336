"""The keyed *field* mark: every answer moved by a secret linear function of its clean embedding.

Why a second design beside the word triggers: a rule that says which texts are
marked in terms a thief can compute from the text (a public band of words) can
be avoided by computing it, deleting or replacing those words before querying.
The field mark marks every answer, by an amount that depends on where the text's
clean embedding lies, so no text edit avoids it, and a copy that learns the
service linearly learns it too. Everything here is public but the key
(Kerckhoffs): the salt draws the field, and the key stores what serving needs.

The field, for a key of dimension ``d``:

- ``G``: a ``d x M`` Gaussian matrix drawn from the salt (:func:`keyed_gaussian`,
  a SHAKE-256 stream through Box-Muller: the same numbers on every platform and
  numpy version, unlike numpy's generators); ``M`` units, named ``u000``...;
- ``mu``, ``sigma``: the mean of the audit's clean unit rows and, for each unit,
  the standard deviation of its projection ``(e - mu) . G[:, j]`` over them, so
  unit ``j``'s standardised projection is ``z_j = (e - mu) . G[:, j] / sigma_j``;
- the *drawn* units ``S``: ``K`` of the ``M``, the key's triggers, drawn by
  :func:`..ground.draw.draw_triggers` over the unit names (so the commitment and
  :attr:`~..keys.key.WatermarkKey.verifiable` work as for words);
- ``q = amplitude * sum_{j in S} G[:, j] / sigma_j / sqrt(K)``, so the gain of
  a clean unit row ``e`` is ``g(e) = clip((e - mu) . q, -3, 3)``.

A served answer is ``unit(e + g(e) * D(e))``, with ``D(e)`` the ESpeW displacement
of ``e`` (what a trigger text would get, :func:`.inject.mark_all_rows`, minus ``e``):
each answer moves along its own mark direction, signed and scaled by the field.

The verifier (:func:`field_scores`) measures, for each audit text, how far the
suspect's answer leans along that text's mark direction beyond what its clean
position explains, and correlates that lean with every unit's projection; the
drawn units' scores are then ranked among all ``M`` by the exact test of
:mod:`..stats.ranktest`. Nothing in the scores depends on which units were drawn, so
under the null the drawn units are a uniformly random subset: the test is exact.
"""

from __future__ import annotations

import base64
import hashlib
import math
from collections.abc import Collection, Sequence
from typing import Any

import numpy as np

from ..ground.draw import keyed_order
from ..ground.errors import KeyGenerationError
from ..ground.rows import unit_rows
from ..ground.stable import least_squares_slope, snap_residual
from .compact import (
    COMPACT_ENCODING,
    checked_amplitude,
    code_step,
    decoded,
    float16_values,
    frozen_vector,
    int8_steps,
    packed_half,
    packed_steps,
    unpacked_half,
    unpacked_steps,
)

__all__ = [
    "FIELD_CLIP",
    "SCORE_WHITENING",
    "FieldMark",
    "audit_sample",
    "check_field",
    "drawn_mask",
    "field_gain",
    "field_projections",
    "field_scales",
    "field_scores",
    "field_twin_scores",
    "field_vector",
    "keyed_gaussian",
    "no_text_rule",
    "reference_leans",
    "scoring_projections",
    "standardised",
    "unit_names",
    "whitened_rows",
]

_GAUSSIAN_DOMAIN = b"espew-field-v1/gaussian"
#: The gain is clipped to this magnitude, so an outlying text is never moved more
#: than a few typical marks.
FIELD_CLIP = 3.0
#: Relative agreement required between a stored field vector and its recomputation
#: from the salt (the transcendental functions may differ in the last bit by platform).
_Q_TOLERANCE = 1e-9


def unit_names(units: int) -> tuple[str, ...]:
    """The names of a field's units (``u000``, ``u001``, ...): the key's band."""
    if isinstance(units, bool) or not isinstance(units, int) or units < 2:
        raise KeyGenerationError(f"a field needs at least 2 units, got {units!r}")
    width = max(3, len(str(units - 1)))
    return tuple(f"u{j:0{width}d}" for j in range(units))


def keyed_gaussian(
    salt: bytes, dim: int, units: int, domain: bytes = _GAUSSIAN_DOMAIN
) -> np.ndarray:
    """The ``dim x units`` standard Gaussian matrix the salt dictates (float64).

    SHAKE-256 over a domain, the shape and the salt gives little-endian uint64
    words; their top 53 bits make uniforms in (0, 1), and Box-Muller turns each
    pair into two Gaussians. A standard, documented stream, so anyone shown the
    key re-derives the same matrix with any tool. ``domain`` separates the matrices
    of different uses of one salt (the field's units, a map key's inputs and outputs).
    """
    n = dim * units
    pairs = (n + 1) // 2
    seed = domain + b"\x00" + dim.to_bytes(4, "big") + units.to_bytes(4, "big")
    stream = hashlib.shake_256(seed + bytes(salt)).digest(16 * pairs)
    words = np.frombuffer(stream, dtype="<u8")
    uniform = ((words >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0**-53
    radius = np.sqrt(-2.0 * np.log(uniform[0::2]))
    angle = (2.0 * math.pi) * uniform[1::2]
    values = np.empty(2 * pairs, dtype=np.float64)
    values[0::2] = radius * np.cos(angle)
    values[1::2] = radius * np.sin(angle)
    return values[:n].reshape(dim, units)


def field_scales(gaussian: np.ndarray, mu: np.ndarray, clean_rows: np.ndarray) -> np.ndarray:
    """Each unit's standard deviation of ``(e - mu) . G[:, j]`` over the clean unit rows."""
    scales = ((unit_rows(clean_rows) - mu) @ gaussian).std(axis=0)
    if not (np.isfinite(scales).all() and (scales > 0).all()):
        raise KeyGenerationError(
            "the audit's clean rows do not vary along every field unit; a field needs an "
            "audit of many different texts"
        )
    return scales


def field_vector(
    gaussian: np.ndarray, scales: np.ndarray, drawn: np.ndarray, amplitude: float
) -> np.ndarray:
    """``q = amplitude * sum_{j drawn} G[:, j] / sigma_j / sqrt(K)``; the gain is ``(e - mu) . q``.

    ``drawn`` masks the drawn units."""
    drawn = np.asarray(drawn, dtype=bool)
    k = int(drawn.sum())
    return amplitude * (gaussian[:, drawn] / scales[drawn]).sum(axis=1) / math.sqrt(k)


def field_gain(clean_unit: np.ndarray, mu: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``g(e) = clip((e - mu) . q, -3, 3)`` for each clean unit row."""
    # A row-wise product and sum, not a matrix-vector product: BLAS blocks a product by the
    # batch's size, so the last bits of a row's gain would depend on its batch.
    return np.clip(((clean_unit - mu) * q).sum(axis=1), -FIELD_CLIP, FIELD_CLIP)


def field_projections(
    clean_unit: np.ndarray, mu: np.ndarray, gaussian: np.ndarray, scales: np.ndarray
) -> np.ndarray:
    """``z_ij = (e_i - mu) . G[:, j] / sigma_j``: every text's standardised unit projections."""
    return ((clean_unit - mu) @ gaussian) / scales


#: The verifier's whitening of the unit projections: the projections it correlates
#: the suspect's lean with are taken in the metric ``(C + lambda I)^-1/2``, with ``C``
#: the covariance of the audit's clean rows and ``lambda`` this multiple of its mean
#: eigenvalue. An innocent model's lean follows where texts lie, mostly along the few
#: directions the clean rows vary most; whitening spreads those over every unit, so
#: the drawn units stand out. Any fixed value is exact (the transform depends on the
#: clean rows alone); this one is chosen for power (``benchmarks/bench_unavoidable.py``).
SCORE_WHITENING = 1.0


def scoring_projections(clean_unit: np.ndarray, mu: np.ndarray, gaussian: np.ndarray) -> np.ndarray:
    """The unit projections the verifier scores with: :func:`whitened_rows` times the
    salt's matrix, each unit scaled to unit standard deviation over the rows.

    They depend on the clean rows and the salt's matrix alone, never on which units
    were drawn, so the rank test over them stays exact.
    """
    return standardised(whitened_rows(clean_unit, mu) @ gaussian)


def whitened_rows(clean_unit: np.ndarray, mu: np.ndarray) -> np.ndarray:
    """``(e_i - mu) (C + lambda I)^-1/2`` for the audit's clean unit rows, with ``C``
    their covariance and ``lambda`` :data:`SCORE_WHITENING` times its mean eigenvalue."""
    centred = clean_unit - clean_unit.mean(axis=0)
    covariance = centred.T @ centred / max(1, len(centred) - 1)
    values, vectors = np.linalg.eigh(covariance)
    values = np.maximum(values, 0.0)
    ridge = SCORE_WHITENING * float(values.mean())
    if ridge <= 0.0:
        raise KeyGenerationError("the audit's clean rows are all the same: nothing to score")
    return (clean_unit - mu) @ ((vectors / np.sqrt(values + ridge)) @ vectors.T)


def standardised(z: np.ndarray) -> np.ndarray:
    """Each column of ``z`` divided by its standard deviation (a constant column stays 0)."""
    scale = z.std(axis=0)
    return np.divide(z, scale, out=np.zeros_like(z), where=scale > 0)


def field_scores(
    answers: np.ndarray,
    directions: np.ndarray,
    clean_unit: np.ndarray,
    z: np.ndarray,
    extra: np.ndarray | None = None,
) -> np.ndarray:
    """Each unit's field score from the suspect's answers (rows with a NaN are left out).

    For text ``i``: ``lean_i = unit(a_i) . v_i`` (``v_i`` its mark direction),
    ``ref_i = e_i . v_i`` (where its clean row already lies along it), and
    ``adj_i = lean_i - slope * ref_i`` with the least-squares slope over every
    answered text, so what the suspect shares of the clean model's position
    cancels. Unit ``j`` scores ``sum_i (adj_i - mean adj) (z_ij - mean_i z_ij)``:
    a copy of a marked service leans along ``v_i`` in proportion to the drawn
    units' projections. None of it looks at which units were drawn.

    ``extra`` (``n x r``, optional): more per-text regressors fitted jointly with
    ``ref`` by least squares, the leans of the verifier's reference copies
    (:func:`reference_leans`). An innocent copy built on a base like a reference's
    leans as that reference does; that share cancels too and the mark stands out.
    The regressors must not depend on which units were drawn (references fitted to
    the clean service's answers never see the mark), so the test stays exact.
    Without ``extra`` (or with no column) the scores are exactly those without it.
    """
    answered = np.isfinite(answers).all(axis=1)
    a = unit_rows(answers[answered])
    v, e, zs = directions[answered], clean_unit[answered], z[answered]
    lean = np.einsum("ij,ij->i", a, v)
    ref = np.einsum("ij,ij->i", e, v)
    if extra is not None and extra.shape[1]:
        x = np.column_stack([np.ones(len(lean)), ref, extra[answered]])
        adjusted = lean - x @ np.linalg.lstsq(x, lean, rcond=None)[0]
    else:
        adjusted = lean - least_squares_slope(lean, ref) * ref
    # The clean model's adjusted lean is rounding noise, which BLAS kernels round
    # differently: snapped, it is exactly 0 on every CPU (:mod:`..ground.stable`).
    adjusted = snap_residual(adjusted)
    return (adjusted - adjusted.mean()) @ (zs - zs.mean(axis=0))


def reference_leans(directions: np.ndarray, rows: Sequence[np.ndarray]) -> np.ndarray:
    """``n x r``: each text's lean ``unit(r_i) . v_i`` for each reference's rows ``r``.

    What :func:`field_scores` takes as ``extra``: the leans of the verifier's
    reference copies along every audit text's own mark direction."""
    columns = [
        np.einsum("ij,ij->i", unit_rows(np.asarray(r, np.float64)), directions) for r in rows
    ]
    return np.column_stack(columns) if columns else np.empty((len(directions), 0))


def field_twin_scores(directions: np.ndarray, clean_unit: np.ndarray, z: np.ndarray) -> np.ndarray:
    """The clean model's own unit scores, its lean unadjusted (keygen's innocent-twin check).

    Adjusted, the clean model scores zero by construction; unadjusted, its lean
    tells whether the drawn units happen to follow where clean texts already lie
    along their mark directions, which other innocent models would share.
    """
    ref = np.einsum("ij,ij->i", clean_unit, directions)
    return (ref - ref.mean()) @ (z - z.mean(axis=0))


class FieldMark:
    """What a field key stores: the units, the amplitude, ``mu``, ``sigma`` and ``q``.

    Secret like the rest of the key: its repr shows the unit count only. ``mu``
    and ``q`` are what serving needs; ``sigma`` lets the verifier recompute ``q``
    from the salt (:meth:`matches`) and score any later audit round with the
    scales the service marked with.
    """

    __slots__ = ("_amplitude", "_compact", "_mu", "_q", "_sigma", "_units")

    def __init__(
        self,
        *,
        units: int,
        amplitude: float,
        mu: Any,
        sigma: Any,
        q: Any,
        dim: int | None = None,
        compact: bool = False,
    ):
        unit_names(units)  # the rule on the count
        self._units = int(units)
        self._amplitude = checked_amplitude(amplitude)
        self._compact = bool(compact)
        self._mu = frozen_vector(mu, "mu", int8_steps if compact else None)
        self._q = frozen_vector(q, "q", int8_steps if compact else None)
        self._sigma = frozen_vector(sigma, "sigma", float16_values if compact else None)
        if self._mu.size != self._q.size or (dim is not None and self._mu.size != dim):
            raise KeyGenerationError(
                f"the field's mu and q must have the key's dimension, got {self._mu.size} "
                f"and {self._q.size}"
            )
        if self._sigma.size != self._units or not (self._sigma > 0).all():
            raise KeyGenerationError(
                f"the field's sigma must hold {self._units} positive scales, one per unit"
            )

    @property
    def units(self) -> int:
        """``M``: how many units the drawn ones are ranked among."""
        return self._units

    @property
    def compact(self) -> bool:
        """Whether the field is stored in the compact encoding (keys made since it exists).

        Its vectors are then the stored, quantised values themselves, and a row is marked
        in its own precision (float32 rows in float32); a float64 field (an older key)
        marks in float64, as it always did.
        """
        return self._compact

    @property
    def amplitude(self) -> float:
        """The field's scale before clipping: the gain's standard deviation over the audit."""
        return self._amplitude

    @property
    def mu(self) -> np.ndarray:
        """The mean of the keygen audit's clean unit rows (read-only)."""
        return self._mu

    @property
    def sigma(self) -> np.ndarray:
        """Each unit's projection scale over the keygen audit (read-only)."""
        return self._sigma

    @property
    def q(self) -> np.ndarray:
        """The gain vector: ``g(e) = clip((e - mu) . q, -3, 3)`` (read-only)."""
        return self._q

    def gaussian(self, salt: bytes) -> np.ndarray:
        """``G``, re-derived from the key's salt."""
        return keyed_gaussian(salt, self._mu.size, self._units)

    def matches(self, salt: bytes, drawn: Collection[str]) -> bool:
        """Whether ``q`` is the vector the salt, ``sigma`` and the drawn units dictate."""
        mask = drawn_mask(self._units, drawn)
        if not mask.any() or len(drawn) != int(mask.sum()):
            return False
        expected = field_vector(self.gaussian(salt), self._sigma, mask, self._amplitude)
        scale = float(np.abs(expected).max())
        # a compact q is the expected one rounded to its stored steps
        rounding = code_step(self._q) / 2 if self._compact else 0.0
        return bool(np.abs(expected - self._q).max() <= rounding + _Q_TOLERANCE * max(scale, 1.0))

    def derived_from(self, clean_rows: np.ndarray, salt: bytes) -> bool:
        """Whether ``mu`` and ``sigma`` are those of ``clean_rows`` (keygen's audit)."""
        if not len(clean_rows):
            return False
        mu = unit_rows(clean_rows).mean(axis=0)
        sigma = field_scales(self.gaussian(salt), mu, clean_rows)
        # a compact field holds them rounded: mu to its steps, sigma to float16
        mu_rounding = code_step(self._mu) / 2 if self._compact else 0.0
        sigma_rtol = 2.0**-11 if self._compact else 0.0
        return bool(
            np.allclose(mu, self._mu, rtol=1e-9, atol=1e-12 + mu_rounding)
            and np.allclose(sigma, self._sigma, rtol=1e-9 + sigma_rtol, atol=0.0)
        )

    def to_payload(self) -> dict[str, Any]:
        """The JSON form stored in the serving key.

        A compact field (:attr:`compact`): ``mu`` and ``q`` as int8 codes of a power-of-two
        step, ``sigma`` as float16, all base64, exactly the values it marks with; an older
        field: every vector as base64 float64, as it was written.
        """
        if self._compact:
            return {
                "units": self._units,
                "amplitude": self._amplitude,
                "encoding": COMPACT_ENCODING,
                "mu": packed_steps(self._mu),
                "sigma": packed_half(self._sigma),
                "q": packed_steps(self._q),
            }
        return {
            "units": self._units,
            "amplitude": self._amplitude,
            "mu": _packed(self._mu),
            "sigma": _packed(self._sigma),
            "q": _packed(self._q),
        }

    @classmethod
    def from_payload(cls, payload: dict[str, Any], dim: int | None = None) -> FieldMark:
        """Parse :meth:`to_payload`'s form (KeyGenerationError if malformed)."""
        if not isinstance(payload, dict):
            raise KeyGenerationError("the key's field record is malformed")
        encoding = payload.get("encoding")
        if encoding is not None and encoding != COMPACT_ENCODING:
            raise KeyGenerationError(f"the key's field has an unknown encoding {encoding!r}")
        if encoding == COMPACT_ENCODING:
            mu, q = unpacked_steps(payload["mu"], "mu"), unpacked_steps(payload["q"], "q")
            sigma = unpacked_half(payload["sigma"])
        else:
            mu, q = _unpacked(payload["mu"], "mu"), _unpacked(payload["q"], "q")
            sigma = _unpacked(payload["sigma"], "sigma")
        return cls(
            units=payload["units"],
            amplitude=payload["amplitude"],
            mu=mu,
            sigma=sigma,
            q=q,
            dim=dim,
            compact=encoding == COMPACT_ENCODING,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FieldMark):
            return NotImplemented
        return self.to_payload() == other.to_payload()

    def __hash__(self) -> int:
        return hash((self._units, self._amplitude))

    def __repr__(self) -> str:
        return f"FieldMark(units={self._units})"


def drawn_mask(units: int, drawn: Collection[str]) -> np.ndarray:
    """Boolean mask over the units: which are drawn (the key's triggers)."""
    return np.fromiter((n in drawn for n in unit_names(units)), dtype=bool, count=units)


def audit_sample(texts: Sequence[str], salt: bytes, budget: int) -> list[str]:
    """A field key's audit: ``budget`` distinct corpus texts in a keyed uniform order.

    Every text is a probe (the field marks every answer), so no band word is needed;
    the order is :func:`..ground.draw.keyed_order`'s, a function of the salt and the texts only.
    """
    distinct = [t for t in dict.fromkeys(texts) if t and not t.isspace()]
    return keyed_order(salt, b"espew-field-v1/audit", distinct)[:budget]


def check_field(field: object, band: Sequence[str], dim: int) -> FieldMark | None:
    """``field`` if it is None or a :class:`FieldMark` of ``dim`` over ``band``'s units."""
    if field is not None and not (
        isinstance(field, FieldMark)
        and field.mu.size == dim
        and tuple(band) == unit_names(field.units)
    ):
        raise KeyGenerationError("a field key's field must be a FieldMark over its band's units")
    return field


def no_text_rule(key_id: str) -> str:
    """Why a field key cannot say which texts it marks from the texts alone."""
    return (
        f"key {key_id} is a field key: it marks every text by where its clean embedding "
        "lies, so which texts are marked cannot be read off the text; use "
        "watermark_and_mask(texts, embeddings, key), which marks every non-blank text"
    )


def _packed(values: np.ndarray) -> str:
    return base64.b64encode(values.astype("<f8").tobytes()).decode("ascii")


def _unpacked(stored: Any, name: str) -> np.ndarray:
    return decoded(stored, name, 8, "<f8").astype(np.float64)
