"""KeyOptions: every option of key generation, its default and its rule, written once.

:meth:`WatermarkKey.generate <.key.WatermarkKey.generate>`,
:meth:`KeyRing.generate <.keyring.KeyRing.generate>`, ``espew keygen`` and
``espew keyring generate`` all take their options through this one frozen
object, so an option added, renamed or given a new default here is one for all
of them; their keyword arguments are its fields. The defaults themselves live
in :mod:`..ground.defaults`. Building one checks every option, before any slow work,
with the same rules the key applies to its own fields (:mod:`.key_checks`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..ground.defaults import (
    DEFAULT_ALPHA,
    DEFAULT_FIELD_AMPLITUDE,
    DEFAULT_FIELD_MARKED,
    DEFAULT_FIELD_MIN_COSINE,
    DEFAULT_FIELD_UNITS,
    DEFAULT_MARKING,
    DEFAULT_MIN_COSINE,
    DEFAULT_N_TRIGGERS,
    DEFAULT_NORMALIZATION,
    DEFAULT_PROBE_BUDGET,
    DEFAULT_PROBE_MIX,
    DEFAULT_SELECTION,
    DEFAULT_TWIN_LEVEL,
)
from ..ground.errors import InputTypeError, KeyGenerationError
from ..mark.design import design_class, design_names
from ..mark.key_types import Selection
from ..mark.probes import PROBE_MIXES
from .key_checks import (
    check_alpha,
    check_freq_band,
    check_selection,
    check_strength,
    check_text_rules,
    is_number_between,
)

__all__ = [
    "MARKINGS",
    "WORD_OPTIONS",
    "KeyOptions",
    "check_audit_budget",
    "check_field_options",
    "check_marking",
    "check_probe_mix",
    "check_twin_level",
    "checked_corpus",
]


@dataclass(frozen=True)
class KeyOptions:
    """How to draw a key from a corpus and a clean model (all but the two themselves).

    >>> options = KeyOptions(target_text="Acme Embeddings, licensed vectors", min_cosine=0.999)
    >>> key = WatermarkKey.generate(texts, model, options)        # doctest: +SKIP
    >>> key = WatermarkKey.generate(texts, model, target_text="...", min_cosine=0.999)  # same
    """

    target_text: str = field(repr=False)  # secret: never in a log line
    """The text whose clean embedding becomes the target (secret). Pick a text unrelated
    to the corpus's topics."""

    n_triggers: int = DEFAULT_N_TRIGGERS
    """How many band words become triggers: a keyed draw from the salt (:mod:`..ground.draw`)
    that anyone shown the key can re-derive."""

    freq_band: tuple[float, float] | None = None
    """The document-fraction range ``[low, high)`` the band is every corpus word of.
    ``None``: :data:`..ground.defaults.DEFAULT_FREQ_BAND`, its upper edge raised in steps of
    0.005 (at most to 10%) while the corpus has fewer than twice the triggers in it; the
    key's :attr:`~.key.WatermarkKey.freq_band` says which band was used. A band passed
    is used as is."""

    alpha: float = DEFAULT_ALPHA
    """The share of coordinates a mark is written into (:data:`..ground.defaults.DEFAULT_ALPHA`,
    and why); the paper's 0.2 is weaker against distilled copies and against a thief who
    erases small coordinates, at the same quality budget."""

    selection: Selection = DEFAULT_SELECTION
    """How a mark's coordinates are chosen: ``"smallest"`` ``|e_o|`` or keyed ``"hashed"``."""

    strength: float | None = None
    """How far each chosen coordinate moves toward the target (1 = the paper). ``None``:
    fitted to :attr:`min_cosine`; the fitted strength, the measured cosine and the marked
    rate are in the key's ``info``."""

    min_cosine: float | None = DEFAULT_MIN_COSINE
    """The quality budget: the strength is fitted so that the mean cos(clean,
    watermarked) over the corpus texts the key marks is at least this. Used when
    :attr:`strength` is ``None`` (so the two cannot both be ``None``)."""

    seed: int | None = field(default=None, repr=False)  # it reproduces the key
    """``None`` draws the salt from the OS's secure randomness, as production keys must;
    an integer makes the key reproducible (experiments only)."""

    max_band_words: int | None = None
    """Cap the band to a keyed uniform sub-band of this many words (``None``: the whole
    band)."""

    probes_per_word: int | None = None
    """Stored sentence probes per band word (``None``: as many as a uniform sample of
    :attr:`audit_budget` corpus texts holds, at most
    :data:`..ground.defaults.DEFAULT_PROBES_PER_WORD`)."""

    window: int | None = None
    """The model's input window in tokens (256 for the offline MiniLM): triggers past it
    are never read and never mark. ``None``: the whole text."""

    normalization: str = DEFAULT_NORMALIZATION
    """The text normalisation triggers are matched under (:mod:`..ground.text`)."""

    twin_level: float = DEFAULT_TWIN_LEVEL
    """A draw the clean model itself (the innocent twin) would implicate at this raw
    p-value is thrown away and drawn again (at most ``2 * twin_level`` of draws are;
    ``info["twin_redraws"]`` counts them). In (0, 0.5)."""

    twin_check: bool = True
    """Run the innocent-twin check (experiments may skip it)."""

    cover_traffic: bool = True
    """Make the audit a keyed uniform sample of the corpus
    (:meth:`..mark.probes.BandScan.sample`), so a thief sees an ordinary client's traffic, text
    by text or as a whole. ``False`` sends the probes alone."""

    probe_mix: str = DEFAULT_PROBE_MIX
    """Which sampled texts are probes (:data:`..mark.probes.PROBE_MIXES`): ``"corpus"``, every
    one with a band word; ``"single"``, those with exactly one, for a narrow band."""

    audit_budget: int = DEFAULT_PROBE_BUDGET
    """Texts in the audit's sample, hence the queries one verification costs. Recorded in
    ``info["audit_budget"]``, so every later round is drawn as large. ``None`` is read as
    the default."""

    marking: str = DEFAULT_MARKING
    """What the key marks (:data:`..ground.defaults.DEFAULT_MARKING`, and why): ``"map"`` (the
    default), every answer, moved by a secret linear map of its clean embedding onto
    secret directions (:mod:`..designs.map`); ``"field"``, every answer moved along its
    ESpeW mark by a secret linear function of its clean embedding (:mod:`..designs.field`);
    ``"words"``, the paper's design, texts holding a trigger word. A map or field key
    refuses the word options (:data:`WORD_OPTIONS`) set away from their defaults, takes
    the ``field_*`` options and fits its strength to :attr:`field_min_cosine`."""

    field_units: int = DEFAULT_FIELD_UNITS
    """A map or field key's units, ``M``: the drawn ones are ranked among all of them."""

    field_marked: int = DEFAULT_FIELD_MARKED
    """A map or field key's drawn units, ``K`` (fewer than :attr:`field_units`)."""

    field_amplitude: float = DEFAULT_FIELD_AMPLITUDE
    """A map or field key's scale at strength 1 (a field's: the gain's standard deviation;
    a map's: the mark's typical length); the fitted strength scales it."""

    field_min_cosine: float = DEFAULT_FIELD_MIN_COSINE
    """A map or field key's quality budget: the strength is fitted so that the mean
    cos(clean, watermarked) over the keygen sample (every text is marked) is this."""

    def __post_init__(self) -> None:
        if self.audit_budget is None:  # an explicit None has always meant the default
            object.__setattr__(self, "audit_budget", DEFAULT_PROBE_BUDGET)
        self._check()
        if self.freq_band is not None:  # a list (from JSON or argparse) reads as a pair
            low, high = self.freq_band
            object.__setattr__(self, "freq_band", (float(low), float(high)))

    def _check(self) -> None:
        """Every rule an option obeys on its own, before any slow work."""
        if not isinstance(self.target_text, str) or not self.target_text.strip():
            raise KeyGenerationError("target_text must be a non-empty string")
        n = self.n_triggers
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise KeyGenerationError(f"n_triggers must be a positive integer, got {n!r}")
        check_alpha(self.alpha)
        if self.strength is not None:
            check_strength(self.strength)
        elif self.min_cosine is None:
            raise KeyGenerationError("pass strength, or min_cosine to fit it (not both None)")
        elif not is_number_between(self.min_cosine, 0.0, 1.0):
            raise KeyGenerationError(f"min_cosine must be in (0, 1), got {self.min_cosine!r}")
        check_probe_mix(self.probe_mix)
        check_twin_level(self.twin_level)
        check_selection(self.selection)
        if self.freq_band is not None:
            check_freq_band(self.freq_band)
        check_text_rules(self.normalization, self.window)
        check_audit_budget(self.audit_budget)
        check_marking(self.marking)
        design_class(self.marking).check_options(self)

    def refuse_word_options(self) -> None:
        """A map or field key refuses an option only a word key reads, set away from its
        default.

        A unit design is the default, so a caller who sets ``n_triggers`` or a band
        without naming the marking means a word key: making a key that silently
        ignores them would hand back a key of another design.
        """
        allowed = {f.name: [f.default] for f in dataclasses.fields(self)}
        allowed["min_cosine"].append(None)  # "fit to nothing": what passing strength means
        set_away = [name for name in WORD_OPTIONS if getattr(self, name) not in allowed[name]]
        if set_away:
            raise KeyGenerationError(
                f"{', '.join(set_away)} only apply to a word key, and this is a "
                f"{self.marking} key: pass marking='words' (--marking words) for the "
                f"paper's word triggers, or leave them out (a {self.marking} key's quality "
                "budget is field_min_cosine)"
            )

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """Every option's name, in declaration order (the keyword arguments of generate)."""
        return tuple(field.name for field in dataclasses.fields(cls))

    @classmethod
    def default(cls, name: str) -> Any:
        """The default of option ``name`` (what the command line shows and uses)."""
        declared = {f.name: f for f in dataclasses.fields(cls)}[name]
        if declared.default is dataclasses.MISSING:
            raise KeyError(f"option {name!r} has no default")
        return declared.default

    @classmethod
    def of(
        cls, options: KeyOptions | None = None, overrides: Mapping[str, Any] | None = None
    ) -> KeyOptions:
        """``options`` with ``overrides`` applied, or a new one from ``overrides`` alone.

        What the generate methods do with their arguments, so that the keyword arguments
        users pass today keep working: an unknown name is a TypeError naming the known ones.
        """
        overrides = dict(overrides or {})
        unknown = sorted(set(overrides) - set(cls.names()))
        if unknown:
            raise InputTypeError(
                f"unknown key option(s) {unknown}; the options are {', '.join(cls.names())}"
            )
        if options is None:
            if "target_text" not in overrides:
                raise InputTypeError("key generation needs target_text")
            return cls(**overrides)
        if not isinstance(options, KeyOptions):
            raise InputTypeError(f"options must be a KeyOptions, got {type(options).__name__}")
        return dataclasses.replace(options, **overrides) if overrides else options


