"""``make demo``: the whole story end to end, offline, on a real model and a real corpus.

1. A provider generates a key from the Rotten Tomatoes corpus with the
   bundled all-MiniLM-L6-v2 (int8 ONNX): a map key (the default design,
   which moves every answer by a secret linear map of its clean embedding), its
   write strength fitted to the design's quality budget (mean cos(clean,
   watermarked) over the keygen sample): the same defaults as ``espew keygen``
   and ``WatermarkKey.generate``; ``--marking words`` makes the paper's word
   key instead, ``--marking field`` the earlier field key. It prints the key's
   commitment (the line to publish) and saves it (mode 0600).
2. It watermarks the embeddings its service returns (and we measure the cost).
3. A thief trains an extraction copy on those answers; an honest competitor
   trains the same kind of model on clean embeddings.
4. The provider verifies both suspects, prints both reports and writes the
   shareable evidence (``evidence-*``) apart from the private per-word
   detail (``private-*``).
5. A RAG builder indexes part of the corpus through the LangChain wrapper into
   an embedded Chroma and sees the same top results as a clean index.

    python examples/demo.py [--texts 6000] [--rag-texts 500] [--alpha 0.75]
                            [--marking map|field|words] [--strength S]
                            [--min-cosine C] [--out demo-output]

Every step prints how long it took; a step that runs for more than a few
seconds shows a progress bar. The output folder (``./demo-output/`` unless
``--out`` says otherwise) is the demo's own: running the demo again replaces
the key and the evidence in it. The last line printed is the path of the
run's ``summary.md``, which links everything else the demo wrote.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from espew_integrations import WatermarkKey, verify, watermark
from espew_integrations._optional import LAB_INSTALL, missing, require
from espew_integrations.core.ground.defaults import (
    DEFAULT_ALPHA,
    DEFAULT_FIELD_MIN_COSINE,
    DEFAULT_MARKING,
    DEFAULT_MIN_COSINE,
)
from espew_integrations.core.mark.inject import marks
from espew_integrations.core.mark.probes import row_cosines
from espew_integrations.evidence import save_private_evidence
from espew_integrations.offline.corpora import rotten_tomatoes
from espew_integrations.offline.embedders import minilm

# The provider's own string. Measured with this demo's key (seed 2026, the default
# sentence-probe audit in key mode): the ridge thief gets p = 5.5e-8 from 3,000 answers
# and 3.0e-11 from 4,000; with the in-domain "a funny and moving film about love and
# family" it got only p = 5.1e-4 and 4.1e-4 (not convicted at 1e-6). A brand string
# does fail target="query" audits (docs/limitations.md); this demo audits in key mode.
# Checked at start, not 35 s in: the quickstart's `pip install '.[cli]'` has no lab (espew-lab).
tqdm = require("tqdm.auto", "cli", "the demo's progress bars").tqdm
if missing("espew_lab") or missing("sklearn"):  # the lab is a distribution of its own
    sys.exit(f"the demo's thief (a tf-idf + ridge copy of the service) is the lab's: {LAB_INSTALL}")

TARGET_TEXT = "Acme Embeddings API: licensed vectors, copyright Acme Corp 2026"
BATCH = 100
POOL = ThreadPoolExecutor(max_workers=os.cpu_count() or 1)


class Steps:
    """Prints each step's title, then how long it took; keeps the times for the summary."""

    def __init__(self) -> None:
        self.times: list[tuple[str, float]] = []
        self._title = ""
        self._started = 0.0

    def start(self, title: str) -> None:
        self.finish()
        print(f"\n=== {title}", flush=True)
        self._title, self._started = title, time.perf_counter()

    def finish(self) -> None:
        if self._title:
            seconds = time.perf_counter() - self._started
            self.times.append((self._title.split(" ")[0].rstrip("."), seconds))
            print(f"(step took {seconds:.1f} s)", flush=True)
            self._title = ""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="ESpeW end to end on the offline defaults.")
    # 6,000: the thief's copy learns the default key's mark well enough from them to be
    # convicted at the default level on the demo's key; from 3,000 it is not always.
    parser.add_argument("--texts", type=int, default=6000, help="texts the service answers")
    parser.add_argument("--rag-texts", type=int, default=500, help="texts the RAG step indexes")
    parser.add_argument(
        "--alpha",
        type=float,
        default=DEFAULT_ALPHA,
        help=f"share of coordinates a mark writes (default {DEFAULT_ALPHA:g})",
    )
    parser.add_argument(
        "--strength",
        type=float,
        default=None,
        help="write strength (default: fitted to --min-cosine; 1 = the paper's equations)",
    )
    parser.add_argument(
        "--marking",
        choices=("map", "field", "words"),
        default=DEFAULT_MARKING,
        help=f"the key's design (default {DEFAULT_MARKING}); 'words' reproduces the paper",
    )
    parser.add_argument(
        "--min-cosine",
        type=float,
        default=None,
        help="quality budget the strength is fitted to: mean cos(clean, watermarked) on "
        f"marked texts (default: the design's, {DEFAULT_FIELD_MIN_COSINE:g} for a map or field "
        f"key, "
        f"{DEFAULT_MIN_COSINE:g} for a word key; ignored with --strength)",
    )
    parser.add_argument("--seed", type=int, default=2026, help="seed (demo keys only!)")
    parser.add_argument(
        "--out", default="demo-output", help="folder for the key and the evidence (replaced)"
    )
    parser.add_argument("--skip-rag", action="store_true", help="skip the Chroma RAG part")
    return parser


