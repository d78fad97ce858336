"""What ``espew tune`` reports: one measured point, and the whole run (frontier and choice).

Part of :mod:`.tune` (its names are imported from here); the markdown here is the
``frontier.md`` a run writes.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

__all__ = ["ERASURE_JUDGE_FRACTION", "TunePoint", "TuneResult"]

#: The share of coordinates the erasure judge zeroes in every answer by default: the
#: erasing thief of ``benchmarks/bench_erasure.py`` at the point where its own top-10
#: overlap is 0.78 (0.70 at 60%, 0.60 at 70%: ``tune(erasure_fraction=...)``).
ERASURE_JUDGE_FRACTION = 0.5


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
