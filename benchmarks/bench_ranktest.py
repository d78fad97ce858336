"""Tied p-values: the previous full-table DP against the current rank test, side by side.

2,000 scored words, 20 triggers, 30% of the scores tied (rounded to one
decimal, so they fall in groups), triggers shifted up by several amounts so
that the p-value ranges from ~1e-24 (a copy) to ~0.5 (an innocent suspect).
Each case is timed fresh (no cached distribution) as the median of a few
runs; the previous implementation rebuilds its whole table on every call and
is timed once per case (it takes seconds). Also: a 10,000-draw null study over
the same tied scores. Target (issue 10): <= 50 ms per p-value.

    python benchmarks/bench_ranktest.py [--words 2000] [--old-cases 2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from espew_integrations.core.stats import ranktest
from espew_integrations.core.stats.ranktest import rank_sum_p_value
from espew_lab.null_study import null_p_values

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
# The implementation before issue 10 (the whole subset-sum table, rebuilt per call):
# one copy, in the test module, where it is itself checked against full enumeration.
from tests.unit.test_ranktest import full_table_p as previous_p_value


def current_p_value(scores: np.ndarray, is_trigger: np.ndarray) -> float:
    ranktest._spectral_tails.cache_clear()  # a fresh call, as verify() makes it
    return rank_sum_p_value(scores, is_trigger)


def case(words: int, shift: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    scores = rng.normal(size=words)
    tied = rng.choice(words, int(0.3 * words), replace=False)
    scores[tied] = np.round(scores[tied], 1)
    mask = np.zeros(words, bool)
    mask[rng.choice(words, 20, replace=False)] = True
    scores[mask] += shift
    return scores, mask


def timed(fn, *args) -> tuple[float, float]:
    start = time.perf_counter()
    value = fn(*args)
    return time.perf_counter() - start, value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--words", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--old-cases", type=int, default=2, help="cases also timed on the old DP")
    args = parser.parse_args()
    print(f"{args.words} words, 20 triggers, 30% of scores tied; median of {args.rounds} runs")
    print(
        f"{'shift':>5} {'p-value':>10} {'new ms':>8} {'old ms':>9} {'speed-up':>9} {'rel diff':>9}"
    )
    for index, shift in enumerate((3.0, 1.0, 0.6, 0.3, 0.0, -0.5)):
        scores, mask = case(args.words, shift, seed=index)
        runs = [timed(current_p_value, scores, mask) for _ in range(args.rounds)]
        new_ms = statistics.median(t for t, _ in runs) * 1000
        p = runs[0][1]
        old = "-"
        ratio = "-"
        diff = "-"
        if index < args.old_cases:
            old_s, old_p = timed(previous_p_value, scores, mask)
            old, ratio = f"{old_s * 1000:.0f}", f"{old_s * 1000 / new_ms:.0f}x"
            diff = f"{abs(p - old_p) / old_p:.1e}"
        print(f"{shift:>5} {p:>10.2e} {new_ms:>8.1f} {old:>9} {ratio:>9} {diff:>9}")
    scores, _ = case(args.words, 0.0, seed=99)
    ranktest._spectral_tails.cache_clear()
    seconds, pvals = timed(null_p_values, scores, 20, 10_000, np.random.default_rng(0))
    print(
        f"null study, tied scores: 10,000 draws in {seconds * 1000:.0f} ms "
        f"(median p {np.median(pvals):.2f}, smallest {pvals.min():.1e}); "
        f"the old path ran one full table per draw"
    )


if __name__ == "__main__":
    main()
