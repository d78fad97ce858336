"""Power of the field mark: every copy against audits of about 2,000 queries (issue 44).

Kerckhoffs: the thief has this repository, a corpus like the provider's and an open
model (paraphrase-MiniLM-L3); only the key is secret. For each field key (offline
MiniLM, Rotten Tomatoes, ``marking="field"`` at ``--field-min-cosine``, the default
budget unless given), the thief sends 6,000 corpus texts disjoint from the key's audit
(``thieves.thief_for``) and these suspects are audited:

- ``service itself``: the watermarked service;
- copies trained on its answers to the 6,000 texts: a bag-of-words ridge copy
  (``RidgeStealer``), a ridge head and an MLP head on L3 (``EncoderRidgeStealer``,
  ``FrozenMLPStealer``), the kNN copy (the mean answer of the 5 stolen texts nearest
  under L3, ``KNNStealer``) and the end-to-end torch copy (``TorchEncoderStealer``,
  ``--torch-epochs`` on CPU);
- innocents: the clean model and a ridge head on L3 trained on the clean service's
  answers to the same texts.

Two audits each: the keygen audit (the key's 1,950 texts) and a traffic audit, a
round-2 audit of ``--traffic`` texts drawn from the 6,000 the thief sent
(``key.with_audit``; its p-value carries the factor 2 of the second round). Next to
each copy, what it stole (``thieves.stolen_value``: top-10 neighbour overlap with the
clean service on 500 held-out texts, less that of L3 itself). The verdict counts the
keys on which each suspect falls below ``--threshold`` (1e-10), by either audit.

    .venv/bin/python benchmarks/bench_field_power.py --quick
    .venv/bin/python benchmarks/bench_field_power.py --out docs/results/unavoidable
    .venv/bin/python benchmarks/bench_field_power.py --field-min-cosine 0.9995 \
        --name power-09995 --out docs/results/unavoidable

``--references``: every audit is also run with the auditor's reference copies
(``verify(..., references=...)``): a ridge head on L3 and a bag-of-words ridge
(``espew_integrations.core.stats.references``), fitted to the clean service's answers
to the corpus texts that are neither the thief's nor the keygen audit's; the table
gains a "+ references" column per audit.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_field_power.py --references \
        --skip "torch copy" "MLP head on L3" --name power-references \
        --out docs/results/unavoidable

``--quick``: keys 1 and 2, the torch copy for one epoch. Results: ``<name>.txt`` and
``<name>.json`` in ``--out``; discussion: docs/results/unavoidable/README.md.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_faithful_copy import corpus_lookups, victim_key
from thieves import stolen_value, thief_for

from espew_integrations import WatermarkKey, verify, watermark
from espew_integrations.core.stats.references import bag_of_words_reference, ridge_reference
from espew_lab.stealers import (
    EncoderRidgeStealer,
    FrozenMLPStealer,
    KNNStealer,
    RidgeStealer,
)

N_STEAL = 6_000
GUILTY = (
    "service itself",
    "bag-of-words ridge",
    "ridge head on L3",
    "MLP head on L3",
    "kNN-5 on L3",
    "torch copy",
)
INNOCENT = ("clean model", "clean ridge head on L3")
AUDITS = ("keygen", "traffic")
WITH_REFERENCES = ("keygen + references", "traffic + references")


def reference_copies(texts, key, thief, victim, standard) -> list:
    """The auditor's reference copies: fitted to the clean service's answers to the corpus
    texts that are neither the thief's nor the keygen audit's (never an audit's)."""
    used = set(thief.steal) | set(thief.held) | set(key.probe_texts)
    own = [t for t in dict.fromkeys(texts) if t not in used]
    clean = victim(own).astype(np.float64)
    return [
        ridge_reference(standard, own, clean, name="ridge head on L3 (reference)"),
        bag_of_words_reference(own, clean, name="bag-of-words ridge (reference)"),
    ]


def suspects_for(
    seed: int, key: WatermarkKey, thief, victim, standard, torch_epochs: int, skip: Sequence[str]
) -> dict[str, Callable]:
    """Every suspect of one key, the copies trained on the service's answers to the
    thief's texts (each built once; ``skip`` names those not built)."""
    steal, own = thief.steal, thief.own_steal
    answers = watermark(steal, thief.clean_steal, key)

    def service(batch: Sequence[str]) -> np.ndarray:
        batch = list(batch)
        return watermark(batch, victim(batch), key)

    def torch_copy():
        from espew_lab.torch_stealer import TorchEncoderStealer

        return TorchEncoderStealer(seed=seed, epochs=torch_epochs).fit(steal, answers)

    makers: dict[str, Callable[[], Callable]] = {
        "service itself": lambda: service,
        "bag-of-words ridge": lambda: RidgeStealer(seed=seed).fit(steal, answers),
        "ridge head on L3": lambda: EncoderRidgeStealer(standard, features=own).fit(steal, answers),
        "MLP head on L3": lambda: FrozenMLPStealer(standard, seed=seed, features=own).fit(
            steal, answers
        ),
        "kNN-5 on L3": lambda: KNNStealer(standard, k=5, features=own).fit(steal, answers),
        "torch copy": torch_copy,
        "clean model": lambda: victim,
        "clean ridge head on L3": lambda: EncoderRidgeStealer(standard, features=own).fit(
            steal, thief.clean_steal
        ),
    }
    out = {}
    for name, make in makers.items():
        if name in skip:
            continue
        started = time.perf_counter()
        out[name] = make()
        print(f"  built {name} in {time.perf_counter() - started:.1f} s", flush=True)
    return out


def run_key(seed: int, texts, victim, standard, args) -> list[dict]:
    """Every suspect of key ``seed`` against its keygen and traffic audits."""
    options: dict = {"marking": "field"}
    if args.field_min_cosine is not None:
        options["field_min_cosine"] = args.field_min_cosine
    key = victim_key(texts, victim, seed, **options)
    thief = thief_for(seed, texts, key, victim, standard, n_steal=N_STEAL)
    traffic = key.with_audit(thief.steal, victim, audit_round=2, audit_budget=args.traffic)
    audits = {"keygen": key, "traffic": traffic}
    suspects = suspects_for(seed, key, thief, victim, standard, args.torch_epochs, args.skip)
    references = reference_copies(texts, key, thief, victim, standard) if args.references else []
    rows = []
    for name, suspect in suspects.items():
        value = stolen_value(suspect, thief)
        row: dict = {
            "seed": seed,
            "suspect": name,
            "guilty": name in GUILTY,
            "mean_cosine_marked": key.info.get("mean_cosine_marked"),
            "stolen": value["stolen"],
            "top10": value["top10"],
            "base_top10": value["base"],
            "fidelity": value.get("fidelity"),
        }
        for label, audit_key in audits.items():
            report = verify(suspect, audit_key, seed=seed)
            row[label] = {
                "p_value": report.p_value,
                "status": report.status,
                "n_queries": report.n_queries,
            }
            if references:
                report = verify(suspect, audit_key, seed=seed, references=references)
                row[f"{label} + references"] = {
                    "p_value": report.p_value,
                    "status": report.status,
                    "n_queries": report.n_queries,
                }
        rows.append(row)
        print(
            f"  {name:24s} stolen {row['stolen']:+.4f}  "
            + "  ".join(
                f"{a} p {row[a]['p_value']:.2e}" for a in AUDITS + WITH_REFERENCES if a in row
            ),
            flush=True,
        )
    return rows


def table(rows: list[dict], threshold: float, header: str, audits=AUDITS) -> list[str]:
    """Per suspect: stolen value, each audit's p per key, and the keys convicted
    (``audits``: the two audits, or the same two with the auditor's references)."""
    seeds = sorted({r["seed"] for r in rows})
    lines = [
        header,
        f"keys (seeds) {', '.join(map(str, seeds))}; convicted: p < {threshold:g}",
        "",
        f"| suspect | stolen value (per key) | {audits[0]} audit p | {audits[1]} audit p "
        "| convicted (keygen / traffic / either) |",
        "|---|---|---|---|---|",
    ]
    for name in (*GUILTY, *INNOCENT):
        mine = sorted((r for r in rows if r["suspect"] == name), key=lambda r: r["seed"])
        if not mine:
            continue
        stolen = ", ".join(f"{r['stolen']:+.3f}" for r in mine)
        cells = [", ".join(f"{r[a]['p_value']:.1e}" for r in mine) for a in audits]
        hit = [sum(r[a]["p_value"] < threshold for r in mine) for a in audits]
        either = sum(min(r[a]["p_value"] for a in audits) < threshold for r in mine)
        n = len(mine)
        label = name if name in GUILTY else f"{name} (innocent)"
        lines.append(
            f"| {label} | {stolen} | {cells[0]} | {cells[1]} "
            f"| {hit[0]}/{n} / {hit[1]}/{n} / {either}/{n} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5, 6])
    parser.add_argument("--quick", action="store_true", help="keys 1-2, torch for one epoch")
    parser.add_argument("--field-min-cosine", type=float, default=None)
    parser.add_argument("--traffic", type=int, default=2000, help="traffic audit size (texts)")
    parser.add_argument("--torch-epochs", type=int, default=3)
    parser.add_argument("--threshold", type=float, default=1e-10)
    parser.add_argument("--skip", nargs="+", default=(), choices=(*GUILTY, *INNOCENT))
    parser.add_argument("--references", action="store_true", help="also audit with references")
    parser.add_argument("--name", default="power", help="output file stem")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.torch_epochs = args.seeds[:2], 1
    started = time.time()
    texts, victim, standard, _ = corpus_lookups()
    rows: list[dict] = []
    for seed in args.seeds:
        print(f"key {seed}", flush=True)
        rows.extend(run_key(seed, texts, victim, standard, args))
    budget = args.field_min_cosine or "default"
    header = (
        f"field keys, field_min_cosine {budget} (mean cos marked "
        f"{np.mean([r['mean_cosine_marked'] for r in rows]):.4f}); offline MiniLM, Rotten "
        f"Tomatoes; thief: {N_STEAL} texts disjoint from the keygen audit; keygen audit "
        f"{rows[0]['keygen']['n_queries']} texts, traffic audit {args.traffic} of the thief's "
        f"texts (round 2); torch copy {args.torch_epochs} epochs; "
        f"{time.time() - started:.0f} s"
    )
    lines = table(rows, args.threshold, header)
    if args.references:
        lines += ["", "the same audits, with the auditor's reference copies:", ""]
        lines += table(rows, args.threshold, header, WITH_REFERENCES)[1:]
    print("\n".join(lines))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        command = "python benchmarks/bench_field_power.py " + shlex.join(sys.argv[1:])
        (args.out / f"{args.name}.txt").write_text("\n".join([command, "", *lines]) + "\n")
        (args.out / f"{args.name}.json").write_text(
            json.dumps({"command": command, "rows": rows}, indent=1) + "\n"
        )


if __name__ == "__main__":
    main()
