"""The directed score from every audit text that holds a band word, against probes only.

Side by side on the same answers (issue 9, frontier section 20): for each key seed,
the suspects of ``bench_frontier.build`` (the default key, 0.995 budget) answer the
audit once, and the directed word scores are computed two ways:

* **probes only**: each word's mean directed score over its one-band-word probes,
  the other audit texts joining the fit only (verify before ``core.word_evidence``);
* **every text**: verify's own scoring today (``lab.null_study.audit_scores``), which
  also scores the cover texts that hold band words, explaining away shared ones.

Each is also combined with the raw and adjusted p-values as verify does (3 x min).
Two audits per key: the default (about 4,300 queries) and the same key re-drawn
with ``with_audit(..., probes_per_word=9)`` (about 1,900 queries), to see how far
the 2,000-query goal is.

    nice .venv/bin/python benchmarks/bench_word_evidence.py --seeds 1 2 3 4 5 6 \\
        --out docs/results/frontier/word-evidence
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

from espew_integrations.core.audit.directed import directed_scores
from espew_integrations.core.audit.plan import plan_audit
from espew_integrations.core.audit.scores import mean_per_word
from espew_integrations.core.stats.ranktest import rank_sum_p_value
from espew_lab.null_study import audit_scores

CONFIG = "default:n=35,band=0.01-0.015,alpha=0.75"
SUSPECTS = ("frozen-MLP + CSE K=50", "innocent twin", "clean ridge", "independent model")
SKIP = {"ridge", "ridge + CSE K=50", "torch encoder"}


def probes_only_directed(key, answers: np.ndarray, cover: np.ndarray) -> np.ndarray:
    """The directed word scores as verify computed them before shared texts were scored."""
    plan = plan_audit(key, "sentences", None)
    with_cover = plan.cover_rows is not None
    per_probe = directed_scores(
        answers,
        plan.directions,
        plan.clean_rows,
        unscored_answers=cover if with_cover else None,
        unscored_clean=plan.cover_rows if with_cover else None,
    )
    return mean_per_word(per_probe, plan.owner, len(key.band))


def score(key, suspect) -> dict:
    """Both ways on one set of answers: directed and combined p-values."""
    answers = np.asarray(suspect(list(key.probe_texts)), dtype=np.float64)
    cover = np.asarray(suspect(list(key.cover_texts)), dtype=np.float64)
    is_trigger = np.array([w in key.triggers for w in key.band])
    now = audit_scores(answers, key, cover)
    p = {s: rank_sum_p_value(now[s], is_trigger) for s in ("raw", "adjusted", "directed")}
    before = rank_sum_p_value(probes_only_directed(key, answers, cover), is_trigger)
    return {
        "queries": len(key.probe_texts) + len(key.cover_texts),
        "probes": len(key.probe_texts),
        "directed_probes_only": before,
        "directed_every_text": p["directed"],
        "combined_probes_only": min(1.0, 3 * min(p["raw"], p["adjusted"], before)),
        "combined_every_text": min(1.0, 3 * min(p.values())),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--small-ppw", type=int, default=9)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    texts, victim, standard, std_matrix = corpus_lookups()
    config = parse_config(CONFIG)
    rows = []
    for seed in args.seeds:
        started = time.perf_counter()
        key, suspects, *_ = build(config, seed, texts, victim, standard, std_matrix, 0.995, SKIP)
        small = key.with_audit(texts, victim, probes_per_word=args.small_ppw)
        for audit, audit_key in (("default", key), (f"ppw={args.small_ppw}", small)):
            for name in SUSPECTS:
                row = {"seed": seed, "audit": audit, "suspect": name}
                row.update(score(audit_key, suspects[name]))
                rows.append(row)
                print(
                    f"  {audit:8s} {name:22s} {row['queries']} queries: directed "
                    f"{row['directed_probes_only']:.1e} -> {row['directed_every_text']:.1e}, "
                    f"combined {row['combined_probes_only']:.1e} -> "
                    f"{row['combined_every_text']:.1e}",
                    flush=True,
                )
        print(f"seed {seed}: {time.perf_counter() - started:.0f} s", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(
        json.dumps({"args": vars(args) | {"out": str(args.out)}, "rows": rows}, indent=1)
    )
    (args.out / "table.md").write_text(table(rows, args.seeds))
    print(table(rows, args.seeds))


def table(rows: list[dict], seeds: list[int]) -> str:
    lines = [
        f"Directed score: probes only -> every text that holds a band word (keys {seeds}).",
        "Combined = 3 x min(raw, adjusted, directed), the verdict's p-value.",
        "",
        "| audit (queries) | suspect | directed, probes only | directed, every text "
        "| verdict, probes only | verdict, every text |",
        "|---|---|---|---|---|---|",
    ]
    for audit in dict.fromkeys(r["audit"] for r in rows):
        for name in SUSPECTS:
            cell = [r for r in rows if r["audit"] == audit and r["suspect"] == name]
            queries = "/".join(str(r["queries"]) for r in cell)

            def fmt(field, cell=cell):
                return ", ".join(f"{r[field]:.1e}" for r in cell)

            lines.append(
                f"| {audit} ({queries}) | {name} | {fmt('directed_probes_only')} | "
                f"{fmt('directed_every_text')} | {fmt('combined_probes_only')} | "
                f"{fmt('combined_every_text')} |"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
