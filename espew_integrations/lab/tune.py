"""``espew tune``: the alpha, strength and target text that meet a quality budget and still convict.

The paper's alpha = 0.2 costs about 8% cosine on MiniLM's marked rows; a
provider wants the watermark to cost less than a stated budget (say
cos(clean, watermarked) >= 0.995 on marked rows) and still convict a copy.
Which copy matters: a ridge copy averages every training text that holds a
trigger, so it *amplifies* the mark and flatters a weak setting. So every
point is judged twice, with the core's default audit (the key's stored
natural-sentence probes and clean reference cosines), and the **worse**
p-value counts:

* the **faithful copy**: the watermarked service itself, the limiting case of
  a copy that reproduces the service perfectly (it carries only what the
  service carries);
* a **ridge copy** trained on the service's answers after the attack (CSE by
  default);
* with ``neural_judge``, also a **frozen-MLP copy** (an MLP head on the
  attacker's own model, ``standard``) trained on the same attacked answers:
  the weakest copy the lab knows, which carries a quality-budget mark least
  (``docs/results/frontier``). Both judges above sit at the test's floor for
  every point in the budget on the offline defaults, so this one is what
  separates the settings; it costs about a minute per point on 12,752 texts
  (``docs/lab.md`` has the measured frontier).

The tuner:

1. draws one set of triggers, band words and audit probes for the corpus (seeded);
2. judges every candidate target text cheaply, without any stealer: for each
   alpha, its expected distortion (mean cos(clean, watermarked) over the rows
   it would mark), the clean model's innocent-twin p-value (a target close to
   some triggers would convict innocents), a detectability proxy (the mean
   pull of marked rows toward the target over the spread of the band words'
   clean scores), and how well a copy trained on clean answers reproduces
   the target text (what a verification after a permutation attack relies on);
3. measures the best-judged targets end to end on every alpha, at the paper's
   full write and at the strength that just fits the budget: watermark the
   corpus, verify the service itself, attack, train a ridge copy, verify it;
4. reports the frontier (cos vs p per point) and the choice: the highest
   quality point that meets the detection goal (qualities within
   :data:`QUALITY_TOLERANCE` tie, and the smallest p-value breaks the tie), or
   None when nothing does.

Candidate target texts are secret key material once chosen, so outputs name
them by index and fingerprint only.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..core.inject import watermark
from ..core.key import DEFAULT_N_TRIGGERS, DEFAULT_TWIN_LEVEL, WatermarkKey
from ..core.keygen import fit_strength, twin_p_value
from ..core.probes import reference_cosines, row_cosines, unit_rows
from ..core.verify import verify

__all__ = [
    "DEFAULT_TARGETS",
    "MarkedRows",
    "TunePoint",
    "TuneResult",
    "judge_targets",
    "key_for_target",
    "strength_for_budget",
    "tune",
]

#: Built-in candidates: a provider signature, short plain sentences, and odd
#: strings far from any topic; judged, never trusted blindly.
DEFAULT_TARGETS: tuple[str, ...] = (
    "Espew robustness lab: provider signature sample, 2026.",
    "The weather report for tomorrow morning.",
    "Please confirm the invoice number and the delivery address.",
    "zq7 vortex lattice amber 4411",
    "A quiet harbour town at dawn.",
    "List of prime numbers below one hundred.",
)

Embedder = Callable[[list[str]], np.ndarray]


def fingerprint(text: str) -> str:
    """Short non-reversible id of a candidate target text (safe to print)."""
    return hashlib.sha256(b"espew-target\x00" + text.encode()).hexdigest()[:8]


@dataclasses.dataclass(frozen=True)
class TunePoint:
    """One (target, alpha, strength) measured end to end.

    ``p_value`` is the worst of the judges (``judged_by`` says which): the
    watermarked service itself (``p_value_service``), the ridge copy after
    the attack (``p_value_ridge``) and, when asked for, the frozen-MLP copy
    after the attack (``p_value_mlp``, NaN when not judged) and, when asked
    for, the service itself with the smallest share (``erasure_fraction``,
    half by default) of every answer's coordinates erased (``p_value_erased``,
    NaN when not judged). ``copied`` is
    ``p_value < level``; ``delta_cos`` comes from the same judge;
    ``n_queries`` is all the audits'.
    """

    target: int
    alpha: float
    cos_marked: float
    p_value: float
    copied: bool
    delta_cos: float
    n_queries: int
    strength: float = 1.0
    p_value_service: float = math.nan
    p_value_ridge: float = math.nan
    judged_by: str = ""
    p_value_mlp: float = math.nan
    p_value_erased: float = math.nan


@dataclasses.dataclass
class TuneResult:
    """The judged candidates, the measured frontier and the choice."""

    min_cos: float
    level: float
    attack: str
    candidates: list[dict[str, Any]]
    frontier: list[TunePoint]
    choice: TunePoint | None
    setup: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {
            "min_cos": self.min_cos,
            "level": self.level,
            "attack": self.attack,
            "candidates": self.candidates,
            "frontier": [dataclasses.asdict(p) for p in self.frontier],
            "choice": dataclasses.asdict(self.choice) if self.choice else None,
            "setup": self.setup,
        }

    def markdown(self) -> str:
        lines = [*self._header(), *self._candidate_table(), *self._frontier_table(), ""]
        if self.choice is None:
            lines.append("No measured point meets both the budget and the goal.")
        else:
            c = self.choice
            lines.append(
                f"Choice: target #{c.target}, alpha = {c.alpha:g}, strength = {c.strength:.3g} "
                f"(cos {c.cos_marked:.4f}, p = {c.p_value:.2g}, judged by the {c.judged_by})."
            )
        return "\n".join(lines) + "\n"

    @property
    def _neural(self) -> bool:
        """Whether a frozen-MLP copy judged the points (``tune(neural_judge=True)``)."""
        return bool(self.setup.get("neural_judge", False))

    @property
    def _erasure(self) -> bool:
        """Whether an erasing thief judged the points (``tune(erasure_judge=True)``)."""
        return bool(self.setup.get("erasure_judge", False))

    @property
    def _erased_share(self) -> str:
        """The erasure judge's share in words: "half", or a percentage."""
        fraction = float(self.setup.get("erasure_fraction", ERASURE_JUDGE_FRACTION))
        return "half" if fraction == 0.5 else f"{fraction:.0%}"

    def _header(self) -> list[str]:
        s = self.setup
        copies = "a ridge copy and a frozen-MLP copy" if self._neural else "a ridge copy"
        return [
            f"Tuning on {s['corpus']} ({s['n_texts']} texts), model {s['model']}, "
            f"{s['n_triggers']} triggers, band of {s['band_words']} words "
            f"({s['n_queries']} audit queries per judge), attack {self.attack}.",
            f"Budget: cos(clean, watermarked) >= {self.min_cos} on marked rows; "
            f"goal: p < {self.level:g} for the faithful copy (the watermarked service "
            f"itself) and for {copies} after the attack"
            + (
                ", and for the service behind a thief that zeroes the smallest "
                f"{self._erased_share} of every answer's coordinates"
                if self._erasure
                else ""
            )
            + "; the worst p counts.",
            "",
        ]

    def _candidate_table(self) -> list[str]:
        lines = [
            "Candidate targets (judged without a stealer):",
            "",
            "| # | fingerprint | twin p | max alpha in budget | cos at it | proxy at it "
            "| proxy per unit distortion | copy fidelity on it |",
            "|---:|---|---:|---:|---:|---:|---:|---:|",
        ]
        for c in self.candidates:
            lines.append(
                f"| {c['index']} | {c['fingerprint']} | {c['twin_p_value']:.2g} | "
                f"{c['max_alpha_in_budget']} | {c['cos_at_max_alpha']} | "
                f"{c['proxy_at_max_alpha']} | {c['proxy_per_distortion']} | "
                f"{c.get('copy_fidelity')} |"
            )
        return lines

    def _frontier_table(self) -> list[str]:
        copies = "ridge and frozen-MLP copies" if self._neural else "ridge copy"
        judge_header, judge_rule = ("", "")
        if self._neural:
            judge_header, judge_rule = (" p frozen-MLP after attack |", "---:|")
        if self._erasure:
            judge_header += f" p service, smallest {self._erased_share} erased |"
            judge_rule += "---:|"
        lines = [
            "",
            "Frontier (measured end to end: watermark, audit the service itself; attack, "
            f"{copies}, audit them):",
            "",
            "| target # | alpha | strength | cos(clean, wm) marked | in budget | p service "
            f"| p ridge after attack |{judge_header} p (worst) | Δcos (%) | meets goal |",
            f"|---:|---:|---:|---:|:---:|---:|---:|{judge_rule}---:|---:|:---:|",
        ]
        for p in self.frontier:
            judges = f" {p.p_value_mlp:.2g} |" if self._neural else ""
            judges += f" {p.p_value_erased:.2g} |" if self._erasure else ""
            lines.append(
                f"| {p.target} | {p.alpha:g} | {p.strength:.3g} | {p.cos_marked:.4f} | "
                f"{'yes' if p.cos_marked >= self.min_cos else 'no'} | "
                f"{p.p_value_service:.2g} | {p.p_value_ridge:.2g} |{judges} {p.p_value:.2g} | "
                f"{100 * p.delta_cos:.2f} | {'yes' if p.p_value < self.level else 'no'} |"
            )
        return lines


