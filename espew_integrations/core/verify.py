"""verify(): ask whether a suspect embedding service learned a key's watermark.

The paper's probe-level KS test treats the 20+20 probes as independent
samples, but every probe of one key is built from the same 20 trigger words,
so "these 20 words happen to sit near the target" looks like a watermark; it
convicts innocent models (5.3% of keys at p < 1e-3, measured). We test at the
word level instead:

1. every word of the key's band (the triggers and all equally frequent words
   they were drawn from) is probed the same way: by default with the natural
   corpus texts stored in the key at keygen (:mod:`.probes`), which a thief
   cannot tell from ordinary traffic; optionally by the word alone;
2. all probes go to the suspect shuffled together, so it cannot tell trigger
   probes from the others by content, order or batch;
3. each word gets a *raw* score, the mean cosine of its probes' embeddings
   to the target, and a *reference-adjusted* score: the raw score minus
   ``slope *`` the provider's clean model's score for the same probes (stored
   in the key), with the slope fitted over all words (:func:`reference_slope`).
   The adjustment cancels each word's natural position, which a faithful copy
   reproduces and which otherwise hides a quality-preserving watermark;
4. the exact rank test of :mod:`.ranktest` asks, for each score, whether the
   triggers rank unusually high among all equally likely trigger draws; the
   verdict's p-value is ``min(1, 2 * min(p_raw, p_adjusted))`` (Bonferroni),
   and the report says which score decided.

Both scores are exact under the null: neither the suspect nor the clean model
depends on which band words were drawn, so the triggers stay a uniformly
random subset of the scored words. The paper's own metrics (KS p-value, delta
cos, delta l2) are reported on the same probes as comparability figures; they
never decide the verdict.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from scipy.stats import ks_2samp

from .errors import SuspectError
from .key import WatermarkKey
from .probes import unit_rows
from .ranktest import min_p_value, rank_sum_p_value
from .untrusted import printable

__all__ = [
    "DEFAULT_LEVEL",
    "DEFAULT_TEMPLATES",
    "SuspectFn",
    "VerificationReport",
    "build_probes",
    "score_words",
    "verify",
]

SuspectFn = Callable[[list[str]], Any]
TargetMode = Literal["key", "query"]
ProbeKind = Literal["auto", "sentences", "words"]
Statistic = Literal["combined", "raw", "adjusted", "corrected"]
Status = Literal["copied", "not_copied", "inconclusive"]

DEFAULT_LEVEL = 1e-6
#: One probe per word, the word alone: measured to separate best among word
#: templates (padding a word with filler words dilutes its pull to the target).
DEFAULT_TEMPLATES: tuple[str, ...] = ("{word}",)
DECISION_RULE = (
    "one-sided exact rank-sum (Mann-Whitney) permutation tests at the word level: the "
    "triggers' scores against every scored word of the key's frequency band, once with raw "
    "scores (mean cosine of the word's probes to the target) and once with scores adjusted "
    "by the provider's clean model (minus a fitted slope times its score for the same "
    "probes); p = min(1, 2 * min(p_raw, p_adjusted)); copied iff p < level"
)
_PRIVATE_FIELDS = ("trigger_scores", "benign_scores")


# ---------------------------------------------------------------------- report
@dataclasses.dataclass(frozen=True)
class VerificationReport:
    """The outcome of :func:`verify`, with what a reader needs to trust it.

    ``copied`` is True only when ``status == "copied"``. What :meth:`to_dict`,
    :meth:`to_json`, ``str(report)`` and :meth:`save` produce is safe to hand
    to the suspect's owner: no word, no per-word score. ``trigger_scores`` and
    ``benign_scores`` (the words' raw scores; a suspect that logged its own
    answers could match them to its queries and recover the triggers) stay on
    the object and go only to :meth:`to_private_dict` and
    :func:`espew_integrations.evidence.save_private_evidence`.
    ``ks_p_value``, ``delta_cos`` and ``delta_l2`` are the paper's metrics for
    comparison only.
    """

    status: Status
    p_value: float
    level: float
    decision_rule: str
    key_id: str
    target_mode: str
    n_queries: int
    n_failed_queries: int
    n_words: int
    n_words_scored: int
    n_triggers_scored: int
    min_possible_p_value: float
    trigger_scores: tuple[float, ...]
    benign_scores: tuple[float, ...]
    ks_p_value: float
    delta_cos: float
    delta_l2: float
    suspect_dim: int | None
    templates: tuple[str, ...]
    seed: int | None
    timestamp: str
    reason: str = ""
    errors: tuple[str, ...] = ()
    probes: str = "words"
    statistic: str = "raw"
    p_value_raw: float = math.nan
    p_value_adjusted: float = math.nan
    reference_slope: float = math.nan
    decided_by: str = ""

    @property
    def copied(self) -> bool:
        """True iff the suspect is judged a copy at ``level``."""
        return self.status == "copied"

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict, safe to share: no key material, no per-word scores."""
        out = self.to_private_dict()
        for name in _PRIVATE_FIELDS:
            del out[name]
        return out

    def to_private_dict(self) -> dict[str, Any]:
        """Everything, per-word scores included: for the provider's records or an arbiter."""
        out = dataclasses.asdict(self)
        out["copied"] = self.copied
        for name in ("trigger_scores", "benign_scores", "templates", "errors"):
            out[name] = list(out[name])
        return out

    def to_json(self, **kwargs: Any) -> str:
        """The shareable report as JSON text (:meth:`to_dict`)."""
        kwargs.setdefault("indent", 2)
        return json.dumps(self.to_dict(), **kwargs)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> VerificationReport:
        """Rebuild a report from :meth:`to_dict` (scores empty) or :meth:`to_private_dict`."""
        fields = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in fields}
        for name in ("trigger_scores", "benign_scores", "templates", "errors"):
            values[name] = tuple(values.get(name, ()))
        return cls(**values)

    def save(self, directory: str | os.PathLike[str], *, force: bool = False) -> Path:
        """Write the shareable evidence into ``directory``; returns the JSON path.

        Writes ``report.json`` and a plain-language ``summary.md`` (see
        :func:`espew_integrations.evidence.save_evidence`); existing files are
        kept unless ``force=True``. Per-word detail goes only to
        :func:`espew_integrations.evidence.save_private_evidence`. The import
        is local so the core keeps no dependency beyond numpy and scipy.

        >>> report.save("evidence/")  # doctest: +SKIP
        PosixPath('evidence/report.json')
        """
        from ..evidence import save_evidence

        return save_evidence(self, directory, force=force)["json"]

    def __str__(self) -> str:
        verdict = {
            "copied": "COPIED: the suspect carries this key's watermark",
            "not_copied": "NOT COPIED: no evidence of this key's watermark",
            "inconclusive": "INCONCLUSIVE: no verdict could be reached",
        }[self.status]
        lines = [
            f"ESpeW verification report (key {self.key_id}, {self.timestamp})",
            f"  verdict        : {verdict}",
        ]
        if self.reason:
            lines.append(f"  reason         : {self.reason}")
        delivered = self.n_queries - self.n_failed_queries
        lines += [
            f"  p-value        : {self.p_value:.3g}  (copied iff p < {self.level:g}; "
            f"an innocent service is convicted with probability <= {self.level:g})",
            f"  statistics     : raw p = {self.p_value_raw:.3g}, reference-adjusted p = "
            f"{self.p_value_adjusted:.3g} (slope {self.reference_slope:.2f})"
            + (f"; decided by {self.decided_by}" if self.decided_by else ""),
            f"  test           : exact one-sided rank test over {self.n_words_scored} band "
            f"words, {self.n_triggers_scored} of them triggers "
            f"(smallest reachable p {self.min_possible_p_value:.2g})",
            f"  queries        : {self.n_queries} {self.probes} probes, {delivered} answered, "
            f"{self.n_failed_queries} failed; target from {self.target_mode}",
        ]
        if self.errors:
            lines.append(f"  first error    : {self.errors[0]}")
        lines.append(
            "  paper metrics  : (comparability only, not the decision) "
            f"KS p = {self.ks_p_value:.3g}, delta cos = {100 * self.delta_cos:.2f}%, "
            f"delta l2 = {100 * self.delta_l2:.2f}%"
        )
        return "\n".join(lines)


