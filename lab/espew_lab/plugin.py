"""Mount the robustness lab's ``lab`` and ``tune`` commands on ``espew``.

espew-lab registers :func:`register` as the entry point ``lab`` of the group
``espew_integrations.cli_plugins`` (``lab/pyproject.toml``); the plugin's CLI
(:mod:`espew_integrations.cli`) calls it while it builds its parser. A broken
install that lacks one of the lab's own packages keeps the two commands out of
``espew --help``; typing one anyway fails at once with the exact ``pip install``
line, before any work.
"""

from __future__ import annotations

import argparse
import importlib.util
from typing import Any

from espew_integrations.cli.common import UsageError

from ._optional import LAB_INSTALL

__all__ = ["missing_lab_modules", "register"]

# Import name -> package, for what the lab needs beyond the core (espew-lab's
# dependencies, which bring the plugin's [minilm]).
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
    if not missing:
        from .cli import add_commands

        add_commands(subparsers)
        return
    for name in _COMMANDS:  # no help=: argparse leaves them out of `espew --help`
        # prefix_chars "+": every word after the command, flags included, is swallowed.
        command = subparsers.add_parser(name, add_help=False, prefix_chars="+")
        command.add_argument("rest", nargs="*")
        command.set_defaults(func=_lab_missing(name, missing))


def _lab_missing(name: str, missing: list[str]) -> Any:
    def run(args: argparse.Namespace) -> int:
        raise UsageError(
            f"`espew {name}` needs the robustness lab (missing: {', '.join(missing)}): "
            f"{LAB_INSTALL}"
        )

    return run
