"""The end-to-end distilled copy on its own traffic: which audit convicts it? (issue 37)

For each key (the library's default at the 0.995 budget) the thief of
``thieves.py`` (``--split``: 10,000 corpus texts none of which is an audit text,
or health tweets) queries the service and trains the lab's end-to-end encoder
(torch: token embeddings + MLP, from scratch) on the answers. The copy, and three
innocents (the clean model, a ridge head on MiniLM-L3 fitted to the clean
service's answers to the same texts, and MiniLM-L3 itself), are audited with:

- ``keygen``: the key's stored audit (about 1,960 keygen-corpus texts);
- ``traffic``: a later round drawn from the thief's own stealing texts
  (``key.with_audit(stealing texts, clean model, audit_round=2)``, p doubled);
- ``traffic, ppw K``: the same round at ``K`` probes a word (``--ppw``), a larger
  sample, to see how many queries the copy needs.

Next to the verdicts: the copy's stolen value (``thieves.stolen_value``).
``--n-triggers N`` draws keys with N triggers instead of the library's default (the
strength still fitted to the budget). ``--copy ridge_head`` audits the ridge head on
MiniLM-L3 instead (seconds to fit, where the end-to-end copy takes minutes).

    .venv/bin/python benchmarks/bench_e2e_disjoint.py --seeds 4 5 6 \\
        --out docs/results/disjoint/e2e
    .venv/bin/python benchmarks/bench_e2e_disjoint.py --copy ridge_head --seeds 1 2 3 4 5 6 \
        --ppw 6 12 --out docs/results/disjoint/ridge-head
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_faithful_copy import corpus_lookups, extended, victim_key
from thieves import SPLITS, stolen_value, thief_for

from espew_integrations import WatermarkKey, verify, watermark
from espew_lab.stealers import EncoderRidgeStealer

COPIES = {"torch": "torch encoder", "ridge_head": "ridge head on L3"}


def audits_for(key: WatermarkKey, steal: list[str], clean, ppw: list[int]) -> dict:
    out = {
        "keygen": key,
        "traffic": key.with_audit(steal, clean, audit_round=2),
    }
    for k in ppw:
        out[f"traffic, ppw {k}"] = key.with_audit(steal, clean, audit_round=2, probes_per_word=k)
    return out


def table(results: list[dict], split: str) -> str:
    names = list(results[0]["rows"])
    audits = list(results[0]["queries"])
    seeds = ", ".join(str(r["seed"]) for r in results)
    lines = [
        f"Split: **{split}**; keys (seeds) {seeds}; "
        f"{results[0]['n_triggers']} triggers, the 0.995 budget. "
        f"Stolen value of the {names[0]} per key: "
        + ", ".join(f"{r['value']['stolen']:+.3f}" for r in results)
        + ". A guilty p >= 1e-10 in bold.",
        "",
        "| suspect | "
        + " | ".join(f"{a} ({results[0]['queries'][a]} queries)" for a in audits)
        + " |",
        "|---|" + "---|" * len(audits),
    ]
    for name in names:
        cells = []
        for a in audits:
            ps = [r["rows"][name][a] for r in results]
            guilty = name in COPIES.values()
            cells.append(
                ", ".join(f"**{p:.1e}**" if guilty and p >= 1e-10 else f"{p:.1e}" for p in ps)
                + (f" ({sum(p < 1e-10 for p in ps)}/{len(ps)} < 1e-10)" if guilty else "")
            )
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[4, 5, 6])
    parser.add_argument("--split", choices=SPLITS, default="disjoint")
    parser.add_argument("--ppw", type=int, nargs="*", default=[])
    parser.add_argument("--copy", choices=list(COPIES), default="torch")
    parser.add_argument("--n-triggers", type=int, default=None, help="default: the library's")
    parser.add_argument("--out", type=Path, default=Path("results/e2e"))
    args = parser.parse_args()
    started = time.perf_counter()
    texts, victim, standard, _ = corpus_lookups()
    results = []
    for seed in args.seeds:
        options = {} if args.n_triggers is None else {"n_triggers": args.n_triggers}
        key = victim_key(texts, victim, seed, **options)
        thief = thief_for(seed, texts, key, victim, standard, split=args.split)
        both = thief.steal + thief.held
        seen_victim = extended(victim, both, np.vstack([thief.clean_steal, thief.clean_held]))
        seen_standard = extended(standard, both, np.vstack([thief.own_steal, thief.own_held]))
        answers = watermark(thief.steal, thief.clean_steal, key)
        t0 = time.perf_counter()
        if args.copy == "torch":
            from espew_lab.torch_stealer import TorchEncoderStealer

            copy = TorchEncoderStealer(seed=seed).fit(thief.steal, answers)
        else:
            copy = EncoderRidgeStealer(seen_standard, features=thief.own_steal)
            copy = copy.fit(thief.steal, answers)
        print(f"key {seed}: trained the copy in {time.perf_counter() - t0:.0f} s", flush=True)
        suspects = {
            COPIES[args.copy]: copy,
            "innocent twin": seen_victim,
            "clean ridge head on L3": EncoderRidgeStealer(
                seen_standard, features=thief.own_steal
            ).fit(thief.steal, thief.clean_steal),
            "independent model": seen_standard,
        }
        audits = audits_for(key, thief.steal, seen_victim, args.ppw)
        entry = {
            "seed": seed,
            "n_triggers": len(key.triggers),
            "marked_rate": key.info["marked_rate"],
            "value": stolen_value(copy, thief),
            "queries": {a: k.audit_queries for a, k in audits.items()},
            "rows": {},
        }
        for name, suspect in suspects.items():
            entry["rows"][name] = {
                a: verify(suspect, k, seed=seed).p_value for a, k in audits.items()
            }
            shown = "  ".join(f"{a}: {p:.1e}" for a, p in entry["rows"][name].items())
            print(f"  {name:24s} {shown}", flush=True)
        results.append(entry)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(
            json.dumps({"split": args.split, "results": results}, indent=1)
        )
        (args.out / "table.md").write_text(table(results, args.split))
    print(table(results, args.split))
    print(f"total {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
