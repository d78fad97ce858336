"""Is the quality-preserving key caught in the copies a real thief wants? (issues 9, 37)

For each key generated at a quality budget (mean cos(clean, watermarked) on marked
rows >= --min-cosine), a thief steals with its own traffic (``--split``, see
``thieves.py``: by default 10,000 corpus texts none of which is an audit text, or
health tweets for the thief from another domain) and these suspects are audited with
the default ``verify(suspect, key)``:

- the watermarked service itself, and re-served: the sign of each coordinate, int8,
  its first 256 or 128 dimensions, a 50/50 blend with the thief's own model
  (paraphrase-MiniLM-L3), and Gaussian noise at cos 0.95;
- copies trained on its answers: a bag-of-words ridge copy (also after CSE K=50), a
  ridge head and a frozen-MLP head on the thief's own MiniLM-L3 (the MLP also after
  CSE K=50), the kNN-5 memoriser on MiniLM-L3, and the lab's end-to-end distilled
  encoder (torch);
- thieves that route what they judge to be audit traffic to the clean model (the
  innocent twin) and the rest to their stolen service or ridge copy;
- innocents: the innocent twin (the same open model, never watermarked), copies
  trained on the clean service's answers (bag-of-words ridge, ridge head and
  frozen-MLP head on MiniLM-L3) and an independent model (MiniLM-L3).

Next to each verdict: what the suspect stole (``thieves.stolen_value``, its top-10
neighbour overlap with the clean service on 500 held-out texts less that of
MiniLM-L3), so a copy that learned nothing is not counted as one that escaped.
``--traffic-audit`` adds a second audit of every suspect: a later round drawn from
the thief's own stealing texts (``key.with_audit(stealing texts, clean model,
audit_round=2)``), the audit a provider that logged the account's traffic can run.
``--words`` adds the single-word-probe audit.

Offline MiniLM + Rotten Tomatoes. Writes ``results.json`` and ``table.md`` into
--out. Run:

    .venv/bin/python benchmarks/bench_faithful_copy.py --traffic-audit \
        --out docs/results/disjoint/faithful
    .venv/bin/python benchmarks/bench_faithful_copy.py --split tweets --traffic-audit \
        --out docs/results/disjoint/tweets
    .venv/bin/python benchmarks/bench_faithful_copy.py --split overlap --words \
        --out docs/results/faithful-range      # the earlier split (audit in training)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from thieves import SPLITS, Thief, disjoint_rows, stolen_value, thief_for

from espew_integrations import WatermarkKey, verify, watermark
from espew_integrations.core.ground.rows import unit_rows
from espew_integrations.offline.corpora import rotten_tomatoes
from espew_integrations.offline.embedders import minilm, paraphrase_minilm_l3
from espew_lab.attacks import apply_attack
from espew_lab.cache import cached_embed
from espew_lab.router import AuditHistory, AuditRouter
from espew_lab.stealers import (
    EncoderRidgeStealer,
    FrozenMLPStealer,
    KNNStealer,
    RidgeStealer,
)

TARGET_TEXT = "Acme Embeddings, licensed vectors"
RESERVED = (
    "service itself",
    "service, sign",
    "service, int8",
    "service, first 256 dims",
    "service, first 128 dims",
    "service, 50/50 blend with L3",
    "service + noise, cos 0.95",
)
COPIES = (
    "ridge",
    "ridge + CSE K=50",
    "ridge head on L3",
    "frozen-MLP on L3",
    "frozen-MLP + CSE K=50",
    "kNN-5 on L3",
    "torch encoder",
)
ROUTERS = ("router: service, twin for audits", "router: ridge, twin for audits")
GUILTY = (*RESERVED, *COPIES, *ROUTERS)
INNOCENT = (
    "innocent twin",
    "clean ridge",
    "clean ridge head on L3",
    "clean frozen-MLP on L3",
    "independent model",
)
#: The suspects whose stolen value is that of another (a router answers ordinary texts
#: from its copy; asking it for held-out texts would change what it has seen).
VALUE_OF = {ROUTERS[0]: "service itself", ROUTERS[1]: "ridge"}
NOISE_COS = 0.95


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


def victim_key(texts: Sequence[str], victim: Lookup, seed: int, **options) -> WatermarkKey:
    """The key every faithful-copy benchmark starts from: ``texts`` embedded by the
    victim, the benchmarks' target text, the victim's window, ``options`` on top. A word
    key unless ``options`` name the marking: the figures these benchmarks recorded are
    the paper's design's."""
    return WatermarkKey.generate(
        texts,
        victim,
        target_text=TARGET_TEXT,
        seed=seed,
        window=victim.model.max_tokens,
        **{"marking": "words", **options},
    )


def extended(lookup: Lookup, texts: Sequence[str], matrix: np.ndarray | None) -> Lookup:
    """``lookup`` that also knows ``matrix``'s answers for ``texts`` (a thief's tweets)."""
    if matrix is None or all(t in lookup.rows for t in texts):
        return lookup
    known = list(lookup.rows)
    more = [i for i, t in enumerate(texts) if t not in lookup.rows]
    rows = np.vstack([lookup.matrix, np.asarray(matrix, dtype=lookup.matrix.dtype)[more]])
    return Lookup(lookup.model, known + [texts[i] for i in more], rows)


def train_rows(seed: int, texts: Sequence[str], key: WatermarkKey) -> np.ndarray:
    """The corpus rows a copy of ``key`` trains on: the disjoint thief's stealing texts."""
    return np.sort(disjoint_rows(seed, texts, key)[0])


