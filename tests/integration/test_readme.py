"""The README's one-screen example runs verbatim and convicts the service itself (issue 9)."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def python_blocks(markdown: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", markdown, flags=re.DOTALL)


def test_the_one_screen_example_ends_copied_on_the_watermarked_service(tmp_path):
    code = python_blocks((ROOT / "README.md").read_text())[0]
    script = tmp_path / "one_screen.py"
    script.write_text(code)
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "verdict        : COPIED" in done.stdout, done.stdout
    assert "espew-commitment-v1 key_id=" in done.stdout
    assert sorted(p.name for p in (tmp_path / "evidence").iterdir()) == [
        "report.json",
        "summary.md",
    ]
    assert (tmp_path / "provider.key").stat().st_mode & 0o077 == 0


def test_readme_is_a_front_page():
    """At most 900 words: what it is for, the commands, one example, three figures."""
    words = len((ROOT / "README.md").read_text().split())
    assert words <= 900, f"README.md has {words} words"


def test_readme_opens_with_make_demo_and_make_test():
    first = re.search(r"```sh\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.DOTALL)
    commands = [line.split("#")[0].strip() for line in first.group(1).splitlines()]
    assert commands == ["make demo", "make test"]


def test_the_wheel_ships_the_license(tmp_path):
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = tmp_path.glob("espew_integrations-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        licenses = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
        assert licenses, names
        assert archive.read(licenses[0]) == (ROOT / "LICENSE").read_bytes()
        meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
        assert "License-Expression: Apache-2.0" in archive.read(meta).decode()
    assert "Apache License" in (ROOT / "LICENSE").read_text()
    assert "Version 2.0" in (ROOT / "LICENSE").read_text()
