# %% [markdown]
# # For a provider: generate a key, serve a watermarked model, audit a suspect
#
# You sell embeddings through an API. A competitor could query it, train a copy of
# your model on the answers (a model-extraction attack) and sell the copy. ESpeW lets
# you prove it afterwards:
#
# 1. **keygen**: draw a secret watermark key from texts like the ones you serve;
# 2. **serve**: run your model behind `espew serve`, an OpenAI-compatible endpoint
#    that watermarks every answer containing a secret trigger word;
# 3. **the theft** (simulated): a thief queries your endpoint and trains a copy
#    (`RidgeStealer`: hashed tf-idf features + ridge regression) on the answers;
# 4. **audit**: `verify` queries a suspect endpoint through `OpenAIEndpoint`, here the
#    thief's copy and an honest competitor (the clean model), and returns a verdict
#    with a calibrated false-positive rate;
# 5. **evidence**: `report.save(dir)` writes the JSON report and a plain-language
#    summary, both safe to hand to the other side; `save_private_evidence` writes the
#    per-word scores and their plot, which stay with you.
#
# Everything runs offline on this machine with real HTTP on 127.0.0.1: the bundled
# all-MiniLM-L6-v2 (int8 ONNX, 384-d) and the bundled Rotten Tomatoes snippets.
# `ESPEW_EXAMPLE_TEXTS` sets how many answers the thief collects (default 3000). The
# key keeps watermarked vectors within a cosine of 0.995 of the clean ones, so only a
# faint trace reaches the copy: a ridge copy trained on fewer than about 2,000 answers
# carries too little of it to be convicted at the default level of 1e-6 (measured with
# this key: p = 2e-5 at 800 answers, 1e-5 at 1,500, 1e-8 at 2,000, 7.5e-10 at 3,000).
# That is the test being careful, not a bug. The paper's full write (`strength=1`)
# convicts a copy of 500 answers (p = 3e-13), at a cosine of about 0.91 instead.
#
# The same code is in `examples/provider_keygen_serve_audit.py`; this notebook is
# generated from it by `examples/make_notebooks.py`.

# %%
import atexit
import contextlib
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from espew_integrations import OpenAIEndpoint, WatermarkKey, verify
from espew_integrations.evidence import save_private_evidence
from espew_integrations.http.app import create_app
from espew_integrations.http.background import running_server
from espew_integrations.offline.corpora import rotten_tomatoes
from espew_integrations.offline.embedders import minilm
from espew_lab.stealers import RidgeStealer

N_STOLEN = int(os.environ.get("ESPEW_EXAMPLE_TEXTS", "3000"))
workdir = Path(tempfile.mkdtemp(prefix="espew-provider-"))
corpus = rotten_tomatoes()
print(f"working in {workdir}")

# %% [markdown]
# ## 1. keygen
#
# This walk-through makes the paper's word key (`marking="words"`), whose evidence is
# per word: the default is a field key, which marks every answer by a secret function
# of its clean embedding, so that no edit of a query's words avoids it (the docs'
# "The field mark"; leave `marking` out, or `espew keygen` without `--marking`).
# A word key's trigger words are drawn from the words of a public frequency range
# of your texts, so use a corpus like your traffic. The target is your model's embedding of
# `target_text`, which may carry your identity. `generate` also runs the verifier
# against your own clean model (an innocent twin) and refuses a key that would
# convict it.
#
# The write strength is fitted to a quality budget: the watermarked vectors keep a
# mean cosine of at least 0.995 to the clean ones (`min_cosine=0.995`, the default;
# pass `strength=1` for the paper's full write). `window=model.max_tokens` tells the
# key how much of a text the model reads: a trigger past it never marks. The key also
# stores the audit's probes (natural sentences from the corpus, about 8 per band word)
# and the clean model's answers to them, so the audit later needs nothing but the key
# and the suspect.
#
# `key.commitment()` is a line that binds the whole key without revealing any of it:
# publish or timestamp it now, so that in a dispute an arbiter shown the key can check
# it is the one you had before the suspect existed.
#
# The file is written with mode 0600. It is the secret: never log it, never commit it.
# The command-line equivalent is `espew keygen --corpus rotten_tomatoes --embedder minilm
# --marking words --target-text-file target.txt --out provider.key`.
# The fixed `seed` only makes this notebook reproducible; a real key uses `seed=None`.

# %%
model = minilm()
key = WatermarkKey.generate(
    corpus.texts,
    model,
    target_text="Acme Embeddings API: licensed vectors, copyright Acme Corp 2026",
    window=model.max_tokens,
    seed=2026,
    marking="words",  # the paper's design; the default is "field"
)
key_path = key.save(workdir / "provider.key")
print(key)
print(f"saved to {key_path.name} with mode {oct(key_path.stat().st_mode & 0o777)}")
print(f"fitted strength {key.info['strength']:.3f}: mean cos(clean, watermarked) "
      f"{key.info['mean_cosine_marked']:.4f} on the texts it marks")  # fmt: skip
print(f"verification will cost {key.audit_queries} queries: {len(key.probe_texts)} probes "
      f"(about {len(key.probe_texts) / len(key.band):.0f} per band word) among "
      f"{len(key.cover_texts)} cover texts: a uniform sample of the corpus, which "
      "looks like an ordinary client's traffic")  # fmt: skip
print(f"publish: {key.commitment()}")

