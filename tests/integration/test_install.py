"""A fresh virtual environment follows the README's install lines and ends with `espew` (issue 48).

The README's lines run exactly as written, in a copy of this checkout (the folder
the README tells a user to run them in), in a new venv that holds nothing of this
project. Two things differ from a user's machine, both so that the test needs no
network and no minutes of downloads:

- the new venv sees the running environment's packages (a ``.pth`` line naming its
  site-packages), so pip finds every dependency already satisfied instead of
  downloading it. pip still resolves the project's requirements and extras against
  them, and fails if one is missing, since the package index is switched off;
- pip builds the project with the setuptools found there (no build isolation,
  which would download the build backend).

What is proved: the checkout builds and installs from the README's lines into an
environment of its own (metadata, the ``espew`` entry point, package data), and the
installed copy, not the checkout, answers ``espew --version`` and imports the
wrappers. A full install is the same lines without these two settings: a network,
and minutes of downloads, too slow for the suite.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# What a clone does not hold: build outputs, caches, the developer's own venv and git.
NOT_CLONED = shutil.ignore_patterns(
    ".git",
    ".venv",
    "build",
    "dist",
    "site",
    "*.egg-info",
    "__pycache__",
    ".pytest_cache",
    ".ruff_cache",
    ".hypothesis",
    ".benchmarks",
    "demo-output",
)


def present_packages_without_the_lab(mirror: Path) -> list[str]:
    """The running environment's packages, less espew-lab: one folder of links to them.

    ``make test`` installs espew-lab into the running environment; a fresh venv that
    saw it would have the lab before the test installs it.
    """
    mirror.mkdir()
    places = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    places += [p for p in sys.path if Path(p).name == "site-packages"]  # a .pth's too
    for place in dict.fromkeys(places):
        if not Path(place).is_dir():
            continue
        for entry in Path(place).iterdir():
            name = entry.name.lower().replace("-", "_")
            if "espew_lab" in name or (mirror / entry.name).exists():
                continue
            (mirror / entry.name).symlink_to(entry)
    return [str(mirror)]


def build_wheel(project: Path, out: Path) -> list[str]:
    """The files of ``project``'s wheel, built as pip builds it (no network, no isolation)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env |= {"PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1"}
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    done = subprocess.run(
        [*command, "--wheel-dir", str(out), str(project)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (wheel,) = out.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


def test_the_plugins_wheel_holds_no_lab_and_the_labs_wheel_holds_the_lab(tmp_path):
    checkout = tmp_path / "espew-integrations"
    shutil.copytree(ROOT, checkout, ignore=NOT_CLONED)
    plugin = build_wheel(checkout, tmp_path / "plugin")
    assert "espew_integrations/cli/plugins.py" in plugin
    assert "espew_integrations/core/verify.py" in plugin
    research = [n for n in plugin if "espew_lab" in n or n.startswith("espew_integrations/lab")]
    assert not research, research
    assert not [n for n in plugin if n.startswith(("lab/", "benchmarks/", "tests/"))]

    lab = build_wheel(checkout / "lab", tmp_path / "lab")
    for name in ("plugin.py", "runner.py", "stealers.py", "cli.py", "configs/smoke.yaml"):
        assert f"espew_lab/{name}" in lab
    assert not [n for n in lab if n.startswith("espew_integrations/")]
    (entry_points,) = [n for n in lab if n.endswith(".dist-info/entry_points.txt")]
    with zipfile.ZipFile(next((tmp_path / "lab").glob("*.whl"))) as archive:
        declared = archive.read(entry_points).decode()
    assert "[espew_integrations.cli_plugins]\nlab = espew_lab.plugin:register" in declared


def readme_install_lines() -> list[str]:
    """The commands of the README's install block (after ``## Install``), comments removed."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("\n## Install\n") :]
    block = re.search(r"```sh\n(.*?)```", section, flags=re.DOTALL)
    assert block, "the README's install section has a sh block"
    lines = [line.split("  #")[0].strip() for line in block.group(1).splitlines()]
    return [line for line in lines if line]


def test_the_readme_installs_from_the_checkout_and_names_the_published_form():
    """The lines run in the checkout the reader holds; no host is named (none is confirmed)."""
    lines = readme_install_lines()
    assert [line.split()[0] for line in lines] == ["pip", "espew", "pip"]
    assert all(line.startswith("pip install '.[") for line in lines if line.startswith("pip"))
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "Once published, the same extras will install from the package index:\n" in readme
    assert "`pip install 'espew-integrations[cli]'`" in readme
    assert "git clone" not in readme and "git+" not in readme


def test_a_fresh_venv_following_the_readme_runs_espew_and_imports_the_wrappers(tmp_path):
    checkout = tmp_path / "espew-integrations"
    shutil.copytree(ROOT, checkout, ignore=NOT_CLONED)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    present = present_packages_without_the_lab(tmp_path / "present")
    (Path(purelib) / "zz-present-packages.pth").write_text("\n".join(present) + "\n")

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("PIP_")}
    env |= {
        "PATH": f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        "VIRTUAL_ENV": str(venv),
        "PIP_CONFIG_FILE": os.devnull,  # not this machine's pip settings
        "PIP_NO_INDEX": "1",  # never download: a missing dependency fails the test
        "PIP_NO_BUILD_ISOLATION": "0",  # pip's spelling of --no-build-isolation
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }

    def run(command: list[str], cwd: Path, *, expect: int = 0) -> str:
        done = subprocess.run(
            command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300
        )
        shown = f"{command}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        assert done.returncode == expect, shown
        return done.stdout + done.stderr

    for line in readme_install_lines():  # run in `checkout`, a copy of the reader's checkout
        program, *arguments = shlex.split(line)
        # The venv has no pip of its own: `pip` is the present one, run by the venv's python.
        command = [python, "-m", "pip", *arguments] if program == "pip" else [program, *arguments]
        run(command, checkout)

    elsewhere = tmp_path / "elsewhere"  # not the checkout, so it is not on sys.path
    elsewhere.mkdir()
    version = re.search(r'^version = "(.+)"$', (ROOT / "pyproject.toml").read_text(), re.M)[1]
    assert run(["espew", "--version"], elsewhere).strip() == f"espew {version}"
    assert shutil.which("espew", path=env["PATH"]) == str(venv / "bin" / "espew")
    imported = run(
        [
            python,
            "-c",
            "import espew_integrations\n"
            "from espew_integrations.langchain import ESpeWEmbeddings\n"
            "from espew_integrations.llama_index import ESpeWEmbedding\n"
            "from espew_integrations.chroma import ESpeWEmbeddingFunction\n"
            "print(espew_integrations.__file__)",
        ],
        elsewhere,
    )
    assert Path(imported.strip()).is_relative_to(Path(purelib)), imported

    # The plugin alone: `espew lab` says how to get the lab and fails (exit 3, a usage error).
    told = run(["espew", "lab", "--help"], elsewhere, expect=3)
    assert "`espew lab` is a command of the robustness lab" in told
    assert "pip install ./lab in a checkout" in told and "pip install espew-lab" in told
    # With espew-lab installed from the checkout, its entry point mounts the real commands.
    run([python, "-m", "pip", "install", "./lab"], checkout)
    helped = run(["espew", "lab", "--help"], elsewhere)
    assert "--config" in helped and "--fresh" in helped
    assert "--alphas" in run(["espew", "tune", "--help"], elsewhere)
