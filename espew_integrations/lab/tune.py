"""``espew tune``: the alpha and target text that meet a quality budget and still detect a copy.

The paper's alpha = 0.2 costs about 8% cosine on MiniLM's marked rows; a
provider wants the watermark to cost less than a stated budget (say
cos(clean, watermarked) >= 0.995 on marked rows) and still convict a copy
after a removal attack (p < 1e-10 after CSE K = 50). The tuner:

1. draws one set of triggers and band words for the corpus (seeded);
2. judges every candidate target text cheaply, without any stealer: for each
   alpha, its expected distortion (mean cos(clean, watermarked) over the rows
   it would mark), the clean model's innocent-twin p-value (a target close to
   some triggers would convict innocents), and a detectability proxy: the
   mean pull of marked rows toward the target divided by the spread of the
   band words' clean scores (what the rank test must rise above), and how
   well a copy trained on clean answers reproduces the target text (what a
   verification after a permutation attack relies on);
3. tests the best-judged targets end to end on every alpha: watermark the
   corpus, attack (CSE by default), train a ridge copy, verify it with the
   core's word-level test;
4. reports the frontier (cos vs p per alpha) and the choice: the highest
   quality point that meets the detection goal, or None when nothing does.

Candidate target texts are secret key material once chosen, so outputs name
them by index and fingerprint only.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["DEFAULT_TARGETS", "TunePoint", "TuneResult", "judge_targets", "tune"]

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


def fingerprint(text: str) -> str:
    """Short non-reversible id of a candidate target text (safe to print)."""
    return hashlib.sha256(b"espew-target\x00" + text.encode()).hexdigest()[:8]


@dataclasses.dataclass(frozen=True)
class TunePoint:
    """One (target, alpha, strength) measured end to end."""

    target: int
    alpha: float
    cos_marked: float
    p_value: float
    copied: bool
    delta_cos: float
    n_queries: int
    strength: float = 1.0

    @property
    def within_budget(self) -> bool:
        return math.isfinite(self.cos_marked)


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
        s = self.setup
        lines = [
            f"Tuning on {s['corpus']} ({s['n_texts']} texts), model {s['model']}, "
            f"{s['n_triggers']} triggers, band of {s['band_words']} words "
            f"({s['n_queries']} verification queries), attack {self.attack}.",
            f"Budget: cos(clean, watermarked) >= {self.min_cos} on marked rows; "
            f"goal: p < {self.level:g} after the attack.",
            "",
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
        lines += [
            "",
            "Frontier (measured end to end: watermark, attack, ridge copy, core verify):",
            "",
            "| target # | alpha | strength | cos(clean, wm) marked | in budget | p after attack | "
            "Δcos (%) | meets goal |",
            "|---:|---:|---:|---:|:---:|---:|---:|:---:|",
        ]
        for p in self.frontier:
            lines.append(
                f"| {p.target} | {p.alpha:g} | {p.strength:.3g} | {p.cos_marked:.4f} | "
                f"{'yes' if p.cos_marked >= self.min_cos else 'no'} | {p.p_value:.2g} | "
                f"{100 * p.delta_cos:.2f} | {'yes' if p.p_value < self.level else 'no'} |"
            )
        lines.append("")
        if self.choice is None:
            lines.append("No measured point meets both the budget and the goal.")
        else:
            c = self.choice
            lines.append(
                f"Choice: target #{c.target}, alpha = {c.alpha:g}, strength = {c.strength:.3g} "
                f"(cos {c.cos_marked:.4f}, "
                f"p = {c.p_value:.2g})."
            )
        return "\n".join(lines) + "\n"


def _mark_all(clean: np.ndarray, key: Any) -> np.ndarray:
    """ESpeW's equations applied to every row (all rows are marked rows here)."""
    from ..core.inject import select_positions

    mask = select_positions(clean, key)
    out = clean + key.strength * mask * (key.target[None, :] - clean)
    return out / np.linalg.norm(out, axis=1, keepdims=True)


def strength_for_budget(clean_marked: np.ndarray, key: Any, min_cos: float) -> float:
    """The largest strength whose mean cos(clean, watermarked) on marked rows is >= min_cos.

    Bisection on the cosine (it falls as the strength grows); 1.0 if the
    paper's full write already fits the budget.
    """

    def mean_cos(strength: float) -> float:
        marked = _mark_all(clean_marked, key.replace(strength=strength))
        unit = clean_marked / np.linalg.norm(clean_marked, axis=1, keepdims=True)
        return float(np.mean(np.einsum("ij,ij->i", unit, marked)))

    if mean_cos(1.0) >= min_cos:
        return 1.0
    low, high = 0.0, 1.0
    for _ in range(30):
        middle = (low + high) / 2
        low, high = (middle, high) if mean_cos(middle) >= min_cos else (low, middle)
    return max(low, 1e-6)


