"""Mount the robustness lab's ``lab`` and ``tune`` commands, or explain how to get them.

The lab lives in :mod:`espew_integrations.lab` and needs the ``[lab]`` extra.
Without it the two commands are not listed in ``espew --help``; typing one
anyway fails at once with the exact ``pip install`` line, before any work.
"""

from __future__ import annotations

import argparse
import importlib.util
from typing import Any

from ..models import install_line
from .common import UsageError

__all__ = ["LAB_INSTALL", "missing_lab_modules", "register"]

LAB_INSTALL = install_line("lab")
# Import name -> package, for what the lab needs beyond the core (the [lab] extra,
# which brings [minilm]).
_LAB_MODULES = {
    "sklearn": "scikit-learn",
    "matplotlib": "matplotlib",
    "yaml": "pyyaml",
    "tqdm": "tqdm",
    "onnxruntime": "onnxruntime",
    "tokenizers": "tokenizers",
}
_COMMANDS = ("lab", "tune")


def missing_lab_modules() -> list[str]:
    """The lab's packages that are not installed (looked up without importing them)."""
    return [
        package for name, package in _LAB_MODULES.items() if importlib.util.find_spec(name) is None
    ]


def register(subparsers: Any) -> None:
    """Add ``lab`` and ``tune``: the real ones, or hidden ones that name the install line."""
    missing = missing_lab_modules()
    add_commands = None if missing else _lab_add_commands()
    if add_commands is not None:
        add_commands(subparsers)
        return
    for name in _COMMANDS:  # no help=: argparse leaves them out of `espew --help`
        # prefix_chars "+": every word after the command, flags included, is swallowed.
        command = subparsers.add_parser(name, add_help=False, prefix_chars="+")
        command.add_argument("rest", nargs="*")
        command.set_defaults(func=_lab_missing(name, missing))


def _lab_add_commands() -> Any:
    try:
        from ..lab.cli import add_commands
    except ModuleNotFoundError as exc:
        if exc.name not in ("espew_integrations.lab.cli", "espew_integrations.lab"):
            raise
        return None
    return add_commands


def _lab_missing(name: str, missing: list[str]) -> Any:
    def run(args: argparse.Namespace) -> int:
        detail = f" (missing: {', '.join(missing)})" if missing else ""
        raise UsageError(f"`espew {name}` needs the robustness lab{detail}: {LAB_INSTALL}")

    return run
