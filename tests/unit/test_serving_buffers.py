"""A serving process keeps its freed large buffers for reuse (glibc): a request of
2,048 x 1,536 values makes and frees about ten buffers of 12 to 17 MB, and glibc's
default gives each back to the kernel, so every request paid its pages' faults again."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

#: What one proxied request does with its buffers (an answer, its text, the matrix, the
#: marked rows made on a worker thread, the reply), 10 times after one warm-up; prints
#: the page faults they cost. With "keep", after keep_large_buffers().
PROGRAM = """
import resource, sys, threading
from espew_integrations.http.serving import keep_large_buffers
kept = keep_large_buffers() if sys.argv[1] == "keep" else None
def request():
    answer = b"x" * (17 * 2**20)
    text = answer.decode()
    rows = b"y" * (12 * 2**20)
    out = [None]
    def mark():
        out[0] = rows + b""
    worker = threading.Thread(target=mark)
    worker.start()
    worker.join()
    del answer, text
    reply = b"z" * (17 * 2**20)
    del rows, out, reply
request()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    request()
print(kept, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""

glibc = pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's; elsewhere nothing is set"
)


def faults(mode: str, **env: str) -> tuple[str, int]:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, mode],
        capture_output=True,
        text=True,
        check=True,
        env={**_environment(), **env},
    )
    kept, count = done.stdout.split()
    return kept, int(count)


def _environment() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}


@glibc
def test_freed_large_buffers_are_reused_without_new_page_faults():
    _, default = faults("default")
    kept, reused = faults("keep")
    assert kept == "True"
    # 10 requests of about 45 MB of fresh buffers each: the default faults on most of
    # their pages again every time, a kept heap on almost none
    assert default > 40_000, default
    assert reused < 2_000, reused


@glibc
def test_the_operators_malloc_settings_win():
    kept, _ = faults("keep", MALLOC_TRIM_THRESHOLD_="131072")
    assert kept == "False"
