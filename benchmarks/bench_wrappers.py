"""What the LangChain, LlamaIndex and Chroma wrappers cost and change, measured in one run.

1. Overhead: the time each wrapper adds over the bare offline MiniLM on 1,000
   real texts, as a ratio wrapped/bare (target <= 1.01). Measured two ways:
   - end to end: all variants interleaved chunk by chunk (100 texts), ratio
     of totals per round, median over rounds; honest but as noisy as the machine;
   - decomposed: the wrapper around a replay model that returns the same clean
     vectors instantly isolates the wrapper's own cost (median of many runs,
     minus the replay's own cost); ratio = (bare + added) / bare.
2. Quality on rotten_tomatoes (2,000 texts, cached MiniLM embeddings):
   top-10 overlap between a clean and a watermarked Chroma index (queries drawn
   from the corpus, each index embeds its own query) and mean
   cos(clean, watermarked) over the triggered rows, for several keys.

Run: ``.venv/bin/python benchmarks/bench_wrappers.py [--rounds 3] [--n-texts 1000]``
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable

import chromadb
import numpy as np
from chromadb.api.types import Documents, EmbeddingFunction, Embeddings
from chromadb.config import Settings
from langchain_core.embeddings import Embeddings as LangChainEmbeddings
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import PrivateAttr

from espew_integrations import WatermarkKey
from espew_integrations.chroma import ESpeWEmbeddingFunction
from espew_integrations.langchain import ESpeWEmbeddings
from espew_integrations.llama_index import ESpeWEmbedding
from espew_integrations.offline.corpora import rotten_tomatoes
from espew_integrations.offline.embedders import minilm
from espew_integrations.offline.frameworks.chroma import MiniLMEmbeddingFunction
from espew_integrations.offline.frameworks.langchain import MiniLMEmbeddings
from espew_integrations.offline.frameworks.llama_index import MiniLMEmbedding
from espew_lab.cache import cached_embed

TARGET_TEXT = "The quarterly revenue figures stay confidential until the board meeting."


# ---------------------------------------------------------------------- replay models
class ReplayLangChain(LangChainEmbeddings):
    """Returns precomputed clean vectors in the inner model's own output type."""

    def __init__(self, table: dict[str, list[float]]) -> None:
        self.table = table

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.table[t] for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.table[text]


class ReplayLlamaIndex(BaseEmbedding):
    _table: dict = PrivateAttr()

    def __init__(self, table: dict[str, list[float]]) -> None:
        super().__init__(model_name="replay")
        self._table = table

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return [self._table[t] for t in texts]

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._table[text]

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._table[query]

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._table[query]


class ReplayChroma(EmbeddingFunction[Documents]):
    def __init__(self, table: dict[str, np.ndarray]) -> None:
        self.table = table

    def __call__(self, input: Documents) -> Embeddings:
        return [self.table[t] for t in input]

    @staticmethod
    def name() -> str:
        return "bench_replay"

    def get_config(self) -> dict:
        return {}

    @staticmethod
    def build_from_config(config: dict) -> ReplayChroma:
        raise ValueError("a replay function cannot be rebuilt")


# ---------------------------------------------------------------------- overhead
def build_pairs(key: WatermarkKey) -> dict[str, tuple[Callable, Callable]]:
    """(bare, wrapped) callables per framework, both running the real model."""
    lc, li, ch = MiniLMEmbeddings(), MiniLMEmbedding(), MiniLMEmbeddingFunction()
    return {
        "LangChain ESpeWEmbeddings": (lc.embed_documents, ESpeWEmbeddings(lc, key).embed_documents),
        "LlamaIndex ESpeWEmbedding": (
            li.get_text_embedding_batch,
            ESpeWEmbedding(li, key).get_text_embedding_batch,
        ),
        "Chroma ESpeWEmbeddingFunction": (ch, ESpeWEmbeddingFunction(ch, key)),
    }


