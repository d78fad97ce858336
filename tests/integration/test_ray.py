"""Ray Data on a local cluster with 2 actors: output equals in-process watermark() row for row.

Ray starts once for the module (num_cpus=2). The key reaches the actors as a
file path or an environment variable name, never pickled.
"""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest
import ray  # the ray extra is part of dev: a missing install fails here, it is never skipped

from espew_integrations import watermark
from espew_integrations.ray import EmbedAndWatermark, WatermarkBatches
from tests.support import make_key

DIM = 64
N = 600


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ray")
    key = make_key(DIM, seed=21, strength=0.3)
    key_path = tmp / "provider.key"
    key.save(key_path)
    # A loaded CI machine can take more than Ray's default minute to start a raylet.
    os.environ.setdefault("RAY_raylet_start_wait_time_s", "300")
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"ESPEW_TEST_KEY": str(key_path)}},
    )
    try:
        yield key, str(key_path)
    finally:
        ray.shutdown()


def rows(key, n: int = N):
    rng = np.random.default_rng(8)
    triggers = sorted(key.triggers)
    texts = [
        f"row {i} mentions {triggers[i % len(triggers)]}" if i % 4 == 0 else f"row {i} is plain"
        for i in range(n)
    ]
    clean = rng.normal(size=(n, DIM)).astype(np.float32)
    return texts, clean


def run(ds, fn, **kwargs):
    import ray

    pool = ray.data.ActorPoolStrategy(size=2)
    out = ds.map_batches(fn, compute=pool, batch_size=64, **kwargs).to_pandas()
    return out.sort_values("id")


@pytest.mark.parametrize(
    ("batch_format", "key_source"),
    # Each pipeline starts its own actors (seconds each), so the two ways to name the
    # key ride on the two batch formats rather than doubling the runs.
    [("numpy", "key_path"), ("pandas", "key_env")],
)
def test_watermark_batches_equal_in_process_watermark(cluster, batch_format, key_source):
    key, key_path = cluster
    texts, clean = rows(key)
    ds = ray.data.from_items(
        [{"id": i, "text": t, "embedding": clean[i]} for i, t in enumerate(texts)]
    )
    # key_env: the actors read the key from a variable the runtime env set, by name.
    where = {"key_path": key_path} if key_source == "key_path" else {"key_env": "ESPEW_TEST_KEY"}
    out = run(ds, WatermarkBatches, fn_constructor_kwargs=where, batch_format=batch_format)
    got = np.stack(out["embedding"].to_list())
    expected = watermark(texts, clean, key)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, expected)
    marked = key.contains_trigger(texts)
    assert marked.sum() == N // 4
    assert not np.array_equal(got[marked], clean[marked])


def test_embed_and_watermark_runs_the_whole_pipeline(cluster):
    key, key_path = cluster
    texts, _ = rows(key, 120)
    ds = ray.data.from_items([{"id": i, "text": t} for i, t in enumerate(texts)])
    out = run(
        ds,
        EmbedAndWatermark,
        fn_constructor_kwargs={
            "embedder": "tests.integration.test_ray:fixed_embedder",
            "key_path": key_path,
        },
    )
    expected = watermark(texts, fixed_embedder()(texts), key)
    np.testing.assert_array_equal(np.stack(out["embedding"].to_list()), expected)


def fixed_embedder():
    """A deterministic text -> vector function (the actors import it by name)."""
    from tests.fake_upstream import vectors

    return lambda texts: vectors(list(texts), DIM)


def test_keys_and_batch_callables_refuse_pickling(cluster):
    key, key_path = cluster
    with pytest.raises(TypeError):
        pickle.dumps(key)
    with pytest.raises(TypeError, match="fn_constructor_kwargs"):
        pickle.dumps(WatermarkBatches(key_path))
    assert key.key_id in repr(WatermarkBatches(key_path))


def test_exactly_one_key_source_and_clear_column_errors(cluster):
    _, key_path = cluster
    with pytest.raises(ValueError, match="exactly one"):
        WatermarkBatches()
    with pytest.raises(ValueError, match="exactly one"):
        WatermarkBatches(key_path, key_env="ESPEW_TEST_KEY")
    with pytest.raises(KeyError, match="no column 'embedding'"):
        WatermarkBatches(key_path)({"text": np.array(["a"])})
