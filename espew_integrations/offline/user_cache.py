"""The user's cache directory for espew-integrations, by the platform's convention.

One place decides it, so the data wheels (:mod:`.data`) and the lab's embedding
cache (``espew_lab.cache``, the espew-lab distribution) agree. With platformdirs installed
(the ``[minilm]`` and ``[cli]`` extras, and espew-lab, bring it) the directory is the
platform's own: ``$XDG_CACHE_HOME/espew-integrations`` (``~/.cache/...`` when unset)
on Linux, ``~/Library/Caches/espew-integrations`` on macOS, ``%LOCALAPPDATA%`` on
Windows. The bare core does without the package and follows the XDG rule on every
platform. Each caller's own environment variable (``$ESPEW_DATA_DIR``,
``$ESPEW_CACHE_DIR``) still overrides this.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["APP_NAME", "user_cache_dir"]

#: The directory's name under the platform's cache root.
APP_NAME = "espew-integrations"


def user_cache_dir() -> Path:
    """The user's cache directory for this package (created by whoever writes to it)."""
    try:
        import platformdirs
    except ImportError:
        root = os.environ.get("XDG_CACHE_HOME") or ""
        base = Path(root) if os.path.isabs(root) else Path.home() / ".cache"
        return base / APP_NAME
    return Path(platformdirs.user_cache_dir(APP_NAME, appauthor=False))
