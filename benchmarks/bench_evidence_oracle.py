"""Does the public evidence tell a probing suspect which band words are triggers? (issue 36)

The attack: the suspect answers NaN to every audit text that holds one band word
of its choice (as the key's model reads it), answers everything else honestly,
and then reads the evidence it is handed. If a public field takes one value
whenever the withheld word is a trigger and another whenever it is not, one
audit per word reads the trigger set off, and the verdict (still COPIED) costs
the suspect nothing.

Here the suspect is the watermarked service itself (the limiting perfect copy),
audited with the default key (offline MiniLM + Rotten Tomatoes, as
``bench_faithful_copy.py`` builds it). ``--per-class`` triggers and as many other
band words are withheld, one per audit, interleaved (trigger, other, trigger,
...). For every field of the public evidence (``report.json`` flattened, each
line of ``summary.md`` and of ``str(report)``) the script prints whether it
*separates*: one value on every trigger audit and another on every other audit;
and, against an audit the suspect answered in full, whether a numeric field moves
one way whenever a trigger is withheld and the other way whenever another word is;
then every public field that differs between audits at all, to be read by eye
(each should be what the suspect itself did: texts it failed, its errors, the
time).
"Before" is the report.json of earlier versions, which equals today's
``report.to_dict(public=False)`` (every figure exact, no per-word scores).
No word, trigger or target is printed: withheld words are named by class only.

    .venv/bin/python benchmarks/bench_evidence_oracle.py
    .venv/bin/python benchmarks/bench_evidence_oracle.py --seed 2 --per-class 4
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_faithful_copy import TARGET_TEXT, corpus_lookups

from espew_integrations import VerificationReport, WatermarkKey, verify, watermark
from espew_integrations.core.audit.evidence_files import public_report, render_summary
from espew_integrations.core.mark.words import TriggerMatcher


def withholding(suspect: Callable, key: WatermarkKey, word: str) -> Callable:
    """``suspect``, but NaN for every text that holds ``word`` as the key's model reads it."""
    matcher = TriggerMatcher(key.band, normalization=key.normalization, window=key.window)

    def answer(batch: Sequence[str]) -> np.ndarray:
        batch = list(batch)
        out = np.array(suspect(batch), dtype=np.float64)
        held = np.array([word in found for found in matcher.which(batch)], dtype=bool)
        out[held] = np.nan
        return out

    return answer


def flatten(value: Any, prefix: str) -> dict[str, str]:
    """Every leaf of a JSON value, by its path; lists are one leaf (their JSON)."""
    if isinstance(value, dict):
        out: dict[str, str] = {}
        for name, inner in value.items():
            out.update(flatten(inner, f"{prefix}.{name}" if prefix else name))
        return out
    return {prefix: json.dumps(value, sort_keys=True)}


def lines_of(text: str, prefix: str) -> dict[str, str]:
    return {f"{prefix}:{i + 1}": line for i, line in enumerate(text.splitlines())}


def public_fields_of(report: VerificationReport) -> dict[str, str]:
    """What the suspect is handed: report.json, summary.md, and the printed report."""
    fields = flatten(public_report(report), "report.json")
    fields.update(lines_of(render_summary(report), "summary.md"))
    fields.update(lines_of(str(report), "str(report)"))
    return fields


def old_fields_of(report: VerificationReport) -> dict[str, str]:
    """The report.json of earlier versions: every figure exact, no per-word score."""
    return flatten(report.to_dict(public=False), "report.json")


def separating(
    audits: Sequence[dict[str, str]], is_trigger: Sequence[bool]
) -> tuple[list[str], int]:
    """The fields that take one value on every trigger audit and another on every other."""
    names = sorted(set().union(*audits))
    found = []
    for name in names:
        trig = {a.get(name) for a, t in zip(audits, is_trigger, strict=True) if t}
        other = {a.get(name) for a, t in zip(audits, is_trigger, strict=True) if not t}
        if len(trig) == 1 and len(other) == 1 and trig != other:
            found.append(name)
    return found, len(names)


