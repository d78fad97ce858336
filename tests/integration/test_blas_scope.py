"""A map key's batch runs its block products on one BLAS thread where threadpoolctl is
installed (``espew_integrations._blas_threads``, brought by the ``[http]`` extra), and
the process's own setting is back once the batch is marked."""

from __future__ import annotations

import contextlib

import numpy as np
from threadpoolctl import ThreadpoolController

import espew_integrations  # noqa: F401  (installs the scope)
from espew_integrations.core.mark import map as mark_map


def numpy_blas_threads(controller: ThreadpoolController) -> list[int]:
    """The thread counts of numpy's own BLAS, the one a batch's ``np.matmul`` calls (a
    BLAS another package loads later, such as scipy's, is not the marking's)."""
    libraries = controller.select(user_api="blas").info()
    return [lib["num_threads"] for lib in libraries if "numpy" in lib["filepath"]]


def test_the_package_installs_one_blas_thread_around_a_batch():
    controller = ThreadpoolController()
    before = numpy_blas_threads(controller)
    assert before, "numpy's BLAS is loaded"
    scope = mark_map._SCOPE[0]
    assert scope is not contextlib.nullcontext
    seen = []
    with scope():
        np.ones((4, 4)) @ np.ones((4, 4))
        seen = numpy_blas_threads(controller)
    assert seen and all(n == 1 for n in seen)
    assert numpy_blas_threads(controller) == before
