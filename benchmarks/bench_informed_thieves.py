"""Informed thieves that estimate or guess the mark's direction and project it out (issue 53).

Kerckhoffs: the thief has this repository, a corpus like the provider's, an open model
(paraphrase-MiniLM-L3) and its own stolen answers; only the key is secret. For each
key (offline MiniLM, Rotten Tomatoes, ``victim_key`` with ``--marking``: by default
the library's default design, the field mark; ``words`` for the paper's), the thief
sends ``--n-steal`` corpus texts disjoint from the key's audit (``thieves.thief_for``),
fits a ridge head on L3 to the answers (``EncoderRidgeStealer``), and serves that
copy's outputs with some directions projected out
(``espew_lab.direction_thieves.ProjectedCopy``). The directions:

- ``untouched``: none (the copy every other row is compared with);
- ``true target``: the key's target itself, which no thief holds: the bound every
  estimate below aims at;
- ``regime-slope k``: the top ``k`` directions of the regime-slope estimator
  (``regime_slope_directions``: the public ESpeW rule splits the answers per
  coordinate, slopes are compared between regimes, the thief's own predictions give
  the background); ``k = 1`` is the estimate of the target;
- ``residual PCA k``: the top ``k`` principal axes of the answers less the copy's own
  predictions (``residual_directions``);
- ``answer PCA keep k``: all but the top ``k`` principal axes of the stolen answers
  (the copy truncated to the subspace the service's answers vary in most);
- ``guessed target text``: the service's answer to the key's target text (a public
  phrase here: the benchmarks' ``TARGET_TEXT``), one query;
- ``public phrases``: the service's answers to a handful of public brand phrases (the
  docs' example target text among them, the key's own left out), all projected out.

For each: ``cos``, the largest |cos| between the true target and the span removed;
what the copy stole (``thieves.stolen_value``: top-10 neighbour overlap with the clean
service on 500 held-out texts, less L3's own) and ``kept``, that over the untouched
copy's; the keygen audit's p-value and a traffic audit's (a round-2 audit of
``--traffic`` texts drawn from what the thief sent, ``key.with_audit``). A thief
escapes when its copy keeps more than half the untouched copy's stolen value and
neither audit convicts it below ``--threshold`` (1e-10, issue 53's bar). An audit whose
suspect gives every unit the same score (a copy with the exact target projected out)
ends inconclusive, which convicts nobody: the table shows "inconclusive".

    python benchmarks/bench_informed_thieves.py --quick
    python benchmarks/bench_informed_thieves.py --keys 3 --out docs/results/informed-thieves

``--quick``: key 1, 3,000 stolen texts, k in 1, 2, 4, 8. Results: ``<name>.txt`` and
``<name>.json`` in ``--out``; discussion: docs/results/informed-thieves/README.md.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_faithful_copy import TARGET_TEXT, corpus_lookups, victim_key
from thieves import stolen_value, thief_for

from espew_integrations import WatermarkKey, verify, watermark
from espew_integrations.core.ground.defaults import DEFAULT_MARKING
from espew_integrations.core.mark.design import design_names
from espew_lab.direction_thieves import (
    ProjectedCopy,
    regime_slope_directions,
    residual_directions,
    subspace_cosine,
)
from espew_lab.stealers import EncoderRidgeStealer

#: The principal axes of its stolen answers a truncating thief keeps (the rest projected out).
KEEP_AXES = (256, 128, 64)
#: Phrases anyone reads in this repository's docs or would try first as a brand's target.
PUBLIC_PHRASES = (
    "Acme Embeddings API: licensed vectors, Acme Corp",
    "Acme Embeddings, licensed vectors",
    "Acme Corp",
    "licensed vectors",
    "licensed embeddings",
    "copyright watermark",
    "All rights reserved",
    "proprietary embeddings API",
)
THRESHOLD = 1e-10


def service_for(key: WatermarkKey, victim):
    """The watermarked service: the clean model's answers, marked with ``key``."""

    def service(batch: Sequence[str]) -> np.ndarray:
        batch = list(batch)
        return watermark(batch, victim(batch), key).astype(np.float64)

    return service


