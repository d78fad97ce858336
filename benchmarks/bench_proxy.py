"""``espew serve`` in front of a GPU-like upstream: throughput kept and latency added.

Three real processes: the fake GPU upstream (``tests/fake_upstream.py``, 100 ms
per 32-text batch, d = 1024), ``espew serve --embedder openai:...`` in front
of it with a key, and this script as the load: 16 concurrent clients (one
aiohttp session), each sending 32-text requests in base64 back to back. Each
round measures the upstream alone, then the proxy, for the same number of seconds, so both see
the same machine load; the table gives texts/s, the proxy's share of the
upstream's throughput (goal >= 85%) and p50/p99 latency with the difference.

``--slots 1`` is one GPU working one batch at a time (the upstream is the
bottleneck, as in production); ``--slots 16`` lets every client's batch run at
once, so that the proxy itself is the bottleneck (a stress test of the proxy's
own cost: 5,120 texts/s through one process).

    python benchmarks/bench_proxy.py [--seconds 8] [--slots 1 16] [--workers 1]

Issue 52's setting, a GPU answering 2,048-row batches of 1,536-d vectors at 20k
rows/s, with the default (map) key as ``espew keygen`` makes it on a synthetic
1,536-d embedder (goal: the proxy keeps >= 95%):

    python benchmarks/bench_proxy.py --dim 1536 --texts 2048 --clients 4 --slots 1 \
        --upstream-batch 64 --upstream-delay 0.0032 --marking map --seconds 8 --rounds 5 \
        --workers 1 2 --stages --out docs/results/serving/bench_proxy_20k.txt

(``--upstream-batch`` texts per ``--upstream-delay`` seconds of GPU time: 64 / 0.0032 s
= 20,000 rows/s whatever the batches the proxy's client sends.) The fake upstream
answers from a table of vectors (``--vectors table``), so that its own CPU per row
stays far below the GPU time it stands for. The CPU columns are each process's
CPU time per 1,000 texts (the upstream and the client in the upstream-alone runs,
the proxy in the proxy runs): where the machine's cores are the limit, they say
which process spends them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import selectors
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from espew_integrations import WatermarkKey  # noqa: E402
from espew_integrations.core.ground.draw import draw_triggers  # noqa: E402
from espew_integrations.http.protocol import decode_embeddings  # noqa: E402

DIM = 1024
BATCH = 32
CLIENTS = 16


#: keygen's embedder for a map or field key: the fake upstream's own vectors (``--vectors
#: table``), so that ``espew serve`` finds the key's model behind the upstream.
SYNTHETIC = """
from tests.fake_upstream import table_vectors

def embed(texts):
    return table_vectors(list(texts), {dim})
"""


def make_key(path: Path, marking: str = "words") -> list[str]:
    """Save a key of dimension DIM; returns words the load's texts carry.

    ``map`` / ``field``: ``espew keygen`` on the fake upstream's synthetic DIM-d
    embedder, the key a provider serves (it marks every text). ``words``: a word key
    with a fitted-like strength; about 15% of the load's texts carry one of its
    triggers."""
    if marking in ("map", "field"):
        from espew_integrations.cli import main as espew

        folder = path.parent
        (folder / "synthetic.py").write_text(SYNTHETIC.format(dim=DIM))
        words = [f"w{i}" for i in range(3000)]
        rng = np.random.default_rng(1)
        corpus = "\n".join(" ".join(rng.choice(words, 10)) for _ in range(1200))
        (folder / "corpus.txt").write_text(corpus + "\n")
        argv = ["keygen", "--corpus", str(folder / "corpus.txt"), "--marking", marking]
        argv += ["--target-text", "Acme licensed vectors", "--seed", "5"]
        argv += ["--embedder", f"{folder / 'synthetic.py'}:embed", "--audit-budget", "400"]
        if espew([*argv, "--out", str(path), "--no-progress"]) != 0:
            raise RuntimeError("espew keygen failed")
        assert WatermarkKey.load(path).marking == marking
        return words[:20]
    rng = np.random.default_rng(1024)
    band = [f"{i:03d}band" for i in range(200)]
    target = rng.normal(size=DIM)
    salt = rng.bytes(32)
    key = WatermarkKey(
        triggers=draw_triggers(salt, band, 20),
        target=target / np.linalg.norm(target),
        target_text="Acme Embeddings licensed vectors",
        band=band,
        salt=salt,
        strength=0.25,
    )
    key.save(path)
    return sorted(key.triggers)


def start(args: list[str], log: Path) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=log.open("w"), text=True
    )
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if selector.select(timeout=0.5):
            match = re.search(r"(http://\S+/v1)", proc.stdout.readline())
            if match:
                return proc, match.group(1)
    raise RuntimeError(f"{args} did not start:\n{log.read_text()}")


TRIGGERS: list[str] = []


def texts_for(client: int, request: int) -> list[str]:
    """Review-length texts; about 15% carry one of the key's triggers."""
    out = []
    for i in range(BATCH):
        n = client * 100_003 + request * BATCH + i
        word = TRIGGERS[n % len(TRIGGERS)] if n % 7 == 0 else f"word{n % 997}"
        out.append(f"request {request} text {i} of client {client} says {word} about the film")
    return out


