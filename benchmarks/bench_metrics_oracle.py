"""The marked counter as a trigger oracle: the counter attack on a real ``espew serve`` (issue 36).

An attacker who can read ``espew_marked_texts_total`` sends each public band word
alone and reads the counter before and after: a word whose request raised it is a
trigger. This script runs exactly that attack against a real ``espew serve``
subprocess (the offline MiniLM, a default key drawn on the offline Rotten Tomatoes
corpus, cached on disk after the first run) and prints, for each place it scrapes,
how many words it flags, how many of them are triggers, and how many triggers
flagging that many words at random would hit.

- ``api``: ``GET /metrics`` on the API port, what any client can reach. Before
  issue 36 this served the counter; now it must answer 404 and flag nothing.
- ``operator``: the ``--metrics-port`` listener (127.0.0.1 by default), which only
  the operator's Prometheus may reach. The attack succeeds there: this is why that
  port must stay private.

Run (about a minute once the key is cached; the first run draws the key):

    .venv/bin/python benchmarks/bench_metrics_oracle.py
    .venv/bin/python benchmarks/bench_metrics_oracle.py --scrape api --seed 2

Against a checkout from before issue 36 (its ``espew serve`` has no
``--metrics-port`` and served ``/metrics`` on the API port); the server runs
from wherever ``espew_integrations`` is imported from:

    git archive a202553 espew_integrations | tar -x -C /tmp/espew-before
    PYTHONPATH=/tmp/espew-before .venv/bin/python benchmarks/bench_metrics_oracle.py \
        --scrape api --without-metrics-port
"""

from __future__ import annotations

import argparse
import re
import selectors
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import httpx
import numpy as np

import espew_integrations
from espew_integrations import WatermarkKey
from espew_integrations.core.ground.defaults import (
    DEFAULT_FREQ_BAND,
    DEFAULT_N_TRIGGERS,
    DEFAULT_PROBE_MIX,
)
from espew_integrations.offline.corpora import rotten_tomatoes
from espew_integrations.offline.embedders import minilm
from espew_lab.cache import cache_dir, cached_embed

TARGET_TEXT = "Acme Embeddings, licensed vectors"
# The server runs from the folder that holds the imported package, so that
# PYTHONPATH picks the checkout under test for both this script and the server.
PACKAGE_ROOT = Path(espew_integrations.__file__).resolve().parents[1]
MODEL_NAME = "acme-embed"
COUNTER = "espew_marked_texts_total"


class CachedCorpus:
    """MiniLM with the corpus's answers read from the disk cache; other texts computed."""

    def __init__(self, texts: Sequence[str]):
        self.model = minilm()
        self.rows = {t: i for i, t in enumerate(texts)}
        self.matrix = cached_embed(self.model, texts, model_name=self.model.name)

    def __call__(self, batch: Sequence[str]) -> np.ndarray:
        batch = list(batch)
        out = np.empty((len(batch), self.matrix.shape[1]), dtype=np.float32)
        missing = [i for i, t in enumerate(batch) if t not in self.rows]
        known = [i for i, t in enumerate(batch) if t in self.rows]
        out[known] = self.matrix[[self.rows[batch[i]] for i in known]]
        if missing:
            out[missing] = self.model([batch[i] for i in missing])
        return out


def default_key(seed: int) -> Path:
    """The path of a default key (library defaults, offline MiniLM + Rotten Tomatoes), cached."""
    # Named after the defaults it was drawn with, so a change of default draws anew.
    low, high = DEFAULT_FREQ_BAND
    name = f"default-n{DEFAULT_N_TRIGGERS}-band{low:g}-{high:g}-{DEFAULT_PROBE_MIX}-seed{seed}.key"
    path = cache_dir() / "bench_metrics_oracle" / name
    if not path.exists():
        print(f"drawing the default key (seed {seed}); cached at {path}", flush=True)
        texts = list(rotten_tomatoes().texts)
        embed = CachedCorpus(texts)
        key = WatermarkKey.generate(
            texts,
            embed,
            target_text=TARGET_TEXT,
            seed=seed,
            window=embed.model.max_tokens,
            marking="words",
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        key.save(path)
    return path


def start_server(
    key_path: Path, log: Path, *, metrics_port: bool = True
) -> tuple[subprocess.Popen, str, str | None]:
    """``espew serve`` (with an operator listener unless told not to).

    Returns (process, API base URL, metrics URL or None).
    """
    args = [
        sys.executable,
        "-m",
        "espew_integrations.cli",
        "serve",
        "--embedder",
        "minilm",
        "--key",
        str(key_path),
        "--model-name",
        MODEL_NAME,
        "--port",
        "0",
        *(["--metrics-port", "0"] if metrics_port else []),
    ]
    proc = subprocess.Popen(
        args, cwd=PACKAGE_ROOT, stdout=subprocess.PIPE, stderr=log.open("w"), text=True
    )
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)
    api = metrics = None
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and (api is None or (metrics_port and metrics is None)):
        if selector.select(timeout=0.5):
            line = proc.stdout.readline()
            for url in re.findall(r"http://\S+", line):
                if url.endswith("/v1"):
                    api = url
                elif url.endswith("/metrics"):
                    metrics = url
        if proc.poll() is not None:
            break
    if api is None or (metrics_port and metrics is None):
        proc.kill()
        raise SystemExit(f"espew serve did not start:\n{log.read_text()}")
    return proc, api, metrics


