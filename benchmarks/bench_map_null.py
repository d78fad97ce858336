"""False positives of the map key over many fresh keys, against three innocents (issue 53).

The map key's test is exact by construction: the unit scores depend on the salt's
matrices (``G``, ``H``) and the clean rows, never on which units were drawn, and the
draw is an independent keyed stream, so under the null the drawn units are a uniform
subset. This study checks it: for each of ``--keys`` fresh salts it derives that
salt's ``G``, ``H`` and drawn units, scores each innocent's answers to the keygen audit
and to a traffic audit (round 2, ``--traffic`` texts drawn from the innocent thief's
own texts) as ``verify`` scores a map key, and counts p-values at or below each level
(the round-2 p is doubled, as ``verify`` multiplies a round-k p by k).

Setup: offline MiniLM on Rotten Tomatoes, a default map key of seed 1 for the audits
(its texts and stored clean rows); innocents: a ridge head on paraphrase-MiniLM-L3
and a bag-of-words ridge, each trained on the clean model's answers to 6,000 texts
disjoint from the audit, and L3 itself. Speed: the leans are BLAS products here
(``verify`` sums them in einsum's fixed order, for the same bits on every CPU); the
first ``--check`` salts are also scored through ``map_unit_scores`` itself and the
largest difference in log p is recorded.

    python benchmarks/bench_map_null.py --keys 10000 --out docs/results/map/null
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_faithful_copy import corpus_lookups, victim_key
from thieves import thief_for

from espew_integrations.core.designs.map import map_unit_scores
from espew_integrations.core.ground.draw import draw_triggers
from espew_integrations.core.ground.rows import unit_rows
from espew_integrations.core.ground.stable import snap_residual
from espew_integrations.core.mark.field import drawn_mask, standardised, unit_names, whitened_rows
from espew_integrations.core.mark.map import map_inputs, map_outputs
from espew_integrations.core.stats.ranktest import rank_sum_p_value, rank_sum_tails
from espew_lab.stealers import EncoderRidgeStealer, RidgeStealer

LEVELS = (1e-2, 1e-3, 1e-4)


def audits(key, victim, thief) -> dict:
    """The keygen audit and a round-2 traffic audit: texts, stored clean rows, rounds."""
    traffic = key.with_audit(thief.steal, victim, audit_round=2, audit_budget=2000)
    out = {}
    for name, k in (("keygen", key), ("traffic", traffic)):
        clean = unit_rows(k.probe_embeddings)
        out[name] = {
            "texts": list(k.probe_texts),
            "clean": clean,
            "white": whitened_rows(clean, k.design.mark.mu),
            "round": k.audit_round,
        }
    return out


def p_values(audit: dict, answers: dict, salt: bytes, matrices: tuple, drawn: int, fast: bool):
    """Each innocent's p-value on this audit under a fresh ``salt``: the plain way through
    ``map_unit_scores`` and ``rank_sum_p_value``, or the fast way (BLAS leans, the slope
    fit in closed form, untied ranks looked up in one table of rank-sum tails)."""
    inputs, outputs = matrices
    units = inputs.shape[1]
    z = standardised(audit["white"] @ inputs)
    mask = drawn_mask(units, draw_triggers(salt, unit_names(units), drawn))
    out = {}
    if fast:
        ref = audit["clean"] @ outputs
        ref -= ref.mean(axis=0)
        zc = z - z.mean(axis=0)
        tails = rank_sum_tails(units, drawn)
    for name, rows in answers.items():
        if not fast:
            scores = map_unit_scores(rows, audit["clean"], outputs, z)
            out[name] = min(1.0, audit["round"] * rank_sum_p_value(scores, mask))
            continue
        lean = unit_rows(rows) @ outputs
        lean -= lean.mean(axis=0)
        slope = (lean * ref).sum(axis=0) / (ref * ref).sum(axis=0)
        adjusted = snap_residual(lean - slope * ref)
        adjusted -= adjusted.mean(axis=0)
        scores = (adjusted * zc).sum(axis=0) / np.sqrt((adjusted * adjusted).sum(axis=0))
        if (np.diff(np.sort(scores)) > 0).all():
            doubled = 2 * int(((np.argsort(np.argsort(scores)) + 1) * mask).sum())
            p = float(tails[doubled]) if doubled < tails.size else 0.0
        else:
            p = rank_sum_p_value(scores, mask)
        out[name] = min(1.0, audit["round"] * p)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--check", type=int, default=20, help="salts also scored the plain way")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    started = time.perf_counter()
    texts, victim, standard, _ = corpus_lookups()
    key = victim_key(texts, victim, 1, marking="map")
    units, drawn = key.design.mark.units, len(key.triggers)
    thief = thief_for(1, texts, key, victim, standard)
    ridge = EncoderRidgeStealer(standard, features=thief.own_steal).fit(
        thief.steal, thief.clean_steal
    )
    bow = RidgeStealer(seed=1).fit(thief.steal, thief.clean_steal)
    innocents = {"ridge head on L3": ridge, "bag-of-words ridge": bow, "L3 itself": standard}
    plan = audits(key, victim, thief)
    answers = {
        audit: {
            name: np.asarray(model(a["texts"]), np.float64) for name, model in innocents.items()
        }
        for audit, a in plan.items()
    }
    rng = np.random.default_rng(20261207)
    found = {a: {n: [] for n in innocents} for a in plan}
    worst_check = 0.0
    for i in range(args.keys):
        salt = rng.bytes(16)
        matrices = map_inputs(salt, key.dim, units), map_outputs(salt, key.dim, units)
        for audit, a in plan.items():
            got = p_values(a, answers[audit], salt, matrices, drawn, fast=True)
            if i < args.check:
                plain = p_values(a, answers[audit], salt, matrices, drawn, fast=False)
                for name in got:
                    worst_check = max(
                        worst_check, abs(math.log10(got[name]) - math.log10(plain[name]))
                    )
            for name, p in got.items():
                found[audit][name].append(p)
        if (i + 1) % 1000 == 0:
            print(f"{i + 1} keys, {time.perf_counter() - started:.0f} s", flush=True)
    lines = [
        f"map keys: {args.keys} fresh salts (units {drawn} of {units}); keygen audit "
        f"{len(plan['keygen']['texts'])} texts, traffic audit {len(plan['traffic']['texts'])} "
        f"(round 2, p doubled); largest |log10 p| difference fast vs plain over {args.check} "
        f"salts: {worst_check:.1e}; {time.perf_counter() - started:.0f} s",
        "",
        "| audit | innocent | "
        + " | ".join(f"p <= {lv:g} (expected <= {args.keys * lv:g})" for lv in LEVELS)
        + " | smallest p |",
        "|---|---|" + "---|" * (len(LEVELS) + 1),
    ]
    for audit, by_name in found.items():
        for name, ps in by_name.items():
            arr = np.array(ps)
            cells = " | ".join(str(int((arr <= lv).sum())) for lv in LEVELS)
            lines.append(f"| {audit} | {name} | {cells} | {arr.min():.2g} |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        command = "python benchmarks/bench_map_null.py " + " ".join(sys.argv[1:])
        (args.out / "table.md").write_text(f"    {command}\n\n{text}\n")
        summary = {a: {n: sorted(ps)[:20] for n, ps in d.items()} for a, d in found.items()}
        (args.out / "smallest.json").write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
