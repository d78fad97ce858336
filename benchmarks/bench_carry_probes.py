"""Probes per word vs the torch copy's effect size, from bench_carry.py's saved answers (issue 9).

Reads the npz that ``benchmarks/bench_carry.py SEED`` writes (the copy's, the
shadow's and the clean model's cosines to the target for every stored probe),
keeps at most k probes per band word (5 random subsamples, seed 0) and prints
the adjusted-score and shadow-corrected effect sizes and exact rank-test p-values.

    nice .venv/bin/python benchmarks/bench_carry_probes.py /tmp/bench_carry_1.npz
"""

from __future__ import annotations

import sys

import numpy as np

from espew_integrations.core.stats.ranktest import rank_sum_p_value


def main() -> None:
    d = np.load(sys.argv[1])
    a, b, ref, owner, is_tr = d["a"], d["b"], d["ref"], d["owner"], d["is_tr"]
    n_words = len(is_tr)
    rng = np.random.default_rng(0)

    def delta(s):
        return (s[is_tr].mean() - s[~is_tr].mean()) / s[~is_tr].std()

    def stats(keep):
        o = owner[keep]
        counts = np.bincount(o, minlength=n_words)
        raw, refw, shadow = (
            np.bincount(o, weights=x[keep], minlength=n_words) / counts for x in (a, ref, b)
        )
        c = refw - refw.mean()
        adj = raw - (c @ (raw - raw.mean()) / (c @ c)) * refw
        return (
            delta(adj),
            rank_sum_p_value(adj, is_tr),
            delta(raw - shadow),
            rank_sum_p_value(raw - shadow, is_tr),
        )

    for k in (1, 2, 4, 8):
        res = []
        for _ in range(5):
            keep = np.zeros(len(owner), bool)
            for w in range(n_words):
                keep[rng.permutation(np.flatnonzero(owner == w))[:k]] = True
            res.append(stats(keep))
        res = np.array(res)
        print(
            f"probes/word<= {k}: adjusted delta {res[:, 0].mean():.2f} p(median) "
            f"{np.median(res[:, 1]):.1e} | shadow delta {res[:, 2].mean():.2f} "
            f"p(median) {np.median(res[:, 3]):.1e}"
        )


if __name__ == "__main__":
    main()