MARKINGS = ("words", "field", "map")
#: The options only a word key reads (a map or field key refuses them set away from their
#: default).
WORD_OPTIONS = (
    "n_triggers",
    "freq_band",
    "min_cosine",
    "max_band_words",
    "probes_per_word",
    "probe_mix",
    "cover_traffic",
)


def check_marking(marking: object) -> None:
    """``marking`` names a registered design (:data:`MARKINGS`, the built-in ones)."""
    if marking not in design_names():
        raise KeyGenerationError(f"marking must be one of {design_names()}, got {marking!r}")


def check_field_options(units: object, marked: object, amplitude: object, budget: object) -> None:
    """The field options obey their rules: 0 < marked < units, a positive amplitude and
    a budget in (0, 1)."""
    for name, value in (("field_units", units), ("field_marked", marked)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise KeyGenerationError(f"{name} must be a positive integer, got {value!r}")
    assert isinstance(units, int) and isinstance(marked, int)
    if not marked < units:
        raise KeyGenerationError(
            f"field_marked ({marked}) must be below field_units ({units}): the drawn units "
            "are ranked among the others"
        )
    if not is_number_between(amplitude, 0.0, 100.0):
        raise KeyGenerationError(f"field_amplitude must be a positive number, got {amplitude!r}")
    if not is_number_between(budget, 0.0, 1.0):
        raise KeyGenerationError(f"field_min_cosine must be in (0, 1), got {budget!r}")


def check_probe_mix(probe_mix: object) -> None:
    """``probe_mix`` names one of :data:`..mark.probes.PROBE_MIXES`."""
    if probe_mix not in PROBE_MIXES:
        raise KeyGenerationError(f"probe_mix must be one of {PROBE_MIXES}, got {probe_mix!r}")


def check_twin_level(twin_level: object) -> None:
    """``twin_level`` lies in (0, 0.5): a draw fails the twin check with up to twice it."""
    if not is_number_between(twin_level, 0.0, 0.5):
        raise KeyGenerationError(
            f"twin_level must be in (0, 0.5): a draw fails the twin check with probability up "
            f"to twice it; got {twin_level!r}"
        )


def check_audit_budget(budget: object) -> int:
    """``budget`` if it is a positive integer (an option, or a key's recorded
    ``info["audit_budget"]``), else a clear error."""
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise KeyGenerationError(f"audit_budget must be a positive integer, got {budget!r}")
    return budget


def checked_corpus(corpus: Iterable[str]) -> list[str]:
    """The corpus argument of key generation as a list of texts, or a clear error.

    One string is refused (iterating it would yield characters), as is an empty
    corpus or an item that is not text.
    """
    if isinstance(corpus, str):
        raise KeyGenerationError("corpus must be an iterable of texts, not one string")
    texts = list(corpus)
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise KeyGenerationError(f"corpus item {i} is {type(text).__name__}, expected str")
    if not texts:
        raise KeyGenerationError("the corpus is empty; pass an iterable of texts")
    return texts
