"""Null study of trace() (issue 12): how often is an innocent account named?

Fresh rings (new master, new shared salt) over a 200-word band with 20 shared
and 20-word tenant layers, 200 accounts each, and the real statistic
(:func:`espew_integrations.core.audit.tenant_layers.tenant_p_values`) on synthetic scores;
see :mod:`espew_lab.tenant_null_study`. Two suspects: an innocent one
(every named account is a false accusation) and a copy of account 0 (every
other named account is). Prints the family-wise false-accusation rate at
1e-3 and 1e-6 next to the nominal level. Run:

    nice .venv/bin/python benchmarks/bench_trace_null.py --trials 10000 --copy-trials 1000 \
        --out docs/results/tenants/null.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from espew_lab.tenant_null_study import tenant_null_study


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10_000)
    parser.add_argument("--copy-trials", type=int, default=1_000)
    parser.add_argument("--tenants", type=int, default=200)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    rows = []
    for suspect, trials, seed in (
        ("innocent", args.trials, 101),
        ("copy_of_one", args.copy_trials, 202),
    ):
        started = time.perf_counter()
        study = tenant_null_study(trials, suspect=suspect, n_tenants=args.tenants, seed=seed)
        seconds = time.perf_counter() - started
        for level in (1e-3, 1e-6):
            rows.append(
                {
                    "suspect": suspect,
                    "trials": trials,
                    "tenants": args.tenants,
                    "level": level,
                    "false_accusations": study.false_accusations[level],
                    "observed_rate": study.rate(level),
                    "ratio_to_nominal": study.rate(level) / level,
                    "guilty_named": study.guilty_named[level],
                    "seconds": round(seconds, 1),
                }
            )
            print(
                f"{suspect:12s} trials={trials} tenants={args.tenants} level={level:g}: "
                f"false accusations {study.false_accusations[level]} "
                f"(rate {study.rate(level):.2e}, nominal {level:g}, "
                f"ratio {study.rate(level) / level:.2f}); guilty named "
                f"{study.guilty_named[level]}/{trials}  [{seconds:.0f} s]",
                flush=True,
            )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
