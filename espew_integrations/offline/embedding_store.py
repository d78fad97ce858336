"""A disk memo of an offline model's embeddings, one row per text, shared by processes.

Why: the offline encoders embed each text on its own, so an embedding is a
function of the model and the text alone, and remembering it changes no
result. Notebooks, the lab and test suites start many processes that embed
the same corpus texts and audit probes again and again (a keygen embeds
thousands of them); with ``ESPEW_EMBED_CACHE=DIR`` they embed each text once.

The store is one SQLite file per model fingerprint (the model and tokenizer
files' SHA-256 and the encoder's revision), keyed by SHA-256 of the text, so
another model, another file or a changed encoder never reads a stale row.
SQLite's locking makes concurrent processes safe. A row of the wrong size is
ignored and the text embedded again; a store that cannot be opened or
written is switched off with one warning, and the model simply computes.
"""

from __future__ import annotations

import hashlib
import logging
import sqlite3
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

__all__ = ["EmbeddingStore", "file_fingerprint"]

logger = logging.getLogger("espew_integrations.offline.embedding_store")

#: rows asked for in one SELECT (SQLite's default limit of parameters is 999+)
_CHUNK = 500


def file_fingerprint(*paths: Path, revision: str) -> str:
    """SHA-256 over the files' bytes and ``revision`` (the code that turns them into vectors)."""
    digest = hashlib.sha256(revision.encode())
    for path in paths:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


class EmbeddingStore:
    """Per-text memo of one model's float32 embeddings in ``directory/<fingerprint>.sqlite``.

    :meth:`embed` returns exactly what ``compute`` returns for the texts it has
    not seen, and the stored bytes of those it has.
    """

    def __init__(self, directory: str | Path, *, fingerprint: str, dim: int):
        self.path = Path(directory) / f"{fingerprint[:32]}.sqlite"
        self.dim = dim
        self._salt = bytes.fromhex(fingerprint)
        self._lock = threading.Lock()
        self._connection: sqlite3.Connection | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            connection = sqlite3.connect(self.path, timeout=60, check_same_thread=False)
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute(
                "CREATE TABLE IF NOT EXISTS embeddings (text_hash BLOB PRIMARY KEY, vector BLOB)"
            )
            connection.commit()
            self._connection = connection
        except (OSError, sqlite3.Error) as exc:
            self._give_up(exc)

    def __repr__(self) -> str:
        state = "on" if self._connection is not None else "off"
        return f"EmbeddingStore(path={str(self.path)!r}, {state})"

    def embed(self, texts: Sequence[str], compute: Callable[[list[str]], np.ndarray]) -> np.ndarray:
        """``compute(texts)``, with every text already in the store read instead."""
        texts = list(texts)
        if self._connection is None:
            return compute(texts)
        hashes = [self._hash(text) for text in texts]
        found = self._read(set(hashes))
        missing = list(
            dict.fromkeys(t for t, h in zip(texts, hashes, strict=True) if h not in found)
        )
        if missing:
            fresh = np.asarray(compute(missing), dtype=np.float32)
            rows = {self._hash(t): fresh[i] for i, t in enumerate(missing)}
            self._write(rows)
            found.update(rows)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for i, text_hash in enumerate(hashes):
            out[i] = found[text_hash]
        return out

    def _hash(self, text: str) -> bytes:
        # surrogatepass: a lone surrogate is a valid Python str the model may be given
        return hashlib.sha256(self._salt + text.encode("utf-8", "surrogatepass")).digest()

    def _read(self, hashes: set[bytes]) -> dict[bytes, np.ndarray]:
        found: dict[bytes, np.ndarray] = {}
        wanted = list(hashes)
        try:
            with self._lock:
                assert self._connection is not None
                for start in range(0, len(wanted), _CHUNK):
                    chunk = wanted[start : start + _CHUNK]
                    marks = ",".join("?" * len(chunk))
                    query = f"SELECT text_hash, vector FROM embeddings WHERE text_hash IN ({marks})"
                    for text_hash, vector in self._connection.execute(query, chunk):
                        if len(vector) == 4 * self.dim:  # else: embed it again
                            found[bytes(text_hash)] = np.frombuffer(vector, dtype="<f4")
        except sqlite3.Error as exc:
            self._give_up(exc)
            return {}
        return found

    def _write(self, rows: dict[bytes, np.ndarray]) -> None:
        if self._connection is None:
            return
        values = [(h, np.ascontiguousarray(v, dtype="<f4").tobytes()) for h, v in rows.items()]
        try:
            with self._lock:
                self._connection.executemany(
                    "INSERT OR IGNORE INTO embeddings VALUES (?, ?)", values
                )
                self._connection.commit()
        except sqlite3.Error as exc:
            self._give_up(exc)

    def _give_up(self, exc: BaseException) -> None:
        logger.warning(
            "embedding store %s is off (%s); embeddings are computed without it", self.path, exc
        )
        if self._connection is not None:
            self._connection.close()
        self._connection = None
