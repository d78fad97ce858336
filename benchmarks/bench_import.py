"""Start-up cost: importing the package and starting the CLI, against what they avoid.

Every ``espew`` command, every ``espew serve`` worker and every RAG app that
imports the package pays this before its first vector. The heavy libraries the
core uses (scipy's statistics, FFT and linear algebra) are imported where they
are needed, so a process that only watermarks never loads them. Each figure is
the median wall time of fresh Python processes, interleaved so that machine
noise hits all of them alike; the scipy rows are what the package paid on
import before (2.81 s -> 0.79 s measured side by side against the previous
commit, 5 runs each, under load).

    python benchmarks/bench_import.py [--runs 7]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

CASES = {
    "python (nothing imported)": "pass",
    "import numpy": "import numpy",
    "import espew_integrations": "import espew_integrations",
    "espew CLI parser built": (
        "from espew_integrations.cli import build_parser; build_parser().format_help()"
    ),
    "import scipy.stats, scipy.fft, scipy.linalg (avoided)": (
        "import scipy.stats, scipy.fft, scipy.linalg"
    ),
}


def wall_time(code: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    times: dict[str, list[float]] = {name: [] for name in CASES}
    for _ in range(args.runs):
        for name, code in CASES.items():
            times[name].append(wall_time(code))
    baseline = statistics.median(times["python (nothing imported)"])
    print(f"median of {args.runs} fresh processes each (python {sys.version.split()[0]})")
    for name, samples in times.items():
        median = statistics.median(samples)
        print(f"  {name:<56} {median:6.2f} s  ({median - baseline:+.2f} s over bare python)")


if __name__ == "__main__":
    main()
