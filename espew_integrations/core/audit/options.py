"""AuditOptions: every option of an audit, its default and its rule, written once.

:func:`~espew_integrations.core.verify.verify_callable`,
:func:`~espew_integrations.core.trace.trace_callable`, a transcript's replay
(:mod:`..evidence_check`) and the flags of ``espew verify`` and ``espew trace`` all
take their options through this one frozen object, so an option added, renamed or
given a new default here is one for all of them; the keyword arguments of ``verify``
and ``trace`` are its fields. The defaults live in :mod:`..ground.defaults`. Building one
checks every option (:meth:`AuditOptions._check`, the one validator), so a bad value
is refused with an :class:`~..ground.errors.OptionsError` naming it before a single text is
sent to the suspect.

>>> from espew_integrations.core.audit.options import AuditOptions
>>> AuditOptions(level=1e-9, batch_size=32).level
1e-09
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..ground.defaults import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_DEADLINE,
    DEFAULT_LEVEL,
    DEFAULT_MIN_COVERAGE,
    DEFAULT_STALL_TIMEOUT,
)
from ..ground.errors import OptionsError, OptionsTypeError
from ..ground.untrusted import printable
from .settings import STATISTICS, ProbeKind, ReferenceFn, Statistic, TargetMode

__all__ = ["PROBE_KINDS", "TARGET_MODES", "AuditOptions", "reference_name"]

#: The values of :attr:`AuditOptions.target_mode` and :attr:`AuditOptions.probes`.
TARGET_MODES: tuple[str, ...] = ("key", "query")
PROBE_KINDS: tuple[str, ...] = ("auto", "sentences", "words")


def _help(text: str) -> dict[str, str]:
    """A field's one-line help, which the command line shows beside its flag."""
    return {"help": text}


@dataclass(frozen=True)
class AuditOptions:
    """How to audit a suspect (everything but the suspect, the key and the records).

    >>> options = AuditOptions(level=1e-9, seed=7)
    >>> verify(suspect, key, options)                  # doctest: +SKIP
    >>> verify(suspect, key, level=1e-9, seed=7)       # the same audit
    """

    target_mode: TargetMode = field(
        default="key", metadata=_help("key: the stored target; query: the suspect's own")
    )
    """``"key"`` compares answers with the key's stored target (mapping answers of another
    dimension or rotated coordinates back when the key stores its audit's clean rows);
    ``"query"`` with the suspect's own embedding of the target text, which it therefore
    sees."""

    level: float = field(default=DEFAULT_LEVEL, metadata=_help("false-positive rate"))
    """The false-positive rate a "copied" verdict is held below, in (0, 1)
    (:data:`..ground.defaults.DEFAULT_LEVEL`)."""

    probes: ProbeKind = "auto"
    """``"auto"``: the natural-text probes stored in the key (or, for keys that store
    none, the band words); ``"sentences"`` or ``"words"`` to insist on one."""

    statistic: Statistic = "combined"
    """Which score decides (:data:`.settings.STATISTICS`): ``"combined"`` the raw,
    reference-adjusted and directed scores together, or one of them alone."""

    templates: tuple[str, ...] | None = None
    """The word probes' templates (``probes="words"``; ``None``: the defaults)."""

    batch_size: int = field(
        default=DEFAULT_BATCH_SIZE, metadata=_help("texts sent to the suspect in one call")
    )
    """Texts sent to the suspect in one call, at least 1
    (:data:`..ground.defaults.DEFAULT_BATCH_SIZE`)."""

    seed: int | None = field(default=None, metadata=_help("probe shuffle seed"))
    """The shuffle's seed (``None``: drawn, and kept in the transcript so that its replay
    sends the texts in the same order)."""

    min_coverage: float = field(
        default=DEFAULT_MIN_COVERAGE,
        metadata=_help(
            "share of the key's audit units (a map or field key's units, a word key's band "
            "words) that must be scored for a verdict"
        ),
    )
    """The share of the key's audit units (a map or field key's units, a word key's band
    words) that must be scored, in (0, 1]: below it the
    report is inconclusive (:data:`..ground.defaults.DEFAULT_MIN_COVERAGE`)."""

    deadline: float | None = DEFAULT_DEADLINE
    """Seconds the asking may take in all (``None``: no total bound, the default): at the
    deadline the audit ends inconclusive."""

    stall_timeout: float | None = DEFAULT_STALL_TIMEOUT
    """Seconds the audit waits for any one answer before it stops asking and ends
    inconclusive (:data:`..ground.defaults.DEFAULT_STALL_TIMEOUT`; ``None``: no stall
    guard)."""

    references: tuple[ReferenceFn, ...] = ()
    """The auditor's reference copies (:mod:`..stats.references`): callables
    ``texts -> rows`` in the key's coordinates, asked for the same audit texts as the
    suspect. A field key's statistic adjusts each text's lean for theirs as well as
    the clean model's, which gains power against copies on a base like a reference's;
    fitted to the clean service's answers on texts other than the audit's, they keep
    the test exact. A word key does not use them. Recorded by name and rows in the
    transcript (:mod:`.references`)."""

    def __post_init__(self) -> None:
        if isinstance(self.templates, list):  # a list (from JSON) reads as a tuple
            object.__setattr__(self, "templates", tuple(self.templates))
        object.__setattr__(self, "references", _checked_references(self.references))
        self._check()

    def _check(self) -> None:
        """Every rule an option obeys on its own: the one validator of an audit's options."""
        if self.target_mode not in TARGET_MODES:
            raise OptionsError(f"target_mode must be 'key' or 'query', got {self.target_mode!r}")
        if not _number_in(self.level, 0.0, 1.0) or self.level >= 1.0:
            raise OptionsError(f"level must be in (0, 1), got {self.level!r}")
        if self.probes not in PROBE_KINDS:
            raise OptionsError(
                f"probes must be 'auto', 'sentences' or 'words', got {self.probes!r}"
            )
        if self.statistic not in STATISTICS:
            raise OptionsError(
                f"statistic must be one of {', '.join(map(repr, STATISTICS))}, "
                f"got {self.statistic!r}"
            )
        size = self.batch_size
        if isinstance(size, bool) or not isinstance(size, numbers.Integral) or size < 1:
            raise OptionsError(f"batch_size must be >= 1, got {size!r}")
        seed = self.seed
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, numbers.Integral)):
            raise OptionsTypeError(f"seed must be an integer or None, got {seed!r}")
        if not _number_in(self.min_coverage, 0.0, 1.0):
            raise OptionsError(f"min_coverage must be in (0, 1], got {self.min_coverage!r}")
        _check_seconds(self.deadline, name="deadline")
        _check_seconds(self.stall_timeout, name="stall_timeout")

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """Every option's name, in declaration order (the keyword arguments of verify)."""
        return tuple(declared.name for declared in dataclasses.fields(cls))

    @classmethod
    def default(cls, name: str) -> Any:
        """The default of option ``name`` (what the command line shows and uses)."""
        return cls._field(name).default

    @classmethod
    def help(cls, name: str) -> str:
        """Option ``name``'s one-line help, as the command line shows it."""
        return str(cls._field(name).metadata.get("help", ""))

    @classmethod
    def _field(cls, name: str) -> dataclasses.Field[Any]:
        declared = {f.name: f for f in dataclasses.fields(cls)}
        if name not in declared:
            raise OptionsError(f"no audit option {name!r}; the options are {cls.names()}")
        return declared[name]

    @classmethod
    def of(
        cls, options: AuditOptions | None = None, overrides: Mapping[str, Any] | None = None
    ) -> AuditOptions:
        """``options`` with ``overrides`` applied, or a new one from ``overrides`` alone.

        What ``verify`` and ``trace`` do with their arguments, so that the keyword
        arguments users pass today keep working: an unknown name is an
        :class:`~..ground.errors.OptionsTypeError` naming the known ones, as Python names an
        unknown keyword argument with a ``TypeError``.
        """
        overrides = dict(overrides or {})
        unknown = sorted(set(overrides) - set(cls.names()))
        if unknown:
            raise OptionsTypeError(
                f"unknown audit option(s) {unknown}; the options are {', '.join(cls.names())}"
            )
        if options is None:
            return cls(**overrides)
        if not isinstance(options, AuditOptions):
            raise OptionsTypeError(f"options must be an AuditOptions, got {type(options).__name__}")
        return dataclasses.replace(options, **overrides) if overrides else options

    def recorded(self, names: Sequence[str] | None = None) -> dict[str, Any]:
        """The options a transcript keeps (``names``, default all), as JSON values, so
        that its replay audits exactly as the audit did."""
        settings = {name: getattr(self, name) for name in names or self.names()}
        if settings.get("templates") is not None:
            settings["templates"] = list(settings["templates"])
        if "references" in settings:  # by name: their rows go in the transcript's header
            settings["references"] = [reference_name(r) for r in settings["references"]]
        return settings


