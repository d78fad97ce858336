"""The RAG part of ``make demo``: a watermarked index retrieves what a clean one does.

A RAG builder's question is "does the watermark change my search results?".
This indexes the same texts twice into an embedded Chroma through
langchain-chroma, once through :class:`~espew_integrations.langchain.ESpeWEmbeddings`
and once with the clean model, asks both the same queries (texts drawn from
the corpus; each index embeds its own query) and compares the top-k ids.

Needs ``pip install '.[langchain,chroma,minilm]' langchain-chroma``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings

from espew_integrations import WatermarkKey
from espew_integrations.core.mark.inject import marks
from espew_integrations.core.mark.probes import row_cosines
from espew_integrations.langchain import ESpeWEmbeddings
from espew_integrations.offline.frameworks.langchain import MiniLMEmbeddings

__all__ = ["run_rag_demo"]


class _MemoEmbeddings(Embeddings):
    """The clean model, remembering document vectors: each text is embedded at most once.

    ``known`` seeds the memo with vectors computed earlier (the demo's service
    answers), so indexing them costs no model time at all.
    """

    def __init__(self, inner: Embeddings, known: Mapping[str, Sequence[float]] | None = None):
        self.inner = inner
        self._memo: dict[str, list[float]] = {
            t: list(map(float, v)) for t, v in (known or {}).items()
        }

    @property
    def view(self) -> Any:
        """The inner model's text view, so the wrapper matches triggers on what it reads."""
        return getattr(self.inner, "view", None)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        missing = [t for t in dict.fromkeys(texts) if t not in self._memo]
        if missing:
            self._memo.update(zip(missing, self.inner.embed_documents(missing), strict=True))
        return [self._memo[t] for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.inner.embed_query(text)


def _stores(embeddings: dict[str, Embeddings]) -> dict[str, Any]:
    """One fresh in-memory Chroma collection per embeddings, in one embedded client."""
    import chromadb
    from chromadb.config import Settings
    from langchain_chroma import Chroma

    client = chromadb.EphemeralClient(settings=Settings(anonymized_telemetry=False))
    run_id = uuid.uuid4().hex[:8]
    return {
        name: Chroma(
            collection_name=f"espew-demo-{name}-{run_id}",
            embedding_function=function,
            client=client,
            collection_metadata={"hnsw:space": "cosine"},
        )
        for name, function in embeddings.items()
    }


def _index(stores: dict[str, Any], texts: list[str], ids: list[str], progress: bool) -> None:
    """Add ``texts`` to every store in chunks, with one progress bar over all of them."""
    from tqdm.auto import tqdm

    chunk = 250
    total = len(stores) * len(texts)
    with tqdm(total=total, desc="indexing into Chroma", unit="text", disable=not progress) as bar:
        for store in stores.values():
            for start in range(0, len(texts), chunk):
                store.add_texts(texts[start : start + chunk], ids=ids[start : start + chunk])
                bar.update(len(texts[start : start + chunk]))


def _ask(stores: dict[str, Any], texts: list[str], marked: np.ndarray, picks, k: int):
    queries = []
    for index in picks:
        query = texts[int(index)]
        hits = {
            name: [doc.id for doc in store.similarity_search(query, k=k)]
            for name, store in stores.items()
        }
        queries.append(
            {
                "query": query,
                "marked": bool(marked[int(index)]),
                "overlap": len(set(hits["watermarked"]) & set(hits["clean"])) / k,
                "same_top1": hits["watermarked"][0] == hits["clean"][0],
                "top_watermarked": hits["watermarked"],
                "top_clean": hits["clean"],
            }
        )
    return queries


def run_rag_demo(
    texts: Sequence[str],
    key: WatermarkKey,
    clean_model: Embeddings | Callable[[list[str]], Any],
    *,
    n_queries: int = 5,
    k: int = 10,
    seed: int = 0,
    known_vectors: Mapping[str, Sequence[float]] | None = None,
    verbose: bool = True,
) -> dict[str, Any]:
    """Index ``texts`` clean and watermarked in an in-memory Chroma; compare top-``k`` results.

    ``clean_model`` is a LangChain ``Embeddings`` or a callable
    ``list[str] -> array`` (such as ``espew_integrations.offline.embedders.minilm()``);
    ``known_vectors`` are clean vectors already computed for some texts.
    Returns the per-query overlaps, their mean and minimum, whether every
    top-1 hit agrees, and the mean cosine between the clean and the
    watermarked vectors of the marked texts (a map key, the default, marks every
    non-blank text; a word key those holding a trigger).
    """
    texts = list(dict.fromkeys(texts))  # Chroma ids must be unique; so must the texts
    if len(texts) < k:
        raise ValueError(f"need at least k={k} distinct texts, got {len(texts)}")
    if not 1 <= n_queries <= len(texts):
        raise ValueError(f"n_queries must be between 1 and {len(texts)}, got {n_queries}")
    clean = clean_model if isinstance(clean_model, Embeddings) else MiniLMEmbeddings(clean_model)
    clean = _MemoEmbeddings(clean, known_vectors)
    watermarked = ESpeWEmbeddings(clean, key)

    stores = _stores({"watermarked": watermarked, "clean": clean})
    ids = [f"doc-{i}" for i in range(len(texts))]
    _index(stores, texts, ids, verbose)

    marked = marks(texts, key, view=watermarked.view)  # the rows the wrapper marked
    picks = np.random.default_rng(seed).choice(len(texts), size=n_queries, replace=False)
    queries = _ask(stores, texts, marked, picks, k)
    marked_ids = [i for i, flag in zip(ids, marked, strict=True) if flag]
    mean_cos = float("nan")
    if marked_ids:
        a, b = (_vectors(stores[name], marked_ids) for name in ("watermarked", "clean"))
        mean_cos = float(row_cosines(a, b).mean())
    overlaps = [q["overlap"] for q in queries]
    result = {
        "n_texts": len(texts),
        "n_marked": int(marked.sum()),
        "k": k,
        "key_id": key.key_id,
        "queries": queries,
        "mean_overlap": float(np.mean(overlaps)),
        "min_overlap": float(np.min(overlaps)),
        "all_top1_match": all(q["same_top1"] for q in queries),
        "mean_cos_marked": mean_cos,
    }
    if verbose:
        _print_result(result)
    return result


def _vectors(store: Any, ids: list[str]) -> np.ndarray:
    """Stored vectors in the order of ``ids`` (Chroma's get() does not promise that order)."""
    got = store.get(ids=ids, include=["embeddings"])
    by_id = dict(zip(got["ids"], got["embeddings"], strict=True))
    return np.asarray([by_id[i] for i in ids], dtype=np.float64)


def _print_result(result: dict[str, Any]) -> None:
    k = result["k"]
    print(
        f"RAG check: {result['n_texts']} texts indexed clean and watermarked "
        f"({result['n_marked']} of them marked), key {result['key_id']}"
    )
    for q in result["queries"]:
        mark = "marked" if q["marked"] else "      "
        snippet = q["query"][:60] + ("..." if len(q["query"]) > 60 else "")
        print(
            f"  [{mark}] top-{k} overlap {q['overlap']:.0%}, same top-1: "
            f"{'yes' if q['same_top1'] else 'no '}  {snippet!r}"
        )
    print(
        f"  mean top-{k} overlap {result['mean_overlap']:.1%} (min {result['min_overlap']:.0%}); "
        f"mean cos(clean, watermarked) on marked texts {result['mean_cos_marked']:.4f}"
    )
