"""Commands other distributions add to ``espew``, through entry points; the lab's stand-ins.

A distribution adds commands by declaring an entry point in the group
:data:`GROUP` whose object is a function of ``subparsers`` that adds its commands,
as each command module of :mod:`espew_integrations.cli` has one. The robustness lab is such
a distribution of its own (espew-lab, ``lab/`` in this repository): installed,
its ``lab`` and ``tune`` run as before. Without it the two are hidden commands
(not listed in ``espew --help``) that, typed anyway, flags and ``--help``
included, fail at once with the line that installs the lab and exit 3.

Entry points are read with :mod:`importlib.metadata` when the parser is built; a
plugin is imported only then, and one that fails to load does not take the
other commands down: its commands report the failure instead.
"""

from __future__ import annotations

import argparse
from functools import cache
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from .._optional import LAB_INSTALL
from .common import UsageError

__all__ = ["GROUP", "LAB_COMMANDS", "add_plugin_commands", "plugin_entry_points"]

#: The entry-point group a distribution declares its ``fn(subparsers)`` under.
GROUP = "espew_integrations.cli_plugins"
#: The commands of the lab's entry point (named ``lab``), stood in for when it is absent.
LAB_COMMANDS = ("lab", "tune")


@cache
def plugin_entry_points() -> tuple[EntryPoint, ...]:
    """The installed entry points of :data:`GROUP`, by name (a stable ``--help`` order).

    Read once per process: the scan reads every installed distribution's metadata, and
    a process that builds the parser many times (a test run) installs nothing between.
    """
    return tuple(sorted(entry_points(group=GROUP), key=lambda point: point.name))


def add_plugin_commands(subparsers: Any) -> None:
    """Let every installed plugin add its commands; stand in for the lab's where absent."""
    failed: dict[str, str] = {}
    for point in plugin_entry_points():
        try:
            point.load()(subparsers)
        except Exception as exc:  # a broken plugin must not break `espew verify`
            failed[point.name] = f"{type(exc).__name__}: {exc}"
    for name in LAB_COMMANDS:
        if name not in subparsers.choices:
            # No help=: argparse leaves it out of `espew --help`. prefix_chars "+": every
            # word after the command, flags included, is swallowed.
            command = subparsers.add_parser(name, add_help=False, prefix_chars="+")
            command.add_argument("rest", nargs="*")
            command.set_defaults(func=_lab_absent(name, failed.get("lab")))


def _lab_absent(name: str, failure: str | None) -> Any:
    def run(args: argparse.Namespace) -> int:
        if failure is not None:
            raise UsageError(
                f"`espew {name}` is a command of the robustness lab (espew-lab), which is "
                f"installed but failed to load ({failure}); reinstall it: {LAB_INSTALL}"
            )
        raise UsageError(
            f"`espew {name}` is a command of the robustness lab, a separate distribution "
            f"(espew-lab) that is not installed: {LAB_INSTALL}"
        )

    return run
