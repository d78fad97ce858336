"""Watermark inside Ray Data jobs: callable classes for ``Dataset.map_batches``.

Why: a provider that re-embeds a whole corpus does it in the batch engine it
already runs. Two classes, each built once per Ray actor:

- :class:`WatermarkBatches` watermarks an ``embedding`` column already in the
  dataset, using its ``text`` column;
- :class:`EmbedAndWatermark` embeds the ``text`` column with a named model
  (``"minilm"``, ``"module:attr"``... see :mod:`espew_integrations.models`)
  and writes the watermarked ``embedding`` column: the whole pipeline.

The key reaches the workers as a file path (``key_path``) or the name of an
environment variable holding it (``key_env``, as ``WatermarkKey.from_env``
reads it), and is loaded inside each actor. Only that string travels through
Ray's object store: keys refuse to be pickled, and so do these classes once
they hold one. Each row's answer depends only on its (text, embedding) pair
and the key, so the output equals in-process :func:`~espew_integrations.watermark`
row for row, whatever the batch size or the number of actors.

>>> ds = ray.data.read_parquet("corpus/")                          # doctest: +SKIP
>>> ds = ds.map_batches(WatermarkBatches, fn_constructor_kwargs={"key_path": "provider.key"},
...                     compute=ray.data.ActorPoolStrategy(size=8),
...                     batch_size=4096)                           # doctest: +SKIP

Install with ``pip install '.[ray]'``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .core.ground.errors import InputError, InputTypeError
from .core.keys.key import WatermarkKey
from .core.keys.model_check import ModelGuard
from .core.mark.inject import watermark

__all__ = ["EmbedAndWatermark", "WatermarkBatches", "load_worker_key"]


def load_worker_key(key_path: str | None = None, key_env: str | None = None) -> WatermarkKey:
    """The key named by exactly one of ``key_path`` (a file) or ``key_env`` (a variable)."""
    if (key_path is None) == (key_env is None):
        raise InputError(
            "pass exactly one of key_path (a key file every worker can read) or key_env "
            "(the name of an environment variable holding the key)"
        )
    if key_path is not None:
        return WatermarkKey.load(key_path)
    return WatermarkKey.from_env(key_env)


class WatermarkBatches:
    """``map_batches`` callable: watermark ``embedding_column`` using ``text_column``.

    Batches may be numpy dicts or pandas DataFrames; the embedding column may
    be a 2-D tensor column or a column of 1-D arrays. The watermarked column
    keeps the input's float dtype (float32 stays float32).
    """

    def __init__(
        self,
        key_path: str | None = None,
        *,
        key_env: str | None = None,
        text_column: str = "text",
        embedding_column: str = "embedding",
        view: Callable[[Any], Any] | None = None,
    ):
        self._key = load_worker_key(key_path, key_env)
        self.text_column = text_column
        self.embedding_column = embedding_column
        self.view = view

    def __repr__(self) -> str:
        return f"{type(self).__name__}(key_id={self._key.key_id!r})"

    def __reduce_ex__(self, protocol: object) -> Any:
        raise InputTypeError(
            f"{type(self).__name__} holds a watermark key and refuses to be pickled: pass the "
            "class to map_batches with fn_constructor_kwargs={'key_path': ...}"
        )

    def __call__(self, batch: Any) -> Any:
        texts = _column(batch, self.text_column)
        clean = _matrix(_column(batch, self.embedding_column), self.embedding_column)
        marked = watermark([str(t) for t in texts], clean, self._key, view=self.view)
        return _with_column(batch, self.embedding_column, marked)


class EmbedAndWatermark(WatermarkBatches):
    """``map_batches`` callable: embed ``text_column`` with ``embedder`` and watermark it.

    ``embedder`` is a spec string for :func:`espew_integrations.models.resolve_embedder`
    (``"minilm"``, ``"module:attr"``...) or a zero-argument factory; the model is
    built once per actor. Triggers are matched on the model's own view of the
    text when it has one (the offline models do).
    """

    def __init__(
        self,
        embedder: str | Callable[[], Any] = "minilm",
        key_path: str | None = None,
        *,
        key_env: str | None = None,
        text_column: str = "text",
        embedding_column: str = "embedding",
    ):
        if isinstance(embedder, str):
            from .models import resolve_embedder

            model = resolve_embedder(embedder)[0]
        elif callable(embedder):
            model = embedder()
        else:
            raise InputTypeError(
                f"embedder must be a spec string or a zero-argument factory, got "
                f"{type(embedder).__name__}"
            )
        from .core.ground.text import discover_view

        super().__init__(
            key_path,
            key_env=key_env,
            text_column=text_column,
            embedding_column=embedding_column,
            view=discover_view(model),
        )
        self._model = model
        self._guard = ModelGuard(self._key, model)  # checked on the first batch

    def __call__(self, batch: Any) -> Any:
        self._guard.check()  # the key's model, or KeyModelMismatchError; then free
        texts = [str(t) for t in _column(batch, self.text_column)]
        clean = np.asarray(self._model(texts), dtype=np.float32)
        marked = watermark(texts, clean, self._key, view=self.view)
        return _with_column(batch, self.embedding_column, marked)


def _column(batch: Any, name: str) -> Any:
    try:
        return batch[name]
    except (KeyError, IndexError):
        columns = list(batch.keys()) if hasattr(batch, "keys") else []
        raise KeyError(f"the batch has no column {name!r} (columns: {columns})") from None


def _matrix(column: Any, name: str) -> np.ndarray:
    """A 2-D array from a tensor column or a column of equal-length 1-D arrays."""
    values = column.to_numpy() if hasattr(column, "to_numpy") else np.asarray(column)
    if values.dtype == object:
        lengths = {np.shape(v) for v in values}
        if len(lengths) > 1:
            raise InputError(f"column {name!r} holds embeddings of different shapes {lengths}")
        values = np.stack(list(values)) if len(values) else values
    return values


def _with_column(batch: Any, name: str, matrix: np.ndarray) -> Any:
    if hasattr(batch, "assign"):  # pandas: one array per row
        return batch.assign(**{name: list(matrix)})
    batch[name] = matrix
    return batch