def build_replay_pairs(key: WatermarkKey, texts: list[str]) -> dict[str, tuple[Callable, Callable]]:
    clean = minilm()(texts)
    as_lists = dict(zip(texts, clean.tolist(), strict=True))
    as_arrays = dict(zip(texts, clean, strict=True))
    lc, li, ch = ReplayLangChain(as_lists), ReplayLlamaIndex(as_lists), ReplayChroma(as_arrays)
    return {
        "LangChain ESpeWEmbeddings": (lc.embed_documents, ESpeWEmbeddings(lc, key).embed_documents),
        "LlamaIndex ESpeWEmbedding": (
            li.get_text_embedding_batch,
            ESpeWEmbedding(li, key).get_text_embedding_batch,
        ),
        "Chroma ESpeWEmbeddingFunction": (ch, ESpeWEmbeddingFunction(ch, key)),
    }


def timed(fn: Callable, texts: list[str]) -> float:
    start = time.perf_counter()
    fn(texts)
    return time.perf_counter() - start


def measure_end_to_end(
    pairs, texts: list[str], rounds: int, chunk: int = 100
) -> dict[str, dict[str, float]]:
    """Wrapped/bare time ratios, with every variant interleaved chunk by chunk.

    Each round walks the texts in chunks of ``chunk``; for every chunk all six
    variants (bare and wrapped, three frameworks) run back to back in a rotating
    order, so a burst of load from other processes hits them alike. A round's
    ratio is wrapped total / bare total over the 1,000 texts; rounds give a median.
    """
    variants = [
        (name, label, fn)
        for name, pair in pairs.items()
        for label, fn in zip(("bare", "wrapped"), pair, strict=True)
    ]
    totals = {name: {"bare": [0.0] * rounds, "wrapped": [0.0] * rounds} for name in pairs}
    step = 0
    for round_index in range(rounds):
        for start in range(0, len(texts), chunk):
            part = texts[start : start + chunk]
            shift = step % len(variants)
            step += 1
            for name, label, fn in variants[shift:] + variants[:shift]:
                totals[name][label][round_index] += timed(fn, part)
    results = {}
    for name, series in totals.items():
        ratios = [w / b for w, b in zip(series["wrapped"], series["bare"], strict=True)]
        results[name] = {
            "bare_s": statistics.median(series["bare"]),
            "wrapped_s": statistics.median(series["wrapped"]),
            "median_round_ratio": statistics.median(ratios),
            "min_round_ratio": min(ratios),
            "max_round_ratio": max(ratios),
        }
    return results


def measure_added(replay_pairs, texts: list[str], repeats: int = 41) -> dict[str, float]:
    """Median seconds the wrapper adds over a replay of the same clean vectors."""
    added = {}
    for name, (bare, wrapped) in replay_pairs.items():
        bare_t, wrapped_t = [], []
        for _ in range(repeats):  # interleaved, so drift hits both alike
            bare_t.append(timed(bare, texts))
            wrapped_t.append(timed(wrapped, texts))
        added[name] = max(statistics.median(wrapped_t) - statistics.median(bare_t), 0.0)
    return added


# ---------------------------------------------------------------------- quality
def measure_quality(n_texts: int, n_queries: int, key_seeds: tuple[int, ...]) -> list[dict]:
    corpus = rotten_tomatoes()
    texts = list(corpus.subset(n_texts, seed=0).texts)
    model = minilm()
    clean = cached_embed(model, texts, model_name=model.name)
    table = dict(zip(texts, clean, strict=True))
    client = chromadb.EphemeralClient(settings=Settings(anonymized_telemetry=False))
    ids = [f"doc-{i}" for i in range(len(texts))]
    query_rows = np.random.default_rng(123).choice(len(texts), size=n_queries, replace=False)
    queries = [texts[i] for i in query_rows]

    def top_ids(ef: EmbeddingFunction) -> list[list[str]]:
        collection = client.create_collection(
            f"bench-{uuid.uuid4().hex[:8]}",
            embedding_function=ef,
            configuration={"hnsw": {"space": "cosine"}},
        )
        for start in range(0, len(texts), 1000):
            collection.add(ids=ids[start : start + 1000], documents=texts[start : start + 1000])
        return collection.query(query_texts=queries, n_results=10)["ids"]

    clean_top = top_ids(ReplayChroma(table))
    rows = []
    for seed in key_seeds:
        key = WatermarkKey.generate(
            corpus.texts, model, target_text=TARGET_TEXT, seed=seed, marking="words"
        )
        wrapped = ESpeWEmbeddingFunction(ReplayChroma(table), key)
        marked_top = top_ids(wrapped)
        overlaps = np.array(
            [len(set(a) & set(b)) / 10 for a, b in zip(clean_top, marked_top, strict=True)]
        )
        triggered = key.contains_trigger(texts)
        query_triggered = triggered[query_rows]
        watermarked = np.stack(wrapped(texts))
        cos = np.einsum("ij,ij->i", watermarked[triggered], clean[triggered])
        rows.append(
            {
                "key_seed": seed,
                "triggered_share": float(triggered.mean()),
                "overlap_all": float(overlaps.mean()),
                "overlap_triggered_queries": float(overlaps[query_triggered].mean()),
                "overlap_plain_queries": float(overlaps[~query_triggered].mean()),
                "top1_same": float(
                    np.mean([a[0] == b[0] for a, b in zip(clean_top, marked_top, strict=True)])
                ),
                "mean_cos_triggered": float(cos.mean()),
                "min_cos_triggered": float(cos.min()),
            }
        )
    return rows


