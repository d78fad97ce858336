"""A thief that spoils the auditor's clean fit: distorted answers to texts with no band word.

The directed score first takes out of the suspect's answers what a fit on the
provider's clean embeddings explains, over the whole audit; about 40% of the
audit's texts hold no band word. The band rule is public, so a thief can
distort its answers to those texts (its customers pay in quality there) hoping
to spoil the fit and blur the mark it keeps on the texts that matter.

Here the thief turns each such answer to cosine ``c`` of itself along a random
direction fixed per text (so a repeat gets the same answer), for ``c`` in 0.99,
0.95 and 0.9, in front of the frozen-MLP copy after CSE K=50 (the weakest copy
the default catches) and, as an innocent, in front of the clean model itself.
Default key and audit (4,232 queries), default ``verify``.

Offline MiniLM + Rotten Tomatoes. Run (about 30 s per key):

    .venv/bin/python benchmarks/bench_spoiled_fit.py > docs/results/threats/spoiled-fit.txt
"""

from __future__ import annotations

import argparse
import sys
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_faithful_copy import corpus_lookups, frozen_mlp_after_cse
from bench_spectral import make_key

from espew_integrations import verify, watermark
from espew_integrations.core.mark.words import tokenize

COSINES = (0.99, 0.95, 0.9)


def distorted(model: Callable, band: tuple[str, ...], cosine: float) -> Callable:
    """``model``, with each answer to a text that holds no band word turned to ``cosine``
    of itself along a direction fixed by the text."""
    band_words = set(band)

    def answer(batch):
        batch = list(batch)
        out = np.asarray(model(batch), dtype=np.float64)
        out /= np.linalg.norm(out, axis=1, keepdims=True)
        for i, text in enumerate(batch):
            if band_words & set(tokenize(text)):
                continue
            rng = np.random.default_rng(zlib.crc32(text.encode("utf-8")))
            noise = rng.standard_normal(out.shape[1])
            noise -= (noise @ out[i]) * out[i]
            out[i] = cosine * out[i] + np.sqrt(1 - cosine**2) * noise / np.linalg.norm(noise)
        return out

    return answer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 5])
    args = parser.parse_args()
    started = time.perf_counter()
    texts, victim, standard, std_matrix = corpus_lookups()
    clean = victim.matrix.astype(np.float64)
    header = " | ".join(f"cos {c}" for c in COSINES)
    print(f"| key | suspect | as trained | {header} |")
    print("|---:|---|---|" + "---|" * len(COSINES))
    for seed in args.seeds:
        key = make_key("text", seed, texts, victim, clean)
        answers = watermark(texts, clean, key)
        copy = frozen_mlp_after_cse(seed, texts, answers, standard, std_matrix, key)
        for name, model in (("frozen-MLP + CSE K=50", copy), ("innocent twin", victim)):
            suspects = [model, *(distorted(model, key.band, c) for c in COSINES)]
            cells = " | ".join(f"{verify(s, key, seed=seed).p_value:.2g}" for s in suspects)
            print(f"| {seed} | {name} | {cells} |", flush=True)
    print(f"\n{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