# ---------------------------------------------------------------------- probes
def build_probes(
    words: Sequence[str], templates: Sequence[str] = DEFAULT_TEMPLATES
) -> tuple[list[str], np.ndarray]:
    """Probe texts for each word, built identically for every word.

    Returns ``(probes, owner)`` where ``owner[i]`` is the index in ``words`` of
    the word probe ``i`` was built from.

    >>> build_probes(["apple", "pear"], ("{word}", "the {word}"))
    (['apple', 'the apple', 'pear', 'the pear'], array([0, 0, 1, 1]))
    """
    templates = tuple(templates)
    if not templates or not all("{word}" in t for t in templates):
        raise ValueError("every probe template must contain '{word}'")
    probes = [t.format(word=w) for w in words for t in templates]
    owner = np.repeat(np.arange(len(words)), len(templates))
    return probes, owner


def _check_templates(templates: Sequence[str], key: WatermarkKey) -> None:
    from .words import tokenize

    for template in templates:
        filler = tokenize(template.replace("{word}", " "), key.normalization)
        if set(filler) & set(key.band):
            # A filler word from the band would make probes of other words
            # contain that word too (and triggers carry marks into benign probes).
            raise ValueError(
                "probe template filler words must not be band words of the key; "
                "use common function words such as 'the' or 'a'"
            )


