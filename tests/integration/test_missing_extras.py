"""Missing extras (issue 48): each wrapper and ``OpenAIEndpoint`` without its extra raises
the project's ``MissingExtraError`` naming the pip line, never a bare ModuleNotFoundError;
and a package missing on the auditor's side is never reported as the suspect's fault.

Each case runs in a fresh interpreter whose ``sys.modules`` marks the framework absent
(``sys.modules[name] = None`` makes its import fail as an uninstalled one does), so the
real import sites of the package are what is tested."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from espew_integrations import verify
from espew_integrations._optional import install_line
from espew_integrations.core.ground.errors import MissingExtraError
from tests.support import make_key

ROOT = Path(__file__).resolve().parents[2]

#: (what is imported or built, the modules marked absent, the extra its message names)
CASES = {
    "langchain": ("import espew_integrations.langchain", ["langchain_core"], "langchain"),
    "llama_index": ("import espew_integrations.llama_index", ["llama_index"], "llama-index"),
    "chroma": ("import espew_integrations.chroma", ["chromadb"], "chroma"),
    "OpenAIEndpoint": (
        "from espew_integrations import OpenAIEndpoint\n"
        "OpenAIEndpoint('http://127.0.0.1:9/v1', 'm')",
        ["httpx"],
        "http",
    ),
    # RFC 3161 timestamps: the anchor refuses before an audit starts, the parser on use
    "TimestampAnchor": (
        "from espew_integrations.timestamp import TimestampAnchor\n"
        "TimestampAnchor('http://127.0.0.1:9/tsr')",
        ["asn1crypto"],
        "evidence",
    ),
    "parse_token": (
        "from espew_integrations.timestamp import parse_token\nparse_token(b'0')",
        ["asn1crypto"],
        "evidence",
    ),
}

SCRIPT = """
import json, sys
results = {}
for name, (code, absent, _) in json.loads(sys.argv[1]).items():
    saved = {m: sys.modules.get(m) for m in absent}
    for module in absent:
        sys.modules[module] = None  # what an uninstalled package looks like to import
    try:
        exec(code, {})
        results[name] = ["no error", ""]
    except Exception as exc:
        from espew_integrations.core.ground.errors import MissingExtraError
        kind = "MissingExtraError" if isinstance(exc, MissingExtraError) else type(exc).__name__
        results[name] = [kind, str(exc)]
    finally:
        for module, value in saved.items():
            if value is None:
                del sys.modules[module]
            else:
                sys.modules[module] = value
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def outcomes() -> dict[str, list[str]]:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SCRIPT), json.dumps(CASES)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", sorted(CASES))
def test_without_its_extra_each_wrapper_and_the_endpoint_name_the_pip_line(outcomes, name):
    kind, message = outcomes[name]
    assert kind == "MissingExtraError", (kind, message)
    assert message.endswith(install_line(CASES[name][2])), message


def test_a_package_missing_on_the_auditors_side_is_not_blamed_on_the_suspect():
    """Before: verify(OpenAIEndpoint(...)) without httpx ended INCONCLUSIVE with 'the
    cause above is the suspect's' once per batch; a local import error is a local fault."""
    key = make_key(16, n_band=60, n_triggers=10)

    def needs_a_missing_package(texts: list[str]) -> np.ndarray:
        raise MissingExtraError(f"httpx is needed for OpenAIEndpoint: {install_line('http')}")

    with pytest.raises(MissingExtraError, match=r"pip install"):
        verify(needs_a_missing_package, key, batch_size=8)