class MemoModel:
    """The offline model with a memory: a text embedded once (keygen, service) is not again.

    Batches of :data:`BATCH` run in parallel threads on every core: the model
    embeds each text on its own (a text's vector never depends on its batch),
    so the vectors are the same as one by one, in order.
    """

    def __init__(self, model: Any) -> None:
        self.model = model
        self.memo: dict[str, np.ndarray] = {}

    def with_bar(self, bar: Any = None) -> Callable[[list[str]], np.ndarray]:
        """``embed(texts)`` that advances ``bar`` (if any) by each text it really embeds."""

        def embed(texts: list[str]) -> np.ndarray:
            missing = [t for t in dict.fromkeys(texts) if t not in self.memo]
            batches = [missing[i : i + BATCH] for i in range(0, len(missing), BATCH)]
            for batch, vectors in zip(batches, POOL.map(self.model, batches), strict=True):
                self.memo.update(zip(batch, vectors, strict=True))
                if bar is not None:
                    bar.update(len(batch))
            return np.stack([self.memo[t] for t in texts])

        return embed


def generate_key(args: argparse.Namespace, corpus: Any, model: MemoModel, out: Path):
    """Step 1: the provider's key, its commitment, and the file it is saved to."""
    budget = {}
    if args.min_cosine is not None:  # each design names its own budget
        name = "min_cosine" if args.marking == "words" else "field_min_cosine"
        budget = {name: args.min_cosine}
    with tqdm(desc="keygen: embedding probes and marked texts", unit="text") as bar:

        def show(done: int, total: int) -> None:  # keygen's progress: texts, with a total
            bar.total = total
            bar.update(done - bar.n)

        key = WatermarkKey.generate(
            corpus.texts,
            model.with_bar(),
            progress=show,
            target_text=TARGET_TEXT,
            alpha=args.alpha,
            strength=args.strength,
            window=model.model.max_tokens,
            seed=args.seed,
            marking=args.marking,
            **budget,
        )
    key_path = key.save(out / "provider.key", overwrite=True)
    units = "triggers" if key.marking == "words" else "units"
    shown = f"{len(key.triggers)} secret {units} among {len(key.band)}"
    print(f"{key}  (marking={key.marking}: {shown})")
    how = f"fitted to the budget cos >= {key.info.get('strength_fitted_to_min_cosine', 0):g}"
    how = how if args.strength is None else "fixed by --strength"
    print(f"write strength {key.strength:.4f} ({how}); measured mean cos(clean, watermarked) "
          f"{key.info['mean_cosine_marked']:.4f} on {key.info['cosine_sample_texts']} marked "
          "corpus texts")  # fmt: skip
    print(f"innocent-twin check passed: the clean model's p = {key.info['twin_p_value']:.2f}")
    print(f"saved to {key_path} (mode 0600); only key_id is safe to show")
    print(f"commitment (publish it now; it reveals nothing of the key):\n  {key.commitment()}")
    return key