def reference_name(reference: ReferenceFn) -> str:
    """How reports name a reference: its ``name`` attribute, else its function or class
    (``module:qualname``), made printable."""
    name = getattr(reference, "name", None)
    if not (isinstance(name, str) and name):
        inner = reference if hasattr(reference, "__qualname__") else type(reference)
        name = f"{getattr(inner, '__module__', '?')}:{getattr(inner, '__qualname__', '?')}"
    return printable(name, limit=200)


def _checked_references(references: object) -> tuple[ReferenceFn, ...]:
    """``references`` as a tuple of callables (``None``: none); OptionsTypeError otherwise."""
    if references is None:
        return ()
    if isinstance(references, (str, bytes)) or callable(references):
        raise OptionsTypeError(
            "references must be a sequence of callables texts -> rows (the auditor's "
            f"reference copies), got a {type(references).__name__}"
        )
    try:
        given: tuple[Any, ...] = tuple(references)  # type: ignore[arg-type]
    except TypeError:
        raise OptionsTypeError(
            f"references must be a sequence of callables, got {type(references).__name__}"
        ) from None
    for i, reference in enumerate(given):
        if not callable(reference):
            raise OptionsTypeError(
                f"references[{i}] is a {type(reference).__name__}, not a callable texts -> rows"
            )
    return given


def _number_in(value: object, low: float, high: float) -> bool:
    """``value`` is a real number (not a bool) in ``(low, high]``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return low < value <= high


def _check_seconds(seconds: object, *, name: str) -> None:
    """Refuse a deadline or stall guard (``name``) that is not None or a positive,
    finite number of seconds."""
    if seconds is None:
        return
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise OptionsTypeError(f"{name} must be a number of seconds or None, got {seconds!r}")
    if not 0.0 < seconds < math.inf:
        raise OptionsError(f"{name} must be a positive number of seconds, got {seconds!r}")
