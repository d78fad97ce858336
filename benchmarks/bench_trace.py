"""Per-customer keys (issue 12): is a stolen copy traced to the right account?

On the offline MiniLM and the Rotten Tomatoes corpus, one ring
(``KeyRing.generate`` at the default 0.995 quality budget) serves 200
accounts. For each suspect, one ``trace(suspect, ring, accounts)``:

- quality of tenant keys: marked rate and mean cos(clean, watermarked) on the
  marked texts of the whole corpus, for 5 accounts, next to the shared key's;
- guilty of one account A: a ridge copy trained on A's answers, the same after
  CSE K=50, and A's own watermarked service (a faithful copy);
- innocents: the innocent twin (the clean model) and a ridge copy of clean answers;
- collusion: k accounts, the thief keeps for each text the answer most
  accounts agree on (majority for k >= 3, the first account's on a tie) or
  averages them, then trains a ridge copy;
- speed: ``trace`` over 100,000 account ids, with the suspect's own time
  (answers from a table) measured apart.

Copies are trained on all but 500 texts. Writes ``results.json`` and
``table.md`` into --out. Run:

    nice .venv/bin/python benchmarks/bench_trace.py --out docs/results/tenants
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from espew_integrations import KeyRing, trace, watermark
from espew_integrations.core.mark.probes import row_cosines
from espew_integrations.offline.corpora import rotten_tomatoes
from espew_integrations.offline.embedders import minilm, paraphrase_minilm_l3
from espew_lab.attacks import apply_attack
from espew_lab.cache import cached_embed
from espew_lab.stealers import RidgeStealer

TARGET_TEXT = "Acme Embeddings, licensed vectors"
N_ACCOUNTS = 200
GOAL_P = 1e-10


class Lookup:
    """A model with known answers for the corpus (from the disk cache); others computed."""

    def __init__(self, model: Callable, texts: Sequence[str], matrix: np.ndarray):
        self.model = model
        self.rows = {t: i for i, t in enumerate(texts)}
        self.matrix = matrix
        self.seconds = 0.0

    def __call__(self, batch: Sequence[str]) -> np.ndarray:
        started = time.perf_counter()
        batch = list(batch)
        out = np.empty((len(batch), self.matrix.shape[1]), dtype=np.float32)
        known = [i for i, t in enumerate(batch) if t in self.rows]
        missing = [i for i, t in enumerate(batch) if t not in self.rows]
        out[known] = self.matrix[[self.rows[batch[i]] for i in known]]
        if missing:
            out[missing] = self.model([batch[i] for i in missing])
        self.seconds += time.perf_counter() - started
        return out


def vote(answers: list[np.ndarray]) -> np.ndarray:
    """Per text, the answer most accounts gave exactly (ties: the earliest account's)."""
    stack = np.stack(answers)  # (k, n, d)
    agree = np.stack([(stack == stack[i]).all(axis=2).sum(axis=0) for i in range(len(answers))])
    choice = np.argmax(agree, axis=0)  # first maximum: the earliest account on a tie
    return stack[choice, np.arange(stack.shape[1])]


def quality(ring: KeyRing, accounts: Sequence[str], texts: list[str], clean: np.ndarray) -> dict:
    """Marked rate and mean cosine on marked texts: the shared key and 5 tenant keys."""
    rows = {}
    for name, key in [("shared key", ring.shared_key)] + [
        (a, ring.key_for(a)) for a in accounts[:5]
    ]:
        marked = key.contains_trigger(texts)
        idx = np.flatnonzero(marked)
        sub = [texts[i] for i in idx]
        cos = row_cosines(clean[idx], watermark(sub, clean[idx], key))
        rows[name] = {"marked_rate": float(marked.mean()), "mean_cosine_marked": float(cos.mean())}
    return rows


def run_trace(name: str, suspect: Callable, ring: KeyRing, accounts, guilty, seed) -> dict:
    started = time.perf_counter()
    report = trace(suspect, ring, accounts, seed=seed)
    strongest_other = min(
        (p for t, p in report.tenant_p_values.items() if t not in guilty), default=1.0
    )
    row = {
        "suspect": name,
        "guilty": list(guilty),
        "copied": report.copied,
        "p_value": report.p_value,
        "decided_by": report.decided_by,
        "shared_p_value": report.shared_p_value,
        "traced": list(report.traced),
        "traced_p_values": {t: report.tenant_p_values[t] for t in report.traced},
        "guilty_p_values": {t: report.tenant_p_values[t] for t in guilty},
        "smallest_innocent_p": strongest_other,
        "n_queries": report.shared.n_queries,
        "seconds": round(time.perf_counter() - started, 1),
    }
    guilty_p = [f"{p:.1e}" for p in row["guilty_p_values"].values()]
    print(
        f"  {name:34s} copied={report.copied!s:5s} p={report.p_value:.1e} "
        f"shared p={report.shared_p_value:.1e} "
        f"traced={list(report.traced)} guilty p={guilty_p} best innocent p={strongest_other:.2g}",
        flush=True,
    )
    return row


def goals(seed: int, texts: list[str], victim: Lookup, std_matrix: np.ndarray) -> dict:
    started = time.perf_counter()
    ring = KeyRing.generate(texts, victim, target_text=TARGET_TEXT, seed=seed, window=256)
    accounts = [f"customer-{i:03d}" for i in range(N_ACCOUNTS)]
    print(f"ring {ring.ring_id}: {time.perf_counter() - started:.0f} s", flush=True)
    clean = victim.matrix.astype(np.float64)
    result: dict = {"seed": seed, "ring_info": ring.shared_key.info}
    result["quality"] = quality(ring, accounts, texts, clean)
    for name, q in result["quality"].items():
        print(f"  quality {name}: {q}", flush=True)
    rng = np.random.default_rng(seed)
    train = np.sort(rng.permutation(len(texts))[:-500])
    train_texts = [texts[i] for i in train]

    def ridge_on(targets: np.ndarray) -> RidgeStealer:
        return RidgeStealer(seed=seed).fit(train_texts, targets[train])

    a = accounts[17]
    key_a = ring.key_for(a)
    answers_a = watermark(texts, clean, key_a)
    rows = []

    def service(batch):
        return watermark(list(batch), victim(batch), key_a)

    rows.append(run_trace("ridge copy of A", ridge_on(answers_a), ring, accounts, [a], seed))
    cse = apply_attack("cse:50", texts, answers_a, standard=std_matrix, seed=seed).embeddings
    rows.append(run_trace("ridge copy of A + CSE K=50", ridge_on(cse), ring, accounts, [a], seed))
    rows.append(run_trace("A's service itself", service, ring, accounts, [a], seed))
    rows.append(run_trace("innocent twin", victim, ring, accounts, [], seed))
    rows.append(run_trace("clean ridge copy", ridge_on(clean), ring, accounts, [], seed))
    for k, how in ((2, "average"), (3, "majority"), (3, "average"), (5, "majority")):
        gang = accounts[100 : 100 + k]
        answers = [watermark(texts, clean, ring.key_for(t)) for t in gang]
        stolen = vote(answers) if how == "majority" else np.mean(answers, axis=0)
        copy = ridge_on(stolen)
        rows.append(run_trace(f"{k} accounts, {how}", copy, ring, accounts, gang, seed))
    result["rows"] = rows
    result["seconds"] = round(time.perf_counter() - started)
    return result


def speed(texts: list[str], victim: Lookup, n_ids: int = 100_000) -> dict:
    """trace() over ``n_ids`` accounts against a table-backed suspect; its own time apart."""
    ring = KeyRing.generate(texts, victim, target_text=TARGET_TEXT, seed=1, window=256)
    ids = [f"acct-{i:06d}" for i in range(n_ids)]
    key = ring.key_for(ids[4242])
    answers = {t: row for t, row in zip(texts, watermark(texts, victim.matrix, key), strict=True)}

    spent = {"wall": 0.0, "cpu": 0.0}

    def suspect(batch):
        wall, cpu = time.perf_counter(), time.process_time()
        out = np.stack([answers[t] if t in answers else victim([t])[0] for t in batch])
        spent["wall"] += time.perf_counter() - wall
        spent["cpu"] += time.process_time() - cpu
        return out

    wall, cpu = time.perf_counter(), time.process_time()
    report = trace(suspect, ring, ids, seed=0)
    total, total_cpu = time.perf_counter() - wall, time.process_time() - cpu
    wall, cpu = time.perf_counter(), time.process_time()
    ring.layer_indices(ids)
    derive, derive_cpu = time.perf_counter() - wall, time.process_time() - cpu
    out = {
        "n_accounts": n_ids,
        "trace_seconds_total": round(total, 2),
        "suspect_seconds": round(spent["wall"], 2),
        "trace_seconds_excluding_queries": round(total - spent["wall"], 2),
        "trace_cpu_seconds_excluding_queries": round(total_cpu - spent["cpu"], 2),
        "derive_layers_seconds": round(derive, 2),
        "derive_layers_cpu_seconds": round(derive_cpu, 2),
        "traced": list(report.traced[:5]),
        "copied": report.copied,
    }
    print(f"speed: {out}", flush=True)
    return out


def table(results: list[dict], speed_row: dict | None) -> str:
    lines = [
        f"One ring, {N_ACCOUNTS} accounts, default 0.995 quality budget; one `trace()` per "
        f"suspect (level 1e-6, adjusted for {N_ACCOUNTS} accounts). Goal: guilty copies "
        f"shared p < {GOAL_P:g} and traced == the guilty account(s); innocents not copied, "
        "nobody traced.",
        "",
        "| suspect | seed | copied (p, decided by) | shared layer p | traced "
        "| guilty accounts' p | smallest innocent account's p |",
        "|---|---:|---|---:|---|---|---:|",
    ]
    for res in results:
        for r in res["rows"]:
            guilty = ", ".join(f"{p:.1e}" for p in r["guilty_p_values"].values()) or "-"
            traced = ", ".join(r["traced"]) or "nobody"
            lines.append(
                f"| {r['suspect']} | {res['seed']} | {r['copied']} ({r['p_value']:.1e}, "
                f"{r['decided_by']}) | {r['shared_p_value']:.1e} | {traced} | {guilty} "
                f"| {r['smallest_innocent_p']:.2g} |"
            )
    lines += ["", "| seed | key | marked rate | mean cos(clean, wm) on marked |"]
    lines += ["|---|---|---:|---:|"]
    for res in results:
        for name, q in res["quality"].items():
            lines.append(
                f"| {res['seed']} | {name} | {q['marked_rate']:.3f} "
                f"| {q['mean_cosine_marked']:.4f} |"
            )
    if speed_row:
        lines += [
            "",
            f"trace over {speed_row['n_accounts']:,} accounts: "
            f"{speed_row['trace_seconds_excluding_queries']} s wall "
            f"({speed_row.get('trace_cpu_seconds_excluding_queries', '?')} s CPU) excluding the "
            f"suspect's queries ({speed_row['trace_seconds_total']} s in all; deriving the "
            f"layers alone {speed_row['derive_layers_seconds']} s wall, "
            f"{speed_row.get('derive_layers_cpu_seconds', '?')} s CPU).",
        ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1])
    parser.add_argument("--out", type=Path, default=Path("results/tenants"))
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--only-speed", action="store_true", help="just the 100,000-account timing")
    args = parser.parse_args()
    started = time.perf_counter()
    texts = list(rotten_tomatoes().texts)
    victim_model, standard_model = minilm(), paraphrase_minilm_l3()
    victim = Lookup(
        victim_model, texts, cached_embed(victim_model, texts, model_name=victim_model.name)
    )
    std_matrix = cached_embed(standard_model, texts, model_name=standard_model.name)
    seeds = [] if args.only_speed else args.seeds
    results = [goals(seed, texts, victim, std_matrix.astype(np.float64)) for seed in seeds]
    speed_row = None if args.skip_speed else speed(texts, victim)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(
        json.dumps(
            {
                "seconds": round(time.perf_counter() - started),
                "results": results,
                "speed": speed_row,
            },
            indent=1,
        )
    )
    text = table(results, speed_row)
    (args.out / "table.md").write_text(text)
    print(text)
    print(f"total {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