def frozen_mlp_after_cse(
    seed: int, texts, answers: np.ndarray, standard, std_matrix, key: WatermarkKey
):
    """The frozen-MLP copy after CSE K=50 as :func:`build_suspects` trains it (CSE over
    the disjoint thief's stolen answers), for a benchmark that needs only that copy."""
    train = train_rows(seed, texts, key)
    cse = apply_attack(
        "cse:50", [texts[i] for i in train], answers[train], standard=std_matrix[train], seed=seed
    ).embeddings
    return FrozenMLPStealer(standard, seed=seed, features=std_matrix[train]).fit(
        [texts[i] for i in train], cse
    )


def reserved(service: Callable, standard: Callable, seed: int) -> dict[str, Callable]:
    """The service's answers served again in another form (no training)."""
    rng = np.random.default_rng(seed)
    # Isotropic noise of norm r on a unit vector leaves cos = 1 / sqrt(1 + r^2) on average
    # in high dimension, so r is set from the cosine asked for.
    radius = float(np.sqrt(1.0 / NOISE_COS**2 - 1.0))

    def sign(batch):
        return np.sign(service(batch))

    def int8(batch):
        out = np.asarray(service(batch), dtype=np.float64)
        scale = np.abs(out).max(axis=1, keepdims=True) / 127.0
        return np.round(out / scale).astype(np.int8).astype(np.float64) * scale

    def first(n):
        return lambda batch: np.asarray(service(batch))[:, :n]

    def blend(batch):
        return unit_rows(unit_rows(service(batch)) + unit_rows(standard(batch)))

    def noise(batch):
        out = unit_rows(service(batch))
        step = rng.normal(size=out.shape)
        return out + radius * step / np.linalg.norm(step, axis=1, keepdims=True)

    return dict(zip(RESERVED[1:], (sign, int8, first(256), first(128), blend, noise), strict=True))


def build_suspects(
    seed: int, key: WatermarkKey, thief: Thief, victim, standard, *, skip=()
) -> dict[str, Callable]:
    """Every suspect of the study for one key; the guilty ones trained on the answers the
    service gave ``thief``'s stealing texts."""
    steal, own = thief.steal, thief.own_steal
    answers = watermark(steal, thief.clean_steal, key)
    clean = thief.clean_steal

    def service(batch):
        return watermark(list(batch), victim(batch), key)

    cse = apply_attack("cse:50", steal, answers, standard=own, seed=seed).embeddings
    makers: dict[str, Callable[[], Callable]] = {
        "ridge": lambda: RidgeStealer(seed=seed).fit(steal, answers),
        "ridge + CSE K=50": lambda: RidgeStealer(seed=seed).fit(steal, cse),
        "ridge head on L3": lambda: EncoderRidgeStealer(standard, features=own).fit(steal, answers),
        "frozen-MLP on L3": lambda: FrozenMLPStealer(standard, seed=seed, features=own).fit(
            steal, answers
        ),
        "frozen-MLP + CSE K=50": lambda: FrozenMLPStealer(standard, seed=seed, features=own).fit(
            steal, cse
        ),
        "kNN-5 on L3": lambda: KNNStealer(standard, k=5, features=own).fit(steal, answers),
        "torch encoder": lambda: _torch(seed).fit(steal, answers),
        "clean ridge": lambda: RidgeStealer(seed=seed).fit(steal, clean),
        "clean ridge head on L3": lambda: EncoderRidgeStealer(standard, features=own).fit(
            steal, clean
        ),
        "clean frozen-MLP on L3": lambda: FrozenMLPStealer(standard, seed=seed, features=own).fit(
            steal, clean
        ),
    }
    suspects: dict[str, Callable] = {"service itself": service}
    suspects.update(reserved(service, standard, seed))
    for name in COPIES:
        if name not in skip:
            started = time.perf_counter()
            suspects[name] = makers[name]()
            print(f"  trained {name} in {time.perf_counter() - started:.0f} s", flush=True)
    # The strongest router of the lab: it knows the library's band rule and takes every
    # text it stole with as its sample of ordinary traffic, so it watches the very band
    # the key was drawn from, with well-estimated rates.

    def history():  # each router keeps its own state (what it has seen, its window)
        return AuditHistory.from_texts(steal, rare_band=key.freq_band)

    suspects[ROUTERS[0]] = AuditRouter(service, victim, history=history())
    if "ridge" in suspects:
        suspects[ROUTERS[1]] = AuditRouter(suspects["ridge"], victim, history=history())
    suspects["innocent twin"] = victim
    for name in INNOCENT[1:-1]:
        if name not in skip:
            suspects[name] = makers[name]()
    suspects["independent model"] = standard
    return {name: s for name, s in suspects.items() if name not in skip}


