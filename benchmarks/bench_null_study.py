"""Large null study: observed false positives of the verdict over >= 10,000 fresh keys per suspect.

Innocent suspects (none ever saw a watermark):
  - the clean MiniLM itself (the provider's own model, the hardest innocent case),
  - an extraction copy (hashed tf-idf + ridge) trained on CLEAN MiniLM embeddings,
  - paraphrase-MiniLM-L3, an independent model of the same dimension.

Two studies, both against these three suspects:

1. **The verdict of today's ``verify()``** (issue 9): one real key made by
   ``WatermarkKey.generate`` on Rotten Tomatoes with the offline MiniLM, with its
   natural-sentence probes and clean reference cosines. Each null trial is a
   fresh salt, hence a fresh trigger draw (``draw_triggers``), against a fixed
   suspect, exactly as ``key.replace(salt=..., triggers=draw_triggers(...))``
   in tests/integration/test_verify_faithful.py. Each suspect answers the ~1,600 probe texts
   once; its raw and reference-adjusted word scores and the fitted slope are
   computed once with verify's own functions (``_probe_cosines``,
   ``_mean_per_word``, ``reference_slope``): none of them depends on the draw.
   Each draw's p-values come from ``rank_sum_p_value`` itself, called once per
   distinct rank sum (given the scores, the p-value is a function of the
   triggers' rank sum alone). The raw, adjusted and combined
   (``min(1, 2 min(p_raw, p_adj))``) p-values are counted separately, and the
   first ``--verify-draws`` draws per suspect go through ``verify()`` itself,
   which must give the same p-values exactly.
2. **The paper's KS contrast and the single-word study** (as before): 50 target
   texts, 20 triggers drawn uniformly from the band, single-word probes; the
   paper's probe-level two-sided KS recipe (20 backdoor and 20 benign 4-word
   sentences) on the clean copy with 300 keys.

    python benchmarks/bench_null_study.py [--draws 10000] [--trials 10000] [--out docs/results/null]

Writes ``table.md`` and ``results.json`` into ``--out`` (no key material:
neither salts, triggers, target text nor target values).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from scipy.stats import beta, ks_2samp

from espew_integrations import WatermarkKey, verify
from espew_integrations.core.audit.scores import score_words
from espew_integrations.core.audit.word_probes import build_probes
from espew_integrations.core.ground.draw import draw_triggers
from espew_integrations.core.stats.ranktest import doubled_mid_ranks, min_p_value, rank_sum_p_value
from espew_integrations.offline.corpora import health_tweets, load_corpus
from espew_integrations.offline.embedders import minilm, paraphrase_minilm_l3
from espew_lab.cache import cached_embed
from espew_lab.null_study import (
    PARTS,
    NullStudy,
    audit_scores,
    combined_p_values,
    false_positive_summary,
    fresh_draws,
    null_p_values,
)
from espew_lab.stealers import RidgeStealer

LEVELS = (1e-2, 1e-3, 1e-4, 1e-6)
N_TARGETS = 50
#: The issue's bar: observed / expected false positives at 1e-3, and none at 1e-6.
MAX_RATIO_AT_1E3 = 1.5
STATISTICS = ("raw", "adjusted", "directed", "combined")
#: An experiment key (seeded, hence public by construction): the same recipe as the
#: faithful-copy tests. Its target text is never printed or written out.
AUDIT_KEY_SEED = 3
AUDIT_TARGET_TEXT = "Acme Embeddings, licensed vectors"
DRAW_SEED = 2026


def unit(rows: np.ndarray) -> np.ndarray:
    rows = np.asarray(rows, dtype=np.float64)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


class Memo:
    """A suspect that computes each distinct text once; later calls read the memo.

    The offline models encode one text at a time, so a memoised answer is the
    answer the model would give again, bit for bit.
    """

    def __init__(self, embed: Callable[[list[str]], np.ndarray], rows: dict | None = None):
        self.embed = embed
        self.rows = dict(rows or {})
        self.n_embedded = 0

    def preload(self, texts: Sequence[str], rows: np.ndarray) -> Memo:
        self.rows.update(zip(texts, rows, strict=True))
        return self

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        missing = list(dict.fromkeys(t for t in texts if t not in self.rows))
        if missing:
            answers = np.asarray(self.embed(missing))
            self.rows.update(zip(missing, answers, strict=True))
            self.n_embedded += len(missing)
        return np.stack([self.rows[t] for t in texts])


# ---------------------------------------------------------------------- single-word study (before)
def word_level_study(suspect, band, targets, n_trials, rng) -> NullStudy:
    probes, owner = build_probes(band)
    answers = np.asarray(suspect(probes), dtype=np.float64)
    per_target = -(-n_trials // len(targets))
    p_values = [
        null_p_values(score_words(answers, owner, t, len(band)), 20, per_target, rng)
        for t in targets
    ]
    return NullStudy(per_target * len(targets), np.concatenate(p_values))


def paper_ks_study(suspect, band, target, n_keys, rng) -> np.ndarray:
    """The paper's recipe: 20 backdoor / 20 benign sentences of 4 words, two-sided KS."""
    band = np.asarray(band)
    p_values = []
    for _ in range(n_keys):
        is_trigger = np.zeros(len(band), bool)
        is_trigger[rng.choice(len(band), 20, replace=False)] = True
        triggers, benign = band[is_trigger], band[~is_trigger]
        backdoor = [" ".join(rng.choice(triggers, 4)) for _ in range(20)]
        normal = [" ".join(rng.choice(benign, 4)) for _ in range(20)]
        cos = unit(suspect(backdoor + normal)) @ target
        p_values.append(ks_2samp(cos[:20], cos[20:]).pvalue)
    return np.asarray(p_values)


