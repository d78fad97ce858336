"""Example and benchmark: watermark a synthetic corpus with Ray Data on a local cluster.

A streaming pipeline, as a provider would run it to re-serve a whole corpus:
``range(rows)`` -> synthetic review-length texts and float32 embeddings
(generated per block, seeded, never all in memory) -> ``map_batches(WatermarkBatches)``
on ``--actors`` actors -> consumed and counted. The same pipeline with a plain
L2-normalise pass instead of the watermark runs first, so the table shows
what the watermark itself costs on top of Ray's own work. The key reaches the
actors as a file path; it is never pickled.

    python benchmarks/bench_ray.py [--rows 1000000] [--dim 384] [--actors 2] [--cpus 2]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from espew_integrations import WatermarkKey  # noqa: E402
from espew_integrations.core.ground.draw import draw_triggers  # noqa: E402
from espew_integrations.ray import WatermarkBatches  # noqa: E402

BAND = [f"{i:03d}band" for i in range(200)]


def make_key(path: Path, dim: int) -> None:
    rng = np.random.default_rng(dim)
    salt = rng.bytes(32)
    target = rng.normal(size=dim)
    WatermarkKey(
        triggers=draw_triggers(salt, BAND, 20),
        target=target / np.linalg.norm(target),
        target_text="Acme Embeddings licensed vectors",
        band=BAND,
        salt=salt,
        strength=0.25,
    ).save(path)


def synthetic_rows(batch: dict[str, np.ndarray], dim: int) -> dict[str, np.ndarray]:
    """Texts of ~20 words (about one in six with a band word) and unit float32 embeddings."""
    ids = batch["id"]
    rng = np.random.default_rng(int(ids[0]))
    words = np.array([f"word{i}" for i in range(2000)])
    chosen = words[rng.integers(0, len(words), size=(len(ids), 20))]
    with_band = rng.random(len(ids)) < 1 / 6
    chosen[with_band, 3] = np.array(BAND)[rng.integers(0, len(BAND), size=with_band.sum())]
    texts = np.array([" ".join(row) for row in chosen], dtype=object)
    embedding = rng.normal(size=(len(ids), dim)).astype(np.float32)
    embedding /= np.linalg.norm(embedding, axis=1, keepdims=True)
    return {"id": ids, "text": texts, "embedding": embedding}


class Normalise:
    """The baseline: a plain L2-normalise of the embedding column."""

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        emb = batch["embedding"]
        batch["embedding"] = emb / np.linalg.norm(emb, axis=1, keepdims=True)
        return batch


def run(ray, rows: int, dim: int, actors: int, fn, kwargs: dict) -> tuple[float, int]:
    ds = ray.data.range(rows, override_num_blocks=max(8, rows // 20_000))
    ds = ds.map_batches(synthetic_rows, fn_kwargs={"dim": dim}, batch_size=4096)
    # Half a CPU per actor leaves CPUs for the read tasks: with every CPU held by
    # an actor, ReadRange could never run and the pipeline would wait forever.
    ds = ds.map_batches(
        fn,
        fn_constructor_kwargs=kwargs,
        compute=ray.data.ActorPoolStrategy(size=actors),
        num_cpus=0.5,
        batch_size=4096,
    )
    start = time.perf_counter()
    seen = 0
    for batch in ds.iter_batches(batch_size=8192, batch_format="numpy"):
        seen += len(batch["id"])
    return time.perf_counter() - start, seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--actors", type=int, default=2)
    parser.add_argument("--cpus", type=int, default=2)
    args = parser.parse_args()
    import ray

    os.environ.setdefault("RAY_raylet_start_wait_time_s", "300")
    ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    try:
        with tempfile.TemporaryDirectory() as tmp:
            key_path = Path(tmp) / "provider.key"
            make_key(key_path, args.dim)
            print(
                f"Ray Data on a local cluster ({args.cpus} CPUs, {args.actors} actors), "
                f"{args.rows:,} synthetic rows, d = {args.dim}, float32"
            )
            print(f"{'pipeline':>24} {'seconds':>8} {'rows/s':>10}")
            run(ray, 8192, args.dim, args.actors, Normalise, {})  # warm-up: workers, imports
            results = {}
            for name, fn, kwargs in (
                ("generate + normalise", Normalise, {}),
                ("generate + watermark", WatermarkBatches, {"key_path": str(key_path)}),
            ):
                seconds, seen = run(ray, args.rows, args.dim, args.actors, fn, kwargs)
                assert seen == args.rows, (seen, args.rows)
                results[name] = seconds
                print(f"{name:>24} {seconds:>8.1f} {seen / seconds:>10,.0f}", flush=True)
            ratio = results["generate + watermark"] / results["generate + normalise"]
            print(f"watermark pipeline / normalise pipeline: {ratio:.2f}x the time")
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
