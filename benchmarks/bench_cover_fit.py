"""The directed score with the clean fit on the probes alone, and with the cover texts too.

Issue 9. The audit's cover texts hold no band word, so no answer to them carries
the mark; the key stores their clean rows (``key.cover_embeddings``) and
``verify()`` adds them, fit-only, to the directed score's clean fit and whitening.
This measures what that buys, side by side on the same answers: for each key seed
the suspects of ``bench_frontier.build`` (default key: 35 triggers, 1-1.5% band,
alpha 0.75, cover texts, the 0.995 budget) answer the key's probes and cover texts
once; the answers are cached (``--cache``), and both variants of the exact rank test
on the directed score alone are computed from them.

    python benchmarks/bench_cover_fit.py --seeds 1 2 3 --out docs/results/faithful
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_clean_fit import SUSPECTS
from bench_faithful_copy import corpus_lookups
from bench_frontier import build, make_key, parse_config

from espew_integrations.core.audit.directed import directed_scores, mark_directions
from espew_integrations.core.stats.ranktest import rank_sum_p_value

CONFIG = "default-cover:n=35,band=0.01-0.015,alpha=0.75"


def saved_answers(config: dict, seed: int, cache: Path, lookups, min_cosine: float) -> dict:
    """Every suspect's answers to the key's probes then cover texts, and the clean rows."""
    path = cache / f"seed{seed}.npz"
    if path.exists():
        found = dict(np.load(path))
        key = make_key(config, seed, *lookups[:2], min_cosine)  # a stale cache must not pass
        if not (
            np.array_equal(found["clean"], key.probe_embeddings)
            and np.array_equal(found["clean_cover"], key.cover_embeddings)
        ):
            raise SystemExit(f"{path} was made with another key: delete it and run again")
        return found
    texts, victim, standard, std_matrix = lookups
    key, suspects, *_ = build(
        config, seed, texts, victim, standard, std_matrix.astype(float), min_cosine, {"ridge"}
    )
    asked = [*key.probe_texts, *key.cover_texts]
    found = {
        "owner": np.asarray(key.probe_owner),
        "is_trigger": np.array([w in key.triggers for w in key.band]),
        "clean": key.probe_embeddings,
        "clean_cover": key.cover_embeddings,
        "dirs": mark_directions(key.probe_embeddings, key),
    }
    for name in SUSPECTS:
        found[name.replace(" ", "_")] = np.asarray(suspects[name](asked), dtype=np.float64)
    cache.mkdir(parents=True, exist_ok=True)
    np.savez(path, **found)
    return found


def both_p_values(saved: dict, name: str) -> tuple[float, float]:
    """The directed score's p-value with the fit on the probes alone, then with the cover."""
    owner, is_trigger, clean = saved["owner"], saved["is_trigger"], saved["clean"]
    n = len(owner)
    answers = saved[name.replace(" ", "_")]
    counts = np.bincount(owner, minlength=len(is_trigger))

    def p_value(per_probe: np.ndarray) -> float:
        words = np.bincount(owner, weights=per_probe, minlength=len(is_trigger)) / counts
        return rank_sum_p_value(words, is_trigger)

    alone = p_value(directed_scores(answers[:n], saved["dirs"], clean))
    with_cover = p_value(
        directed_scores(
            answers[:n],
            saved["dirs"],
            clean,
            unscored_answers=answers[n:],
            unscored_clean=saved["clean_cover"],
        )
    )
    return alone, with_cover


def table(results: dict, seeds: list[int]) -> str:
    lines = [
        "| suspect | " + " | ".join(f"key {s}: probes only -> with cover" for s in seeds) + " |",
        "|---|" + "---|" * len(seeds),
    ]
    for name, rows in results.items():
        cells = [f"{a:.1e} -> **{b:.1e}** ({a / b:.1f}x)" for a, b in rows]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=CONFIG)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--min-cosine", type=float, default=0.995)
    parser.add_argument("--cache", type=Path, default=Path(".cache/cover-fit"))
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    started = time.perf_counter()
    config = parse_config(args.config)
    lookups = corpus_lookups()
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in SUSPECTS}
    for seed in args.seeds:
        saved = saved_answers(config, seed, args.cache, lookups, args.min_cosine)
        for name in SUSPECTS:
            results[name].append(both_p_values(saved, name))
        print(f"seed {seed}: {time.perf_counter() - started:.0f} s", flush=True)
    setup = {
        "config": args.config,
        "seeds": args.seeds,
        "min_cosine": args.min_cosine,
        "seconds": round(time.perf_counter() - started),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "cover-fit.json").write_text(
        json.dumps({"setup": setup, "p_values": results}, indent=1)
    )
    header = (
        f"The directed score alone, exact rank test; config {args.config}, budget "
        f"{args.min_cosine}; key seeds {args.seeds}. Fit on the probes alone -> fit on the "
        "probes and the cover texts (what verify() does); ratio in brackets. Command: "
        "`python benchmarks/bench_cover_fit.py --seeds "
        + " ".join(map(str, args.seeds))
        + f" --out {args.out}`.\n\n"
    )
    (args.out / "cover-fit.md").write_text(header + table(results, args.seeds))
    print(table(results, args.seeds))


if __name__ == "__main__":
    main()