# ---------------------------------------------------------------------- the verdict of verify()
def exact_p_values(scores: np.ndarray, draws: np.ndarray) -> np.ndarray:
    """``rank_sum_p_value(scores, mask)`` for every draw (row of band indices).

    Given the scores, the p-value depends on the mask only through the
    triggers' (doubled mid-)rank sum, so the function itself is called once
    per distinct sum and the result is shared by every draw with that sum.
    """
    doubled = doubled_mid_ranks(scores)  # the ranks rank_sum_p_value sums
    sums = doubled[draws].sum(axis=1)
    _, first, inverse = np.unique(sums, return_index=True, return_inverse=True)
    distinct = np.empty(first.size)
    for j, row in enumerate(first):
        mask = np.zeros(scores.size, dtype=bool)
        mask[draws[row]] = True
        distinct[j] = rank_sum_p_value(scores, mask)
    return distinct[inverse.ravel()]


def fast_p_values(scores: dict, draws: np.ndarray, p_values=None) -> dict[str, np.ndarray]:
    """Each statistic's p-value for every draw, and the combined verdict's."""
    p_values = p_values or exact_p_values
    fast = {s: p_values(scores[s], draws) for s in PARTS if s in scores}
    fast["combined"] = combined_p_values(*fast.values())
    return fast


def check_against_verify(suspect, key, salts, draws, fast, n_check) -> dict:
    """Run ``verify()`` on the first ``n_check`` fresh keys; its p-values must equal ``fast``.

    Equal to 1e-9 relative: a suspect that is a live model may answer a text in a batch
    of other texts with different last bits, and linear algebra on arrays laid out
    differently in memory can differ in the last bit too. ``bit_identical`` counts the
    p-values that agree exactly, ``max_relative_difference`` says how far the rest are.
    """
    mismatches = []
    identical, worst = 0, 0.0
    statuses: dict[str, int] = {}
    started = time.perf_counter()
    for d in range(min(n_check, len(salts))):
        trial = key.replace(
            salt=salts[d], triggers=draw_triggers(salts[d], key.band, len(key.triggers))
        )
        report = verify(suspect, trial, seed=d)
        statuses[report.status] = statuses.get(report.status, 0) + 1
        got = {
            "raw": report.p_value_raw,
            "adjusted": report.p_value_adjusted,
            "directed": report.p_value_directed,
            "combined": report.p_value,
        }
        for name, value in got.items():
            if name not in fast:
                continue
            expected = float(fast[name][d])
            identical += value == expected
            worst = max(worst, abs(value - expected) / max(abs(expected), 1e-300))
            if not np.isclose(value, expected, rtol=1e-9, atol=0.0):
                mismatches.append((d, name, value, expected))
    return {
        "draws": min(n_check, len(salts)),
        "mismatches": len(mismatches),
        "bit_identical": identical,
        "max_relative_difference": worst,
        "first_mismatches": mismatches[:5],
        "statuses": statuses,
        "seconds": round(time.perf_counter() - started, 1),
    }


