"""How far apart are two answers of one embedding service to one text? (requery tolerance)

``espew evidence check --requery SUSPECT`` asks the suspect again a keyed random
subset of the texts an audit's transcript records and compares each answer with
the recorded one. Its tolerance must sit above the float noise of an honest
service asked twice (another batch, another order, another thread count, the
float or base64 encoding) and far below what a forger changes. This measures,
on the bundled offline models and on ``espew serve`` (the real HTTP server,
clean and watermarked), the distance between repeated answers of the same
texts, and, for scale, how far the watermark moves a marked answer (the least a
forger who swaps in a watermarked service's answers changes).

The distance is the requery's own: ``||a - r|| / ||r||`` (relative L2,
:func:`espew_integrations.requery.answer_distances`), with the max absolute
difference and the min cosine beside it. The embedding store is off, so every
answer is computed again. Run (about a minute on 2 cores):

    python benchmarks/bench_requery_tolerance.py --texts 300 \
        > docs/results/requery-tolerance.txt
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable, Sequence

import numpy as np

from espew_integrations import OpenAIEndpoint, WatermarkKey, watermark
from espew_integrations.core.records.requery import answer_distances
from espew_integrations.http.app import create_app
from espew_integrations.http.background import running_server
from espew_integrations.offline.corpora import rotten_tomatoes
from espew_integrations.offline.data import PARAPHRASE_MINILM, data_file
from espew_integrations.offline.embedders import OnnxSentenceEncoder, minilm_files

Embed = Callable[[Sequence[str]], np.ndarray]


def encoder(name: str, threads: int) -> OnnxSentenceEncoder:
    """A fresh encoder with ``threads`` ONNX threads and no embedding store."""
    os.environ["ESPEW_ONNX_THREADS"] = str(threads)
    model, tokenizer = minilm_files()
    if name == "paraphrase-MiniLM-L3-v2":
        model = data_file(PARAPHRASE_MINILM)
    return OnnxSentenceEncoder(model, tokenizer, name=name, store_dir=None)


def batched(embed: Embed, texts: list[str], size: int, seed: int) -> np.ndarray:
    """``embed`` over ``texts`` in a shuffled order, ``size`` texts a call, rows put back."""
    order = np.random.default_rng(seed).permutation(len(texts))
    out = np.empty((len(texts), 0))
    parts = [embed([texts[i] for i in order[s : s + size]]) for s in range(0, len(texts), size)]
    rows = np.concatenate(parts).astype(np.float64)
    out = np.empty_like(rows)
    out[order] = rows
    return out


def row(label: str, reference: np.ndarray, answers: np.ndarray) -> str:
    distance = answer_distances(reference, answers)
    cosine = np.sum(reference * answers, axis=1) / (
        np.linalg.norm(reference, axis=1) * np.linalg.norm(answers, axis=1)
    )
    return (
        f"| {label} | {distance.max():.3g} | {np.abs(reference - answers).max():.3g} "
        f"| {1 - cosine.min():.3g} | {int((distance == 0).sum())} of {len(distance)} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=300, help="Rotten Tomatoes texts asked")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    started = time.time()
    texts = list(rotten_tomatoes().subset(args.texts, seed=args.seed).texts)
    header = (
        "| answers compared with the one-text-a-call answers | max rel. L2 | max abs "
        "| max 1-cos | identical rows |"
    )
    print(f"{args.texts} Rotten Tomatoes texts (subset seed {args.seed}); store off\n")
    print(header + "\n|---|---|---|---|---|")
    models = {}
    for name in ("all-MiniLM-L6-v2-int8", "paraphrase-MiniLM-L3-v2"):
        one = encoder(name, threads=1)
        reference = batched(one, texts, 1, args.seed).astype(np.float64)
        models[name] = (one, reference)
        print(row(f"{name}: batches of 64, shuffled", reference, batched(one, texts, 64, 1)))
        print(row(f"{name}: again, one a call", reference, batched(one, texts, 1, 2)))
        two = encoder(name, threads=2)
        print(row(f"{name}: 2 ONNX threads, batches of 16", reference, batched(two, texts, 16, 3)))

    model, reference = models["all-MiniLM-L6-v2-int8"]
    key = WatermarkKey.generate(
        list(rotten_tomatoes().subset(3000, seed=1).texts),
        model,
        window=model.max_tokens,
        target_text="Acme Embeddings service, 2026 edition",
        seed=1,
        n_triggers=20,
        max_band_words=80,
        marking="words",  # the paper's design, as measured
    )
    marked = watermark(texts, reference.astype(np.float32), key, view=model.view)
    hit = np.any(marked != reference, axis=1)
    for label, served_key in (("clean", None), ("watermarked", key)):
        with running_server(create_app(model, key=served_key, model_name="m")) as url:
            runs = {}
            for size, encoding in ((1, "float"), (7, "base64"), (64, "float"), (64, "base64")):
                client = OpenAIEndpoint(url, "m", encoding_format=encoding, batch_size=size)
                with client:
                    runs[size, encoding] = batched(client, texts, size, size)
        expected = reference if served_key is None else marked.astype(np.float64)
        first = runs.pop((1, "float"))
        print(row(f"espew serve ({label}), one a call, vs in-process", expected, first))
        for (size, encoding), answers in runs.items():
            print(row(f"espew serve ({label}): batches of {size}, {encoding}", first, answers))
    print(
        f"\nThe watermark's move (key: 20 triggers, 80 band words, default strength), on the "
        f"{int(hit.sum())} of {len(texts)} texts it marks:\n"
    )
    print(header.replace("with the one-text-a-call answers", "") + "\n|---|---|---|---|---|")
    moved = answer_distances(reference[hit], marked[hit])
    print(row("watermarked vs clean, marked texts", reference[hit], marked[hit]))
    print(f"\nsmallest move of a marked answer (rel. L2): {moved.min():.3g}")
    print(f"\n({time.time() - started:.0f} s)")


if __name__ == "__main__":
    main()
