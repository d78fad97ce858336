"""False positives of the field mark: fresh keys against innocents (issue 44).

The field statistic is exact by construction: the unit scores depend on the suspect's
answers, the audit's clean rows and the salt's Gaussian matrix, never on which units
were drawn, so for an innocent the drawn units are a uniformly random subset of the
scored ones and ``P(p <= a) <= a``. This script checks the implementation against that
claim. It makes one field key (offline MiniLM, Rotten Tomatoes) for the quality
settings and the audit, then for each of ``--keys`` fresh salts draws a new field
(matrix and units) and scores fixed innocent answers exactly as ``verify`` does
(:func:`espew_integrations.core.mark.field.scoring_projections`, ``field_scores``, the
exact rank test), for two audits:

- ``keygen``: the key's own 1,950-text audit;
- ``traffic``: 1,950 texts of the innocent's own traffic (texts outside the keygen
  corpus), as a round-2 traffic audit would ask it;

and three innocents: a ridge head on paraphrase-MiniLM-L3 fitted to the clean
service's answers (a copy of the unmarked service: innocent of every key), the open
model itself mapped into the key's coordinates (the alignment verify fits), and the
clean service with float16 noise (the provider's own model, served slightly
differently). It prints, per audit and innocent, how many of the keys' p-values fall
at or below 1e-2, 1e-3, 1e-4 and 1e-6, against the counts the level allows.

    .venv/bin/python benchmarks/bench_field_null.py --keys 10000
    .venv/bin/python benchmarks/bench_field_null.py --keys 10000 --references

``--references``: each lean is also adjusted for the leans of the verifier's reference
copies (``bench_field_levers.py``, variant ``references``: a ridge head on L3 and a
bag-of-words ridge fitted to the clean service's answers to corpus texts that are
neither an audit's nor the innocents' training texts).

Results: docs/results/unavoidable/field-null.txt (``--out``; ``field-null-references.txt``
with ``--references``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_faithful_copy import corpus_lookups, victim_key
from bench_field_levers import adjusted_lean

from espew_integrations.core.audit.directed import mark_directions
from espew_integrations.core.ground.draw import draw_triggers
from espew_integrations.core.ground.rows import unit_rows
from espew_integrations.core.mark.field import (
    drawn_mask,
    field_scores,
    keyed_gaussian,
    standardised,
    unit_names,
    whitened_rows,
)
from espew_integrations.core.stats.align import fit_alignment
from espew_integrations.core.stats.ranktest import rank_sum_p_value
from espew_lab.stealers import EncoderRidgeStealer, RidgeStealer

LEVELS = (1e-2, 1e-3, 1e-4, 1e-6)


def innocents(texts, victim, standard, audit_rows: np.ndarray, audit_texts, train_texts):
    """Each innocent's answers to ``audit_texts``, in the key's coordinates."""
    clean_train = victim(train_texts).astype(np.float64)
    copy = EncoderRidgeStealer(standard).fit(train_texts, clean_train)
    own = standard(audit_texts).astype(np.float64)
    alignment = fit_alignment(own, audit_rows, audit_rows.shape[1])
    rng = np.random.default_rng(0)
    noisy = audit_rows + rng.normal(scale=1e-3, size=audit_rows.shape)
    return {
        "clean ridge head on L3": copy(audit_texts),
        "L3 mapped": own if alignment is None else alignment.apply(own),
        "clean service, noised": noisy.astype(np.float16).astype(np.float64),
    }


def study(
    key, audit_rows, answers: dict, n_keys: int, seed: int, references=None
) -> dict[str, np.ndarray]:
    clean = unit_rows(audit_rows)
    directions = mark_directions(audit_rows, key)
    # with references, each innocent's adjusted lean is fixed before any key is drawn
    adjusted = {
        name: adjusted_lean(unit_rows(rows), directions, clean, references)
        for name, rows in answers.items()
    }
    field = key.design.field
    units = unit_names(field.units)
    out = {name: np.empty(n_keys) for name in answers}
    whitened = whitened_rows(clean, clean.mean(axis=0))  # scoring_projections, in two steps
    salts = np.random.default_rng(seed)  # the fresh keys' salts, reproducible by seed
    for i in range(n_keys):
        salt = salts.bytes(32)
        gaussian = keyed_gaussian(salt, key.dim, field.units)
        drawn = drawn_mask(field.units, draw_triggers(salt, units, len(key.triggers)))
        z = standardised(whitened @ gaussian)
        for name, rows in answers.items():
            if references is None:
                scores = field_scores(rows, directions, clean, z)
            else:
                scores = adjusted[name] @ (z - z.mean(axis=0))
            out[name][i] = rank_sum_p_value(scores, drawn)
    return out


def table(results: dict[str, dict[str, np.ndarray]], n_keys: int) -> list[str]:
    head = "audit    innocent                    " + "  ".join(f"<={a:g}" for a in LEVELS)
    lines = [
        head,
        "         (expected)                  " + "  ".join(f"{a * n_keys:>6.2f}" for a in LEVELS),
    ]
    for audit, per in results.items():
        for name, p in per.items():
            counts = "  ".join(f"{int((p <= a).sum()):>6d}" for a in LEVELS)
            lines.append(f"{audit:<8} {name:<27} {counts}   min p {p.min():.2e}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--references", action="store_true", help="adjust for reference copies")
    args = parser.parse_args()
    started = time.time()
    texts, victim, standard, _ = corpus_lookups()
    key = victim_key(texts, victim, args.seed, marking="field")
    audit_texts = list(key.probe_texts)
    audit_rows = np.asarray(key.probe_embeddings, dtype=np.float64)
    in_audit = set(audit_texts)
    rest = [t for t in texts if t not in in_audit]
    order = np.random.default_rng(args.seed).permutation(len(rest))
    train = [rest[i] for i in order[:6000]]
    traffic = [rest[i] for i in order[6000 : 6000 + len(audit_texts)]]
    traffic_rows = victim(traffic).astype(np.float64)
    made = []
    if args.references:  # the verifier's own texts: neither an audit's nor the training's
        own = [rest[i] for i in order[6000 + len(audit_texts) :]]
        own_clean = victim(own).astype(np.float64)
        made = [
            EncoderRidgeStealer(standard).fit(own, own_clean),
            RidgeStealer(seed=args.seed).fit(own, own_clean),
        ]
    results = {}
    for offset, (audit, (a_texts, a_rows)) in enumerate(
        {
            "keygen": (audit_texts, audit_rows),
            "traffic": (traffic, traffic_rows),
        }.items()
    ):
        answers = innocents(texts, victim, standard, a_rows, a_texts, train)
        references = [r(a_texts) for r in made] if args.references else None
        results[audit] = study(
            key, a_rows, answers, args.keys, 1000 * args.seed + offset, references
        )
        print(f"{audit} audit done after {time.time() - started:.0f} s", flush=True)
    lines = [
        f"field null study: {args.keys} fresh keys per audit and innocent "
        f"(offline MiniLM, Rotten Tomatoes, {len(audit_texts)}-text audits, "
        f"{key.design.field.units} units, {len(key.triggers)} drawn"
        + (", leans adjusted for reference copies)" if args.references else ")"),
        *table(results, args.keys),
    ]
    print("\n".join(lines))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        name = "field-null-references.txt" if args.references else "field-null.txt"
        (args.out / name).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
