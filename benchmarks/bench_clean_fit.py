"""The directed score with and without the clean fit, on saved answers of real copies.

Issue 9, frontier section 11. For each key seed the suspects of
``bench_frontier.build`` (the service, the end-to-end torch copy, the frozen-MLP
copy after CSE K=50, the ridge copy after CSE and the three innocents) answer
the key's stored probes once; the answers, the clean probe rows the key stores
and the mark directions are saved (``--cache``), so the grid of scores below is
computed from the same answers and a rerun with the cache skips the training.

Each cell is the exact rank test on one directed score alone (not the verdict,
which is three times the smallest of three p-values):

- ``plain``: the directed score without the clean fit (the score until this study);
- ``f<r>s<s>``: the answers less a ridge fit on the clean probe rows (ridge ``r``
  times the clean rows' mean variance), whitened with shrinkage ``s`` (the
  library's default is ``f1.0s1.0``: ``CLEAN_FIT_RIDGE`` and ``SHRINKAGE``).

    python benchmarks/bench_clean_fit.py --seeds 1 2 3 4 5 6 \\
        --out docs/results/frontier/residual
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_faithful_copy import corpus_lookups
from bench_frontier import build, parse_config

from espew_integrations.core.audit.directed import directed_scores, mark_directions
from espew_integrations.core.stats.ranktest import rank_sum_p_value

DEFAULT_CONFIG = "base-a075:n=20,band=0.005-0.01,alpha=0.75"
SUSPECTS = (
    "service itself",
    "torch encoder",
    "frozen-MLP + CSE K=50",
    "ridge + CSE K=50",
    "innocent twin",
    "clean ridge",
    "independent model",
)
META = ("owner", "is_trigger", "clean", "dirs")


def saved_answers(config: dict, seed: int, cache: Path, lookups, min_cosine: float) -> dict:
    """Every suspect's answers to the key's probes, with what scoring them needs."""
    path = cache / f"ans_{config['name']}_{seed}.npz"
    if path.exists():
        return dict(np.load(path))
    texts, victim, standard, std_matrix = lookups
    key, suspects, *_ = build(
        config, seed, texts, victim, standard, std_matrix.astype(float), min_cosine, {"ridge"}
    )
    probes = list(key.probe_texts)
    found = {
        "owner": np.asarray(key.probe_owner),
        "is_trigger": np.array([w in key.triggers for w in key.band]),
        "clean": np.asarray(key.probe_embeddings, dtype=np.float64),
        "dirs": mark_directions(key.probe_embeddings, key),
    }
    for name, suspect in suspects.items():
        found[name.replace(" ", "_")] = np.asarray(suspect(probes), dtype=np.float64)
    cache.mkdir(parents=True, exist_ok=True)
    np.savez(path, **found)
    return found


def grid_p_values(saved: dict, name: str, variants: list[tuple[float, float]]) -> list[float]:
    """``plain`` first, then each (ridge, shrinkage) variant's p-value."""
    owner, is_trigger = saved["owner"], saved["is_trigger"]
    counts = np.bincount(owner, minlength=len(is_trigger))

    def p_value(per_probe: np.ndarray) -> float:
        words = np.bincount(owner, weights=per_probe, minlength=len(is_trigger)) / counts
        return rank_sum_p_value(words, is_trigger)

    answers, dirs = saved[name.replace(" ", "_")], saved["dirs"]
    found = [p_value(directed_scores(answers, dirs))]
    for ridge, shrinkage in variants:
        found.append(
            p_value(
                directed_scores(
                    answers, dirs, saved["clean"], shrinkage=shrinkage, clean_fit_ridge=ridge
                )
            )
        )
    return found


def table(results: dict, labels: list[str], seeds: list[int]) -> str:
    lines = []
    for name, rows in results.items():
        logs = np.log10(np.array(rows))
        lines += [f"### {name}", "", "| key seed | " + " | ".join(labels) + " |"]
        lines.append("|---|" + "---:|" * len(labels))
        for seed, row in zip(seeds, rows, strict=True):
            lines.append(f"| {seed} | " + " | ".join(f"{p:.1e}" for p in row) + " |")
        lines.append("| largest | " + " | ".join(f"{10**v:.1e}" for v in logs.max(0)) + " |")
        lines.append("| smallest | " + " | ".join(f"{10**v:.1e}" for v in logs.min(0)) + " |")
        lines.append("| geo. mean | " + " | ".join(f"{10**v:.1e}" for v in logs.mean(0)) + " |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=DEFAULT_CONFIG)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5, 6])
    parser.add_argument("--ridges", default="0.1,0.3,1.0")
    parser.add_argument("--shrinkages", default="0.3,1.0,3.0")
    parser.add_argument("--min-cosine", type=float, default=0.995)
    parser.add_argument("--cache", type=Path, default=Path(".cache/clean-fit"))
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    started = time.perf_counter()
    config = parse_config(args.config)
    variants = [
        (float(r), float(s)) for r in args.ridges.split(",") for s in args.shrinkages.split(",")
    ]
    labels = ["plain"] + [f"f{r}s{s}" for r, s in variants]
    lookups = corpus_lookups()
    results: dict[str, list[list[float]]] = {name: [] for name in SUSPECTS}
    for seed in args.seeds:
        saved = saved_answers(config, seed, args.cache, lookups, args.min_cosine)
        for name in SUSPECTS:
            results[name].append(grid_p_values(saved, name, variants))
        print(f"seed {seed}: {time.perf_counter() - started:.0f} s", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    setup = {
        "config": args.config,
        "seeds": args.seeds,
        "min_cosine": args.min_cosine,
        "labels": labels,
        "seconds": round(time.perf_counter() - started),
    }
    (args.out / "clean-fit.json").write_text(
        json.dumps({"setup": setup, "p_values": results}, indent=1)
    )
    header = (
        f"The directed score alone, exact rank test; config {args.config}, budget "
        f"{args.min_cosine}; key seeds {args.seeds}. `plain`: no clean fit; `f<r>s<s>`: "
        "clean fit with ridge r, whitening shrinkage s (the default: f1.0s1.0).\n\n"
    )
    (args.out / "clean-fit.md").write_text(header + table(results, labels, args.seeds))
    print(table(results, labels, args.seeds))


if __name__ == "__main__":
    main()