def counts_row(p_values: np.ndarray) -> dict:
    """False positives at each level, the expected count, the ratio and a 95% interval."""
    n = int(p_values.size)
    out = {"trials": n}
    for level in LEVELS:
        k = int(np.count_nonzero(p_values < level))
        low = 0.0 if k == 0 else float(beta.ppf(0.025, k, n - k + 1))
        high = 1.0 if k == n else float(beta.ppf(0.975, k + 1, n - k))
        out[f"{level:.0e}"] = {
            "false_positives": k,
            "expected": n * level,
            "ratio": k / (n * level),
            "rate_95ci": [low, high],
        }
    return out


def audit_null_study(suspects: dict, key: WatermarkKey, args) -> dict:
    results = {}
    for i, (name, suspect) in enumerate(suspects.items()):
        started = time.perf_counter()
        answers = np.asarray(suspect(list(key.probe_texts)), dtype=np.float64)
        cover = np.asarray(suspect(list(key.cover_texts)), dtype=np.float64)
        scores = audit_scores(answers, key, cover if len(key.cover_texts) else None)
        n_draws = args.ridge_draws if "ridge" in name and args.ridge_draws else args.draws
        rng = np.random.default_rng([DRAW_SEED, i])
        salts, draws = fresh_draws(key, n_draws, rng)
        fast = fast_p_values(scores, draws)
        parts = [s for s in PARTS if s in fast]
        decided = np.array(parts)[np.argmin(np.stack([fast[s] for s in parts]), axis=0)]
        fast_seconds = time.perf_counter() - started
        check = check_against_verify(suspect, key, salts, draws, fast, args.verify_draws)
        results[name] = {
            "reference_slope": round(float(scores["slope"]), 4),
            "distinct_scores": {s: int(np.unique(scores[s]).size) for s in ("raw", "adjusted")},
            "rows": {s: counts_row(fast[s]) for s in STATISTICS},
            "share_decided_by": {s: round(float((decided == s).mean()), 4) for s in parts},
            "median_p_combined": float(np.median(fast["combined"])),
            "smallest_p": {s: float(fast[s].min()) for s in STATISTICS},
            "verify_check": check,
            "fast_path_seconds": round(fast_seconds, 1),
        }
        print(
            f"  {name}: {n_draws} fresh keys in {fast_seconds:.0f} s, slope "
            f"{scores['slope']:.3f}; verify() on {check['draws']} of them: "
            f"{check['mismatches']} mismatches ({check['seconds']:.0f} s)",
            flush=True,
        )
    return results


def pooled_rows(results: dict) -> dict:
    """Counts summed over the suspects (each suspect's draws are independent)."""
    out = {}
    for s in STATISTICS:
        rows = [r["rows"][s] for r in results.values()]
        n = sum(r["trials"] for r in rows)
        row: dict = {"trials": n}
        for level in LEVELS:
            tag = f"{level:.0e}"
            k = sum(r[tag]["false_positives"] for r in rows)
            row[tag] = {"false_positives": k, "expected": n * level, "ratio": k / (n * level)}
        out[s] = row
    return out


# ---------------------------------------------------------------------- output
def _cell(row: dict, level: float) -> str:
    c = row[f"{level:.0e}"]
    return f"{c['false_positives']} ({c['expected']:.3g})"