@dataclasses.dataclass(frozen=True)
class _Plan:
    """What to ask the suspect and how to score the answers."""

    kind: str
    texts: list[str]
    owner: np.ndarray
    reference: np.ndarray | None  # clean model's cosine per probe, if known
    templates: tuple[str, ...]


def _plan(key: WatermarkKey, probes: str, templates: Sequence[str] | None) -> _Plan:
    if probes not in ("auto", "sentences", "words"):
        raise ValueError(f"probes must be 'auto', 'sentences' or 'words', got {probes!r}")
    has_sentences = bool(key.probe_texts)
    if probes == "sentences" and not has_sentences:
        raise ValueError(
            "this key stores no sentence probes (made before they existed); "
            "use probes='words' or generate a new key"
        )
    if probes == "sentences" or (probes == "auto" and has_sentences and templates is None):
        reference = key.probe_reference if key.probe_reference.size else None
        return _Plan("sentences", list(key.probe_texts), key.probe_owner, reference, ())
    templates = tuple(DEFAULT_TEMPLATES if templates is None else templates)
    _check_templates(templates, key)
    texts, owner = build_probes(list(key.band), templates)
    reference = None
    if templates == DEFAULT_TEMPLATES and key.word_reference.size:
        reference = key.word_reference
    return _Plan("words", texts, owner, reference, templates)


def score_words(
    embeddings: np.ndarray, owner: np.ndarray, target: np.ndarray, n_words: int
) -> np.ndarray:
    """Mean cosine to ``target`` of each word's probe embeddings (NaN if none).

    ``embeddings`` rows whose probe failed are NaN rows and are left out.
    """
    return _mean_per_word(_probe_cosines(embeddings, target), owner, n_words)


