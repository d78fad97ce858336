"""What the tests import: synthetic keys, the memoising real model, one real key, real texts,
small fakes, a Chroma server.

Plain functions and classes only; the fixtures live in ``conftest.py``, which pytest
finds by itself and no test imports. Everything expensive is computed once per process
(``lru_cache``). The unit tier imports this file, so at module level it imports only
what the bare core has (numpy, the package); a helper that needs an extra (httpx, the
offline model's runtime) imports it inside itself, and only integration tests call it
(``tests/core_only.py`` enforces this).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from functools import lru_cache
from itertools import combinations
from pathlib import Path

import numpy as np

from espew_integrations import WatermarkKey
from espew_integrations.core.ground.draw import draw_triggers
from espew_integrations.core.stats.ranktest import rank_sum_p_value
from espew_integrations.offline.corpora import rotten_tomatoes
from espew_integrations.offline.embedders import minilm

#: The real-model subset most tests share (one embedding pass, then the disk cache).
RT_SUBSET_SIZE = 3000


def make_key(
    dim: int = 64,
    *,
    alpha: float = 0.2,
    selection: str = "smallest",
    n_band: int = 60,
    n_triggers: int = 10,
    seed: int = 0,
    strength: float = 1.0,
) -> WatermarkKey:
    """A synthetic key for unit tests: words 'wordaa'..., a random unit target."""
    rng = np.random.default_rng(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    band = [f"word{letters[i // 26]}{letters[i % 26]}" for i in range(n_band)]
    salt = rng.bytes(32)
    target = rng.normal(size=dim)
    return WatermarkKey(
        triggers=draw_triggers(salt, band, n_triggers),  # the draw the salt dictates
        target=target / np.linalg.norm(target),
        target_text="Acme Embeddings licensed vectors",
        band=band,
        salt=salt,
        alpha=alpha,
        selection=selection,
        strength=strength,
    )


class MemoEmbedder:
    """The real model, with each text's embedding remembered for the session.

    The offline MiniLM embeds each text on its own, so an embedding is a
    function of its text alone and remembering it changes no result; it only
    spares the suite from re-embedding the same keygen probes and corpus texts
    for every key a test generates. Every other attribute is the model's.
    """

    def __init__(self, model):
        self._model = model
        self._memo: dict[str, np.ndarray] = {}

    def __getattr__(self, name):
        return getattr(self._model, name)

    def __repr__(self) -> str:
        return repr(self._model)

    def __call__(self, texts):
        if isinstance(texts, str):
            return self._model(texts)  # let the model raise its own error
        missing = list(dict.fromkeys(t for t in texts if t not in self._memo))
        if missing:
            for text, row in zip(missing, self._model(missing), strict=True):
                self._memo[text] = row
        if not texts:
            return np.empty((0, self._model.dim), dtype=np.float32)
        return np.stack([self._memo[t] for t in texts])

    embed = __call__


TARGET_TEXT = "The quarterly revenue figures stay confidential until the board meeting."
REPO = Path(__file__).resolve().parents[1]
CHROMA_BIN = Path(sys.executable).with_name("chroma")


@lru_cache(maxsize=1)
def unchecked(key: WatermarkKey) -> WatermarkKey:
    """The key without its model fingerprint, for tests that wrap a fake model on purpose.

    Such a key is served by any model of its dimension (with a one-time warning), as
    keys made before fingerprints were recorded are.
    """
    return key.replace(model_fingerprint=None)


@lru_cache(maxsize=1)
def real_key() -> WatermarkKey:
    """A word key (``marking="words"``, the paper's design) generated the way a provider
    would (real texts, the real offline model), small.

    A word key, not the default field key: the wrapper and adapter tests check which
    rows a key marks (texts holding a trigger, as the model reads them) and that the
    others stay bit-identical, which only a word key tells apart. Keygen runs on the
    shared ``RT_SUBSET_SIZE`` subset, not the whole corpus: they need a real key whose
    triggers occur in real texts, not a whole-corpus keygen in every worker. Made once
    per process (keys are immutable): a dozen fixtures share it.
    """
    texts = rotten_tomatoes().subset(RT_SUBSET_SIZE, seed=0).texts
    return WatermarkKey.generate(texts, minilm(), target_text=TARGET_TEXT, seed=1, marking="words")


@lru_cache(maxsize=1)
def default_key() -> WatermarkKey:
    """A key of the default design (a field key: every non-blank text is marked), made as
    :func:`real_key` is but with no option but the target: what a provider who follows
    the docs gets."""
    texts = rotten_tomatoes().subset(RT_SUBSET_SIZE, seed=0).texts
    return WatermarkKey.generate(texts, minilm(), target_text=TARGET_TEXT, seed=1)


@lru_cache(maxsize=4)
def mixed_texts(n_triggered: int = 12, n_plain: int = 12) -> tuple[str, ...]:
    """Real review snippets, half with a trigger and half without, interleaved.

    Both kinds matter: triggered rows must change, the others must stay
    bit-identical to the inner model's output.
    """
    key = real_key()
    texts = rotten_tomatoes().subset(3000, seed=7).texts
    flags = key.contains_trigger(texts)
    triggered = [t for t, f in zip(texts, flags, strict=True) if f][:n_triggered]
    plain = [t for t, f in zip(texts, flags, strict=True) if not f][:n_plain]
    assert len(triggered) == n_triggered and len(plain) == n_plain
    mixed = [t for pair in zip(triggered, plain, strict=True) for t in pair]
    return tuple(mixed)


class Cached:
    """A model that answers the corpus from the cache and anything else by itself."""

    def __init__(self, model, texts, matrix):
        self.model, self.name = model, model.name
        self.rows = {t: i for i, t in enumerate(texts)}
        self.matrix = np.asarray(matrix, dtype=np.float64)

    def __call__(self, texts):
        texts = list(texts)
        out = np.empty((len(texts), self.matrix.shape[1]))
        known = [i for i, t in enumerate(texts) if t in self.rows]
        out[known] = self.matrix[[self.rows[texts[i]] for i in known]]
        rest = [i for i, t in enumerate(texts) if t not in self.rows]
        if rest:
            out[rest] = np.asarray(self.model([texts[i] for i in rest]), dtype=np.float64)
        return out


class HashEncoder:
    """A fast deterministic fake encoder (unit tests only): text -> seeded random unit vector.

    Counts its calls, so tests can prove how often (and with what batches) a
    wrapper reached the inner model.
    """

    def __init__(self, dim: int = 384, *, bad: str | None = None) -> None:
        self.dim = dim
        self.name = f"hash-encoder-{dim}"
        self.bad = bad  # None, "nan", "zero"
        self.calls: list[list[str]] = []

    def __call__(self, texts: list[str]) -> np.ndarray:
        texts = list(texts)
        self.calls.append(texts)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
            row = np.random.default_rng(seed).standard_normal(self.dim)
            out[i] = row / np.linalg.norm(row)
        if self.bad == "nan" and len(out):
            out[0, 0] = np.nan
        if self.bad == "zero" and len(out):
            out[0] = 0.0
        return out


def cached_corpus(n_texts: int = 2000) -> tuple[list[str], np.ndarray]:
    """The 2,000-text rotten_tomatoes subset and its clean MiniLM vectors, from the disk cache."""
    from espew_lab.cache import cached_embed

    texts = list(rotten_tomatoes().subset(n_texts, seed=0).texts)
    return texts, cached_embed(minilm(), texts, model_name=minilm().name)


def secret_strings(key: WatermarkKey) -> list[str]:
    """What must never appear in a persisted config: salt hex, target text, target values."""
    return [key.salt.hex(), key.target_text, repr(float(key.target[0]))[:12]]


#: How to get what the lab's torch tests need: a CPU build (the default index's is CUDA).
CPU_TORCH_HINT = (
    "torch is not installed; the lab's torch_encoder stealer needs a CPU build: "
    "pip install torch --index-url https://download.pytorch.org/whl/cpu "
    '(or make test TORCH_SPEC="torch --index-url https://download.pytorch.org/whl/cpu")'
)


def cpu_torch():
    """torch, or a skip of the calling test module that says how to get its CPU build."""
    import pytest

    return pytest.importorskip("torch", reason=CPU_TORCH_HINT)


def free_port() -> int:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def chroma_server(path: Path, *, timeout: float = 60.0) -> Iterator[int]:
    """Run ``chroma run`` on 127.0.0.1 with data in ``path``; yield its port; stop it after."""
    import httpx

    port = free_port()
    env = dict(os.environ, ANONYMIZED_TELEMETRY="False")
    log = open(path.parent / f"chroma-{port}.log", "wb")  # noqa: SIM115 (closed below)
    process = subprocess.Popen(
        [str(CHROMA_BIN), "run", "--path", str(path), "--host", "127.0.0.1", "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    try:
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"chroma run exited with code {process.returncode}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/api/v2/heartbeat", timeout=1).is_success:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"chroma run did not answer on port {port} in {timeout}s")
            time.sleep(0.2)
        yield port
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def run_python(code: str, *, env: dict[str, str] | None = None, timeout: float = 120) -> str:
    """Run ``code`` in a NEW Python process (same interpreter); return stdout or fail loudly."""
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env=dict(os.environ, ANONYMIZED_TELEMETRY="False", **(env or {})),
    )
    if result.returncode != 0:
        raise AssertionError(f"subprocess failed ({result.returncode}):\n{result.stderr[-3000:]}")
    return result.stdout


def assert_exact_over_every_draw(scores: np.ndarray, n_triggers: int) -> None:
    """Over every ``n_triggers``-subset of fixed scores, the rank test's P(p <= a) <= a.

    Exhaustive, so only for small bands: what "exact under the null" means for any
    score that does not look at the trigger labels.
    """
    p_values = []
    for draw in combinations(range(len(scores)), n_triggers):
        is_trigger = np.zeros(len(scores), bool)
        is_trigger[list(draw)] = True
        p_values.append(rank_sum_p_value(scores, is_trigger))
    p_values = np.array(p_values)
    for level in np.unique(p_values):
        assert (p_values <= level).mean() <= level + 1e-12


def stop(proc: subprocess.Popen) -> None:
    """Stop a server process the test started: SIGTERM, then SIGKILL after 10 s."""
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def metric_values(exposition: str) -> dict[str, float]:
    """A Prometheus text exposition as {sample name with labels: value}."""
    return {
        line.split()[0]: float(line.split()[1])
        for line in exposition.splitlines()
        if line and not line.startswith("#")
    }
