# ruff: noqa: E402, E501, E731
"""At a fixed quality budget, how far does a marked text move toward the target, per alpha? (issue 9)

Key seed 1 (default band and triggers); for each alpha, the strength is bisected
so that the mean cos(clean, watermarked) over ALL the corpus's marked rows is
0.995, and the mean increase of cos(text, target) over those rows is printed.
Pure numpy on the cached MiniLM embeddings (seconds).

    PYTHONPATH=benchmarks nice .venv/bin/python benchmarks/bench_alpha_shift.py
"""

import numpy as np

from espew_integrations import WatermarkKey, watermark
from espew_integrations.offline.corpora import rotten_tomatoes
from espew_integrations.offline.embedders import minilm
from espew_lab.cache import cached_embed

texts = list(rotten_tomatoes().texts)
vm = minilm()
clean = cached_embed(vm, texts, model_name=vm.name).astype(np.float64)
d = {}
from bench_faithful_copy import TARGET_TEXT, Lookup

victim = Lookup(vm, texts, clean)
key = WatermarkKey.generate(
    texts,
    victim,
    target_text=TARGET_TEXT,
    seed=1,
    window=vm.max_tokens,
    min_cosine=0.995,
    marking="words",
)
m = key.contains_trigger(texts)
rows = np.flatnonzero(m)
T = [texts[i] for i in rows]
C = clean[rows]
t = key.target / np.linalg.norm(key.target)
u = lambda M: M / np.linalg.norm(M, axis=1, keepdims=True)
base = u(C) @ t
for alpha in (0.1, 0.2, 0.3, 0.5, 0.75, 0.99):
    k0 = key.replace(alpha=alpha)
    lo, hi = 0.0, 1.0

    def mc(s, k0=k0):
        W = watermark(T, C, k0.replace(strength=s))
        return np.mean(np.sum(u(W) * u(C), 1)), W

    for _ in range(22):
        mid = (lo + hi) / 2
        if mc(mid)[0] >= 0.995:
            lo = mid
        else:
            hi = mid
    c, W = mc(lo)
    print(
        f"alpha {alpha:4.2f} strength {lo:.4f} meancos {c:.5f} shift toward target {np.mean(u(W) @ t - base):.4f}",
        flush=True,
    )