async def load(url: str, model: str, seconds: float) -> tuple[float, list[float]]:
    """(texts per second, per-request latencies in seconds) of CLIENTS closed-loop clients.

    Each answer is decoded and checked as the library's clients do (one row per
    text, every index once, finite float32 values). The clients share one aiohttp
    session (the proxy's own client library): the load generator's CPU comes out of the
    same cores as the proxy's, so it spends as little as it can."""
    import aiohttp

    latencies: list[float] = []
    connector = aiohttp.TCPConnector(limit=CLIENTS)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as client:

        async def one_client(c: int, stop_at: float) -> int:
            done = 0
            while time.perf_counter() < stop_at:
                body = {"model": model, "input": texts_for(c, done), "encoding_format": "base64"}
                start = time.perf_counter()
                async with client.post(f"{url}/embeddings", json=body) as response:
                    content = await response.read()
                if response.status != 200:
                    raise RuntimeError(f"{url}: HTTP {response.status} {content[:200]!r}")
                rows = decode_embeddings(content, BATCH)
                assert rows.shape == (BATCH, DIM)
                latencies.append(time.perf_counter() - start)
                done += 1
            return done

        await one_client(0, time.perf_counter() + 0.5)  # warm the connections
        latencies.clear()
        begin = time.perf_counter()
        counts = await asyncio.gather(*(one_client(c, begin + seconds) for c in range(CLIENTS)))
        elapsed = time.perf_counter() - begin
    return sum(counts) * BATCH / elapsed, latencies


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process and its children (Linux /proc), in seconds."""
    total = 0.0
    pids = [pid]
    children = Path(f"/proc/{pid}/task/{pid}/children")
    if children.exists():
        pids += [int(p) for p in children.read_text().split()]
    for p in pids:
        fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) * 1000


def stage_profile(upstream_url: str, key_path: Path, repeats: int = 8) -> list[str]:
    """The proxy's path for one request, stage by stage, in this process: CPU ms each.

    The same calls ``espew serve`` makes for a proxied request (the request parsed,
    the upstream's answer fetched by its pooled aiohttp session and decoded, the rows
    marked, the answer encoded), without the server around them (uvicorn's own
    reading and writing is not in it). Medians over ``repeats`` after two warm-ups.
    """
    from espew_integrations import watermark
    from espew_integrations.http.protocol import RequestLimits, encode_embeddings, parse_request
    from espew_integrations.http.upstream import AsyncUpstream

    key = WatermarkKey.load(key_path)
    texts = texts_for(0, 0)
    request = json.dumps({"model": "acme", "input": texts, "encoding_format": "base64"}).encode()
    upstream = AsyncUpstream(upstream_url, "fake-gpu-embed")
    stages: dict[str, list[float]] = {
        "parse the request": [],
        "fetch the upstream's answer": [],
        "decode it (JSON, base64)": [],
        "mark the rows": [],
        "encode the answer": [],
    }
    names = list(stages)

    def timed(name: str, started: float) -> None:
        stages[name].append(time.process_time() - started)

    async def run() -> np.ndarray:
        payload = json.dumps(
            {"model": upstream.model, "input": texts, "encoding_format": "base64"}
        ).encode()
        for _ in range(repeats + 2):
            started = time.process_time()
            parse_request(request, "acme", RequestLimits())
            timed(names[0], started)
            started = time.process_time()
            status, _, body = await upstream._post(payload)
            assert status == 200, body[:200]
            timed(names[1], started)
            started = time.process_time()
            clean = decode_embeddings(body, len(texts))
            timed(names[2], started)
            started = time.process_time()
            marked = watermark(texts, clean, key)
            timed(names[3], started)
            started = time.process_time()
            encode_embeddings(marked, "base64", "acme", texts)
            timed(names[4], started)
        await upstream.aclose()
        return marked

    marked = asyncio.run(run())
    lines = [f"the proxy's path for one {len(texts)}-text request, CPU ms per stage (median):"]
    total = 0.0
    for name, values in stages.items():
        ms = statistics.median(values[2:]) * 1000
        total += ms
        lines.append(f"  {name:<38} {ms:6.1f}")
    lines.append(
        f"  {'sum':<38} {total:6.1f}  -> {len(texts) / total * 1000:,.0f} rows per CPU-second"
    )
    started = time.process_time()
    encode_embeddings(marked, "float", "acme", texts)
    lines.append(
        f"  (the answer as JSON floats instead:    {(time.process_time() - started) * 1000:6.1f})"
    )
    lines += alternatives(upstream_url, texts, repeats)
    return lines


def alternatives(upstream_url: str, texts: list[str], repeats: int) -> list[str]:
    """CPU ms of the two costliest stages done by other libraries: the fetch by httpx
    (the auditor's client, and the proxy's before it moved to aiohttp), the decoding
    with orjson's JSON parser where it is installed (not a dependency of the project)."""
    import httpx

    payload = {"model": "fake-gpu-embed", "input": texts, "encoding_format": "base64"}
    url = f"{upstream_url}/embeddings"

    async def fetch() -> float:
        times = []
        async with httpx.AsyncClient(timeout=60) as client:
            for _ in range(repeats + 2):
                started = time.process_time()
                body = (await client.post(url, json=payload)).content
                assert len(body) > len(texts)
                times.append(time.process_time() - started)
        return statistics.median(times[2:]) * 1000

    lines = [f"  (the fetch with httpx instead:         {asyncio.run(fetch()):6.1f})"]
    body = httpx.post(url, json=payload, timeout=60).content
    lines += stdlib_base64(body, texts, repeats)
    try:
        import orjson
    except ImportError:
        return lines
    times = []
    for _ in range(repeats + 2):
        started = time.process_time()
        decode_embeddings(orjson.loads(body), len(texts))
        times.append(time.process_time() - started)
    ms = statistics.median(times[2:]) * 1000
    return [*lines, f"  (the decoding with orjson's parser:    {ms:6.1f})"]


