# %% [markdown]
# # For a provider with customers: which account trained the copy?
#
# You sell embeddings to many API customers. One of them queries your API, trains a
# copy of your model on the answers and sells it. `verify` proves the copy; a
# **key ring** also names the account, so you can close it and show its logs:
#
# 1. **ring**: one master secret; every customer gets a key of its own
#    (`ring.key_for(account)`), made of a *shared* layer of secret units every key
#    carries and the account's *own* layer, derived from the master (a map ring, the
#    default: every answer is marked, by a secret linear map of its clean embedding);
# 2. **serve** two customers, Alice and Bob, each with their own key;
# 3. **the theft** (simulated): Bob collects answers and trains a copy
#    (`RidgeStealer`: hashed tf-idf features + ridge regression);
# 4. **trace**: one audit of the suspect answers for every account: copied or not,
#    and which accounts' answers trained it, with the chance of naming any innocent
#    account held below the level (1e-6);
# 5. **evidence** that names accounts only by id, never the list of your customers.
#
# Everything runs offline: the bundled all-MiniLM-L6-v2 (int8 ONNX, 384-d) and the
# bundled Rotten Tomatoes snippets. `ESPEW_EXAMPLE_TEXTS` sets how many answers Bob
# collects (default 3000). See docs/tenants.md for the design and the measured figures.
#
# The same code is in `examples/provider_two_customers.py`; this notebook is
# generated from it by `examples/make_notebooks.py`.

# %%
import os
import tempfile
from pathlib import Path

import numpy as np

from espew_integrations import KeyRing, trace, watermark
from espew_integrations.offline.corpora import rotten_tomatoes
from espew_integrations.offline.embedders import minilm
from espew_lab.stealers import RidgeStealer

N_STOLEN = int(os.environ.get("ESPEW_EXAMPLE_TEXTS", "3000"))
workdir = Path(tempfile.mkdtemp(prefix="espew-customers-"))
corpus = rotten_tomatoes()
model = minilm()
print(f"working in {workdir}")

# %% [markdown]
# ## 1. The key ring
#
# Like `WatermarkKey.generate`, from texts like the ones you serve. The strength is
# fitted so that every customer's key keeps mean cos(clean, watermarked) at 0.9987
# (every text is marked). `seed=7` makes this example reproducible; a real ring is
# generated without a seed.

# %%
ring = KeyRing.generate(
    corpus.texts,
    model,
    target_text="Acme Embeddings, licensed vectors",
    window=model.max_tokens,
    seed=7,
)
ring.save(workdir / "provider.ring")
print(ring)
print(
    f"strength {ring.shared_key.strength:.4f}, mean cos(clean, watermarked) on marked "
    f"texts {ring.shared_key.info['mean_cosine_marked']:.4f}"
)

# %% [markdown]
# ## 2. Two customers, two keys
#
# Each API key maps to an account, and each account is served with its own key.
# `espew serve --ring provider.ring --tenants map.json` does the same over HTTP.

# %%
accounts = {"sk-alice": "alice", "sk-bob": "bob"}
keys = {account: ring.key_for(account) for account in accounts.values()}


def embeddings_api(api_key: str, texts: list[str]) -> np.ndarray:
    """What the provider's /v1/embeddings answers one customer."""
    return watermark(texts, model(texts), keys[accounts[api_key]])


for account, key in keys.items():
    print(f"{account}: key {key.key_id}, {len(key.triggers)} secret units of {len(key.band)}")

# %% [markdown]
# ## 3. Bob trains a copy on his answers

# %%
stolen_texts = list(corpus.subset(N_STOLEN, seed=1).texts)
answers = np.concatenate(
    [embeddings_api("sk-bob", stolen_texts[i : i + 256]) for i in range(0, N_STOLEN, 256)]
)
copy = RidgeStealer(seed=0).fit(stolen_texts, answers)
print(f"Bob's copy trained on {N_STOLEN} answers")

# %% [markdown]
# ## 4. Trace the copy, and an honest competitor
#
# One set of probe queries serves every account; the p-values of the accounts are
# adjusted for how many were tested.

# %%
customers = list(accounts.values())
report = trace(copy, ring, customers, seed=0)
print(report)
print(f"copy: copied={report.copied}, traced={list(report.traced)}")
honest = trace(model, ring, customers, seed=0)
print(f"honest competitor: copied={honest.copied}, traced={list(honest.traced)}")

# %% [markdown]
# ## 5. Evidence
#
# `trace.json` names the traced accounts only; `report.json` and `summary.md` are the
# shared layer's public report. None of them carries a per-unit score or the list of
# accounts you tested.

# %%
report.save(workdir / "evidence")
print("shareable:", sorted(p.name for p in (workdir / "evidence").iterdir()))