@dataclasses.dataclass(frozen=True)
class MarkedRows:
    """The corpus texts a key's triggers mark, with their clean embeddings.

    Every quality figure of the tuner is measured on these rows with the
    core's own :func:`~espew_integrations.watermark` and
    :func:`~espew_integrations.core.probes.row_cosines`, so a tuned cosine is
    exactly what the service will cost.
    """

    texts: list[str]
    clean: np.ndarray

    def watermarked(self, key: WatermarkKey) -> np.ndarray:
        return watermark(self.texts, self.clean, key)

    def mean_cosine(self, key: WatermarkKey) -> float:
        """Mean cos(clean, watermarked) over the rows: the quality budget's measure."""
        return float(np.mean(row_cosines(self.clean, self.watermarked(key))))


def strength_for_budget(marked: MarkedRows, key: WatermarkKey, min_cos: float) -> float:
    """The largest strength whose mean cos(clean, watermarked) on marked rows is >= min_cos.

    The core's one bisection (:func:`~espew_integrations.core.keygen.fit_strength`),
    measured on this corpus's marked rows; 1.0 if the paper's full write fits.
    """
    return fit_strength(lambda s: marked.mean_cosine(key.replace(strength=s)), min_cos)


def key_for_target(base: WatermarkKey, text: str, clean_model: Embedder) -> WatermarkKey:
    """``base`` with ``text``'s clean embedding as the target, and its audit references.

    The stored probes do not depend on the target, but their reference
    cosines (the clean model's cosine to the target) do: they are recomputed
    so the default audit keeps its reference-adjusted score.
    """
    vector = np.asarray(clean_model([text]), dtype=np.float64)[0]
    target = vector / np.linalg.norm(vector)
    changes: dict[str, Any] = {"target": target, "target_text": text}
    if base.probe_texts:
        changes["probe_reference"] = reference_cosines(clean_model, base.probe_texts, target)
        changes["word_reference"] = reference_cosines(clean_model, list(base.band), target)
    return base.replace(**changes)