def against_baseline(
    audits: Sequence[dict[str, str]], baseline: dict[str, str], is_trigger: Sequence[bool]
) -> tuple[list[str], int]:
    """The numeric fields that move one way from the fully answered audit whenever a
    trigger is withheld and the other way (or not at all) whenever another word is:
    a suspect that also answers one audit in full reads them as an oracle."""
    found = []
    for name in sorted(set().union(*audits)):
        try:
            base = float(baseline[name])
            values = [float(a[name]) for a in audits]
        except (KeyError, TypeError, ValueError):
            continue
        signs = [np.sign(v - base) for v in values]
        trig = {s for s, t in zip(signs, is_trigger, strict=True) if t}
        other = {s for s, t in zip(signs, is_trigger, strict=True) if not t}
        if len(trig) == 1 and len(other) == 1 and trig != other:
            found.append(name)
    return found, len(set().union(*audits))


def pick_words(key: WatermarkKey, per_class: int, seed: int) -> list[tuple[str, bool]]:
    """``per_class`` triggers and as many other band words, interleaved, drawn by seed."""
    rng = np.random.default_rng(seed)
    triggers = sorted(key.triggers)
    others = sorted(set(key.band) - set(key.triggers))
    t = [triggers[i] for i in rng.choice(len(triggers), per_class, replace=False)]
    o = [others[i] for i in rng.choice(len(others), per_class, replace=False)]
    return [pair for both in zip(t, o, strict=True) for pair in ((both[0], True), (both[1], False))]


def report_fields(title: str, found: Iterable[str], total: int) -> None:
    found = list(found)
    print(f"{title}: {len(found)} of {total} fields separate triggers from other band words")
    for name in found:
        print(f"    {name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1, help="key seed (as bench_faithful_copy)")
    parser.add_argument("--per-class", type=int, default=3, help="withheld words per class")
    parser.add_argument("--pick-seed", type=int, default=0, help="which words are withheld")
    args = parser.parse_args()
    started = time.perf_counter()
    texts, victim, _, _ = corpus_lookups()
    key = WatermarkKey.generate(
        texts,
        victim,
        target_text=TARGET_TEXT,
        seed=args.seed,
        window=victim.model.max_tokens,
        marking="words",
    )

    def service(batch: Sequence[str]) -> np.ndarray:
        return watermark(list(batch), victim(batch), key)

    print(
        f"key seed {args.seed}: {len(key.triggers)} triggers over {len(key.band)} band "
        f"words, {key.audit_queries} audit queries"
    )
    full = verify(service, key, seed=0)  # the suspect's own baseline: everything answered
    print(f"  baseline audit (all answered): {full.status}")
    new, old, labels = [], [], []
    for i, (word, is_trigger) in enumerate(pick_words(key, args.per_class, args.pick_seed)):
        report = verify(withholding(service, key, word), key, seed=0)
        label = "trigger" if is_trigger else "other"
        print(
            f"  audit {i + 1} withholds a {label:7s} word: {report.status}, "
            f"{report.n_failed_queries} texts withheld"
        )
        new.append(public_fields_of(report))
        old.append(old_fields_of(report))
        labels.append(is_trigger)
    report_fields("before (earlier report.json)", *separating(old, labels))
    report_fields(
        "before, against the baseline", *against_baseline(old, old_fields_of(full), labels)
    )
    report_fields("after (report.json, summary.md, str(report))", *separating(new, labels))
    report_fields(
        "after, against the baseline", *against_baseline(new, public_fields_of(full), labels)
    )
    varying = sorted(name for name in set().union(*new) if len({a.get(name) for a in new}) > 1)
    print("after: fields that differ between audits at all (what the suspect itself did):")
    for name in varying:
        print(f"    {name}")
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
