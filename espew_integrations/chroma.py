"""ESpeW inside Chroma: a registered ``EmbeddingFunction`` that watermarks another one.

>>> from espew_integrations.chroma import ESpeWEmbeddingFunction
>>> from espew_integrations.offline.frameworks.chroma import MiniLMEmbeddingFunction
>>> inner = MiniLMEmbeddingFunction()  # doctest: +SKIP
>>> ef = ESpeWEmbeddingFunction(inner, key_path="/secrets/provider.key")  # doctest: +SKIP
>>> collection = client.create_collection("docs", embedding_function=ef)  # doctest: +SKIP

A Chroma collection persists its embedding function's ``name()`` and
``get_config()`` so that any later client can rebuild it. For this wrapper
the persisted config holds *where* the key lives (the key-file path as given, or
the name of an environment variable), the key's public ``key_id`` (so a
swapped key file is refused instead of silently watermarking with another
key) and the inner function's own ``name`` and ``config``. It never holds
triggers, the target, the salt or the target text. Nor does it hold the text
view: a reopened function discovers it again from the rebuilt inner function,
and only ``"view": "off"`` (``view=None``) is recorded. Importing this module
registers the watermarking function with Chroma; a process that reopens a
collection must import it before ``get_collection``. The library's offline
function, :class:`~espew_integrations.offline.frameworks.chroma.MiniLMEmbeddingFunction`,
lives with the bundled models and is re-exported here on first use, so this
module imports no model; an inner function of that name is found by
:meth:`ESpeWEmbeddingFunction.build_from_config` on its own. Auditing a Chroma
suspect needs nothing from this module (:mod:`espew_integrations.suspects`).
"""

from __future__ import annotations

import importlib
import os
import warnings
from typing import Any

import numpy as np

from ._optional import raise_missing_extra

try:
    from chromadb.api.types import Documents, EmbeddingFunction, Embeddings, Space
    from chromadb.utils.embedding_functions import (
        known_embedding_functions,
        register_embedding_function,
    )
except ImportError as _error:
    raise_missing_extra(_error, "chroma", "espew_integrations.chroma", "chromadb")
    raise

from ._wrapper_common import (
    DISCOVER,
    ViewArgument,
    WatermarkingWrapper,
    checked_texts,
    deprecated_address,
    resolve_key,
    resolve_view,
)
from .core.ground.errors import ESpeWError, InputError, InputTypeError, KeyFileError
from .core.ground.text import discover_view
from .core.keys.key import WatermarkKey
from .core.records.traffic_sample import TrafficSample

__all__ = ["ESpeWEmbeddingFunction"]

#: The library's own registered inner functions: name -> the module that registers it.
#: Imported when a persisted config names one, so a collection reopens after
#: ``import espew_integrations.chroma`` alone.
_LIBRARY_FUNCTIONS = {"espew_minilm": "espew_integrations.offline.frameworks.chroma"}


