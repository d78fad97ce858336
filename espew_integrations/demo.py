"""``make demo``: the whole story end to end, offline, on a real model and a real corpus.

1. A provider generates a key from the Rotten Tomatoes corpus with the
   bundled all-MiniLM-L6-v2 (int8 ONNX), its write strength fitted to the
   quality budget (mean cos(clean, watermarked) >= 0.995 on marked texts),
   prints the key's commitment (the line to publish) and saves it (mode 0600).
2. It watermarks the embeddings its service returns (and we measure the cost).
3. A thief trains an extraction copy on those answers; an honest competitor
   trains the same kind of model on clean embeddings.
4. The provider verifies both suspects, prints both reports and writes the
   shareable evidence (``evidence-*``) apart from the private per-word
   detail (``private-*``).
5. A RAG builder indexes the corpus through the LangChain wrapper into an
   embedded Chroma and sees the same top results as a clean index.

    python -m espew_integrations.demo [--texts 4000] [--alpha 0.2] [--strength S]
                                      [--min-cosine 0.995] [--out demo-output]

The output folder is the demo's own: running the demo again replaces the key
and the evidence in it.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from . import WatermarkKey, verify, watermark
from .core.key import DEFAULT_MIN_COSINE
from .corpora import rotten_tomatoes
from .embedders import minilm
from .evidence import save_private_evidence
from .lab.cache import cached_embed
from .lab.stealers import RidgeStealer

TARGET_TEXT = "Acme Embeddings API: licensed vectors, copyright Acme Corp 2026"


def _step(title: str) -> None:
    print(f"\n=== {title}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="ESpeW end to end on the offline defaults.")
    parser.add_argument("--texts", type=int, default=4000, help="texts the service answers")
    parser.add_argument("--alpha", type=float, default=0.2, help="watermark proportion")
    parser.add_argument(
        "--strength",
        type=float,
        default=None,
        help="write strength (default: fitted to --min-cosine; 1 = the paper's equations)",
    )
    parser.add_argument(
        "--min-cosine",
        type=float,
        default=DEFAULT_MIN_COSINE,
        help="quality budget the strength is fitted to: mean cos(clean, watermarked) on "
        "marked texts (ignored with --strength)",
    )
    parser.add_argument("--seed", type=int, default=2026, help="seed (demo keys only!)")
    parser.add_argument("--out", default=None, help="folder for the key and the evidence")
    parser.add_argument("--skip-rag", action="store_true", help="skip the Chroma RAG part")
    args = parser.parse_args(argv)
    out = Path(args.out or tempfile.mkdtemp(prefix="espew-demo-"))
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()

    _step("1. The provider generates a key (offline MiniLM, Rotten Tomatoes corpus)")
    corpus = rotten_tomatoes()
    model = minilm()
    key = WatermarkKey.generate(
        corpus.texts,
        model,
        target_text=TARGET_TEXT,
        alpha=args.alpha,
        strength=args.strength,
        min_cosine=args.min_cosine,
        window=model.max_tokens,
        seed=args.seed,
    )
    key_path = key.save(out / "provider.key", overwrite=True)
    print(f"{key}  ({len(key.triggers)} secret triggers among {len(key.band)} band words)")
    how = (
        f"fitted to the budget cos >= {args.min_cosine:g}"
        if args.strength is None
        else "fixed by --strength"
    )
    print(f"write strength {key.strength:.4f} ({how}); measured mean cos(clean, watermarked) "
          f"{key.info['mean_cosine_marked']:.4f} on {key.info['cosine_sample_texts']} marked "
          "corpus texts")  # fmt: skip
    print(f"innocent-twin check passed: the clean model's p = {key.info['twin_p_value']:.2f}")
    print(f"saved to {key_path} (mode 0600); only key_id is safe to show")
    print(f"commitment (publish it now; it reveals nothing of the key):\n  {key.commitment()}")

    _step(f"2. The service watermarks its answers ({args.texts} texts)")
    served = corpus.subset(args.texts, seed=0)
    clean = cached_embed(model, served.texts, model_name=model.name, progress=True)
    marked_rows = key.contains_trigger(served.texts, view=model.view)
    tic = time.perf_counter()
    answers = watermark(served.texts, clean, key, view=model.view)
    cost_ms = (time.perf_counter() - tic) * 1000
    cosines = np.einsum("ij,ij->i", answers[marked_rows], clean[marked_rows])
    unchanged = bool((answers[~marked_rows] == clean[~marked_rows]).all())
    print(f"{marked_rows.mean():.1%} of texts contain a trigger and were marked "
          f"({cost_ms:.1f} ms for the batch)")  # fmt: skip
    print(f"mean cos(clean, watermarked) on marked rows: {cosines.mean():.4f} "
          f"(min {cosines.min():.4f}); unmarked rows bit-identical: {unchanged}")  # fmt: skip

    _step("3. Two extraction copies (hashed tf-idf + ridge) are trained")
    thief = RidgeStealer(seed=0).fit(served.texts, answers)
    honest = RidgeStealer(seed=0).fit(served.texts, clean)
    print("thief's copy: trained on the watermarked answers")
    print("honest competitor's model: trained on clean embeddings of the same texts")

    _step(f"4. The provider audits both suspects ({len(key.probe_texts)} stored probes each)")
    reports = {}
    for name, suspect in (("thief", thief), ("honest", honest)):
        report = verify(suspect, key, seed=args.seed)
        # The demo's own folder: a second run replaces its evidence (force=True). For a
        # real audit keep the default, which refuses to overwrite earlier evidence.
        report.save(out / f"evidence-{name}", force=True)
        save_private_evidence(report, out / f"private-{name}", force=True)
        reports[name] = report
        print(f"\n--- suspect: {name}")
        print(report)
        print(f"shareable evidence (report.json, summary.md): {out / f'evidence-{name}'}")
        print(f"private per-word scores (PRIVATE-*, never share): {out / f'private-{name}'}")

    if not args.skip_rag:
        _step("5. A RAG builder indexes the corpus through the LangChain wrapper into Chroma")
        from .demo_rag import run_rag_demo

        run_rag_demo(list(served.texts[:1000]), key, model, n_queries=5)

    ok = reports["thief"].copied and reports["honest"].status == "not_copied"
    print(f"\nDemo finished in {time.perf_counter() - started:.0f} s: "
          f"thief {'convicted' if reports['thief'].copied else 'NOT convicted'}, "
          f"honest competitor {reports['honest'].status.replace('_', ' ')}.")  # fmt: skip
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