def markdown_table(results: dict, pooled: dict, meta: dict, legacy: dict, ks: dict) -> str:
    lines = [
        "# Null study: false positives of the verdict against innocent services",
        "",
        f"Command: `{meta['command']}` (wall time {meta['wall_seconds']:.0f} s on "
        f"{meta['machine']}).",
        "",
        "## The verdict of `verify()`: raw, reference-adjusted, directed and combined",
        "",
        f"One key from `WatermarkKey.generate` (Rotten Tomatoes, offline MiniLM, seed "
        f"{AUDIT_KEY_SEED}, fitted strength {meta['audit_key']['strength']:.3f}): "
        f"{meta['audit_key']['band']} band words, {meta['audit_key']['triggers']} triggers, "
        f"{meta['audit_key']['probes']} sentence probes; smallest reachable p "
        f"{meta['audit_key']['min_p']:.1e}. Each trial is a fresh salt, hence a fresh trigger "
        "draw, against a fixed innocent suspect. Cells: false positives (expected count "
        "at the nominal level); ratio = observed / expected. Goal: ratio <= "
        f"{MAX_RATIO_AT_1E3} at 1e-3, 0 at 1e-6.",
        "",
        "| suspect | statistic | trials | p < 1e-3 | ratio | p < 1e-6 | p < 1e-2 | p < 1e-4 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, r in [*results.items(), ("all three, pooled", {"rows": pooled})]:
        for s in STATISTICS:
            row = r["rows"][s]
            lines.append(
                f"| {name} | {s} | {row['trials']:,} | {_cell(row, 1e-3)} | "
                f"{row['1e-03']['ratio']:.2f} | {_cell(row, 1e-6)} | {_cell(row, 1e-2)} | "
                f"{_cell(row, 1e-4)} |"
            )
    lines += [
        "",
        "| suspect | combined rate at 1e-3, 95% interval | fitted slope | distinct adjusted "
        "scores | decided by raw / adjusted / directed | median combined p | verify() check |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        c = r["verify_check"]
        low, high = r["rows"]["combined"]["1e-03"]["rate_95ci"]
        lines.append(
            f"| {name} | {low:.1e} to {high:.1e} | {r['reference_slope']:.3f} | "
            f"{r['distinct_scores']['adjusted']} of {meta['audit_key']['band']} | "
            + " / ".join(f"{v:.0%}" for v in r["share_decided_by"].values())
            + f" | {r['median_p_combined']:.2f} | "
            f"{c['draws']} keys through `verify()`: {c['mismatches']} p-values differ |"
        )
    lines += [
        "",
        "The fast path and `verify()` share every function (`_probe_cosines`, "
        "`_mean_per_word`, `reference_slope`, `mark_directions`, `directed_scores`, "
        "`word_scores_from_texts`, `rank_sum_p_value`); the check compares the raw, "
        "adjusted, directed and combined p-values of each key with `==`. At 10,000 trials the "
        "count at 1e-3 is Poisson-like with mean <= 10, so counts up to about 16 are "
        "ordinary noise. The twin answers exactly what the clean reference recorded, so its "
        "adjusted scores (raw minus 1.000 x reference) are floating-point rounding residue "
        "with many ties; the rank test conditions on ties and stays exact on them.",
        "",
        "## Before: single-word probes, 50 targets (the earlier study, same suspects)",
        "",
        "Each suspect's 10,000 keys share 50 target texts (200 draws per target), so the "
        "counts scatter more than independent trials would.",
        "",
        "| suspect | trials | p < 1e-2 | p < 1e-3 | p < 1e-4 | p < 1e-6 |",
        "|---|---|---|---|---|---|",
    ]
    for name, row in legacy.items():
        cells = " | ".join(_cell(row, level) for level in LEVELS)
        lines.append(f"| {name} | {row['trials']:,} | {cells} |")
    lines += [
        "",
        "## Contrast: the paper's probe-level KS recipe",
        "",
        f"Two-sided KS, 20 backdoor and 20 benign 4-word sentences, against the clean ridge "
        f"copy, {ks['keys']} keys: "
        + ", ".join(f"{v['rate']:.1%} at p < {k}" for k, v in ks["levels"].items())
        + f"; smallest p {ks['smallest_p']:.1e}.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--draws",
        type=int,
        default=10_000,
        help="fresh keys per suspect for the verdict of verify()",
    )
    parser.add_argument(
        "--ridge-draws",
        type=int,
        default=0,
        help="fresh keys for the ridge copy (default: --draws)",
    )
    parser.add_argument(
        "--verify-draws",
        type=int,
        default=200,
        help="of those, how many also go through verify() itself",
    )
    parser.add_argument(
        "--trials",
        type=int,
        default=10_000,
        help="null trials per suspect for the single-word study",
    )
    parser.add_argument("--corpus", default="rotten_tomatoes")
    parser.add_argument(
        "--copy-texts",
        type=int,
        default=5000,
        help="training texts of the ridge copy in the single-word study",
    )
    parser.add_argument(
        "--audit-copy-texts",
        type=int,
        default=4000,
        help="training texts of the ridge copy in the verdict study",
    )
    parser.add_argument("--out", default="docs/results/null", help="'' to write nothing")
    args = parser.parse_args()
    started = time.perf_counter()
    rng = np.random.default_rng(2026)
    corpus = load_corpus(args.corpus)
    model = minilm()
    # Every corpus text's MiniLM answer, from the on-disk cache: the twin, keygen and the
    # copies' training data read it instead of re-encoding.
    corpus_rows = cached_embed(model, corpus.texts, model_name=model.name, progress=True)
    twin = Memo(model).preload(corpus.texts, corpus_rows)

    # ------------------------------------------------------------ 1. the verdict of verify()
    audit_key = WatermarkKey.generate(
        corpus.texts,
        twin,
        target_text=AUDIT_TARGET_TEXT,
        seed=AUDIT_KEY_SEED,
        window=model.max_tokens,
        marking="words",  # the paper's design, as measured
    )
    other = paraphrase_minilm_l3()
    probes = list(audit_key.probe_texts)
    other_memo = Memo(other).preload(
        probes, cached_embed(other, probes, model_name=other.name, progress=True)
    )
    audit_train = corpus.subset(args.audit_copy_texts, seed=0)
    audit_copy = RidgeStealer(seed=0).fit(audit_train.texts, twin(list(audit_train.texts)))
    audit_suspects = {
        "clean MiniLM (the twin)": twin,
        f"ridge copy of the clean service ({args.audit_copy_texts:,} texts)": Memo(audit_copy),
        "paraphrase-MiniLM-L3 (independent)": other_memo,
    }
    n_band, n_triggers = len(audit_key.band), len(audit_key.triggers)
    print(
        f"verdict of verify(): {n_band} band words, {n_triggers} triggers, "
        f"{len(probes)} sentence probes, smallest reachable p "
        f"{min_p_value(n_band, n_triggers):.1e}; key ready after "
        f"{time.perf_counter() - started:.0f} s",
        flush=True,
    )
    results = audit_null_study(audit_suspects, audit_key, args)
    pooled = pooled_rows(results)
    for name, r in [*results.items(), ("all three, pooled", {"rows": pooled})]:
        print(f"\n== {name}")
        print(
            f"{'statistic':>10} {'trials':>7} {'p<1e-3 (exp)':>14} {'ratio':>6} "
            f"{'p<1e-6 (exp)':>14} {'p<1e-2 (exp)':>14}"
        )
        for s in STATISTICS:
            row = r["rows"][s]
            print(
                f"{s:>10} {row['trials']:>7} {_cell(row, 1e-3):>14} "
                f"{row['1e-03']['ratio']:>6.2f} {_cell(row, 1e-6):>14} "
                f"{_cell(row, 1e-2):>14}"
            )

    # ------------------------------------------------------------ 2. single-word study, KS
    key = WatermarkKey.generate(  # the paper's recipe on the 20-trigger key's 0.5-1% band
        corpus.texts,
        twin,
        target_text="band reference",
        seed=1,
        twin_check=False,
        n_triggers=20,
        freq_band=(0.005, 0.01),
        marking="words",  # the paper's design, as measured
    )
    band = list(key.band)
    # Target texts from another corpus, as a provider's identity strings would be.
    target_texts = list(health_tweets().subset(N_TARGETS, seed=7).texts)
    targets = unit(model(target_texts))

    train = corpus.subset(args.copy_texts, seed=0)
    copy = RidgeStealer(seed=0).fit(train.texts, twin(list(train.texts)))
    suspects = {
        "clean MiniLM (the twin)": model,
        "clean extraction copy (ridge)": copy,
        "paraphrase-MiniLM-L3 (independent)": other,
    }
    print(
        f"\nsingle-word study: band: {len(band)} words of {corpus.name} in {key.freq_band}; "
        f"20 triggers per key; {N_TARGETS} target texts; smallest reachable p = "
        f"{min_p_value(len(band), 20):.1e}"
    )
    total = 0
    legacy = {}
    for name, suspect in suspects.items():
        study = word_level_study(suspect, band, targets, args.trials, rng)
        total += study.n_trials
        legacy[name] = counts_row(study.p_values)
        print(f"\n== word-level exact rank test vs {name}: {study.n_trials} fresh keys")
        print(false_positive_summary(study, LEVELS))
    # target_mode="query": the suspect's own embedding of each target text.
    query_targets = unit(other(target_texts))
    study = word_level_study(other, band, query_targets, args.trials, rng)
    total += study.n_trials
    legacy["paraphrase-MiniLM-L3, target='query'"] = counts_row(study.p_values)
    print(f"\n== word-level test, target='query', vs paraphrase-MiniLM-L3: {study.n_trials} keys")
    print(false_positive_summary(study, LEVELS))

    ks_p = paper_ks_study(copy, band, targets[0], 300, rng)
    print("\n== paper's probe-level two-sided KS recipe vs the clean copy: 300 keys")
    ks = {"keys": 300, "smallest_p": float(ks_p.min()), "levels": {}}
    for level in LEVELS[:3]:
        ks["levels"][f"{level:.0e}"] = {
            "convicted": int((ks_p < level).sum()),
            "rate": float((ks_p < level).mean()),
        }
        print(f"   p < {level:.0e}: {int((ks_p < level).sum())}/300 = {(ks_p < level).mean():.1%}")
    print(f"   smallest KS p-value: {ks_p.min():.1e}")
    wall = time.perf_counter() - started
    print(f"\n{total} single-word null trials; {wall:.0f} s in all")

    failures = [
        f"{name}: verify() disagrees with the fast path on {r['verify_check']['mismatches']}"
        for name, r in results.items()
        if r["verify_check"]["mismatches"]
    ]
    for name, r in results.items():
        row = r["rows"]["combined"]
        if row["trials"] < 10_000:
            continue  # too few trials to judge a ratio at 1e-3
        if row["1e-03"]["ratio"] > MAX_RATIO_AT_1E3 or row["1e-06"]["false_positives"]:
            failures.append(f"{name}: combined statistic misses the bar")
    if args.out:
        command = " ".join(["python", "benchmarks/bench_null_study.py", *sys.argv[1:]])
        meta = {
            "command": command,
            "wall_seconds": round(wall, 1),
            "machine": f"{platform.machine()}, {os.cpu_count()} shared CPU cores",
            "audit_key": {
                "corpus": corpus.name,
                "seed": AUDIT_KEY_SEED,
                "strength": audit_key.strength,
                "band": n_band,
                "triggers": n_triggers,
                "probes": len(probes),
                "min_p": min_p_value(n_band, n_triggers),
            },
            "draw_seed": DRAW_SEED,
            "goal": {"max_ratio_at_1e-3": MAX_RATIO_AT_1E3, "false_positives_at_1e-6": 0},
            "goal_failures": failures,
        }
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        document = {
            "meta": meta,
            "verify_null_study": results,
            "verify_null_study_pooled": pooled,
            "single_word_study": legacy,
            "paper_ks_contrast": ks,
        }
        (out / "results.json").write_text(json.dumps(document, indent=2) + "\n")
        (out / "table.md").write_text(markdown_table(results, pooled, meta, legacy, ks))
        print(f"wrote {out / 'table.md'} and {out / 'results.json'}")
    if failures:
        print("\n".join(["NOT MET:", *failures]))
        raise SystemExit(1)


if __name__ == "__main__":
    main()
