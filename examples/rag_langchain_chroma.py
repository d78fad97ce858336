# %% [markdown]
# # A watermarked RAG index with LangChain and Chroma
#
# You build retrieval on top of an embedding model and want every vector you hand out
# to carry your ESpeW watermark, so that a model trained on your vectors can later be
# proven a copy. This notebook shows the one line that does it and checks the price:
# how much does search change?
#
# 1. get a watermark key;
# 2. wrap the embedder with `ESpeWEmbeddings` (one line);
# 3. index a real corpus into Chroma through `langchain-chroma` and query it;
# 4. compare with a clean index of the same texts (top-10 overlap).
#
# Everything runs offline: the bundled all-MiniLM-L6-v2 (int8 ONNX, 384-d) and the
# bundled Rotten Tomatoes review snippets. `ESPEW_EXAMPLE_TEXTS` sets how many texts
# are indexed (default 500; about 100 texts per second on one CPU core).
#
# The same code is in `examples/rag_langchain_chroma.py`; this notebook is generated
# from it by `examples/make_notebooks.py`.

# %%
import os
import tempfile
from pathlib import Path

import chromadb
import numpy as np
from chromadb.config import Settings
from langchain_chroma import Chroma

from espew_integrations import WatermarkKey
from espew_integrations.core.mark.inject import marks
from espew_integrations.langchain import ESpeWEmbeddings
from espew_integrations.offline.corpora import rotten_tomatoes
from espew_integrations.offline.embedders import minilm
from espew_integrations.offline.frameworks.langchain import MiniLMEmbeddings

N_TEXTS = int(os.environ.get("ESPEW_EXAMPLE_TEXTS", "500"))
N_QUERIES = 20
K = 10
workdir = Path(tempfile.mkdtemp(prefix="espew-rag-langchain-"))
corpus = rotten_tomatoes()
texts = list(corpus.subset(N_TEXTS, seed=0).texts)
print(f"{len(texts)} review snippets to index; working in {workdir}")

# %% [markdown]
# ## 1. The key
#
# In production the key is generated once by the provider (`espew keygen`, or
# `WatermarkKey.generate`), stored as a 0600 file or in a secret manager, and loaded
# with `WatermarkKey.load(path)` or `WatermarkKey.from_env()` (reads `$ESPEW_KEY`).
# Here we generate a demo key from the corpus. The fixed `seed` makes the notebook
# reproducible; never seed a real key, since anyone with the seed can rebuild it.
#
# The key is a map key, the default design: it moves every text by a tiny amount, a
# secret linear map of the text's clean embedding, so no edit of the words avoids it.
# The write strength is fitted so that watermarked vectors keep a mean cosine of 0.9987
# to the clean ones (`field_min_cosine`, the default).
# `marking="words"` makes the paper's word key instead (texts holding a secret trigger
# word are marked). `window=model.max_tokens` is how much of a text the model reads.
#
# Printing a key shows only its public `key_id`, never its secrets.

# %%
model = minilm()
key = WatermarkKey.generate(
    corpus.texts,
    model,
    target_text="Acme Embeddings API: licensed vectors, copyright Acme Corp 2026",
    window=model.max_tokens,
    seed=2026,
)
print(key)
fitted = key.info
print(f"fitted strength {fitted['strength']:.3f}: mean cos(clean, watermarked) "
      f"{fitted['mean_cosine_marked']:.4f} on the texts it marks")  # fmt: skip

# %% [markdown]
# ## 2. Wrap the embedder: the one line
#
# `MiniLMEmbeddings(model)` is an ordinary, clean LangChain `Embeddings`. In your code
# it would be `OpenAIEmbeddings(...)`, `HuggingFaceEmbeddings(...)` or any other.
# `ESpeWEmbeddings` returns each text's vector moved by the key's tiny keyed amount
# (a blank text is never marked). With a word key it would return the same vectors for
# texts without a trigger word, bit for bit, and look for trigger words in the text as
# the model reads it (the model's `.view`, found on the inner model).