def _measure_point(
    key: Any,
    target: int,
    *,
    texts: list[str],
    clean: np.ndarray,
    marked_rows: np.ndarray,
    attack: str,
    std: np.ndarray | None,
    level: float,
    seed: int,
) -> TunePoint:
    """Watermark, attack, train a ridge copy, verify: one point of the frontier."""
    from .attacks import apply_attack, cse_suspicious
    from .stealers import RidgeStealer
    from .watermarks import ESpeW

    made = ESpeW(key)
    answers = np.asarray(made.apply(texts, clean), dtype=np.float64)
    suspicious = None
    if std is not None:
        suspicious, _ = cse_suspicious(answers, std, seed=seed)
    attacked = apply_attack(attack, texts, answers, standard=std, seed=seed, suspicious=suspicious)
    copy = RidgeStealer(seed=seed).fit(texts, attacked.embeddings)
    verdict = made.verify(copy, target_mode=attacked.target_mode, level=level, seed=seed)
    cos = float(np.mean(np.einsum("ij,ij->i", clean[marked_rows], answers[marked_rows])))
    return TunePoint(
        target=target,
        alpha=float(key.alpha),
        strength=float(key.strength),
        cos_marked=cos,
        p_value=verdict.p_value,
        copied=verdict.copied,
        delta_cos=verdict.delta_cos,
        n_queries=verdict.n_queries,
    )


def judge_targets(
    targets: Sequence[str],
    *,
    victim: Any,
    clean_marked: np.ndarray,
    base_key: Any,
    alphas: Sequence[float],
    min_cos: float,
    seed: int = 0,
    clean_copy: Any = None,
) -> list[dict[str, Any]]:
    """Judge candidate target texts without a watermarked stealer (module docstring, step 2).

    ``clean_marked`` holds the clean embeddings of the rows the triggers mark.
    ``clean_copy``, a copy trained on clean answers, measures how well a stolen
    copy reproduces each target text: verification after a permutation
    (``target="query"``) compares with the copy's own embedding of the target
    text, so a target the copy cannot reproduce (an out-of-domain sentence)
    loses that verdict. Returns one dict per candidate, best first.
    """
    from ..core.verify import verify

    judged = []
    vectors = np.asarray(victim(list(targets)), dtype=np.float64)
    copied = None if clean_copy is None else np.asarray(clean_copy(list(targets)))
    for index, (text, vector) in enumerate(zip(targets, vectors, strict=False)):
        target = vector / np.linalg.norm(vector)
        key = base_key.replace(target=target, target_text=text)
        twin = verify(victim, key, seed=seed, level=0.5)
        scores = np.array(twin.trigger_scores + twin.benign_scores)
        spread = float(scores.std()) if scores.size > 1 else float("nan")
        per_alpha = []
        for alpha in sorted(alphas):
            k = key.replace(alpha=float(alpha))
            marked = _mark_all(clean_marked, k)
            cos = float(np.mean(np.einsum("ij,ij->i", clean_marked, marked)))
            pull = float(np.mean(marked @ target - clean_marked @ target))
            proxy = pull / spread if spread > 0 else math.nan
            per_alpha.append((float(alpha), cos, proxy))
        feasible = [a for a in per_alpha if a[1] >= min_cos]
        best = max(feasible, key=lambda a: a[0]) if feasible else None
        # Detectability bought per unit of distortion, averaged over the alphas that
        # distort at all: judges a target independently of where the budget falls.
        ratios = [p / (1.0 - c) for _, c, p in per_alpha if 1.0 - c > 1e-5 and math.isfinite(p)]
        judged.append(
            {
                "index": index,
                "fingerprint": fingerprint(text),
                "twin_p_value": float(twin.p_value),
                "score_spread": spread,
                "per_alpha": [{"alpha": a, "cos_marked": c, "proxy": p} for a, c, p in per_alpha],
                "max_alpha_in_budget": best[0] if best else None,
                "cos_at_max_alpha": round(best[1], 5) if best else None,
                "proxy_at_max_alpha": round(best[2], 3) if best else None,
                "proxy_per_distortion": round(float(np.mean(ratios)), 2) if ratios else None,
                "copy_fidelity": None
                if copied is None
                else round(float(copied[index] @ target / np.linalg.norm(copied[index])), 3),
            }
        )

    # A target the clean model already links to the triggers is unusable.
    def rank(c: dict[str, Any]) -> tuple[bool, float]:
        usable = c["twin_p_value"] >= 1e-3 and c["proxy_per_distortion"] is not None
        return (usable, c["proxy_per_distortion"] or -math.inf)

    return sorted(judged, key=rank, reverse=True)