def _torch(seed: int):
    from espew_lab.torch_stealer import TorchEncoderStealer

    return TorchEncoderStealer(seed=seed)


def audit(name: str, suspect: Callable, audits: dict[str, WatermarkKey], seed: int) -> dict:
    row: dict = {"suspect": name, "guilty": name in GUILTY}
    for label, key in audits.items():
        started = time.perf_counter()
        probes = "words" if label == "words" else "auto"
        report = verify(suspect, key, probes=probes, seed=seed)
        row[label] = {
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


AUDIT_TITLES = {
    "auto": "keygen audit",
    "traffic": "traffic audit (round 2, the thief's texts)",
    "words": "single-word probes",
}


def _p(x: float) -> str:
    return f"**{x:.1e}**" if x >= 1e-10 else f"{x:.1e}"


def table(results: list[dict], args: argparse.Namespace, threshold: float = 1e-10) -> str:
    """The markdown table: per suspect, stolen value and each audit's p per key.

    A guilty suspect's p-value at or above ``threshold`` is in bold."""
    labels = [a for a in ("auto", "traffic", "words") if a in results[0]["audits"]]
    seeds = ", ".join(str(r["seed"]) for r in results)
    budget = (
        f"Keys fitted to mean cos(clean, watermarked) >= {args.min_cosine} on marked rows; "
        if args.marking == "words"
        else f"{args.marking} keys at their design's quality budget (every row marked); "
    )
    lines = [
        f"Split: **{args.split}** (the thief's stealing texts: {results[0]['thief']}). "
        + budget
        + f"keys (seeds) {seeds}. Stolen value: top-10 neighbour overlap with the clean "
        "service on the thief's 500 held-out texts, less that of its own base model "
        f"(paraphrase-MiniLM-L3, {results[0]['base_top10']:.3f}); mean over keys. "
        f"A guilty suspect at p >= {threshold:g} in bold.",
        "",
        "| suspect | stolen value | "
        + " | ".join(f"{AUDIT_TITLES[a]}: p per key | copied | queries" for a in labels)
        + " |",
        "|---|---:|" + "---|:---:|---:|" * len(labels),
    ]
    for name in (*GUILTY, *INNOCENT):
        rows = [r for res in results for r in res["rows"] if r["suspect"] == name]
        if not rows:
            continue
        values = [r["value"]["stolen"] for r in rows if "value" in r]
        value = f"{np.mean(values):+.3f}" if values else ""
        cells = []
        for a in labels:
            ps = [r[a]["p_value"] for r in rows]
            shown = ", ".join(_p(p) if name in GUILTY else f"{p:.1e}" for p in ps)
            copied = sum(r[a]["status"] == "copied" for r in rows)
            cells.append(f"{shown} | {copied}/{len(rows)} | {rows[0][a]['n_queries']}")
        label = name if name in GUILTY else f"{name} (innocent)"
        lines.append(f"| {label} | {value} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "| key | strength | mean cos marked | marked rate | band | keygen probes "
        "| audit texts in the thief's training set | traffic-audit probes |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for res in results:
        info = res["key_info"]
        lines.append(
            f"| seed {res['seed']} | {info['strength']:.4f} | {info['mean_cosine_marked']:.4f} "
            f"| {info['marked_rate']:.3f} | {info['band_size']} | {res['n_probes']} "
            f"| {res['audit_overlap']:.1%} | {res.get('traffic_probes', '')} |"
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


def _merge(path: Path, results: list[dict]) -> list[dict]:
    """Earlier results of other seeds in ``path`` (a run of more keys adds to them)."""
    if not path.exists():
        return results
    seeds = {r["seed"] for r in results}
    old = json.loads(path.read_text())["results"]
    return sorted([r for r in old if r["seed"] not in seeds] + results, key=lambda r: r["seed"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--min-cosine", type=float, default=0.995)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--out", type=Path, default=Path("results/faithful"))
    parser.add_argument("--split", choices=SPLITS, default="disjoint")
    parser.add_argument(
        "--only", nargs="+", default=None, help="audit only these suspects (names as printed)"
    )
    parser.add_argument("--skip", nargs="+", default=(), help="suspects not to build")
    parser.add_argument("--traffic-audit", action="store_true")
    parser.add_argument("--words", action="store_true", help="also audit with single words")
    parser.add_argument(
        "--merge", action="store_true", help="keep other seeds' results already in --out"
    )
    parser.add_argument("--n-triggers", type=int, default=None, help="default: the library's")
    parser.add_argument("--freq-band", default=None, help="low-high, e.g. 0.01-0.015")
    parser.add_argument("--probes-per-word", type=int, default=None)
    parser.add_argument(
        "--marking",
        default="words",
        help="the key design ('map' or 'field': their own defaults, --min-cosine unused)",
    )
    args = parser.parse_args()
    started = time.perf_counter()
    texts, victim, standard, _ = corpus_lookups()
    skip = set(args.skip)
    if args.only:
        skip |= {n for n in (*GUILTY, *INNOCENT) if n not in args.only}
        skip -= {"ridge"} if "router: ridge, twin for audits" in args.only else set()
    results = []
    for seed in args.seeds:
        print(f"key seed {seed}", flush=True)
        if args.marking == "words":
            key = victim_key(texts, victim, seed, min_cosine=args.min_cosine, **key_options(args))
        else:
            key = victim_key(texts, victim, seed, marking=args.marking)
        thief = thief_for(seed, texts, key, victim, standard, split=args.split)
        held = thief.steal + thief.held
        own_rows = np.vstack([thief.own_steal, thief.own_held])
        seen_victim = extended(victim, held, np.vstack([thief.clean_steal, thief.clean_held]))
        seen_standard = extended(standard, held, own_rows)
        audits = {"auto": key}
        entry: dict = {
            "seed": seed,
            "key_info": key.info,
            "n_probes": len(key.probe_texts),
            "thief": f"{len(thief.steal)} {thief.split} texts",
            "audit_overlap": thief.audit_overlap(key),
            "audits": list(audits),
        }
        if args.traffic_audit:
            audits["traffic"] = key.with_audit(thief.steal, seen_victim, audit_round=2)
            entry["traffic_probes"] = len(audits["traffic"].probe_texts)
            entry["traffic_queries"] = audits["traffic"].audit_queries
        if args.words:
            audits["words"] = key
        entry["audits"] = list(audits)
        suspects = build_suspects(seed, key, thief, seen_victim, seen_standard, skip=skip)
        values: dict[str, dict] = {}
        for name, suspect in suspects.items():
            if name not in VALUE_OF:
                values[name] = stolen_value(suspect, thief)
        entry["base_top10"] = next(iter(values.values()))["base"] if values else float("nan")
        rows = []
        for name, suspect in suspects.items():
            rows.append(audit(name, suspect, audits, seed))
            source = VALUE_OF.get(name, name)
            if source in values:
                rows[-1]["value"] = values[source]
            line = "  ".join(
                f"{a} {rows[-1][a]['status']:12s} p={rows[-1][a]['p_value']:.1e}" for a in audits
            )
            stolen = rows[-1].get("value", {}).get("stolen", float("nan"))
            print(f"  {name:32s} stolen {stolen:+.3f}  {line}", flush=True)
        entry["rows"] = rows
        results.append(entry)
        args.out.mkdir(parents=True, exist_ok=True)
        merged = _merge(args.out / "results.json", results) if args.merge else results
        (args.out / "results.json").write_text(
            json.dumps(
                {
                    "split": args.split,
                    "min_cosine": args.min_cosine,
                    "key_options": key_options(args),
                    "seconds": round(time.perf_counter() - started),
                    "results": merged,
                },
                indent=1,
            )
        )
        (args.out / "table.md").write_text(table(merged, args))
    print(table(merged, args))
    print(f"total {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