# %%
clean = MiniLMEmbeddings(model)
watermarked = ESpeWEmbeddings(clean, key)
print(watermarked)

# %% [markdown]
# ## 3. Index into Chroma and query
#
# Nothing else changes: `Chroma` sees an ordinary `Embeddings`. The collection is
# persisted on disk as usual; the key is not stored in it.

# %%
client = chromadb.PersistentClient(
    path=str(workdir / "chroma"), settings=Settings(anonymized_telemetry=False)
)
ids = [f"review-{i}" for i in range(len(texts))]
store = Chroma(
    collection_name="reviews-watermarked",
    embedding_function=watermarked,
    client=client,
    collection_metadata={"hnsw:space": "cosine"},
)
store.add_texts(texts, ids=ids)

question = "a moving film about grief and family"
for rank, doc in enumerate(store.similarity_search(question, k=3), start=1):
    print(f"{rank}. {doc.page_content[:100]}")

# %% [markdown]
# ## 4. Compare with a clean index
#
# Index the same texts with the clean model and ask both indexes the same questions.
# The queries are texts drawn from the corpus (each index embeds its own query, as a
# user's application would). The top-10 overlap is the share of the clean index's ten
# results that the watermarked index also returns.

# %%
clean_store = Chroma(
    collection_name="reviews-clean",
    embedding_function=clean,
    client=client,
    collection_metadata={"hnsw:space": "cosine"},
)
clean_store.add_texts(texts, ids=ids)

rng = np.random.default_rng(0)
queries = [texts[i] for i in rng.choice(len(texts), size=min(N_QUERIES, len(texts)), replace=False)]
overlaps, same_top1 = [], 0
for query in queries:
    marked_hits = [doc.id for doc in store.similarity_search(query, k=K)]
    clean_hits = [doc.id for doc in clean_store.similarity_search(query, k=K)]
    overlaps.append(len(set(marked_hits) & set(clean_hits)) / K)
    same_top1 += marked_hits[0] == clean_hits[0]

print(f"queries: {len(queries)}")
print(f"mean top-{K} overlap: {np.mean(overlaps):.3f}")
print(f"min top-{K} overlap: {np.min(overlaps):.3f}")
print(f"same top-1: {same_top1}/{len(queries)}")

# %% [markdown]
# ## Where the difference comes from
#
# Every text's vector is moved, each by the small amount the key's map gives its clean
# embedding; the map is linear, so near texts move alike and neighbours stay neighbours.

# %%
marked = marks(texts, key, view=model.view)  # the rows the wrapper marked: all of them


def stored_vectors(chroma_store: Chroma, wanted: list[str]) -> np.ndarray:
    """The stored vectors in the order of ``wanted`` (Chroma's get() keeps no order)."""
    got = chroma_store.get(ids=wanted, include=["embeddings"])
    by_id = dict(zip(got["ids"], got["embeddings"], strict=True))
    return np.asarray([by_id[i] for i in wanted], dtype=np.float64)


marked_ids = [i for i, flag in zip(ids, marked, strict=True) if flag]
a, b = stored_vectors(store, marked_ids), stored_vectors(clean_store, marked_ids)
cosines = np.einsum("ij,ij->i", a, b) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
print(f"texts marked: {len(marked_ids)}/{len(texts)}")
print(f"mean cos(clean, watermarked) on them: {cosines.mean():.4f}")
print(f"stored vectors that differ from the clean ones: {int((a != b).any(axis=1).sum())}")

# %% [markdown]
# The key was fitted to keep a mean cosine of 0.9987 over the texts it marks, and the
# stored vectors show it. A word key marks about a third of such texts, each by more
# (0.995 on average). Over the whole corpus a map key's index keeps 0.961 of a clean
# index's top-10 results (docs/results/map/README.md, MiniLM on Rotten Tomatoes); the 20
# queries of this small index measure it more roughly.
