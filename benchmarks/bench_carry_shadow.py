# ruff: noqa: E402, E731
"""A provider-trained shadow copy as the reference for the torch copy (issue 9).

``which`` is ``ridge`` or ``torch``: the provider trains that stealer on ITS OWN
split of its clean answers (seed 99, never the thief's seed or split), embeds the
key's probes with it and subtracts its word scores from the thief's torch copy's
(saved by ``bench_carry.py``), then runs the exact rank test.

    nice .venv/bin/python benchmarks/bench_carry_shadow.py ridge /tmp/bench_carry_1.npz
"""

import sys
import time

import numpy as np
import torch

torch.set_num_threads(1)
from espew_integrations import WatermarkKey
from espew_integrations.core.stats.ranktest import rank_sum_p_value
from espew_integrations.offline.corpora import rotten_tomatoes
from espew_integrations.offline.embedders import minilm
from espew_lab.cache import cached_embed
from espew_lab.stealers import RidgeStealer

sys.path.insert(0, "benchmarks")
from bench_faithful_copy import TARGET_TEXT, Lookup

which, saved = sys.argv[1], sys.argv[2]
texts = list(rotten_tomatoes().texts)
vm = minilm()
clean = cached_embed(vm, texts, model_name=vm.name)
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
clean = clean.astype(np.float64)
d = np.load(saved)
a, ref, owner, is_tr = d["a"], d["ref"], d["owner"], d["is_tr"]
P = list(key.probe_texts)
t = key.target / np.linalg.norm(key.target)
# the provider's shadow: trained on ITS OWN split (seed 99), never the thief's
rng = np.random.default_rng(99)
tr = np.sort(rng.permutation(len(texts))[:-500])
t0 = time.time()
if which == "ridge":
    sh = RidgeStealer(seed=99).fit([texts[i] for i in tr], clean[tr])
else:
    from espew_lab.torch_stealer import TorchEncoderStealer

    sh = TorchEncoderStealer(seed=99).fit([texts[i] for i in tr], clean[tr])
print(which, "fit", time.time() - t0, flush=True)
M = np.asarray(sh(P), float)
b = (M / np.linalg.norm(M, axis=1, keepdims=True)) @ t
N = len(is_tr)
pw = lambda x: np.bincount(owner, weights=x, minlength=N) / np.bincount(owner, minlength=N)
raw, s = pw(a), pw(b)
c = s - s.mean()
slope = c @ (raw - raw.mean()) / (c @ c)
print(
    which,
    "shadow slope",
    slope,
    "p(slope 1)",
    rank_sum_p_value(raw - s, is_tr),
    "p(fitted)",
    rank_sum_p_value(raw - slope * s, is_tr),
)
np.save(f"/tmp/bench_carry_shadow_{which}.npy", b)
