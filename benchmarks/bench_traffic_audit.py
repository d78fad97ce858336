"""A thief trained on its own traffic, audited with what it sent (issue 37).

Real processes and real HTTP, through the commands a provider runs. For each seed:

1. ``espew keygen`` on one half of Rotten Tomatoes (the keygen corpus);
2. ``espew serve --key K --traffic-sample S.jsonl`` serves MiniLM with that key;
3. the thief sends the other half (none of it in the keygen corpus) through the
   OpenAI client and fits a ridge head on paraphrase-MiniLM-L3 (its own open
   model) to the answers; an innocent fits the same head to the clean MiniLM
   answers of the same texts;
4. ``espew key reaudit K --corpus S.jsonl --text-column text --round 2
   --audit-budget N`` draws a later audit round of N texts from what the server
   sampled, for each N of ``--budgets``;
5. both heads are audited with the keygen audit (round 1) and each traffic audit
   (round 2, whose p-value verify multiplies by 2).

``--in-process`` builds the same keys and answers without the commands and HTTP.

    nice .venv/bin/python benchmarks/bench_traffic_audit.py --seeds 1 \\
        --out docs/results/traffic-audit/http
    nice .venv/bin/python benchmarks/bench_traffic_audit.py --seeds 1 2 3 4 5 6 \\
        --in-process --out docs/results/traffic-audit/in-process
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from espew_integrations import OpenAIEndpoint, WatermarkKey, verify, watermark
from espew_integrations.core.records.traffic_sample import TrafficSample
from espew_integrations.offline.corpora import rotten_tomatoes
from espew_lab.stealers import EncoderRidgeStealer

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_faithful_copy import TARGET_TEXT, corpus_lookups, victim_key

ROOT = Path(__file__).resolve().parents[1]
ESPEW = [sys.executable, "-m", "espew_integrations.cli"]


def split_corpus(seed: int) -> tuple[list[str], list[str]]:
    """(the provider's keygen corpus, the thief's traffic): two disjoint halves."""
    texts = list(rotten_tomatoes().texts)
    order = np.random.default_rng([20261128, seed]).permutation(len(texts))
    half = len(texts) // 2
    return [texts[i] for i in sorted(order[:half])], [texts[i] for i in sorted(order[half:])]


def run(args: list[str], **kwargs) -> str:
    done = subprocess.run(
        [*ESPEW, *args], cwd=ROOT, capture_output=True, text=True, check=False, **kwargs
    )
    if done.returncode != 0:
        raise SystemExit(f"espew {' '.join(args[:2])} failed:\n{done.stderr[-2000:]}")
    return done.stdout


def serve_and_steal(key_path: Path, sample_path: Path, traffic: list[str]) -> np.ndarray:
    """Serve the key with a traffic sample; the thief's answers for ``traffic``."""
    proc = subprocess.Popen(
        [
            *ESPEW,
            "serve",
            "--embedder",
            "minilm",
            "--key",
            str(key_path),
            "--port",
            "0",
            "--model-name",
            "acme-embed",
            "--traffic-sample",
            str(sample_path),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        url = None
        while url is None:
            line = proc.stdout.readline()
            if not line:
                raise SystemExit("espew serve did not start")
            if "http://" in line:
                url = line.rsplit(" on ", 1)[1].strip()
        with OpenAIEndpoint(url, "acme-embed") as client:
            answers = np.vstack([client(traffic[i : i + 256]) for i in range(0, len(traffic), 256)])
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    return answers.astype(np.float64)


def audit(suspect, key: WatermarkKey) -> dict:
    report = verify(suspect, key, seed=0, deadline=None)
    return {"status": report.status, "p_value": float(report.p_value)}


def keys_over_http(seed: int, work: Path, budgets: list[int]) -> tuple:
    """Keygen, serving with a traffic sample and each re-audit, through the commands."""
    keygen_corpus, traffic = split_corpus(seed)
    corpus_file = work / "keygen-corpus.txt"
    corpus_file.write_text("\n".join(keygen_corpus) + "\n")
    key_path, sample_path = work / "k.key", work / "traffic.jsonl"
    seed_flag = ["--seed", str(seed), "--target-text", TARGET_TEXT, "--no-progress"]
    run(["keygen", "--corpus", str(corpus_file), "--embedder", "minilm", "--out", str(key_path),
         *seed_flag])  # fmt: skip
    stolen = serve_and_steal(key_path, sample_path, traffic)
    sampled = [json.loads(line)["text"] for line in sample_path.open()]
    rounds = {}
    for budget in budgets:
        out = work / f"k2-{budget}.key"
        run(["key", "reaudit", str(key_path), "--corpus", str(sample_path), "--text-column",
             "text", "--embedder", "minilm", "--round", "2", "--audit-budget", str(budget),
             "--out", str(out), "--no-progress"])  # fmt: skip
        rounds[budget] = WatermarkKey.load(out)
    return WatermarkKey.load(key_path), rounds, keygen_corpus, traffic, stolen, sampled


def keys_in_process(seed: int, budgets: list[int], key_options: dict) -> tuple:
    """The same keys and answers in one process: the answers ``espew serve`` sends are
    ``watermark(texts, clean, key)`` bit for bit, and the sample keeps every text when
    the traffic is smaller than its capacity."""
    keygen_corpus, traffic = split_corpus(seed)
    _, victim, _, _ = corpus_lookups()
    key = victim_key(keygen_corpus, victim, seed, **key_options)
    clean = np.asarray(victim(traffic), dtype=np.float32)
    stolen = watermark(traffic, clean, key).astype(np.float64)
    with tempfile.TemporaryDirectory() as work:
        sample = TrafficSample(Path(work) / "traffic.jsonl")
        sample.record(traffic)
        sampled = sample.texts()
    rounds = {
        budget: key.with_audit(sampled, victim, audit_round=2, audit_budget=budget)
        for budget in budgets
    }
    return key, rounds, keygen_corpus, traffic, stolen, sampled


def one_seed(seed: int, budgets: list[int], *, over_http: bool, key_options: dict) -> dict:
    started = time.perf_counter()
    # The key files stay until the audits end: a loaded key reads its audit file lazily.
    with tempfile.TemporaryDirectory() as work:
        os.chmod(work, 0o700)
        built = (
            keys_over_http(seed, Path(work), budgets)
            if over_http
            else keys_in_process(seed, budgets, key_options)
        )
        return audited(seed, built, over_http=over_http, key_options=key_options, started=started)


def audited(seed: int, built: tuple, *, over_http: bool, key_options: dict, started: float) -> dict:
    """Both heads fitted on the traffic, audited with the keygen audit and each round."""
    key, rounds, keygen_corpus, traffic, stolen, sampled = built
    # The thief's encoder and the clean answers, from the benchmarks' embedding cache
    # (the same numbers as paraphrase_minilm_l3() and minilm(), computed once).
    _, victim, own, _ = corpus_lookups()
    features = np.asarray(own(traffic), dtype=np.float64)
    clean = np.asarray(victim(traffic), dtype=np.float64)
    copies = {
        "ridge head on L3, stolen answers": EncoderRidgeStealer(own, features=features).fit(
            traffic, stolen
        ),
        "ridge head on L3, clean answers (innocent)": EncoderRidgeStealer(
            own, features=features
        ).fit(traffic, clean),
    }
    in_traffic = set(traffic)
    result = {
        "seed": seed,
        "over_http": over_http,
        "key_options": {k: list(v) if isinstance(v, tuple) else v for k, v in key_options.items()},
        "keygen_corpus_texts": len(keygen_corpus),
        "traffic_texts": len(traffic),
        "sampled_texts": len(sampled),
        "keygen_audit_in_thief_training": float(
            np.mean([t in in_traffic for t in (*key.probe_texts, *key.cover_texts)])
        ),
        "traffic_audit_queries": {b: k.audit_queries for b, k in rounds.items()},
        "copies": {
            name: {
                "keygen audit": audit(copy, key),
                **{f"traffic audit {b}": audit(copy, k) for b, k in rounds.items()},
            }
            for name, copy in copies.items()
        },
    }
    result["seconds"] = round(time.perf_counter() - started, 1)
    return result


def table(results: list[dict]) -> str:
    columns = [c for c in results[0]["copies"][next(iter(results[0]["copies"]))]]
    heads = [
        "keygen audit (1,950 texts)"
        if c == "keygen audit"
        else f"traffic audit, round 2, {int(c.rsplit(' ', 1)[1]):,} texts"
        for c in columns
    ]
    lines = ["| seed | copy | " + " | ".join(heads) + " |", "|---|---|" + "---:|" * len(heads)]
    for r in results:
        for name, audits in r["copies"].items():
            cells = [f"{audits[c]['p_value']:.2g}" for c in columns]
            lines.append(f"| {r['seed']} | {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--budgets", type=int, nargs="+", default=[1950, 4000, 6000])
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="skip the commands and HTTP (same keys and answers, much faster)",
    )
    parser.add_argument(
        "--freq-band", type=float, nargs=2, default=None, help="in-process: another key band"
    )
    parser.add_argument("--n-triggers", type=int, default=None, help="in-process: triggers")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    key_options = {}
    if args.freq_band is not None:
        key_options["freq_band"] = tuple(args.freq_band)
    if args.n_triggers is not None:
        key_options["n_triggers"] = args.n_triggers
    if key_options and not args.in_process:
        parser.error("--freq-band and --n-triggers need --in-process")
    results = []
    for seed in args.seeds:
        result = one_seed(
            seed, args.budgets, over_http=not args.in_process, key_options=key_options
        )
        results.append(result)
        print(json.dumps({k: v for k, v in result.items() if k != "copies"}), flush=True)
        print(table([result]), flush=True)
    print(table(results))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
        (args.out / "table.md").write_text(
            f"Command: `{' '.join(['python', *sys.argv])}`\n\n{table(results)}\n"
        )


if __name__ == "__main__":
    main()
