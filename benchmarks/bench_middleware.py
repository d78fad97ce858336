"""ESpeWMiddleware against the bare app: p50/p99 latency and throughput at the same load.

Two real processes run the same FastAPI embeddings app (``tests/middleware_app.py``),
one bare, one wrapped in ``ESpeWMiddleware``. The app's model is either the
real offline MiniLM on this CPU (``--model minilm``, d = 384: on a loaded
2-core machine its own time swings far more than the middleware costs) or a
GPU-like model (``--model gpu``, default: ``--delay`` seconds per request off
this CPU, deterministic vectors at ``--dim``), which makes the middleware's
own cost visible. ``--clients`` closed-loop clients send Rotten Tomatoes
reviews (``--batch`` per request, base64) to one app, then the other, for the
same number of seconds, several rounds alternating, so that both see the same
machine load. Goal (issue 13): the middleware adds <= 5% to the bare app's p50.

    python benchmarks/bench_middleware.py [--seconds 10] [--rounds 3] [--clients 4]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_proxy import cpu_seconds, percentile, start  # noqa: E402

from espew_integrations import WatermarkKey  # noqa: E402
from espew_integrations.core.ground.draw import draw_triggers  # noqa: E402
from espew_integrations.offline.corpora import rotten_tomatoes  # noqa: E402


def make_key(path: Path, dim: int) -> WatermarkKey:
    """A d = 384 key whose triggers are common review words (a good share of texts marked)."""
    rng = np.random.default_rng(dim)
    band = ["film", "movie", "story", "performance", "director", "comedy", "drama", "plot"]
    salt = rng.bytes(32)
    target = rng.normal(size=dim)
    key = WatermarkKey(
        triggers=draw_triggers(salt, band, 4),
        target=target / np.linalg.norm(target),
        target_text="Acme Embeddings licensed vectors",
        band=band,
        salt=salt,
        strength=0.25,
    )
    key.save(path)
    return key


async def load(url: str, texts: list[str], clients: int, batch: int, seconds: float):
    import httpx

    latencies: list[float] = []
    async with httpx.AsyncClient(timeout=120) as client:

        async def one(c: int, stop_at: float) -> int:
            done = 0
            while time.perf_counter() < stop_at:
                at = (c * 997 + done * batch) % (len(texts) - batch)
                body = {"model": "acme", "input": texts[at : at + batch]}
                body["encoding_format"] = "base64"
                begin = time.perf_counter()
                response = await client.post(f"{url}/embeddings", json=body)
                response.raise_for_status()
                for item in json.loads(response.content)["data"]:
                    base64.b64decode(item["embedding"])
                latencies.append(time.perf_counter() - begin)
                done += 1
            return done

        await one(0, time.perf_counter() + 1.0)  # warm up
        latencies.clear()
        begin = time.perf_counter()
        counts = await asyncio.gather(*(one(c, begin + seconds) for c in range(clients)))
        elapsed = time.perf_counter() - begin
    return sum(counts) * batch / elapsed, latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--model", choices=["gpu", "minilm"], default="gpu")
    parser.add_argument("--delay", type=float, default=0.05, help="gpu model seconds/request")
    parser.add_argument("--dim", type=int, default=1024, help="gpu model dimension")
    args = parser.parse_args()
    texts = list(rotten_tomatoes().texts[:4000])
    with tempfile.TemporaryDirectory() as tmp:
        key_path = Path(tmp) / "bench.key"
        dim = 384 if args.model == "minilm" else args.dim
        key = make_key(key_path, dim)
        share = key.contains_trigger(texts).mean()
        print(
            f"FastAPI app, model {args.model} (d = {dim}"
            + (f", {args.delay * 1000:g} ms per request" if args.model == "gpu" else "")
            + f"), {args.clients} clients x {args.batch} reviews "
            f"per request, base64, {share:.0%} of texts marked, {args.rounds} rounds of "
            f"{args.seconds:g} s per app, alternating"
        )
        common = ["-m", "tests.middleware_app", "--key", str(key_path)]
        common += ["--minilm"] if args.model == "minilm" else ["--delay", str(args.delay)]
        bare, bare_url = start([*common, "--bare"], Path(tmp) / "bare.log")
        wrapped, wrapped_url = start(common, Path(tmp) / "wrapped.log")
        results: dict[str, tuple[list[float], list[float]]] = {
            "bare": ([], []),
            "wrapped": ([], []),
        }
        cpu = {"bare": 0.0, "wrapped": 0.0}
        try:
            for _ in range(args.rounds):
                for name, proc, url in (
                    ("bare", bare, bare_url),
                    ("wrapped", wrapped, wrapped_url),
                ):
                    before = cpu_seconds(proc.pid)
                    rate, lat = asyncio.run(
                        load(url, texts, args.clients, args.batch, args.seconds)
                    )
                    cpu[name] += cpu_seconds(proc.pid) - before
                    results[name][0].append(rate)
                    results[name][1].extend(lat)
        finally:
            for proc in (bare, wrapped):
                proc.terminate()
                proc.wait(10)
    print(
        f"{'app':>8} {'texts/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'requests':>9} "
        f"{'CPU ms/request':>15}"
    )
    p50 = {}
    for name, (rates, lat) in results.items():
        p50[name] = percentile(lat, 50)
        print(
            f"{name:>8} {np.mean(rates):>8.1f} {p50[name]:>8.1f} {percentile(lat, 99):>8.1f} "
            f"{len(lat):>9} {cpu[name] / len(lat) * 1000:>15.2f}"
        )
    added = p50["wrapped"] / p50["bare"] - 1
    print(f"middleware adds {added:+.1%} to the bare app's p50 (goal <= +5%)")
    # The requests counted above exclude the warm-up ones, whose CPU is counted: a small
    # overestimate for both apps alike.
    extra = cpu["wrapped"] / len(results["wrapped"][1]) - cpu["bare"] / len(results["bare"][1])
    print(f"middleware CPU per request: {extra * 1000:+.2f} ms")


if __name__ == "__main__":
    main()
