"""Can an informed thief avoid the mark? Word triggers against the keyed field (issue 44).

Kerckhoffs: the thief has this repository, a corpus like the provider's and an open
model (paraphrase-MiniLM-L3); only the key is secret. With word triggers drawn from
a public frequency range, the thief computes that range on its own texts and keeps
every word of it away from the service, so no answer it receives is marked. The
field mark (``marking="field"``) moves every answer by a keyed linear function of
its clean embedding, so there is no word, and no text, to keep away.

For each key design and seed, the thief's 6,000 stealing texts are disjoint from the
key's audit (``thieves.thief_for``), its copy is a ridge head on its own open
encoder (``EncoderRidgeStealer``), and the cost of every avoidance is measured by
what the copy keeps (``thieves.stolen_value``: top-10 neighbour overlap with the
clean service on 500 held-out original texts, less that of the open model itself),
never by how far its texts move. The thieves:

- ``untouched``: queries its texts as they are;
- ``delete``: deletes every word whose document fraction on its own texts lies in
  the public range (with a 20% margin on each edge) before querying;
- ``replace``: replaces each such word by its nearest word outside the range under
  its open model (the cheapest edit that keeps the meaning);
- ``drop30``: fits its head, drops the 30% of answers it fits worst, and refits
  (a mark it cannot see may still be an outlier);
- ``reseller``: no copy: the service itself answering the ``replace`` rewrites of
  the audit's texts (a proxy that rewrites its customers' queries); judged by the
  mean cosine of its answers to the service's clean answers to the originals.

A removal pays only when the copy keeps at most half the stolen value of the
untouched copy; a reseller escapes only with answers at mean cos <= 0.85 to clean.

    .venv/bin/python benchmarks/bench_unavoidable.py --marking words field --seeds 1 2 3
    .venv/bin/python benchmarks/bench_unavoidable.py --marking field --traffic 6000

``--traffic N`` also audits each copy with a round drawn from N texts of what it sent
(``key.with_audit``: the traffic audit of a provider that samples its traffic).

Results: docs/results/unavoidable/ (``--out``); discussion: docs/limitations.md.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_faithful_copy import corpus_lookups, victim_key
from bench_strip_band import Memo, row_cosines, strip_words
from thieves import stolen_value, thief_for

from espew_integrations import WatermarkKey, verify, watermark
from espew_integrations.core.ground.defaults import DEFAULT_FREQ_BAND
from espew_integrations.core.ground.text import canonicalize
from espew_integrations.core.mark.words import band_words, document_frequencies
from espew_lab.cache import cached_embed
from espew_lab.stealers import EncoderRidgeStealer

N_STEAL = 6_000
MARGIN = 0.2  # the thief widens the public range by this share on each edge
DROP = 0.3
_WORD = re.compile(r"[^\W_]+")
_SPACES = re.compile(r"\s+")


def public_band(texts: Sequence[str]) -> set[str]:
    """The words a thief reads as the public range, on its own texts, with a margin."""
    counts, n = document_frequencies(texts)
    low, high = DEFAULT_FREQ_BAND
    return set(band_words(counts, n, (low * (1 - MARGIN), min(1.0, high * (1 + MARGIN)))))


def replacements(texts: Sequence[str], band: set[str], own) -> dict[str, str]:
    """Each band word's nearest word outside the band under the thief's own model."""
    counts, _ = document_frequencies(texts)
    outside = sorted(w for w, c in counts.items() if c >= 2 and w not in band)
    inside = sorted(band)
    rows_out = cached_embed(own, outside, model_name=own.name).astype(np.float64)
    rows_in = cached_embed(own, inside, model_name=own.name).astype(np.float64)
    rows_out /= np.linalg.norm(rows_out, axis=1, keepdims=True)
    rows_in /= np.linalg.norm(rows_in, axis=1, keepdims=True)
    nearest = np.argmax(rows_in @ rows_out.T, axis=1)
    return {w: outside[j] for w, j in zip(inside, nearest, strict=True)}


def replace_words(texts: Sequence[str], table: dict[str, str]) -> list[str]:
    """Each text's canonical form with every word of ``table`` replaced."""
    out = []
    for text in texts:
        kept = _WORD.sub(lambda m: table.get(m.group(0), m.group(0)), canonicalize(text))
        out.append(_SPACES.sub(" ", kept).strip() or ".")
    return out


