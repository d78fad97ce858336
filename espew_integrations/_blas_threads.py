"""One BLAS thread for a map key's block products, where ``threadpoolctl`` is installed.

Why here and not in the core: the core imports nothing but numpy and scipy, and
``threadpoolctl`` is optional (the ``[http]`` extra brings it, for serving). The
package root imports this module, which installs the scope into the marking
(:func:`.core.mark.map.use_blas_scope`); without ``threadpoolctl`` nothing changes.
The marks are the same bits either way.
"""

from __future__ import annotations

import contextlib
from typing import Any

from .core.mark.map import use_blas_scope

__all__ = ["install"]


def install() -> bool:
    """Install the one-thread scope; False (nothing installed) without ``threadpoolctl``."""
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:
        return False
    controllers: list[Any] = []  # made on first use: BLAS is loaded by then

    def one_thread() -> contextlib.AbstractContextManager[Any]:
        if not controllers:
            controllers.append(ThreadpoolController())
        return controllers[0].limit(limits=1, user_api="blas")

    use_blas_scope(one_thread)
    return True


install()
