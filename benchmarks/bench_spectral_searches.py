"""Other searches a thief could run over its stolen answers for the marked rows.

``bench_spectral.py`` runs one search (ICA past the answers' first 200
principal axes) and trains copies on what it leaves. This one asks, for the
same three targets on the default key, how well *other* unsupervised searches
rank the marked rows, as ROC AUC against the rows the service marked (0.5: no
better than chance):

- the oracle: cos(answer, target), which needs the key (how far apart the
  marked rows stand on the target's direction);
- the best single principal axis of the answers, either sign (with the
  labels, so an upper bound for a thief who picks one axis);
- the Mahalanobis distance over the answers' principal axes past the first k,
  and over the residuals of a ridge fit from the thief's own model
  (paraphrase-MiniLM-L3) to the answers;
- ICA (``lab.spectral.find_displaced_rows``) over the last ``384 - k`` axes for
  each ``--ica-skip`` k: best bimodality, rows flagged, precision and recall.

Offline MiniLM + Rotten Tomatoes, every answer of the corpus. Run (about 5
minutes on 2 cores):

    .venv/bin/python benchmarks/bench_spectral_searches.py \\
        > docs/results/spectral/searches.txt
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_faithful_copy import corpus_lookups
from bench_spectral import TARGETS, make_key

from espew_integrations import watermark
from espew_lab.spectral import find_displaced_rows

MAHALANOBIS_SKIPS = (0, 100, 200, 300, 350)
RESIDUAL_SKIPS = (0, 200, 300)


def whitened(matrix: np.ndarray) -> np.ndarray:
    """``matrix`` centred, on its principal axes, each scaled to unit variance."""
    centred = matrix - matrix.mean(axis=0)
    _, singular, axes = np.linalg.svd(centred, full_matrices=False)
    return (centred @ axes.T) / (singular / np.sqrt(len(centred)))


def main() -> None:
    from sklearn.linear_model import Ridge
    from sklearn.metrics import roc_auc_score

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--ica-skip", type=int, nargs="*", default=[300, 334])
    args = parser.parse_args()
    started = time.perf_counter()
    texts, victim, _, std_matrix = corpus_lookups()
    clean = victim.matrix.astype(np.float64)
    own = std_matrix.astype(np.float64)
    for kind in TARGETS:
        for seed in args.seeds:
            key = make_key(kind, seed, texts, victim, clean)
            answers = watermark(texts, clean, key)
            marked = np.any(answers != clean, axis=1)
            z = whitened(answers)
            best_axis = max(max(a, 1 - a) for a in (roc_auc_score(marked, c) for c in z.T))
            oracle = roc_auc_score(marked, answers @ np.asarray(key.target))
            residual = answers - Ridge(alpha=1.0).fit(own, answers).predict(own)
            zr = whitened(residual)
            cells = [
                f"oracle {oracle:.3f}",
                f"best axis {best_axis:.3f}",
                "Mahalanobis past "
                + ", ".join(
                    f"{k}: {roc_auc_score(marked, (z[:, k:] ** 2).sum(1)):.3f}"
                    for k in MAHALANOBIS_SKIPS
                ),
                "residual Mahalanobis past "
                + ", ".join(
                    f"{k}: {roc_auc_score(marked, (zr[:, k:] ** 2).sum(1)):.3f}"
                    for k in RESIDUAL_SKIPS
                ),
            ]
            print(f"{kind}, key {seed} ({marked.mean():.0%} marked): " + "; ".join(cells))
            for skip in args.ica_skip:
                finding = find_displaced_rows(answers, seed=seed, skip_top=skip)
                flagged = finding.flagged
                hits = int(np.sum(flagged & marked))
                print(
                    f"    ICA past {skip} axes: best bimodality {finding.best_bimodality:.2f}, "
                    f"flagged {int(flagged.sum())}, precision {hits / max(flagged.sum(), 1):.3f}, "
                    f"recall {hits / marked.sum():.3f}",
                    flush=True,
                )
    print(f"{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
