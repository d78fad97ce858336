"""The README's one-screen example runs verbatim and convicts the service itself (issue 9)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


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
