"""The cherry-picking auditor of issue 54, and what stops it.

An auditor asks an innocent (here the clean offline MiniLM itself) ``--asked``
Rotten Tomatoes texts the keygen subset does not hold, keeps the texts whose answers
lean its way (with a trigger: nearest the target; without: farthest), and draws a
round-2 audit from them (``key.with_audit(picked, ..., audit_round=2)``). Printed: the
twin check's answer on the picked corpus, the verdict with the twin check turned off,
the honest round-2 verdict on the first ``--pool`` texts drawn from a pool a traffic
sample committed (``with_committed_audit``), and what ``check_evidence`` says of each.
The key is ``tests/support.real_key()`` (a word key on 3,000 texts). Run (minutes):

    python benchmarks/bench_cherry_pick.py --asked 3000 --pool 1500
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from espew_integrations import verify
from espew_integrations.core.ground.errors import KeyGenerationError
from espew_integrations.core.records.traffic_commitments import commitments_path
from espew_integrations.core.records.traffic_sample import (
    TrafficSample,
    with_committed_audit,
)
from espew_integrations.evidence import check_evidence
from espew_integrations.offline.corpora import rotten_tomatoes
from espew_integrations.offline.embedders import minilm
from tests.support import RT_SUBSET_SIZE, real_key


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--asked", type=int, default=3000)
    parser.add_argument("--pool", type=int, default=1500)
    args = parser.parse_args()
    key, model = real_key(), minilm()
    corpus = rotten_tomatoes()
    keygen = set(corpus.subset(RT_SUBSET_SIZE, seed=0).texts)
    texts = [t for t in corpus.texts if t not in keygen][: args.asked]
    answers = np.asarray(model(texts), dtype=np.float64)
    lean = answers @ key.target / np.linalg.norm(answers, axis=1)
    triggered = key.contains_trigger(texts)
    keep = np.where(triggered, lean >= np.median(lean[triggered]), lean <= np.median(lean))
    picked = [t for t, k in zip(texts, keep, strict=True) if k]
    print(f"asked {len(texts)}, picked {len(picked)}")
    try:
        key.with_audit(picked, model, audit_round=2)
        print("twin check: passed")
    except KeyGenerationError as exc:
        print(f"twin check: refused ({str(exc)[:90]}...)")
    work = Path(tempfile.mkdtemp())
    framed = key.with_audit(picked, model, audit_round=2, twin_level=1e-300)
    report = verify(model, framed, transcript=work / "picked")
    print(f"picked round 2 (twin check off): {report.status}, p = {report.p_value:.3g}")
    print("  evidence check:", check_evidence(work / "picked", framed).reason[:160])
    sample = TrafficSample(work / "traffic.jsonl")
    sample.record(texts[: args.pool], account="innocent")
    sample.flush()
    honest = with_committed_audit(key, sample.path, "innocent", model, audit_round=2)
    fair = verify(model, honest, transcript=work / "honest")
    print(f"honest committed round 2: {fair.status}, p = {fair.p_value:.3g}")
    check = check_evidence(work / "honest", honest, pool_log=commitments_path(sample.path))
    print(f"  evidence check: holds={check.holds}")


if __name__ == "__main__":
    main()