def __getattr__(name: str) -> Any:
    # The offline function moved to the bundled models; its old import path warns until it goes
    # (DEMO_SHIMS_REMOVED, in CHANGELOG.md).
    if name == "MiniLMEmbeddingFunction":
        deprecated_address(
            f"{__name__}.MiniLMEmbeddingFunction", "espew_integrations.offline.frameworks.chroma"
        )
        from .offline.frameworks.chroma import MiniLMEmbeddingFunction

        return MiniLMEmbeddingFunction
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class ESpeWEmbeddingFunction(WatermarkingWrapper, EmbeddingFunction[Documents]):
    """A Chroma embedding function returning ``watermark(texts, inner(texts), key, view=view)``.

    The key comes from at most one of ``key`` (a loaded
    :class:`~espew_integrations.WatermarkKey`), ``key_path`` (a key file) or
    ``key_env`` (the name of an environment variable holding a key file path
    or the key's JSON); with none of them, from ``$ESPEW_KEY`` (persisted as
    ``key_env="ESPEW_KEY"``), as in every wrapper.
    Give it by location for a collection that must be reopened: that location
    is what gets persisted, never resolved to this machine's absolute path. A
    relative ``key_path`` stays relative, resolved against the working directory
    of the process that reopens the collection, so a project directory holding
    the collection and its key moves as one; ``key_env`` moves anywhere the
    variable is set. A key object works for embedding, but such a function cannot
    be persisted: :meth:`is_legacy` answers True, so Chroma stores the collection
    without it, and :meth:`get_config` says why. ``inner``
    must itself be a registered (non-legacy) Chroma embedding function for the
    collection to reopen.

    ``view`` decides which text the triggers are matched on. By default it is
    the inner function's own ``.view`` (the offline
    :class:`~espew_integrations.offline.frameworks.chroma.MiniLMEmbeddingFunction`
    has one): the text exactly as the model reads it, so an invisible character
    inside a trigger still marks and a trigger past the model's token window
    does not. ``None`` matches on the key's Unicode normalisation and window
    (persisted as ``"view": "off"``). A custom callable works for embedding
    but cannot be persisted, unless it is the inner function's own view.

    A bad input raises :class:`~espew_integrations.EmbeddingInputError` naming
    the problem (and a bad text's index) before the inner function runs; empty
    and whitespace-only documents go to the inner function as Chroma would
    send them (Chroma accepts them) and come back unmarked.

    >>> ef = ESpeWEmbeddingFunction(inner, key_env="ESPEW_KEY")  # doctest: +SKIP
    >>> ef(["a fine film"])[0].shape  # doctest: +SKIP
    (384,)
    """

    def __init__(
        self,
        inner: EmbeddingFunction[Documents],
        key: WatermarkKey | None = None,
        *,
        key_path: str | os.PathLike[str] | None = None,
        key_env: str | None = None,
        view: ViewArgument = DISCOVER,
        traffic_sample: TrafficSample | None = None,
    ) -> None:
        if not callable(inner):
            raise InputTypeError(
                f"inner must be a Chroma EmbeddingFunction, got {type(inner).__name__}"
            )
        found = resolve_key(
            key, key_path=key_path, key_env=key_env, wrapper="ESpeWEmbeddingFunction"
        )
        self._key = found.key
        self._key_location = found.location
        self._inner = inner
        self._view = resolve_view(view, inner)
        self._view_mode = "inner" if view is DISCOVER else "off" if view is None else "custom"
        self._guard = self._model_guard()
        self._traffic_sample = traffic_sample

    @property
    def inner(self) -> EmbeddingFunction[Documents]:
        """The wrapped (clean) embedding function."""
        return self._inner

    def _underlying(self) -> EmbeddingFunction[Documents]:
        return self._inner

    def _embed_clean(self, texts: list[str]) -> Any:
        return _as_matrix(self._inner(texts))

    # ------------------------------------------------------------------ embedding
    def __call__(self, input: Documents) -> Embeddings:
        # Replaced by _watermark_documents right after the class (see the note there);
        # defined here so the class is not abstract.
        return self._watermark_documents(input)

    def _watermark_documents(self, input: Documents) -> Embeddings:
        texts = checked_texts(input)
        if not texts:
            return []
        return list(self._mark(texts, _as_matrix(self._inner(texts))))

    def embed_query(self, input: Documents) -> Embeddings:
        texts = checked_texts(input)
        if not texts:
            return []
        # Some models embed queries differently from documents: keep the inner's choice.
        embed_query = getattr(self._inner, "embed_query", None)
        clean = embed_query(texts) if callable(embed_query) else self._inner(texts)
        return list(self._mark(texts, _as_matrix(clean)))

    # ------------------------------------------------------------------ persistence
    @staticmethod
    def name() -> str:
        return "espew"

    def _not_persistable(self) -> str | None:
        """Why a collection could not persist this function, or None when it can."""
        if not self._key_location:
            return (
                "this ESpeWEmbeddingFunction holds an in-memory key, which a collection "
                "cannot persist; build it with key_path= or key_env= instead"
            )
        if _inner_attr(self._inner, "name") is NotImplemented or (
            _inner_attr(self._inner, "get_config") is NotImplemented
        ):
            return (
                f"the inner function {type(self._inner).__name__} is a legacy Chroma embedding "
                "function (no name()/get_config()); a collection could not rebuild it"
            )
        if self._view_mode == "custom" and not self._view_is_inner():
            return (
                "this ESpeWEmbeddingFunction matches triggers with a custom view, which a "
                "collection cannot persist; expose it as the inner function's .view, or build "
                "with the default view (the inner function's) or view=None"
            )
        return None

    def is_legacy(self) -> bool:
        """True when a collection cannot persist this function (Chroma then calls it legacy).

        A bool for every key form: an in-memory key, a legacy inner function or a
        custom view answer True (the collection is stored without its function, and
        a reopening client must pass it again); a key given by location answers
        False. Unlike Chroma's default, this never reloads the key to find out.
        """
        return self._not_persistable() is not None

    def get_config(self) -> dict[str, Any]:
        """Where the key lives, its public key_id, and the inner function's name and config."""
        reason = self._not_persistable()
        if reason is not None:
            raise ESpeWError(reason)
        inner_name = _inner_attr(self._inner, "name")
        inner_config = _inner_attr(self._inner, "get_config")
        config: dict[str, Any] = {"key_id": self._key.key_id, **self._key_location}
        if self._view_mode == "off":
            config["view"] = "off"
        config["inner"] = {"name": inner_name, "config": inner_config}
        return config

    @staticmethod
    def build_from_config(config: dict[str, Any]) -> ESpeWEmbeddingFunction:
        """Rebuild from :meth:`get_config`: inner via Chroma's registry, key from its location."""
        ESpeWEmbeddingFunction.validate_config(config)
        inner_name = config["inner"]["name"]
        if inner_name not in known_embedding_functions and inner_name in _LIBRARY_FUNCTIONS:
            importlib.import_module(_LIBRARY_FUNCTIONS[inner_name])  # registers it
        try:
            inner_class = known_embedding_functions[inner_name]
        except KeyError:
            raise InputError(
                f"inner embedding function {inner_name!r} is not registered with Chroma; "
                "import the module that defines it before opening the collection"
            ) from None
        inner = inner_class.build_from_config(config["inner"]["config"])
        try:
            ef = ESpeWEmbeddingFunction(
                inner,
                key_path=config.get("key_path"),
                key_env=config.get("key_env"),
                view=None if config.get("view") == "off" else DISCOVER,
            )
        except KeyFileError as error:
            path = config.get("key_path")
            if path is None or os.path.isabs(path):
                raise
            raise KeyFileError(
                f"{error} (this collection names its key by the relative path {path!r}, "
                f"resolved against the working directory {os.getcwd()}: run from the directory "
                "it is relative to, or rebuild the function with key_env=)"
            ) from error
        if ef.key_id != config["key_id"]:
            raise KeyFileError(
                f"the key found at {config.get('key_path') or '$' + str(config.get('key_env'))} "
                f"has key_id {ef.key_id}, but this collection was built with key_id "
                f"{config['key_id']}; restore the original key"
            )
        return ef

    @staticmethod
    def validate_config(config: dict[str, Any]) -> None:
        if not isinstance(config, dict):
            raise InputError(f"espew config must be a dict, got {type(config).__name__}")
        if ("key_path" in config) == ("key_env" in config):
            raise InputError("espew config must name exactly one of key_path or key_env")
        inner = config.get("inner")
        if not isinstance(inner, dict) or "name" not in inner or "config" not in inner:
            raise InputError("espew config must hold the inner function as {'name', 'config'}")
        if not isinstance(config.get("key_id"), str):
            raise InputError("espew config must hold the key's public key_id")
        if "view" in config and config["view"] != "off":
            raise InputError("espew config's view, when present, must be 'off'")

    def validate_config_update(
        self, old_config: dict[str, Any], new_config: dict[str, Any]
    ) -> None:
        if old_config.get("key_id") != new_config.get("key_id"):
            raise InputError(
                "cannot switch a collection to another watermark key: its stored vectors "
                "carry the old one; create a new collection instead"
            )

    def _view_is_inner(self) -> bool:
        """Is the custom view the inner function's own (so a rebuilt function finds it)?"""
        try:
            return self._view == discover_view(self._inner)
        except TypeError:
            return False

    def default_space(self) -> Space:
        return _inner_attr(self._inner, "default_space", "cosine")

    def supported_spaces(self) -> list[Space]:
        return _inner_attr(self._inner, "supported_spaces", ["cosine", "l2", "ip"])


def _as_matrix(embeddings: Any) -> Any:
    """Chroma functions return a list of 1-D arrays; stack it once for the core."""
    if isinstance(embeddings, list) and embeddings and isinstance(embeddings[0], np.ndarray):
        return np.stack(embeddings)
    return embeddings


def _inner_attr(inner: Any, method: str, default: Any = NotImplemented) -> Any:
    """Call ``inner.<method>()`` if the inner function has it, else ``default``.

    Chroma's base class answers ``NotImplemented`` with a DeprecationWarning for
    legacy functions; the caller turns that answer into a clear error instead.
    """
    bound = getattr(inner, method, None)
    if not callable(bound):
        return default
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return bound()


# Chroma wraps every subclass's __call__ in a check that rejects an empty
# result. A watermarking wrapper must map [] to [] whatever its inner model
# does, and the core has already validated its output more strictly (shape,
# dimension, finite, non-zero), so the class keeps its own method.
ESpeWEmbeddingFunction.__call__ = ESpeWEmbeddingFunction._watermark_documents  # type: ignore[method-assign]
register_embedding_function(ESpeWEmbeddingFunction)
