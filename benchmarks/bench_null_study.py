"""Large null study: observed false positives of the verdict over >= 10,000 fresh keys per suspect.

Innocent suspects (none ever saw a watermark):
  - the clean MiniLM itself (the provider's own model, the hardest innocent case),
  - an extraction copy (hashed tf-idf + ridge) trained on CLEAN MiniLM embeddings,
  - paraphrase-MiniLM-L3, an independent model of the same dimension.
Each fresh key draws 20 triggers uniformly from the band, over 50 target texts.
The per-word scores of a suspect for one target are computed once and reused
across trigger draws (valid because, under the null, the draw is independent of
the suspect). For contrast, the paper's probe-level two-sided KS recipe (20
backdoor and 20 benign 4-word sentences) is run on the clean copy with 300 keys.

    python benchmarks/bench_null_study.py [--trials 10000] [--corpus rotten_tomatoes]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy.stats import ks_2samp

from espew_integrations import WatermarkKey, build_probes, min_p_value
from espew_integrations.core.calibration import NullStudy, false_positive_summary, null_p_values
from espew_integrations.core.verify import score_words
from espew_integrations.corpora import health_tweets, load_corpus
from espew_integrations.embedders import minilm, paraphrase_minilm_l3
from espew_integrations.lab.cache import cached_embed
from espew_integrations.lab.stealers import RidgeStealer

LEVELS = (1e-2, 1e-3, 1e-4, 1e-6)
N_TARGETS = 50


def unit(rows: np.ndarray) -> np.ndarray:
    rows = np.asarray(rows, dtype=np.float64)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def word_level_study(suspect, band, targets, n_trials, rng) -> NullStudy:
    probes, owner = build_probes(band)
    answers = np.asarray(suspect(probes), dtype=np.float64)
    per_target = -(-n_trials // len(targets))
    p_values = [
        null_p_values(score_words(answers, owner, t, len(band)), 20, per_target, rng)
        for t in targets
    ]
    return NullStudy(per_target * len(targets), np.concatenate(p_values))


def paper_ks_study(suspect, band, target, n_keys, rng) -> np.ndarray:
    """The paper's recipe: 20 backdoor / 20 benign sentences of 4 words, two-sided KS."""
    band = np.asarray(band)
    p_values = []
    for _ in range(n_keys):
        is_trigger = np.zeros(len(band), bool)
        is_trigger[rng.choice(len(band), 20, replace=False)] = True
        triggers, benign = band[is_trigger], band[~is_trigger]
        backdoor = [" ".join(rng.choice(triggers, 4)) for _ in range(20)]
        normal = [" ".join(rng.choice(benign, 4)) for _ in range(20)]
        cos = unit(suspect(backdoor + normal)) @ target
        p_values.append(ks_2samp(cos[:20], cos[20:]).pvalue)
    return np.asarray(p_values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10_000, help="null trials per suspect")
    parser.add_argument("--corpus", default="rotten_tomatoes")
    parser.add_argument("--copy-texts", type=int, default=5000)
    args = parser.parse_args()
    started = time.perf_counter()
    rng = np.random.default_rng(2026)
    corpus = load_corpus(args.corpus)
    model = minilm()
    key = WatermarkKey.generate(corpus.texts, model, target_text="band reference", seed=1,
                                twin_check=False)  # fmt: skip
    band = list(key.band)
    # Target texts from another corpus, as a provider's identity strings would be.
    target_texts = list(health_tweets().subset(N_TARGETS, seed=7).texts)
    targets = unit(model(target_texts))

    train = corpus.subset(args.copy_texts, seed=0)
    clean = cached_embed(model, train.texts, model_name=model.name, progress=True)
    copy = RidgeStealer(seed=0).fit(train.texts, clean)
    other = paraphrase_minilm_l3()
    suspects = {
        "clean MiniLM (the twin)": model,
        "clean extraction copy (ridge)": copy,
        "paraphrase-MiniLM-L3 (independent)": other,
    }
    print(
        f"band: {len(band)} words of {corpus.name} in {key.freq_band}; 20 triggers per key; "
        f"{N_TARGETS} target texts; smallest reachable p = {min_p_value(len(band), 20):.1e}"
    )
    total = 0
    for name, suspect in suspects.items():
        study = word_level_study(suspect, band, targets, args.trials, rng)
        total += study.n_trials
        print(f"\n== word-level exact rank test vs {name}: {study.n_trials} fresh keys")
        print(false_positive_summary(study, LEVELS))
    # target="query": the suspect's own embedding of each target text.
    query_targets = unit(other(target_texts))
    study = word_level_study(other, band, query_targets, args.trials, rng)
    total += study.n_trials
    print(f"\n== word-level test, target='query', vs paraphrase-MiniLM-L3: {study.n_trials} keys")
    print(false_positive_summary(study, LEVELS))

    ks = paper_ks_study(copy, band, targets[0], 300, rng)
    print("\n== paper's probe-level two-sided KS recipe vs the clean copy: 300 keys")
    for level in LEVELS[:3]:
        print(f"   p < {level:.0e}: {int((ks < level).sum())}/300 = {(ks < level).mean():.1%}")
    print(f"   smallest KS p-value: {ks.min():.1e}")
    print(f"\n{total} word-level null trials in {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
