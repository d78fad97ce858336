"""The one reader of text files: ``.txt``, ``.csv`` and ``.jsonl``, with optional labels.

``espew keygen --corpus``, ``espew embed --input`` and the lab's file corpora
all read through :func:`read_text_file`, so a file that works in one works in
all of them, and fails with the same message.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .core.ground.errors import ESpeWError, PathMissingError

__all__ = ["TEXT_FILE_SUFFIXES", "TextFile", "TextFileError", "read_text_file"]

#: What each suffix holds: one text per line, CSV rows, or one JSON value per line.
TEXT_FILE_SUFFIXES = {
    ".txt": "lines",
    ".text": "lines",
    ".csv": "csv",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
}


class TextFileError(ESpeWError, ValueError):
    """A text file that cannot be read as texts; the message says which line or column."""


@dataclass(frozen=True)
class TextFile:
    """The non-blank texts of a file, stripped, in file order; labels where a column gives them."""

    texts: list[str]
    labels: list[str] | None


def read_text_file(
    path: str | os.PathLike[str],
    *,
    text_field: str | None = None,
    label_field: str | None = None,
) -> TextFile:
    """Read texts (and labels) from a ``.txt``, ``.csv`` or ``.jsonl`` file.

    ``.txt``: one text per line, no labels. ``.csv``: the ``text_field``
    column (default ``text``; a one-column CSV needs no name). ``.jsonl``: per
    line an object with a ``text_field`` string, or a bare string. Labels come
    from ``label_field`` (default ``label`` when the file has that column).
    Blank texts are skipped (with their labels); a file with no text is an error.

    >>> read_text_file("reviews.csv", text_field="review").texts   # doctest: +SKIP
    """
    path = Path(path)
    if not path.is_file():
        raise PathMissingError(f"no such file: {path}")
    kind = TEXT_FILE_SUFFIXES.get(path.suffix.lower())
    if kind is None:
        raise TextFileError(
            f"{path}: unsupported file type {path.suffix!r}; "
            f"use one of {', '.join(sorted(TEXT_FILE_SUFFIXES))}"
        )
    with io.StringIO(_decoded(path), newline="") as handle:
        if kind == "lines":
            rows = [(line, None) for line in handle.read().splitlines()]
        elif kind == "csv":
            rows = _csv_rows(path, csv.DictReader(handle), text_field, label_field)
        else:
            rows = _jsonl_rows(path, handle, text_field or "text", label_field)
    kept = [(text.strip(), label) for text, label in rows if text and text.strip()]
    if not kept:
        raise TextFileError(f"{path} contains no texts")
    labelled = any(label is not None for _, label in kept)
    labels = [label or "" for _, label in kept] if labelled else None
    return TextFile([text for text, _ in kept], labels)


def _decoded(path: Path) -> str:
    """The file's text, read as UTF-8, or a :class:`TextFileError` naming the file, the
    encoding expected, where the first byte that is not UTF-8 lies, and how to convert."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise TextFileError(
            f"{path} is not UTF-8 text: byte 0x{data[exc.start]:02x} at line {line} "
            f"(offset {exc.start:,}) cannot be decoded as UTF-8, the encoding text files "
            f"must have; convert it, e.g. iconv -f latin1 -t utf-8 {path} > utf8-{path.name} "
            "(name the file's real encoding after -f)"
        ) from None


def _csv_rows(
    path: Path, reader: csv.DictReader, text_field: str | None, label_field: str | None
) -> list[tuple[str, str | None]]:
    fields = list(reader.fieldnames or [])
    name = text_field or ("text" if "text" in fields or len(fields) != 1 else fields[0])
    if name not in fields:
        raise TextFileError(
            f"{path} has no column {name!r}; its columns are {fields}. "
            "Name the text column (--text-column, or text_field in a lab config)."
        )
    label = label_field or ("label" if "label" in fields else None)
    if label is not None and label not in fields:
        raise TextFileError(f"{path} has no label column {label!r}; its columns are {fields}")
    return [
        (str(row[name] or ""), None if label is None else str(row[label] or "")) for row in reader
    ]


def _jsonl_rows(
    path: Path, lines: Iterable[str], text_field: str, label_field: str | None
) -> list[tuple[str, str | None]]:
    rows: list[tuple[str, str | None]] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item: Any = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TextFileError(f"{path}:{number} is not valid JSON: {exc.msg}") from None
        if isinstance(item, str):
            rows.append((item, None))
        elif isinstance(item, dict) and isinstance(item.get(text_field), str):
            label = label_field or ("label" if "label" in item else None)
            rows.append((item[text_field], None if label is None else str(item.get(label, ""))))
        else:
            raise TextFileError(f"{path}:{number} has no string field {text_field!r}")
    return rows