def service_for(key: WatermarkKey, clean):
    """The watermarked service: the clean model's answers, marked with ``key``."""

    def service(batch: Sequence[str]) -> np.ndarray:
        batch = list(batch)
        return watermark(batch, clean(batch), key)

    return service


def marked_share(key: WatermarkKey, texts: Sequence[str], clean_rows: np.ndarray) -> float:
    """The share of ``texts`` whose answer the service moves."""
    answers = watermark(list(texts), clean_rows, key)
    return float(np.mean(np.any(answers != clean_rows.astype(answers.dtype), axis=1)))


def _traffic_p(
    key: WatermarkKey, sent: Sequence[str], memo, copy, seed: int, budget: int, references=()
) -> float | None:
    """The p-value of a round-2 audit drawn from what the thief sent (its traffic sample)."""
    try:
        round_two = key.with_audit(list(sent), memo, audit_round=2, audit_budget=budget)
    except ValueError as exc:  # a word key whose band the thief kept away: nothing to ask
        print(f"    traffic audit refused: {str(exc)[:120]}", flush=True)
        return None
    return verify(copy, round_two, seed=seed, references=list(references)).p_value


THIEVES = ("untouched", "delete", "replace", "drop30", "reseller")


def run_seed(marking: str, seed: int, texts, victim, standard, args) -> list[dict]:
    """Every thief of ``args.thieves`` against the key of ``marking`` and ``seed``; with
    ``args.traffic`` texts, each copy also faces a traffic audit."""
    options = {} if marking == "words" else {"marking": marking}
    if marking == "field" and args.field_min_cosine is not None:
        options["field_min_cosine"] = args.field_min_cosine
    key = victim_key(texts, victim, seed, **options)
    thief = thief_for(seed, texts, key, victim, standard, n_steal=N_STEAL)
    refs = []
    if args.references and marking == "field":
        from bench_field_power import reference_copies

        refs = reference_copies(texts, key, thief, victim, standard)
    memo = Memo(victim.model)
    memo.answers.update(zip(thief.steal, thief.clean_steal.astype(np.float32), strict=True))
    band = public_band(thief.steal)
    table = replacements(thief.steal, band, standard.model)
    sent = {
        "untouched": list(thief.steal),
        "delete": strip_words(thief.steal, band),
        "replace": replace_words(thief.steal, table),
    }
    rows = []
    untouched_value = None
    for name in [t for t in ("untouched", "delete", "replace", "drop30") if t in args.thieves]:
        queries = sent.get(name, sent["untouched"])
        clean_rows = cached_embed(memo, queries, model_name=victim.model.name).astype(np.float64)
        answers = watermark(queries, clean_rows, key)
        own = cached_embed(standard.model, queries, model_name=standard.model.name)
        copy = EncoderRidgeStealer(standard, features=own).fit(queries, answers)
        if name == "drop30":
            fitted = copy(queries)
            misfit = 1.0 - row_cosines(fitted, answers)
            keep = misfit <= np.quantile(misfit, 1.0 - DROP)
            kept = [q for q, k in zip(queries, keep, strict=True) if k]
            copy = EncoderRidgeStealer(standard, features=own[keep]).fit(kept, answers[keep])
        value = stolen_value(copy, thief)
        if name == "untouched":
            untouched_value = value["stolen"]
        report = verify(copy, key, seed=seed)
        traffic = _traffic_p(key, queries, memo, copy, seed, args.traffic) if args.traffic else None
        with_refs = {}
        if refs:  # the same audits with the auditor's reference copies
            with_refs["p_value_references"] = verify(copy, key, seed=seed, references=refs).p_value
            if args.traffic:
                with_refs["traffic_p_references"] = _traffic_p(
                    key, queries, memo, copy, seed, args.traffic, refs
                )
        rows.append(
            {
                "marking": marking,
                "seed": seed,
                "thief": name,
                "texts_changed": _changed(queries, thief.steal),
                "marked": marked_share(key, queries, clean_rows),
                "stolen": value["stolen"],
                "kept": value["stolen"] / untouched_value if untouched_value else float("nan"),
                "fidelity": value.get("fidelity", float("nan")),
                "p_value": report.p_value,
                "status": report.status,
                "traffic_p": traffic,
                **with_refs,
            }
        )
        print(_line(rows[-1]), flush=True)
    if "reseller" in args.thieves:
        rows.append(_reseller(marking, seed, key, table, victim, memo))
        print(_line(rows[-1]), flush=True)
    return rows