def judge_targets(
    keys: Sequence[WatermarkKey],
    *,
    victim: Embedder,
    marked: MarkedRows,
    alphas: Sequence[float],
    min_cos: float,
    seed: int = 0,
    clean_copy: Embedder | None = None,
) -> list[dict[str, Any]]:
    """Judge candidate targets (one key each) without a watermarked stealer (step 2 above).

    ``victim`` is the provider's clean model. ``clean_copy``, a copy trained
    on clean answers, measures how well a stolen copy reproduces each target
    text: verification after a permutation (``target_mode="query"``) compares with
    the copy's own embedding of the target text, so a target the copy cannot
    reproduce (an out-of-domain sentence) loses that verdict. Returns one dict
    per candidate, best first.
    """
    fidelity: list[float | None] = [None] * len(keys)
    if clean_copy is not None and keys:
        reproduced = clean_copy([k.target_text for k in keys])
        targets = np.stack([k.target for k in keys])
        fidelity = [round(float(f), 3) for f in row_cosines(reproduced, targets)]
    judged = []
    for index, key in enumerate(keys):
        judgement = _judge_target(key, victim=victim, marked=marked, alphas=alphas, seed=seed)
        judged.append(
            {
                "index": index,
                "fingerprint": fingerprint(key.target_text),
                **judgement,
                **_budget_summary(judgement["per_alpha"], min_cos),
                "copy_fidelity": fidelity[index],
            }
        )
    return sorted(judged, key=_usability, reverse=True)


