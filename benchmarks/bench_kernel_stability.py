"""The same p-value on every BLAS kernel: a search over fresh keys (issue 57).

OpenBLAS picks its kernel by the CPU, and each kernel rounds a matrix product's
last bits its own way. This study asks whether that can move a verdict: for each
of ``--keys`` fresh keys of each design (``WatermarkKey.generate`` with seeds
0..N-1, on the verdict snapshot's synthetic bag-of-words service,
``tests/integration/test_verdict_snapshot.py``), ``verify`` is run against two
innocents, in one child process per kernel (``OPENBLAS_CORETYPE``; threadpoolctl
proves which kernel ran):

- the clean model itself, the provider's own (its reference-adjusted residual is
  pure rounding, the case that used to jump from 0.04 to 1), with every key;
- an independent bag-of-words model (other word vectors: real residuals), with the
  first ``--independent-keys`` keys.

It prints, per design and suspect, how many p-values differ between the kernels,
the largest relative difference, and how many are exactly 1 on one kernel and
below 1 on another, and writes ``results.json`` and ``table.md`` to ``--out``.

    python benchmarks/bench_kernel_stability.py --keys 1000 --out docs/results/kernels

Only kernels this CPU can run are used (SkylakeX needs AVX-512, Haswell AVX2,
Sandybridge AVX); at least two are needed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KERNELS = {"SkylakeX": "avx512f", "Haswell": "avx2", "Sandybridge": "avx"}

CHILD = r"""
import hashlib, json, sys
from functools import cache
import numpy as np
from threadpoolctl import threadpool_info
from espew_integrations import verify
from tests.integration.test_verdict_snapshot import DIM, _key, clean

@cache
def _other_vector(word):
    seed = int.from_bytes(hashlib.sha256(b"other:" + word.encode()).digest()[:8], "little")
    return np.random.default_rng(seed).standard_normal(DIM)

def independent(texts):
    rows = np.stack([np.mean([_other_vector(w) for w in t.split()], axis=0) for t in texts])
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)

first, last, independents = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
kernels = [i.get("architecture") for i in threadpool_info() if i.get("internal_api") == "openblas"]
out = {"kernels": kernels, "p": {}}
for marking in ("words", "field"):
    for seed in range(first, last):
        key = _key(marking, seed)
        suspects = [("clean", clean)] + [("independent", independent)] * (seed < independents)
        for name, suspect in suspects:
            out["p"][f"{marking}/{name}/{seed}"] = float(verify(suspect, key, seed=2).p_value).hex()
json.dump(out, sys.stdout)
"""


def runnable_kernels() -> list[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    flags = {f for line in text.splitlines() if line.startswith("flags") for f in line.split()}
    return [k for k, flag in KERNELS.items() if flag in flags]


def run_kernel(kernel: str, first: int, last: int, independents: int) -> dict:
    env = {**os.environ, "OPENBLAS_CORETYPE": kernel, "OPENBLAS_NUM_THREADS": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(first), str(last), str(independents)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        raise SystemExit(f"the {kernel} child failed:\n{done.stderr[-3000:]}")
    found = json.loads(done.stdout)
    if [k.lower() for k in found["kernels"]] != [kernel.lower()]:
        raise SystemExit(f"asked for {kernel}, ran {found['kernels']}")
    return found["p"]


def compare(runs: dict[str, dict[str, str]]) -> list[dict]:
    kernels = list(runs)
    names = sorted(runs[kernels[0]])
    groups: dict[tuple[str, str], dict] = {}
    for name in names:
        marking, suspect, _ = name.split("/")
        group = groups.setdefault(
            (marking, suspect),
            {
                "design": marking,
                "suspect": suspect,
                "keys": 0,
                "differ": 0,
                "max_rel_diff": 0.0,
                "jumps_to_1": 0,
                "below_1e-3": 0,
            },
        )
        values = [float.fromhex(runs[k][name]) for k in kernels]
        group["keys"] += 1
        group["below_1e-3"] += int(min(values) <= 1e-3)
        if len(set(values)) > 1:
            group["differ"] += 1
            low, high = min(values), max(values)
            group["max_rel_diff"] = max(group["max_rel_diff"], (high - low) / high)
            group["jumps_to_1"] += int(high == 1.0 and low < 1.0)
    return list(groups.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=1000, help="fresh keys per design")
    parser.add_argument(
        "--independent-keys", type=int, default=200, help="keys also tried on the independent model"
    )
    parser.add_argument("--kernels", nargs="*", default=None, help="default: all this CPU runs")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="child processes")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    kernels = args.kernels or runnable_kernels()
    if len(kernels) < 2:
        raise SystemExit(f"need two OpenBLAS kernels this CPU runs; found {kernels}")
    per_kernel = max(1, args.jobs // len(kernels))
    bounds = [
        (args.keys * i // per_kernel, args.keys * (i + 1) // per_kernel) for i in range(per_kernel)
    ]
    start = time.perf_counter()
    with ThreadPoolExecutor(len(kernels) * len(bounds)) as pool:
        futures = {
            (k, b): pool.submit(run_kernel, k, *b, args.independent_keys)
            for k in kernels
            for b in bounds
        }
        runs = {k: {} for k in kernels}
        for (kernel, _), future in futures.items():
            runs[kernel].update(future.result())
    rows = compare(runs)
    seconds = time.perf_counter() - start
    lines = [
        f"Kernels compared: {', '.join(kernels)}; {args.keys} fresh keys per design; "
        f"{seconds:.0f} s.",
        "",
        "| design | suspect | keys | p-values that differ | largest relative difference "
        "| 1 on one kernel, < 1 on another | p <= 1e-3 |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['design']} | {r['suspect']} | {r['keys']} | {r['differ']} | "
        f"{r['max_rel_diff']:.3g} | {r['jumps_to_1']} | {r['below_1e-3']} |"
        for r in rows
    ]
    print("\n".join(lines))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        command = "python benchmarks/bench_kernel_stability.py " + " ".join(sys.argv[1:])
        (args.out / "table.md").write_text("\n".join(lines) + f"\n\n    {command}\n")
        (args.out / "results.json").write_text(
            json.dumps(
                {
                    "kernels": kernels,
                    "keys": args.keys,
                    "rows": rows,
                    "seconds": seconds,
                    "command": command,
                },
                indent=1,
            )
            + "\n"
        )


if __name__ == "__main__":
    main()
