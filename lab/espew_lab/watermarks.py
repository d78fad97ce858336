"""Every watermark the lab compares, behind one interface.

A :class:`LabWatermark` turns the victim's clean embeddings into what the
service returns (:meth:`~LabWatermark.apply`), says which texts it marked, and
verifies a suspect copy. All of them verify through the core's word-level
rank test (:func:`espew_integrations.verify`) on the same band of words, so
the COPY verdicts are calibrated the same way and comparable across methods:

- ``none``: the service returns clean embeddings; verified with the ESpeW key
  (the paper's "Original" row: what an innocent copy looks like);
- ``espew_smallest`` / ``espew_hashed``: the core
  :func:`~espew_integrations.core.mark.inject.watermark`;
- ``embmarker``: Peng et al. 2023, e_p = normalize(w e_t + (1 - w) e_o) with
  w = min(#distinct triggers, m) / m, m = 4 (anchors.md);
- ``warden``: Shetty et al. 2024, five Gram-Schmidt-orthogonalised targets,
  the triggers split evenly among them, sum of weights capped at 1; verified
  per target, and the verdict uses the smallest p-value Bonferroni-corrected
  for the number of targets (the published code takes the raw minimum, which
  would convict innocent services more often than ``level``).

Baseline triggers are drawn uniformly from the same frequency band as the
ESpeW key, as the draw a seeded salt of their own dictates (the core's
:func:`~espew_integrations.core.ground.draw.draw_triggers`): that is what makes the
core's rank test valid for them too, and what its verify checks. A baseline
built by hand with other triggers keeps the zero salt and verifies as
inconclusive.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from espew_integrations import watermark as espew_watermark
from espew_integrations.core.audit.plan import maps_answers
from espew_integrations.core.audit.report import VerificationReport
from espew_integrations.core.ground.defaults import DEFAULT_LEVEL
from espew_integrations.core.ground.draw import draw_triggers
from espew_integrations.core.ground.rows import unit_rows
from espew_integrations.core.keys.key import WatermarkKey
from espew_integrations.core.mark.inject import marks
from espew_integrations.core.mark.words import TriggerMatcher, tokenize
from espew_integrations.suspects import verify

__all__ = [
    "METHODS",
    "ESpeW",
    "EmbMarker",
    "LabWatermark",
    "NoWatermark",
    "Verdict",
    "Warden",
    "build_watermark",
    "count_distinct_triggers",
    "gram_schmidt",
]

METHODS = ("none", "espew_smallest", "espew_hashed", "embmarker", "warden")
_ZERO_SALT = bytes(32)
#: The share of coordinates the baselines' verification keys select: the paper's 0.2,
#: which these keys always had, so the baselines' verdicts stay comparable.
_BASELINE_ALPHA = 0.2


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What one verification of a suspect found (no key material inside)."""

    p_value: float
    copied: bool
    status: str
    delta_cos: float
    delta_l2: float
    ks_p_value: float
    n_queries: int
    target_mode: str
    reports: tuple[dict[str, Any], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["reports"] = list(out["reports"])
        return out


def _verdict(report: VerificationReport) -> Verdict:
    return Verdict(
        p_value=float(report.p_value),
        copied=report.copied,
        status=report.status,
        delta_cos=float(report.delta_cos),
        delta_l2=float(report.delta_l2),
        ks_p_value=float(report.ks_p_value),
        n_queries=int(report.n_queries),
        target_mode=report.target_mode,
        reports=(_public_report(report),),
    )


def _public_report(report: VerificationReport) -> dict[str, Any]:
    # The lab's own record: every figure exactly (to_dict()'s public form floors the
    # p-values the lab's tables and Bonferroni minimum read), per-word scores left out:
    # they are large, say nothing a reader of the table needs, and hint at the triggers.
    data = report.to_dict(public=False)
    for name in ("trigger_scores", "benign_scores"):
        if name in data:  # older cores put them in to_dict(); keep only their counts
            data[name] = len(data[name])
    return data


class LabWatermark(abc.ABC):
    """Interface: ``apply(texts, clean)``, ``marked(texts)``, ``verify(suspect, ...)``."""

    name: str = "abstract"

    @abc.abstractmethod
    def apply(self, texts: Sequence[str], clean: np.ndarray) -> np.ndarray:
        """The service's answers for ``texts`` whose clean embeddings are ``clean``."""

    @abc.abstractmethod
    def marked(self, texts: Sequence[str]) -> np.ndarray:
        """Boolean mask of the texts this watermark changes."""

    def verify(
        self,
        suspect: Callable[[list[str]], np.ndarray],
        *,
        target_mode: str = "key",
        level: float = DEFAULT_LEVEL,
        templates: Sequence[str] | None = None,
        seed: int = 0,
        probes: str = "auto",
    ) -> Verdict:
        """Is ``suspect`` a copy of this watermarked service? (the core test with ``self.key``)

        An attack that scrambles the copy's coordinates asks for ``target_mode="query"``;
        a key whose audit stores its clean rows maps the answers back instead
        (``core/stats/align.py``) and never shows the suspect its target text.
        """
        scrambled = target_mode == "query" and templates is None and probes != "words"
        if scrambled and maps_answers(self.key):
            target_mode = "key"
        report = verify(
            suspect,
            self.key,
            target_mode=target_mode,
            level=level,
            templates=templates,
            seed=seed,
            probes=probes,
        )
        return _verdict(report)


class ESpeW(LabWatermark):
    """The core ESpeW watermark with a given key (selection smallest or hashed)."""

    def __init__(self, key: WatermarkKey):
        self.key = key
        self.name = f"espew_{key.selection}"

    def apply(self, texts: Sequence[str], clean: np.ndarray) -> np.ndarray:
        return espew_watermark(list(texts), clean, self.key)

    def marked(self, texts: Sequence[str]) -> np.ndarray:
        return marks(list(texts), self.key)


class NoWatermark(ESpeW):
    """Clean service; verified with an ESpeW key it never used (the "Original" row)."""

    def __init__(self, key: WatermarkKey):
        super().__init__(key)
        self.name = "none"

    def apply(self, texts: Sequence[str], clean: np.ndarray) -> np.ndarray:
        return np.array(clean, copy=True)

    def marked(self, texts: Sequence[str]) -> np.ndarray:
        return np.zeros(len(texts), dtype=bool)


def count_distinct_triggers(texts: Sequence[str], triggers: Sequence[str]) -> np.ndarray:
    """Number of distinct trigger words in each text (EmbMarker's trigger count).

    >>> count_distinct_triggers(["a b a", "c"], ["a", "b"]).tolist()
    [2, 0]
    """
    trigger_set = frozenset(triggers)
    return np.fromiter(
        (len(trigger_set.intersection(tokenize(t))) for t in texts),
        dtype=np.int64,
        count=len(texts),
    )


class EmbMarker(LabWatermark):
    """EmbMarker: e_p = normalize(w e_t + (1 - w) e_o), w = min(#triggers, m) / m.

    >>> wm = EmbMarker(triggers, target, target_text, band)  # doctest: +SKIP
    """

    name = "embmarker"

    def __init__(
        self,
        triggers: Sequence[str],
        target: np.ndarray,
        target_text: str,
        band: Sequence[str],
        *,
        max_triggers: int = 4,
        salt: bytes = _ZERO_SALT,
    ):
        self.triggers = tuple(sorted(triggers))
        self.target = np.asarray(target, dtype=np.float64) / np.linalg.norm(target)
        self.max_triggers = int(max_triggers)
        self._matcher = TriggerMatcher(self.triggers)
        self.key = WatermarkKey(
            triggers=self.triggers,
            target=self.target,
            target_text=target_text,
            band=band,
            salt=salt,
            alpha=_BASELINE_ALPHA,
        )

    def weights(self, texts: Sequence[str]) -> np.ndarray:
        """w per text: min(#distinct triggers, m) / m."""
        counts = count_distinct_triggers(texts, self.triggers)
        return np.minimum(counts, self.max_triggers) / self.max_triggers

    def apply(self, texts: Sequence[str], clean: np.ndarray) -> np.ndarray:
        clean = np.asarray(clean)
        weight = self.weights(texts)[:, None]
        mixed = weight * self.target[None, :] + (1.0 - weight) * clean.astype(np.float64)
        return unit_rows(mixed).astype(clean.dtype)

    def marked(self, texts: Sequence[str]) -> np.ndarray:
        return self._matcher.contains(list(texts))


def gram_schmidt(vectors: np.ndarray) -> np.ndarray:
    """Orthonormalise the rows in order (classical Gram-Schmidt, re-orthogonalised once).

    >>> np.round(gram_schmidt(np.array([[1.0, 0.0], [1.0, 1.0]])), 6).tolist()
    [[1.0, 0.0], [0.0, 1.0]]
    """
    out: list[np.ndarray] = []
    for row in np.asarray(vectors, dtype=np.float64):
        v = row.copy()
        for _ in range(2):  # twice is enough for numerical orthogonality
            for u in out:
                v -= (v @ u) * u
        norm = np.linalg.norm(v)
        if norm < 1e-12:
            raise ValueError("WARDEN targets are linearly dependent; pick other target texts")
        out.append(v / norm)
    return np.stack(out)


class Warden(LabWatermark):
    """WARDEN: e_p = normalize(sum_i w_i t_i + (1 - sum_i w_i) e_o), sum_i w_i <= 1.

    Target i has its own triggers (the trigger set split evenly) and its own
    EmbMarker weight w_i = min(#distinct triggers of i, m) / m. When the
    weights sum above 1 they are scaled to sum to 1 (the cap).
    """

    name = "warden"

    def __init__(
        self,
        trigger_groups: Sequence[Sequence[str]],
        targets: np.ndarray,
        target_texts: Sequence[str],
        band: Sequence[str],
        *,
        max_triggers: int = 4,
        salts: Sequence[bytes] | None = None,
    ):
        if len(trigger_groups) != len(targets) or len(targets) != len(target_texts):
            raise ValueError("WARDEN needs one trigger group and one target text per target")
        self.trigger_groups = tuple(tuple(sorted(g)) for g in trigger_groups)
        self.targets = gram_schmidt(np.asarray(targets, dtype=np.float64))
        self.max_triggers = int(max_triggers)
        all_triggers = sorted({w for g in self.trigger_groups for w in g})
        self._matcher = TriggerMatcher(all_triggers)
        # Gram-Schmidt leaves the first target equal to its text's embedding; the
        # others are no text's embedding, so only the first can be re-queried.
        salts = list(salts) if salts is not None else [_ZERO_SALT] * len(targets)
        self.keys = tuple(
            WatermarkKey(
                triggers=group,
                target=t,
                target_text=text,
                band=band,
                salt=salt,
                alpha=_BASELINE_ALPHA,
            )
            for group, t, text, salt in zip(
                self.trigger_groups, self.targets, target_texts, salts, strict=True
            )
        )

    def weights(self, texts: Sequence[str]) -> np.ndarray:
        """(n, n_targets) weights, each row's sum capped at 1."""
        counts = np.stack([count_distinct_triggers(texts, g) for g in self.trigger_groups], axis=1)
        weights = np.minimum(counts, self.max_triggers) / self.max_triggers
        total = weights.sum(axis=1, keepdims=True)
        return np.where(total > 1.0, weights / np.maximum(total, 1e-12), weights)

    def apply(self, texts: Sequence[str], clean: np.ndarray) -> np.ndarray:
        clean = np.asarray(clean)
        weights = self.weights(texts)
        total = weights.sum(axis=1, keepdims=True)
        mixed = weights @ self.targets + (1.0 - total) * clean.astype(np.float64)
        return unit_rows(mixed).astype(clean.dtype)

    def marked(self, texts: Sequence[str]) -> np.ndarray:
        return self._matcher.contains(list(texts))

    def verify(
        self,
        suspect,
        *,
        target_mode="key",
        level=DEFAULT_LEVEL,
        templates=None,
        seed=0,
        probes="auto",
    ) -> Verdict:
        keys = self.keys if target_mode == "key" else self.keys[:1]
        options = dict(target_mode=target_mode, level=level, templates=templates, seed=seed)
        reports = [verify(suspect, k, probes=probes, **options) for k in keys]
        usable = [r for r in reports if np.isfinite(r.p_value)]
        if not usable:
            return _verdict(reports[0])
        best = min(usable, key=lambda r: r.p_value)
        corrected = min(1.0, best.p_value * len(keys))
        return Verdict(
            p_value=corrected,
            copied=corrected < level,
            status="copied" if corrected < level else "not_copied",
            delta_cos=max(float(r.delta_cos) for r in usable),
            delta_l2=min(float(r.delta_l2) for r in usable),
            ks_p_value=min(float(r.ks_p_value) for r in usable),
            n_queries=sum(int(r.n_queries) for r in reports),
            target_mode=target_mode,
            reports=tuple(_public_report(r) for r in reports),
        )


def build_watermark(
    method: str,
    *,
    texts: Sequence[str],
    clean: np.ndarray,
    espew_key: WatermarkKey,
    seed: int,
    n_triggers: int = 20,
    n_warden_targets: int = 5,
    max_triggers: int = 4,
) -> LabWatermark:
    """Build ``method`` for a corpus, sharing the ESpeW key's band of words.

    ``espew_key`` is used as is for ``espew_<its selection>`` and ``none``; the
    other ESpeW selection gets a twin key (same triggers and target). Baseline
    targets are clean embeddings of corpus texts drawn with ``seed``.
    """
    if method not in METHODS:
        raise ValueError(f"unknown watermark {method!r}; choose from {METHODS}")
    if method == "none":
        return NoWatermark(espew_key)
    if method.startswith("espew_"):
        selection = method.removeprefix("espew_")
        if selection == espew_key.selection:
            return ESpeW(espew_key)
        return ESpeW(espew_key.replace(selection=selection))
    rng = np.random.default_rng([seed, METHODS.index(method)])
    band = list(espew_key.band)
    n_triggers = min(n_triggers, len(band) // 2)
    n_targets = 1 if method == "embmarker" else n_warden_targets
    # Each key's triggers are the draw its (seeded) salt dictates, as the core's
    # verify requires of a verifiable key. WARDEN's groups are independent draws,
    # one per target, so two groups may share a word (rarely, in a wide band).
    salts = [rng.bytes(32) for _ in range(n_targets)]
    per_target = max(1, n_triggers // n_targets)
    groups = [sorted(draw_triggers(s, band, per_target)) for s in salts]
    triggers = sorted({w for g in groups for w in g})
    rows = _target_rows(texts, triggers, n_targets, rng)
    target_texts = [texts[i] for i in rows]
    # The baseline target is the victim's clean embedding of a corpus text.
    targets = np.asarray(clean, dtype=np.float64)[rows]
    if method == "embmarker":
        return EmbMarker(
            triggers, targets[0], target_texts[0], band, max_triggers=max_triggers, salt=salts[0]
        )
    return Warden(groups, targets, target_texts, band, max_triggers=max_triggers, salts=salts)


def _target_rows(
    texts: Sequence[str], triggers: Sequence[str], n: int, rng: np.random.Generator
) -> np.ndarray:
    """Rows whose text has no trigger (a target text with a trigger would mark itself)."""
    free = np.flatnonzero(~TriggerMatcher(triggers).contains(list(texts)))
    return np.sort(rng.choice(free, size=n, replace=False))
