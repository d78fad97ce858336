"""ESpeW inside LlamaIndex: one line turns any ``BaseEmbedding`` into a watermarked one.

>>> from espew_integrations.llama_index import ESpeWEmbedding
>>> from espew_integrations.offline.frameworks.llama_index import MiniLMEmbedding
>>> embed_model = ESpeWEmbedding(MiniLMEmbedding(), key_path="provider.key")  # doctest: +SKIP
>>> Settings.embed_model = embed_model  # doctest: +SKIP

The wrapper calls the inner model's *private* batch methods
(``_get_text_embeddings`` and friends), not its public ones: LlamaIndex's
public methods fire instrumentation events and callbacks, so calling them
would report every embedding twice. The wrapper takes over the inner model's
``embed_batch_size``, ``callback_manager``, ``num_workers`` and
``rate_limiter``, so batching, handlers and throttling behave as before, with
one event per call. Its ``embeddings_cache`` is its own (it stores watermarked
vectors), never the inner model's (which would hold clean ones).

The key is a pydantic ``PrivateAttr``: it never appears in ``model_dump()``,
``to_json()``, ``repr()`` or instrumentation payloads. The wrapper pickles, and
round-trips through ``to_dict``/``from_dict``, by the key's *location* (the key
file path or the environment variable name it was given), never its content:
each process that unpickles it (``IngestionPipeline(num_workers=2)``'s workers)
loads the key from there. A wrapper given a key object in memory refuses to be
pickled rather than drop or leak it. Auditing a LlamaIndex suspect needs nothing
from this module (:mod:`espew_integrations.suspects`).

``MiniLMEmbedding``, the clean offline model of the examples, lives with the
bundled models (:mod:`espew_integrations.offline.frameworks.llama_index`); it is
re-exported here on first use, so importing this module imports no model.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

from ._optional import raise_missing_extra

try:
    from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding
    from llama_index.core.bridge.pydantic import PrivateAttr
except ImportError as _error:
    raise_missing_extra(_error, "llama-index", "espew_integrations.llama_index", "llama_index")
    raise

from ._wrapper_common import (
    DISCOVER,
    ViewArgument,
    WatermarkingWrapper,
    checked_text,
    checked_texts,
    deprecated_address,
    resolve_key,
    resolve_view,
)
from .core.ground.errors import ESpeWError, InputTypeError, KeyFileError
from .core.ground.text import TextView
from .core.keys.key import WatermarkKey
from .core.records.traffic_sample import TrafficSample

__all__ = ["ESpeWEmbedding"]

#: The library's own inner models: class_name() -> the module that defines it, imported
#: when a saved dict names one, so ``from_dict`` needs no import of it first.
_LIBRARY_MODELS = {"ESpeWMiniLMEmbedding": "espew_integrations.offline.frameworks.llama_index"}


def __getattr__(name: str) -> Any:
    # The offline demo model moved to the bundled models; its old import path warns until it goes
    # (DEMO_SHIMS_REMOVED, in CHANGELOG.md).
    if name == "MiniLMEmbedding":
        deprecated_address(
            f"{__name__}.MiniLMEmbedding", "espew_integrations.offline.frameworks.llama_index"
        )
        from .offline.frameworks.llama_index import MiniLMEmbedding

        return MiniLMEmbedding
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class ESpeWEmbedding(WatermarkingWrapper, BaseEmbedding):
    """A LlamaIndex ``BaseEmbedding`` that watermarks what ``embed_model`` returns.

    Query, text, batch and async paths all return
    ``watermark(texts, clean, key, view=view)``; a batch of texts is one inner
    batch call. ``model_name`` is the inner model's, so code that keys on it
    keeps working. A bad input raises
    :class:`~espew_integrations.EmbeddingInputError` naming the problem (and a
    bad text's index) before the inner model runs; empty and whitespace-only
    texts go to the inner model as LlamaIndex would send them (its contract
    allows them) and come back unmarked.

    The key comes from at most one of ``key`` (a loaded
    :class:`~espew_integrations.WatermarkKey`), ``key_path`` (a key file) or
    ``key_env`` (the name of an environment variable holding a key file path
    or the key's JSON); with none of them, from ``$ESPEW_KEY``, as every
    ``espew`` command reads it. Give it by location for a wrapper that crosses
    processes: pickling and ``to_dict`` carry that location (and the public
    key_id, checked when it is loaded again), never the key.

    ``view`` decides which text the triggers are matched on. By default it is
    the inner model's own ``.view`` (the offline
    :class:`~espew_integrations.offline.frameworks.llama_index.MiniLMEmbedding` passes on
    its encoder's): the text exactly as the model reads it, so an invisible
    character inside a trigger still marks and a trigger past the model's
    token window does not. Pass a callable ``list[str] -> list[str]`` for a
    model that does not expose one, or ``None`` to match on the key's Unicode
    normalisation and window. Like the key, it is a private attribute.

    >>> embed_model = ESpeWEmbedding(MiniLMEmbedding(), key_path="provider.key")  # doctest: +SKIP
    >>> index = VectorStoreIndex(nodes, embed_model=embed_model)  # doctest: +SKIP
    """

    _inner: BaseEmbedding = PrivateAttr()
    _key: WatermarkKey = PrivateAttr()
    _view: TextView | None = PrivateAttr(default=None)
    _guard: Any = PrivateAttr(default=None)
    _traffic_sample: Any = PrivateAttr(default=None)
    _key_location: dict[str, str] = PrivateAttr(default_factory=dict)
    _view_mode: str = PrivateAttr(default="inner")

    def __init__(
        self,
        embed_model: BaseEmbedding,
        key: WatermarkKey | None = None,
        *,
        key_path: str | os.PathLike[str] | None = None,
        key_env: str | None = None,
        view: ViewArgument = DISCOVER,
        traffic_sample: TrafficSample | None = None,
        **kwargs: Any,
    ) -> None:
        if not isinstance(embed_model, BaseEmbedding):
            raise InputTypeError(
                f"embed_model must be a LlamaIndex BaseEmbedding, got {type(embed_model).__name__}"
            )
        found = resolve_key(key, key_path=key_path, key_env=key_env, wrapper="ESpeWEmbedding")
        resolved_view = resolve_view(view, embed_model)
        for setting in _INHERITED_SETTINGS:
            kwargs.setdefault(setting, getattr(embed_model, setting))
        super().__init__(**kwargs)
        self._inner = embed_model
        self._key = found.key
        self._key_location = found.location
        self._view = resolved_view
        self._view_mode = "inner" if view is DISCOVER else "off" if view is None else "custom"
        self._guard = self._model_guard()
        self._traffic_sample = traffic_sample

    @classmethod
    def class_name(cls) -> str:
        return "ESpeWEmbedding"

    @property
    def embed_model(self) -> BaseEmbedding:
        """The wrapped (clean) model."""
        return self._inner

    def _underlying(self) -> BaseEmbedding:
        return self._inner

    def to_payload(self) -> dict[str, Any]:
        """Instrumentation payload: the base fields plus the inner class and the public key_id."""
        payload = super().to_payload()
        payload["inner_class_name"] = self._inner.class_name()
        payload["watermark_key_id"] = self._key.key_id
        return payload

    # ------------------------------------------------------------------ crossing processes
    def _settings(self) -> dict[str, Any]:
        """The public fields a rebuilt wrapper is given again (the inner model's by default)."""
        return {name: getattr(self, name) for name in _CARRIED_SETTINGS}

    def __getstate__(self) -> dict[str, Any]:
        # Never LlamaIndex's BaseComponent default, which silently drops what does not
        # pickle: for this wrapper that would be the key, leaving an object that fails
        # later. The key travels as its location and is loaded again on the other side.
        if not self._key_location:
            raise ESpeWError(
                "this ESpeWEmbedding holds an in-memory WatermarkKey, which is never pickled; "
                "build it with key_path='provider.key' (a key file) or key_env='ESPEW_KEY' (an "
                "environment variable) so that each process loads the key from there"
            )
        if self._traffic_sample is not None:
            raise ESpeWError(
                "this ESpeWEmbedding records a traffic sample, which belongs to one process and "
                "is not pickled; give each process its own wrapper and sample"
            )
        return {
            "embed_model": self._inner,
            "location": dict(self._key_location),
            "key_id": self._key.key_id,
            "view": self._view if self._view_mode == "custom" else self._view_mode,
            "settings": self._settings(),
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        view = state["view"]
        self.__init__(  # type: ignore[misc]
            state["embed_model"],
            **state["location"],
            view=DISCOVER if view == "inner" else None if view == "off" else view,
            **state["settings"],
        )
        _check_key_id(self, state["key_id"], state["location"])

    def to_dict(self, **kwargs: Any) -> dict[str, Any]:
        """The wrapper as a dict: its settings, the inner model's dict, the key's location.

        The key is named by where it lives (``key_path`` or ``key_env``) and by its
        public ``key_id``, never by its content. A wrapper built with a key object
        names no location: :meth:`from_dict` then needs ``key=``, ``key_path=`` or
        ``key_env=``. LlamaIndex's ingestion cache hashes this dict, so two keys
        never share cached vectors.
        """
        data = super().to_dict(**kwargs)
        data["embed_model"] = self._inner.to_dict()
        data["key_id"] = self._key.key_id
        data.update(self._key_location)
        if self._view_mode != "inner":
            data["view"] = self._view_mode
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any], **kwargs: Any) -> ESpeWEmbedding:  # type: ignore[override]
        """Rebuild from :meth:`to_dict`; ``kwargs`` replace its entries (``key_path=``...).

        The inner model is rebuilt by its LlamaIndex ``class_name`` from the classes
        imported in this process (or passed as ``embed_model=``); the key is loaded
        from its location and must have the saved ``key_id``.
        """
        data = {**data, **kwargs}
        data.pop("class_name", None)
        key_id = data.pop("key_id", None)
        inner = data.pop("embed_model", None)
        if isinstance(inner, dict):
            inner = _inner_from_dict(inner)
        if inner is None:
            raise ESpeWError("an ESpeWEmbedding dict must hold its embed_model")
        view_mode = data.pop("view", "inner")
        if "view" in kwargs:
            view = kwargs["view"]
        elif view_mode in ("inner", "off"):
            view = DISCOVER if view_mode == "inner" else None
        else:
            raise ESpeWError(
                "this ESpeWEmbedding matched triggers with a custom view, which a dict cannot "
                "hold; pass it again as from_dict(data, view=...)"
            )
        location = {name: data.pop(name) for name in ("key", "key_path", "key_env") if name in data}
        if not location:
            raise ESpeWError(
                "this dict names no key location (the wrapper held an in-memory key); pass "
                "key_path='provider.key' or key_env='ESPEW_KEY' to from_dict"
            )
        data.pop("embeddings_cache", None)  # its own cache: a rebuilt wrapper starts empty
        rebuilt = cls(inner, **location, view=view, **data)
        if key_id is not None:
            _check_key_id(rebuilt, key_id, location)
        return rebuilt

    # ------------------------------------------------------------------ sync paths
    def _get_query_embedding(self, query: str) -> Embedding:
        texts = checked_text(query, what="query")
        return self._rows(texts, [self._inner._get_query_embedding(query)])[0]

    def _get_text_embedding(self, text: str) -> Embedding:
        texts = checked_text(text)
        return self._rows(texts, [self._inner._get_text_embedding(text)])[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        texts = checked_texts(texts)
        if not texts:
            return []
        return self._rows(texts, self._inner._get_text_embeddings(texts))

    # ------------------------------------------------------------------ async paths
    async def _aget_query_embedding(self, query: str) -> Embedding:
        texts = checked_text(query, what="query")
        await self._guard.acheck(self._inner._aget_text_embeddings)
        return self._rows(texts, [await self._inner._aget_query_embedding(query)])[0]

    async def _aget_text_embedding(self, text: str) -> Embedding:
        texts = checked_text(text)
        await self._guard.acheck(self._inner._aget_text_embeddings)
        return self._rows(texts, [await self._inner._aget_text_embedding(text)])[0]

    async def _aget_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        texts = checked_texts(texts)
        if not texts:
            return []
        await self._guard.acheck(self._inner._aget_text_embeddings)
        return self._rows(texts, await self._inner._aget_text_embeddings(texts))

    def _embed_clean(self, texts: list[str]) -> Any:
        return self._inner._get_text_embeddings(texts)

    def _rows(self, texts: list[str], clean: Any) -> list[Embedding]:
        return self._mark(texts, clean).tolist()


def _check_key_id(wrapper: ESpeWEmbedding, key_id: str, location: dict[str, Any]) -> None:
    """Refuse a key other than the one saved: a swapped key file would mark with another key."""
    if wrapper.key_id != key_id:
        where = location.get("key_path") or f"${location.get('key_env')}"
        raise KeyFileError(
            f"the key found at {where} has key_id {wrapper.key_id}, but this ESpeWEmbedding "
            f"was saved with key_id {key_id}; restore the original key"
        )


def _inner_from_dict(data: dict[str, Any]) -> BaseEmbedding:
    """A LlamaIndex embedding model rebuilt from its ``to_dict``, found by its class_name.

    Only classes already imported in this process (and the library's own, imported
    here) are candidates: a dict never names a module to import.
    """
    name = data.get("class_name")
    if name in _LIBRARY_MODELS:
        importlib.import_module(_LIBRARY_MODELS[name])
    found = [cls for cls in _subclasses(BaseEmbedding) if _class_name(cls) == name]
    if not found:
        raise ESpeWError(
            f"no imported LlamaIndex embedding class is named {name!r}: import the module "
            "that defines it first, or pass the model as from_dict(data, embed_model=...)"
        )
    return found[0].from_dict(data)  # type: ignore[no-any-return]


def _subclasses(cls: type) -> list[type]:
    out, todo = [], [cls]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in out:
                out.append(sub)
                todo.append(sub)
    return out


def _class_name(cls: type) -> str | None:
    try:
        return cls.class_name()  # type: ignore[attr-defined, no-any-return]
    except Exception:  # an abstract or broken class names nothing
        return None


#: The public fields pickling carries (the rest are the inner model's or rebuilt).
_CARRIED_SETTINGS = ("model_name", "embed_batch_size", "num_workers")

#: Settings the wrapper takes over from the inner model, so batching, handlers
#: and throttling behave as before.
_INHERITED_SETTINGS = (
    "model_name",
    "embed_batch_size",
    "callback_manager",
    "num_workers",
    "rate_limiter",
)