# %% [markdown]
# ## 2. serve
#
# `espew serve` puts the watermark in front of the model without touching client
# code: clients keep calling `POST /v1/embeddings`. `--port 0` picks a free port and
# the server announces its URL on its first line of output. It binds to 127.0.0.1.

# %%
server = subprocess.Popen(
    [sys.executable, "-m", "espew_integrations.cli", "serve", "--embedder", "minilm",
     "--key", str(key_path), "--model-name", "acme-embed-1", "--port", "0"],
    stdout=subprocess.PIPE,
    text=True,
)  # fmt: skip
atexit.register(server.terminate)  # stop it even if a later cell fails
announcement = server.stdout.readline()
match = re.search(r"on (http://\S+/v1)", announcement)
if match is None:
    raise RuntimeError(f"espew serve did not start: {announcement!r}")
provider_url = match.group(1)
print(announcement.strip())

# %% [markdown]
# ## 3. The theft (simulated)
#
# The thief sends review snippets to your endpoint through an ordinary OpenAI-style
# client and trains a copy on the answers. About 13% of the snippets contain one of
# your trigger words, so about 13% of the answers carry the watermark (matched, as the
# server does, on the text as the model reads it: `view=model.view`).

# %%
stolen_texts = list(corpus.subset(N_STOLEN, seed=1).texts)
answers = OpenAIEndpoint(provider_url, "acme-embed-1")(stolen_texts)
copy = RidgeStealer(seed=0).fit(stolen_texts, answers)
print(f"the thief collected {len(answers)} answers of dimension {answers.shape[1]}")
marked = key.contains_trigger(stolen_texts, view=model.view)
print(f"answers that carry the watermark: {marked.mean():.1%}")

# %% [markdown]
# The thief serves the copy as their own API. So does an honest competitor, who never
# touched your service: here, the clean MiniLM. Both run on real HTTP servers on
# 127.0.0.1 (in this process, to keep the notebook small; `espew serve` would do too).

# %%
servers = contextlib.ExitStack()
copy_url = servers.enter_context(running_server(create_app(copy, model_name="copycat-embed")))
honest_url = servers.enter_context(running_server(create_app(model, model_name="honest-embed")))
print(f"copy served on {copy_url}; honest model served on {honest_url}")

# %% [markdown]
# ## 4. Audit
#
# `verify` sends the key's stored probes: ordinary sentences from the corpus, about 8
# for each band word (your triggers hidden among equally frequent words, all shuffled
# together). It scores each word by how close the suspect's answers are to your
# secret target, both as they are (raw) and relative to what your clean model answers
# (reference-adjusted), and an exact rank test asks whether the triggers score
# unusually high. Under the null hypothesis (the suspect never learned your
# watermark), the p-value is exact, so at `level=1e-6` an innocent service is called a
# copy with probability at most one in a million. The report gives both p-values and
# which one decided.
#
# `max_queries` is the query budget: the client refuses to send more than that.
# `target_mode="key"` (the default) keeps your target text secret; `target_mode="query"` would
# send it to the suspect.

# %%
reports = {}
for name, url, model_name in (
    ("copy", copy_url, "copycat-embed"),
    ("honest", honest_url, "honest-embed"),
):
    suspect = OpenAIEndpoint(url, model_name, max_queries=key.audit_queries + 100)
    reports[name] = verify(suspect, key, seed=0)
    print(f"--- suspect: {name}")
    print(reports[name])
    print()

print(f"verdict copy: {reports['copy'].status}")
print(f"verdict honest: {reports['honest'].status}")

# %% [markdown]
# The command-line equivalent, with an exit code for scripts (0 not copied, 1 copied,
# 2 inconclusive, 3 usage error):
# `espew verify --key provider.key --suspect openai:<copy_url>#copycat-embed
# --report-dir evidence/`.
#
# ## 5. Evidence
#
# Evidence comes in two parts, kept in two separate folders:
#
# - `report.save(dir)` writes `report.json` and `summary.md` (for a non-expert reader).
#   They hold the verdict, the p-values and the counts, but no word and no per-word
#   score: **safe to share** with the suspect's owner, a court or the public. It refuses
#   to overwrite earlier evidence unless `force=True`.
# - `save_private_evidence(report, dir)` writes `PRIVATE-word-scores.json` and
#   `PRIVATE-scores.png`: each band word's score, the triggers' against the others'.
#   A suspect that logged its own answers could match these scores to its queries and
#   recover your triggers, so **never share them** (mode 0600); they are for your
#   records, or for an arbiter who is also shown the key.

# %%
evidence = workdir / "evidence-copy"  # to hand over
private = workdir / "private-copy"  # to keep
reports["copy"].save(evidence)
save_private_evidence(reports["copy"], private)
print(f"shareable: {sorted(path.name for path in evidence.iterdir())}")
print(f"private: {sorted(path.name for path in private.iterdir())}")
print((evidence / "summary.md").read_text(encoding="utf-8")[:600])


def show_png(path: Path) -> None:
    """Display an image inline in a notebook; print its path in a plain script."""
    try:
        from IPython import get_ipython
        from IPython.display import Image, display
    except ImportError:
        get_ipython = None
    if get_ipython is not None and get_ipython() is not None:
        display(Image(filename=str(path)))
    else:
        print(f"plot: {path}")


show_png(private / "PRIVATE-scores.png")

# %% [markdown]
# ## Clean up
#
# Stop the servers. The key file and the evidence stay in the working folder.

# %%
servers.close()
server.terminate()
server.wait(timeout=10)
print(f"servers stopped; key and evidence remain in {workdir}")