def _judge_target(
    key: WatermarkKey, *, victim: Embedder, marked: MarkedRows, alphas: Sequence[float], seed: int
) -> dict[str, Any]:
    """Twin p-value, score spread and, per alpha, the distortion and detectability proxy.

    The twin p-value is keygen's innocent-twin check (:func:`.keygen.twin_p_value`:
    the clean model's raw scores on the sentence and the word probes), so a
    target below keygen's twin level is one ``WatermarkKey.generate`` would refuse.
    """
    # The clean model itself on the key's audit, raw scores: what an innocent twin shows.
    twin = verify(victim, key, seed=seed, level=0.5, statistic="raw")
    scores = np.array(twin.trigger_scores + twin.benign_scores)
    spread = float(scores.std()) if scores.size > 1 else math.nan
    per_alpha = []
    for alpha in sorted(alphas):
        moved = marked.watermarked(key.replace(alpha=float(alpha)))
        cos = float(np.mean(row_cosines(marked.clean, moved)))
        pull = float(np.mean((unit_rows(moved) - unit_rows(marked.clean)) @ key.target))
        proxy = pull / spread if spread > 0 else math.nan
        per_alpha.append({"alpha": float(alpha), "cos_marked": cos, "proxy": proxy})
    twin_p = twin_p_value(key) if key.probe_texts else float(twin.p_value)
    return {"twin_p_value": twin_p, "score_spread": spread, "per_alpha": per_alpha}


def _budget_summary(per_alpha: list[dict[str, float]], min_cos: float) -> dict[str, Any]:
    """The largest alpha within the budget, and detectability per unit of distortion."""
    feasible = [a for a in per_alpha if a["cos_marked"] >= min_cos]
    best = max(feasible, key=lambda a: a["alpha"]) if feasible else None
    # Detectability bought per unit of distortion, averaged over the alphas that
    # distort at all: judges a target independently of where the budget falls.
    ratios = [
        a["proxy"] / (1.0 - a["cos_marked"])
        for a in per_alpha
        if 1.0 - a["cos_marked"] > 1e-5 and math.isfinite(a["proxy"])
    ]
    return {
        "max_alpha_in_budget": best["alpha"] if best else None,
        "cos_at_max_alpha": round(best["cos_marked"], 5) if best else None,
        "proxy_at_max_alpha": round(best["proxy"], 3) if best else None,
        "proxy_per_distortion": round(float(np.mean(ratios)), 2) if ratios else None,
    }


def _usability(candidate: dict[str, Any]) -> tuple[bool, float]:
    """Rank key: a target the clean model already links to the triggers is unusable."""
    usable = (
        candidate["twin_p_value"] >= DEFAULT_TWIN_LEVEL
        and candidate["proxy_per_distortion"] is not None
    )
    return (usable, candidate["proxy_per_distortion"] or -math.inf)


# ---------------------------------------------------------------------- end to end
@dataclasses.dataclass(frozen=True)
class _Setup:
    """What every point of one tuning run shares: the corpus, its clean embeddings, the draw."""

    corpus_name: str
    texts: list[str]
    clean: np.ndarray
    model_name: str
    clean_model: Embedder
    base: WatermarkKey
    marked_rows: np.ndarray

    @property
    def marked(self) -> MarkedRows:
        rows = np.flatnonzero(self.marked_rows)
        return MarkedRows([self.texts[i] for i in rows], self.clean[rows])

    def describe(self) -> dict[str, Any]:
        return {
            "corpus": self.corpus_name,
            "n_texts": len(self.texts),
            "model": self.model_name,
            "n_triggers": len(self.base.triggers),
            "band_words": len(self.base.band),
            "n_queries": self.base.audit_queries,
            "marked_fraction": float(self.marked_rows.mean()),
        }


