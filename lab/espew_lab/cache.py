"""On-disk cache of embeddings, keyed by model and text content.

Embedding a corpus with a real model on two cores takes minutes; experiments
re-read the same corpus many times. Entries are keyed by the model's name and
a SHA-256 over the texts, so a changed corpus or model never reads a stale
entry. The cache directory is ``$ESPEW_CACHE_DIR``, else the user's cache directory by
the platform's convention (:func:`espew_integrations.offline.user_cache.user_cache_dir`:
``$XDG_CACHE_HOME/espew-integrations``, ``~/.cache/espew-integrations`` on Linux).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from espew_integrations.offline.user_cache import user_cache_dir

__all__ = ["cache_dir", "cached_embed"]


def cache_dir() -> Path:
    """Where cached embeddings live."""
    configured = os.environ.get("ESPEW_CACHE_DIR")
    return Path(configured).expanduser() if configured else user_cache_dir()


def _texts_digest(texts: Sequence[str]) -> str:
    digest = hashlib.sha256()
    for text in texts:
        data = text.encode("utf-8")
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()[:24]


def cached_embed(
    embed: Callable[[list[str]], np.ndarray],
    texts: Sequence[str],
    *,
    model_name: str,
    batch_size: int = 256,
    progress: bool = False,
) -> np.ndarray:
    """``embed(texts)`` as float32, read from / written to the on-disk cache."""
    safe_name = "".join(c if c.isalnum() or c in "-_." else "_" for c in model_name)
    path = cache_dir() / safe_name / f"{_texts_digest(texts)}.npy"
    if path.exists():
        cached = np.load(path)
        if cached.shape[0] == len(texts):
            return cached
    texts = list(texts)
    starts = range(0, len(texts), batch_size)
    if progress:
        from tqdm.auto import tqdm

        starts = tqdm(starts, desc=f"embedding with {model_name}", unit="batch")
    parts = [np.asarray(embed(texts[s : s + batch_size]), dtype=np.float32) for s in starts]
    out = np.concatenate(parts) if parts else np.zeros((0, 0), dtype=np.float32)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp.npy")
    np.save(tmp, out)
    os.replace(tmp, path)
    return out


class CorpusEmbedder:
    """An embedder that answers corpus texts from their cached clean embeddings.

    Keygen, audits and reference cosines ask the provider's clean model about
    corpus texts the lab has already embedded; paying the model again for each
    of them would dominate a tuning run. Texts outside the corpus (band words,
    target texts) go to ``embed`` through :func:`cached_embed`, once each.

    >>> lookup = CorpusEmbedder(texts, clean, model, model_name="minilm")  # doctest: +SKIP
    >>> np.array_equal(lookup(texts[:2]), clean[:2])                        # doctest: +SKIP
    True
    """

    def __init__(
        self,
        texts: Sequence[str],
        clean: np.ndarray,
        embed: Callable[[list[str]], np.ndarray],
        *,
        model_name: str,
    ):
        self._clean = np.asarray(clean, dtype=np.float64)
        if self._clean.ndim != 2 or len(self._clean) != len(texts):
            raise ValueError(f"need one clean embedding per text, got {self._clean.shape}")
        self._row = {text: i for i, text in enumerate(texts)}
        self._embed = embed
        self._model_name = model_name
        self._others: dict[str, np.ndarray] = {}
        self.name = model_name

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        missing = [t for t in dict.fromkeys(texts) if t not in self._row and t not in self._others]
        if missing:
            fresh = cached_embed(self._embed, missing, model_name=self._model_name)
            self._others.update(zip(missing, fresh.astype(np.float64), strict=True))
        rows = np.fromiter((self._row.get(t, -1) for t in texts), dtype=np.int64, count=len(texts))
        out = self._clean[np.maximum(rows, 0)]
        for i in np.flatnonzero(rows < 0):
            out[i] = self._others[texts[i]]
        return out
