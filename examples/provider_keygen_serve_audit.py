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
# 5. **evidence**: `report.save(dir)` writes the JSON report, a plain-language summary
#    and the plot of the two score distributions.
#
# Everything runs offline on this machine with real HTTP on 127.0.0.1: the bundled
# all-MiniLM-L6-v2 (int8 ONNX, 384-d) and the bundled Rotten Tomatoes snippets.
# `ESPEW_EXAMPLE_TEXTS` sets how many answers the thief collects (default 800). A copy
# trained on fewer than about 500 answers carries too little of the watermark to be
# convicted at the default level of 1e-6 (that is the test being careful, not a bug).
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
from espew_integrations.corpora import rotten_tomatoes
from espew_integrations.embedders import minilm
from espew_integrations.http.server import create_app, running_server
from espew_integrations.lab.stealers import RidgeStealer

N_STOLEN = int(os.environ.get("ESPEW_EXAMPLE_TEXTS", "800"))
workdir = Path(tempfile.mkdtemp(prefix="espew-provider-"))
corpus = rotten_tomatoes()
print(f"working in {workdir}")

# %% [markdown]
# ## 1. keygen
#
# The key's trigger words are drawn from the words that appear in 0.5% to 1% of your
# texts, so use a corpus like your traffic. The target is your model's embedding of
# `target_text`, which may carry your identity. `generate` also runs the verifier
# against your own clean model (an innocent twin) and refuses a key that would
# convict it.
#
# The file is written with mode 0600. It is the secret: never log it, never commit it.
# The command-line equivalent is `espew keygen --corpus rotten_tomatoes --embedder minilm
# --target-text-file target.txt --out provider.key`.
# The fixed `seed` only makes this notebook reproducible; a real key uses `seed=None`.

# %%
key = WatermarkKey.generate(
    corpus.texts,
    minilm(),
    target_text="Acme Embeddings API: licensed vectors, copyright Acme Corp 2026",
    seed=2026,
)
key_path = key.save(workdir / "provider.key")
print(key)
print(f"saved to {key_path.name} with mode {oct(key_path.stat().st_mode & 0o777)}")
print(f"verification will cost {len(key.band)} queries (one per band word)")

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
# your trigger words, so about 13% of the answers carry the watermark.

# %%
stolen_texts = list(corpus.subset(N_STOLEN, seed=1).texts)
answers = OpenAIEndpoint(provider_url, "acme-embed-1")(stolen_texts)
copy = RidgeStealer(seed=0).fit(stolen_texts, answers)
print(f"the thief collected {len(answers)} answers of dimension {answers.shape[1]}")
print(f"answers that carry the watermark: {key.contains_trigger(stolen_texts).mean():.1%}")

# %% [markdown]
# The thief serves the copy as their own API. So does an honest competitor, who never
# touched your service: here, the clean MiniLM. Both run on real HTTP servers on
# 127.0.0.1 (in this process, to keep the notebook small; `espew serve` would do too).

# %%
servers = contextlib.ExitStack()
copy_url = servers.enter_context(running_server(create_app(copy, model_name="copycat-embed")))
honest_url = servers.enter_context(running_server(create_app(minilm(), model_name="honest-embed")))
print(f"copy served on {copy_url}; honest model served on {honest_url}")

# %% [markdown]
# ## 4. Audit
#
# `verify` sends one probe per band word (your triggers hidden among equally frequent
# words, shuffled together) and scores each word by how close the suspect's answer is
# to your secret target. An exact rank test asks whether the triggers score
# unusually high. Under the null hypothesis (the suspect never learned your
# watermark), the p-value is exact, so at `level=1e-6` an innocent service is called a
# copy with probability at most one in a million.
#
# `max_queries` is the query budget: the client refuses to send more than that.
# `target="key"` (the default) keeps your target text secret; `target="query"` would
# send it to the suspect.

# %%
reports = {}
for name, url, model in (
    ("copy", copy_url, "copycat-embed"),
    ("honest", honest_url, "honest-embed"),
):
    suspect = OpenAIEndpoint(url, model, max_queries=2 * len(key.band))
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
# `report.save(dir)` writes `report.json`, `summary.md` (for a non-expert reader) and
# `scores.png`: the suspect's scores for your trigger words against those of the
# other band words.

# %%
evidence = workdir / "evidence-copy"
reports["copy"].save(evidence)
print(sorted(path.name for path in evidence.iterdir()))
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


show_png(evidence / "scores.png")

# %% [markdown]
# ## Clean up
#
# Stop the servers. The key file and the evidence stay in the working folder.

# %%
servers.close()
server.terminate()
server.wait(timeout=10)
print(f"servers stopped; key and evidence remain in {workdir}")