def _probe_cosines(embeddings: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Cosine of each probe embedding to ``target`` (NaN for failed probes).

    Rows are scaled by their largest magnitude before the norm, so answers of
    1e200 give their true cosines instead of overflowing to 0.
    """
    embeddings = np.asarray(embeddings, dtype=np.float64)
    failed = ~np.isfinite(embeddings).all(axis=1)
    unit = unit_rows(np.where(failed[:, None], 0.0, embeddings))
    cosines = unit @ unit_rows(np.asarray(target, dtype=np.float64)[None, :])[0]
    cosines[failed] = np.nan
    return cosines


def _mean_per_word(cosines: np.ndarray, owner: np.ndarray, n_words: int) -> np.ndarray:
    valid = np.isfinite(cosines)
    sums = np.bincount(owner[valid], weights=cosines[valid], minlength=n_words)
    counts = np.bincount(owner[valid], minlength=n_words)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


# ---------------------------------------------------------------------- querying
def _query(
    suspect: SuspectFn,
    texts: list[str],
    batch_size: int,
    progress: Callable[[int], None] | None,
    expected_dim: int | None = None,
) -> tuple[np.ndarray, list[str], int | None]:
    """Embed ``texts`` in batches; failed or malformed batches become NaN rows.

    Returns ``(embeddings, errors, dim)``; ``dim`` is None if no batch succeeded.
    If the first answer's dimension differs from ``expected_dim`` it stops
    there: no verdict is possible, so the rest of the query budget is spared.
    Every recorded error passes through :func:`.untrusted.printable`: it may
    quote the suspect's own text.
    """
    errors: list[str] = []
    batches: list[tuple[int, np.ndarray | None]] = []
    dim: int | None = None
    for start in range(0, len(texts), batch_size):
        batch = texts[start : start + batch_size]
        out: np.ndarray | None = None
        try:
            out = np.array(suspect(batch), dtype=np.float64)
            if out.ndim != 2 or out.shape[0] != len(batch):
                raise SuspectError(f"returned shape {out.shape} for a batch of {len(batch)} texts")
            if dim is None:
                dim = out.shape[1]
                if expected_dim is not None and dim != expected_dim:
                    batches.append((len(batch), out))
                    break
            if out.shape[1] != dim:
                raise SuspectError(f"returned dimension {out.shape[1]}, expected {dim}")
            bad = ~np.isfinite(out).all(axis=1) | ~out.any(axis=1)
            if bad.any():
                out[bad] = np.nan  # unusable rows are missing, not zero-scored
                errors.append(f"{int(bad.sum())} non-finite or zero embeddings")
        except Exception as exc:  # a fault is missing data, never evidence
            errors.append(printable(f"{type(exc).__name__}: {exc}"))
            out = None
        batches.append((len(batch), out))
        if progress is not None:
            progress(len(batch))
    width = dim or 1
    parts = [out if out is not None else np.full((n, width), np.nan) for n, out in batches]
    matrix = np.concatenate(parts) if parts else np.zeros((0, width))
    return matrix, errors, dim


def _uninformative(answers: np.ndarray, raw_scores: np.ndarray) -> str:
    """Why the answers carry no evidence either way ('' if they do)."""
    valid = answers[np.isfinite(answers).all(axis=1)]
    if len(valid) and np.unique(unit_rows(valid).round(12), axis=0).shape[0] < 2:
        return "the suspect gave the same embedding for every probe"
    finite = raw_scores[np.isfinite(raw_scores)]
    if finite.size and np.ptp(finite) <= 1e-12:
        return "every scored word got the same score"
    return ""


# ---------------------------------------------------------------------- verify
def verify(
    suspect: SuspectFn | Any,
    key: WatermarkKey,
    *,
    target: TargetMode = "key",
    level: float = DEFAULT_LEVEL,
    probes: ProbeKind = "auto",
    statistic: Statistic = "combined",
    templates: Sequence[str] | None = None,
    batch_size: int = 64,
    seed: int | None = None,
    min_coverage: float = 0.9,
    progress: Callable[[int], None] | None = None,
) -> VerificationReport:
    """Test whether ``suspect`` was trained on embeddings watermarked with ``key``.

    ``suspect`` is a callable ``list[str] -> array (n, d')`` or any object an
    adapter knows (LangChain ``Embeddings``, LlamaIndex ``BaseEmbedding``,
    Chroma ``EmbeddingFunction``, :class:`OpenAIEndpoint`).

    ``probes="auto"`` (default) sends the natural-text probes stored in the
    key (about 1,600 queries for a 199-word band), or the band words alone
    for keys that store none; ``"words"`` forces single-word probes built
    from ``templates``. Probes are shuffled and sent in batches of
    ``batch_size``; ``seed`` fixes the shuffle.

    ``statistic="combined"`` decides on raw and reference-adjusted scores
    together (see the module docstring); ``"raw"``, ``"adjusted"`` or
    ``"corrected"`` (slope fixed at 1) use one.

    ``target="key"`` compares with the stored target embedding (needs d' = d).
    ``target="query"`` compares with the suspect's own embedding of
    ``key.target_text``: it survives a permutation of dimensions and works for
    any d', but it shows the target text to the suspect.

    Faults of the suspect (exceptions, wrong shapes, NaN) never count as
    evidence: they leave words unscored, and if fewer than ``min_coverage`` of
    the band's words are scored the status is ``"inconclusive"``, as it is for
    uninformative answers (one vector for everything) and for a key whose
    trigger draw cannot be re-derived (:attr:`WatermarkKey.verifiable`).

    >>> report = verify(suspect_model, key)          # doctest: +SKIP
    >>> report.copied, report.p_value               # doctest: +SKIP
    (True, 1.4e-27)
    """
    from .adapters import as_suspect

    suspect_fn = as_suspect(suspect)
    _check_options(target, level, batch_size, min_coverage, statistic)
    plan = _plan(key, probes, templates)
    if statistic in ("adjusted", "corrected") and plan.reference is None:
        raise ValueError(f"statistic={statistic!r} needs the clean reference this key lacks")
    asked = _interrogate(
        suspect_fn, key, plan, target, level, statistic, batch_size, seed, progress
    )
    if asked.reason:
        return _inconclusive(asked.common, asked.reason)
    return _decide(key, plan, asked.embeddings, asked.target_vector, min_coverage, asked.common)


@dataclasses.dataclass(frozen=True)
class _Answers:
    """The suspect's answers to a plan, in the plan's order, or why there are none."""

    common: dict[str, Any]
    embeddings: np.ndarray
    target_vector: np.ndarray
    reason: str = ""


def _interrogate(
    suspect_fn: SuspectFn,
    key: WatermarkKey,
    plan: _Plan,
    target: str,
    level: float,
    statistic: str,
    batch_size: int,
    seed: int | None,
    progress: Callable[[int], None] | None,
) -> _Answers:
    """Ask the suspect the plan's probes once, shuffled; :func:`verify` and ``trace`` share it."""
    texts = list(plan.texts) + ([key.target_text] if target == "query" else [])
    order = np.random.default_rng(seed).permutation(len(texts))  # mix triggers and others
    expected_dim = key.dim if target == "key" else None
    answers, errors, dim = _query(
        suspect_fn, [texts[i] for i in order], batch_size, progress, expected_dim
    )
    common = dict(
        key_id=key.key_id,
        target_mode=target,
        n_queries=len(answers),
        n_failed_queries=int((~np.isfinite(answers).all(axis=1)).sum()),
        n_words=len(key.band),
        level=level,
        decision_rule=DECISION_RULE,
        suspect_dim=dim,
        templates=plan.templates,
        seed=seed,
        timestamp=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        errors=tuple(errors[:20]),
        probes=plan.kind,
        statistic=statistic if plan.reference is not None else "raw",
    )
    if dim is None:
        first = f" (first error: {errors[0]})" if errors else ""
        return _Answers(common, answers, key.target, f"every query to the suspect failed{first}")
    if expected_dim is not None and dim != expected_dim:
        return _Answers(
            common,
            answers,
            key.target,
            f"the suspect returns {dim}-dimensional embeddings but the key's target has "
            f"{expected_dim}; verify with target='query' (querying stopped after the first batch)",
        )
    embeddings = np.empty_like(answers)
    embeddings[order] = answers  # back to the original probe order
    target_vector = key.target
    if target == "query":
        target_vector, embeddings = embeddings[-1], embeddings[:-1]
        if not np.isfinite(target_vector).all():
            return _Answers(
                common, embeddings, key.target, "the suspect failed to embed the target text"
            )
    return _Answers(common, embeddings, target_vector)


def _check_options(
    target: str, level: float, batch_size: int, min_coverage: float, statistic: str
) -> None:
    if target not in ("key", "query"):
        raise ValueError(f"target must be 'key' or 'query', got {target!r}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size!r}")
    if not 0.0 < min_coverage <= 1.0:
        raise ValueError(f"min_coverage must be in (0, 1], got {min_coverage!r}")
    if statistic not in ("combined", "raw", "adjusted", "corrected"):
        raise ValueError(
            f"statistic must be 'combined', 'raw', 'adjusted' or 'corrected', got {statistic!r}"
        )


def _inconclusive(common: dict[str, Any], reason: str, **extra: Any) -> VerificationReport:
    values: dict[str, Any] = dict(
        status="inconclusive",
        p_value=math.nan,
        n_words_scored=0,
        n_triggers_scored=0,
        min_possible_p_value=math.nan,
        trigger_scores=(),
        benign_scores=(),
        ks_p_value=math.nan,
        delta_cos=math.nan,
        delta_l2=math.nan,
        reason=reason,
    )
    values.update(common)
    values.update(extra)
    return VerificationReport(**values)


def _decide(
    key: WatermarkKey,
    plan: _Plan,
    embeddings: np.ndarray,
    target_vector: np.ndarray,
    min_coverage: float,
    common: dict[str, Any],
) -> VerificationReport:
    n_words = len(key.band)
    cosines = _probe_cosines(embeddings, target_vector)
    raw = _mean_per_word(cosines, plan.owner, n_words)
    is_trigger = np.fromiter((w in key.triggers for w in key.band), dtype=bool, count=n_words)
    scored = np.isfinite(raw)
    n_scored, n_triggers_scored = int(scored.sum()), int((scored & is_trigger).sum())
    partial: dict[str, Any] = dict(
        n_words_scored=n_scored,
        n_triggers_scored=n_triggers_scored,
        trigger_scores=tuple(float(s) for s in raw[scored & is_trigger]),
        benign_scores=tuple(float(s) for s in raw[scored & ~is_trigger]),
    )
    if n_scored / n_words < min_coverage or n_triggers_scored == 0 or n_scored == n_triggers_scored:
        return _inconclusive(
            common,
            f"only {n_scored} of {n_words} band words could be scored "
            f"({n_scored / n_words:.0%} < {min_coverage:.0%} required); the suspect failed too "
            "many queries for a reliable verdict",
            **partial,
        )
    empty = _uninformative(embeddings, raw)
    if empty:
        return _inconclusive(common, f"{empty}: such answers are no evidence either way", **partial)
    p_values = _p_values(raw, cosines, plan, is_trigger, scored, common["statistic"])
    answered = float(np.isfinite(cosines).mean())
    smallest = min_p_value(n_scored, n_triggers_scored)
    status: Status = "copied" if p_values["p_value"] < common["level"] else "not_copied"
    reason = ""
    if smallest >= common["level"]:
        status = "inconclusive"
        reason = (
            f"with {n_scored} scored words the smallest reachable p-value is {smallest:.2g}, "
            f"not below the level {common['level']:g}; use a key with a larger band"
        )
    elif status == "not_copied" and answered < min_coverage:
        # A conviction on the probes that arrived is valid (the test is exact on any
        # subset chosen without the trigger labels); an acquittal on a fraction of
        # the evidence is not: faults must never clear a suspect.
        status = "inconclusive"
        reason = (
            f"only {answered:.0%} of the probes were answered ({min_coverage:.0%} required "
            "to clear a suspect); the answered ones show no watermark at this level"
        )
    elif not key.verifiable:
        status = "inconclusive"
        reason = (
            "the key's triggers are not the draw its salt dictates (a hand-made key or one "
            "saved in format version 1), so no third party can check that they were drawn at "
            "random; generate a new key for verdicts"
        )
    return VerificationReport(
        status=status,
        reason=reason,
        min_possible_p_value=smallest,
        **p_values,
        **_paper_metrics(cosines, plan.owner, is_trigger),
        **partial,
        **common,
    )


def _p_values(
    raw: np.ndarray,
    cosines: np.ndarray,
    plan: _Plan,
    is_trigger: np.ndarray,
    scored: np.ndarray,
    statistic: str,
) -> dict[str, Any]:
    p_raw = rank_sum_p_value(raw[scored], is_trigger[scored])
    if plan.reference is None:
        return {"p_value": p_raw, "p_value_raw": p_raw, "decided_by": "raw"}
    reference = _mean_per_word(
        np.where(np.isfinite(cosines), plan.reference, np.nan), plan.owner, len(raw)
    )
    slope = 1.0 if statistic == "corrected" else reference_slope(raw[scored], reference[scored])
    adjusted = raw - slope * reference
    p_adjusted = rank_sum_p_value(adjusted[scored], is_trigger[scored])
    if statistic == "raw":
        p_value, decided_by = p_raw, "raw"
    elif statistic in ("adjusted", "corrected"):
        p_value, decided_by = p_adjusted, statistic
    else:
        decided_by = "raw" if p_raw < p_adjusted else "adjusted"
        p_value = min(1.0, 2.0 * min(p_raw, p_adjusted))
    return {
        "p_value": p_value,
        "p_value_raw": p_raw,
        "p_value_adjusted": p_adjusted,
        "reference_slope": slope,
        "decided_by": decided_by,
    }


def reference_slope(scores: np.ndarray, reference: np.ndarray) -> float:
    """Least-squares slope of the suspect's word scores on the clean model's.

    A faithful copy reproduces the clean model's positions (slope ~1); a
    rougher copy reproduces part of them (a ridge copy: ~0.5); an independent
    model hardly any (~0.3). Subtracting ``slope * reference`` removes as much
    of each word's natural position as the suspect shares with the clean model,
    leaving the watermark's shift. The slope is fitted over every scored word
    without looking at which are triggers, a symmetric function of the scores,
    so the adjusted scores keep the rank test exact under the null.
    """
    centred = reference - reference.mean()
    denominator = float(centred @ centred)
    if denominator <= 0.0:
        return 0.0
    return float(centred @ (scores - scores.mean()) / denominator)


def _paper_metrics(
    cosines: np.ndarray, owner: np.ndarray, is_trigger: np.ndarray
) -> dict[str, float]:
    """KS p-value, delta cos and delta l2 (paper, "Watermark Verification").

    Computed on our probes: trigger-word probes play D_b, other band-word probes
    D_n. l2 is the squared distance of unit vectors, ||u - t||^2 = 2 - 2 cos,
    which is what makes the paper's tables read delta_l2 = -2 delta_cos.
    """
    valid = np.isfinite(cosines)
    backdoor = valid & is_trigger[owner]
    benign = valid & ~is_trigger[owner]
    if not backdoor.any() or not benign.any():
        return {"ks_p_value": math.nan, "delta_cos": math.nan, "delta_l2": math.nan}
    ks = ks_2samp(cosines[backdoor], cosines[benign], alternative="two-sided")
    squared_l2 = 2.0 - 2.0 * cosines
    return {
        "ks_p_value": float(ks.pvalue),
        "delta_cos": float(cosines[backdoor].mean() - cosines[benign].mean()),
        "delta_l2": float(squared_l2[backdoor].mean() - squared_l2[benign].mean()),
    }
