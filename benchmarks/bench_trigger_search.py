"""Can a thief with an open model find the triggers in the answers? (issue 36)

The thief of ``bench_strip_band.py`` (10,000 stealing texts disjoint from the
audit, the key's public range known from this repository) also owns an open
embedding model (paraphrase-MiniLM-L3). It queries the service with its texts,
fits a ridge map from its own model's embeddings to the service's answers, and
ranks every word of the public range (document frequencies on its own texts) by
how far the answers of the texts holding it stray from that map:

- ``norm``: the mean squared residual of the word's texts, as a z-score against
  all texts (the search the issue tried);
- ``direction``: the length of the word's mean residual vector along the one
  direction the words' mean residuals share most (the marks of every trigger
  pull toward the same secret target), as a z-score.

For each search it prints how many triggers are among its top ``n_triggers``
candidates (with chance: ``k * n / N`` for N range words),
and what deleting those candidates from its queries costs the thief and does to
the audit's verdict on its ridge copy.

    .venv/bin/python benchmarks/bench_trigger_search.py --seeds 1 2 3
    .venv/bin/python benchmarks/bench_trigger_search.py --seeds 1 2 3 \
        --freq-band 0.01-0.03 --band-words 0       # the earlier 1-3% band

Figures: docs/limitations.md, "The open-model search".
"""

from __future__ import annotations

import argparse

import numpy as np
from bench_faithful_copy import corpus_lookups
from bench_strip_band import add_key_arguments, key_from_args, run_strategy
from thieves import thief_for

from espew_integrations import watermark
from espew_integrations.core.mark.words import band_words, document_frequencies, tokenize

RIDGE = 1.0


def residuals(features: np.ndarray, answers: np.ndarray) -> np.ndarray:
    """The answers less their ridge fit on the thief's own model's features."""
    x = np.hstack([features, np.ones((len(features), 1))])
    gram = x.T @ x + RIDGE * np.eye(x.shape[1])
    coef = np.linalg.solve(gram, x.T @ answers)
    return answers - x @ coef


def word_rows(texts: list[str], words: list[str]) -> list[np.ndarray]:
    """For each word, the rows of ``texts`` that hold it."""
    index = {w: i for i, w in enumerate(words)}
    rows: list[list[int]] = [[] for _ in words]
    for row, text in enumerate(texts):
        for word in set(tokenize(text)):
            if word in index:
                rows[index[word]].append(row)
    return [np.asarray(r, dtype=int) for r in rows]


def rank_words(resid: np.ndarray, rows: list[np.ndarray]) -> dict[str, np.ndarray]:
    """Each search's score per word (higher: more likely a trigger)."""
    sq = (resid**2).sum(1)
    mu, sd = sq.mean(), sq.std()
    sizes = np.array([max(len(r), 1) for r in rows], dtype=float)
    norm = np.array([sq[r].mean() if len(r) else mu for r in rows])
    means = np.stack([resid[r].mean(0) if len(r) else np.zeros(resid.shape[1]) for r in rows])
    weighted = means * np.sqrt(sizes)[:, None]
    _, _, vt = np.linalg.svd(weighted - weighted.mean(0), full_matrices=False)
    along = weighted @ vt[0]
    if np.sum(np.sort(along)[-10:]) < -np.sum(np.sort(along)[:10]):  # the sign of the pull
        along = -along
    return {"norm": (norm - mu) / sd * np.sqrt(sizes), "direction": along}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    add_key_arguments(parser)
    args = parser.parse_args()
    texts, victim, _standard, std_matrix = corpus_lookups()
    print(
        f"{'seed':>4} {'search':<10} {'k':>4} {'found':>5} {'chance':>6} "
        f"{'changed':>7} {'cos':>6} {'fidel':>6} {'p':>9}"
    )
    for seed in args.seeds:
        key, public = key_from_args(args, seed, texts, victim)
        thief = thief_for(seed, texts, key, victim)
        answers = watermark(thief.steal, thief.clean_steal, key)
        counts, n = document_frequencies(thief.steal)
        words = band_words(counts, n, public)
        resid = residuals(std_matrix[thief.rows].astype(np.float64), answers)
        scores = rank_words(resid, word_rows(thief.steal, words))
        k = len(key.triggers)  # the thief deletes as many candidates as there are triggers
        in_range = sum(w in key.triggers for w in words)
        for search, score in scores.items():
            top = {words[i] for i in np.argsort(-score)[:k]}
            row = run_strategy(f"{search} top {k}", top, key, seed, thief, victim)
            print(
                f"{seed:>4} {search:<10} {k:>4} {len(top & key.triggers):>5} "
                f"{k * in_range / len(words):>6.1f} {row['texts_changed']:>7.3f} "
                f"{row['mean_cos_all']:>6.3f} {row['fidelity']:>6.3f} {row['p_value']:>9.2e}",
                flush=True,
            )


if __name__ == "__main__":
    main()
