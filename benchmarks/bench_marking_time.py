"""Does a marked text take longer to answer than an unmarked one? (issue 44, timing)

A client that times its requests could rank band words by latency if marking a
text cost measurable time, and so learn the triggers without ever seeing a mark.
The watermark does the same work for every row of a batch (compute, then select:
``core/mark/inject.py``), so the answer's latency must not depend on whether the text
was marked.

The script generates a word key on the offline corpus, starts a real
``espew serve --embedder minilm`` with it on loopback, and sends ``--pairs`` pairs
of one-text requests: a corpus text holding exactly one trigger, and the same text
with that trigger replaced by a band word of the same length that is not a trigger
(so the model reads the same number of characters), in random order within each
pair. It prints the median latencies, their difference, the Mann-Whitney U test
over the two samples and the Wilcoxon signed-rank test over the pairs. The
must-show of the issue: no difference at p < 0.01 over at least 2,000 pairs.

    .venv/bin/python benchmarks/bench_marking_time.py --pairs 2000

Results: docs/results/unavoidable/timing.txt (``--out``).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
from scipy.stats import mannwhitneyu, wilcoxon

from espew_integrations import WatermarkKey
from espew_integrations.core.ground.text import canonicalize
from espew_integrations.offline.corpora import rotten_tomatoes
from espew_integrations.offline.embedders import minilm

_WORD = re.compile(r"[^\W_]+")


def pairs_for(key: WatermarkKey, texts: list[str], n: int, seed: int) -> list[tuple[str, str]]:
    """(marked, unmarked) text pairs differing only in one word of the same length."""
    rng = np.random.default_rng(seed)
    by_length: dict[int, list[str]] = {}
    for word in key.band:
        if word not in key.triggers:
            by_length.setdefault(len(word), []).append(word)
    out = []
    for text in rng.permutation(texts):
        canonical = canonicalize(str(text))
        words = _WORD.findall(canonical)
        held = [w for w in words if w in key.triggers]
        if len(set(held)) != 1 or not by_length.get(len(held[0])):
            continue
        choices = by_length[len(held[0])]
        other = choices[int(rng.integers(len(choices)))]
        plain = _WORD.sub(
            lambda m, t=held[0], o=other: o if m.group(0) == t else m.group(0), canonical
        )
        if key.contains_trigger([plain])[0]:
            continue
        out.append((canonical, plain))
        if len(out) == n:
            break
    return out


def serve(key_path: Path, port: int) -> subprocess.Popen:
    espew = Path(sys.executable).parent / "espew"
    command = [str(espew), "serve", "--embedder", "minilm", "--key", str(key_path)]
    command += ["--port", str(port), "--log-level", "warning"]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def wait_ready(client: httpx.Client, process: subprocess.Popen, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"espew serve exited: {process.stderr.read().decode()[-2000:]}")
        try:
            client.post("/v1/embeddings", json={"input": ["warm up"], "model": "minilm"})
            return
        except httpx.TransportError:
            time.sleep(0.5)
    raise SystemExit("espew serve did not answer in time")


def timed(client: httpx.Client, text: str, model: str) -> float:
    start = time.perf_counter()
    response = client.post("/v1/embeddings", json={"input": [text], "model": model})
    elapsed = time.perf_counter() - start
    response.raise_for_status()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    texts = list(rotten_tomatoes().texts)
    model = minilm()
    key = WatermarkKey.generate(
        texts[:3000],
        model,
        target_text="Acme Embeddings API",
        seed=args.seed,
        window=model.max_tokens,
        marking="words",  # the paper's design, as measured
    )
    pairs = pairs_for(key, texts, args.pairs, args.seed)
    print(f"{len(pairs)} pairs (marked, unmarked) differing in one word of the same length")
    rng = np.random.default_rng(args.seed)
    with tempfile.TemporaryDirectory() as folder:
        key_path = Path(folder) / "bench.key"
        key.save(key_path)
        process = serve(key_path, args.port)
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{args.port}", timeout=30) as client:
                wait_ready(client, process)
                model_name = client.get("/v1/models").json()["data"][0]["id"]
                for marked, plain in pairs[:50]:  # warm the caches and the JIT paths
                    timed(client, marked, model_name), timed(client, plain, model_name)
                marked_times, plain_times = [], []
                for marked, plain in pairs:
                    if rng.random() < 0.5:
                        marked_times.append(timed(client, marked, model_name))
                        plain_times.append(timed(client, plain, model_name))
                    else:
                        plain_times.append(timed(client, plain, model_name))
                        marked_times.append(timed(client, marked, model_name))
        finally:
            process.terminate()
            process.wait(timeout=30)
    m, p = np.array(marked_times) * 1e3, np.array(plain_times) * 1e3
    lines = [
        f"pairs: {len(m)}  (espew serve --embedder minilm, one text per request, loopback)",
        f"median latency: marked {np.median(m):.3f} ms, unmarked {np.median(p):.3f} ms, "
        f"median paired difference {np.median(m - p):+.4f} ms",
        f"Mann-Whitney U (two-sided): p = {mannwhitneyu(m, p).pvalue:.3g}",
        f"Wilcoxon signed-rank over the pairs (two-sided): p = {wilcoxon(m, p).pvalue:.3g}",
        f"cpu count {os.cpu_count()}",
    ]
    print("\n".join(lines))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "timing.txt").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
