"""Is the quality-preserving key caught in the copies a real thief wants? (issue 9)

For each of 3 keys generated at a quality budget (mean cos(clean, watermarked)
on marked rows >= --min-cosine), audit these suspects with the default
``verify(suspect, key)`` and with single-word probes:

- the watermarked service itself (the limiting case of a perfect copy);
- the lab's end-to-end distilled encoder (torch), trained on its answers;
- a ridge copy, and a ridge copy trained on CSE-purified answers (K=50);
- the frozen-MLP copy (attacker's own paraphrase-MiniLM-L3 features) after CSE K=50;
- thieves that route what they judge to be audit traffic to the clean model
  (the innocent twin) and the rest to their stolen copy (the service itself,
  or the ridge copy);
- innocents: the innocent twin (the same open model, never watermarked), a
  ridge copy of the clean service, and an independent model (MiniLM-L3).

Offline MiniLM + Rotten Tomatoes. Writes ``results.json`` and ``table.md``
into --out. Run:

    .venv/bin/python benchmarks/bench_faithful_copy.py --out docs/results/faithful
    .venv/bin/python benchmarks/bench_faithful_copy.py --min-cosine 0.999 \
        --out docs/results/faithful-0999
    .venv/bin/python benchmarks/bench_faithful_copy.py --n-triggers 35 \
        --freq-band 0.01-0.015 --probes-per-word 28 --out docs/results/faithful-n35b
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from espew_integrations import WatermarkKey, verify, watermark
from espew_integrations.lab.attacks import apply_attack
from espew_integrations.lab.cache import cached_embed
from espew_integrations.lab.router import AuditHistory, AuditRouter
from espew_integrations.lab.stealers import FrozenMLPStealer, RidgeStealer
from espew_integrations.offline.corpora import rotten_tomatoes
from espew_integrations.offline.embedders import minilm, paraphrase_minilm_l3

TARGET_TEXT = "Acme Embeddings, licensed vectors"
GUILTY = (
    "service itself",
    "torch encoder",
    "ridge",
    "ridge + CSE K=50",
    "frozen-MLP + CSE K=50",
    "router: service, twin for audits",
    "router: ridge, twin for audits",
)
INNOCENT = ("innocent twin", "clean ridge", "independent model")


class Lookup:
    """A model with known answers for the corpus (from the disk cache); others computed."""

    def __init__(self, model: Callable, texts: Sequence[str], matrix: np.ndarray):
        self.model = model
        self.rows = {t: i for i, t in enumerate(texts)}
        self.matrix = matrix

    def __call__(self, batch: Sequence[str]) -> np.ndarray:
        batch = list(batch)
        out = np.empty((len(batch), self.matrix.shape[1]), dtype=np.float32)
        missing = [i for i, t in enumerate(batch) if t not in self.rows]
        known = [i for i in range(len(batch)) if batch[i] in self.rows]
        out[known] = self.matrix[[self.rows[batch[i]] for i in known]]
        if missing:
            out[missing] = self.model([batch[i] for i in missing])
        return out


def corpus_lookups() -> tuple[list[str], Lookup, Lookup, np.ndarray]:
    """The corpus, the victim (MiniLM) and standard (MiniLM-L3) models with its answers cached.

    Returns (texts, victim, standard, the standard model's answers): what every
    faithful-copy benchmark starts from.
    """
    texts = list(rotten_tomatoes().texts)
    victim_model, standard_model = minilm(), paraphrase_minilm_l3()
    victim = Lookup(
        victim_model, texts, cached_embed(victim_model, texts, model_name=victim_model.name)
    )
    std_matrix = cached_embed(standard_model, texts, model_name=standard_model.name)
    return texts, victim, Lookup(standard_model, texts, std_matrix), std_matrix


def train_rows(seed: int, n_texts: int) -> np.ndarray:
    """The rows every copy of the study trains on: all but 500 held-out texts, by seed."""
    return np.sort(np.random.default_rng(seed).permutation(n_texts)[:-500])


def frozen_mlp_after_cse(seed: int, texts, answers: np.ndarray, standard, std_matrix):
    """The frozen-MLP copy after CSE K=50, exactly as :func:`build_suspects` trains it
    (CSE over every answer, the same held-out 500 texts), for a benchmark that needs
    only that copy."""
    train = train_rows(seed, len(texts))
    cse = apply_attack("cse:50", texts, answers, standard=std_matrix, seed=seed).embeddings
    return FrozenMLPStealer(standard, seed=seed, features=std_matrix[train]).fit(
        [texts[i] for i in train], cse[train]
    )


def build_suspects(seed: int, key: WatermarkKey, texts, victim, standard, std_matrix):
    """Every suspect of the study for one key; the guilty ones trained on its answers."""
    clean = victim.matrix.astype(np.float64)
    answers = watermark(texts, clean, key)
    train = train_rows(seed, len(texts))
    train_texts = [texts[i] for i in train]

    def service(batch):
        return watermark(list(batch), victim(batch), key)

    def ridge_on(targets):
        return RidgeStealer(seed=seed).fit(train_texts, targets[train])

    cse = apply_attack("cse:50", texts, answers, standard=std_matrix, seed=seed).embeddings
    suspects: dict[str, Callable] = {"service itself": service}
    started = time.perf_counter()
    try:
        from espew_integrations.lab.torch_stealer import TorchEncoderStealer

        suspects["torch encoder"] = TorchEncoderStealer(seed=seed).fit(train_texts, answers[train])
    except ModuleNotFoundError as exc:
        print(f"  torch encoder skipped: {exc}")
    suspects["ridge"] = ridge = ridge_on(answers)
    suspects["ridge + CSE K=50"] = ridge_on(cse)
    suspects["frozen-MLP + CSE K=50"] = FrozenMLPStealer(
        standard, seed=seed, features=std_matrix[train]
    ).fit(train_texts, cse[train])
    # The strongest router of the lab: it knows the library's band rule and takes every
    # text it trained on as its sample of ordinary traffic, so it watches the very band
    # the key was drawn from, with well-estimated rates.
    traffic = train_texts

    def history():  # each router keeps its own state (what it has seen, its window)
        return AuditHistory.from_texts(traffic, rare_band=key.freq_band)

    suspects["router: service, twin for audits"] = AuditRouter(service, victim, history=history())
    suspects["router: ridge, twin for audits"] = AuditRouter(ridge, victim, history=history())
    suspects["innocent twin"] = victim
    suspects["clean ridge"] = ridge_on(clean)
    suspects["independent model"] = standard
    print(f"  trained the copies in {time.perf_counter() - started:.0f} s")
    return suspects


def audit(name: str, suspect: Callable, key: WatermarkKey, seed: int) -> dict:
    row: dict = {"suspect": name, "guilty": name in GUILTY}
    for probes in ("auto", "words"):
        started = time.perf_counter()
        report = verify(suspect, key, probes=probes, seed=seed)
        row[probes] = {
            "status": report.status,
            "p_value": report.p_value,
            "p_value_raw": report.p_value_raw,
            "p_value_adjusted": report.p_value_adjusted,
            "p_value_directed": report.p_value_directed,
            "reference_slope": report.reference_slope,
            "decided_by": report.decided_by,
            "n_queries": report.n_queries,
            "seconds": round(time.perf_counter() - started, 1),
        }
    routed = getattr(suspect, "n_routed", None)
    if routed is not None:
        row["routed_fraction"] = routed / max(suspect.n_queries, 1)
    return row


def table(results: list[dict], min_cosine: float, threshold: float) -> str:
    names = [*GUILTY, *INNOCENT]
    lines = [
        f"Keys fitted to mean cos(clean, watermarked) >= {min_cosine} on marked rows; "
        f"{len(results)} keys (seeds {', '.join(str(r['seed']) for r in results)}). "
        f"Goal: every guilty suspect p < {threshold:g}, every innocent not copied.",
        "",
        "| suspect | default audit: p per key (decided by) | queries | copied "
        "| single-word probes: p per key | queries |",
        "|---|---|---:|:---:|---|---:|",
    ]
    for name in names:
        rows = [
            next(r for r in res["rows"] if r["suspect"] == name)
            for res in results
            if any(r["suspect"] == name for r in res["rows"])
        ]
        if not rows:
            continue
        auto = ", ".join(f"{r['auto']['p_value']:.1e} ({r['auto']['decided_by']})" for r in rows)
        words = ", ".join(f"{r['words']['p_value']:.1e}" for r in rows)
        copied = sum(r["auto"]["status"] == "copied" for r in rows)
        lines.append(
            f"| {name} | {auto} | {rows[0]['auto']['n_queries']} | {copied}/{len(rows)} "
            f"| {words} | {rows[0]['words']['n_queries']} |"
        )
    lines += [
        "",
        "| key | strength | mean cos marked | marked rate | band | probes |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for res in results:
        info = res["key_info"]
        lines.append(
            f"| seed {res['seed']} | {info['strength']:.4f} | {info['mean_cosine_marked']:.4f} "
            f"| {info['marked_rate']:.3f} | {info['band_size']} | {res['n_probes']} |"
        )
    return "\n".join(lines) + "\n"


def key_options(args: argparse.Namespace) -> dict:
    """The keygen options given on the command line; the library's defaults otherwise."""
    options: dict = {}
    if args.n_triggers is not None:
        options["n_triggers"] = args.n_triggers
    if args.freq_band is not None:
        low, high = args.freq_band.split("-")
        options["freq_band"] = (float(low), float(high))
    if args.probes_per_word is not None:
        options["probes_per_word"] = args.probes_per_word
    return options


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--min-cosine", type=float, default=0.995)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--out", type=Path, default=Path("results/faithful"))
    parser.add_argument(
        "--only", nargs="+", default=None, help="audit only these suspects (names as printed)"
    )
    parser.add_argument("--n-triggers", type=int, default=None, help="default: the library's")
    parser.add_argument("--freq-band", default=None, help="low-high, e.g. 0.01-0.015")
    parser.add_argument("--probes-per-word", type=int, default=None)
    args = parser.parse_args()
    started = time.perf_counter()
    texts, victim, standard, std_matrix = corpus_lookups()
    results = []
    for seed in args.seeds:
        print(f"key seed {seed}")
        key = WatermarkKey.generate(
            texts,
            victim,
            target_text=TARGET_TEXT,
            seed=seed,
            window=victim.model.max_tokens,
            min_cosine=args.min_cosine,
            **key_options(args),
        )
        suspects = build_suspects(seed, key, texts, victim, standard, std_matrix.astype(float))
        rows = []
        for name, suspect in suspects.items():
            if args.only and name not in args.only:
                continue
            rows.append(audit(name, suspect, key, seed))
            print(
                f"  {name:24s} {rows[-1]['auto']['status']:12s} p={rows[-1]['auto']['p_value']:.1e}"
                f"  words p={rows[-1]['words']['p_value']:.1e}"
            )
        results.append(
            {"seed": seed, "key_info": key.info, "n_probes": len(key.probe_texts), "rows": rows}
        )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(
        json.dumps(
            {
                "min_cosine": args.min_cosine,
                "key_options": key_options(args),
                "seconds": round(time.perf_counter() - started),
                "results": results,
            },
            indent=1,
        )
    )
    text = table(results, args.min_cosine, 1e-10)
    (args.out / "table.md").write_text(text)
    print(text)
    print(f"total {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
