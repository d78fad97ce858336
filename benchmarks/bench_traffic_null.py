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
import hashlib
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_faithful_copy import corpus_lookups, victim_key
from bench_frontier_null import innocent_study, write_study
from bench_traffic_audit import split_corpus

from espew_integrations import WatermarkKey
from espew_integrations.core.records.traffic_sample import TrafficSample
from espew_lab.stealers import EncoderRidgeStealer, RidgeStealer


def traffic_key(seed: int, capacity: int, victim) -> tuple[WatermarkKey, list[str], list[str]]:
    """(the key with its audit drawn from the sampled traffic, the traffic, the sample)."""
    keygen_corpus, traffic = split_corpus(seed)
    key = victim_key(keygen_corpus, victim, seed)
    with tempfile.TemporaryDirectory() as work:
        # A fixed sampling salt per seed, so that the same command draws the same sample
        # (a server's salt is random; which texts a salt keeps never looks at the key).
        salt = hashlib.sha256(f"bench_traffic_null sample salt {seed}".encode()).hexdigest()
        (Path(work) / "traffic.jsonl.salt").write_text(salt + "\n")
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
    results = innocent_study(key, suspects, args.draws, args.verify_draws, draw_seed=20261128)
    in_sample = set(sampled)
    write_study(
        args,
        results,
        f"Traffic-audit null study: key on one half of Rotten Tomatoes (seed {args.seed}), "
        f"audit drawn from a {len(sampled):,}-text sample of the other half "
        f"({len(key.probe_texts):,} probes, {len(key.cover_texts):,} cover texts, "
        f"{np.mean([t in in_sample for t in key.probe_texts]):.0%} of probes from the sample); "
        f"{args.draws:,} fresh trigger draws per innocent.",
        "",
        f"Command: `python {' '.join(sys.argv)}`",
    )


if __name__ == "__main__":
    main()
