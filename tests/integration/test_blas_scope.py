"""A map key's batch runs its block products on one BLAS thread where threadpoolctl is
installed (``espew_integrations._blas_threads``, brought by the ``[http]`` extra), and
the process's own setting is back once the batch is marked."""

from __future__ import annotations

import contextlib

import numpy as np
from threadpoolctl import ThreadpoolController

import espew_integrations  # noqa: F401  (installs the scope)
from espew_integrations.core.mark import map as mark_map


def test_the_package_installs_one_blas_thread_around_a_batch():
    controller = ThreadpoolController()
    before = [lib["num_threads"] for lib in controller.select(user_api="blas").info()]
    assert before, "numpy's BLAS is loaded"
    scope = mark_map._SCOPE[0]
    assert scope is not contextlib.nullcontext
    seen = []
    with scope():
        np.ones((4, 4)) @ np.ones((4, 4))
        seen = [lib["num_threads"] for lib in controller.select(user_api="blas").info()]
    assert seen and all(n == 1 for n in seen)
    after = [lib["num_threads"] for lib in controller.select(user_api="blas").info()]
    assert after == before
