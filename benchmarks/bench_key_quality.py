"""What a key costs retrieval: the default key against a stronger one, side by side (issue 9).

A stronger key (more triggers over a narrower band, alpha 0.5, more probes per
word) catches an end-to-end distilled copy that the default key misses
(docs/results/frontier/README.md, section 5), but it marks far more texts. Each
marked text keeps the same quality budget (mean cos(clean, watermarked) >=
``--min-cosine`` on marked texts), so the question is what the higher marked
rate does to search. For each key seed and configuration, on the whole
Rotten Tomatoes corpus embedded by the offline MiniLM:

- the share of texts marked;
- mean cos(clean, watermarked) over all texts and over the marked ones;
- top-10 overlap: for ``--queries`` corpus texts used as queries, the share of
  the clean index's ten nearest neighbours that the watermarked index also
  returns (each index embeds its own queries, as a user of that service would);
- how often the top-1 neighbour is the same.

    python benchmarks/bench_key_quality.py [--seeds 1 2 3] [--queries 2000] [--only default]
    python benchmarks/bench_key_quality.py --only default field     # words against the field mark
    python benchmarks/bench_key_quality.py --only map --seeds 1 2 3 4 5 6   # the default map key
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_faithful_copy import TARGET_TEXT, corpus_lookups

from espew_integrations import WatermarkKey, watermark
from espew_integrations.core.mark.inject import marks
from espew_integrations.core.mark.probes import row_cosines
from espew_lab.metrics import retrieval_overlap

CONFIGS = {
    "first default (n=20, band 0.5-1%, alpha 0.2)": {
        "n_triggers": 20,
        "freq_band": (0.005, 0.01),
        "alpha": 0.2,
    },
    "its triggers, alpha 0.75": {"n_triggers": 20, "freq_band": (0.005, 0.01), "alpha": 0.75},
    "stronger (n=50, band 1-2%, alpha 0.5, 16 probes/word)": {
        "n_triggers": 50,
        "freq_band": (0.01, 0.02),
        "alpha": 0.5,
        "probes_per_word": 16,
    },
    "stronger, alpha 0.75": {
        "n_triggers": 50,
        "freq_band": (0.01, 0.02),
        "alpha": 0.75,
        "probes_per_word": 16,
    },
    "n=35, band 1-1.5%, alpha 0.75, 28 probes/word": {
        "n_triggers": 35,
        "freq_band": (0.01, 0.015),
        "alpha": 0.75,
        "probes_per_word": 28,
    },
    "n=35, band 1-3%, alpha 0.75 (single-word probes)": {
        "n_triggers": 35,
        "freq_band": (0.01, 0.03),
        "probe_mix": "single",
    },
    "default (n=50, range 0.3-5%, alpha 0.75)": {},  # the word key's defaults
    # every text marked; its own quality budget (field_min_cosine) replaces --min-cosine
    "field (marking='field', 256 units, 64 drawn)": {"marking": "field"},
    "field, field_min_cosine 0.9985": {"marking": "field", "field_min_cosine": 0.9985},
    "field, field_min_cosine 0.998": {"marking": "field", "field_min_cosine": 0.998},
    "field, field_min_cosine 0.9987": {"marking": "field", "field_min_cosine": 0.9987},
    "map (marking='map', the default: 256 units, 64 drawn)": {"marking": "map"},
    "map, field_min_cosine 0.999": {"marking": "map", "field_min_cosine": 0.999},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--min-cosine", type=float, default=0.995)
    parser.add_argument(
        "--only", nargs="+", default=None, metavar="PREFIX", help="keys whose name starts so"
    )
    args = parser.parse_args()
    configs = {
        name: options
        for name, options in CONFIGS.items()
        if args.only is None or any(name.startswith(prefix) for prefix in args.only)
    }
    texts, victim, _, _ = corpus_lookups()
    model, clean = victim.model, victim.matrix
    print(
        f"Rotten Tomatoes ({len(texts):,} texts), offline MiniLM, min_cosine {args.min_cosine}, "
        f"{args.queries:,} corpus texts as queries, key seeds {args.seeds}"
    )
    header = (
        f"{'key':<55} {'seed':>4} {'marked':>7} {'cos all':>8} {'cos marked':>10} "
        f"{'top-10 overlap':>15} {'same top-1':>11}"
    )
    print(header)
    summary: dict[str, list[tuple[float, ...]]] = {name: [] for name in configs}
    for seed in args.seeds:
        for name, options in configs.items():
            key = WatermarkKey.generate(
                texts,
                victim,
                target_text=TARGET_TEXT,
                seed=seed,
                window=model.max_tokens,
                **(  # a config that names no marking is a word key (the paper's design)
                    {}
                    if options.get("marking") in ("field", "map")
                    else {"marking": "words", "min_cosine": args.min_cosine}
                ),
                **options,
            )
            marked_rows = (
                marks(texts, key)
                if key.marking in ("field", "map")
                else key.contains_trigger(texts, view=model.view)
            )
            served = watermark(texts, clean, key, view=model.view)
            cos = row_cosines(clean, served)
            overlap = retrieval_overlap(clean, served, n_queries=args.queries, seed=seed)
            # at k = 1 the overlap is the share of queries whose nearest neighbour is unchanged
            top1 = retrieval_overlap(clean, served, n_queries=args.queries, k=1, seed=seed)
            row = (marked_rows.mean(), cos.mean(), cos[marked_rows].mean(), overlap, top1)
            summary[name].append(row)
            print(
                f"{name:<55} {seed:>4} {row[0]:>7.1%} {row[1]:>8.4f} {row[2]:>10.4f} "
                f"{row[3]:>15.3f} {row[4]:>11.1%}",
                flush=True,
            )
    print("means over seeds:")
    for name, rows in summary.items():
        means = [statistics.mean(column) for column in zip(*rows, strict=True)]
        print(
            f"{name:<55} {'':>4} {means[0]:>7.1%} {means[1]:>8.4f} {means[2]:>10.4f} "
            f"{means[3]:>15.3f} {means[4]:>11.1%}"
        )


if __name__ == "__main__":
    main()
