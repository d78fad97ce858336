"""Calibration of a traffic audit: innocents audited with texts sampled from their traffic.

A traffic audit (``espew key reaudit --corpus SAMPLE.jsonl``) draws its probes
from what a suspect sent, as :class:`TrafficSample` kept it, instead of from the
keygen corpus. The rank test stays exact as long as the audit's texts are chosen
without looking at the triggers; this checks it end to end. The provider's key
is generated on one half of Rotten Tomatoes; each innocent's traffic is the other
half, offered to a ``TrafficSample`` (keyed bottom-k, as ``espew serve
--traffic-sample`` keeps it); the key's audit is redrawn from that sample with
``with_audit``; then ``--draws`` fresh trigger draws per innocent are scored
with the same functions as verify (``lab.null_study.audit_scores``), and the
first ``--verify-draws`` also go through ``verify()`` and must agree.

The audit is drawn as round 1: a later round's verify multiplies its p-value by
the round number, which can only lower the false-positive rate measured here.

    nice .venv/bin/python benchmarks/bench_traffic_null.py --draws 10000 \\
        --out docs/results/traffic-null
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_faithful_copy import TARGET_TEXT, corpus_lookups
from bench_null_study import STATISTICS, check_against_verify, counts_row, fast_p_values
from bench_traffic_audit import split_corpus

from espew_integrations import WatermarkKey
from espew_integrations.core.ranktest import subset_p_values
from espew_integrations.core.traffic_sample import TrafficSample
from espew_integrations.lab.null_study import audit_scores, fresh_draws
from espew_integrations.lab.stealers import EncoderRidgeStealer, RidgeStealer


def traffic_key(seed: int, capacity: int, victim) -> tuple[WatermarkKey, list[str], list[str]]:
    """(the key with its audit drawn from the sampled traffic, the traffic, the sample)."""
    keygen_corpus, traffic = split_corpus(seed)
    key = WatermarkKey.generate(
        keygen_corpus, victim, target_text=TARGET_TEXT, seed=seed, window=victim.model.max_tokens
    )
    with tempfile.TemporaryDirectory() as work:
        sample = TrafficSample(Path(work) / "traffic.jsonl", capacity=capacity)
        sample.record(traffic)
        sampled = sample.texts()
    return key.with_audit(sampled, victim, audit_round=1), traffic, sampled


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--sample", type=int, default=4000, help="texts the sample keeps")
    parser.add_argument("--draws", type=int, default=10_000)
    parser.add_argument("--verify-draws", type=int, default=50)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    _, victim, standard, _ = corpus_lookups()
    key, traffic, sampled = traffic_key(args.seed, args.sample, victim)
    clean = np.asarray(victim(traffic), dtype=np.float64)
    suspects = {
        "innocent twin": victim,
        "clean ridge head on L3": EncoderRidgeStealer(standard).fit(traffic, clean),
        "clean bag-of-words ridge": RidgeStealer(seed=args.seed).fit(traffic, clean),
        "independent model": standard,
    }
    results, pooled = {}, {s: [] for s in STATISTICS}
    for i, (name, suspect) in enumerate(suspects.items()):
        started = time.perf_counter()
        answers = np.asarray(suspect(list(key.probe_texts)), float)
        cover = np.asarray(suspect(list(key.cover_texts)), float) if key.cover_texts else None
        scores = audit_scores(answers, key, cover)
        salts, draws = fresh_draws(key, args.draws, np.random.default_rng([20261128, i]))
        fast = fast_p_values(scores, draws, subset_p_values)
        check = check_against_verify(suspect, key, salts, draws, fast, args.verify_draws)
        results[name] = {
            "rows": {s: counts_row(fast[s]) for s in fast},
            "smallest_p": {s: float(fast[s].min()) for s in fast},
            "verify_check": check,
            "seconds": round(time.perf_counter() - started, 1),
        }
        for s in fast:
            pooled[s].append(fast[s])
        combined = results[name]["rows"]["combined"]
        print(
            f"{name}: combined FP at 1e-3: {combined['1e-03']['false_positives']}, at 1e-6: "
            f"{combined['1e-06']['false_positives']}; verify check {check['mismatches']} "
            f"mismatches of {check['draws']}",
            flush=True,
        )
    results["all"] = {"rows": {s: counts_row(np.concatenate(v)) for s, v in pooled.items() if v}}
    in_sample = set(sampled)
    lines = [
        f"Traffic-audit null study: key on one half of Rotten Tomatoes (seed {args.seed}), "
        f"audit drawn from a {len(sampled):,}-text sample of the other half "
        f"({len(key.probe_texts):,} probes, {len(key.cover_texts):,} cover texts, "
        f"{np.mean([t in in_sample for t in key.probe_texts]):.0%} of probes from the sample); "
        f"{args.draws:,} fresh trigger draws per innocent.",
        "",
        f"Command: `python {' '.join(sys.argv)}`",
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
