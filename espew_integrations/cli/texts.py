"""Texts from a ``.txt``, ``.csv`` or ``.jsonl`` file."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

from .common import UsageError

__all__ = ["read_texts"]


def read_texts(path: str | os.PathLike[str], *, column: str | None = None) -> list[str]:
    """Texts from a ``.txt`` (one per line), ``.csv`` or ``.jsonl`` file.

    CSV and JSONL take the ``column`` field (default ``text``; a one-column CSV
    needs no name). Blank lines are skipped; an empty result is an error.

    >>> read_texts("reviews.csv", column="review")   # doctest: +SKIP
    """
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"no such file: {path}")
    suffix = path.suffix.lower()
    texts: list[str] = []
    with path.open(encoding="utf-8", newline="") as handle:
        if suffix == ".csv":
            reader = csv.DictReader(handle)
            fields = reader.fieldnames or []
            name = column or ("text" if "text" in fields or len(fields) != 1 else fields[0])
            if name not in fields:
                raise UsageError(
                    f"{path} has no column {name!r}; its columns are {fields}. "
                    "Pick one with --text-column."
                )
            texts = [str(row[name] or "") for row in reader]
        elif suffix in (".jsonl", ".ndjson"):
            name = column or "text"
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                try:
                    item = json.loads(line)
                except json.JSONDecodeError:
                    raise UsageError(f"{path}:{number} is not valid JSON") from None
                if isinstance(item, str):
                    texts.append(item)
                elif isinstance(item, dict) and isinstance(item.get(name), str):
                    texts.append(item[name])
                else:
                    raise UsageError(f"{path}:{number} has no string field {name!r}")
        else:
            texts = handle.read().splitlines()
    texts = [t.strip() for t in texts if t and t.strip()]
    if not texts:
        raise UsageError(f"{path} contains no texts")
    return texts