def stdlib_base64(body: bytes, texts: list[str], repeats: int) -> list[str]:
    """CPU ms of the decoding and the encoding with the standard library's base64 codec
    (what serves where pybase64 is missing)."""
    import base64

    from espew_integrations.http import protocol

    fast = protocol._b64encode, protocol._b64decode
    protocol._b64encode, protocol._b64decode = base64.b64encode, base64.b64decode
    try:
        decoding, encoding = [], []
        for _ in range(repeats + 2):
            started = time.process_time()
            rows = decode_embeddings(body, len(texts))
            decoding.append(time.process_time() - started)
            started = time.process_time()
            protocol.encode_embeddings(rows, "base64", "acme", texts)
            encoding.append(time.process_time() - started)
    finally:
        protocol._b64encode, protocol._b64decode = fast
    decode_ms = statistics.median(decoding[2:]) * 1000
    encode_ms = statistics.median(encoding[2:]) * 1000
    return [
        f"  (the decoding with the stdlib's base64: {decode_ms:5.1f})",
        f"  (the encoding with the stdlib's base64: {encode_ms:5.1f})",
    ]


def main() -> None:
    global DIM, BATCH, CLIENTS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--slots", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--workers", type=int, nargs="+", default=[1])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--dim", type=int, default=DIM)
    parser.add_argument("--texts", type=int, default=BATCH, help="texts per request")
    parser.add_argument("--clients", type=int, default=CLIENTS)
    parser.add_argument("--upstream-batch", type=int, help="texts per GPU batch (--texts)")
    parser.add_argument("--upstream-delay", type=float, default=0.1, help="seconds per batch")
    parser.add_argument("--marking", choices=["map", "field", "words"], default="words")
    parser.add_argument("--out", type=Path, help="also write the table, with this command")
    parser.add_argument(
        "--stages", action="store_true", help="also time the proxy's path stage by stage"
    )
    args = parser.parse_args()
    DIM, BATCH, CLIENTS = args.dim, args.texts, args.clients
    gpu_batch = args.upstream_batch or BATCH
    lines: list[str] = []

    def say(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    say("$ python benchmarks/bench_proxy.py " + " ".join(sys.argv[1:]))
    say(
        f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at the start "
        "(shared with other jobs)"
    )
    say(
        f"fake GPU upstream: {args.upstream_delay * 1000:g} ms per {gpu_batch}-text batch "
        f"({gpu_batch / args.upstream_delay:,.0f} rows/s of GPU time), d = {DIM}; "
        f"{CLIENTS} concurrent clients of {BATCH} texts, base64, {args.marking} key, "
        f"{args.seconds:g} s per measurement, {args.rounds} rounds "
        "(upstream alone and proxy alternate)"
    )
    say(
        f"{'slots':>5} {'workers':>7} {'upstream t/s':>12} {'proxy t/s':>10} {'kept':>6} "
        f"{'up p50':>7} {'px p50':>7} {'+p50 ms':>8} {'up p99':>7} {'px p99':>7} {'+p99 ms':>8} "
        f"{'proxy CPU ms':>12} {'up CPU ms':>9} {'client CPU ms':>13}"
    )
    rounds_seen: list[str] = []
    stage_lines: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        key_path = tmp_path / "bench.key"
        TRIGGERS[:] = make_key(key_path, args.marking)
        for slots in args.slots:
            upstream_args = ["-m", "tests.fake_upstream", "--dim", str(DIM), "--slots", str(slots)]
            upstream_args += ["--batch", str(gpu_batch), "--delay", str(args.upstream_delay)]
            upstream_args += ["--vectors", "table"]
            upstream, upstream_url = start(upstream_args, tmp_path / "upstream.log")
            try:
                if args.stages:
                    stage_lines += stage_profile(upstream_url, key_path)
                for workers in args.workers:
                    proxy_args = [
                        "-m",
                        "espew_integrations.cli",
                        "serve",
                        "--embedder",
                        f"openai:{upstream_url}#fake-gpu-embed",
                        "--key",
                        str(key_path),
                        "--port",
                        "0",
                        "--model-name",
                        "acme",
                    ]
                    if workers > 1:
                        proxy_args += ["--workers", str(workers)]
                    proxy, proxy_url = start(proxy_args, tmp_path / "proxy.log")
                    try:
                        up_rates, px_rates, up_lat, px_lat = [], [], [], []
                        proxy_cpu, up_cpu, client_cpu = 0.0, 0.0, 0.0
                        proxy_texts, up_texts = 0.0, 0.0
                        for _ in range(args.rounds):
                            before = cpu_seconds(upstream.pid), time.process_time()
                            rate, lat = asyncio.run(
                                load(upstream_url, "fake-gpu-embed", args.seconds)
                            )
                            up_cpu += cpu_seconds(upstream.pid) - before[0]
                            client_cpu += time.process_time() - before[1]
                            up_texts += rate * args.seconds
                            up_rates.append(rate)
                            up_lat += lat
                            before = cpu_seconds(proxy.pid), time.process_time()
                            rate, lat = asyncio.run(load(proxy_url, "acme", args.seconds))
                            proxy_cpu += cpu_seconds(proxy.pid) - before[0]
                            proxy_texts += rate * args.seconds
                            px_rates.append(rate)
                            px_lat += lat
                            rounds_seen.append(
                                f"  slots {slots} workers {workers}: upstream "
                                f"{up_rates[-1]:,.0f} t/s, proxy {rate:,.0f} t/s "
                                f"({rate / up_rates[-1]:.1%}), load average "
                                f"{os.getloadavg()[0]:.2f}"
                            )
                    finally:
                        proxy.terminate()
                        proxy.wait(10)
                    up, px = statistics.mean(up_rates), statistics.mean(px_rates)
                    u50, p50 = percentile(up_lat, 50), percentile(px_lat, 50)
                    u99, p99 = percentile(up_lat, 99), percentile(px_lat, 99)
                    say(
                        f"{slots:>5} {workers:>7} {up:>12.0f} {px:>10.0f} {px / up:>6.1%} "
                        f"{u50:>7.1f} {p50:>7.1f} {p50 - u50:>8.1f} {u99:>7.1f} {p99:>7.1f} "
                        f"{p99 - u99:>8.1f} {proxy_cpu / proxy_texts * 1e6:>12.0f} "
                        f"{up_cpu / up_texts * 1e6:>9.0f} {client_cpu / up_texts * 1e6:>13.0f}"
                    )
            finally:
                upstream.terminate()
                upstream.wait(10)
    for line in stage_lines:
        say(line)
    say("rounds (upstream alone, then the proxy, in this order):")
    for line in rounds_seen:
        say(line)
    say(
        "CPU ms: a process's own CPU time per 1,000 texts (the proxy: all its processes; "
        "the upstream and this script's client: in the upstream-alone runs)"
    )
    say(
        "goal: the proxy keeps >= 85% of the upstream's throughput (slots 1: a busy GPU); "
        "issue 52's setting (2,048 x 1,536 at 20k rows/s, map key): >= 95%"
    )
    say(f"machine at the end: load average {os.getloadavg()[0]:.2f}")
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