def tune(
    *,
    corpus: str = "rotten_tomatoes",
    limit: int | None = None,
    model: str = "minilm",
    standard: str = "paraphrase_minilm_l3",
    targets: Sequence[str] | None = None,
    alphas: Sequence[float] = (0.01, 0.02, 0.03, 0.05, 0.08, 0.1, 0.15, 0.2),
    min_cos: float = 0.995,
    level: float = 1e-10,
    attack: str = "cse:50",
    n_triggers: int = 20,
    freq_band: tuple[float, float] = (0.005, 0.01),
    max_band_words: int | None = 300,
    top_targets: int = 2,
    fit_strength: bool = True,
    seed: int = 0,
    out: str | Path | None = None,
    progress: bool = True,
) -> TuneResult:
    """Pick alpha (and strength) and a target text for a model and corpus; report the frontier.

    Every alpha is measured with the paper's full write (strength 1) and, when
    ``fit_strength`` and the full write exceeds the quality budget, also with
    the largest strength that fits the budget (:func:`strength_for_budget`):
    a weaker write over more coordinates is how isotropic models such as
    MiniLM meet cos >= 0.995 and still convict a copy after CSE.

    >>> result = tune(corpus="rotten_tomatoes", min_cos=0.995, level=1e-10)  # doctest: +SKIP
    >>> print(result.markdown())                                            # doctest: +SKIP
    """
    from ..core.key import WatermarkKey
    from .attacks import parse_attack
    from .cache import cached_embed
    from .data import load_data
    from .runner import model_name, resolve_model
    from .stealers import RidgeStealer

    if not 0.0 < min_cos <= 1.0:
        raise ValueError(f"min_cos must be in (0, 1], got {min_cos}")
    if not alphas or any(not 0.0 < a < 1.0 for a in alphas):
        raise ValueError(f"alphas must be numbers in (0, 1), got {list(alphas)}")
    targets = list(targets or DEFAULT_TARGETS)
    if any(not t.strip() for t in targets):
        raise ValueError("candidate target texts must be non-empty")
    data = load_data(corpus, limit=limit, seed=seed)
    texts = list(data.texts)
    victim = resolve_model(model)
    clean = cached_embed(victim, texts, model_name=model_name(victim, model), progress=progress)
    clean = clean.astype(np.float64)
    base = WatermarkKey.generate(
        texts,
        victim,
        target_text=targets[0],
        n_triggers=n_triggers,
        freq_band=freq_band,
        alpha=float(alphas[0]),
        seed=seed,
        max_band_words=max_band_words,
        twin_check=False,
    )
    marked_rows = base.contains_trigger(texts)
    clean_copy = RidgeStealer(seed=seed).fit(texts, clean)
    judged = judge_targets(
        targets,
        victim=victim,
        clean_marked=clean[marked_rows],
        base_key=base,
        alphas=alphas,
        min_cos=min_cos,
        seed=seed,
        clean_copy=clean_copy,
    )
    std = None
    if parse_attack(attack)[0] == "cse":
        std_model = resolve_model(standard)
        std = cached_embed(
            std_model, texts, model_name=model_name(std_model, standard), progress=progress
        ).astype(np.float64)
    chosen_targets = [c["index"] for c in judged[: max(1, top_targets)]]
    plan = [(t, a) for t in chosen_targets for a in sorted(alphas)]
    iterator: Any = plan
    if progress:
        from tqdm.auto import tqdm

        iterator = tqdm(plan, desc="tune", unit="point")
    vectors = np.asarray(victim([targets[t] for t in chosen_targets]), dtype=np.float64)
    frontier = []
    for t, alpha in iterator:
        vector = vectors[chosen_targets.index(t)]
        key = base.replace(
            target=vector / np.linalg.norm(vector), target_text=targets[t], alpha=float(alpha)
        )
        strengths = [1.0]
        if fit_strength:
            fitted = strength_for_budget(clean[marked_rows], key, min_cos)
            if fitted < 1.0:
                strengths.append(fitted)
        for strength in strengths:
            frontier.append(
                _measure_point(
                    key.replace(strength=strength),
                    t,
                    texts=texts,
                    clean=clean,
                    marked_rows=marked_rows,
                    attack=attack,
                    std=std,
                    level=level,
                    seed=seed,
                )
            )
    meets = [p for p in frontier if p.cos_marked >= min_cos and p.p_value < level]
    choice = max(meets, key=lambda p: (p.cos_marked, -p.p_value)) if meets else None
    result = TuneResult(
        min_cos=min_cos,
        level=level,
        attack=attack,
        candidates=judged,
        frontier=frontier,
        choice=choice,
        setup={
            "corpus": data.name,
            "n_texts": len(texts),
            "model": model_name(victim, model),
            "n_triggers": len(base.triggers),
            "band_words": len(base.band),
            "n_queries": len(base.band),
            "marked_fraction": float(marked_rows.mean()),
            "seed": seed,
        },
    )
    if out is not None:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "tune.json").write_text(json.dumps(result.to_dict(), indent=1), encoding="utf-8")
        (out / "frontier.md").write_text(result.markdown(), encoding="utf-8")
    return result