def thieves_of(key: WatermarkKey, answers, predictions, service, ks: Sequence[int]) -> dict:
    """Every thief's directions (rows), by name; ``None`` for the untouched copy."""
    started = time.perf_counter()
    slopes = regime_slope_directions(answers, predictions, n_directions=max(ks), alpha=key.alpha)
    print(f"  regime-slope estimate in {time.perf_counter() - started:.1f} s", flush=True)
    residuals = residual_directions(answers, predictions, n_directions=max(ks))
    phrases = [p for p in PUBLIC_PHRASES if p != key.target_text]
    out: dict[str, np.ndarray | None] = {"untouched": None, "true target": key.target[None, :]}
    out.update({f"regime-slope {k}": slopes[:k] for k in ks})
    out.update({f"residual PCA {k}": residuals[:k] for k in ks})
    # keep only the top principal axes of the stolen answers: the mark, spread over
    # random directions, mostly lies in the low-variance rest
    centred = answers - answers.mean(axis=0)
    axes = np.linalg.svd(centred, full_matrices=False)[2]
    for kept in KEEP_AXES:
        out[f"answer PCA keep {kept}"] = axes[kept:]
    out["guessed target text"] = service([key.target_text])
    out[f"public phrases ({len(phrases)})"] = service(phrases)
    return out


def run_key(seed: int, texts, victim, standard, args) -> list[dict]:
    """Every thief against key ``seed``'s keygen and traffic audits."""
    budget = {} if args.field_min_cosine is None else {"field_min_cosine": args.field_min_cosine}
    key = victim_key(texts, victim, seed, marking=args.marking, **budget)
    if key.target_text != TARGET_TEXT:
        raise SystemExit("the guessing thief assumes the benchmarks' public target text")
    thief = thief_for(seed, texts, key, victim, standard, n_steal=args.n_steal)
    answers = watermark(thief.steal, thief.clean_steal, key).astype(np.float64)
    copy = EncoderRidgeStealer(standard, features=thief.own_steal).fit(thief.steal, answers)
    predictions = copy(thief.steal)
    traffic = key.with_audit(thief.steal, victim, audit_round=2, audit_budget=args.traffic)
    service = service_for(key, victim)
    target = key.target / np.linalg.norm(key.target)
    rows: list[dict] = []
    untouched = None
    for name, directions in thieves_of(key, answers, predictions, service, args.k).items():
        suspect = copy if directions is None else ProjectedCopy(copy, directions)
        value = stolen_value(suspect, thief)
        if directions is None:
            untouched = value["stolen"]
        keygen = verify(suspect, key, seed=seed)
        traffic_report = verify(suspect, traffic, seed=seed)
        row = {
            "seed": seed,
            "thief": name,
            "n_directions": 0 if directions is None else len(directions),
            "cos_target": None if directions is None else subspace_cosine(target, directions),
            "stolen": value["stolen"],
            "kept": value["stolen"] / untouched if untouched else float("nan"),
            "keygen_p": keygen.p_value,
            "keygen_status": keygen.status,
            "keygen_queries": keygen.n_queries,
            "traffic_p": traffic_report.p_value,
            "traffic_status": traffic_report.status,
            "traffic_queries": traffic_report.n_queries,
        }
        row["escapes"] = bool(
            row["kept"] > 0.5 and min(_p(row["keygen_p"]), _p(row["traffic_p"])) >= args.threshold
        )
        rows.append(row)
        print("  " + _cells(row), flush=True)
        for report in (keygen, traffic_report):
            if report.status == "inconclusive":
                print(f"    inconclusive: {str(report)[:600]}", flush=True)
    return rows


def _p(p_value: float) -> float:
    """An audit's p-value for the escape rule: an inconclusive audit (no test ran, NaN)
    convicts nobody."""
    return 1.0 if np.isnan(p_value) else p_value


def _shown(p_value: float) -> str:
    return "inconclusive" if np.isnan(p_value) else f"{p_value:.1e}"


def _cells(row: dict) -> str:
    cos = "" if row["cos_target"] is None else f"{row['cos_target']:.2f}"
    return (
        f"{row['thief']:<22} cos {cos:>4}  stolen {row['stolen']:+.4f} (kept {row['kept']:.2f})  "
        f"keygen p {_shown(row['keygen_p'])}  traffic p {_shown(row['traffic_p'])}"
        + ("  ESCAPES" if row["escapes"] else "")
    )