def _prepare(
    *,
    corpus: str,
    limit: int | None,
    model: str,
    target_text: str,
    key_options: dict[str, Any],
    seed: int,
    progress: bool,
) -> _Setup:
    """Load and embed the corpus (cached), and draw the triggers, band and audit probes once."""
    from .cache import CorpusEmbedder, cached_embed
    from .context import model_name, resolve_model
    from .data import load_data

    data = load_data(corpus, limit=limit, seed=seed)
    texts = list(data.texts)
    victim = resolve_model(model)
    name = model_name(victim, model)
    clean = cached_embed(victim, texts, model_name=name, progress=progress).astype(np.float64)
    clean_model = CorpusEmbedder(texts, clean, victim, model_name=name)
    # strength 1 (the paper's write): the frontier fits the strength per alpha itself.
    base = WatermarkKey.generate(
        texts,
        clean_model,
        target_text=target_text,
        strength=1.0,
        seed=seed,
        twin_check=False,
        **key_options,
    )
    marked_rows = base.contains_trigger(texts)
    return _Setup(data.name, texts, clean, name, clean_model, base, marked_rows)


@dataclasses.dataclass(frozen=True)
class _Attacker:
    """The attacker's own model: its corpus embeddings (CSE needs them) and the model
    itself (a frozen-MLP copy answers through it); each None when nothing needs it."""

    embeddings: np.ndarray | None = None
    model: Embedder | None = None


def _attacker(
    attack: str, standard: str, texts: list[str], *, neural_judge: bool, progress: bool
) -> _Attacker:
    from .attacks import parse_attack
    from .cache import CorpusEmbedder, cached_embed
    from .context import model_name, resolve_model

    if parse_attack(attack)[0] != "cse" and not neural_judge:
        return _Attacker()
    model = resolve_model(standard)
    name = model_name(model, standard)
    matrix = cached_embed(model, texts, model_name=name, progress=progress).astype(np.float64)
    own = CorpusEmbedder(texts, matrix, model, model_name=name) if neural_judge else None
    return _Attacker(matrix, own)


def _service(key: WatermarkKey, clean_model: Embedder) -> Embedder:
    """The watermarked service itself: the perfect copy a faithful thief wants."""

    def serve(texts: list[str]) -> np.ndarray:
        return watermark(texts, clean_model(texts), key)

    return serve


def _copy_verdicts(
    made: Any,
    setup: _Setup,
    answers: np.ndarray,
    attack: str,
    attacker: _Attacker,
    level: float,
    seed: int,
) -> dict[str, Any]:
    """Attack the service's answers, train each judging copy on them, audit each copy."""
    from .attacks import apply_attack
    from .stealers import FrozenMLPStealer, RidgeStealer

    standard = attacker.embeddings
    attacked = apply_attack(attack, setup.texts, answers, standard=standard, seed=seed)
    copies: dict[str, Any] = {"ridge copy": RidgeStealer(seed=seed)}
    if attacker.model is not None:
        copies["frozen-MLP copy"] = FrozenMLPStealer(attacker.model, seed=seed, features=standard)
    return {
        name: made.verify(
            copy.fit(setup.texts, attacked.embeddings),
            target_mode=attacked.target_mode,
            level=level,
            seed=seed,
        )
        for name, copy in copies.items()
    }


def _worst(verdicts: dict[str, Any]) -> tuple[Any, str]:
    """The verdict with the largest p-value (an inconclusive NaN counts as the worst);
    on a tie the first judge named (the faithful copy) says it."""

    def badness(name: str) -> float:
        p = verdicts[name].p_value
        return math.inf if not math.isfinite(p) else p

    name = max(verdicts, key=badness)  # max keeps the first of equal values
    return verdicts[name], name