def _reseller(marking, seed, key, table, victim, memo) -> dict:
    """The service answering rewritten queries: how close to clean, and is it convicted."""
    service = service_for(key, memo)

    def reseller(batch: Sequence[str]) -> np.ndarray:
        return service(replace_words(list(batch), table))

    audit = [*key.probe_texts, *key.cover_texts]
    answers = reseller(audit)
    clean = np.asarray(memo(audit), dtype=np.float64)
    report = verify(reseller, key, seed=seed)
    return {
        "marking": marking,
        "seed": seed,
        "thief": "reseller",
        "texts_changed": _changed(replace_words(audit, table), audit),
        "mean_cos_to_clean": float(row_cosines(answers, clean).mean()),
        "p_value": report.p_value,
        "status": report.status,
    }


def _changed(sent: Sequence[str], original: Sequence[str]) -> float:
    """The share of texts an edit changed, beyond the canonical form the library reads."""
    return float(
        np.mean([s != canonicalize(o) and s != o for s, o in zip(sent, original, strict=True)])
    )


def _line(row: dict) -> str:
    if row["thief"] == "reseller":
        return (
            f"{row['marking']:<6} {row['seed']:>4} {'reseller':<10} changed "
            f"{row['texts_changed']:.3f}  cos to clean {row['mean_cos_to_clean']:.3f}  "
            f"p {row['p_value']:.2e} ({row['status']})"
        )
    return (
        f"{row['marking']:<6} {row['seed']:>4} {row['thief']:<10} changed "
        f"{row['texts_changed']:.3f}  marked {row['marked']:.3f}  stolen {row['stolen']:+.4f} "
        f"(kept {row['kept']:.2f})  fidelity {row['fidelity']:.3f}  p {row['p_value']:.2e}"
        + ("" if row.get("traffic_p") is None else f"  traffic p {row['traffic_p']:.2e}")
        + "".join(
            f"  {name} {row[key]:.2e}"
            for key, name in (
                ("p_value_references", "p+refs"),
                ("traffic_p_references", "traffic p+refs"),
            )
            if row.get(key) is not None
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--marking", nargs="+", default=["words", "field"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--out", type=Path, default=None, help="folder for results.json")
    parser.add_argument(
        "--traffic", type=int, default=0, help="also audit each copy with N texts of its traffic"
    )
    parser.add_argument("--field-min-cosine", type=float, default=None)
    parser.add_argument("--thieves", nargs="+", default=list(THIEVES), choices=THIEVES)
    parser.add_argument(
        "--references",
        action="store_true",
        help="field keys: also audit with the auditor's reference copies (bench_field_power)",
    )
    args = parser.parse_args()
    started = time.time()
    texts, victim, standard, _ = corpus_lookups()
    rows: list[dict] = []
    for marking in args.marking:
        for seed in args.seeds:
            rows.extend(run_seed(marking, seed, texts, victim, standard, args))
    print(f"done in {time.time() - started:.0f} s")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
