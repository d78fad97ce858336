"""Find a data file inside an installed package without importing the package.

Why not import it: the data packages are installed without their (heavy,
unneeded) dependencies, so importing them would fail; only their files are read.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

__all__ = ["package_file"]


def package_file(distribution: str, relative: str, install_hint: str) -> Path:
    """Path of ``relative`` inside the installed package ``distribution``.

    Raises ``ModuleNotFoundError`` (package absent) or ``FileNotFoundError``
    (file absent), both ending with ``install_hint``.
    """
    spec = importlib.util.find_spec(distribution)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            f"package {distribution!r} is not installed: {install_hint}", name=distribution
        )
    for location in spec.submodule_search_locations:
        candidate = Path(location) / relative
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"{relative} is missing from package {distribution!r}: {install_hint}")
