"""Keep secrets out of what ``espew`` prints.

Nothing ``espew`` prints quotes the value of ``ESPEW_KEY`` or of any variable
named by ``--key env:VAR`` / ``--api-key-env``: such values are withheld from
every message and traceback, whole or in pieces.
"""

from __future__ import annotations

import argparse
import json
import os

from ..core.ground.defaults import DEFAULT_KEY_VARIABLE

__all__ = ["scrub", "secret_values"]

_FRAGMENT_CHARS = 16  # a quoted piece of a secret this long withholds the line


def secret_values(args: argparse.Namespace | None) -> dict[str, str]:
    """The environment values ``espew`` must never print: ESPEW_KEY and the named variables."""
    names = {DEFAULT_KEY_VARIABLE}
    if args is not None:
        key = getattr(args, "key", None)
        if isinstance(key, str) and key.startswith("env:"):
            names.add(key[4:] or DEFAULT_KEY_VARIABLE)
        for attribute in ("api_key_env", "upstream_api_key_env"):
            variable = getattr(args, attribute, None)
            if variable:
                names.add(variable)
    return {name: os.environ[name] for name in sorted(names) if os.environ.get(name)}


def scrub(text: str, secrets: dict[str, str]) -> str:
    """``text`` with every secret value withheld.

    A whole value (as is, stripped, or escaped as repr/JSON would) becomes
    ``<value of $VAR>``; then any run of text that copies 16 or more
    consecutive characters of a value (a truncated, re-indented or
    re-encoded copy, over several lines too) becomes ``<part of $VAR
    withheld>``.
    """
    for name, value in secrets.items():
        forms = {value, value.strip(), repr(value)[1:-1], json.dumps(value)[1:-1]}
        for form in sorted((f for f in forms if len(f) >= 4), key=len, reverse=True):
            text = text.replace(form, f"<value of ${name}>")
        text = _withhold_pieces(text, value, name)
    return text


def _withhold_pieces(text: str, value: str, name: str) -> str:
    size = _FRAGMENT_CHARS
    if len(text) < size or len(value) < size:
        return text
    pieces = set()
    for form in {value, repr(value)[1:-1], json.dumps(value)[1:-1]}:
        pieces.update(form[i : i + size] for i in range(len(form) - size + 1))
    spans: list[list[int]] = []
    for i in range(len(text) - size + 1):
        if text[i : i + size] in pieces:
            if spans and i <= spans[-1][1]:
                spans[-1][1] = i + size
            else:
                spans.append([i, i + size])
    if not spans:
        return text
    parts, last = [], 0
    for begin, end in spans:
        parts += [text[last:begin], f"<part of ${name} withheld>"]
        last = end
    parts.append(text[last:])
    return "".join(parts)
