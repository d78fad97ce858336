"""Optional dependencies: import one, or fail with the pip line that installs it.

The package's extras (``[http]``, ``[cli]``, ``[minilm]``...) each bring packages that
only some features import. A bare ``ModuleNotFoundError: No module named
'sklearn'`` tells a newcomer neither what needed it nor what to install, so every
optional import goes through :func:`require`, whose error names the purpose and
the extra.

>>> require("json", "http", "a doctest").__name__
'json'
>>> try:
...     require("no_such_module_xyz", "http", "the HTTP client")
... except MissingExtraError as exc:
...     print(exc)  # doctest: +NORMALIZE_WHITESPACE
no_such_module_xyz is needed for the HTTP client: pip install '.[http]' in a checkout
of espew-integrations; once published, pip install 'espew-integrations[http]'
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

from .core.ground.errors import MissingExtraError

__all__ = [
    "LAB_INSTALL",
    "ensure",
    "install_line",
    "missing",
    "raise_missing_extra",
    "require",
]

# An install line names no host: the project has no public address anyone has confirmed,
# so the line that works today is the one from the checkout the user holds, and the
# published form ends the line, ready for the day it is (tests/unit/test_install_hints.py).

#: How to get the robustness lab, a distribution of its own (espew-lab, ``lab/`` in the
#: checkout); espew_lab spells the same line in its own ``_optional``.
LAB_INSTALL = (
    "pip install ./lab in a checkout of espew-integrations; once published, pip install espew-lab"
)

#: The distribution name of an import name, where the two differ (what pip is told).
_DISTRIBUTIONS = {
    "sklearn": "scikit-learn",
    "yaml": "pyyaml",
    "langchain_core": "langchain-core",
    "llama_index": "llama-index-core",
    "prometheus_client": "prometheus-client",
}


def install_line(extra: str) -> str:
    """The one spelling of "install this extra", for every missing-extra message.

    The package is not on a package index yet, so the line a user can run today
    comes first (from the checkout), and the published form ends the line, ready
    for the day it is.

    >>> install_line("http").endswith("once published, pip install 'espew-integrations[http]'")
    True
    """
    return (
        f"pip install '.[{extra}]' in a checkout of espew-integrations; "
        f"once published, pip install 'espew-integrations[{extra}]'"
    )


def missing(module: str) -> bool:
    """True when ``module`` cannot be imported here (looked up, never imported: cheap)."""
    top = module.partition(".")[0]
    return importlib.util.find_spec(top) is None


def _error(top: str, extra: str, purpose: str) -> MissingExtraError:
    package = _DISTRIBUTIONS.get(top, top)
    return MissingExtraError(f"{package} is needed for {purpose}: {install_line(extra)}", name=top)


def ensure(module: str, extra: str, purpose: str) -> None:
    """A :class:`MissingExtraError` naming ``purpose`` and ``extra`` when ``module`` is
    absent; nothing is imported (a constructor checks its extra before any work)."""
    top = module.partition(".")[0]
    if missing(top):
        raise _error(top, extra, purpose)


def raise_missing_extra(error: ImportError, extra: str, purpose: str, *modules: str) -> None:
    """Raise a :class:`MissingExtraError` from ``error`` when it says one of ``modules``
    (top-level import names) is absent; return otherwise, for the caller to re-raise.

    For a module whose framework import sits at its top::

        try:
            from langchain_core.embeddings import Embeddings
        except ImportError as exc:
            raise_missing_extra(exc, "langchain", "the LangChain wrapper", "langchain_core")
            raise

    An installed framework that fails while importing (its own dependency broken)
    keeps its own error, which is the real problem to fix.
    """
    name = getattr(error, "name", None) or ""
    top = name.partition(".")[0]
    if isinstance(error, ModuleNotFoundError) and top in modules:
        raise _error(top, extra, purpose) from error


def require(module: str, extra: str, purpose: str) -> ModuleType:
    """``module`` imported, or a :class:`MissingExtraError` naming ``purpose`` and ``extra``.

    Only a module that is absent becomes this error; one that is installed but fails
    while importing raises its own error, which is the real problem to fix.
    """
    ensure(module, extra, purpose)
    return importlib.import_module(module)
