"""Can a router tell the audit's texts from ordinary traffic by their shape?

The lab's router (``espew_lab.router``) applies fixed rules:
single words, templates, repeats, a burst of band words, a run of texts that
hold exactly one. This benchmark asks the general question instead. A
gradient-boosted classifier (scikit-learn's ``HistGradientBoostingClassifier``)
learns to separate the default audit's texts from the rest of the corpus on
every shape a thief can compute per text without the key:

- length: words and characters;
- how many words of the default band (1-1.5% document frequency, computed on
  the thief's own traffic: here the whole corpus, which is generous) it
  holds, and how many of the neighbouring bands (0.5-1%, 1.5-3%);
- how many rare words (< 0.1%), the mean and smallest log document frequency
  of its words, and the share of distinct words.

The classifier is given the labels, which no thief has: it stands for a thief
who learned the library's audit shape from an audit it saw before (another
provider's key). So the table reports it both within one key (5-fold cross-
validation) and across keys (trained on key 1's audit, tested on key 2's and
key 3's), as ROC AUC and as the share of the audit routed when the router
routes 5%, 10% or 20% of ordinary traffic. For the 10% router it also audits
the watermarked service itself (the most faithful copy) behind it: the texts
the classifier scores most audit-like are answered by the clean model.

Offline MiniLM + Rotten Tomatoes, the default key (3 key seeds). Run (about 2
minutes on 2 cores):

    .venv/bin/python benchmarks/bench_audit_shape.py > docs/results/faithful/audit-shape.txt
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_faithful_copy import TARGET_TEXT, corpus_lookups

from espew_integrations import WatermarkKey, verify, watermark
from espew_integrations.core.mark.words import tokenize

FEATURES = (
    "words",
    "characters",
    "band words (1-1.5%)",
    "words at 0.5-1%",
    "words at 1.5-3%",
    "rare words (< 0.1%)",
    "mean log frequency",
    "smallest log frequency",
    "distinct share",
)
ROUTED_SHARES = (0.05, 0.10, 0.20)


def shape_features(texts: list[str], traffic: list[str] | None = None) -> np.ndarray:
    """One row of :data:`FEATURES` per text, from document frequencies over ``traffic``.

    ``traffic`` is the thief's sample of its ordinary traffic (``texts`` if None); a
    word it never saw counts as seen once.
    """
    tokens = [tokenize(text) for text in texts]
    seen = tokens if traffic is None else [tokenize(text) for text in traffic]
    frequency = Counter(word for words in seen for word in set(words))
    share = defaultdict(lambda: 1 / len(seen))
    share.update({word: count / len(seen) for word, count in frequency.items()})

    def count(words, low, high):
        return sum(low <= share[w] < high for w in words)

    rows = []
    for text, words in zip(texts, tokens, strict=True):
        logs = [math.log(share[w]) for w in words] or [0.0]
        rows.append(
            [
                len(words),
                len(text),
                count(set(words), 0.01, 0.015),
                count(set(words), 0.005, 0.01),
                count(set(words), 0.015, 0.03),
                count(set(words), 0.0, 0.001),
                float(np.mean(logs)),
                min(logs),
                len(set(words)) / max(len(words), 1),
            ]
        )
    return np.asarray(rows, dtype=np.float64)


def routed_at(scores_audit: np.ndarray, scores_ordinary: np.ndarray, share: float) -> float:
    """The audit's share above the threshold that routes ``share`` of ordinary traffic."""
    threshold = np.quantile(scores_ordinary, 1.0 - share)
    return float(np.mean(scores_audit > threshold))


def main() -> None:
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.metrics import roc_auc_score
    from sklearn.model_selection import StratifiedKFold, cross_val_predict

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    args = parser.parse_args()
    started = time.perf_counter()
    texts, victim, _, _ = corpus_lookups()
    features = shape_features(texts)
    row_of = {text: i for i, text in enumerate(texts)}
    keys = {
        seed: WatermarkKey.generate(
            texts,
            victim,
            target_text=TARGET_TEXT,
            seed=seed,
            window=victim.model.max_tokens,
            marking="words",
        )
        for seed in args.seeds
    }

    def labels(key: WatermarkKey) -> np.ndarray:
        audit = np.zeros(len(texts), dtype=bool)
        audit[[row_of[t] for t in (*key.probe_texts, *key.cover_texts) if t in row_of]] = True
        return audit

    def classifier():
        return HistGradientBoostingClassifier(max_iter=200, random_state=0)

    print("Features per text:", ", ".join(FEATURES))
    print(
        "Routed: the audit's share a router routes when it routes 5% / 10% / 20% of "
        "ordinary traffic (the corpus texts not in the audit)."
    )
    print(f"{'key':>3s} {'audit texts':>11s}  {'within key (5-fold)':34s} {'trained on key 1':34s}")
    first = args.seeds[0]
    transfer = classifier().fit(features, labels(keys[first]))
    for seed, key in keys.items():
        audit = labels(key)
        folds = StratifiedKFold(5, shuffle=True, random_state=seed)
        within = cross_val_predict(classifier(), features, audit, cv=folds, method="predict_proba")
        cells = []
        for scores in (within[:, 1], transfer.predict_proba(features)[:, 1]):
            auc = roc_auc_score(audit, scores)
            routed = [routed_at(scores[audit], scores[~audit], s) for s in ROUTED_SHARES]
            cells.append(f"AUC {auc:.3f}, routed " + " / ".join(f"{r:.1%}" for r in routed))
        if seed == first:
            cells[1] = "(its own training audit)"
        print(f"{seed:3d} {int(audit.sum()):11d}  {cells[0]:34s} {cells[1]:34s}", flush=True)

        scores = within[:, 1]
        threshold = np.quantile(scores[~audit], 0.9)
        honest = {texts[i] for i in np.flatnonzero(scores > threshold)}

        def routing_service(batch, key=key, honest=honest):
            batch = list(batch)
            out = np.asarray(watermark(batch, victim(batch), key), dtype=np.float64)
            clean = [i for i, text in enumerate(batch) if text in honest]
            if clean:
                out[clean] = victim([batch[i] for i in clean])
            return out

        report = verify(routing_service, key, seed=seed)
        sent = [*key.probe_texts, *key.cover_texts]
        share = np.mean([t in honest for t in sent])
        print(
            f"    the service behind the within-key 10% router ({share:.1%} of the audit "
            f"answered clean): {report.status}, p = {report.p_value:.1e}",
            flush=True,
        )
    print(f"{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
