"""How often does a forgery of a few percent of the answers escape the default requery?

``espew evidence check --requery`` re-asks, by default, the fewest recorded texts for
which a forgery of 1% of the answers escapes with probability at most 0.1%
(``requery_size_for``, hypergeometric). This prints, for transcripts of several sizes,
that size, the exact escape chance of 1%, 2% and 5% forgeries at it (and at the old
default of 32 texts), and the escape rate measured over seeded requery draws against a
forged set drawn afresh for each seed, and the most that escaped in any block of 100
seeds. Run (a minute or two):

    python benchmarks/bench_requery_size.py --seeds 10000 > docs/results/requery-size.txt
"""

from __future__ import annotations

import argparse

import numpy as np

from espew_integrations.core.records.requery import (
    draw_requery,
    escape_chance,
    requery_size_for,
)

FRACTIONS = (0.01, 0.02, 0.05)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10_000)
    parser.add_argument("--rows", type=int, nargs="+", default=[650, 1950, 6000])
    args = parser.parse_args()
    print("rows  size  forged  escape(exact)  escape(32 texts)  escaped/seeds  per-100 worst")
    for n_rows in args.rows:
        size = requery_size_for(n_rows)
        for fraction in FRACTIONS:
            n_forged = int(np.ceil(fraction * n_rows))
            rng = np.random.default_rng(n_rows)
            escaped = np.zeros(args.seeds, dtype=bool)
            for seed in range(args.seeds):
                forged = rng.choice(n_rows, size=n_forged, replace=False)
                escaped[seed] = not np.isin(draw_requery(n_rows, "auto", seed), forged).any()
            worst = escaped[: args.seeds // 100 * 100].reshape(-1, 100).sum(axis=1).max()
            exact = escape_chance(n_rows, size, fraction)
            print(
                f"{n_rows:5d} {size:5d} {fraction:6.0%}  {exact:13.3g}"
                f"  {escape_chance(n_rows, 32, fraction):16.3g}  {escaped.sum():6d}/{args.seeds}"
                f"  {worst:13d}"
            )


if __name__ == "__main__":
    main()