def _measure_point(
    key: WatermarkKey,
    target: int,
    *,
    setup: _Setup,
    attack: str,
    attacker: _Attacker,
    level: float,
    seed: int,
    erasure_fraction: float | None = None,
) -> TunePoint:
    """Watermark; audit the service itself; attack, train the copies, audit them: one point.

    ``erasure_fraction`` (None: no erasure judge) is the share of every answer's
    coordinates the erasing thief zeroes.
    """
    from .watermarks import ESpeW

    made = ESpeW(key)
    answers = np.asarray(made.apply(setup.texts, setup.clean), dtype=np.float64)
    service = _service(key, setup.clean_model)
    verdicts = {
        "faithful copy": made.verify(service, level=level, seed=seed),
        **_copy_verdicts(made, setup, answers, attack, attacker, level, seed),
    }
    if erasure_fraction is not None:
        from .erasure import ErasingSuspect

        erasing = ErasingSuspect(service, erasure_fraction, mode="zero", seed=seed)
        verdicts["erasing service"] = made.verify(erasing, level=level, seed=seed)
    worse, judged_by = _worst(verdicts)
    mlp, erased = verdicts.get("frozen-MLP copy"), verdicts.get("erasing service")
    rows = setup.marked_rows
    return TunePoint(
        target=target,
        alpha=float(key.alpha),
        strength=float(key.strength),
        cos_marked=float(np.mean(row_cosines(setup.clean[rows], answers[rows]))),
        p_value=worse.p_value,
        copied=bool(worse.p_value < level),
        delta_cos=worse.delta_cos,
        n_queries=sum(v.n_queries for v in verdicts.values()),
        p_value_service=verdicts["faithful copy"].p_value,
        p_value_ridge=verdicts["ridge copy"].p_value,
        judged_by=judged_by,
        p_value_mlp=math.nan if mlp is None else mlp.p_value,
        p_value_erased=math.nan if erased is None else erased.p_value,
    )


def _measure_frontier(
    keys: dict[int, WatermarkKey],
    alphas: Sequence[float],
    *,
    setup: _Setup,
    fit_strength: bool,
    min_cos: float,
    progress: bool,
    **measure: Any,
) -> list[TunePoint]:
    """Every chosen target x alpha, at the paper's full write and at the budget's strength."""
    plan: Any = [(t, float(a)) for t in keys for a in sorted(alphas)]
    if progress:
        from tqdm.auto import tqdm

        plan = tqdm(plan, desc="tune", unit="point")
    frontier = []
    for target, alpha in plan:
        key = keys[target].replace(alpha=alpha, strength=1.0)
        strengths = [1.0]
        if fit_strength:
            fitted = strength_for_budget(setup.marked, key, min_cos)
            strengths += [fitted] if fitted < 1.0 else []
        for strength in strengths:
            point_key = key.replace(strength=strength)
            frontier.append(_measure_point(point_key, target, setup=setup, **measure))
    return frontier


def _check_arguments(
    min_cos: float, alphas: Sequence[float], targets: Sequence[str], erasure_fraction: float
) -> None:
    if not 0.0 < erasure_fraction < 1.0:
        raise ValueError(f"erasure_fraction must be in (0, 1), got {erasure_fraction}")
    if not 0.0 < min_cos <= 1.0:
        raise ValueError(f"min_cos must be in (0, 1], got {min_cos}")
    if not alphas or any(not 0.0 < a < 1.0 for a in alphas):
        raise ValueError(f"alphas must be numbers in (0, 1), got {list(alphas)}")
    if any(not t.strip() for t in targets):
        raise ValueError("candidate target texts must be non-empty")


#: The share of coordinates the erasure judge zeroes in every answer by default: the
#: erasing thief of ``benchmarks/bench_erasure.py`` at the point where its own top-10
#: overlap is 0.78 (0.70 at 60%, 0.60 at 70%: ``tune(erasure_fraction=...)``).
ERASURE_JUDGE_FRACTION = 0.5

#: Qualities closer than this are the same quality to :func:`_choose`. Every point whose
#: strength was fitted sits at the budget to within ~1e-7, so ranking those by cosine
#: alone would pick by the fit's rounding; within this tolerance the stronger verdict wins.
QUALITY_TOLERANCE = 1e-4


def _choose(frontier: list[TunePoint], min_cos: float, level: float) -> TunePoint | None:
    """The highest-quality point within the budget whose worse judge convicts at ``level``.

    Points within :data:`QUALITY_TOLERANCE` of the best quality tie, and the tie goes
    to the smallest worst-judge p-value: the widest margin at the same cost.
    """
    meets = [p for p in frontier if p.cos_marked >= min_cos and p.p_value < level]
    if not meets:
        return None
    best_cos = max(p.cos_marked for p in meets)
    tied = [p for p in meets if p.cos_marked >= best_cos - QUALITY_TOLERANCE]
    return min(tied, key=lambda p: (p.p_value, -p.cos_marked))


