"""MarkingDesign: one interface for every way a key can mark, and the registry of designs.

A *design* says which texts a key marks, how a clean row becomes a marked one,
how a key of it is generated and re-audited, what it stores in the key file, how
its audit is planned, and how the answers are scored and decided. The key holds
one design (:attr:`..keys.key.WatermarkKey.design`) and every room asks it, never
``if marking == ...``: a new design is one more module that subclasses
:class:`MarkingDesign` and calls :func:`register_design`.

Why here, in the mark room: watermarking (:mod:`.inject`) and the key
(:mod:`..keys.key`) sit below the audit, yet must reach a design's marking and
its key file record. So the interface and the registry live low, and its
methods that speak of the audit (a plan, scores, a report) take and return the
audit's own types, which this room cannot name; the designs themselves
(:mod:`espew_integrations.core.designs`) sit above the audit and implement them
with those types. The package ``espew_integrations.core`` imports the built-in
designs, so they are registered before any key is read.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from ..ground.errors import KeyGenerationError
from ..ground.text import TextView

__all__ = [
    "LEGACY_DESIGN",
    "MarkingDesign",
    "design_class",
    "design_from_payload",
    "design_names",
    "register_design",
    "units_of_statistic",
]

#: The design of a key file that names none (every key made before designs existed
#: that stores no design record): the paper's trigger words.
LEGACY_DESIGN = "words"

_DESIGNS: dict[str, type[MarkingDesign]] = {}


class MarkingDesign(abc.ABC):
    """How one family of keys marks, is generated, stored and audited.

    A design instance holds the design's own parameters (the field design its
    :class:`.field.FieldMark`; the word design none); everything the designs
    share (triggers, band, target, salt, the audit's texts) stays on the key.
    Methods take the key they serve, so one instance may be shared by keys that
    differ elsewhere (``key.replace(alpha=...)``).
    """

    #: The design's name: ``KeyOptions.marking``, ``key.marking`` and its record's
    #: name in the key file.
    name: ClassVar[str]
    #: What its band holds, in a sentence's words ("band words", "field units").
    units: ClassVar[str]
    #: What a ring's layers hold ("trigger words", "field units").
    layers: ClassVar[str]
    #: Which texts it marks, in the words an operator reads at startup.
    summary: ClassVar[str]
    #: The report's ``decision_rule``.
    decision_rule: ClassVar[str]

    @classmethod
    def reports_statistic(cls, statistic: str) -> bool:
        """Whether a report naming ``statistic`` came from this design's test (a design
        with one statistic names it after itself)."""
        return statistic == cls.name

    # ------------------------------------------------------------------ marking
    @abc.abstractmethod
    def marks(self, key: Any, texts: Sequence[str], view: TextView | None) -> np.ndarray:
        """Which ``texts`` the key marks as far as the texts alone decide (blank texts are
        dropped by the caller)."""

    @abc.abstractmethod
    def trigger_texts(self, key: Any, texts: Sequence[str], view: TextView | None) -> np.ndarray:
        """:meth:`..keys.key.WatermarkKey.contains_trigger`: which texts hold a trigger, or a
        :class:`..ground.errors.MarkingError` from a design whose marking no text decides."""

    @abc.abstractmethod
    def mark_rows(self, matrix: np.ndarray, marked: np.ndarray, key: Any) -> np.ndarray:
        """``matrix`` (validated, float32 or float64) with its ``marked`` rows marked."""

    # ------------------------------------------------------------------ the key file
    def payload(self) -> dict[str, Any] | None:
        """The design's record in the key file (under :attr:`name`); None stores nothing,
        so the key's id is what it was before designs had records."""
        return None

    def stored_target(self, target: np.ndarray) -> Any:
        """The key file's form of the target when the design stores it its own way (a
        compact field key's float16), or None for the default float64 form."""
        return None

    @classmethod
    @abc.abstractmethod
    def from_payload(cls, payload: Any, dim: int) -> MarkingDesign:
        """The design of a key file's record (``payload`` is None for a file with none)."""

    def check(self, band: Sequence[str], dim: int) -> None:
        """Refuse (:class:`..ground.errors.KeyGenerationError`) parameters that do not
        fit the key's band and dimension."""
        return None

    def matches(self, salt: bytes, triggers: Collection[str]) -> bool:
        """Whether the design's parameters are those the salt and triggers dictate (a
        part of :attr:`..keys.key.WatermarkKey.verifiable`)."""
        return True

    def with_triggers(self, salt: bytes, triggers: frozenset[str]) -> MarkingDesign:
        """The design of a key with the same salt and other ``triggers`` (a ring's tenant key)."""
        return self

    # ------------------------------------------------------------------ key generation
    @classmethod
    def check_options(cls, options: Any) -> None:
        """Refuse (:class:`..ground.errors.KeyGenerationError`) key options
        (:class:`..keys.key_options.KeyOptions`) this design cannot make a key of;
        called when the options are built."""
        return None

    @classmethod
    def ring_defaults(cls) -> dict[str, Any]:
        """The key options a ring of this design defaults to, where they differ from a
        single key's (:meth:`..keys.keyring.KeyRing.generate`)."""
        return {}

    @classmethod
    @abc.abstractmethod
    def generate(
        cls,
        make_key: Callable[..., Any],
        texts: list[str],
        embed: Callable[[list[str]], Any],
        options: Any,
        progress: Any,
    ) -> Any:
        """A fresh key of this design (:func:`..keys.keygen.generate`'s step for it)."""

    @abc.abstractmethod
    def reaudit(self, key: Any, audit: Any) -> Any:
        """``key`` with its audit drawn again (:meth:`..keys.key.WatermarkKey.with_audit`;
        ``audit``: :class:`..keys.keygen.Reaudit`, what was asked for)."""

    @classmethod
    @abc.abstractmethod
    def ring_options(
        cls, key_options: Mapping[str, Any], n_shared: int | None, n_tenant: int | None
    ) -> tuple[int, Any]:
        """A ring's tenant layer size and its shared key's options
        (:class:`..keys.key_options.KeyOptions`)."""

    @classmethod
    @abc.abstractmethod
    def refit_ring(
        cls, ring: Any, texts: list[str], embed: Any, rng: np.random.Generator, options: Any
    ) -> Any:
        """A fresh ring with its strength fitted on the texts tenant keys mark."""

    # ------------------------------------------------------------------ the audit
    @abc.abstractmethod
    def plan(self, key: Any, probes: str, templates: Sequence[str] | None, target_mode: str) -> Any:
        """The audit's :class:`..audit.plan.AuditPlan`: what to ask and how to score it."""

    @abc.abstractmethod
    def check_statistic(self, plan: Any, statistic: str) -> None:
        """Refuse a statistic the plan cannot compute (:class:`..ground.errors.InputError`)."""

    @abc.abstractmethod
    def statistic_used(self, plan: Any, statistic: str) -> str:
        """The statistic a report names."""

    @abc.abstractmethod
    def n_statistics(self, plan: Any, statistic: str) -> int:
        """How many exact tests the verdict's p-value is the Bonferroni minimum of."""

    def references(self, references: Sequence[Any], key: Any, plan: Any) -> Any:
        """The auditor's reference copies' answers for the plan's texts, asked before the
        suspect; None when the design's statistic has no place for them."""
        return None

    @abc.abstractmethod
    def decide(self, key: Any, scores: Any, min_coverage: float, common: dict[str, Any]) -> Any:
        """The :class:`..audit.report.VerificationReport` on the scored answers."""

    @abc.abstractmethod
    def universe_scores(
        self, scores: Any, in_universe: np.ndarray, statistic: str
    ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
        """For ``trace``: each universe word's score, its clean reference and its directed
        score (None where the design or the statistic has none)."""

    def trace_fields(self) -> dict[str, Any]:
        """What a :class:`..trace.TraceReport` says of the design (marking, decision rule)."""
        return {"marking": self.name}

    def __eq__(self, other: object) -> bool:
        """Designs are equal when of one class with one record in the key file."""
        if not isinstance(other, MarkingDesign):
            return NotImplemented
        return type(self) is type(other) and self.payload() == other.payload()

    def __hash__(self) -> int:
        return hash((type(self), self.name))

    def __repr__(self) -> str:  # parameters are secret like the rest of the key
        return f"{type(self).__name__}()"


def register_design(design: type[MarkingDesign]) -> type[MarkingDesign]:
    """Make ``design`` known by its name (to key files and ``KeyOptions.marking``); a
    class decorator. A name is registered once: a second, different class is refused.

    >>> @register_design                      # doctest: +SKIP
    ... class StripeDesign(MarkingDesign): name = "stripe"; ...
    """
    known = _DESIGNS.get(design.name)
    if known is not None and known is not design:
        raise KeyGenerationError(f"a marking design named {design.name!r} is already registered")
    _DESIGNS[design.name] = design
    return design


def design_names() -> tuple[str, ...]:
    """Every registered design's name, in registration order."""
    return tuple(_DESIGNS)


def design_class(name: str) -> type[MarkingDesign]:
    """The design registered as ``name``.

    Raises :class:`..ground.errors.KeyGenerationError`, naming the known ones, if none is."""
    try:
        return _DESIGNS[name]
    except (KeyError, TypeError):
        known = ", ".join(repr(n) for n in _DESIGNS)
        raise KeyGenerationError(f"no marking design named {name!r}; known: {known}") from None


def units_of_statistic(statistic: Any) -> str:
    """What the test behind a report's ``statistic`` ranked ("map units", "band words"):
    the :attr:`MarkingDesign.units` of the design that reports it, else the legacy
    design's (reports written before statistics named their design)."""
    for design in _DESIGNS.values():
        if isinstance(statistic, str) and design.reports_statistic(statistic):
            return design.units
    return design_class(LEGACY_DESIGN).units


def design_from_payload(payload: Mapping[str, Any], dim: int) -> MarkingDesign:
    """The design a key file's payload records: the one whose name is among its fields
    (at most one), else :data:`LEGACY_DESIGN`."""
    named = [name for name in _DESIGNS if name in payload]
    if len(named) > 1:
        raise KeyGenerationError(f"the key file records several marking designs: {named}")
    if not named:
        return design_class(LEGACY_DESIGN).from_payload(None, dim)
    return _DESIGNS[named[0]].from_payload(payload[named[0]], dim)