# ---------------------------------------------------------------------- main
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="interleaved end-to-end rounds")
    parser.add_argument("--n-texts", type=int, default=1000, help="texts per overhead run")
    parser.add_argument("--quality-texts", type=int, default=2000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--key-seeds", type=int, nargs="+", default=[1, 2, 3])
    args = parser.parse_args()

    corpus = rotten_tomatoes()
    texts = list(corpus.subset(args.n_texts, seed=11).texts)
    key = WatermarkKey.generate(
        corpus.texts, minilm(), target_text=TARGET_TEXT, seed=1, marking="words"
    )
    print(
        f"{len(texts)} real texts (rotten_tomatoes), model {minilm().name}, "
        f"{int(key.contains_trigger(texts).sum())} carry a trigger; key {key.key_id}"
    )

    added = measure_added(build_replay_pairs(key, texts), texts)
    pairs = build_pairs(key)
    for bare, _ in pairs.values():  # warm-up: first-call costs are not the wrapper's
        bare(texts[:20])
    e2e = measure_end_to_end(pairs, texts, args.rounds)

    print(f"\nOverhead on {len(texts)} texts ({args.rounds} interleaved rounds; target <= 1.01)")
    header = (
        f"{'wrapper':32} {'bare s':>8} {'wrapped s':>10} {'e2e ratio':>10} "
        f"{'(min..max)':>15} {'added ms':>9} {'decomposed':>11}"
    )
    print(header)
    for name, row in e2e.items():
        decomposed = (row["bare_s"] + added[name]) / row["bare_s"]
        print(
            f"{name:32} {row['bare_s']:8.2f} {row['wrapped_s']:10.2f} "
            f"{row['median_round_ratio']:10.4f} "
            f"{row['min_round_ratio']:7.4f}..{row['max_round_ratio']:.4f} "
            f"{added[name] * 1e3:9.2f} {decomposed:11.5f}"
        )

    quality = measure_quality(args.quality_texts, args.queries, tuple(args.key_seeds))
    print(
        f"\nQuality: {args.quality_texts} rotten_tomatoes texts, {args.queries} corpus queries, "
        "clean vs watermarked Chroma index (cosine), alpha 0.2, smallest-|value| selection"
    )
    print(
        f"{'key seed':>8} {'triggered':>9} {'top10 all':>10} {'trig q':>7} {'plain q':>8} "
        f"{'top1 same':>9} {'mean cos':>9} {'min cos':>8}"
    )
    for row in quality:
        print(
            f"{row['key_seed']:8d} {row['triggered_share']:9.1%} {row['overlap_all']:10.3f} "
            f"{row['overlap_triggered_queries']:7.3f} {row['overlap_plain_queries']:8.3f} "
            f"{row['top1_same']:9.3f} {row['mean_cos_triggered']:9.4f} "
            f"{row['min_cos_triggered']:8.4f}"
        )
    print(
        f"mean over keys: top-10 overlap {np.mean([r['overlap_all'] for r in quality]):.3f}, "
        f"cos(clean, watermarked) on triggered rows "
        f"{np.mean([r['mean_cos_triggered'] for r in quality]):.4f}"
    )


if __name__ == "__main__":
    main()
