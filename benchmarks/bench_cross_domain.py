"""A thief from another domain: it steals with its own traffic, and the audit is not like it.

The key is made on the provider's corpus (Rotten Tomatoes reviews) and so is the
audit: its probes and cover texts are reviews. A thief whose customers send
something else (here: health tweets, ``offline.corpora.health_tweets``) steals
with those texts instead. Two questions:

- **Does its copy carry the mark?** The service marks a tweet when it holds a
  trigger word, so the thief's answers are marked at the rate the triggers
  occur in tweets, and its copy has to generalise from tweets to the reviews
  the audit sends. Each copy is trained on ``--n`` tweets' watermarked answers
  (all but 500) and audited with the default ``verify(suspect, key)``: a ridge
  copy, the same after CSE K=50, and the frozen-MLP copy (an MLP head on the
  thief's own MiniLM-L3) after CSE K=50; a ridge copy of the clean answers is
  the innocent one.
- **Can it tell the audit from its traffic?** The classifier of
  ``bench_audit_shape.py`` (per-text shapes, document frequencies from the
  thief's tweets), trained to separate the audit's texts from held-out tweets:
  ROC AUC, and the share of the audit routed when 1% of the tweets are.

Then the same with the audit drawn from tweets (``key.with_audit``: same
triggers, probes and cover texts from ``--audit-pool`` tweets the thief never
sent, references from the provider's clean model).

Offline MiniLM, 3 key seeds. The tweets' embeddings are cached like the
corpus's (about 6 minutes the first time). Run:

    .venv/bin/python benchmarks/bench_cross_domain.py > docs/results/faithful/cross-domain.txt
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_audit_shape import shape_features
from bench_faithful_copy import TARGET_TEXT, Lookup, corpus_lookups

from espew_integrations import WatermarkKey, verify, watermark
from espew_integrations.offline.corpora import health_tweets
from espew_lab.attacks import apply_attack
from espew_lab.cache import cached_embed
from espew_lab.stealers import FrozenMLPStealer, RidgeStealer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--n", type=int, default=15_000, help="tweets the thief steals with")
    parser.add_argument(
        "--audit-pool", type=int, default=8_000, help="other tweets the audit is drawn from"
    )
    args = parser.parse_args()
    started = time.perf_counter()
    texts, victim, standard, _ = corpus_lookups()
    every_tweet = health_tweets()
    tweets = list(every_tweet.subset(args.n, seed=0).texts)
    stolen_with = set(tweets)
    rest = [t for t in every_tweet.texts if t not in stolen_with]
    chosen = np.random.default_rng(1).permutation(len(rest))[: args.audit_pool]
    pool = [rest[i] for i in np.sort(chosen)]
    pool_rows = cached_embed(victim.model, pool, model_name=victim.model.name)
    victim_on_pool = Lookup(victim.model, pool, pool_rows)
    clean = cached_embed(victim.model, tweets, model_name=victim.model.name).astype(np.float64)
    own = cached_embed(standard.model, tweets, model_name=standard.model.name).astype(np.float64)
    print(f"{len(tweets)} tweets embedded ({time.perf_counter() - started:.0f} s)", flush=True)
    for seed in args.seeds:
        key = WatermarkKey.generate(
            texts,
            victim,
            target_text=TARGET_TEXT,
            seed=seed,
            window=victim.model.max_tokens,
            marking="words",
        )
        answers = watermark(tweets, clean, key)
        marked = np.any(answers != clean, axis=1)
        order = np.random.default_rng(seed).permutation(len(tweets))
        train, held = np.sort(order[:-500]), np.sort(order[-500:])
        train_texts = [tweets[i] for i in train]
        cse = apply_attack("cse:50", tweets, answers, standard=own, seed=seed).embeddings
        copies = {
            "ridge": RidgeStealer(seed=seed).fit(train_texts, answers[train]),
            "ridge + CSE K=50": RidgeStealer(seed=seed).fit(train_texts, cse[train]),
            "frozen-MLP + CSE K=50": FrozenMLPStealer(standard, seed=seed, features=own[train]).fit(
                train_texts, cse[train]
            ),
            "clean ridge (innocent)": RidgeStealer(seed=seed).fit(train_texts, clean[train]),
        }
        print(
            f"key {seed}: the key marks {marked.mean():.1%} of the tweets "
            f"(and {key.info['marked_rate']:.1%} of the reviews it was made on)",
            flush=True,
        )
        tweet_key = key.with_audit(pool, victim_on_pool)
        for label, audit_key in (("reviews", key), ("tweets", tweet_key)):
            print(
                f"  audit drawn from {label}: {audit_key.audit_queries} queries, "
                f"{len(audit_key.probe_texts)} probes",
                flush=True,
            )
            twin = victim if label == "reviews" else victim_on_pool  # the clean model
            for name, copy in {**copies, "innocent twin": twin}.items():
                report = verify(copy, audit_key, seed=seed)
                print(f"    {name:24s} {report.status:11s} p = {report.p_value:.1e}", flush=True)
            domain_router(audit_key, [tweets[i] for i in held], train_texts, seed)
    print(f"{time.perf_counter() - started:.0f} s")


def domain_router(key: WatermarkKey, ordinary: list[str], traffic: list[str], seed: int) -> None:
    """How well the shape classifier tells ``key``'s audit from the thief's ``ordinary`` texts."""
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.metrics import roc_auc_score
    from sklearn.model_selection import StratifiedKFold, cross_val_predict

    audit = [*key.probe_texts, *key.cover_texts]
    features = shape_features(audit + ordinary, traffic=traffic)
    labels = np.r_[np.ones(len(audit), bool), np.zeros(len(ordinary), bool)]
    folds = StratifiedKFold(5, shuffle=True, random_state=seed)
    scores = cross_val_predict(
        HistGradientBoostingClassifier(max_iter=200, random_state=0),
        features,
        labels,
        cv=folds,
        method="predict_proba",
    )[:, 1]
    threshold = np.quantile(scores[~labels], 0.99)
    print(
        f"    domain router: AUC {roc_auc_score(labels, scores):.3f}; routing 1% of the "
        f"tweets routes {np.mean(scores[labels] > threshold):.1%} of the audit",
        flush=True,
    )


if __name__ == "__main__":
    main()
