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

import json
from collections.abc import Sequence
from pathlib import Path

from espew_integrations.core.ground.defaults import DEFAULT_N_TRIGGERS

from .tune_judge import (
    judge_targets,
    key_for_target,
)
from .tune_measure import attacker_for, measure_frontier, prepare
from .tune_result import ERASURE_JUDGE_FRACTION, TunePoint, TuneResult

__all__ = ["DEFAULT_TARGETS", "QUALITY_TOLERANCE", "tune"]

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
    the largest strength that fits the budget (:func:`~.tune_judge.strength_for_budget`).
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
    setup = prepare(corpus=corpus, limit=limit, model=model, target_text=targets[0],
                     key_options=key_options, seed=seed, progress=progress)  # fmt: skip
    keys = [key_for_target(setup.base, text, setup.clean_model) for text in targets]
    clean_copy = RidgeStealer(seed=seed).fit(setup.texts, setup.clean)
    judged = judge_targets(
        keys, victim=setup.clean_model, marked=setup.marked, alphas=alphas, min_cos=min_cos,
        seed=seed, clean_copy=clean_copy,
    )  # fmt: skip
    chosen = {c["index"]: keys[c["index"]] for c in judged[: max(1, top_targets)]}
    frontier = measure_frontier(
        chosen, alphas, setup=setup, fit_strength=fit_strength, min_cos=min_cos,
        progress=progress, attack=attack, level=level, seed=seed,
        erasure_fraction=erasure_fraction if erasure_judge else None, attacker=attacker_for(
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