def _write(result: TuneResult, out: str | Path) -> None:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "tune.json").write_text(json.dumps(result.to_dict(), indent=1), encoding="utf-8")
    (out / "frontier.md").write_text(result.markdown(), encoding="utf-8")


def tune(
    *,
    corpus: str = "rotten_tomatoes",
    limit: int | None = None,
    model: str = "minilm",
    standard: str = "paraphrase-minilm-l3",
    targets: Sequence[str] | None = None,
    alphas: Sequence[float] = (0.01, 0.02, 0.03, 0.05, 0.08, 0.1, 0.15, 0.2),
    min_cos: float = 0.995,
    level: float = 1e-10,
    attack: str = "cse:50",
    n_triggers: int = DEFAULT_N_TRIGGERS,
    freq_band: tuple[float, float] | None = None,
    max_band_words: int | None = 300,
    top_targets: int = 2,
    fit_strength: bool = True,
    neural_judge: bool = False,
    erasure_judge: bool = False,
    erasure_fraction: float = ERASURE_JUDGE_FRACTION,
    seed: int = 0,
    out: str | Path | None = None,
    progress: bool = True,
) -> TuneResult:
    """Pick alpha (and strength) and a target text for a model and corpus; report the frontier.

    Every alpha is measured with the paper's full write (strength 1) and, when
    ``fit_strength`` and the full write exceeds the quality budget, also with
    the largest strength that fits the budget (:func:`strength_for_budget`).
    Each point is judged by the faithful copy (the watermarked service
    itself) and by a ridge copy after ``attack`` and, with ``neural_judge``,
    by a frozen-MLP copy on the ``standard`` model after ``attack`` and, with
    ``erasure_judge``, by the service itself behind a thief that zeroes the
    smallest ``erasure_fraction`` of every answer's coordinates (half by
    default; :mod:`.erasure`; it can wipe a mark written into fewer of them,
    alpha < 0.5 at a budget's low strength, depending on the target); the
    worst p-value counts. A thief who erases more pays more in quality: judge
    0.6 or 0.7 to see whether your key survives one who will.

    >>> result = tune(corpus="rotten_tomatoes", min_cos=0.995, level=1e-10)  # doctest: +SKIP
    >>> print(result.markdown())                                            # doctest: +SKIP
    """
    from .stealers import RidgeStealer

    targets = list(targets or DEFAULT_TARGETS)
    _check_arguments(min_cos, alphas, targets, erasure_fraction)
    key_options = dict(
        n_triggers=n_triggers, freq_band=freq_band, alpha=float(alphas[0]),
        max_band_words=max_band_words,
    )  # fmt: skip
    setup = _prepare(corpus=corpus, limit=limit, model=model, target_text=targets[0],
                     key_options=key_options, seed=seed, progress=progress)  # fmt: skip
    keys = [key_for_target(setup.base, text, setup.clean_model) for text in targets]
    clean_copy = RidgeStealer(seed=seed).fit(setup.texts, setup.clean)
    judged = judge_targets(
        keys, victim=setup.clean_model, marked=setup.marked, alphas=alphas, min_cos=min_cos,
        seed=seed, clean_copy=clean_copy,
    )  # fmt: skip
    chosen = {c["index"]: keys[c["index"]] for c in judged[: max(1, top_targets)]}
    frontier = _measure_frontier(
        chosen, alphas, setup=setup, fit_strength=fit_strength, min_cos=min_cos,
        progress=progress, attack=attack, level=level, seed=seed,
        erasure_fraction=erasure_fraction if erasure_judge else None, attacker=_attacker(
            attack, standard, setup.texts, neural_judge=neural_judge, progress=progress
        ),
    )  # fmt: skip
    result = TuneResult(
        min_cos, level, attack, judged, frontier, _choose(frontier, min_cos, level),
        setup={
            **setup.describe(), "seed": seed, "neural_judge": neural_judge,
            "erasure_judge": erasure_judge, "erasure_fraction": erasure_fraction,
        },
    )  # fmt: skip
    if out is not None:
        _write(result, out)
    return result
