"""On-disk cache of embeddings, keyed by model and text content.

Embedding a corpus with a real model on two cores takes minutes; experiments
re-read the same corpus many times. Entries are keyed by the model's name and
a SHA-256 over the texts, so a changed corpus or model never reads a stale
entry. The cache directory is ``$ESPEW_CACHE_DIR`` or ``~/.cache/espew-integrations``.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

__all__ = ["cache_dir", "cached_embed"]


def cache_dir() -> Path:
    """Where cached embeddings live."""
    root = os.environ.get("ESPEW_CACHE_DIR") or Path.home() / ".cache" / "espew-integrations"
    return Path(root)


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
