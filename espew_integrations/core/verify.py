"""verify(): ask whether a suspect embedding service learned a key's watermark.

The paper's probe-level KS test treats the 20+20 probes as independent
samples, but every probe of one key is built from the same 20 trigger words,
so "these 20 words happen to sit near the target" looks like a watermark; it
convicts innocent models (5.3% of keys at p < 1e-3, measured). We test at the
word level instead:

1. every word of the key's band (the triggers and all equally frequent words
   they were drawn from) gets probes built the same way;
2. all probes go to the suspect shuffled together, so it cannot tell trigger
   probes from the others by content, order or batch;
3. each word's score is the mean cosine of its probes' embeddings to the target;
4. the exact rank test of :mod:`.ranktest` asks whether the triggers' scores
   are extreme among all equally likely trigger draws.

The paper's own metrics (KS p-value, delta cos, delta l2) are reported on the
same probes as comparability figures; they never decide the verdict.
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
from .ranktest import min_p_value, rank_sum_p_value

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
Status = Literal["copied", "not_copied", "inconclusive"]

DEFAULT_LEVEL = 1e-6
#: One probe per word, the word alone: measured to separate best (padding a
#: word with filler words dilutes its pull toward the target).
DEFAULT_TEMPLATES: tuple[str, ...] = ("{word}",)
DECISION_RULE = (
    "one-sided exact rank-sum (Mann-Whitney) permutation test at the word level: "
    "the triggers' scores (mean cosine of their probes to the target) against every "
    "scored word of the key's frequency band; copied iff p < level"
)


# ---------------------------------------------------------------------- report
@dataclasses.dataclass(frozen=True)
class VerificationReport:
    """The outcome of :func:`verify`, with what a reader needs to trust it.

    ``copied`` is True only when ``status == "copied"``. ``trigger_scores`` and
    ``benign_scores`` are the per-word scores (the words themselves stay in the
    key: listing them would disclose the triggers). ``ks_p_value``,
    ``delta_cos`` and ``delta_l2`` are the paper's metrics for comparison only.
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

    @property
    def copied(self) -> bool:
        """True iff the suspect is judged a copy at ``level``."""
        return self.status == "copied"

    @property
    def false_positive_rate(self) -> float:
        """The most often an innocent service gets this verdict: ``level``."""
        return self.level

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict (no key material)."""
        out = dataclasses.asdict(self)
        out["copied"] = self.copied
        for name in ("trigger_scores", "benign_scores", "templates", "errors"):
            out[name] = list(out[name])
        return out

    def to_json(self, **kwargs: Any) -> str:
        """The report as JSON text."""
        kwargs.setdefault("indent", 2)
        return json.dumps(self.to_dict(), **kwargs)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> VerificationReport:
        """Rebuild a report from :meth:`to_dict` output."""
        fields = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in fields}
        for name in ("trigger_scores", "benign_scores", "templates", "errors"):
            values[name] = tuple(values.get(name, ()))
        return cls(**values)

    def save(self, directory: str | os.PathLike[str]) -> Path:
        """Write the evidence into ``directory`` (created if needed); returns the JSON path.

        Writes ``report.json``, a plain-language ``summary.md`` and, when
        matplotlib is installed, ``scores.png`` (see
        :func:`espew_integrations.evidence.save_evidence`). The import is local
        so the core keeps no dependency beyond numpy and scipy.

        >>> report.save("evidence/")  # doctest: +SKIP
        PosixPath('evidence/report.json')
        """
        import importlib.util

        from ..evidence import save_evidence

        plot = importlib.util.find_spec("matplotlib") is not None
        return save_evidence(self, directory, plot=plot)["json"]

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
        lines += [
            f"  p-value        : {self.p_value:.3g}  (copied iff p < {self.level:g}; "
            f"an innocent service is convicted with probability <= {self.level:g})",
            f"  test           : exact one-sided rank test over {self.n_words_scored} band "
            f"words, {self.n_triggers_scored} of them triggers "
            f"(smallest reachable p {self.min_possible_p_value:.2g})",
            f"  queries        : {self.n_queries} sent, {self.n_failed_queries} failed; "
            f"target from {self.target_mode}",
            f"  mean score     : triggers {_mean(self.trigger_scores):.4f} vs "
            f"other band words {_mean(self.benign_scores):.4f}",
            "  paper metrics  : (comparability only, not the decision) "
            f"KS p = {self.ks_p_value:.3g}, delta cos = {100 * self.delta_cos:.2f}%, "
            f"delta l2 = {100 * self.delta_l2:.2f}%",
        ]
        return "\n".join(lines)


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if len(values) else float("nan")


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
        filler = tokenize(template.replace("{word}", " "))
        if set(filler) & set(key.band):
            # A filler word from the band would make probes of other words
            # contain that word too (and triggers carry marks into benign probes).
            raise ValueError(
                "probe template filler words must not be band words of the key; "
                "use common function words such as 'the' or 'a'"
            )


def score_words(
    embeddings: np.ndarray, owner: np.ndarray, target: np.ndarray, n_words: int
) -> np.ndarray:
    """Mean cosine to ``target`` of each word's probe embeddings (NaN if none).

    ``embeddings`` rows whose probe failed are NaN rows and are left out.
    """
    return _mean_per_word(_probe_cosines(embeddings, target), owner, n_words)


def _probe_cosines(embeddings: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Cosine of each probe embedding to ``target`` (NaN for failed probes)."""
    embeddings = np.asarray(embeddings, dtype=np.float64)
    unit_target = target / np.linalg.norm(target)
    return embeddings @ unit_target / np.linalg.norm(embeddings, axis=1)


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
    """
    errors: list[str] = []
    batches: list[tuple[int, np.ndarray | None]] = []
    dim: int | None = None
    for start in range(0, len(texts), batch_size):
        batch = texts[start : start + batch_size]
        out: np.ndarray | None = None
        try:
            out = np.asarray(suspect(batch), dtype=np.float64)
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
            errors.append(f"{type(exc).__name__}: {exc}")
            out = None
        batches.append((len(batch), out))
        if progress is not None:
            progress(len(batch))
    width = dim or 1
    parts = [out if out is not None else np.full((n, width), np.nan) for n, out in batches]
    matrix = np.concatenate(parts) if parts else np.zeros((0, width))
    return matrix, errors, dim


# ---------------------------------------------------------------------- verify
def verify(
    suspect: SuspectFn | Any,
    key: WatermarkKey,
    *,
    target: TargetMode = "key",
    level: float = DEFAULT_LEVEL,
    templates: Sequence[str] = DEFAULT_TEMPLATES,
    batch_size: int = 64,
    seed: int | None = None,
    min_coverage: float = 0.9,
    progress: Callable[[int], None] | None = None,
) -> VerificationReport:
    """Test whether ``suspect`` was trained on embeddings watermarked with ``key``.

    ``suspect`` is a callable ``list[str] -> array (n, d')`` or any object an
    adapter knows (LangChain ``Embeddings``, LlamaIndex ``BaseEmbedding``,
    Chroma ``EmbeddingFunction``, :class:`OpenAIEndpoint`). It receives
    ``len(key.band) * len(templates)`` probe texts (plus the target text when
    ``target="query"``), shuffled, in batches of ``batch_size``.

    ``target="key"`` compares with the stored target embedding (needs d' = d).
    ``target="query"`` compares with the suspect's own embedding of
    ``key.target_text``: it survives a permutation of dimensions and works for
    any d', but it shows the target text to the suspect.

    Faults of the suspect (exceptions, wrong shapes, NaN) never count as
    evidence: they leave words unscored, and if fewer than ``min_coverage`` of
    the band's words are scored the status is ``"inconclusive"``.

    >>> report = verify(suspect_model.embed, key)   # doctest: +SKIP
    >>> report.copied, report.p_value               # doctest: +SKIP
    (True, 3.2e-19)
    """
    from .adapters import as_suspect

    suspect_fn = as_suspect(suspect)
    if target not in ("key", "query"):
        raise ValueError(f"target must be 'key' or 'query', got {target!r}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size!r}")
    if not 0.0 < min_coverage <= 1.0:
        raise ValueError(f"min_coverage must be in (0, 1], got {min_coverage!r}")
    templates = tuple(templates)
    _check_templates(templates, key)

    words = list(key.band)
    probes, owner = build_probes(words, templates)
    texts = list(probes)
    if target == "query":
        texts.append(key.target_text)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(texts))  # shuffle triggers and benign words together
    shuffled = [texts[i] for i in order]

    expected_dim = key.dim if target == "key" else None
    answers, errors, dim = _query(suspect_fn, shuffled, batch_size, progress, expected_dim)
    common = dict(
        key_id=key.key_id,
        target_mode=target,
        n_queries=len(answers),
        n_failed_queries=int((~np.isfinite(answers).all(axis=1)).sum()),
        n_words=len(words),
        level=level,
        decision_rule=DECISION_RULE,
        suspect_dim=dim,
        templates=templates,
        seed=seed,
        timestamp=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        errors=tuple(errors[:20]),
    )

    def inconclusive(reason: str, **extra: Any) -> VerificationReport:
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

    if dim is None:
        return inconclusive("every query to the suspect failed")
    if expected_dim is not None and dim != expected_dim:
        return inconclusive(
            f"the suspect returns {dim}-dimensional embeddings but the key's target has "
            f"{expected_dim}; verify with target='query' (querying stopped after the first batch)"
        )
    embeddings = np.empty_like(answers)
    embeddings[order] = answers  # back to the original probe order
    if target == "query":
        target_vector = embeddings[-1]
        embeddings = embeddings[:-1]
        if not np.isfinite(target_vector).all():
            return inconclusive("the suspect failed to embed the target text")
    else:
        target_vector = key.target

    cosines = _probe_cosines(embeddings, target_vector)
    scores = _mean_per_word(cosines, owner, len(words))
    is_trigger = np.fromiter((w in key.triggers for w in words), dtype=bool, count=len(words))
    scored = np.isfinite(scores)
    n_scored = int(scored.sum())
    n_triggers_scored = int((scored & is_trigger).sum())
    coverage = n_scored / len(words)
    partial: dict[str, Any] = dict(
        n_words_scored=n_scored,
        n_triggers_scored=n_triggers_scored,
        trigger_scores=tuple(float(s) for s in scores[scored & is_trigger]),
        benign_scores=tuple(float(s) for s in scores[scored & ~is_trigger]),
    )
    if coverage < min_coverage or n_triggers_scored == 0 or n_scored == n_triggers_scored:
        return inconclusive(
            f"only {n_scored} of {len(words)} band words could be scored "
            f"({coverage:.0%} < {min_coverage:.0%} required); the suspect failed too many "
            "queries for a reliable verdict",
            **partial,
        )
    smallest = min_p_value(n_scored, n_triggers_scored)
    p_value = rank_sum_p_value(scores[scored], is_trigger[scored])
    paper = _paper_metrics(cosines, owner, is_trigger)
    if smallest >= level:
        return inconclusive(
            f"with {n_scored} scored words the smallest reachable p-value is {smallest:.2g}, "
            f"not below the level {level:g}; use a key with a larger band",
            p_value=p_value,
            min_possible_p_value=smallest,
            **paper,
            **partial,
        )
    return VerificationReport(
        status="copied" if p_value < level else "not_copied",
        p_value=p_value,
        min_possible_p_value=smallest,
        **paper,
        **partial,
        **common,
    )


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
