# ruff: noqa: E402, E501, UP031
"""How much of the watermark does the end-to-end torch copy carry? (issue 9)

For one key at the 0.995 budget (default n=20, band 0.005-0.01, alpha 0.2):
trains the lab's TorchEncoderStealer on the service's watermarked answers AND
an identical "shadow" (same architecture, seed and texts) on the clean answers,
then prints per trigger word the service's shift of its probes toward the target
(cos(service) - cos(clean)), the copy's shift (cos(copy) - cos(shadow)), the
number of training texts containing the word, the probes' in-training share,
and asymptotic Mann-Whitney p-values (a rough guide, not the verdict) for the
raw, reference-adjusted and shadow-corrected word scores.

    nice .venv/bin/python benchmarks/bench_carry.py 1 > docs/results/frontier/carry-seed1.txt

Output of the committed run: docs/results/frontier/carry-seed1.txt. The shadow
here is the thief's own recipe, seed and data: an upper bound on what a
provider-trained shadow copy could remove.
"""

import sys
import time

import numpy as np

from espew_integrations import WatermarkKey, watermark
from espew_integrations.core.mark.words import tokenize
from espew_integrations.offline.corpora import rotten_tomatoes
from espew_integrations.offline.embedders import minilm
from espew_lab.cache import cached_embed

sys.path.insert(0, "benchmarks")
import torch
from bench_faithful_copy import TARGET_TEXT, Lookup

torch.set_num_threads(2)
seed = int(sys.argv[1]) if len(sys.argv) > 1 else 1
texts = list(rotten_tomatoes().texts)
vm = minilm()
clean = cached_embed(vm, texts, model_name=vm.name)
victim = Lookup(vm, texts, clean)
t0 = time.time()
key = WatermarkKey.generate(
    texts,
    victim,
    target_text=TARGET_TEXT,
    seed=seed,
    window=vm.max_tokens,
    min_cosine=0.995,
    marking="words",
)
print("keygen", time.time() - t0, key.info)
clean = clean.astype(np.float64)
answers = watermark(texts, clean, key)
rng = np.random.default_rng(seed)
train = np.sort(rng.permutation(len(texts))[:-500])
tt = [texts[i] for i in train]
from espew_lab.torch_stealer import TorchEncoderStealer

t0 = time.time()
cw = TorchEncoderStealer(seed=seed).fit(tt, answers[train])
print("torch wm", time.time() - t0)
t0 = time.time()
cc = TorchEncoderStealer(seed=seed).fit(tt, clean[train])
print("torch clean", time.time() - t0)
P = list(key.probe_texts)
owner = np.asarray(key.probe_owner)
band = key.band
t = key.target / np.linalg.norm(key.target)


def cos(M):
    M = np.asarray(M, float)
    return (M / np.linalg.norm(M, axis=1, keepdims=True)) @ t


ref = np.asarray(key.probe_reference)
svc = cos(watermark(P, victim(P).astype(float), key))
a = cos(cw(P))
b = cos(cc(P))
is_tr = np.array([w in key.triggers for w in band])
# training doc counts per band word
bidx = {w: i for i, w in enumerate(band)}
ntrain = np.zeros(len(band))
for i in train:
    for w in set(tokenize(texts[i])):
        if w in bidx:
            ntrain[bidx[w]] += 1
intrain = np.array([p in set(tt) for p in P])


def pw(x):
    return np.bincount(owner, weights=x, minlength=len(band)) / np.bincount(
        owner, minlength=len(band)
    )


S_svc = pw(svc - ref)
S_wm = pw(a - b)
raw = pw(a)
refw = pw(ref)
c = refw - refw.mean()
slope = c @ (raw - raw.mean()) / (c @ c)
adj = raw - slope * refw
print("slope", slope, "in-train probe frac", intrain.mean())
print("service shift: trig %.4f benign %.4f" % (S_svc[is_tr].mean(), S_svc[~is_tr].mean()))
print(
    "copy shift (wm-shadow): trig %.4f +- %.4f ; benign %.4f sd %.4f"
    % (S_wm[is_tr].mean(), S_wm[is_tr].std(), S_wm[~is_tr].mean(), S_wm[~is_tr].std())
)
print(
    "copy adjusted: trig-benign %.4f ; benign sd %.4f"
    % (adj[is_tr].mean() - adj[~is_tr].mean(), adj[~is_tr].std())
)
print("shadow-corrected (a-b) benign sd", S_wm[~is_tr].std())
# per probe in-train vs held-out
pt = np.isin(owner, np.flatnonzero(is_tr))
d = a - b
print(
    "probe shift trig in-train %.4f (n=%d) held-out %.4f (n=%d)"
    % (
        d[pt & intrain].mean(),
        (pt & intrain).sum(),
        d[pt & ~intrain].mean() if (pt & ~intrain).any() else np.nan,
        (pt & ~intrain).sum(),
    )
)
for w in np.flatnonzero(is_tr):
    print(
        f"  {band[w]:15s} ntrain={ntrain[w]:4.0f} svc={S_svc[w]:.4f} copy={S_wm[w]:.4f} adj_z={(adj[w] - adj[~is_tr].mean()) / adj[~is_tr].std():.2f}"
    )
print("corr(copy shift, ntrain) over triggers", np.corrcoef(S_wm[is_tr], ntrain[is_tr])[0, 1])
from scipy.stats import mannwhitneyu

for name, s in [("raw", raw), ("adj", adj), ("shadow", S_wm)]:
    print(name, mannwhitneyu(s[is_tr], s[~is_tr], alternative="greater").pvalue)
np.savez(
    f"/tmp/bench_carry_{seed}.npz",
    a=a,
    b=b,
    svc=svc,
    ref=ref,
    owner=owner,
    is_tr=is_tr,
    ntrain=ntrain,
    intrain=intrain,
)
