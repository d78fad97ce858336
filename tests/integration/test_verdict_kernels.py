"""The same verdicts under every BLAS kernel this CPU can run (issue 57).

OpenBLAS picks its kernel by the processor, and each kernel sums a matrix product
in its own order, so last bits differ between an AVX-512 machine and an AVX2 one.
A verdict must not: the snapshot of ``test_verdict_snapshot`` is measured again in
a fresh process per kernel (``OPENBLAS_CORETYPE``), and every p-value must match it
bit for bit. threadpoolctl, in the child, proves the kernel asked for is the one
that ran. Only kernels the CPU supports are asked for (an AVX-512 kernel on a CPU
without AVX-512 would stop on an illegal instruction, not test anything).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.integration.test_verdict_snapshot import SNAPSHOT

ROOT = Path(__file__).resolve().parents[2]
#: Each kernel, and the CPU flag it needs.
KERNELS = {"SkylakeX": "avx512f", "Haswell": "avx2", "Sandybridge": "avx"}

CHILD = """
import json, sys
import numpy
from threadpoolctl import threadpool_info
from tests.integration.test_verdict_snapshot import measure
kernels = [i.get("architecture") for i in threadpool_info() if i.get("internal_api") == "openblas"]
json.dump({"kernels": kernels, "p_values": measure()}, sys.stdout)
"""


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    return {flag for line in text.splitlines() if line.startswith("flags") for flag in line.split()}


def _numpy_uses_openblas() -> bool:
    from threadpoolctl import threadpool_info

    np.ones(1) @ np.ones(1)  # numpy's BLAS is loaded by now
    return any(info.get("internal_api") == "openblas" for info in threadpool_info())


@pytest.mark.parametrize("kernel", sorted(KERNELS))
def test_the_snapshot_holds_bit_for_bit_under_each_blas_kernel(kernel):
    if not _numpy_uses_openblas():
        pytest.skip("numpy here is not linked to OpenBLAS, so OPENBLAS_CORETYPE selects nothing")
    if KERNELS[kernel] not in _cpu_flags():
        pytest.skip(f"this CPU lacks {KERNELS[kernel]}, so it cannot run the {kernel} kernel")
    env = {**os.environ, "OPENBLAS_CORETYPE": kernel}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-c", CHILD], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    child = json.loads(done.stdout)
    assert [k.lower() for k in child["kernels"]] == [kernel.lower()], child["kernels"]
    expected = json.loads(SNAPSHOT.read_text())
    moved = {
        name: (float.fromhex(expected[name]), float.fromhex(got))
        for name, got in child["p_values"].items()
        if got != expected.get(name)
    }
    assert child["p_values"].keys() == expected.keys()
    assert not moved, f"p-values moved under {kernel} (snapshot, now): {moved}"


RECORD = """
import sys
from pathlib import Path
from espew_integrations import verify
from tests.integration.test_verdict_snapshot import _key, clean, noisy, served
out = Path(sys.argv[1])
for marking in ("words", "field", "map"):
    key = _key(marking, seed=11)
    key.save(out / f"{marking}.key")
    for name, suspect in {"copy": noisy(served(key)), "clean": clean}.items():
        report = verify(suspect, key, seed=1, transcript=out / f"{marking}-{name}")
        print(marking, name, report.status, report.p_value.hex())
"""


def _kernel_env(kernel: str) -> dict[str, str]:
    env = {**os.environ, "OPENBLAS_CORETYPE": kernel}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def _runnable_kernels() -> list[str]:
    if not _numpy_uses_openblas():
        return []
    flags = _cpu_flags()
    return [k for k in ("SkylakeX", "Haswell", "Sandybridge") if KERNELS[k] in flags]


def test_a_transcript_recorded_under_one_kernel_replays_under_the_others(tmp_path):
    """An arbiter replays on its own machine: ``espew evidence check`` must re-derive the
    recorded verdict and p-value whatever kernel recorded it and whatever kernel replays."""
    kernels = _runnable_kernels()
    if len(kernels) < 2:
        pytest.skip("fewer than two OpenBLAS kernels run on this CPU: nothing to compare")
    recorder, *replayers = kernels
    done = subprocess.run(
        [sys.executable, "-c", RECORD, str(tmp_path)],
        cwd=ROOT,
        env=_kernel_env(recorder),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    verdicts = [line.split() for line in done.stdout.splitlines()]
    assert {(m, n, s) for m, n, s, _ in verdicts} == {
        ("words", "copy", "copied"),
        ("words", "clean", "not_copied"),
        ("field", "copy", "copied"),
        ("field", "clean", "not_copied"),
        ("map", "copy", "copied"),
        ("map", "clean", "not_copied"),
    }
    espew = [sys.executable, "-m", "espew_integrations.cli"]
    for kernel in replayers:
        for marking, name, _, p_hex in verdicts:
            check = subprocess.run(
                [
                    *espew,
                    "evidence",
                    "check",
                    str(tmp_path / f"{marking}-{name}"),
                    "--key",
                    str(tmp_path / f"{marking}.key"),
                ],
                cwd=ROOT,
                env=_kernel_env(kernel),
                capture_output=True,
                text=True,
            )
            assert check.returncode == 0, (kernel, marking, name, check.stdout, check.stderr)
            assert "EVIDENCE HOLDS" in check.stdout
            assert f"p = {float.fromhex(p_hex):.6g}" in check.stdout
