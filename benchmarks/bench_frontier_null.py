"""Calibration of the default verdict for a frontier configuration (issue 9).

More triggers or a wider band change the rank test's (N, n); the test is exact
by construction for any of them, and this checks it end to end on real
innocent suspects, as ``bench_null_study.py`` does for the default key: one real
key from ``WatermarkKey.generate`` with the given configuration, then
``--draws`` fresh salts (fresh trigger draws via ``draw_triggers``) per
innocent suspect; each suspect answers the key's probes once and its raw,
adjusted and directed scores come from verify's own functions (via
``lab.null_study.audit_scores``); each draw's p-values come from ``subset_p_values`` (the
vectorised ``rank_sum_p_value``) and are combined as verify does. The first
``--verify-draws`` draws per suspect also go through ``verify()`` itself and
must agree exactly.

    nice .venv/bin/python benchmarks/bench_frontier_null.py --n 50 --band 0.005-0.02 \\
        --out docs/results/frontier/null-n50
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_faithful_copy import TARGET_TEXT, corpus_lookups
from bench_null_study import (
    STATISTICS,
    check_against_verify,
    counts_row,
    fast_p_values,
)

from espew_integrations import WatermarkKey
from espew_integrations.core.stats.ranktest import subset_p_values
from espew_lab.null_study import audit_scores, fresh_draws
from espew_lab.stealers import RidgeStealer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20)
    parser.add_argument("--band", default="0.005-0.01")
    parser.add_argument("--alpha", type=float, default=0.2)
    parser.add_argument("--ppw", type=int, default=None, help="probes per band word")
    parser.add_argument("--min-cosine", type=float, default=0.995)
    parser.add_argument("--draws", type=int, default=10_000)
    parser.add_argument("--verify-draws", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    low, high = (float(x) for x in args.band.split("-"))
    texts, victim, standard, _ = corpus_lookups()
    vm, clean = victim.model, victim.matrix
    key = WatermarkKey.generate(
        texts,
        victim,
        target_text=TARGET_TEXT,
        seed=args.seed,
        n_triggers=args.n,
        freq_band=(low, high),
        alpha=args.alpha,
        probes_per_word=args.ppw,
        window=vm.max_tokens,
        min_cosine=args.min_cosine,
        marking="words",  # the paper's design, as measured
    )
    rng = np.random.default_rng(args.seed)
    train = np.sort(rng.permutation(len(texts))[:-500])
    suspects = {
        "innocent twin": victim,
        "clean ridge": RidgeStealer(seed=args.seed).fit(
            [texts[i] for i in train], clean[train].astype(np.float64)
        ),
        "independent model": standard,
    }
    results = innocent_study(key, suspects, args.draws, args.verify_draws, draw_seed=20261126)
    write_study(
        args,
        results,
        f"Null study, n={args.n} triggers, band {args.band} ({len(key.band)} words, "
        f"{len(key.probe_texts)} probes, ppw={args.ppw}), alpha={args.alpha}, "
        f"min_cosine={args.min_cosine}; "
        f"{args.draws} fresh trigger draws per innocent suspect.",
    )


def innocent_study(key, suspects: dict, n_draws: int, n_verify: int, *, draw_seed: int) -> dict:
    """Each innocent answers ``key``'s audit once; ``n_draws`` fresh trigger draws are
    scored as verify does, the first ``n_verify`` also through ``verify()``; results per
    suspect and pooled under ``"all"``."""
    results, pooled = {}, {s: [] for s in STATISTICS}
    for i, (name, suspect) in enumerate(suspects.items()):
        started = time.perf_counter()
        answers = np.asarray(suspect(list(key.probe_texts)), float)
        cover = np.asarray(suspect(list(key.cover_texts)), float) if key.cover_texts else None
        scores = audit_scores(answers, key, cover)
        salts, draws = fresh_draws(key, n_draws, np.random.default_rng([draw_seed, i]))
        fast = fast_p_values(scores, draws, subset_p_values)
        check = check_against_verify(suspect, key, salts, draws, fast, n_verify)
        results[name] = {
            "reference_slope": round(float(scores["slope"]), 4),
            "rows": {s: counts_row(fast[s]) for s in fast},
            "smallest_p": {s: float(fast[s].min()) for s in fast},
            "verify_check": check,
            "seconds": round(time.perf_counter() - started, 1),
        }
        for s in fast:
            pooled[s].append(fast[s])
        print(
            f"{name}: slope {scores['slope']:.3f}, combined FP at 1e-3: "
            f"{results[name]['rows']['combined']['1e-03']['false_positives']}, at 1e-6: "
            f"{results[name]['rows']['combined']['1e-06']['false_positives']}; verify check "
            f"{check['mismatches']} mismatches of {check['draws']}",
            flush=True,
        )
    results["all"] = {"rows": {s: counts_row(np.concatenate(v)) for s, v in pooled.items() if v}}
    return results


def write_study(args, results: dict, *preamble: str) -> None:
    """``results.json`` and ``table.md`` (the preamble lines, then the counts) in ``args.out``."""
    lines = [
        *preamble,
        "",
        "| suspect | statistic | FP at 1e-3 (expected) | ratio | FP at 1e-6 |",
        "|---|---|---:|---:|---:|",
    ]
    for name, r in results.items():
        for s in (s for s in STATISTICS if s in r["rows"]):
            a, b = r["rows"][s]["1e-03"], r["rows"][s]["1e-06"]
            lines.append(
                f"| {name} | {s} | {a['false_positives']} ({a['expected']:.0f}) | "
                f"{a['ratio']:.2f} | {b['false_positives']} |"
            )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(
        json.dumps({"args": {**vars(args), "out": str(args.out)}, "results": results}, indent=1)
    )
    (args.out / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
