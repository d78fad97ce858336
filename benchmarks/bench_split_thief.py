"""A thief that splits its traffic over accounts, against audits drawn from one account
and from all of them pooled (issue 54).

The thief of ``bench_unavoidable`` (its 6,000 stealing texts disjoint from the key's
audit, a ridge head on its own open encoder, paraphrase-MiniLM-L3) sends its queries
from ``--accounts`` accounts of ``--per-account`` texts each. The service keeps the
traffic sample ``espew serve --traffic-sample`` keeps (a real ``TrafficSample``
file, one reservoir per account). Then, on the default key design (field):

- **per account**: a round-2 audit drawn from one account's sampled texts
  (``espew key reaudit --account ID``), for every account: the per-account power;
- **pooled**: one round-2 audit drawn from every account's texts together
  (``espew key reaudit --all-accounts``), as large as the pool: one exact test;
- **family**: the Bonferroni p over the per-account audits and the pooled one
  (``bonferroni_p_value``), what an auditor who ran them all may claim.

The same audits face three innocents: the clean model itself, a ridge copy of the
clean (unwatermarked) service trained on the same texts, and the open model alone.
They must stay above the level in every audit and in the family.

    .venv/bin/python benchmarks/bench_split_thief.py --seeds 1 --out docs/results/split-thief

Results: docs/results/split-thief/ (``--out``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_faithful_copy import corpus_lookups, victim_key
from bench_strip_band import Memo
from thieves import thief_for

from espew_integrations import verify, watermark
from espew_integrations.core.ground.defaults import DEFAULT_LEVEL
from espew_integrations.core.ground.errors import KeyGenerationError
from espew_integrations.core.records.traffic_sample import TrafficSample, read_traffic_texts
from espew_integrations.core.stats.ranktest import bonferroni_p_value
from espew_lab.stealers import EncoderRidgeStealer

ROUND = 2  # a traffic audit is a later round of the key (verify multiplies by it)


def account_names(count: int) -> list[str]:
    return [f"account-{number:02d}" for number in range(count)]


def sampled_accounts(steal: list[str], count: int, per_account: int, seed: int, folder: Path):
    """The thief's texts sent from ``count`` accounts (a seeded split), through a real
    traffic sample file; returns the file and each account's sampled texts."""
    order = np.random.default_rng(seed + 54).permutation(len(steal))[: count * per_account]
    sample = TrafficSample(folder / "traffic.jsonl", capacity=max(per_account, 1))
    names = account_names(count)
    for number, name in enumerate(names):
        rows = order[number * per_account : (number + 1) * per_account]
        sample.record([steal[i] for i in rows], account=name)
    sample.flush()
    return sample.path, {name: read_traffic_texts(sample.path, account=name) for name in names}


def audit_p(key, texts, memo, suspect, seed: int) -> float | None:
    """The p-value of the round-2 audit drawn from ``texts`` (None: refused at its twin
    check, the clean model itself implicated on that draw)."""
    try:
        audit = key.with_audit(texts, memo, audit_round=ROUND, audit_budget=len(texts))
    except KeyGenerationError as exc:
        print(f"    audit refused: {str(exc)[:100]}", flush=True)
        return None
    return verify(suspect, audit, seed=seed).p_value


def run_seed(seed: int, args, texts, victim, standard) -> dict:
    key = victim_key(texts, victim, seed, marking="field")
    n_steal = args.accounts * args.per_account
    thief = thief_for(seed, texts, key, victim, standard, n_steal=n_steal)
    steal = list(thief.steal)
    clean = thief.clean_steal.astype(np.float64)
    memo = Memo(victim.model)
    memo.answers.update(zip(steal, thief.clean_steal.astype(np.float32), strict=True))
    own = thief.own_steal
    suspects = {
        "thief": EncoderRidgeStealer(standard, features=own).fit(
            steal, watermark(steal, clean, key)
        ),
        "clean model": victim,
        "clean-service copy": EncoderRidgeStealer(standard, features=own).fit(steal, clean),
        "open model": standard,
    }
    with tempfile.TemporaryDirectory(prefix="espew-split-") as folder:
        path, per_account = sampled_accounts(
            steal, args.accounts, args.per_account, seed, Path(folder)
        )
        pooled = read_traffic_texts(path, account=list(per_account))
    row: dict = {"seed": seed, "key_id": key.key_id, "pooled_texts": len(pooled)}
    for name, suspect in suspects.items():
        started = time.time()
        accounts = [audit_p(key, t, memo, suspect, seed) for t in per_account.values()]
        tested = [p for p in accounts if p is not None]
        pooled_p = audit_p(key, pooled, memo, suspect, seed)
        family = bonferroni_p_value([*tested, *([pooled_p] if pooled_p is not None else [])])
        row[name] = {
            "pooled_p": pooled_p,
            "family_p": family,
            "per_account_p": accounts,
            "accounts_tested": len(tested),
            "per_account_min_p": min(tested) if tested else None,
            "per_account_median_p": float(np.median(tested)) if tested else None,
            "per_account_convicted": sum(p < args.level for p in tested),
            "per_account_convicted_bonferroni": sum(
                p * (len(tested) + 1) < args.level for p in tested
            ),
        }
        print(_line(seed, name, row[name], args.level, time.time() - started), flush=True)
    return row


def _line(seed: int, name: str, found: dict, level: float, seconds: float) -> str:
    pooled = "refused" if found["pooled_p"] is None else f"{found['pooled_p']:.2e}"
    return (
        f"seed {seed} {name:>18}: pooled p {pooled}  family p {found['family_p']:.2e}  "
        f"per account: min {found['per_account_min_p']:.2e}, median "
        f"{found['per_account_median_p']:.2e}, {found['per_account_convicted']}/"
        f"{found['accounts_tested']} below {level:g} alone, "
        f"{found['per_account_convicted_bonferroni']} after Bonferroni  ({seconds:.0f} s)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1])
    parser.add_argument("--accounts", type=int, default=30)
    parser.add_argument("--per-account", type=int, default=200)
    parser.add_argument("--level", type=float, default=DEFAULT_LEVEL)
    parser.add_argument("--out", type=Path, default=None, help="folder for results.json")
    args = parser.parse_args()
    started = time.time()
    texts, victim, standard, _ = corpus_lookups()
    rows = [run_seed(seed, args, texts, victim, standard) for seed in args.seeds]
    print(f"done in {time.time() - started:.0f} s")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        settings = {"accounts": args.accounts, "per_account": args.per_account}
        document = {"settings": {**settings, "level": args.level, "round": ROUND}, "rows": rows}
        (args.out / "results.json").write_text(json.dumps(document, indent=1) + "\n")


if __name__ == "__main__":
    main()
