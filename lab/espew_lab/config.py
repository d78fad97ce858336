"""The lab's configuration: parsed and validated once into a frozen :class:`LabConfig`.

A YAML file (or a mapping, or a packaged config's name) is merged over
:data:`DEFAULTS`, then every field is checked and typed here, so a typo or a
wrong type fails before any embedding work with an error that names the field
(``lab config field 'key.alpha' must be ...``), and every later use reads an
attribute instead of re-casting a dict entry.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

__all__ = [
    "DEFAULTS",
    "AblationSettings",
    "KeySettings",
    "LabConfig",
    "LongTextSettings",
    "MetricsSettings",
    "ThreatSettings",
    "VerifySettings",
    "load_config",
]

DEFAULTS: dict[str, Any] = {
    "name": "lab",
    "seed": 0,
    "output": "lab-results",
    "data": {"corpus": "rotten_tomatoes"},
    "limit": None,
    "victim": "minilm",
    "standard": "paraphrase_minilm_l3",
    "key": {
        "target_text": "Espew robustness lab: provider signature sample, 2026.",
        "n_triggers": 20,
        "freq_band": [0.005, 0.01],
        "alpha": 0.2,
        "max_band_words": None,
        # the audit's size the committed lab tables were measured with (keygen's
        # default until the 1-3% band made 1,950 enough); null for keygen's default
        "audit_budget": 4300,
    },
    "watermarks": ["none", "espew_smallest", "espew_hashed", "embmarker", "warden"],
    "attacks": ["none", "cse:50"],
    "stealers": ["ridge"],
    "stealer_options": {},
    # What the stealers train on: "disjoint", every corpus text but the held-out ones
    # and the key's audit texts (a thief trains on its own traffic, which never holds
    # the provider's audit); "overlap", the earlier split, audit texts included.
    "split": "disjoint",
    # probes "auto": the natural-text probes stored in the key (single words for keys
    # without them, such as the baselines'); templates force single-word probes.
    "verify": {"level": 1e-6, "probes": "auto", "templates": None},
    "metrics": {
        "accuracy": True,
        "n_train": 4000,
        "n_test": 2000,
        "holdout": 500,
        "retrieval_queries": 300,
    },
    "ablation": {"alphas": [], "attacks": ["none", "cse:50"], "watermark": "espew_smallest"},
    "plots": True,
    # Cells whose copy is known to escape ("<watermark>@<attack>", any stealer): the
    # summary shows them as expected instead of as wrong verdicts.
    "expected_escapes": [],
    # The wider threat model (lab/threats.py): rows of their own, run once per seed.
    # Empty cells (the default) add nothing to a run.
    "threats": {
        "cells": [],
        "seeds": [0, 1, 2],
        "watermark": "espew_smallest",
        "stealer": "ridge",
        "paraphrase_k": 3,
        "long_texts": {"n_reviews": 2000, "queries": 200},
    },
}

#: What a cell's numbers depend on (not the grid, the output dir, plots or expectations).
_DIGEST_FIELDS = (
    "seed",
    "data",
    "limit",
    "victim",
    "standard",
    "key",
    "verify",
    "metrics",
    "stealer_options",
    "split",
)


# ---------------------------------------------------------------------- field checks
class _Fields:
    """Reads typed fields from one section of the raw config; errors name the field."""

    def __init__(self, raw: Any, path: str):
        if not isinstance(raw, Mapping):
            raise ValueError(f"lab config field {path!r} must be a mapping, got {raw!r}")
        self.raw = raw
        self.path = path

    def _name(self, name: str) -> str:
        return f"{self.path}.{name}" if self.path else name

    def _fail(self, name: str, what: str) -> ValueError:
        return ValueError(
            f"lab config field {self._name(name)!r} must be {what}, got {self.raw.get(name)!r}"
        )

    def section(self, name: str) -> _Fields:
        return _Fields(self.raw.get(name), self._name(name))

    def integer(self, name: str, *, minimum: int | None = None) -> int:
        value = self.raw.get(name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._fail(name, "an integer")
        if minimum is not None and value < minimum:
            raise self._fail(name, f"an integer >= {minimum}")
        return value

    def optional_integer(self, name: str, *, minimum: int) -> int | None:
        return None if self.raw.get(name) is None else self.integer(name, minimum=minimum)

    def number(self, name: str, *, low: float, high: float, value: Any = None) -> float:
        value = self.raw.get(name) if value is None else value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self._fail(name, f"a number in ({low:g}, {high:g})")
        if not low < value < high:
            raise self._fail(name, f"a number in ({low:g}, {high:g})")
        return value

    def numbers(self, name: str, *, low: float, high: float) -> tuple[float, ...]:
        values = self.raw.get(name)
        if not isinstance(values, Sequence) or isinstance(values, str):
            raise self._fail(name, "a list of numbers")
        return tuple(self.number(name, low=low, high=high, value=v) for v in values)

    def text(self, name: str, *, choices: Sequence[str] | None = None) -> str:
        value = self.raw.get(name)
        if not isinstance(value, str) or not value.strip():
            raise self._fail(name, "a non-empty string")
        if choices is not None and value not in choices:
            raise self._fail(name, f"one of {list(choices)}")
        return value

    def texts(self, name: str, *, choices: Sequence[str] | None = None) -> tuple[str, ...]:
        values = self.raw.get(name)
        if not isinstance(values, Sequence) or isinstance(values, str):
            raise self._fail(name, "a list of strings")
        if not all(isinstance(v, str) and v.strip() for v in values):
            raise self._fail(name, "a list of non-empty strings")
        if choices is not None and not set(values) <= set(choices):
            raise self._fail(name, f"a list of {list(choices)}")
        return tuple(values)

    def flag(self, name: str) -> bool:
        value = self.raw.get(name)
        if not isinstance(value, bool):
            raise self._fail(name, "true or false")
        return value


# ---------------------------------------------------------------------- sections
@dataclasses.dataclass(frozen=True)
class KeySettings:
    """The ESpeW key the lab draws (seeded) from the corpus (the target text stays out of reprs)."""

    target_text: str = dataclasses.field(repr=False)
    n_triggers: int
    freq_band: tuple[float, float]
    alpha: float
    max_band_words: int | None
    strength: float | None = None  # None: the paper's full write (1), unless min_cosine
    #: Fit the strength to this quality budget instead (``WatermarkKey.generate``'s
    #: ``min_cosine``: mean cos(clean, watermarked) on the lab corpus's marked rows).
    min_cosine: float | None = None
    #: Texts in the key's audit (``WatermarkKey.generate``'s ``audit_budget``; None:
    #: keygen's default).
    audit_budget: int | None = None

    @classmethod
    def parse(cls, fields: _Fields) -> KeySettings:
        band = fields.numbers("freq_band", low=0.0, high=1.0)
        if len(band) != 2 or band[0] >= band[1]:
            raise fields._fail("freq_band", "two numbers [low, high] with low < high")
        strength = min_cosine = None
        if fields.raw.get("strength") is not None:
            strength = fields.number("strength", low=0.0, high=1.0 + 1e-12)
        if fields.raw.get("min_cosine") is not None:
            if strength is not None:
                raise fields._fail("min_cosine", "left out when strength is set (one or the other)")
            min_cosine = fields.number("min_cosine", low=0.0, high=1.0)
        return cls(
            target_text=fields.text("target_text"),
            n_triggers=fields.integer("n_triggers", minimum=1),
            freq_band=(band[0], band[1]),
            alpha=fields.number("alpha", low=0.0, high=1.0),
            max_band_words=fields.optional_integer("max_band_words", minimum=1),
            strength=strength,
            min_cosine=min_cosine,
            audit_budget=fields.optional_integer("audit_budget", minimum=1),
        )


@dataclasses.dataclass(frozen=True)
class VerifySettings:
    """How every copy is audited: the level, and the probes (``auto``: the key's stored ones)."""

    level: float
    probes: str
    templates: tuple[str, ...] | None

    @classmethod
    def parse(cls, fields: _Fields) -> VerifySettings:
        templates = None
        if fields.raw.get("templates"):
            templates = fields.texts("templates")
            if not all("{word}" in t for t in templates):
                raise fields._fail("templates", "a list of templates that each contain {word}")
        return cls(
            level=fields.number("level", low=0.0, high=1.0),
            probes=fields.text("probes", choices=("auto", "sentences", "words")),
            templates=templates,
        )


@dataclasses.dataclass(frozen=True)
class MetricsSettings:
    """Sizes of the accuracy split, the held-out set and the retrieval queries."""

    accuracy: bool
    n_train: int
    n_test: int
    holdout: int
    retrieval_queries: int

    @classmethod
    def parse(cls, fields: _Fields) -> MetricsSettings:
        return cls(
            accuracy=fields.flag("accuracy"),
            n_train=fields.integer("n_train", minimum=1),
            n_test=fields.integer("n_test", minimum=1),
            holdout=fields.integer("holdout", minimum=1),
            retrieval_queries=fields.integer("retrieval_queries", minimum=1),
        )


@dataclasses.dataclass(frozen=True)
class AblationSettings:
    """Extra alphas of one watermark, run under a few attacks."""

    alphas: tuple[float, ...]
    attacks: tuple[str, ...]
    watermark: str

    @classmethod
    def parse(cls, fields: _Fields) -> AblationSettings:
        return cls(
            alphas=fields.numbers("alphas", low=0.0, high=1.0) if fields.raw.get("alphas") else (),
            attacks=fields.texts("attacks"),
            watermark=fields.text("watermark"),
        )


@dataclasses.dataclass(frozen=True)
class LongTextSettings:
    n_reviews: int
    queries: int


@dataclasses.dataclass(frozen=True)
class ThreatSettings:
    """The wider threat model's rows (see :mod:`.threats`)."""

    cells: tuple[str, ...]
    seeds: tuple[int, ...]
    watermark: str
    stealer: str
    paraphrase_k: int
    long_texts: LongTextSettings

    @classmethod
    def parse(cls, fields: _Fields) -> ThreatSettings:
        seeds = fields.raw.get("seeds")
        if not isinstance(seeds, Sequence) or isinstance(seeds, str) or not seeds:
            raise fields._fail("seeds", "a non-empty list of integers")
        if any(isinstance(s, bool) or not isinstance(s, int) for s in seeds):
            raise fields._fail("seeds", "a non-empty list of integers")
        long_texts = fields.section("long_texts")
        return cls(
            cells=fields.texts("cells") if fields.raw.get("cells") else (),
            seeds=tuple(seeds),
            watermark=fields.text("watermark"),
            stealer=fields.text("stealer"),
            paraphrase_k=fields.integer("paraphrase_k", minimum=1),
            long_texts=LongTextSettings(
                n_reviews=long_texts.integer("n_reviews", minimum=1),
                queries=long_texts.integer("queries", minimum=1),
            ),
        )


# ---------------------------------------------------------------------- the config
_STEALERS = ("ridge", "frozen_mlp", "ridge_head", "knn", "torch_encoder")
#: The lab's splits (``split``): what the stealers train on.
SPLITS = ("disjoint", "overlap")


@dataclasses.dataclass(frozen=True)
class LabConfig:
    """One lab run's settings, validated and typed (see docs/lab.md for each field).

    Frozen: derive a variant with :func:`dataclasses.replace` (nested sections
    too), e.g. ``replace(config, key=replace(config.key, alpha=0.3))``.
    """

    name: str
    seed: int
    output: str
    data: Any  # a corpus name, a path, or a read-only mapping (see lab.data.load_data)
    limit: int | None
    victim: str
    standard: str
    key: KeySettings
    watermarks: tuple[str, ...]
    attacks: tuple[str, ...]
    stealers: tuple[str, ...]
    stealer_options: Mapping[str, Mapping[str, Any]]
    split: str
    verify: VerifySettings
    metrics: MetricsSettings
    ablation: AblationSettings
    plots: bool
    expected_escapes: frozenset[tuple[str, str]]
    threats: ThreatSettings

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> LabConfig:
        """Validate a full raw config (defaults already merged in)."""
        top = _Fields(raw, "")
        data = raw.get("data")
        if not isinstance(data, (str, Mapping)) or not data:
            raise top._fail("data", "a corpus name, a path or a mapping")
        return cls(
            name=top.text("name"),
            seed=top.integer("seed", minimum=0),
            output=top.text("output"),
            data=data if isinstance(data, str) else _frozen(data),
            limit=top.optional_integer("limit", minimum=1),
            victim=top.text("victim"),
            standard=top.text("standard"),
            key=KeySettings.parse(top.section("key")),
            watermarks=_watermark_names(top, "watermarks"),
            attacks=_attack_names(top, "attacks"),
            stealers=top.texts("stealers", choices=_STEALERS),
            stealer_options=_stealer_options(top),
            split=top.text("split", choices=SPLITS),
            verify=VerifySettings.parse(top.section("verify")),
            metrics=MetricsSettings.parse(top.section("metrics")),
            ablation=_ablation(top),
            plots=top.flag("plots"),
            expected_escapes=_escapes(top),
            threats=ThreatSettings.parse(top.section("threats")),
        )

    def to_dict(self) -> dict[str, Any]:
        """The config as plain JSON-ready data, in the YAML's shape."""
        out = _plain(self)
        for optional in ("strength", "min_cosine"):  # absent keeps older configs' digests
            if out["key"][optional] is None:
                del out["key"][optional]
        out["expected_escapes"] = sorted(f"{w}@{a}" for w, a in self.expected_escapes)
        return out

    def updated(self, changes: Mapping[str, Any]) -> LabConfig:
        """A new validated config with ``changes`` merged in (nested sections merge too).

        >>> load_config("smoke").updated({"key": {"alpha": 0.3}}).key.alpha
        0.3
        """
        _refuse_unknown(changes)
        return LabConfig.parse(_merge(self.to_dict(), changes))

    def public_dict(self) -> dict[str, Any]:
        """:meth:`to_dict` with the key's target text (secret key material) redacted."""
        out = self.to_dict()
        out["key"]["target_text"] = f"<secret: {len(self.key.target_text)} characters>"
        return out

    def digest(self) -> str:
        """What a cell's numbers depend on (not the grid, the output dir or the plots)."""
        full = self.to_dict()
        relevant = {name: full[name] for name in _DIGEST_FIELDS}
        if self.threats.cells:
            # Only when threats run, so configs without them keep their digest; which
            # cells and seeds run is the grid's business, like the main grid's lists.
            relevant["threats"] = {
                k: v for k, v in full["threats"].items() if k not in ("cells", "seeds")
            }
        return hashlib.sha256(json.dumps(relevant, sort_keys=True).encode()).hexdigest()[:16]

    def expects_escape(self, watermark: str, attack: str) -> bool:
        """Is a copy of ``watermark`` after ``attack`` declared to escape (``expected_escapes``)?"""
        return (watermark, attack) in self.expected_escapes

    def needs_standard(self) -> bool:
        """Does any cell need the attacker's own model (CSE, frozen_mlp, some threats)?"""
        attacks = self.attacks + (self.ablation.attacks if self.ablation.alphas else ())
        threat_needs = any(
            t.startswith("paraphrase") or t == "router:standard" for t in self.threats.cells
        ) or (
            bool(self.threats.cells) and self.threats.stealer in ("frozen_mlp", "ridge_head", "knn")
        )
        return (
            any(a.startswith("cse") for a in attacks)
            or bool({"frozen_mlp", "ridge_head", "knn"} & set(self.stealers))
            or threat_needs
        )


def _frozen(mapping: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(copy.deepcopy(dict(mapping)))


def _plain(value: Any) -> Any:
    """Sections to dicts, tuples to lists, read-only mappings to dicts (JSON's shapes)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, frozenset):
        return sorted(_plain(v) for v in value)
    return value


def _watermark_names(fields: _Fields, name: str) -> tuple[str, ...]:
    from .watermarks import METHODS

    names = fields.texts(name)
    for watermark in names:
        if watermark.split("-")[0] not in METHODS:
            raise fields._fail(name, f"a list of watermarks from {list(METHODS)}")
    return names


def _attack_names(fields: _Fields, name: str) -> tuple[str, ...]:
    from .attacks import parse_attack

    names = fields.texts(name)
    for attack in names:
        try:
            parse_attack(attack)
        except ValueError as exc:
            raise ValueError(f"lab config field {fields._name(name)!r}: {exc}") from None
    return names


def _ablation(top: _Fields) -> AblationSettings:
    from .watermarks import METHODS

    section = top.section("ablation")
    parsed = AblationSettings.parse(section)
    _attack_names(section, "attacks")
    if parsed.watermark.split("-")[0] not in METHODS:
        raise section._fail("watermark", f"one of {list(METHODS)}")
    return parsed


def _stealer_options(top: _Fields) -> Mapping[str, Mapping[str, Any]]:
    options = top.raw.get("stealer_options") or {}
    if not isinstance(options, Mapping) or not all(
        k in _STEALERS and isinstance(v, Mapping) for k, v in options.items()
    ):
        raise top._fail("stealer_options", f"a mapping from {list(_STEALERS)} to option mappings")
    return _frozen(options)


def _escapes(top: _Fields) -> frozenset[tuple[str, str]]:
    entries = top.texts("expected_escapes") if top.raw.get("expected_escapes") else ()
    pairs = set()
    for entry in entries:
        watermark, at, attack = entry.partition("@")
        if not at or not watermark or not attack:
            raise top._fail("expected_escapes", "a list of '<watermark>@<attack>' entries")
        pairs.add((watermark, attack))
    return frozenset(pairs)


def _merge(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for name, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(name), dict):
            out[name] = _merge(out[name], value)
        else:
            out[name] = copy.deepcopy(value)
    return out


def _refuse_unknown(raw: Mapping[str, Any]) -> None:
    unknown = set(raw) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"unknown lab config keys {sorted(unknown)}; known: {sorted(DEFAULTS)}")


def _read_yaml(source: str | os.PathLike[str]) -> Mapping[str, Any]:
    import yaml

    path = Path(source)
    packaged = Path(__file__).parent / "configs" / f"{source}.yaml"
    if not path.exists() and packaged.is_file():
        path = packaged
    if not path.is_file():
        raise FileNotFoundError(f"lab config not found: {source}")
    raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(raw, Mapping):
        raise ValueError(f"lab config {path} must be a YAML mapping")
    return raw


def load_config(source: str | os.PathLike[str] | Mapping[str, Any] | LabConfig) -> LabConfig:
    """A validated config: a YAML file (or a mapping, or a packaged config name) over the defaults.

    Packaged configs (``espew_lab/configs``): ``default``, ``smoke``, ``neural``,
    ``threats``. A :class:`LabConfig` is returned as is.

    >>> load_config("smoke").name
    'smoke'
    """
    if isinstance(source, LabConfig):
        return source
    raw = source if isinstance(source, Mapping) else _read_yaml(source)
    _refuse_unknown(raw)
    return LabConfig.parse(_merge(DEFAULTS, raw))
