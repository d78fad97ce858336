"""Every error the library raises on purpose is an ESpeWError, and keeps its older base."""

from __future__ import annotations

import pytest

from espew_integrations import ESpeWError
from espew_integrations.http.upstream import UpstreamError
from espew_integrations.models import ModelSpecError
from espew_integrations.textfiles import TextFileError


@pytest.mark.parametrize(
    ("error", "older_base"),
    [(TextFileError, ValueError), (ModelSpecError, ValueError), (UpstreamError, Exception)],
)
def test_errors_defined_beside_their_code_join_the_family(error, older_base):
    assert issubclass(error, ESpeWError)
    assert issubclass(error, older_base)


# ---------------------------------------------------------------------- the AST scan
import ast  # noqa: E402
import builtins  # noqa: E402
import importlib  # noqa: E402
from pathlib import Path  # noqa: E402

PACKAGE = Path(__file__).resolve().parents[2] / "espew_integrations"

#: Raises of a class outside the family, (module, class) -> why it must stay outside.
#: Each entry must still occur (a stale entry fails), so the list only shrinks.
OUTSIDE_THE_FAMILY: dict[tuple[str, str], str] = {
    ("espew_integrations", "AttributeError"): "module __getattr__: Python's attribute protocol",
    ("espew_integrations.chroma", "AttributeError"): "module __getattr__: the attribute protocol",
    ("espew_integrations.langchain", "AttributeError"): "module __getattr__: the protocol",
    ("espew_integrations.llama_index", "AttributeError"): "module __getattr__: the protocol",
    (
        "espew_integrations.core.ground.progress",
        "AttributeError",
    ): "__getattr__ of a proxy: the protocol",
    ("espew_integrations._wrapper_common", "NotImplementedError"): "an abstract method's body",
    ("espew_integrations.core.evidence_check", "AssertionError"): "an unreachable branch",
    ("espew_integrations.core.keys.key_options", "KeyError"): "KeyOptions.default(name): a lookup "
    "by name, whose miss is a KeyError as a mapping's is",
    ("espew_integrations.ray", "KeyError"): "a Ray batch is a mapping of columns: a missing "
    "column is a KeyError, as Ray's own batches raise",
    ("espew_integrations.cli.common", "ArgumentTypeError"): "argparse's type protocol: a type "
    "function raises argparse.ArgumentTypeError for argparse to report",
    ("espew_integrations.cli.evidence", "ArgumentTypeError"): "argparse's type protocol",
    ("espew_integrations.http.client", "_TooLarge"): "private control flow, caught in its module",
    ("espew_integrations.http.client", "_TooSlow"): "private control flow, caught in its module",
    ("espew_integrations.http.middleware", "_Refused"): "private control flow, caught in its "
    "module",
}


def _modules() -> list[tuple[str, Path]]:
    """Every module of the package but the lab (moving to its own distribution) and the
    ``__main__`` entry points (importing one runs it)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if "lab" in parts or parts[-1] == "__main__":
            continue
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found.append((name, path))
    return found


def _raised_names(path: Path) -> set[str]:
    """The dotted name of every class raised by name in ``path`` (``raise X(...)``/``raise X``)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Raise) and node.exc is not None:
            raised = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(raised, ast.Name | ast.Attribute):
                names.add(ast.unparse(raised))
    return names


def _resolved(module: object, dotted: str) -> object:
    head, *rest = dotted.split(".")
    value = getattr(module, head, None) or getattr(builtins, head, None)
    for part in rest:
        value = getattr(value, part, None)
    return value


def _raised_outside() -> dict[tuple[str, str], str]:
    """Every class raised in the package that is not an ESpeWError: (module, class)."""
    outside = {}
    for name, path in _modules():
        try:
            module = importlib.import_module(name)
        except ImportError:  # an extra not installed: scan the names alone
            module = None
        for dotted in _raised_names(path):
            value = _resolved(module, dotted) if module else getattr(builtins, dotted, None)
            exception = isinstance(value, type) and issubclass(value, BaseException)
            if exception and not issubclass(value, ESpeWError):  # type: ignore[arg-type]
                outside[(name, dotted.rsplit(".", 1)[-1])] = dotted
    return outside


def test_every_class_raised_on_a_public_path_is_an_espew_error():
    outside = _raised_outside()
    unexplained = sorted(set(outside) - set(OUTSIDE_THE_FAMILY))
    assert not unexplained, (
        f"raises outside the ESpeWError family: {unexplained}; raise a class of "
        "espew_integrations/core/ground/errors.py (InputError, InputTypeError, OptionsError, "
        "StateError...), or list it in OUTSIDE_THE_FAMILY with the protocol that needs it"
    )
    stale = sorted(set(OUTSIDE_THE_FAMILY) - set(outside))
    assert not stale, f"OUTSIDE_THE_FAMILY lists raises that no longer occur: {stale}"


def test_every_public_exception_class_of_the_package_is_in_the_family():
    strays = []
    for name, _ in _modules():
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        for attribute, value in vars(module).items():
            if attribute.startswith("_") or not isinstance(value, type):
                continue
            if issubclass(value, BaseException) and not issubclass(value, Warning):
                if not value.__module__.startswith("espew_integrations"):
                    continue
                if not issubclass(value, ESpeWError):
                    strays.append(f"{value.__module__}.{value.__qualname__}")
    assert not strays, f"public exception classes outside ESpeWError: {sorted(set(strays))}"


def test_a_bad_audit_option_is_an_options_error_and_a_value_error():
    from espew_integrations import verify
    from espew_integrations.core.ground.errors import OptionsError

    with pytest.raises(OptionsError, match=r"level must be in \(0, 1\), got 2") as caught:
        verify(lambda texts: None, None, level=2)  # type: ignore[arg-type]
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, ESpeWError)
