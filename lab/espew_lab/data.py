"""Where the lab's texts and labels come from: bundled corpora, the user's files, or the Hub.

The default is always offline: the two corpora carried by PyPI packages
(:mod:`espew_integrations.offline.corpora`). A provider measures the watermark on ITS
data by pointing the lab at a ``.txt`` (one text per line, unlabelled), ``.csv``
or ``.jsonl`` file. Hugging Face datasets (``sst2``, ``ag_news``...) are an
opt-in for machines with a network and the ``datasets`` package; nothing here
ever downloads unless a config names ``hf:``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from espew_integrations.offline.corpora import Corpus, build_corpus, load_corpus
from espew_integrations.textfiles import read_text_file

__all__ = ["load_data", "load_file", "load_hf"]

#: Hub datasets whose text/label columns are known; others need text_field/label_field.
_HF_FIELDS = {
    "sst2": ("stanfordnlp/sst2", "sentence", "label"),
    "ag_news": ("fancyzhx/ag_news", "text", "label"),
    "enron_spam": ("SetFit/enron_spam", "text", "label"),
}


def load_data(spec: str | Mapping[str, Any], *, limit: int | None = None, seed: int = 0) -> Corpus:
    """Load the lab's corpus from a config entry, optionally a seeded subset of ``limit`` texts.

    ``spec`` is a bundled corpus name (``"rotten_tomatoes"``, ``"health_tweets"``),
    a file path, or a mapping with one of ``corpus``, ``path`` or ``hf`` (plus
    ``text_field``/``label_field``/``split`` where they apply).

    >>> load_data("rotten_tomatoes", limit=500).texts[:1]  # doctest: +SKIP
    ('... a film of quiet power ...',)
    """
    if isinstance(spec, str):
        spec = {"path": spec} if _looks_like_path(spec) else {"corpus": spec}
    if not isinstance(spec, Mapping):
        raise ValueError(f"data must be a corpus name, a path or a mapping, got {spec!r}")
    if "corpus" in spec:
        corpus = load_corpus(str(spec["corpus"]))
    elif "path" in spec:
        corpus = load_file(
            spec["path"], text_field=spec.get("text_field"), label_field=spec.get("label_field")
        )
    elif "hf" in spec:
        corpus = load_hf(
            str(spec["hf"]),
            split=str(spec.get("split", "train")),
            text_field=spec.get("text_field"),
            label_field=spec.get("label_field"),
        )
    else:
        raise ValueError(f"data needs one of 'corpus', 'path' or 'hf', got keys {sorted(spec)}")
    if len(corpus) == 0:
        raise ValueError(f"the corpus {corpus.name!r} has no texts")
    return corpus.subset(limit, seed=seed)


def _looks_like_path(value: str) -> bool:
    return value.endswith((".txt", ".csv", ".jsonl", ".json")) or "/" in value


def load_file(
    path: str | Path, *, text_field: str | None = None, label_field: str | None = None
) -> Corpus:
    """A corpus from a ``.txt``, ``.csv`` or ``.jsonl`` file, read by the library's one
    reader (:func:`espew_integrations.textfiles.read_text_file`).

    Unlabelled files give every text label 0; downstream accuracy is then
    skipped by the runner.

    >>> load_file("reviews.jsonl", label_field="stars")  # doctest: +SKIP
    """
    read = read_text_file(path, text_field=text_field, label_field=label_field)
    labels = read.labels if read.labels is not None else [""] * len(read.texts)
    return build_corpus(Path(path).stem, list(zip(read.texts, labels, strict=True)))


def load_hf(
    name: str,
    *,
    split: str = "train",
    text_field: str | None = None,
    label_field: str | None = None,
) -> Corpus:
    """A Hugging Face dataset (needs the ``datasets`` package and a network).

    >>> load_hf("sst2")  # doctest: +SKIP
    """
    try:
        import datasets
    except ModuleNotFoundError:
        raise ModuleNotFoundError(
            "Hugging Face datasets need `pip install datasets` and a network; the offline "
            "corpora (rotten_tomatoes, health_tweets) or a local file work without them"
        ) from None
    repo, default_text, default_label = _HF_FIELDS.get(name, (name, "text", "label"))
    table = datasets.load_dataset(repo, split=split)
    text_field = text_field or default_text
    label_field = label_field or default_label
    labels = table[label_field] if label_field in table.column_names else [""] * len(table)
    rows = [(str(t), str(label)) for t, label in zip(table[text_field], labels, strict=False)]
    return build_corpus(name, rows)
