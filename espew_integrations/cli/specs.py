"""Embedder and suspect specs: ``minilm``, ``openai:<base_url>#<model>``, ``module:attr``."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .common import UsageError

__all__ = ["NAMED_EMBEDDERS", "resolve_embedder"]

NAMED_EMBEDDERS = ("minilm", "paraphrase-minilm-l3")


def _import_object(spec: str) -> Any:
    """The object named by ``module:attr`` / ``file.py:attr`` (``attr()`` calls it)."""
    target, _, attr = spec.rpartition(":")
    if not target or not attr:
        raise UsageError(f"spec {spec!r} is not of the form module:attr")
    call = attr.endswith("()")
    attr = attr[:-2] if call else attr
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)  # like `python -m`: local modules are importable
    if target.endswith(".py"):
        path = Path(target)
        if not path.is_file():
            raise UsageError(f"no Python file {path} (from spec {spec!r})")
        module_spec = importlib.util.spec_from_file_location(f"_espew_spec_{path.stem}", path)
        if module_spec is None or module_spec.loader is None:
            raise UsageError(f"cannot import {path}")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[module_spec.name] = module
        module_spec.loader.exec_module(module)
    else:
        try:
            module = importlib.import_module(target)
        except ModuleNotFoundError as exc:
            raise UsageError(f"cannot import module {target!r} from spec {spec!r}: {exc}") from None
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise UsageError(f"module {target!r} has no attribute {attr!r}") from None
    return obj() if call else obj


def _openai_endpoint(spec: str, options: dict[str, Any]) -> Any:
    from ..http.client import OpenAIEndpoint

    rest = spec[len("openai:") :]
    base_url, _, model = rest.partition("#")
    if not base_url or not model:
        raise UsageError(
            f"spec {spec!r} must be openai:<base_url>#<model>, "
            "e.g. openai:http://127.0.0.1:8000/v1#my-model"
        )
    options = dict(options)
    variable = options.pop("api_key_env", None)
    api_key = None
    if variable:
        api_key = os.environ.get(variable)
        if not api_key:
            raise UsageError(f"environment variable {variable} (--api-key-env) is not set")
    try:
        return OpenAIEndpoint(base_url, model, api_key, **options)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def resolve_embedder(
    spec: str, *, endpoint_options: dict[str, Any] | None = None
) -> tuple[Callable[[list[str]], Any], str]:
    """``(embed, name)`` for an embedder or suspect spec (see :mod:`espew_integrations.cli`).

    >>> embed, name = resolve_embedder("minilm")   # doctest: +SKIP
    >>> name
    'all-MiniLM-L6-v2-int8'
    """
    from ..suspects import as_suspect

    if spec in NAMED_EMBEDDERS:
        from .. import embedders

        model = embedders.minilm() if spec == "minilm" else embedders.paraphrase_minilm_l3()
        return model, model.name
    if spec.startswith("openai:"):
        endpoint = _openai_endpoint(spec, endpoint_options or {})
        return endpoint, endpoint.model
    if ":" not in spec:
        raise UsageError(
            f"unknown embedder {spec!r}: use one of {', '.join(NAMED_EMBEDDERS)}, "
            "openai:<base_url>#<model> or module:attr"
        )
    obj = _import_object(spec)
    name = str(getattr(obj, "name", "") or spec.rpartition(":")[2].rstrip("()"))
    if callable(obj) and not hasattr(obj, "embed_documents"):
        return obj, name  # keep the embedder's own dtype
    try:
        return as_suspect(obj), name
    except TypeError as exc:
        raise UsageError(f"{spec!r}: {exc}") from None
