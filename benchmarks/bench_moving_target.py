"""A mark with no fixed target against the direction thieves (issue 53, a prototype).

``espew_lab.moving_target.MovingTarget`` keeps the field's keyed gain and ESpeW's
per-row displacement, and lets each row's target depend on the row (``map``: a keyed
linear map of the row; ``regions``: 16 keyed targets, a row taking the one its keyed
direction favours), beside ``fixed``, one keyed target, the field's shape. Each is
fitted to the field's quality budget (mean cos 0.9987 to clean). It has no verifier,
so this measures the mark itself rather than an audit's p-value:

- the thief (``thieves.thief_for``, as in ``bench_informed_thieves.py``) fits a ridge
  head on L3 to the marked answers of its ``--n-steal`` texts; the same head fitted to
  the clean answers is the innocent it is compared with;
- on the 500 held-out texts, the copy's *learned mark* is its output less the clean
  head's, and ``carried`` is its correlation with the true mark (answer less clean);
- a thief projects directions out of its copy; ``mark kept`` is the share of the
  untouched copy's mark-aligned signal (the sum over held-out texts of the learned
  mark's dot product with the true mark) that survives, ``value kept`` the share of
  its stolen value (``thieves.stolen_value``).

The thieves are those of ``bench_informed_thieves.py`` (regime-slope and residual PCA,
top 1 and top 8), and an oracle: the top principal axes of the true mark on the
thief's texts, the best any estimate of k directions can do.

    python benchmarks/bench_moving_target.py --keys 1 --n-steal 6000
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_faithful_copy import corpus_lookups, victim_key
from thieves import stolen_value, thief_for

from espew_integrations.core.ground.defaults import DEFAULT_FIELD_MIN_COSINE
from espew_lab.direction_thieves import (
    ProjectedCopy,
    project_out,
    regime_slope_directions,
    residual_directions,
)
from espew_lab.moving_target import DESIGNS, MovingTarget, fit_strength
from espew_lab.stealers import EncoderRidgeStealer


def _axes(rows: np.ndarray, k: int) -> np.ndarray:
    centred = rows - rows.mean(axis=0)
    return np.linalg.svd(centred, full_matrices=False)[2][:k]


def run(seed: int, design: str, texts, victim, standard, n_steal: int) -> list[str]:
    key = victim_key(texts, victim, seed, marking="field")  # only for the thief's split
    thief = thief_for(seed, texts, key, victim, standard, n_steal=n_steal)
    reference = victim(list(key.probe_texts) + list(key.cover_texts)).astype(np.float64)
    mark = MovingTarget(design, reference, seed=seed)
    mark.strength = fit_strength(mark, reference, DEFAULT_FIELD_MIN_COSINE)
    answers = mark(thief.clean_steal)
    copy = EncoderRidgeStealer(standard, features=thief.own_steal).fit(thief.steal, answers)
    clean_copy = EncoderRidgeStealer(standard, features=thief.own_steal).fit(
        thief.steal, thief.clean_steal
    )
    predictions = copy(thief.steal)
    true_mark = mark(thief.clean_held) - thief.clean_held / np.linalg.norm(
        thief.clean_held, axis=1, keepdims=True
    )
    learned = copy(thief.held) - clean_copy(thief.held)
    signal = float(np.sum(learned * true_mark))
    carried = float(np.corrcoef(learned.ravel(), true_mark.ravel())[0, 1])
    untouched = stolen_value(copy, thief)["stolen"]
    stolen_mark = answers - thief.clean_steal / np.linalg.norm(
        thief.clean_steal, axis=1, keepdims=True
    )
    slopes = regime_slope_directions(answers, predictions, n_directions=8)
    residuals = residual_directions(answers, predictions, n_directions=8)
    oracle = _axes(stolen_mark, 8)
    thieves = {
        "oracle: true mark's top 1": oracle[:1],
        "oracle: true mark's top 8": oracle,
        "regime-slope 1": slopes[:1],
        "regime-slope 8": slopes,
        "residual PCA 1": residuals[:1],
        "residual PCA 8": residuals,
    }
    energy = np.linalg.svd(stolen_mark - stolen_mark.mean(0), compute_uv=False) ** 2
    lines = [
        f"| {seed} | {design} | untouched | strength {mark.strength:.3f}; mark energy in top 1 "
        f"/ top 8 axes {energy[0] / energy.sum():.2f} / {energy[:8].sum() / energy.sum():.2f} "
        f"| carried corr {carried:.3f} | {untouched:+.4f} |"
    ]
    for name, directions in thieves.items():
        kept_mark = float(np.sum(project_out(learned, directions) * true_mark)) / signal
        value = stolen_value(ProjectedCopy(copy, directions), thief)["stolen"] / untouched
        lines.append(f"| {seed} | {design} | {name} | | mark kept {kept_mark:.2f} | {value:.2f} |")
    for line in lines:
        print(line, flush=True)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, default=1, help="run keys (seeds) 1..N")
    parser.add_argument("--n-steal", type=int, default=6000)
    parser.add_argument("--designs", nargs="+", default=list(DESIGNS), choices=DESIGNS)
    args = parser.parse_args()
    started = time.time()
    texts, victim, standard, _ = corpus_lookups()
    print("| key | design | thief | mark | carried / mark kept | stolen value (kept) |")
    print("|---|---|---|---|---|---|")
    for seed in range(1, args.keys + 1):
        for design in args.designs:
            run(seed, design, texts, victim, standard, args.n_steal)
    print(f"done in {time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
