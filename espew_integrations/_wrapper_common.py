"""Private: what the LangChain, LlamaIndex and Chroma wrappers share. Imports no framework.

The three wrappers differ only in their framework's method names. Everything
else lives here once, so they cannot drift apart:

- **finding the key** (:func:`resolve_key`): at most one of ``key``,
  ``key_path`` or ``key_env``; with none, ``$ESPEW_KEY`` as every ``espew``
  command reads it (:mod:`.core.keys.key_source`), and a clear error naming the
  three when that is unset too;
- **checking texts** (:func:`checked_texts`, :func:`checked_text`) at the
  wrapper boundary, before the (possibly paid) inner model sees them, with one
  error type, :class:`~espew_integrations.core.ground.errors.EmbeddingInputError`;
- **the model's text view** (:func:`resolve_view`, with
  :func:`~espew_integrations.core.ground.text.discover_view`, which the server shares):
  triggers are matched on the text as the model reads it, so an edit the
  model's normaliser undoes (a soft hyphen inside a trigger) cannot dodge the
  mark, and a trigger past the model's token window, which the model never
  reads, does not mark;
- **the watermark itself and what a wrapper shows** (:class:`WatermarkingWrapper`):
  ``watermark(texts, clean, key, view=view)`` from the core, the public
  ``key_id``, and a repr that names the underlying model and the key_id, never
  the key.

The verifier's side (turning a framework object into a suspect) lives in
:mod:`espew_integrations.suspects`, not here.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal, TypeAlias

import numpy as np

from .core.ground.defaults import DEFAULT_KEY_VARIABLE
from .core.ground.errors import EmbeddingInputError, InputTypeError
from .core.ground.text import TextView, discover_view
from .core.keys.key import WatermarkKey
from .core.keys.key_source import find_key_source
from .core.keys.model_check import ModelGuard
from .core.mark.inject import check_texts, watermark
from .core.records.traffic_sample import TrafficSample

#: The day the wrappers' old addresses of the offline demo models stop answering
#: (``espew_integrations.langchain.MiniLMEmbeddings`` and the like; CHANGELOG.md).
DEMO_SHIMS_REMOVED = "2027-06-30"


def deprecated_address(old: str, new: str) -> None:
    """Warn that ``old`` is an old address of what ``new`` now holds, and until when."""
    import warnings

    warnings.warn(
        f"{old} is deprecated and stops working after {DEMO_SHIMS_REMOVED}; import it from {new}",
        DeprecationWarning,
        stacklevel=3,
    )


class _Discover(enum.Enum):
    """Type of :data:`DISCOVER` (an enum member, so type checkers can narrow on it)."""

    DISCOVER = "discover"

    def __repr__(self) -> str:
        return "DISCOVER"


#: Default ``view`` of every wrapper: take the inner model's own ``.view`` when it has one.
DISCOVER: Final = _Discover.DISCOVER

#: What a wrapper's ``view`` argument accepts.
ViewArgument: TypeAlias = TextView | Literal[_Discover.DISCOVER] | None


# ---------------------------------------------------------------------- the key
@dataclass(frozen=True, repr=False)
class WrapperKey:
    """The key a wrapper uses and, when it was given by location, that location.

    ``location`` is what a wrapper may persist or pickle instead of the key:
    ``{"key_path": <the path as given>}``, ``{"key_env": <variable name>}``, or
    ``{}`` for a key object given in memory (which is never persisted). A relative
    path stays relative, so a collection or a saved pipeline that moves with its key
    file still finds it; it is resolved against the working directory of the
    process that loads it. ``repr`` names the key_id only. (Where a key is looked for,
    before it is loaded, is :class:`~.core.keys.key_source.KeySource`'s.)
    """

    key: WatermarkKey
    location: dict[str, str]

    def __repr__(self) -> str:
        return f"WrapperKey(key_id={self.key.key_id!r}, location={self.location!r})"


def resolve_key(
    key: WatermarkKey | None,
    *,
    key_path: str | os.PathLike[str] | None = None,
    key_env: str | None = None,
    wrapper: str = "the wrapper",
) -> WrapperKey:
    """The key from at most one of a key object, a key file or an environment variable.

    One documented way for every wrapper: ``key=WatermarkKey.load(path)`` (in
    memory), ``key_path="provider.key"`` (the file is loaded and checked now)
    or ``key_env="VAR"`` (the variable holds a key file path or the key's
    JSON). With none of them, ``$ESPEW_KEY`` is read when it is set, as every
    ``espew`` command reads it (:mod:`.core.keys.key_source`: one rule for the key);
    two sources are refused rather than reconciled.

    >>> resolve_key(None, key_env="ESPEW_KEY")  # doctest: +SKIP
    WrapperKey(key_id='3f2a9c0e51b7d644', location={'key_env': 'ESPEW_KEY'})
    """
    sources = {"key": key, "key_path": key_path, "key_env": key_env}
    given = [name for name, value in sources.items() if value is not None]
    if len(given) > 1:
        raise InputTypeError(
            f"{wrapper} takes exactly one of key, key_path or key_env; got {given}"
        )
    if key is not None:
        if not isinstance(key, WatermarkKey):
            raise InputTypeError(
                f"key must be a WatermarkKey, got {type(key).__name__}; for a key file pass "
                "key_path=, for an environment variable key_env="
            )
        return WrapperKey(key, {})
    if key_env is not None and (not isinstance(key_env, str) or not key_env):
        raise InputTypeError(
            f"key_env must be the name of an environment variable, got {key_env!r}"
        )
    if key_path is not None:
        source = find_key_source(Path(key_path))
    else:
        source = find_key_source(None if key_env is None else f"env:{key_env}")
    if source is None:
        raise InputTypeError(
            f"{wrapper} needs a watermark key: pass one of key=WatermarkKey.load(path), "
            "key_path='provider.key' or key_env='VAR' (a variable holding a key file path or "
            f"the key's JSON), or set {DEFAULT_KEY_VARIABLE}"
        )
    return WrapperKey(source.load(), source.location)


# ---------------------------------------------------------------------- texts
def checked_texts(texts: Iterable[str], *, allow_empty: bool = True) -> list[str]:
    """``texts`` as a list, or an :class:`EmbeddingInputError` naming the problem.

    The one check of every wrapper, run before the inner model, so a bad input
    never costs an inner call. ``None``, a single string and a non-string entry
    (named by its index, never quoted) are refused; ``[]`` is a valid, empty
    batch. Any iterable is read exactly once (a generator gives its items).
    Empty and whitespace-only texts pass by default: none of LangChain,
    LlamaIndex or Chroma refuses them (LangChain's OpenAI model even embeds
    ``""``), so the inner model sees them as the bare model would, and
    ``watermark`` returns their rows unmarked. With ``allow_empty=False`` they
    are refused, naming the index.

    >>> checked_texts(t for t in ("a", "b"))
    ['a', 'b']
    """
    if texts is None:
        raise EmbeddingInputError("texts is None; pass a list of strings ([] embeds nothing)")
    return check_texts(texts, allow_empty=allow_empty)


def checked_text(text: str, *, what: str = "text") -> list[str]:
    """A single text (a query, say) as a one-item batch, or an :class:`EmbeddingInputError`.

    >>> checked_text("a fine film", what="query")
    ['a fine film']
    """
    if not isinstance(text, str):
        raise EmbeddingInputError(f"the {what} must be a str, got {type(text).__name__}")
    return [text]


# ---------------------------------------------------------------------- the model's view
def resolve_view(view: ViewArgument, embedder: Any) -> TextView | None:
    """The text view a wrapper passes to ``watermark``, from its ``view`` argument.

    :data:`DISCOVER` (every wrapper's default) asks ``embedder`` for its view
    (:func:`discover_view`); ``None`` matches on the key's own Unicode
    normalisation and token window; a callable is used as given.

    >>> resolve_view(None, object()) is None
    True
    """
    if view is DISCOVER:
        return discover_view(embedder)
    if view is None:
        return None
    if not callable(view):
        raise InputTypeError(
            f"view must be a callable list[str] -> list[str] (the texts as the model reads "
            f"them), None or DISCOVER, got {type(view).__name__}"
        )
    return view


# ---------------------------------------------------------------------- shared behaviour
class WatermarkingWrapper:
    """Mixin of the three wrappers: the mark, the public key_id, the view and the repr.

    A subclass sets ``self._key`` (a :class:`WatermarkKey`), ``self._view``
    and ``self._guard`` (:meth:`_model_guard`) in its constructor, names its
    wrapped model in :meth:`_underlying` and embeds with it in
    :meth:`_embed_clean`; the framework's base class comes second in the bases.
    """

    def _underlying(self) -> Any:
        raise NotImplementedError

    def _embed_clean(self, texts: list[str]) -> Any:
        """The wrapped model's embeddings of ``texts`` (the canaries of the model check)."""
        raise NotImplementedError

    def _model_guard(self) -> ModelGuard:
        """The one-shot check, on first use, that the wrapped model is the key's model."""
        return ModelGuard(self._key, self._embed_clean)  # type: ignore[attr-defined]

    @property
    def key_id(self) -> str:
        """Public fingerprint of the key in use (safe to log)."""
        return self._key.key_id  # type: ignore[attr-defined, no-any-return]

    @property
    def view(self) -> TextView | None:
        """The text view triggers are matched on (None: the key's normalisation and window)."""
        return self._view  # type: ignore[attr-defined, no-any-return]

    def _mark(self, texts: list[str], clean: Any) -> np.ndarray:
        """``watermark(texts, clean, key, view=view)``: the core validates ``clean``.

        The first call checks that the wrapped model is the one the key was made
        with (:class:`.core.keys.model_check.ModelGuard`: one model call on the public
        canary texts, then nothing per call) and raises KeyModelMismatchError if not.
        """
        self._guard.check()  # type: ignore[attr-defined]
        out = watermark(texts, clean, self._key, view=self._view)  # type: ignore[attr-defined]
        # Not a class attribute: on LlamaIndex's pydantic model a class default
        # here would shadow the instance's private attribute.
        sample = getattr(self, "_traffic_sample", None)
        if sample is not None:
            sample.record(texts)
            if sample.flush_due():
                sample.flush()
        return out

    @property
    def traffic_sample(self) -> TrafficSample | None:
        """The sample of texts this wrapper answered (``flush()`` it when you stop), or None."""
        return getattr(self, "_traffic_sample", None)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(underlying={describe_model(self._underlying())}, "
            f"key_id={self.key_id!r})"
        )

    def __str__(self) -> str:
        return repr(self)


_MODEL_NAME_ATTRIBUTES = ("model_name", "model")


def describe_model(model: Any) -> str:
    """``ClassName(model_name='...')``: enough to tell models apart, never their settings.

    Only the class and a short model-name string are shown. A model's own repr
    may hold secrets (LlamaIndex's OpenAI embedding keeps its API key in a plain
    field), so it is never used.

    >>> describe_model(object())
    'object'
    """
    for attribute in _MODEL_NAME_ATTRIBUTES:
        try:
            value = getattr(model, attribute, None)
        except Exception:  # a property that fails tells us nothing
            continue
        if isinstance(value, str) and 0 < len(value) <= 120 and value.isprintable():
            return f"{type(model).__name__}({attribute}={value!r})"
    return type(model).__name__
