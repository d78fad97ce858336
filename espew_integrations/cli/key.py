"""``espew key check``: re-check a key file and print its commitment."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .common import load_key

__all__ = ["register"]


def register(subparsers: Any) -> None:
    """Add ``key`` (with its ``check`` action) to the ``espew`` subcommands."""
    key_cmd = subparsers.add_parser(
        "key", help="inspect a key file: `espew key check KEY` re-checks it, prints its commitment"
    )
    key_actions = key_cmd.add_subparsers(dest="key_action", metavar="ACTION", required=True)
    check = key_actions.add_parser(
        "check",
        help="validate a key (checksum, key_id, trigger draw) and print its commitment; "
        "exit 0 if verifiable, 2 if not",
    )
    check.add_argument("key", help="key file path, or env:VAR")
    check.set_defaults(func=run_check)


def run_check(args: argparse.Namespace) -> int:
    """Re-check a key file and print its commitment (for an arbiter, or before publishing)."""
    key = load_key(args.key)
    if not key.verifiable:
        print(
            f"key {key.key_id}: UNVERIFIABLE: its triggers are not the draw its salt dictates "
            "(a version 1 key); it still watermarks, but no verdict can rest on it",
            file=sys.stderr,
        )
        print(key.commitment())
        return 2
    print(
        f"key {key.key_id}: OK (format valid, checksum and key_id match, triggers are the "
        f"salt's draw over {len(key.band)} band words, {len(key.probe_texts)} stored probes, "
        f"{len(key.cover_texts)} cover texts)"
    )
    print(key.commitment())
    return 0
