# %% [markdown]
# # A watermarked RAG index with LlamaIndex and Chroma
#
# The LlamaIndex twin of `rag_langchain_chroma`: wrap the embedding model with
# `ESpeWEmbedding`, build a `VectorStoreIndex` on a `ChromaVectorStore`, retrieve, and
# compare with a clean index of the same nodes.
#
# Everything runs offline: the bundled all-MiniLM-L6-v2 (int8 ONNX, 384-d) and the
# bundled Rotten Tomatoes review snippets. `ESPEW_EXAMPLE_TEXTS` sets how many texts
# are indexed (default 500; about 100 texts per second on one CPU core). No LLM is
# needed: retrieval only embeds.
#
# The same code is in `examples/rag_llamaindex_chroma.py`; this notebook is generated
# from it by `examples/make_notebooks.py`.

# %%
import os
import tempfile
from pathlib import Path

import chromadb
import numpy as np
from chromadb.config import Settings
from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.schema import TextNode
from llama_index.vector_stores.chroma import ChromaVectorStore

from espew_integrations import WatermarkKey, watermark
from espew_integrations.core.mark.inject import marks
from espew_integrations.llama_index import ESpeWEmbedding
from espew_integrations.offline.corpora import rotten_tomatoes
from espew_integrations.offline.embedders import minilm
from espew_integrations.offline.frameworks.llama_index import MiniLMEmbedding

N_TEXTS = int(os.environ.get("ESPEW_EXAMPLE_TEXTS", "500"))
N_QUERIES = 20
K = 10
workdir = Path(tempfile.mkdtemp(prefix="espew-rag-llamaindex-"))
corpus = rotten_tomatoes()
texts = list(corpus.subset(N_TEXTS, seed=0).texts)
print(f"{len(texts)} review snippets to index; working in {workdir}")

# %% [markdown]
# ## 1. The key
#
# In production: `WatermarkKey.load("/secrets/provider.key")` or
# `WatermarkKey.from_env()` (reads `$ESPEW_KEY`). Here a seeded demo key, for a
# reproducible notebook only. It is a map key, the default design: every text is
# moved by a tiny amount, a secret linear map of its clean embedding, its
# strength fitted to the default quality budget (mean cos(clean, watermarked) 0.9987);
# `marking="words"` makes the paper's word key instead. `window=model.max_tokens` is
# how much of a text the model reads.

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
# ## 2. Wrap the embedding model: the one line
#
# `MiniLMEmbedding(model)` is a clean LlamaIndex `BaseEmbedding`; in your code it could
# be `Settings.embed_model`. The wrapper keeps the inner model's batching, `model_name`
# and callbacks, and stores the key privately (it never appears in `model_dump()`).
# With a word key it matches trigger words on the text as the inner model reads it
# (its `.view`).

# %%
clean = MiniLMEmbedding(model)
watermarked = ESpeWEmbedding(clean, key)
print(f"{watermarked.class_name()} around {watermarked.model_name}, key {watermarked.key_id}")

# %% [markdown]
# ## 3. Build the index on Chroma and retrieve
#
# The nodes are given ids so the two indexes can be compared; passing `TextNode`s
# also skips LlamaIndex's text splitter, which these one-sentence snippets do not need.

# %%
client = chromadb.PersistentClient(
    path=str(workdir / "chroma"), settings=Settings(anonymized_telemetry=False)
)


def build_index(name: str, embed_model) -> VectorStoreIndex:
    """A VectorStoreIndex over ``texts`` in its own cosine Chroma collection."""
    collection = client.create_collection(name, configuration={"hnsw": {"space": "cosine"}})
    storage = StorageContext.from_defaults(
        vector_store=ChromaVectorStore(chroma_collection=collection)
    )
    nodes = [TextNode(text=text, id_=f"review-{i}") for i, text in enumerate(texts)]
    return VectorStoreIndex(nodes, storage_context=storage, embed_model=embed_model)


index = build_index("reviews-watermarked", watermarked)
retriever = index.as_retriever(similarity_top_k=K)

question = "a moving film about grief and family"
for rank, hit in enumerate(retriever.retrieve(question)[:3], start=1):
    print(f"{rank}. ({hit.score:.3f}) {hit.node.get_content()[:100]}")

# %% [markdown]
# ## 4. Compare with a clean index
#
# The same nodes, embedded by the clean model. Queries are texts drawn from the
# corpus; each index embeds its own query.

# %%
clean_retriever = build_index("reviews-clean", clean).as_retriever(similarity_top_k=K)

rng = np.random.default_rng(0)
queries = [texts[i] for i in rng.choice(len(texts), size=min(N_QUERIES, len(texts)), replace=False)]
overlaps, same_top1 = [], 0
for query in queries:
    marked_hits = [hit.node.node_id for hit in retriever.retrieve(query)]
    clean_hits = [hit.node.node_id for hit in clean_retriever.retrieve(query)]
    overlaps.append(len(set(marked_hits) & set(clean_hits)) / K)
    same_top1 += marked_hits[0] == clean_hits[0]

print(f"queries: {len(queries)}")
print(f"mean top-{K} overlap: {np.mean(overlaps):.3f}")
print(f"min top-{K} overlap: {np.min(overlaps):.3f}")
print(f"same top-1: {same_top1}/{len(queries)}")

# %% [markdown]
# ## The wrapper is exact
#
# For any batch, the wrapper returns what the core's `watermark()` makes of the clean
# vectors: with the default map key, every non-blank text's row is watermarked (with a
# word key, only the rows of texts holding a trigger, matched on the model's view).
# LlamaIndex hands the wrapper batches of `embed_batch_size` texts; a map key's answer
# does not depend on its batch, and the check still allows float64 rounding (1e-12), as
# an older field key's float64 arithmetic can differ in the last bits between batches.

# %%
sample = texts[:50]
clean_vectors = np.asarray(clean.get_text_embedding_batch(sample))
marked_vectors = np.asarray(watermarked.get_text_embedding_batch(sample))
marked = marks(sample, key, view=model.view)
print(f"texts marked in the sample: {int(marked.sum())}/{len(sample)}")
expected = watermark(sample, clean_vectors, key, view=model.view)
exact = np.allclose(marked_vectors, expected, rtol=0, atol=1e-12)
moved = int((marked_vectors != clean_vectors).any(axis=1).sum())
print(f"equals watermark(texts, clean, key): {exact}")
print(f"rows that differ from the clean ones: {moved}/{len(sample)}")