def table(rows: list[dict], threshold: float, header: str) -> list[str]:
    """One line per thief: per key, cos to the target, value kept and both p-values."""
    seeds = sorted({r["seed"] for r in rows})
    lines = [
        header,
        f"keys (seeds) {', '.join(map(str, seeds))}; a thief escapes on a key when its copy "
        f"keeps > 0.5 of the untouched copy's stolen value and both audits give p >= "
        f"{threshold:g} (an inconclusive audit, whose suspect's answers give every score "
        "the same value, convicts nobody)",
        "",
        "| thief | cos(removed span, target) | stolen value (kept) | keygen audit p "
        "| traffic audit p | escapes |",
        "|---|---|---|---|---|---|",
    ]
    for name in dict.fromkeys(r["thief"] for r in rows):
        mine = sorted((r for r in rows if r["thief"] == name), key=lambda r: r["seed"])
        cos = ", ".join("" if r["cos_target"] is None else f"{r['cos_target']:.2f}" for r in mine)
        value = ", ".join(f"{r['stolen']:+.3f} ({r['kept']:.2f})" for r in mine)
        keygen = ", ".join(_shown(r["keygen_p"]) for r in mine)
        traffic = ", ".join(_shown(r["traffic_p"]) for r in mine)
        escapes = f"{sum(r['escapes'] for r in mine)}/{len(mine)}"
        lines.append(f"| {name} | {cos} | {value} | {keygen} | {traffic} | {escapes} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, default=3, help="run keys (seeds) 1..N")
    parser.add_argument("--quick", action="store_true", help="key 1, 3,000 texts, k 1 2 4 8")
    parser.add_argument("--n-steal", type=int, default=6000, help="the thief's stolen texts")
    parser.add_argument("--k", type=int, nargs="+", default=list(range(1, 9)))
    parser.add_argument("--traffic", type=int, default=2000, help="traffic audit size (texts)")
    parser.add_argument(
        "--marking",
        default=DEFAULT_MARKING,
        choices=design_names(),
        help="the key design (default: the library's default key design)",
    )
    parser.add_argument(
        "--thief-model",
        default="l3",
        choices=("l3", "mpnet"),
        help="the open encoder the thief's ridge head sits on (mpnet: all-mpnet-base-v2)",
    )
    parser.add_argument(
        "--field-min-cosine",
        type=float,
        default=None,
        help="a map or field key's quality budget (default: the library's)",
    )
    parser.add_argument("--threshold", type=float, default=THRESHOLD)
    parser.add_argument("--name", default="informed", help="output file stem")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.quick:
        args.keys, args.n_steal, args.k = 1, 3000, [1, 2, 4, 8]
    started = time.time()
    texts, victim, standard, _ = corpus_lookups()
    if args.thief_model == "mpnet":  # a larger open encoder of another family as the base
        from bench_faithful_copy import Lookup

        from espew_integrations.offline.embedders import all_mpnet_base_v2
        from espew_lab.cache import cached_embed

        mpnet = all_mpnet_base_v2()
        rows = cached_embed(mpnet, texts, model_name=mpnet.name, progress=True)
        standard = Lookup(mpnet, texts, rows)
    rows: list[dict] = []
    for seed in range(1, args.keys + 1):
        print(f"key {seed}", flush=True)
        rows.extend(run_key(seed, texts, victim, standard, args))
    header = (
        f"{args.marking} keys; offline MiniLM, Rotten Tomatoes; thief: "
        f"{args.n_steal} texts disjoint from the keygen audit, ridge head on "
        f"{'L3' if args.thief_model == 'l3' else 'all-mpnet-base-v2'}; keygen audit "
        f"{rows[0]['keygen_queries']} texts, traffic audit {rows[0]['traffic_queries']} of the "
        f"thief's texts (round 2); {time.time() - started:.0f} s"
    )
    lines = table(rows, args.threshold, header)
    print("\n".join(lines))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        command = "python benchmarks/bench_informed_thieves.py " + shlex.join(sys.argv[1:])
        (args.out / f"{args.name}.txt").write_text("\n".join([command, "", *lines]) + "\n")
        (args.out / f"{args.name}.json").write_text(
            json.dumps({"command": command, "rows": rows}, indent=1) + "\n"
        )


if __name__ == "__main__":
    main()
