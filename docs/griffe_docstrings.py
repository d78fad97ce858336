"""A Griffe extension that lets the API reference render this project's reST-flavoured docstrings.

The docstrings are written for readers of the source and for ``help()``: doctest
examples (``>>> ...``) and Sphinx roles (``:func:`verify```). Markdown would show
the first as nested block quotes and the second verbatim. This extension, loaded
by mkdocstrings (see ``mkdocs.yml``), rewrites each docstring just for the site:

- a run of doctest lines (``>>>``, ``...`` and their output) becomes a fenced
  ``pycon`` code block, without ``# doctest:`` directives;
- a role such as ``:class:`~espew_integrations.core.keys.key.WatermarkKey``` becomes
  inline code (the last dotted name when the reST ``~`` asks for it);
- a paragraph ending in ``::`` (a reST literal block follows) ends in ``:``.

The source docstrings are not changed.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_DOCTEST_DIRECTIVE = re.compile(r"\s*#\s*doctest:.*$")
_ROLE = re.compile(r":(?:func|class|meth|mod|attr|data|obj|exc|const|ref):`(~?)([^`]+)`")


def _role_to_code(match: re.Match[str]) -> str:
    short, target = match.group(1), match.group(2)
    if short:
        target = target.rsplit(".", 1)[-1]
    return f"`{target}`"


def _fence_doctests(lines: list[str]) -> list[str]:
    out: list[str] = []
    in_block = False
    for line in lines:
        stripped = line.lstrip()
        if stripped.startswith(">>>"):
            if not in_block:
                if out and out[-1].strip():
                    out.append("")
                out.append("```pycon")
                in_block = True
            out.append(_DOCTEST_DIRECTIVE.sub("", stripped))
        elif in_block and stripped:
            out.append(stripped)
        else:
            if in_block:
                out.append("```")
                in_block = False
            out.append(line)
    if in_block:
        out.append("```")
    return out


def _literal_markers(lines: list[str]) -> list[str]:
    return [line[:-1] if line.rstrip().endswith("::") else line for line in lines]


def rewrite(text: str) -> str:
    """The docstring ``text`` as Markdown the site can render."""
    text = _ROLE.sub(_role_to_code, text)
    return "\n".join(_fence_doctests(_literal_markers(text.splitlines())))


class ReSTFlavouredDocstrings(griffe.Extension):
    """Rewrite every loaded object's docstring with :func:`rewrite`."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = rewrite(obj.docstring.value)