def read_counter(client: httpx.Client, url: str) -> float | None:
    """The marked counter at ``url``, or None when there is no counter there."""
    answer = client.get(url)
    if answer.status_code != 200:
        return None
    for line in answer.text.splitlines():
        if line.startswith(COUNTER + " "):
            return float(line.split()[1])
    return None


def counter_attack(client: httpx.Client, api: str, scrape_url: str, band: Sequence[str]) -> dict:
    """Each band word alone, the counter read before and after: the words that raised it."""
    flagged, counters_seen, statuses = [], 0, set()
    for word in band:
        before = read_counter(client, scrape_url)
        answer = client.post(f"{api}/embeddings", json={"model": MODEL_NAME, "input": [word]})
        statuses.add(answer.status_code)
        after = read_counter(client, scrape_url)
        if before is not None and after is not None:
            counters_seen += 1
            if after > before:
                flagged.append(word)
    return {
        "flagged": flagged,
        "scrapes_with_counter": counters_seen,
        "scrape_status": client.get(scrape_url).status_code,
        "embed_statuses": sorted(statuses),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1, help="the default key's seed")
    parser.add_argument(
        "--scrape", nargs="+", choices=("api", "operator"), default=["api", "operator"]
    )
    parser.add_argument(
        "--without-metrics-port",
        action="store_true",
        help="start espew serve without --metrics-port (a checkout from before issue 36)",
    )
    args = parser.parse_args()
    if args.without_metrics_port and "operator" in args.scrape:
        parser.error("--without-metrics-port has no operator listener: use --scrape api")
    key_path = default_key(args.seed)
    key = WatermarkKey.load(key_path)
    band = sorted(key.band)
    triggers = set(key.triggers)
    print(
        f"default key seed {args.seed}: {len(triggers)} triggers in a band of {len(band)} words",
        flush=True,
    )
    with tempfile.TemporaryDirectory() as tmp:
        proc, api, operator = start_server(
            key_path, Path(tmp) / "serve.log", metrics_port=not args.without_metrics_port
        )
        print(f"espew serve from {PACKAGE_ROOT}", flush=True)
        try:
            with httpx.Client(timeout=60) as client:
                for place in args.scrape:
                    if place == "operator":
                        scrape_url = operator
                    else:
                        scrape_url = api.removesuffix("/v1") + "/metrics"
                    started = time.perf_counter()
                    result = counter_attack(client, api, scrape_url, band)
                    hits = sum(word in triggers for word in result["flagged"])
                    chance = len(result["flagged"]) * len(triggers) / len(band)
                    print(
                        f"{place:8s} GET {scrape_url}: status {result['scrape_status']}, "
                        f"{len(band)} requests and {2 * len(band)} scrapes in "
                        f"{time.perf_counter() - started:.1f} s (embeddings answered "
                        f"{result['embed_statuses']}); counter read in "
                        f"{result['scrapes_with_counter']} of {len(band)} before/after pairs; "
                        f"flagged {len(result['flagged'])} words, {hits} of {len(triggers)} "
                        f"triggers, {len(result['flagged']) - hits} false positives; chance "
                        f"flagging as many words would hit {chance:.1f}",
                        flush=True,
                    )
        finally:
            proc.terminate()
            proc.wait(timeout=30)


if __name__ == "__main__":
    main()