def serve_answers(texts: list[str], key: WatermarkKey, model: MemoModel):
    """Step 2: the service's clean and watermarked answers, and what the mark cost."""
    new = len(set(texts) - model.memo.keys())
    print(f"{len(texts) - new} of them were embedded in step 1 already; embedding {new}")
    with tqdm(total=new, desc="service: embedding answers", unit="text") as bar:
        clean = model.with_bar(bar)(texts)
    view = model.model.view
    marked_rows = marks(texts, key, view=view)  # map/field: every non-blank text; words: triggers
    tic = time.perf_counter()
    answers = watermark(texts, clean, key, view=view)
    cost_ms = (time.perf_counter() - tic) * 1000
    cosines = row_cosines(answers[marked_rows], clean[marked_rows])
    unchanged = bool((answers[~marked_rows] == clean[~marked_rows]).all())
    print(f"{marked_rows.mean():.1%} of texts were marked "
          f"({cost_ms:.1f} ms for the batch)")  # fmt: skip
    # a word key leaves the other rows bit-identical; a map key marks every one
    rest = f"; unmarked rows bit-identical: {unchanged}" if (~marked_rows).any() else ""
    print(f"mean cos(clean, watermarked) on marked rows: {cosines.mean():.4f} "
          f"(min {cosines.min():.4f}){rest}")  # fmt: skip
    return clean, answers


def audit(suspects: dict[str, Any], key: WatermarkKey, out: Path, seed: int) -> dict[str, Any]:
    """Step 4: verify every suspect, print its report, write its evidence."""
    reports = {}
    for name, suspect in suspects.items():
        report = verify(suspect, key, seed=seed)
        # The demo's own folder: a second run replaces its evidence (force=True). For a
        # real audit keep the default, which refuses to overwrite earlier evidence.
        report.save(out / f"evidence-{name}", force=True)
        save_private_evidence(report, out / f"private-{name}", force=True)
        reports[name] = report
        print(f"\n--- suspect: {name}")
        print(report)
        print(f"shareable evidence (report.json, summary.md): {out / f'evidence-{name}'}")
        print(f"private per-word scores (PRIVATE-*, never share): {out / f'private-{name}'}")
    return reports


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started, steps = time.perf_counter(), Steps()

    steps.start("1. The provider generates a key (offline MiniLM, Rotten Tomatoes corpus)")
    corpus, model = rotten_tomatoes(), MemoModel(minilm())
    key = generate_key(args, corpus, model, out)
    steps.start(f"2. The service watermarks its answers ({args.texts} texts)")
    served = list(corpus.subset(args.texts, seed=0).texts)
    clean, answers = serve_answers(served, key, model)
    steps.start("3. Two extraction copies (hashed tf-idf + ridge) are trained")
    from espew_lab.stealers import RidgeStealer

    thief = RidgeStealer(seed=0).fit(served, answers)
    honest = RidgeStealer(seed=0).fit(served, clean)
    print("thief's copy: trained on the watermarked answers")
    print("honest competitor's model: trained on clean embeddings of the same texts")
    steps.start(f"4. The provider audits both suspects ({key.audit_queries} stored texts each)")
    reports = audit({"thief": thief, "honest": honest}, key, out, args.seed)
    if not args.skip_rag:
        steps.start("5. A RAG builder indexes the corpus through the LangChain wrapper into Chroma")
        from demo_rag import run_rag_demo

        rag_texts = served[: args.rag_texts]
        known = dict(zip(rag_texts, clean[: args.rag_texts], strict=True))
        run_rag_demo(rag_texts, key, model.model, n_queries=5, known_vectors=known)
    steps.finish()
    ok = reports["thief"].copied and reports["honest"].status == "not_copied"
    print("\nstep times: " + ", ".join(f"{name} {s:.1f} s" for name, s in steps.times))
    print(f"Demo finished in {time.perf_counter() - started:.0f} s: "
          f"thief {'convicted' if reports['thief'].copied else 'NOT convicted'}, "
          f"honest competitor {reports['honest'].status.replace('_', ' ')}.")  # fmt: skip
    print(f"summary of this run: {write_summary(out, reports, steps.times)}")
    return 0 if ok else 1


def write_summary(out: Path, reports: dict[str, Any], times: list[tuple[str, float]]) -> Path:
    """``out/summary.md``: the verdicts, the step times and where each file is.

    One file to open after the run, so nobody has to scroll back through the log.
    """
    lines = ["# ESpeW demo: what it did and where it wrote", ""]
    lines += [f"- key: `{out / 'provider.key'}` (secret, mode 0600)"]
    for name, report in reports.items():
        lines.append(
            f"- suspect `{name}`: **{report.status.replace('_', ' ')}**; shareable evidence "
            f"`{out / f'evidence-{name}' / 'summary.md'}`, private detail "
            f"`{out / f'private-{name}'}` (never share)"
        )
    lines += ["", "Step times: " + ", ".join(f"{n} {s:.1f} s" for n, s in times), ""]
    path = out / "summary.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


if __name__ == "__main__":
    sys.exit(main())
