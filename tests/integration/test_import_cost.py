"""Importing the package, or starting the CLI, loads no heavy library it does not use.

``scipy.stats`` alone took 1.4 s to import, and the package root imported it (and
``scipy.linalg``, ``scipy.fft``) through the rank test, so every ``espew`` command,
server start and ``import espew_integrations`` in a RAG app paid ~2 s before doing
anything. Those imports now happen where they are needed; this keeps it so.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("scipy", "sklearn", "torch", "chromadb", "langchain_core", "llama_index", "httpx")


@pytest.mark.parametrize("module", ["espew_integrations", "espew_integrations.cli"])
def test_import_loads_no_heavy_library(module):
    code = (
        f"import json, sys, {module}\n"
        f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []
